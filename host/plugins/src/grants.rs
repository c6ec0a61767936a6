//! What an administrator allows each provider module (`--grants FILE`).
//!
//! A module declares its own capability scope, and the host enforces that
//! scope on every call; but a module can declare anything. With a grants
//! file, a provider module is loaded only if everything it declares is
//! within its grant; otherwise it is refused at load, naming each
//! capability in excess. The file maps module names to capabilities, in the
//! shape of the WIT `capability` record:
//!
//! ```yaml
//! carrier2mount:
//!   - apiGroup: apps
//!     kinds: [Deployment, StatefulSet]
//!     verbs: [get, apply, patch, delete]
//!     namespace: target              # or: operator
//!   - apiGroup: ""
//!     kinds: [ConfigMap]
//!     verbs: [get, create, patch, delete]
//!     namespace: operator
//!     names: [gefyra-carrier2-restore-configmap]   # absent or empty: any name
//! ```

use std::{collections::BTreeMap, path::Path};

use serde::Deserialize;

use super::{
    bindings::{Capability, NamespaceScope, Verb},
    scope::{VERBS, verb_name, verb_named},
};

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grant {
    #[serde(default)]
    pub api_group: String,
    pub kinds: Vec<String>,
    #[serde(deserialize_with = "verbs")]
    pub verbs: Vec<Verb>,
    pub namespace: GrantNamespace,
    #[serde(default)]
    pub names: Vec<String>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum GrantNamespace {
    Target,
    Operator,
}

/// Grants by module name.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Grants(BTreeMap<String, Vec<Grant>>);

/// Verbs by the names the scope uses in messages (`get`, `apply`, ...).
fn verbs<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<Verb>, D::Error> {
    Vec::<String>::deserialize(deserializer)?
        .iter()
        .map(|name| {
            verb_named(name).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "unknown verb `{name}`, expected one of {}",
                    VERBS.map(verb_name).join(", ")
                ))
            })
        })
        .collect()
}

impl GrantNamespace {
    fn of(scope: NamespaceScope) -> Self {
        match scope {
            NamespaceScope::Target => Self::Target,
            NamespaceScope::Operator => Self::Operator,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::Target => "the target namespace",
            Self::Operator => "the operator namespace",
        }
    }
}

impl Grant {
    /// Whether this grant allows `verb` on `kind` with the declared `names`.
    fn allows(
        &self,
        group: &str,
        kind: &str,
        verb: Verb,
        ns: GrantNamespace,
        names: &[String],
    ) -> bool {
        self.api_group == group
            && self.namespace == ns
            && self.kinds.iter().any(|k| k == "*" || k == kind)
            && self.verbs.contains(&verb)
            // Any name granted, or the module asks for named objects only,
            // each of them granted.
            && (self.names.is_empty()
                || (!names.is_empty() && names.iter().all(|n| self.names.contains(n))))
    }
}

impl Grants {
    /// Reads a grants file; the error names the file and what is wrong.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read the grants file {}: {e}", path.display()))?;
        let grants: Self = yaml_serde::from_str(&text)
            .map_err(|e| anyhow::anyhow!("the grants file {} is not valid: {e}", path.display()))?;
        let problems: Vec<String> = grants
            .0
            .iter()
            .flat_map(|(module, grants)| {
                grants
                    .iter()
                    .flat_map(|g| g.names.iter())
                    .filter_map(move |n| {
                        super::scope::name_problem(n).map(|p| format!("{module}: {p}"))
                    })
            })
            .collect();
        anyhow::ensure!(
            problems.is_empty(),
            "the grants file {} names objects no grant can be held to: {}",
            path.display(),
            problems.join("; ")
        );
        Ok(grants)
    }

    /// `Ok` if `module` may declare `scope`; else every declared capability
    /// outside its grant, one line each.
    pub fn check(&self, module: &str, scope: &[Capability]) -> Result<(), Vec<String>> {
        let granted = self.0.get(module).map(Vec::as_slice).unwrap_or_default();
        let mut excess = Vec::new();
        for capability in scope {
            let ns = GrantNamespace::of(capability.namespace);
            for kind in &capability.kinds {
                let denied: Vec<&str> = capability
                    .verbs
                    .iter()
                    .filter(|verb| {
                        !granted.iter().any(|g| {
                            g.allows(&capability.api_group, kind, **verb, ns, &capability.names)
                        })
                    })
                    .map(|verb| verb_name(*verb))
                    .collect();
                if denied.is_empty() {
                    continue;
                }
                excess.push(describe(&denied, kind, capability));
            }
        }
        if excess.is_empty() {
            Ok(())
        } else {
            Err(excess)
        }
    }
}

/// One kind of a capability in the words of the operator's refusals:
/// `get, patch Pod (core) in the target namespace, any name`.
pub fn describe(verbs: &[&str], kind: &str, capability: &Capability) -> String {
    let group = if capability.api_group.is_empty() {
        "core"
    } else {
        &capability.api_group
    };
    let names = if capability.names.is_empty() {
        "any name".to_string()
    } else {
        format!("names {}", capability.names.join(", "))
    };
    format!(
        "{} {kind} ({group}) in {}, {names}",
        verbs.join(", "),
        GrantNamespace::of(capability.namespace).describe()
    )
}

