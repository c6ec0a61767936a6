//! What `pontoon bridge` reads of the workload a developer names, with the
//! developer's own rights: that it exists, its container, the ports that
//! container declares, and (for `-- COMMAND`) the container's environment.

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::{ConfigMap, Container, Pod, PodSpec, Secret},
};
use kube::{Api, Client};
use pontoon_provider_sdk::target::{Target, TargetKind};

use crate::controller_support::not_found;

/// The workload's pod template: what its pods run.
pub struct Workload {
    pub target: Target,
    pub namespace: String,
    pub spec: PodSpec,
}

impl Workload {
    /// Reads `target` in `namespace`; a clear error when it does not exist
    /// or the developer may not read it.
    pub async fn read(client: &Client, namespace: &str, target: &Target) -> anyhow::Result<Self> {
        let missing = |err: kube::Error| -> anyhow::Error {
            if not_found(&err) {
                anyhow::anyhow!(
                    "there is no {} `{}` in namespace `{namespace}` (kubectl get {} -n {namespace})",
                    target.kind.kind().to_lowercase(),
                    target.name,
                    target.kind.short_name()
                )
            } else {
                anyhow::Error::new(err)
                    .context(format!("cannot read {target} in namespace `{namespace}`"))
            }
        };
        let spec = match target.kind {
            TargetKind::Deployment => Api::<Deployment>::namespaced(client.clone(), namespace)
                .get(&target.name)
                .await
                .map_err(missing)?
                .spec
                .and_then(|s| s.template.spec),
            TargetKind::StatefulSet => Api::<StatefulSet>::namespaced(client.clone(), namespace)
                .get(&target.name)
                .await
                .map_err(missing)?
                .spec
                .and_then(|s| s.template.spec),
            TargetKind::Pod => {
                Api::<Pod>::namespaced(client.clone(), namespace)
                    .get(&target.name)
                    .await
                    .map_err(missing)?
                    .spec
            }
        };
        Ok(Self {
            target: target.clone(),
            namespace: namespace.to_string(),
            spec: spec.unwrap_or_default(),
        })
    }

    /// The container named, or the only one.
    pub fn container(&self, name: Option<&str>) -> anyhow::Result<&Container> {
        let names: Vec<&str> = self
            .spec
            .containers
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        match name {
            Some(name) => self
                .spec
                .containers
                .iter()
                .find(|c| c.name == name)
                .with_context(|| {
                    format!(
                        "{} in namespace `{}` has no container `{name}`; it has {}",
                        self.target,
                        self.namespace,
                        quoted(&names)
                    )
                }),
            None if self.spec.containers.len() == 1 => Ok(&self.spec.containers[0]),
            None => bail!(
                "{} in namespace `{}` has {} containers ({}): say which with --container",
                self.target,
                self.namespace,
                names.len(),
                quoted(&names)
            ),
        }
    }
}

/// The TCP ports a container declares.
pub fn declared_ports(container: &Container) -> Vec<u16> {
    container
        .ports
        .iter()
        .flatten()
        .filter(|p| p.protocol.as_deref().is_none_or(|p| p == "TCP"))
        .filter_map(|p| u16::try_from(p.container_port).ok())
        .collect()
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The container's environment as its pods see it (`env`, `envFrom`), read
/// with the developer's rights, and what could not be read, named.
pub async fn environment(
    client: &Client,
    namespace: &str,
    container: &Container,
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut env = BTreeMap::new();
    let mut unreadable = Vec::new();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for source in container.env_from.iter().flatten() {
        let prefix = source.prefix.clone().unwrap_or_default();
        if let Some(cm) = &source.config_map_ref {
            match config_maps.get(&cm.name).await {
                Ok(found) => env.extend(
                    found
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (format!("{prefix}{k}"), v)),
                ),
                Err(err) if cm.optional == Some(true) && not_found(&err) => {}
                Err(err) => {
                    unreadable.push(format!("envFrom ConfigMap `{}`: {}", cm.name, why(&err)))
                }
            }
        }
        if let Some(secret) = &source.secret_ref {
            match secrets.get(&secret.name).await {
                Ok(found) => {
                    env.extend(found.data.unwrap_or_default().into_iter().map(|(k, v)| {
                        (
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v.0).into_owned(),
                        )
                    }))
                }
                Err(err) if secret.optional == Some(true) && not_found(&err) => {}
                Err(err) => {
                    unreadable.push(format!("envFrom Secret `{}`: {}", secret.name, why(&err)))
                }
            }
        }
    }
    for var in container.env.iter().flatten() {
        if let Some(value) = &var.value {
            env.insert(var.name.clone(), expand(value, &env));
            continue;
        }
        let Some(from) = &var.value_from else {
            env.insert(var.name.clone(), String::new());
            continue;
        };
        if let Some(key) = &from.config_map_key_ref {
            match config_maps.get(&key.name).await {
                Ok(found) => match found.data.and_then(|d| d.get(&key.key).cloned()) {
                    Some(value) => {
                        env.insert(var.name.clone(), value);
                    }
                    None if key.optional == Some(true) => {}
                    None => unreadable.push(format!(
                        "{}: ConfigMap `{}` has no key `{}`",
                        var.name, key.name, key.key
                    )),
                },
                Err(err) => unreadable.push(format!(
                    "{}: ConfigMap `{}`: {}",
                    var.name,
                    key.name,
                    why(&err)
                )),
            }
        } else if let Some(key) = &from.secret_key_ref {
            match secrets.get(&key.name).await {
                Ok(found) => match found.data.and_then(|d| d.get(&key.key).cloned()) {
                    Some(value) => {
                        env.insert(
                            var.name.clone(),
                            String::from_utf8_lossy(&value.0).into_owned(),
                        );
                    }
                    None if key.optional == Some(true) => {}
                    None => unreadable.push(format!(
                        "{}: Secret `{}` has no key `{}`",
                        var.name, key.name, key.key
                    )),
                },
                Err(err) => unreadable.push(format!(
                    "{}: Secret `{}`: {}",
                    var.name,
                    key.name,
                    why(&err)
                )),
            }
        } else {
            // fieldRef / resourceFieldRef: what a pod knows of itself.
            unreadable.push(format!(
                "{}: set from the pod itself (fieldRef or resourceFieldRef), which a local process has not",
                var.name
            ));
        }
    }
    (env, unreadable)
}

fn why(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if status.code == 403 => "you may not read it".into(),
        kube::Error::Api(status) if status.code == 404 => "it does not exist".into(),
        other => other.to_string(),
    }
}

/// `$(VAR)` references to variables defined before, as a kubelet expands
/// them (`$$` escapes).
fn expand(value: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some(found) = env.get(&inner[..end])
        {
            out.push_str(found);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_expand_as_a_kubelet_expands_them() {
        let env = BTreeMap::from([("HOST".to_string(), "db".to_string())]);
        assert_eq!(
            expand("postgres://$(HOST):5432", &env),
            "postgres://db:5432"
        );
        assert_eq!(expand("$$(HOST) $(NONE)", &env), "$(HOST) $(NONE)");
    }
}
