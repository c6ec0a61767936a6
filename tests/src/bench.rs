//! Figures for the benchmark examples (`make bench-*`).

use std::time::Duration;

use anyhow::Context as _;

/// The `p`th percentile of `samples` in seconds, by nearest rank: with 10
/// samples, p50 is the 5th and p99 the 10th. NaN without samples.
pub fn percentile(samples: &[Duration], p: usize) -> f64 {
    let mut sorted: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len()).div_ceil(100).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// A memory figure of a process in KiB from /proc/PID/status: `VmRSS:`
/// (resident now) or `VmHWM:` (peak resident).
pub fn memory_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))?
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let samples: Vec<Duration> = (1..=10).rev().map(Duration::from_secs).collect();
        assert_eq!(percentile(&samples, 50), 5.0);
        assert_eq!(percentile(&samples, 99), 10.0);
        assert!(percentile(&[], 50).is_nan());
    }
}
