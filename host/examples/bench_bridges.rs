//! `make bench-bridges`: what judging a mount's bridges costs, the work the
//! operator does at every look at a mount with bridges (and at every change
//! of one). Prints; asserts nothing.
//!
//! For the most bridges a mount renders (`--max-bridges-per-mount`, the
//! default unless `BENCH_BRIDGES` says otherwise), each of the largest
//! shape a bridge may have (`judge::MAX_RULES` rules of `judge::MAX_MATCHES`
//! matches, `judge::MAX_REGEXES` of them regular expressions of their own,
//! the rest exact header values), and for a mount of Gefyra's usual shape
//! (one rule of one header match a bridge): the first judgement (every
//! pattern compiled) and the next ones (patterns known), median of several
//! rounds.

use std::time::{Duration, Instant};

use pontoon::{
    bridge::{
        MAX_BRIDGES_PER_MOUNT,
        judge::{MAX_MATCHES, MAX_REGEXES, MAX_RULES},
        lookup::judge_all,
    },
    bridge_mount::{GefyraBridgeMount, admitted::Admitted, crd::GefyraBridge},
};
use serde_json::json;

fn mount() -> anyhow::Result<GefyraBridgeMount> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": "web-mount", "namespace": "gefyra", "uid": "u-1" },
        "targetNamespace": "shop", "target": "deploy/web", "targetContainer": "app",
    }))?)
}

/// Bridge `index` of `rules` rules of `matches` matches, the first
/// `MAX_REGEXES` each a regular expression of its own, the others exact.
fn bridge(index: usize, rules: usize, matches: usize) -> anyhow::Result<GefyraBridge> {
    let header = |r: usize, m: usize| {
        if r * matches + m < MAX_REGEXES {
            json!({ "name": "x-gefyra", "value": format!("^dev-{index}-{r}-{m}-[a-z]+$"), "type": "regex" })
        } else {
            json!({ "name": "x-gefyra", "value": format!("dev-{index}-{r}-{m}"), "type": "exact" })
        }
    };
    let rules: Vec<serde_json::Value> = (0..rules)
        .map(|r| {
            let matches: Vec<serde_json::Value> = (0..matches)
                .map(|m| json!({ "matchHeader": header(r, m) }))
                .collect();
            json!({ "match": matches })
        })
        .collect();
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": format!("bridge-{index}"), "namespace": "gefyra",
            "creationTimestamp": format!("2026-12-01T00:00:{:02}Z", index % 60),
            "labels": { "gefyra.dev/bridge-mount": "web-mount" }
        },
        "provider": "carrier2",
        "providerParameter": { "rules": rules },
        "targetNamespace": "shop",
        "portMappings": [format!("{}:80", 8000 + index)],
        "destinationIP": "10.244.0.10",
    }))?)
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// First judgement, then the median of `rounds` more.
fn judge(
    mount: &GefyraBridgeMount,
    bridges: &[GefyraBridge],
    max: usize,
    rounds: usize,
) -> (Duration, Duration, usize) {
    let request = Admitted::of(mount);
    let started = Instant::now();
    let judged = judge_all(mount, &request, bridges, Some(&[80]), max);
    let first = started.elapsed();
    let valid = judged.iter().filter(|(_, v)| v.is_ok()).count();
    let next: Vec<Duration> = (0..rounds)
        .map(|_| {
            let started = Instant::now();
            let _ = judge_all(mount, &request, bridges, Some(&[80]), max);
            started.elapsed()
        })
        .collect();
    (first, median(next), valid)
}

fn main() -> anyhow::Result<()> {
    let max: usize = std::env::var("BENCH_BRIDGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MAX_BRIDGES_PER_MOUNT);
    let mount = mount()?;
    println!(
        "bridge judgement of one mount: {max} bridges (--max-bridges-per-mount), one core, \
         first look (every regular expression compiled) and the median of 9 more"
    );
    for (what, rules, matches) in [
        ("Gefyra's usual bridge (1 rule, 1 match)", 1, 1),
        ("a bridge of 10 rules of 4 matches", 10, 4),
        ("the largest bridge allowed", MAX_RULES, MAX_MATCHES),
    ] {
        let bridges = (0..max)
            .map(|i| bridge(i, rules, matches))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let (first, next, valid) = judge(&mount, &bridges, max, 9);
        println!(
            "  {what}: {} matches in all; first {}, then {} ({valid} valid)",
            max * rules * matches,
            ms(first),
            ms(next)
        );
    }
    // Beyond the limit, bridges cost the judgement (almost) nothing.
    let many = (0..1000)
        .map(|i| bridge(i, 1, 1))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (first, next, valid) = judge(&mount, &many, max, 9);
    println!(
        "  1000 bridges of the usual shape, {max} rendered: first {}, then {} ({valid} valid)",
        ms(first),
        ms(next)
    );
    Ok(())
}
