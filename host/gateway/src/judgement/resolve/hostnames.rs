//! Hostname matching as the Gateway API specifies it: a listener's hostname
//! and a route's hostnames intersect; `*.example.com` matches any name with
//! at least one more label (`foo.example.com`, `a.b.example.com`), never
//! `example.com` itself.

/// The hostnames a route serves on a listener: the route's hostnames that the
/// listener's hostname admits, each as the more specific of the two. `None`
/// when they do not intersect (the route does not attach to this listener);
/// `Some(empty)` when both sides admit any host.
pub fn effective(listener: Option<&str>, route: &[String]) -> Option<Vec<String>> {
    let listener = listener.filter(|h| !h.is_empty());
    match (listener, route.is_empty()) {
        (None, _) => Some(route.to_vec()),
        (Some(l), true) => Some(vec![l.to_string()]),
        (Some(l), false) => {
            let mut out: Vec<String> = route.iter().filter_map(|r| intersect(l, r)).collect();
            out.dedup();
            (!out.is_empty()).then_some(out)
        }
    }
}

/// The more specific of two hostnames if one admits the other.
fn intersect(a: &str, b: &str) -> Option<String> {
    let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
    if a == b {
        return Some(a);
    }
    match (a.strip_prefix("*."), b.strip_prefix("*.")) {
        (None, None) => None,
        (Some(suffix), None) => covers(suffix, &b).then_some(b),
        (None, Some(suffix)) => covers(suffix, &a).then_some(a),
        // Two wildcards: the longer suffix is the narrower set.
        (Some(sa), Some(sb)) => {
            if covers(sa, sb) {
                Some(b)
            } else if covers(sb, sa) {
                Some(a)
            } else {
                None
            }
        }
    }
}

/// Whether `*.{suffix}` matches `name` (`name` ends in `.suffix`, with at least one label before).
fn covers(suffix: &str, name: &str) -> bool {
    name.len() > suffix.len() + 1
        && name.ends_with(suffix)
        && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
}

/// Whether a request for `host` is served by a route with `hostnames`
/// (empty: any host).
pub fn serves(hostnames: &[String], host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    hostnames.is_empty()
        || hostnames.iter().any(|h| match h.strip_prefix("*.") {
            Some(suffix) => covers(suffix, &host),
            None => *h == host,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn no_listener_hostname_keeps_the_routes() {
        assert_eq!(effective(None, &hosts(&["a.com"])), Some(hosts(&["a.com"])));
        assert_eq!(effective(None, &[]), Some(vec![]));
        assert_eq!(
            effective(Some(""), &hosts(&["a.com"])),
            Some(hosts(&["a.com"]))
        );
    }

    #[test]
    fn a_route_without_hostnames_takes_the_listeners() {
        assert_eq!(
            effective(Some("*.example.com"), &[]),
            Some(hosts(&["*.example.com"]))
        );
    }

    #[test]
    fn intersection_keeps_the_more_specific_name() {
        assert_eq!(
            effective(
                Some("*.example.com"),
                &hosts(&["foo.example.com", "bar.other.com"])
            ),
            Some(hosts(&["foo.example.com"]))
        );
        assert_eq!(
            effective(Some("foo.example.com"), &hosts(&["*.example.com"])),
            Some(hosts(&["foo.example.com"]))
        );
        assert_eq!(
            effective(Some("*.example.com"), &hosts(&["*.foo.example.com"])),
            Some(hosts(&["*.foo.example.com"]))
        );
        assert_eq!(
            effective(Some("*.foo.example.com"), &hosts(&["*.example.com"])),
            Some(hosts(&["*.foo.example.com"]))
        );
        assert_eq!(
            effective(Some("Foo.Example.com"), &hosts(&["foo.example.com"])),
            Some(hosts(&["foo.example.com"]))
        );
    }

    #[test]
    fn a_wildcard_needs_at_least_one_more_label() {
        assert_eq!(
            effective(Some("*.example.com"), &hosts(&["example.com"])),
            None
        );
        assert_eq!(
            effective(Some("*.example.com"), &hosts(&["badexample.com"])),
            None
        );
        assert_eq!(
            effective(Some("*.example.com"), &hosts(&["a.b.example.com"])),
            Some(hosts(&["a.b.example.com"]))
        );
    }

    #[test]
    fn disjoint_names_do_not_attach() {
        assert_eq!(effective(Some("a.com"), &hosts(&["b.com"])), None);
        assert_eq!(effective(Some("*.a.com"), &hosts(&["*.b.com"])), None);
    }

    #[test]
    fn requests_are_served_by_exact_and_wildcard_names() {
        assert!(serves(&[], "anything"));
        assert!(serves(&hosts(&["a.com"]), "A.com"));
        assert!(serves(&hosts(&["*.a.com"]), "x.a.com"));
        assert!(!serves(&hosts(&["*.a.com"]), "a.com"));
    }
}
