//! `labelmount` for Deployment targets only: declines the others in `validate`.

labelmount::export_variant!(
    "labelmount-deployments-only",
    labelmount::Flaw::DeploymentsOnly
);
