use super::*;
use crate::data_plane::model::ValueMatch;

fn rule(matches: Vec<Match>) -> Rule {
    Rule {
        index: 0,
        matches,
        backends: Vec::new(),
        filters: Vec::new(),
        timeouts: Default::default(),
    }
}

fn refused(m: Match) -> String {
    check_matches(&rule(vec![m]), DataPlane::Pontoon).unwrap_err()
}

#[test]
fn regex_paths_are_refused_and_query_params_on_stock_praxis_only() {
    let why = refused(Match {
        path: Some(PathMatch::RegularExpression("/a.*".into())),
        ..Match::default()
    });
    assert!(
        why.starts_with("match 0: path type RegularExpression"),
        "{why}"
    );
    let query = rule(vec![Match {
        query_params: vec![ValueMatch {
            name: "q".into(),
            value: "1".into(),
            kind: MatchKind::Exact,
        }],
        ..Match::default()
    }]);
    let why = check_matches(&query, DataPlane::StockPraxis).unwrap_err();
    assert!(
        why.contains("queryParams (q)") && why.contains("needs Pontoon's data plane"),
        "{why}"
    );
    let checked = check_matches(&query, DataPlane::Pontoon).unwrap();
    assert_eq!(checked[0].exact_query, [("q".to_string(), "1".to_string())]);
}

#[test]
fn bad_regexes_methods_and_reserved_headers_are_refused() {
    let header = |name: &str, value: &str, kind| Match {
        headers: vec![ValueMatch {
            name: name.into(),
            value: value.into(),
            kind,
        }],
        ..Match::default()
    };
    let why = refused(header("x-a", "(", MatchKind::RegularExpression));
    assert!(
        why.contains("header x-a: invalid regular expression"),
        "{why}"
    );
    let why = refused(header(
        "x-a",
        &"a".repeat(1100),
        MatchKind::RegularExpression,
    ));
    assert!(why.contains("longer than Praxis's limit"), "{why}");
    let why = refused(header("X-Praxis-Route", "a", MatchKind::Exact));
    assert!(why.contains("reserves `x-praxis-*`"), "{why}");
    let why = refused(Match {
        method: Some("GE T".into()),
        ..Match::default()
    });
    assert!(why.contains("not an HTTP method"), "{why}");
    let why = refused(Match {
        path: Some(PathMatch::Prefix("api".into())),
        ..Match::default()
    });
    assert!(why.contains("does not start with `/`"), "{why}");
}

#[test]
fn only_the_first_header_of_a_name_counts() {
    let checked = check_matches(
        &rule(vec![Match {
            headers: vec![
                ValueMatch {
                    name: "X-A".into(),
                    value: "1".into(),
                    kind: MatchKind::Exact,
                },
                ValueMatch {
                    name: "x-a".into(),
                    value: "2".into(),
                    kind: MatchKind::Exact,
                },
            ],
            ..Match::default()
        }]),
        DataPlane::Pontoon,
    )
    .unwrap();
    assert_eq!(
        checked[0].exact_headers,
        [("x-a".to_string(), "1".to_string())]
    );
    assert_eq!(checked[0].path, PathSpec::Prefix("/".into()));
}

#[test]
fn prefix_specificity_ignores_a_trailing_slash() {
    assert_eq!(PathSpec::Prefix("/foo/".into()).specificity(), 4);
    assert_eq!(PathSpec::Prefix("/".into()).specificity(), 1);
    assert_eq!(PathSpec::Exact("/foo/".into()).specificity(), 5);
    assert_eq!(PathSpec::Prefix("/foo/".into()).prefix(), Some("/foo"));
}

#[test]
fn query_params_become_internal_headers_the_router_requires() {
    let q = |name: &str, value: &str, kind| ValueMatch {
        name: name.into(),
        value: value.into(),
        kind,
    };
    let checked = check_matches(
        &rule(vec![Match {
            query_params: vec![
                q("Animal", "whale", MatchKind::Exact),
                q("Animal", "dolphin", MatchKind::Exact),
                q("color", "bl.*", MatchKind::RegularExpression),
            ],
            ..Match::default()
        }]),
        DataPlane::Pontoon,
    )
    .unwrap();
    // The first entry of a name counts; patterns match the whole value.
    assert_eq!(
        checked[0].exact_query,
        [("Animal".to_string(), "whale".to_string())]
    );
    assert_eq!(
        checked[0].regex_query,
        [("color".to_string(), "^(?:bl.*)$".to_string())]
    );
    let candidate = |query: &CheckedMatch, order| Candidate {
        path: query.path.clone(),
        host: HostPattern::Any,
        listener_host: HostPattern::Any,
        method: None,
        exact_headers: Vec::new(),
        regex_headers: Vec::new(),
        exact_query: query.exact_query.clone(),
        regex_query: query.regex_query.clone(),
        cluster: format!("c{order}"),
        order: [0, 0, order, 0, 0],
    };
    let plain = CheckedMatch {
        exact_query: Vec::new(),
        regex_query: Vec::new(),
        ..checked[0].clone()
    };
    // Declared first, but fewer query matches: ranked after (the spec).
    let routing = routing("l", vec![candidate(&plain, 0), candidate(&checked[0], 1)]);
    let routes = serde_json::to_value(&routing.routes).unwrap();
    assert_eq!(routes[0]["cluster"], "c1");
    assert_eq!(
        routes[0]["headers"]["x-praxis-pontoon-query-416e696d616c"],
        "whale"
    );
    assert_eq!(routes[0]["headers"]["x-praxis-pontoon-query-re-0"], "1");
    assert_eq!(routes[1]["cluster"], "c0");
    let classifiers = serde_json::to_value(&routing.classifiers).unwrap();
    let query = classifiers
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["filter"] == "pontoon_query_params")
        .unwrap();
    assert_eq!(
        query,
        &serde_json::json!({
            "filter": "pontoon_query_params",
            "copy": [{"name": "Animal", "header": "x-praxis-pontoon-query-416e696d616c"}],
            "test": [{"name": "color", "pattern": "^(?:bl.*)$",
                      "header": "x-praxis-pontoon-query-re-0"}]
        })
    );
    let why = check_matches(
        &rule(vec![Match {
            query_params: vec![q("a", "x\u{7f}", MatchKind::Exact)],
            ..Match::default()
        }]),
        DataPlane::Pontoon,
    )
    .unwrap_err();
    assert!(why.contains("printable ASCII"), "{why}");
}
