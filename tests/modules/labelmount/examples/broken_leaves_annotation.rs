//! `labelmount` with flaw `LeavesAnnotation` (see the crate's `Flaw`).

labelmount::export_variant!(
    "broken-leaves-annotation",
    labelmount::Flaw::LeavesAnnotation
);
