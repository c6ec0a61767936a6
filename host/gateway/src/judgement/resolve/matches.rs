//! HTTPRoute matches in the model's terms, with the spec's defaults (a
//! match without a path is PathPrefix `/`; types default to Exact).

use crate::httproutes::{
    HttpRouteRulesMatches, HttpRouteRulesMatchesHeadersType, HttpRouteRulesMatchesMethod,
    HttpRouteRulesMatchesPathType, HttpRouteRulesMatchesQueryParamsType,
};

use crate::data_plane::model::{Match, MatchKind, PathMatch, ValueMatch};

pub fn convert(matches: &[HttpRouteRulesMatches]) -> Vec<Match> {
    matches.iter().map(one).collect()
}

fn one(m: &HttpRouteRulesMatches) -> Match {
    let path = m.path.as_ref().map(|p| {
        let value = p.value.clone().unwrap_or_else(|| "/".into());
        match p.r#type {
            Some(HttpRouteRulesMatchesPathType::Exact) => PathMatch::Exact(value),
            Some(HttpRouteRulesMatchesPathType::RegularExpression) => {
                PathMatch::RegularExpression(value)
            }
            Some(HttpRouteRulesMatchesPathType::PathPrefix) | None => PathMatch::Prefix(value),
        }
    });
    Match {
        path: Some(path.unwrap_or_else(|| PathMatch::Prefix("/".into()))),
        headers: m
            .headers
            .iter()
            .flatten()
            .map(|h| ValueMatch {
                name: h.name.clone(),
                value: h.value.clone(),
                kind: match h.r#type {
                    Some(HttpRouteRulesMatchesHeadersType::RegularExpression) => {
                        MatchKind::RegularExpression
                    }
                    _ => MatchKind::Exact,
                },
            })
            .collect(),
        query_params: m
            .query_params
            .iter()
            .flatten()
            .map(|q| ValueMatch {
                name: q.name.clone(),
                value: q.value.clone(),
                kind: match q.r#type {
                    Some(HttpRouteRulesMatchesQueryParamsType::RegularExpression) => {
                        MatchKind::RegularExpression
                    }
                    _ => MatchKind::Exact,
                },
            })
            .collect(),
        method: m.method.as_ref().map(method_name),
    }
}

fn method_name(method: &HttpRouteRulesMatchesMethod) -> String {
    // The enum's variants are the methods' names in capitals.
    serde_json::to_value(method)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_spec() {
        let matches: Vec<HttpRouteRulesMatches> = serde_json::from_value(serde_json::json!([
            {},
            { "path": { "value": "/api" }, "method": "POST",
              "headers": [{ "name": "x-env", "value": "canary" }],
              "queryParams": [{ "name": "v", "value": "^2", "type": "RegularExpression" }] },
            { "path": { "type": "Exact", "value": "/exact" } }
        ]))
        .unwrap();
        let converted = convert(&matches);
        assert_eq!(converted[0].path, Some(PathMatch::Prefix("/".into())));
        assert_eq!(converted[1].path, Some(PathMatch::Prefix("/api".into())));
        assert_eq!(converted[1].method.as_deref(), Some("POST"));
        assert_eq!(converted[1].headers[0].kind, MatchKind::Exact);
        assert_eq!(
            converted[1].query_params[0].kind,
            MatchKind::RegularExpression
        );
        assert_eq!(converted[2].path, Some(PathMatch::Exact("/exact".into())));
    }
}
