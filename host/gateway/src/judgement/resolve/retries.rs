//! A rule's `retry` (GEP-1731, the experimental channel's HTTPRoute): how
//! many times, on which response statuses and after how long a failed
//! request to a backend is sent again. The API server's schema already
//! bounds the fields; what it let through anyway (a CRD without the
//! schema, say) is refused here, naming the field, rather than handed on.

use crate::{data_plane::model::Retry, httproutes::HttpRouteRulesRetry};

use super::durations;

/// The statuses a retry may name (the API's `HTTPRouteRetryStatusCode`).
const RETRIABLE_STATUSES: std::ops::RangeInclusive<i64> = 400..=599;

/// A rule's `retry` in the model's terms (`None` without one), or why not.
pub fn of(retry: Option<&HttpRouteRulesRetry>) -> Result<Option<Retry>, String> {
    let Some(retry) = retry else {
        return Ok(None);
    };
    let attempts = retry
        .attempts
        .map(|n| {
            u32::try_from(n).ok().filter(|n| *n >= 1).ok_or_else(|| {
                format!("retry.attempts: {n} is not a number of retries (1 or more)")
            })
        })
        .transpose()?;
    let mut codes = Vec::new();
    for (i, code) in retry.codes.iter().flatten().enumerate() {
        let status = u16::try_from(*code)
            .ok()
            .filter(|_| RETRIABLE_STATUSES.contains(code))
            .ok_or_else(|| {
                format!("retry.codes[{i}]: {code} is not a status to retry (400 to 599)")
            })?;
        codes.push(status);
    }
    codes.sort_unstable();
    codes.dedup();
    let backoff_ms = retry
        .backoff
        .as_deref()
        .map(|text| durations::millis(text).map_err(|e| format!("retry.backoff: {e}")))
        .transpose()?;
    Ok(Some(Retry {
        attempts,
        codes,
        backoff_ms,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn retry(value: serde_json::Value) -> Result<Option<Retry>, String> {
        of(Some(&serde_json::from_value(value).unwrap()))
    }

    #[test]
    fn no_retry_is_none_and_a_retry_reads_as_written() {
        assert_eq!(of(None), Ok(None));
        assert_eq!(
            retry(json!({"attempts": 3, "codes": [504, 500, 500], "backoff": "100ms"})),
            Ok(Some(Retry {
                attempts: Some(3),
                codes: vec![500, 504],
                backoff_ms: Some(100),
            }))
        );
        // Every field is optional: an empty retry still retries connection
        // errors, with the data plane's count and wait.
        assert_eq!(retry(json!({})), Ok(Some(Retry::default())));
        assert_eq!(
            retry(json!({"backoff": "0s"})).unwrap().unwrap().backoff_ms,
            Some(0)
        );
    }

    #[test]
    fn values_outside_the_api_are_refused_naming_the_field() {
        for (value, field) in [
            (json!({"attempts": 0}), "retry.attempts: 0"),
            (json!({"attempts": -1}), "retry.attempts: -1"),
            (json!({"attempts": 5_000_000_000_i64}), "retry.attempts"),
            (json!({"codes": [500, 302]}), "retry.codes[1]: 302"),
            (json!({"codes": [600]}), "retry.codes[0]: 600"),
            (json!({"backoff": "soon"}), "retry.backoff: `soon`"),
        ] {
            let why = retry(value.clone()).unwrap_err();
            assert!(why.starts_with(field), "{value}: {why}");
        }
    }
}
