//! Capability scopes: what a provider may do on the cluster.
//!
//! A module declares its scope in `metadata` with symbolic namespaces
//! (`target`, `operator`); the host resolves them per mount and checks every
//! cluster call against the result before it is sent.

use std::fmt;

use super::bindings::{Capability, NamespaceScope, Verb};

/// The concrete namespaces a symbolic scope refers to for one mount.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Namespaces {
    pub target: String,
    pub operator: String,
}

/// In a capability's `names`, the mount's uid: `{mount}-shadow`,
/// `{mount}-*` (a trailing `*` matches any rest of the name). A uid, not the
/// mount's name: mounts named alike in two namespaces, or `web` beside
/// `web-db`, would share objects by name.
pub const MOUNT_PLACEHOLDER: &str = "{mount}";
/// In a capability's `names`, the name of the mount's target workload
/// (`deploy/web`: `web`), for objects named after it (`{target}-gefyra`).
/// Exact names only: a workload's name is no prefix only it has.
pub const TARGET_PLACEHOLDER: &str = "{target}";

/// In a capability's `names` of a connection provider, the id of the
/// client a call serves (`pontoon-relay-{client}`): a hash of the client's
/// name, so clients named alike never share an object.
pub const CLIENT_PLACEHOLDER: &str = "{client}";

/// What the placeholders of a scope stand for, for one call; empty for
/// what the call does not serve (a placeholder left as written matches no
/// object: no name has braces).
#[derive(Clone, Copy, Debug)]
pub struct Placeholders<'a> {
    /// The mount's uid.
    pub mount: &'a str,
    /// The name of its target workload.
    pub target: &'a str,
    /// The client's id (connection providers).
    pub client: &'a str,
}

/// Why a declared name pattern is refused at load, if it is: a placeholder
/// followed directly by `*` (`{mount}*` for a mount `web` would match
/// `web-db-credentials` had `{mount}` been a name), or `{target}` with any
/// `*`.
pub fn name_problem(pattern: &str) -> Option<String> {
    if pattern.contains(&format!("{CLIENT_PLACEHOLDER}*")) {
        return Some(format!(
            "name `{pattern}`: `{CLIENT_PLACEHOLDER}` may not be followed directly by `*`; write \
             `{CLIENT_PLACEHOLDER}-*` for the objects named after the client"
        ));
    }
    if pattern.contains(&format!("{MOUNT_PLACEHOLDER}*")) {
        return Some(format!(
            "name `{pattern}`: `{MOUNT_PLACEHOLDER}` may not be followed directly by `*`; write \
             `{MOUNT_PLACEHOLDER}-*` for the objects named after the mount"
        ));
    }
    if pattern.contains(TARGET_PLACEHOLDER) && pattern.contains('*') {
        return Some(format!(
            "name `{pattern}`: a name with `{TARGET_PLACEHOLDER}` must be exact (no `*`): the \
             target's name is a prefix of other workloads' names"
        ));
    }
    if pattern.trim_end_matches('*').contains('*') {
        return Some(format!("name `{pattern}`: `*` may only end a name"));
    }
    None
}

/// One capability with its namespace resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    api_group: String,
    kinds: Vec<String>,
    verbs: Vec<Verb>,
    namespace: String,
    names: Vec<String>,
}

/// A provider's scope for one mount.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    rules: Vec<Rule>,
    /// What `target` and `operator` stood for (for denial messages).
    namespaces: Namespaces,
}

/// A request as the scope sees it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub verb: Verb,
    pub namespace: &'a str,
    /// `None` for `list`.
    pub name: Option<&'a str>,
}

impl Request<'_> {
    fn api_group(&self) -> &str {
        // `apps/v1` -> `apps`; the core group is written `v1`.
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }
}

impl fmt::Display for Request<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", verb_name(self.verb), self.kind)?;
        if let Some(name) = self.name {
            write!(f, " `{name}`")?;
        }
        write!(
            f,
            " ({}) in namespace `{}`",
            self.api_version, self.namespace
        )
    }
}

/// `pattern` is a name, or a prefix followed by `*`.
fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Every verb of the contract.
pub(super) const VERBS: [Verb; 7] = [
    Verb::Get,
    Verb::List,
    Verb::Create,
    Verb::Apply,
    Verb::Patch,
    Verb::Delete,
    Verb::Exec,
];

