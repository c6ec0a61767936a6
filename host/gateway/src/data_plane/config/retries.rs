//! A rule's `retry` (GEP-1731) as the `retry_policy` of the rule's
//! clusters (one per match, so the policy is the rule's alone).
//!
//! How Praxis 0.7.5 retries (praxis-proxy-protocol's `retry.rs` and
//! `retry_util.rs`): a response whose status the policy lists is not
//! passed on but tried again, and so is a failed connect (refused, timed
//! out, TLS handshake), a connection closed or reset, a read or write that
//! failed or timed out before the response began (`reset`) and an HTTP/2
//! stream refused; never once a response has reached the client, nor a
//! request whose body is over 64 KiB (Pingora keeps that much to send
//! again). A configured policy sends each retry to an endpoint of the
//! cluster it has not tried yet, while there is one, after a backoff drawn
//! at random between 0 and the base doubled per retry, capped.

use super::{
    error::MAX_TIMEOUT_MS,
    praxis::{Backoff, RetryPolicy},
};
use crate::data_plane::model::Rule;

/// The most retries Praxis makes of one request: Pingora tries a request
/// at most 16 times, and Praxis clamps a larger count silently.
pub const MAX_RETRIES: u32 = 15;

/// What GEP-1731 retries besides the statuses a rule names: every
/// connection error (a failed connect; a connection closed or reset, or a
/// read or write that failed or timed out, before the response; an HTTP/2
/// stream refused). A `backendRequest` timeout is a read timing out, so it
/// is retried with them.
const CONNECTION_ERRORS: [&str; 3] = ["connect_failure", "reset", "refused_stream"];

/// Whether Praxis can retry the rule's requests as asked.
pub fn check(rule: &Rule) -> Result<(), String> {
    match rule.timeouts.retry.as_ref().and_then(|r| r.attempts) {
        Some(n) if n > MAX_RETRIES => Err(format!(
            "retry.attempts of {n} is more than Praxis retries a request ({MAX_RETRIES}: it \
             tries one at most 16 times)"
        )),
        _ => Ok(()),
    }
}

/// The `retry_policy` of the rule's clusters; `None` without a `retry`
/// (Praxis's default then: a failed connect tried again).
pub fn policy(rule: &Rule) -> Option<RetryPolicy> {
    let retry = rule.timeouts.retry.as_ref()?;
    let timeouts = &rule.timeouts;
    Some(RetryPolicy {
        // Absent: Praxis's default, 3.
        max_retries: retry.attempts,
        retriable_status_codes: retry.codes.clone(),
        retriable_conditions: CONNECTION_ERRORS.to_vec(),
        // Each attempt is a backend request: its timeout is the attempt's
        // (connect, read and write), and an attempt that reaches it is
        // retried. Over an hour the rule is refused (`check_timeouts`).
        per_try_timeout_ms: timeouts
            .backend_request_ms
            .filter(|ms| *ms <= MAX_TIMEOUT_MS),
        // No retry starts once the request's own timeout has passed (the
        // `timeout` filter answers 504 then). Praxis takes at most an hour
        // here: a longer one is kept by the filter alone.
        request_timeout_ms: timeouts.request_ms.filter(|ms| *ms <= MAX_TIMEOUT_MS),
        backoff: retry.backoff_ms.map(|ms| backoff(ms, timeouts.request_ms)),
        // The Gateway API retries a rule's requests whatever their method
        // (a rule can match methods to leave some out); Praxis by default
        // retries idempotent ones only.
        allow_non_idempotent: true,
    })
}

/// Praxis's backoff for a rule's `backoff`: it doubles from `backoff` per
/// retry up to ten times it (Envoy's and Praxis's own ratio), never past
/// the request's timeout. Praxis draws each wait at random below that
/// (full jitter), so a retry may come sooner than `backoff`; it takes no
/// base of 0, so `0s` is 1 ms.
fn backoff(ms: u64, request_ms: Option<u64>) -> Backoff {
    let base = ms.max(1);
    let cap = ms
        .saturating_mul(10)
        .min(request_ms.unwrap_or(u64::MAX))
        .max(base);
    Backoff {
        base_interval_ms: base,
        max_interval_ms: cap,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data_plane::model::{Retry, Timeouts};

    fn rule(timeouts: Timeouts) -> Rule {
        Rule {
            index: 0,
            matches: Vec::new(),
            backends: Vec::new(),
            filters: Vec::new(),
            timeouts,
        }
    }

    fn retry(attempts: Option<u32>, codes: &[u16], backoff_ms: Option<u64>) -> Option<Retry> {
        Some(Retry {
            attempts,
            codes: codes.to_vec(),
            backoff_ms,
        })
    }

    #[test]
    fn no_retry_no_policy() {
        assert_eq!(policy(&rule(Timeouts::default())), None);
    }

    #[test]
    fn codes_attempts_and_every_connection_error_are_retried() {
        let p = policy(&rule(Timeouts {
            retry: retry(Some(3), &[500, 503], None),
            ..Timeouts::default()
        }))
        .unwrap();
        assert_eq!(p.max_retries, Some(3));
        assert_eq!(p.retriable_status_codes, [500, 503]);
        assert_eq!(
            p.retriable_conditions,
            ["connect_failure", "reset", "refused_stream"]
        );
        assert_eq!((p.per_try_timeout_ms, p.request_timeout_ms), (None, None));
        assert_eq!(p.backoff, None, "Praxis's default backoff");
        assert!(p.allow_non_idempotent);
    }

    #[test]
    fn the_backend_request_timeout_bounds_each_attempt_and_the_request_timeout_all() {
        let p = policy(&rule(Timeouts {
            request_ms: Some(2_000),
            backend_request_ms: Some(500),
            retry: retry(None, &[], Some(100)),
        }))
        .unwrap();
        assert_eq!(p.per_try_timeout_ms, Some(500));
        assert_eq!(p.request_timeout_ms, Some(2_000));
        assert_eq!(
            p.backoff,
            Some(Backoff {
                base_interval_ms: 100,
                max_interval_ms: 1_000
            })
        );
        // Past Praxis's hour, the request timeout is the filter's alone.
        let p = policy(&rule(Timeouts {
            request_ms: Some(MAX_TIMEOUT_MS + 1),
            retry: retry(None, &[], None),
            ..Timeouts::default()
        }))
        .unwrap();
        assert_eq!(p.request_timeout_ms, None);
    }

    #[test]
    fn the_backoff_is_capped_by_the_request_timeout_and_never_zero() {
        assert_eq!(
            backoff(400, Some(1_000)),
            Backoff {
                base_interval_ms: 400,
                max_interval_ms: 1_000
            }
        );
        assert_eq!(
            backoff(2_000, Some(1_000)),
            Backoff {
                base_interval_ms: 2_000,
                max_interval_ms: 2_000
            }
        );
        assert_eq!(
            backoff(0, None),
            Backoff {
                base_interval_ms: 1,
                max_interval_ms: 1
            }
        );
        assert_eq!(backoff(u64::MAX / 2, None).max_interval_ms, u64::MAX);
    }

    #[test]
    fn more_attempts_than_praxis_makes_are_refused_naming_the_field() {
        let with = |n| {
            check(&rule(Timeouts {
                retry: retry(Some(n), &[], None),
                ..Timeouts::default()
            }))
        };
        assert_eq!(with(MAX_RETRIES), Ok(()));
        assert!(
            with(MAX_RETRIES + 1)
                .unwrap_err()
                .starts_with("retry.attempts of 16")
        );
        assert_eq!(check(&rule(Timeouts::default())), Ok(()));
    }
}
