//! Which namespaces mounts may target: the administrator's list
//! (`--mount-namespaces`, `--mount-excluded-namespaces`; the chart's
//! `mounts.targetNamespaces` and `mounts.excludedNamespaces`). The chart's
//! admission policy refuses other mounts at creation; the operator checks
//! again before it touches anything, so a mount created while the policy is
//! absent still cannot reach a namespace outside the list.

use std::{collections::BTreeSet, fmt};

/// The namespaces mounts may target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetNamespaces {
    /// `None`: every namespace (but the excluded ones).
    allowed: Option<BTreeSet<String>>,
    excluded: BTreeSet<String>,
    /// No list was given (and the cluster is not single-tenant): no
    /// namespace, and the refusal says which flag gives one.
    unset: bool,
}

impl Default for TargetNamespaces {
    /// Every namespace but `kube-system` (the chart's default; the
    /// operator's own namespace is added by [`TargetNamespaces::new`]).
    fn default() -> Self {
        Self {
            allowed: None,
            excluded: ["kube-system".to_string()].into(),
            unset: false,
        }
    }
}

impl TargetNamespaces {
    /// `allowed` as given on the command line (`*` for every namespace;
    /// empty means every namespace too), `excluded` likewise; the operator's
    /// own namespace is always excluded: a mount there could patch the
    /// operator's own pods.
    pub fn new<'a>(
        allowed: impl IntoIterator<Item = &'a str>,
        excluded: impl IntoIterator<Item = &'a str>,
        operator_namespace: &str,
    ) -> Self {
        let allowed: BTreeSet<String> = allowed
            .into_iter()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect();
        let mut excluded: BTreeSet<String> = excluded
            .into_iter()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect();
        if !operator_namespace.is_empty() {
            excluded.insert(operator_namespace.to_string());
        }
        Self {
            allowed: (!allowed.is_empty() && !allowed.contains("*")).then_some(allowed),
            excluded,
            unset: false,
        }
    }

    /// No namespace: what an operator of a shared cluster allows when its
    /// administrator named none (`--mount-namespaces` has a default, every
    /// namespace, only with `--single-tenant`).
    pub fn unset() -> Self {
        Self {
            allowed: Some(BTreeSet::new()),
            excluded: BTreeSet::new(),
            unset: true,
        }
    }

    /// `Err` with what to change when a mount may not target `namespace`.
    pub fn permit(&self, namespace: &str) -> Result<(), String> {
        let listed = self
            .allowed
            .as_ref()
            .is_none_or(|allowed| allowed.contains(namespace));
        if listed && !self.excluded.contains(namespace) {
            return Ok(());
        }
        if self.unset {
            return Err(format!(
                "mounts may not target namespace `{namespace}`: the operator was given no list \
                 of namespaces mounts may target (--mount-namespaces, Helm value \
                 mounts.targetNamespaces), and without --single-tenant it allows none by default"
            ));
        }
        Err(format!(
            "mounts may not target namespace `{namespace}`: the operator lets them target {self}; \
             an administrator changes that with --mount-namespaces and \
             --mount-excluded-namespaces (Helm values mounts.targetNamespaces and \
             mounts.excludedNamespaces)"
        ))
    }
}

impl fmt::Display for TargetNamespaces {
    /// `every namespace but kube-system, ops` or `only shop, dev`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |set: &BTreeSet<String>| {
            set.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match &self.allowed {
            None if self.excluded.is_empty() => f.write_str("every namespace"),
            None => write!(f, "every namespace but {}", list(&self.excluded)),
            Some(allowed) => {
                let usable: BTreeSet<String> =
                    allowed.difference(&self.excluded).cloned().collect();
                if usable.is_empty() {
                    f.write_str("no namespace")
                } else {
                    write!(f, "only {}", list(&usable))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_default_every_namespace_but_kube_system_and_the_operators() {
        let policy = TargetNamespaces::new(["*"], ["kube-system"], "gefyra");
        assert_eq!(policy.permit("shop"), Ok(()));
        assert!(policy.permit("kube-system").is_err());
        let refusal = policy.permit("gefyra").unwrap_err();
        assert_eq!(
            refusal,
            "mounts may not target namespace `gefyra`: the operator lets them target every \
             namespace but `gefyra`, `kube-system`; an administrator changes that with \
             --mount-namespaces and --mount-excluded-namespaces (Helm values \
             mounts.targetNamespaces and mounts.excludedNamespaces)"
        );
        // No list at all means every namespace as well.
        assert_eq!(TargetNamespaces::new([], [], "ops").permit("shop"), Ok(()));
    }

    #[test]
    fn a_list_allows_exactly_its_namespaces_less_the_excluded() {
        let policy = TargetNamespaces::new(["shop", " dev ", "ops"], [], "ops");
        assert_eq!(policy.permit("shop"), Ok(()));
        assert_eq!(policy.permit("dev"), Ok(()));
        assert!(policy.permit("ops").is_err(), "the operator's own");
        let refusal = policy.permit("bank").unwrap_err();
        assert!(
            refusal.contains("the operator lets them target only `dev`, `shop`;"),
            "{refusal}"
        );
        let nothing = TargetNamespaces::new(["ops"], [], "ops");
        assert!(
            nothing
                .permit("ops")
                .unwrap_err()
                .contains("target no namespace;")
        );
    }

    #[test]
    fn without_a_list_a_shared_clusters_operator_allows_none_and_says_which_flag() {
        let refusal = TargetNamespaces::unset().permit("shop").unwrap_err();
        assert!(
            refusal.contains("was given no list")
                && refusal.contains("--mount-namespaces")
                && refusal.contains("--single-tenant"),
            "{refusal}"
        );
    }
}