/// The verb spelled `name` (as [`verb_name`] spells it).
pub(crate) fn verb_named(name: &str) -> Option<Verb> {
    VERBS.into_iter().find(|v| verb_name(*v) == name)
}

pub(crate) fn verb_name(verb: Verb) -> &'static str {
    match verb {
        Verb::Get => "get",
        Verb::List => "list",
        Verb::Create => "create",
        Verb::Apply => "apply",
        Verb::Patch => "patch",
        Verb::Delete => "delete",
        Verb::Exec => "exec",
    }
}

impl Scope {
    /// Resolves a module's declared capabilities for one mount (its uid and
    /// target's name for the placeholders in names).
    pub fn resolve(
        capabilities: &[Capability],
        namespaces: &Namespaces,
        placeholders: Placeholders<'_>,
    ) -> Self {
        let rules = capabilities
            .iter()
            .map(|c| Rule {
                api_group: c.api_group.clone(),
                kinds: c.kinds.clone(),
                verbs: c.verbs.clone(),
                namespace: match c.namespace {
                    NamespaceScope::Target => namespaces.target.clone(),
                    NamespaceScope::Operator => namespaces.operator.clone(),
                },
                names: c
                    .names
                    .iter()
                    // A placeholder without a value stays as written: no
                    // object can have a name with braces. (Dropping the name
                    // would leave the rule without names: any name.)
                    .map(|n| {
                        [
                            (MOUNT_PLACEHOLDER, placeholders.mount),
                            (TARGET_PLACEHOLDER, placeholders.target),
                            (CLIENT_PLACEHOLDER, placeholders.client),
                        ]
                        .into_iter()
                        .filter(|(_, value)| !value.is_empty())
                        .fold(n.clone(), |n, (placeholder, value)| {
                            n.replace(placeholder, value)
                        })
                    })
                    .collect(),
            })
            .collect();
        Self {
            rules,
            namespaces: namespaces.clone(),
        }
    }

    /// `Ok` if one rule allows the request; otherwise a message naming what was denied.
    pub fn check(&self, request: &Request<'_>) -> Result<(), String> {
        let group = request.api_group();
        let allowed = self.rules.iter().any(|rule| {
            rule.api_group == group
                && rule.kinds.iter().any(|k| k == "*" || k == request.kind)
                && rule.verbs.contains(&request.verb)
                && rule.namespace == request.namespace
                && (rule.names.is_empty()
                    || request
                        .name
                        .is_some_and(|name| rule.names.iter().any(|n| name_matches(n, name))))
        });
        if allowed {
            Ok(())
        } else {
            Err(format!(
                "{request} is outside the provider's capability scope; {}",
                self.hint(request)
            ))
        }
    }
}

/// An API group as a person writes it in a scope: the core group is the
/// empty string, which a bare pair of backticks would hide.
fn group_name(group: &str) -> String {
    if group.is_empty() {
        "`\"\"` (core)".to_string()
    } else {
        format!("`{group}`")
    }
}

