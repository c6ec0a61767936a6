//! Hostname patterns of router entries and the Gateway API's hostname
//! precedence. Praxis's router matches one host pattern per route and ranks
//! routes by path before host; the Gateway API gives a request to the most
//! specific hostname first (listener, then route). So an entry whose pattern
//! has more specific patterns inside it on the same port must not see their
//! hosts: it is gated on a flag a classifier sets when the `Host` header
//! matches none of them (`routes.rs`). The classifier is a regular
//! expression over `Host`, built here.

use std::cmp::Reverse;

/// A host pattern: any host, one exact name, or `*.suffix` (one or more
/// labels before `suffix`, as the Gateway API defines wildcards).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostPattern {
    Any,
    Exact(String),
    Wildcard(String),
}

impl HostPattern {
    pub fn parse(hostname: Option<&str>) -> Self {
        match hostname.map(str::to_ascii_lowercase) {
            None => Self::Any,
            Some(h) if h.is_empty() || h == "*" => Self::Any,
            Some(h) => match h.strip_prefix("*.") {
                Some(suffix) => Self::Wildcard(suffix.to_string()),
                None => Self::Exact(h),
            },
        }
    }

    /// The value of the router entry's `host` (none for any host).
    pub fn router_host(&self) -> Option<String> {
        match self {
            Self::Any => None,
            Self::Exact(h) => Some(h.clone()),
            Self::Wildcard(s) => Some(format!("*.{s}")),
        }
    }

    /// Whether every host `self` admits is admitted by `outer`, and the two differ.
    pub fn strictly_within(&self, outer: &Self) -> bool {
        match (self, outer) {
            (Self::Any, _) | (_, Self::Exact(_)) => false,
            (_, Self::Any) => true,
            (Self::Exact(name), Self::Wildcard(suffix)) => below(name, suffix),
            (Self::Wildcard(inner), Self::Wildcard(suffix)) => below(inner, suffix),
        }
    }

    /// Whether some host is admitted by both.
    pub fn overlaps(&self, other: &Self) -> bool {
        self == other || self.strictly_within(other) || other.strictly_within(self)
    }

    /// Sort key, most specific first: exact names before wildcards before
    /// any host, longer before shorter (the Gateway API's "characters in a
    /// matching non-wildcard hostname, then in a matching hostname").
    pub fn precedence(&self) -> (Reverse<usize>, Reverse<usize>) {
        match self {
            Self::Any => (Reverse(0), Reverse(0)),
            Self::Exact(h) => (Reverse(h.len()), Reverse(h.len())),
            Self::Wildcard(s) => (Reverse(0), Reverse(s.len() + 2)),
        }
    }

    /// A regular expression (Rust `regex` syntax, as Praxis compiles it) that
    /// matches a `Host` header value naming a host this pattern admits: any
    /// case, optional trailing dot, optional port. `None` for any host.
    pub fn host_header_regex(&self) -> Option<String> {
        let name = match self {
            Self::Any => return None,
            Self::Exact(h) => regex::escape(h),
            Self::Wildcard(s) => format!("[^:]+\\.{}", regex::escape(s)),
        };
        Some(format!("(?i)^{name}\\.?(?::[0-9]*)?$"))
    }
}

/// Whether `name` ends in `.suffix` with at least one label before it.
fn below(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() + 1
        && name.ends_with(suffix)
        && name.as_bytes().get(name.len() - suffix.len() - 1) == Some(&b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(h: &str) -> HostPattern {
        HostPattern::parse(Some(h))
    }

    #[test]
    fn parses_exact_wildcard_and_any() {
        assert_eq!(
            p("Foo.Example.com"),
            HostPattern::Exact("foo.example.com".into())
        );
        assert_eq!(
            p("*.example.com"),
            HostPattern::Wildcard("example.com".into())
        );
        assert_eq!(HostPattern::parse(None), HostPattern::Any);
        assert_eq!(
            p("*.example.com").router_host().as_deref(),
            Some("*.example.com")
        );
        assert_eq!(HostPattern::Any.router_host(), None);
    }

    #[test]
    fn nesting_follows_the_spec() {
        assert!(p("foo.example.com").strictly_within(&p("*.example.com")));
        assert!(p("a.b.example.com").strictly_within(&p("*.example.com")));
        assert!(p("*.b.example.com").strictly_within(&p("*.example.com")));
        assert!(p("foo.example.com").strictly_within(&HostPattern::Any));
        assert!(!p("example.com").strictly_within(&p("*.example.com")));
        assert!(!p("fooexample.com").strictly_within(&p("*.example.com")));
        assert!(!p("*.example.com").strictly_within(&p("*.example.com")));
        assert!(!p("*.example.com").strictly_within(&p("foo.example.com")));
        assert!(!HostPattern::Any.strictly_within(&HostPattern::Any));
        assert!(p("a.example.com").overlaps(&p("*.example.com")));
        assert!(p("*.example.com").overlaps(&p("a.example.com")));
        assert!(!p("a.example.com").overlaps(&p("b.example.com")));
        assert!(!p("*.a.com").overlaps(&p("*.b.com")));
    }

    #[test]
    fn more_specific_hostnames_sort_first() {
        let mut patterns = [
            HostPattern::Any,
            p("*.example.com"),
            p("a.example.com"),
            p("*.b.example.com"),
            p("long.a.example.com"),
        ];
        patterns.sort_by_key(HostPattern::precedence);
        assert_eq!(
            patterns,
            [
                p("long.a.example.com"),
                p("a.example.com"),
                p("*.b.example.com"),
                p("*.example.com"),
                HostPattern::Any
            ]
        );
    }

    #[test]
    fn host_header_regex_admits_case_port_and_root_dot() {
        let exact = regex::Regex::new(&p("foo.example.com").host_header_regex().unwrap()).unwrap();
        for host in [
            "foo.example.com",
            "FOO.example.com",
            "foo.example.com:8080",
            "foo.example.com.",
        ] {
            assert!(exact.is_match(host), "{host} should match");
        }
        for host in [
            "xfoo.example.com",
            "foo.example.com.evil",
            "foo-example.com",
        ] {
            assert!(!exact.is_match(host), "{host} should not match");
        }
        let wildcard = regex::Regex::new(&p("*.example.com").host_header_regex().unwrap()).unwrap();
        for host in ["a.example.com", "a.b.example.com:80"] {
            assert!(wildcard.is_match(host), "{host} should match");
        }
        for host in ["example.com", ".example.com", "aexample.com"] {
            assert!(!wildcard.is_match(host), "{host} should not match");
        }
        assert_eq!(HostPattern::Any.host_header_regex(), None);
    }
}
