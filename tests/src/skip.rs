//! Honest skips: a test that cannot have its environment here (root for
//! network namespaces, the test bed's process pods, a test bed's kubeconfig)
//! says so instead of passing in silence.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! if let Some(reason) = pontoon_tests::netns::unavailable() {
//!     return pontoon_tests::skip!("{reason}");
//! }
//! # Ok(()) }
//! ```
//!
//! Under `CI=true` a skip panics: CI is where the environment is promised,
//! so a missing one must fail the run rather than shrink it. Elsewhere it
//! appends `<test>: <reason>` to the file `PONTOON_TEST_SKIPS` names (which
//! scripts/test.sh creates, to count those tests as skipped, not passed) and
//! prints the line to stderr; the test then returns `Ok(())`.

use std::{
    fs::OpenOptions,
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::Context;

/// The environment variable naming the file skips are appended to.
pub const SKIPS_FILE_VAR: &str = "PONTOON_TEST_SKIPS";

/// Skips the enclosing test, for the reason given as `format!` arguments:
/// `return skip!("{reason}");`. Panics under `CI=true` (see the module).
#[macro_export]
macro_rules! skip {
    ($($reason:tt)+) => {
        $crate::skip::skip(&$crate::test_name!(), &::std::format!($($reason)+))
    };
}

/// The path of the enclosing function, e.g. `process_pods::a_failing_probe`
/// (async and closure bodies are named after the function they are in).
#[macro_export]
macro_rules! test_name {
    () => {{
        fn here() {}
        $crate::skip::function_path(::std::any::type_name_of_val(&here))
    }};
}

/// Records that `test` did not run its environment, for `reason`, as the
/// environment says: `CI` and [`SKIPS_FILE_VAR`] (see [`skip_with`]).
pub fn skip(test: &str, reason: &str) -> anyhow::Result<()> {
    let ci = std::env::var("CI").is_ok_and(|value| value == "true");
    let record = std::env::var_os(SKIPS_FILE_VAR)
        .filter(|path| !path.is_empty())
        .map(PathBuf::from);
    skip_with(ci, record.as_deref(), test, reason)
}

/// Panics when `ci` (the environment CI promised is missing); otherwise
/// appends `<test>: <reason>` to `record`, if given, and prints it to
/// stderr. An error if the line cannot be recorded: the test must not then
/// pass as if it had run.
pub fn skip_with(ci: bool, record: Option<&Path>, test: &str, reason: &str) -> anyhow::Result<()> {
    let line = skip_line(test, reason);
    if ci {
        panic!("CI=true promises this test's environment, but it is missing here: {line}");
    }
    if let Some(path) = record {
        // One write of the whole line to a file opened for appending: tests
        // of one binary run in parallel, and each binary appends too.
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut file| file.write_all(format!("{line}\n").as_bytes()))
            .with_context(|| format!("cannot record the skip in {}: {line}", path.display()))?;
    }
    eprintln!("skipped: {line}");
    Ok(())
}

/// `<test>: <reason>` on one line: scripts/test.sh counts lines.
fn skip_line(test: &str, reason: &str) -> String {
    let reason = reason.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("{test}: {reason}")
}

/// A function's path from the type name of a function item declared in it
/// (`a::b::{{closure}}::here` is `a::b`).
pub fn function_path(item: &str) -> String {
    let path = item.strip_suffix("::here").unwrap_or(item);
    path.split("::")
        .filter(|segment| *segment != "{{closure}}")
        .collect::<Vec<_>>()
        .join("::")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file in the temporary directory, removed when dropped.
    struct ScratchFile(PathBuf);

    impl ScratchFile {
        fn new() -> Self {
            let name = format!("pontoon-skips-{:016x}", rand::random::<u64>());
            Self(std::env::temp_dir().join(name))
        }

        fn lines(&self) -> Vec<String> {
            std::fs::read_to_string(&self.0)
                .unwrap()
                .lines()
                .map(String::from)
                .collect()
        }
    }

    impl Drop for ScratchFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    #[should_panic(
        expected = "CI=true promises this test's environment, but it is missing here: traffic::t: not root"
    )]
    fn under_ci_a_skip_fails_the_test() {
        let _ = skip_with(true, None, "traffic::t", "not root");
    }

    #[test]
    fn under_ci_a_skip_records_nothing() {
        let file = ScratchFile::new();
        let path = file.0.clone();
        let outcome = std::panic::catch_unwind(|| skip_with(true, Some(&path), "a::t", "why"));
        assert!(outcome.is_err(), "a skip under CI returned");
        assert!(!file.0.exists(), "a skip under CI was recorded as a skip");
    }

    #[test]
    fn a_skip_appends_one_line_per_test_to_the_record() {
        let file = ScratchFile::new();
        std::fs::write(&file.0, "earlier::t: kept\n").unwrap();
        skip_with(false, Some(&file.0), "traffic::a", "not root").unwrap();
        skip_with(
            false,
            Some(&file.0),
            "process_pods::b",
            "no process pods\n  (up.sh)",
        )
        .unwrap();
        assert_eq!(
            file.lines(),
            [
                "earlier::t: kept",
                "traffic::a: not root",
                "process_pods::b: no process pods (up.sh)"
            ]
        );
    }

    #[test]
    fn parallel_skips_each_leave_a_whole_line() {
        let file = ScratchFile::new();
        let threads: Vec<_> = (0..8)
            .map(|thread| {
                let path = file.0.clone();
                std::thread::spawn(move || {
                    for test in 0..50 {
                        let reason = format!("reason {}", "x".repeat(200));
                        skip_with(false, Some(&path), &format!("t{thread}_{test}"), &reason)
                            .unwrap();
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let lines = file.lines();
        assert_eq!(lines.len(), 400);
        let expected_tail = format!(": reason {}", "x".repeat(200));
        assert!(lines.iter().all(|line| line.ends_with(&expected_tail)));
        let mut tests: Vec<_> = lines.iter().map(|l| l.split(':').next()).collect();
        tests.sort();
        tests.dedup();
        assert_eq!(tests.len(), 400, "a line was lost or written twice");
    }

    #[test]
    fn without_a_record_a_skip_only_returns() {
        assert!(skip_with(false, None, "a::t", "why").is_ok());
    }

    #[test]
    fn a_skip_that_cannot_be_recorded_fails() {
        let dir =
            std::env::temp_dir().join(format!("pontoon-no-dir-{:016x}", rand::random::<u64>()));
        let err = skip_with(false, Some(&dir.join("skips")), "a::t", "why").unwrap_err();
        assert!(
            format!("{err:#}").contains("cannot record the skip"),
            "{err:#}"
        );
    }

    #[test]
    fn names_the_enclosing_test() {
        assert_eq!(
            crate::test_name!(),
            "pontoon_tests::skip::tests::names_the_enclosing_test"
        );
        let in_closure = || crate::test_name!();
        assert_eq!(
            in_closure(),
            "pontoon_tests::skip::tests::names_the_enclosing_test"
        );
        assert_eq!(
            function_path("process_pods::a_test::{{closure}}::here"),
            "process_pods::a_test"
        );
    }

    #[tokio::test]
    async fn names_the_enclosing_async_test() {
        assert_eq!(
            crate::test_name!(),
            "pontoon_tests::skip::tests::names_the_enclosing_async_test"
        );
    }
}
