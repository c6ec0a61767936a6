//! The data plane as pure output: the model judgement hands down, the
//! Praxis config generated from it, the child objects that run it, which
//! of them to write and in what order, and whose an object of their names
//! is.

pub mod apply_plan;
pub mod certificates;
pub mod children;
pub mod config;
pub mod loopback;
pub mod model;
pub mod ownership;
pub mod program;
