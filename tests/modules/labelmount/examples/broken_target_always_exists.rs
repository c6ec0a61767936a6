//! `labelmount` with flaw `TargetAlwaysExists` (see the crate's `Flaw`).

labelmount::export_variant!(
    "broken-target-always-exists",
    labelmount::Flaw::TargetAlwaysExists
);
