//! CORS as `pontoon_cors`, a filter of Pontoon's data plane (`dataplane/`):
//! Praxis's own `cors` matches `*.example.com` one label deep, leaves
//! `Access-Control-Expose-Headers` out of preflight answers and refuses
//! wildcards with credentials, where the Gateway API asks otherwise. On
//! stock Praxis the host refuses the rule, saying it needs Pontoon's data
//! plane.
//!
//! The fields as the spec has them; an empty `allowOrigins` allows no
//! origin, so the filter would only answer preflights without CORS headers:
//! refused as a mistake.

use serde_json::json;

use crate::{Error, entry::Entry, input::Cors};

/// The most the spec's `maxAge` may be, in seconds (its CRD leaves it
/// open; a day is what browsers keep at most).
const MAX_AGE_LIMIT: i64 = 86_400;

pub fn translate(c: &Cors) -> Result<Vec<Entry<'static>>, Error> {
    if c.allow_origins.is_empty() {
        return Err(Error::invalid(
            "cors.allowOrigins is empty: no origin would be allowed",
        ));
    }
    for origin in &c.allow_origins {
        let valid = origin == "*"
            || origin.split_once("://").is_some_and(|(scheme, rest)| {
                !scheme.is_empty() && !rest.is_empty() && !rest.contains('/') && {
                    // `*` alone (any host), or `*.` before a name.
                    let host = rest.rsplit_once(':').map_or(rest, |(h, _)| h);
                    host == "*" || host.strip_prefix("*.").unwrap_or(host).find('*').is_none()
                }
            });
        if !valid {
            return Err(Error::invalid(format!(
                "cors.allowOrigins: `{origin}` is neither `*` nor SCHEME://HOST[:PORT] (a \
                 leading `*.` in HOST for any subdomain, or `*` for any host)"
            )));
        }
    }
    let max_age = match c.max_age {
        None => 5,
        Some(age) if (1..=MAX_AGE_LIMIT).contains(&age) => age,
        Some(age) => {
            return Err(Error::invalid(format!(
                "cors.maxAge: {age} is not between 1 and {MAX_AGE_LIMIT} seconds"
            )));
        }
    };
    Ok(vec![Entry::Value(json!({
        "filter": "pontoon_cors",
        "allow_origins": c.allow_origins,
        "allow_methods": c.allow_methods,
        "allow_headers": c.allow_headers,
        "expose_headers": c.expose_headers,
        "allow_credentials": c.allow_credentials.unwrap_or(false),
        "max_age": max_age,
    }))])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{Error, translate_values};

    fn translate(cors: serde_json::Value) -> Result<Vec<serde_json::Value>, Error> {
        translate_values(&json!({"type": "CORS", "cors": cors}).to_string())
    }

    #[test]
    fn the_fields_reach_pontoons_cors_with_the_specs_defaults() {
        let entries = translate(json!({
            "allowOrigins": ["https://www.foo.com", "https://*.bar.com"],
            "allowMethods": ["GET", "OPTIONS"],
            "allowHeaders": ["x-header-1"],
            "exposeHeaders": ["x-header-3"],
            "allowCredentials": true,
            "maxAge": 3600
        }))
        .unwrap();
        assert_eq!(
            entries,
            [json!({"filter": "pontoon_cors",
                    "allow_origins": ["https://www.foo.com", "https://*.bar.com"],
                    "allow_methods": ["GET", "OPTIONS"], "allow_headers": ["x-header-1"],
                    "expose_headers": ["x-header-3"], "allow_credentials": true,
                    "max_age": 3600})]
        );
        let defaults = translate(json!({"allowOrigins": ["*"]})).unwrap();
        assert_eq!(defaults[0]["max_age"], 5);
        assert_eq!(defaults[0]["allow_credentials"], false);
    }

    #[test]
    fn a_lone_wildcard_host_is_an_origin() {
        for origin in ["https://*", "http://*:8080"] {
            assert!(
                translate(json!({"allowOrigins": [origin]})).is_ok(),
                "{origin}"
            );
        }
        assert!(translate(json!({"allowOrigins": ["https://*x.com"]})).is_err());
    }

    #[test]
    fn bad_origins_and_ages_are_named() {
        for (cors, says) in [
            (json!({}), "cors.allowOrigins is empty"),
            (json!({"allowOrigins": ["foo.com"]}), "`foo.com` is neither"),
            (
                json!({"allowOrigins": ["https://a.*.com"]}),
                "`https://a.*.com`",
            ),
            (
                json!({"allowOrigins": ["*"], "maxAge": 0}),
                "cors.maxAge: 0",
            ),
        ] {
            let err = translate(cors).unwrap_err();
            assert!(
                matches!(&err, Error::InvalidInput(m) if m.contains(says)),
                "{err:?}"
            );
        }
    }
}
