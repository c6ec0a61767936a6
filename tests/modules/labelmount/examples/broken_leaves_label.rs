//! `labelmount` with flaw `LeavesLabel` (see the crate's `Flaw`).

labelmount::export_variant!("broken-leaves-label", labelmount::Flaw::LeavesLabel);