/// A module's declared scope, one line per kind, as [`describe`] words it.
pub fn describe_scope(scope: &[Capability]) -> Vec<String> {
    scope
        .iter()
        .flat_map(|capability| {
            let verbs: Vec<&str> = capability.verbs.iter().map(|v| verb_name(*v)).collect();
            capability
                .kinds
                .iter()
                .map(move |kind| describe(&verbs, kind, capability))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::tests::capability;

    fn grants() -> Grants {
        yaml_serde::from_str(
            r#"
mine:
  - apiGroup: apps
    kinds: [Deployment]
    verbs: [get, apply]
    namespace: target
  - kinds: [ConfigMap]
    verbs: [get, create]
    namespace: operator
    names: [restore]
"#,
        )
        .unwrap()
    }

    #[test]
    fn a_scope_within_the_grant_loads() {
        let scope = [
            capability(
                "apps",
                &["Deployment"],
                &[Verb::Get],
                NamespaceScope::Target,
                &[],
            ),
            capability(
                "",
                &["ConfigMap"],
                &[Verb::Create],
                NamespaceScope::Operator,
                &["restore"],
            ),
        ];
        assert_eq!(grants().check("mine", &scope), Ok(()));
    }

    #[test]
    fn every_capability_in_excess_is_named() {
        let scope = [
            capability(
                "apps",
                &["Deployment", "StatefulSet"],
                &[Verb::Get, Verb::Delete],
                NamespaceScope::Target,
                &[],
            ),
            capability("", &["Secret"], &[Verb::Get], NamespaceScope::Target, &[]),
            // Any ConfigMap, where only `restore` is granted.
            capability(
                "",
                &["ConfigMap"],
                &[Verb::Get],
                NamespaceScope::Operator,
                &[],
            ),
            // The right kind and verb, but in the other namespace.
            capability(
                "apps",
                &["Deployment"],
                &[Verb::Get],
                NamespaceScope::Operator,
                &[],
            ),
        ];
        let excess = grants().check("mine", &scope).unwrap_err();
        assert_eq!(
            excess,
            [
                "delete Deployment (apps) in the target namespace, any name",
                "get, delete StatefulSet (apps) in the target namespace, any name",
                "get Secret (core) in the target namespace, any name",
                "get ConfigMap (core) in the operator namespace, any name",
                "get Deployment (apps) in the operator namespace, any name",
            ]
        );
    }

    #[test]
    fn a_module_without_a_grant_may_declare_nothing() {
        let scope = [capability(
            "",
            &["Pod"],
            &[Verb::Get],
            NamespaceScope::Target,
            &[],
        )];
        assert_eq!(
            grants().check("theirs", &scope),
            Err(vec![
                "get Pod (core) in the target namespace, any name".to_string()
            ])
        );
        assert_eq!(grants().check("theirs", &[]), Ok(()));
    }

    #[test]
    fn a_grants_file_naming_a_placeholder_with_a_wildcard_is_refused_naming_it() {
        let dir = std::env::temp_dir().join(format!("grants-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("grants.yaml");
        std::fs::write(
            &path,
            "mine:\n- {kinds: [ConfigMap], verbs: [get], namespace: target, names: [\"{mount}*\"]}\n\
             - {kinds: [Secret], verbs: [get], namespace: target, names: [\"{target}-*\"]}\n",
        )
        .unwrap();
        let refused = Grants::read(&path).unwrap_err().to_string();
        assert!(
            refused.contains("names objects no grant can be held to")
                && refused.contains("mine: ")
                && refused.contains("{mount}*")
                && refused.contains("{target}-*"),
            "{refused}"
        );
        // The same names, scoped the way the guide says, load.
        std::fs::write(
            &path,
            "mine:\n- {kinds: [ConfigMap], verbs: [get], namespace: target, names: [\"{mount}-cache\", \"{target}-gefyra\"]}\n",
        )
        .unwrap();
        assert!(Grants::read(&path).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unknown_fields_and_verbs_are_errors() {
        let bad =
            yaml_serde::from_str::<Grants>("m: [{kinds: [Pod], verbs: [read], namespace: target}]");
        assert!(bad.unwrap_err().to_string().contains("read"));
        let bad =
            yaml_serde::from_str::<Grants>("m: [{kind: [Pod], verbs: [get], namespace: target}]");
        assert!(bad.unwrap_err().to_string().contains("kind"));
    }

    #[test]
    fn an_unknown_verb_is_answered_with_every_verb_there_is() {
        let bad = yaml_serde::from_str::<Grants>(
            "m: [{kinds: [Pod], verbs: [get, read], namespace: target}]",
        );
        let message = bad.unwrap_err().to_string();
        assert!(
            message.contains(
                "unknown verb `read`, expected one of get, list, create, apply, patch, delete, exec"
            ),
            "{message}"
        );
    }
}
