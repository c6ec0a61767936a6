//! Gateway API durations (GEP-2257): up to four `<number><unit>` parts,
//! units `h`, `m`, `s`, `ms`, numbers of at most five digits (`1h30m`,
//! `500ms`). Timeouts use them; `0s` means "no timeout".

use crate::httproutes::HttpRouteRulesTimeouts;

use crate::data_plane::model::Timeouts;

/// Milliseconds in `text`, or why it is not a Gateway API duration.
pub fn millis(text: &str) -> Result<u64, String> {
    let bad = || format!("`{text}` is not a Gateway API duration (such as 500ms, 10s or 1h30m)");
    let mut rest = text;
    let mut total: u64 = 0;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 5 {
            return Err(bad());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1, 2)
        } else if rest.starts_with('h') {
            (3_600_000, 1)
        } else if rest.starts_with('m') {
            (60_000, 1)
        } else if rest.starts_with('s') {
            (1_000, 1)
        } else {
            return Err(bad());
        };
        rest = &rest[len..];
        total += number * unit;
        parts += 1;
    }
    if parts == 0 || parts > 4 {
        return Err(bad());
    }
    Ok(total)
}

/// A rule's timeouts in the model's terms (`0s` is none), or why not.
pub fn timeouts(timeouts: Option<&HttpRouteRulesTimeouts>) -> Result<Timeouts, String> {
    let Some(t) = timeouts else {
        return Ok(Timeouts::default());
    };
    let one = |field: &str, value: &Option<String>| -> Result<Option<u64>, String> {
        value
            .as_deref()
            .map(|v| millis(v).map_err(|e| format!("timeouts.{field}: {e}")))
            .transpose()
            .map(|ms| ms.filter(|ms| *ms > 0))
    };
    let out = Timeouts {
        request_ms: one("request", &t.request)?,
        backend_request_ms: one("backendRequest", &t.backend_request)?,
        retry: None,
    };
    if let (Some(request), Some(backend)) = (out.request_ms, out.backend_request_ms)
        && backend > request
    {
        return Err(format!(
            "timeouts.backendRequest ({backend} ms) is longer than timeouts.request ({request} ms)"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_the_gep_writes_them() {
        assert_eq!(millis("500ms"), Ok(500));
        assert_eq!(millis("1s"), Ok(1000));
        assert_eq!(millis("1h30m"), Ok(5_400_000));
        assert_eq!(millis("1h1m1s1ms"), Ok(3_661_001));
        assert_eq!(millis("0s"), Ok(0));
        for bad in [
            "",
            "1",
            "s",
            "1.5s",
            "100000s",
            "1d",
            "1h1m1s1ms1ms",
            "-1s",
            "1 s",
        ] {
            assert!(millis(bad).is_err(), "{bad:?} was taken");
        }
    }

    #[test]
    fn zero_is_no_timeout_and_backend_may_not_outlast_request() {
        let t = |json: serde_json::Value| timeouts(Some(&serde_json::from_value(json).unwrap()));
        assert_eq!(
            t(serde_json::json!({"request": "0s", "backendRequest": "500ms"})),
            Ok(Timeouts {
                request_ms: None,
                backend_request_ms: Some(500),
                retry: None,
            })
        );
        assert!(
            t(serde_json::json!({"request": "1s", "backendRequest": "2s"}))
                .unwrap_err()
                .contains("longer than timeouts.request")
        );
        assert!(
            t(serde_json::json!({"request": "soon"}))
                .unwrap_err()
                .contains("timeouts.request")
        );
    }
}
