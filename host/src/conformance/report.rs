//! What a check says: its name and verdict, printed as the `PASS`, `FAIL`
//! or `SKIP` line a provider's author reads.

use std::fmt;

/// The outcome of one check.
pub struct Check {
    pub name: String,
    pub result: Result<(), String>,
    /// Not run, because an earlier check it needs failed (why); counted
    /// apart, so that the total never shrinks.
    pub skipped: Option<String>,
}

impl Check {
    pub fn passed(&self) -> bool {
        self.skipped.is_none() && self.result.is_ok()
    }

    pub fn failed(&self) -> bool {
        self.skipped.is_none() && self.result.is_err()
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.skipped, &self.result) {
            (Some(why), _) => write!(f, "SKIP  {}: {why}", self.name),
            (None, Ok(())) => write!(f, "PASS  {}", self.name),
            (None, Err(why)) => write!(f, "FAIL  {}: {why}", self.name),
        }
    }
}
