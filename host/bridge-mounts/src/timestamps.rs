//! Timestamps in Gefyra's wire format: what its operator writes in
//! `stateTransitions`, and what its clients write there and in `sunset`.

use k8s_openapi::jiff::Timestamp;

/// A timestamp as Gefyra writes it in `stateTransitions`: UTC, microseconds, `Z`.
pub fn gefyra_timestamp(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

/// Reads a timestamp of `stateTransitions` or `sunset`: RFC 3339, or an ISO
/// 8601 date-time without offset, taken as UTC (what Gefyra's clients write).
pub fn parse_timestamp(text: &str) -> Option<Timestamp> {
    let text = text.trim();
    if let Ok(at) = text.parse::<Timestamp>() {
        return Some(at);
    }
    let civil: k8s_openapi::jiff::civil::DateTime = text.parse().ok()?;
    civil
        .to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC)
        .ok()
        .map(|z| z.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn timestamps_look_like_gefyras() {
        assert_eq!(
            gefyra_timestamp(at("2026-11-29T18:43:12.5Z")),
            "2026-11-29T18:43:12.500000Z"
        );
    }

    #[test]
    fn timestamps_are_read_with_or_without_offset() {
        let expected = at("2026-11-29T18:43:12Z");
        assert_eq!(parse_timestamp("2026-11-29T18:43:12Z"), Some(expected));
        assert_eq!(parse_timestamp("2026-11-29T19:43:12+01:00"), Some(expected));
        assert_eq!(parse_timestamp("2026-11-29T18:43:12"), Some(expected));
        assert_eq!(
            parse_timestamp("2026-11-29T18:43:12.000000Z"),
            Some(expected)
        );
        assert_eq!(parse_timestamp("tomorrow"), None);
    }
}
