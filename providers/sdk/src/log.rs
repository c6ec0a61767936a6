//! Logging into the operator's log through the `log` import; the host tags
//! each line with the module and the mount.
//!
//! Prefer the macros ([`info!`](crate::info) and friends): they format only
//! when the host would write the line.

#[cfg(any(feature = "bridge-mount", test))]
use crate::bridge_mount::bindings::pontoon::provider::log as imports;
#[cfg(all(
    feature = "config-filter",
    not(any(feature = "bridge-mount", feature = "connection", test))
))]
use crate::config_filter::bindings::pontoon::provider::log as imports;
#[cfg(all(feature = "connection", not(any(feature = "bridge-mount", test))))]
use crate::connection::bindings::pontoon::provider::log as imports;

/// Severity of a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

// Both worlds generate their own (identical) `level` type and import the same
// `pontoon:provider/log` functions; this crate-level enum hides which one.
impl From<Level> for imports::Level {
    fn from(level: Level) -> Self {
        match level {
            Level::Trace => Self::Trace,
            Level::Debug => Self::Debug,
            Level::Info => Self::Info,
            Level::Warn => Self::Warn,
            Level::Error => Self::Error,
        }
    }
}

/// Whether a line at `level` would be written.
pub fn enabled(level: Level) -> bool {
    imports::enabled(level.into())
}

/// Writes `message` at `level` (the host drops it if the level is disabled).
pub fn log(level: Level, message: &str) {
    imports::log(level.into(), message);
}

/// Used by the macros: asks the host first so disabled lines cost no formatting.
#[doc(hidden)]
pub fn __log_args(level: Level, args: std::fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    match args.as_str() {
        Some(literal) => log(level, literal),
        None => log(level, &args.to_string()),
    }
}

/// Logs at trace level, with `format!` syntax.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log::__log_args($crate::log::Level::Trace, format_args!($($arg)+)) };
}

/// Logs at debug level, with `format!` syntax.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log::__log_args($crate::log::Level::Debug, format_args!($($arg)+)) };
}

/// Logs at info level, with `format!` syntax.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log::__log_args($crate::log::Level::Info, format_args!($($arg)+)) };
}

/// Logs at warn level, with `format!` syntax.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log::__log_args($crate::log::Level::Warn, format_args!($($arg)+)) };
}

/// Logs at error level, with `format!` syntax.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log::__log_args($crate::log::Level::Error, format_args!($($arg)+)) };
}
