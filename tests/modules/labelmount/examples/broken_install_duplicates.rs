//! `labelmount` with flaw `InstallDuplicates` (see the crate's `Flaw`).

labelmount::export_variant!(
    "broken-install-duplicates",
    labelmount::Flaw::InstallDuplicates
);
