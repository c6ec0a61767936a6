//! `labelmount` with flaw `ScopeTooNarrow` (see the crate's `Flaw`).

labelmount::export_variant!("broken-scope-too-narrow", labelmount::Flaw::ScopeTooNarrow);
