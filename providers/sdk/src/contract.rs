//! What every world with cluster access shares in its generated types:
//! the error constructors, `?` on cluster calls, and the capability helpers.
//! Each world's bindings generate their own (identical) `error` and
//! `capability` types, so the helpers are written once here and stamped
//! into each world's module.

/// Implements the shared helpers for the `Error`, `TemporaryError` and
/// `Capability` types in scope where it is invoked, and for
/// `crate::cluster::ClusterError`.
macro_rules! contract_helpers {
    () => {
        /// Seconds after which the host retries a step that lost a write race.
        pub const CONFLICT_RETRY_SECONDS: u32 = 2;
        /// Seconds after which the host retries after an object was missing or the
        /// API server failed.
        pub const TRANSIENT_RETRY_SECONDS: u32 = 5;

        impl Error {
            /// The request can never work as it is.
            pub fn invalid_input(message: impl Into<String>) -> Self {
                Self::InvalidInput(message.into())
            }

            /// Not possible yet; the host retries after `retry_after_seconds`.
            pub fn temporary(message: impl Into<String>, retry_after_seconds: u32) -> Self {
                Self::Temporary(TemporaryError {
                    message: message.into(),
                    retry_after_seconds,
                })
            }

            /// The target workload does not exist.
            pub fn target_missing(message: impl Into<String>) -> Self {
                Self::TargetMissing(message.into())
            }

            /// Anything else.
            pub fn failed(message: impl Into<String>) -> Self {
                Self::Failed(message.into())
            }
        }

        /// Lets a step use `?` on cluster calls. Races and transient API trouble
        /// become `temporary` (the host retries); a denied call is a bug in the
        /// provider's scope and a rejected object a bug in what it sent, so both are
        /// `failed`. `not-found` is `temporary` because the contract treats "an object
        /// not there yet" as such; map a missing *target* to `target-missing` yourself.
        impl From<crate::cluster::ClusterError> for Error {
            fn from(err: crate::cluster::ClusterError) -> Self {
                match err {
                    crate::cluster::ClusterError::Denied(m) => Self::failed(format!("denied: {m}")),
                    crate::cluster::ClusterError::NotFound(m) => {
                        Self::temporary(format!("not found: {m}"), TRANSIENT_RETRY_SECONDS)
                    }
                    crate::cluster::ClusterError::Conflict(m) => {
                        Self::temporary(format!("conflict: {m}"), CONFLICT_RETRY_SECONDS)
                    }
                    crate::cluster::ClusterError::Invalid(m) => {
                        Self::failed(format!("rejected by the API server: {m}"))
                    }
                    crate::cluster::ClusterError::Api(m) => {
                        Self::temporary(format!("API server: {m}"), TRANSIENT_RETRY_SECONDS)
                    }
                }
            }
        }

        impl Capability {
            /// A rule for kinds of one API group (`""` for the core group).
            pub fn new(
                api_group: &str,
                kinds: &[&str],
                verbs: &[Verb],
                namespace: NamespaceScope,
            ) -> Self {
                Self {
                    api_group: api_group.to_string(),
                    kinds: kinds.iter().map(|k| k.to_string()).collect(),
                    verbs: verbs.to_vec(),
                    namespace,
                    names: Vec::new(),
                }
            }

            /// A rule for one k8s-openapi kind, e.g. `Capability::of::<ConfigMap>(..)`.
            pub fn of<K: ::k8s_openapi::Resource>(
                verbs: &[Verb],
                namespace: NamespaceScope,
            ) -> Self {
                Self::new(K::GROUP, &[K::KIND], verbs, namespace)
            }

            /// Restricts the rule to these object names: exact names, or a prefix
            /// and a final `*`; `{mount}` stands for the mount's uid (see
            /// `Mount::own_name`), `{target}` for the target workload's name
            /// (exact names only) and, for connection providers, `{client}` for
            /// the client's id (`Client::own_name`). A placeholder followed
            /// directly by `*` is refused when the module is loaded.
            pub fn named(mut self, names: &[&str]) -> Self {
                self.names = names.iter().map(|n| n.to_string()).collect();
                self
            }
        }
    };
}

pub(crate) use contract_helpers;
