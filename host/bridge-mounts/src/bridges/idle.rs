//! Clients no bridge names any more: what a connection provider set up for
//! them (the tunnel's relay pod and Service) is kept for `--client-keep`,
//! then removed.
//!
//! Kept because a developer stops and starts `pontoon bridge` again and
//! again: a kept relay is already running, and its Service is one every
//! node's kube-proxy routes, where a new Service's address is dropped until
//! kube-proxy's next sync (up to a second) and a request sent to it waits a
//! TCP retransmission. Bounded, because relays live in the operator's
//! namespace, which every tenant shares: past [`MAX_IDLE_CLIENTS`] per
//! provider the longest idle go first, whatever their keep.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// The most idle clients kept per connection provider.
pub const MAX_IDLE_CLIENTS: usize = 32;

/// When each idle client was first seen named by no bridge, by `(provider,
/// client id)`. In memory: after a restart the keep starts again, which
/// keeps a relay at most one keep longer.
#[derive(Debug, Default)]
pub struct Idle(Mutex<HashMap<(String, String), Instant>>);

impl Idle {
    /// Of `unnamed` (the provider's clients no bridge names now), those to
    /// remove now: idle for `keep`, or the longest idle beyond
    /// [`MAX_IDLE_CLIENTS`]. Forgets the provider's clients not in
    /// `unnamed` (named again, or gone).
    pub fn due(
        &self,
        provider: &str,
        unnamed: &[String],
        now: Instant,
        keep: Duration,
    ) -> Vec<String> {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.retain(|(p, id), _| p != provider || unnamed.contains(id));
        let mut idle: Vec<(Instant, &String)> = unnamed
            .iter()
            .map(|id| {
                let since = *seen
                    .entry((provider.to_string(), id.clone()))
                    .or_insert(now);
                (since, id)
            })
            .collect();
        // Longest idle first; by id among equals, so the choice is stable.
        idle.sort();
        let beyond = idle.len().saturating_sub(MAX_IDLE_CLIENTS);
        idle.iter()
            .enumerate()
            .filter(|(i, (since, _))| *i < beyond || now.duration_since(*since) >= keep)
            .map(|(_, (_, id))| (*id).clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn an_idle_client_is_kept_for_the_keep_then_removed() {
        let idle = Idle::default();
        let keep = Duration::from_secs(600);
        let t0 = Instant::now();
        assert!(idle.due("tunnel", &ids(&["a"]), t0, keep).is_empty());
        let later = t0 + Duration::from_secs(599);
        assert!(
            idle.due("tunnel", &ids(&["a", "b"]), later, keep)
                .is_empty()
        );
        // `a` is due at its keep; `b`, idle since later, is not.
        let due = idle.due("tunnel", &ids(&["a", "b"]), t0 + keep, keep);
        assert_eq!(due, ids(&["a"]));
        // A keep of zero removes at once.
        assert_eq!(
            Idle::default().due("tunnel", &ids(&["c"]), t0, Duration::ZERO),
            ids(&["c"])
        );
    }

    #[test]
    fn a_client_named_again_starts_its_keep_afresh() {
        let idle = Idle::default();
        let keep = Duration::from_secs(10);
        let t0 = Instant::now();
        idle.due("tunnel", &ids(&["a"]), t0, keep);
        // Named by a bridge again for a while: no longer idle.
        idle.due("tunnel", &[], t0 + Duration::from_secs(5), keep);
        let back = t0 + Duration::from_secs(11);
        assert!(idle.due("tunnel", &ids(&["a"]), back, keep).is_empty());
        // Another provider's clients are its own.
        assert!(idle.due("other", &ids(&["a"]), back, keep).is_empty());
        assert_eq!(
            idle.due("tunnel", &ids(&["a"]), back + keep, keep),
            ids(&["a"])
        );
    }

    #[test]
    fn past_the_bound_the_longest_idle_go_first() {
        let idle = Idle::default();
        let keep = Duration::from_secs(600);
        let t0 = Instant::now();
        let first: Vec<String> = (0..MAX_IDLE_CLIENTS).map(|i| format!("c{i:02}")).collect();
        assert!(idle.due("tunnel", &first, t0, keep).is_empty());
        let mut more = first.clone();
        more.extend(ids(&["late1", "late2"]));
        let due = idle.due("tunnel", &more, t0 + Duration::from_secs(1), keep);
        assert_eq!(due, ids(&["c00", "c01"]));
    }
}