impl Scope {
    /// What to declare for `request` to be allowed, or why nothing can be.
    fn hint(&self, request: &Request<'_>) -> String {
        let scope = if request.namespace == self.namespaces.target {
            "target"
        } else if request.namespace == self.namespaces.operator {
            "operator"
        } else {
            return format!(
                "a provider reaches only the mount's target namespace (`{}`) and the \
                 operator's (`{}`)",
                self.namespaces.target, self.namespaces.operator
            );
        };
        format!(
            "to allow it, add to the module's metadata scope a capability with api-group \
             {}, kind `{}`, verb `{}`, namespace `{scope}`{}",
            group_name(request.api_group()),
            request.kind,
            verb_name(request.verb),
            request
                .name
                .map(|n| format!(" (names empty, or including `{n}`)"))
                .unwrap_or_default()
        )
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A capability as a module declares it (also for the grants' tests).
    pub(crate) fn capability(
        group: &str,
        kinds: &[&str],
        verbs: &[Verb],
        ns: NamespaceScope,
        names: &[&str],
    ) -> Capability {
        Capability {
            api_group: group.into(),
            kinds: kinds.iter().map(|s| s.to_string()).collect(),
            verbs: verbs.to_vec(),
            namespace: ns,
            names: names.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn scope() -> Scope {
        let caps = [
            capability(
                "apps",
                &["Deployment", "StatefulSet"],
                &[Verb::Get, Verb::Apply],
                NamespaceScope::Target,
                &[],
            ),
            capability(
                "",
                &["Pod"],
                &[Verb::List, Verb::Exec],
                NamespaceScope::Target,
                &[],
            ),
            capability(
                "",
                &["ConfigMap"],
                &[Verb::Get, Verb::Patch],
                NamespaceScope::Operator,
                &["restore"],
            ),
        ];
        Scope::resolve(
            &caps,
            &Namespaces {
                target: "shop".into(),
                operator: "pontoon".into(),
            },
            Placeholders {
                mount: "u-1",
                target: "web",
                client: "",
            },
        )
    }

    fn req<'a>(
        api_version: &'a str,
        kind: &'a str,
        verb: Verb,
        namespace: &'a str,
        name: Option<&'a str>,
    ) -> Request<'a> {
        Request {
            api_version,
            kind,
            verb,
            namespace,
            name,
        }
    }

    #[test]
    fn allows_what_a_rule_names() {
        let s = scope();
        assert!(
            s.check(&req(
                "apps/v1",
                "Deployment",
                Verb::Apply,
                "shop",
                Some("web")
            ))
            .is_ok()
        );
        assert!(s.check(&req("v1", "Pod", Verb::List, "shop", None)).is_ok());
        assert!(
            s.check(&req("v1", "Pod", Verb::Exec, "shop", Some("web-1")))
                .is_ok()
        );
        assert!(
            s.check(&req(
                "v1",
                "ConfigMap",
                Verb::Patch,
                "pontoon",
                Some("restore")
            ))
            .is_ok()
        );
    }

    #[test]
    fn denies_other_namespaces_kinds_verbs_groups_and_names() {
        let s = scope();
        let denied = [
            req(
                "apps/v1",
                "Deployment",
                Verb::Get,
                "kube-system",
                Some("web"),
            ),
            req("v1", "Secret", Verb::Get, "shop", Some("token")),
            req("apps/v1", "Deployment", Verb::Delete, "shop", Some("web")),
            req(
                "extensions/v1beta1",
                "Deployment",
                Verb::Get,
                "shop",
                Some("web"),
            ),
            req("v1", "ConfigMap", Verb::Get, "pontoon", Some("other")),
            req("v1", "ConfigMap", Verb::List, "pontoon", None),
            req("v1", "ConfigMap", Verb::Get, "shop", Some("restore")),
        ];
        for r in denied {
            assert!(s.check(&r).is_err(), "{r} should be denied");
        }
    }

    #[test]
    fn denial_says_what_was_asked() {
        let err = scope()
            .check(&req(
                "v1",
                "Secret",
                Verb::Get,
                "kube-system",
                Some("admin"),
            ))
            .unwrap_err();
        assert_eq!(
            err,
            "get Secret `admin` (v1) in namespace `kube-system` is outside the provider's capability scope; a provider reaches only the mount's target namespace (`shop`) and the operator's (`pontoon`)"
        );
    }

    #[test]
    fn a_denial_in_the_target_namespace_names_what_to_declare() {
        let err = scope()
            .check(&req("v1", "Pod", Verb::Patch, "shop", Some("web")))
            .unwrap_err();
        assert!(
            err.ends_with(
                "to allow it, add to the module's metadata scope a capability with api-group \
                 `\"\"` (core), kind `Pod`, verb `patch`, namespace `target` (names empty, \
                 or including `web`)"
            ),
            "{err}"
        );
        let err = scope()
            .check(&req("apps/v1", "Deployment", Verb::Delete, "shop", None))
            .unwrap_err();
        assert!(err.contains("api-group `apps`, kind `Deployment`"), "{err}");
    }

    #[test]
    fn an_empty_scope_allows_nothing() {
        let s = Scope::default();
        assert!(
            s.check(&req("v1", "Pod", Verb::Get, "shop", Some("p")))
                .is_err()
        );
    }

    #[test]
    fn wildcard_kind_covers_the_group_only() {
        let caps = [capability(
            "gefyra.dev",
            &["*"],
            &[Verb::Get],
            NamespaceScope::Target,
            &[],
        )];
        let s = Scope::resolve(
            &caps,
            &Namespaces {
                target: "a".into(),
                operator: "b".into(),
            },
            Placeholders {
                mount: "m",
                target: "t",
                client: "",
            },
        );
        assert!(
            s.check(&req(
                "gefyra.dev/v1",
                "GefyraBridge",
                Verb::Get,
                "a",
                Some("x")
            ))
            .is_ok()
        );
        assert!(
            s.check(&req("v1", "Pod", Verb::Get, "a", Some("x")))
                .is_err()
        );
    }

    #[test]
    fn names_can_be_the_mounts_own_by_its_uid() {
        let caps = [capability(
            "",
            &["ConfigMap"],
            &[Verb::Get, Verb::Delete],
            NamespaceScope::Target,
            &["{mount}-*", "{mount}.settings"],
        )];
        let namespaces = Namespaces {
            target: "shop".into(),
            operator: "pontoon".into(),
        };
        let web = Placeholders {
            mount: "0c1f-77",
            target: "web",
            client: "",
        };
        let s = Scope::resolve(&caps, &namespaces, web);
        let get = |name| s.check(&req("v1", "ConfigMap", Verb::Get, "shop", Some(name)));
        assert!(get("0c1f-77-shadow").is_ok());
        assert!(get("0c1f-77.settings").is_ok());
        // A mount `web` no longer reaches `web-db-credentials`, nor another
        // mount's objects.
        assert!(get("web-db-credentials").is_err());
        assert!(get("0c1f-770-shadow").is_err());
        assert!(get("0c1f-77.settings.old").is_err());
        let denied = get("api-shadow").unwrap_err();
        assert!(
            denied.ends_with(
                "add to the module's metadata scope a capability with api-group `\"\"` (core), \
                 kind `ConfigMap`, verb `get`, namespace `target` (names empty, or including \
                 `api-shadow`)"
            ),
            "{denied}"
        );
        // Resolved per mount: a mount of the same name elsewhere has another uid.
        let other = Scope::resolve(
            &caps,
            &namespaces,
            Placeholders {
                mount: "9a9a-01",
                target: "web",
                client: "",
            },
        );
        assert!(
            other
                .check(&req(
                    "v1",
                    "ConfigMap",
                    Verb::Get,
                    "shop",
                    Some("0c1f-77-x")
                ))
                .is_err()
        );
    }

    #[test]
    fn target_names_are_granted_exactly() {
        let caps = [capability(
            "apps",
            &["Deployment"],
            &[Verb::Get, Verb::Apply, Verb::Delete],
            NamespaceScope::Target,
            &["{target}-gefyra"],
        )];
        let namespaces = Namespaces {
            target: "shop".into(),
            operator: "pontoon".into(),
        };
        let s = Scope::resolve(
            &caps,
            &namespaces,
            Placeholders {
                mount: "u-1",
                target: "web",
                client: "",
            },
        );
        let apply = |name| {
            s.check(&req(
                "apps/v1",
                "Deployment",
                Verb::Apply,
                "shop",
                Some(name),
            ))
        };
        assert!(apply("web-gefyra").is_ok());
        assert!(apply("web").is_err(), "not the target itself");
        assert!(apply("webshop-gefyra").is_err());
        assert!(apply("api-gefyra").is_err());
        let no_target = Scope::resolve(
            &caps,
            &namespaces,
            Placeholders {
                mount: "u-1",
                target: "",
                client: "",
            },
        );
        assert!(
            no_target
                .check(&req(
                    "apps/v1",
                    "Deployment",
                    Verb::Apply,
                    "shop",
                    Some("-gefyra")
                ))
                .is_err(),
            "no target: no name"
        );
    }

    #[test]
    fn a_placeholder_followed_by_a_wildcard_is_refused() {
        for (pattern, says) in [
            ("{mount}*", "may not be followed directly by `*`"),
            ("x-{mount}*", "may not be followed directly by `*`"),
            ("{target}-*", "must be exact"),
            ("{target}*", "must be exact"),
            ("a*b", "`*` may only end a name"),
        ] {
            let problem = name_problem(pattern).unwrap_or_default();
            assert!(problem.contains(says), "{pattern}: {problem}");
        }
        for fine in [
            "{mount}-*",
            "{mount}",
            "{target}-gefyra",
            "restore",
            "cm-*",
            "",
        ] {
            assert_eq!(name_problem(fine), None, "{fine}");
        }
    }
}
