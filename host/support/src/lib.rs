//! What every Pontoon controller shares and none owns: the metrics registry,
//! the health endpoint, status conditions, how API failures are told apart,
//! and the chaos kill points.

pub mod chaos;
pub mod conditions;
pub mod controller_support;
pub mod health;
pub mod metrics;
