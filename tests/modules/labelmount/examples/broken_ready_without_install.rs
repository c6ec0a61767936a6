//! `labelmount` with flaw `ReadyWithoutInstall` (see the crate's `Flaw`).

labelmount::export_variant!(
    "broken-ready-without-install",
    labelmount::Flaw::ReadyWithoutInstall
);
