//! The vocabulary every judgement of `resolve/` reports in.

/// Why a condition is not what a user hopes: its reason and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    pub reason: &'static str,
    pub message: String,
}

impl Issue {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}
