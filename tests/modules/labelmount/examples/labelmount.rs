//! `labelmount` as its author meant it: keeps the contract.

labelmount::export_variant!("labelmount", labelmount::Flaw::Nothing);
