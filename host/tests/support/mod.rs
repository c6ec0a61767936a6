//! Shared by the test binaries of this directory; each uses a part of it.
#![allow(dead_code)]

pub mod carrier2;
pub mod mounts;
pub mod tenants;
