//! What config generation refuses, and the limits it refuses by.

/// The `reason` of a route condition for a rule Praxis cannot express.
pub const UNSUPPORTED_VALUE: &str = "UnsupportedValue";

/// The largest config Pontoon writes: a ConfigMap holds at most 1 MiB,
/// its metadata included.
pub const MAX_CONFIG_BYTES: usize = 1_000_000;

/// Praxis's limit of branches in one config.
pub const MAX_BRANCHES: usize = 256;

/// Praxis's longest upstream timeout (one hour): a cluster's, and a retry
/// policy's per attempt and per request.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// A rule that Praxis cannot express: put it on the route's status
/// (`reason` [`UNSUPPORTED_VALUE`], `message`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuleRefusal {
    pub route_namespace: String,
    pub route_name: String,
    /// Index in the HTTPRoute's `spec.rules`.
    pub rule_index: usize,
    /// Why, naming the match or filter: `rule 1 match 0: queryParams ...`.
    pub message: String,
}

impl RuleRefusal {
    pub fn reason(&self) -> &'static str {
        UNSUPPORTED_VALUE
    }
}

impl std::fmt::Display for RuleRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HTTPRoute {}/{} {}",
            self.route_namespace, self.route_name, self.message
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Rules Praxis cannot express; [`check_rule`] judges each beforehand.
    #[error("{} rule(s) cannot be expressed in Praxis: {}", .0.len(), join(.0))]
    UnsupportedRules(Vec<RuleRefusal>),
    #[error("listeners {first} and {second} share port {port} with different protocols")]
    PortConflict {
        port: u16,
        first: String,
        second: String,
    },
    #[error("listeners {first} and {second} share port {port} and hostname {hostname}")]
    HostnameConflict {
        port: u16,
        hostname: String,
        first: String,
        second: String,
    },
    /// Praxis picks a certificate by a wildcard SNI name only with at least
    /// three labels.
    #[error(
        "HTTPS listener {listener} shares port {port} with other listeners, so its certificate \
         is chosen by SNI, and Praxis matches a wildcard server name only with at least three \
         labels (*.example.com), not {hostname}; give it a longer hostname or a port of its own"
    )]
    ShortWildcard {
        listener: String,
        hostname: String,
        port: u16,
    },
    #[error("HTTPS listener {listener} has no certificate")]
    MissingCertificate { listener: String },
    /// Praxis refuses to start without a listener.
    #[error("no listener can be served")]
    NoListeners,
    /// Each header RegularExpression and each hostname-precedence classifier
    /// is a Praxis branch; Praxis allows [`MAX_BRANCHES`] per config.
    #[error(
        "the config needs {count} branches (header regular expressions, hostname precedence \
         classifiers) and Praxis allows {MAX_BRANCHES}; use fewer distinct header regular \
         expressions or overlapping hostnames on this Gateway"
    )]
    TooManyBranches { count: usize },
    #[error(
        "the config is {bytes} bytes and a ConfigMap holds {MAX_CONFIG_BYTES}; split the \
         routes over more Gateways"
    )]
    TooLarge { bytes: usize },
    #[error("cannot write the Praxis config: {0}")]
    Json(String),
}

fn join(refusals: &[RuleRefusal]) -> String {
    refusals
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
