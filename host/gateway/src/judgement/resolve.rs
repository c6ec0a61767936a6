//! From Gateway API objects to what the data plane needs and what status
//! says: pure functions over a [`view::ClusterView`], shared by the Gateway
//! and route controllers so both judge a route the same way.

pub mod attach;
pub mod backend_filters;
pub mod backend_tls;
pub mod backends;
pub mod ca_bundles;
pub mod durations;
pub mod grants;
pub mod hostnames;
pub mod issue;
pub mod label_selector;
pub mod listener_sets;
pub mod listeners;
pub mod matches;
pub mod mirrors;
pub mod retries;
pub mod view;
