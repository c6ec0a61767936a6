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

/// The checks of a run, in the order they ran, each reported as it
/// completes (so that progress is visible).
pub(super) struct Recorder {
    checks: Vec<Check>,
    report: Box<dyn FnMut(&Check) + Send>,
}

impl Recorder {
    pub(super) fn new(report: Box<dyn FnMut(&Check) + Send>) -> Self {
        Self {
            checks: Vec::new(),
            report,
        }
    }

    /// Records a check that ran; whether it passed.
    pub(super) fn record(&mut self, name: &str, result: Result<(), String>) -> bool {
        let ok = result.is_ok();
        self.push(Check {
            name: name.into(),
            result,
            skipped: None,
        });
        ok
    }

    /// Records `names` as not run, for the reason `why`.
    pub(super) fn skip(&mut self, names: &[&str], why: &str) {
        for name in names {
            self.push(Check {
                name: (*name).into(),
                result: Ok(()),
                skipped: Some(why.into()),
            });
        }
    }

    fn push(&mut self, check: Check) {
        (self.report)(&check);
        self.checks.push(check);
    }

    pub(super) fn into_checks(self) -> Vec<Check> {
        self.checks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(result: Result<(), String>, skipped: Option<&str>) -> Check {
        Check {
            name: "install completes".into(),
            result,
            skipped: skipped.map(Into::into),
        }
    }

    #[test]
    fn a_check_prints_one_pass_fail_or_skip_line() {
        assert_eq!(check(Ok(()), None).to_string(), "PASS  install completes");
        assert_eq!(
            check(Err("install did not complete within 60s".into()), None).to_string(),
            "FAIL  install completes: install did not complete within 60s"
        );
        assert_eq!(
            check(Ok(()), Some("`prepare completes` failed")).to_string(),
            "SKIP  install completes: `prepare completes` failed"
        );
    }

    #[test]
    fn a_skipped_check_is_neither_passed_nor_failed() {
        let passed = check(Ok(()), None);
        assert!(passed.passed() && !passed.failed());
        let failed = check(Err("no".into()), None);
        assert!(!failed.passed() && failed.failed());
        for skipped in [
            check(Ok(()), Some("why")),
            check(Err("no".into()), Some("why")),
        ] {
            assert!(!skipped.passed() && !skipped.failed());
        }
    }
}
