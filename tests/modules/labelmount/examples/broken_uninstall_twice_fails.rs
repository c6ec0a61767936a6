//! `labelmount` with flaw `UninstallTwiceFails` (see the crate's `Flaw`).

labelmount::export_variant!(
    "broken-uninstall-twice-fails",
    labelmount::Flaw::UninstallTwiceFails
);
