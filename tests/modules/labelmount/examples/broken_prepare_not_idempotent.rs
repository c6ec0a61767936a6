//! `labelmount` with flaw `PrepareNotIdempotent` (see the crate's `Flaw`).

labelmount::export_variant!(
    "broken-prepare-not-idempotent",
    labelmount::Flaw::PrepareNotIdempotent
);
