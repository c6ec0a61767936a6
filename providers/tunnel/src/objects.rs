//! The objects of one client's relay, as they are written: the Pod, the
//! Service in front of it, and the Role and RoleBinding that let the
//! developer (and nobody else this provider gives rights to) port-forward
//! into that one pod.
//!
//! Built from `Default` with only the fields the provider means to own:
//! server-side apply takes ownership of exactly what is sent.

use std::collections::BTreeMap;

use pontoon_provider_sdk::k8s_openapi::{
    api::{
        core::v1::{
            Capabilities, Container, ContainerPort, HTTPGetAction, Pod, PodSecurityContext,
            PodSpec, Probe, ResourceRequirements, SeccompProfile, SecurityContext, Service,
            ServicePort, ServiceSpec,
        },
        rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject},
    },
    apimachinery::pkg::{api::resource::Quantity, util::intstr::IntOrString},
};

use crate::{names, ports};

/// The relay's container, and where `pontoon relay` listens: sessions
/// (what `pontoon bridge` reaches through the port-forward) and health.
pub const CONTAINER: &str = "relay";
pub const SESSION_PORT: u16 = 7000;
pub const HEALTH_PORT: u16 = 7001;
/// The user of Pontoon's (distroless) image.
const NONROOT_UID: i64 = 65532;
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// One client, as its objects need it.
#[derive(Clone, Copy, Debug)]
pub struct Relay<'a> {
    /// The client's id (labels, names).
    pub id: &'a str,
    /// The client's name: the developer's Kubernetes user.
    pub client_name: &'a str,
    pub image: &'a str,
}

impl Relay<'_> {
    pub fn name(&self) -> String {
        names::relay(self.id)
    }

    /// The relay Service's DNS name: what bridges' endpoints name.
    pub fn service_host(&self, namespace: &str) -> String {
        format!("{}.{namespace}.svc.cluster.local", self.name())
    }

    /// The relay pod. A bare pod, not a Deployment: one relay per client,
    /// whose readiness *is* the session (ready while a client is
    /// connected), so a second pod during a rollout would split sessions.
    /// `restartPolicy: Always` restarts a crashed relay in place.
    pub fn pod(&self, namespace: &str) -> Pod {
        let http = |path: &str| {
            Some(HTTPGetAction {
                path: Some(path.to_string()),
                port: IntOrString::Int(HEALTH_PORT.into()),
                ..HTTPGetAction::default()
            })
        };
        let port = |name: &str, port: u16| ContainerPort {
            name: Some(name.to_string()),
            container_port: port.into(),
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        };
        let quantity = |q: &str| Quantity(q.to_string());
        let container = Container {
            name: CONTAINER.into(),
            image: Some(self.image.to_string()),
            args: Some(vec![
                "relay".into(),
                "--client".into(),
                self.client_name.to_string(),
                // Dialled by `/reachable`: whether cluster clients reach the relay yet.
                "--service".into(),
                self.service_host(namespace),
            ]),
            ports: Some(vec![
                port("session", SESSION_PORT),
                port("health", HEALTH_PORT),
            ]),
            // Probed every second, one failure enough: Ready follows the
            // session closely, and the host's session watch follows Ready.
            readiness_probe: Some(Probe {
                http_get: http("/ready"),
                period_seconds: Some(1),
                failure_threshold: Some(1),
                success_threshold: Some(1),
                ..Probe::default()
            }),
            liveness_probe: Some(Probe {
                http_get: http("/healthz"),
                period_seconds: Some(10),
                ..Probe::default()
            }),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_string(), quantity("10m")),
                    ("memory".to_string(), quantity("16Mi")),
                ])),
                limits: Some(BTreeMap::from([("memory".to_string(), quantity("32Mi"))])),
                ..ResourceRequirements::default()
            }),
            // The restricted Pod Security Standard, so the relay runs in an
            // operator namespace that enforces it.
            security_context: Some(SecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(NONROOT_UID),
                allow_privilege_escalation: Some(false),
                read_only_root_filesystem: Some(true),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    ..Capabilities::default()
                }),
                seccomp_profile: Some(runtime_default()),
                ..SecurityContext::default()
            }),
            ..Container::default()
        };
        Pod {
            metadata: names::metadata(self.id, self.client_name),
            spec: Some(PodSpec {
                containers: vec![container],
                restart_policy: Some("Always".into()),
                // The relay talks to nobody in the cluster but its client
                // and the bridges' traffic: no token, no Service variables.
                automount_service_account_token: Some(false),
                enable_service_links: Some(false),
                security_context: Some(PodSecurityContext {
                    run_as_non_root: Some(true),
                    run_as_user: Some(NONROOT_UID),
                    seccomp_profile: Some(runtime_default()),
                    ..PodSecurityContext::default()
                }),
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    /// The Service the bridges' requests are sent to: one port per
    /// allocated relay port, plus `health`, always there (a Service needs a
    /// port, and a client without bridges keeps its Service and with it
    /// the allocation's annotation). Only a Ready relay (a live session)
    /// is behind it: requests fail fast rather than wait on a missing client.
    pub fn service(&self, allocation: &ports::Allocation) -> Service {
        let port = |name: String, port: u16| ServicePort {
            name: Some(name),
            port: port.into(),
            target_port: Some(IntOrString::Int(port.into())),
            protocol: Some("TCP".into()),
            ..ServicePort::default()
        };
        let mut relay_ports: Vec<u16> = allocation.values().copied().collect();
        relay_ports.sort_unstable();
        let service_ports = std::iter::once(port("health".into(), HEALTH_PORT))
            .chain(
                relay_ports
                    .into_iter()
                    .map(|p| port(ports::port_name(p), p)),
            )
            .collect();
        let mut metadata = names::metadata(self.id, self.client_name);
        metadata.annotations.get_or_insert_default().insert(
            ports::ANNOTATION.to_string(),
            ports::to_annotation(allocation),
        );
        Service {
            metadata,
            spec: Some(ServiceSpec {
                type_: Some("ClusterIP".into()),
                selector: Some(names::pod_selector(self.id)),
                // Ready says whether the developer is connected (the host
                // reads it); the address is published from the pod's start
                // regardless, so that the cluster's proxies know the relay
                // before the first session and keep it across reconnects.
                // Without a session the relay listens on no relay port:
                // a request then is refused, as by an unready endpoint.
                publish_not_ready_addresses: Some(true),
                ports: Some(service_ports),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }

    /// What the developer may do: read their relay pod and port-forward
    /// into it; nothing else, no other pod.
    pub fn role(&self) -> Role {
        let pod = self.name();
        let rule = |resource: &str, verbs: &[&str]| PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec![resource.to_string()]),
            resource_names: Some(vec![pod.clone()]),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
            ..PolicyRule::default()
        };
        Role {
            metadata: names::metadata(self.id, self.client_name),
            rules: Some(vec![
                rule("pods", &["get"]),
                rule("pods/portforward", &["create", "get"]),
            ]),
        }
    }

    /// Grants [`Relay::role`] to the developer: the Kubernetes user the
    /// client is named after.
    pub fn role_binding(&self) -> RoleBinding {
        RoleBinding {
            metadata: names::metadata(self.id, self.client_name),
            role_ref: RoleRef {
                api_group: Some(RBAC_GROUP.into()),
                kind: "Role".into(),
                name: self.name(),
            },
            subjects: Some(vec![Subject {
                api_group: Some(RBAC_GROUP.into()),
                kind: "User".into(),
                name: self.client_name.to_string(),
                ..Subject::default()
            }]),
        }
    }
}

fn runtime_default() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..SeccompProfile::default()
    }
}

#[cfg(test)]
mod tests {
    use pontoon_provider_sdk::{connection::CLIENT_LABEL, k8s_openapi::Metadata as _};
    use serde_json::{Value, json};

    use super::*;

    const RELAY: Relay<'static> = Relay {
        id: "0123456789abcdef",
        client_name: "alice@example.com",
        image: "ghcr.io/pontoon-dev/pontoon:1.2.3",
    };

    fn value(object: &impl serde::Serialize) -> Value {
        serde_json::to_value(object).unwrap()
    }

    #[test]
    fn every_object_carries_the_name_labels_and_client_name() {
        let allocation = ports::Allocation::new();
        let metas = [
            RELAY.pod("pontoon").metadata().clone(),
            RELAY.service(&allocation).metadata().clone(),
            RELAY.role().metadata().clone(),
            RELAY.role_binding().metadata().clone(),
        ];
        for meta in metas {
            assert_eq!(meta.name.as_deref(), Some("pontoon-relay-0123456789abcdef"));
            assert!(names::is_ours(&meta, RELAY.id));
            let labels = meta.labels.unwrap_or_default();
            assert_eq!(labels[CLIENT_LABEL], "0123456789abcdef");
            assert_eq!(labels["app.kubernetes.io/component"], "relay");
            assert_eq!(
                meta.annotations.unwrap_or_default()["pontoon.dev/connection-client-name"],
                "alice@example.com"
            );
            assert_eq!(meta.namespace, None, "the host places it");
        }
    }

    #[test]
    fn the_pod_runs_the_relay_for_the_client_restricted() {
        let pod = value(&RELAY.pod("pontoon"));
        assert_eq!(pod["apiVersion"], "v1");
        assert_eq!(pod["kind"], "Pod");
        let spec = &pod["spec"];
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(spec["enableServiceLinks"], false);
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            spec["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        let c = &spec["containers"][0];
        assert_eq!(c["name"], "relay");
        assert_eq!(c["image"], "ghcr.io/pontoon-dev/pontoon:1.2.3");
        assert_eq!(
            c["args"],
            json!([
                "relay",
                "--client",
                "alice@example.com",
                "--service",
                "pontoon-relay-0123456789abcdef.pontoon.svc.cluster.local"
            ])
        );
        assert_eq!(
            c["ports"],
            json!([
                {"name": "session", "containerPort": 7000, "protocol": "TCP"},
                {"name": "health", "containerPort": 7001, "protocol": "TCP"}
            ])
        );
        assert_eq!(
            c["readinessProbe"],
            json!({"httpGet": {"path": "/ready", "port": 7001}, "periodSeconds": 1,
                   "failureThreshold": 1, "successThreshold": 1})
        );
        assert_eq!(
            c["livenessProbe"],
            json!({"httpGet": {"path": "/healthz", "port": 7001}, "periodSeconds": 10})
        );
        assert_eq!(
            c["resources"],
            json!({"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}})
        );
        assert_eq!(
            c["securityContext"],
            json!({
                "runAsNonRoot": true, "runAsUser": 65532, "allowPrivilegeEscalation": false,
                "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"}
            })
        );
    }

    #[test]
    fn the_service_has_health_and_one_port_per_allocation() {
        let allocation: ports::Allocation =
            [("u2/80".to_string(), 10001), ("u1/80".to_string(), 10000)].into();
        let service = value(&RELAY.service(&allocation));
        let spec = &service["spec"];
        assert_eq!(spec["type"], "ClusterIP");
        assert_eq!(spec["publishNotReadyAddresses"], true);
        assert_eq!(
            spec["selector"],
            json!({"pontoon.dev/connection-client": "0123456789abcdef",
                   "app.kubernetes.io/component": "relay"})
        );
        assert_eq!(
            spec["ports"],
            json!([
                {"name": "health", "port": 7001, "targetPort": 7001, "protocol": "TCP"},
                {"name": "r10000", "port": 10000, "targetPort": 10000, "protocol": "TCP"},
                {"name": "r10001", "port": 10001, "targetPort": 10001, "protocol": "TCP"}
            ])
        );
        let kept = &service["metadata"]["annotations"][ports::ANNOTATION];
        assert_eq!(
            ports::from_annotation(kept.as_str().unwrap_or_default()).unwrap(),
            allocation
        );
    }

    #[test]
    fn a_client_without_ports_keeps_a_service_with_health() {
        let service = value(&RELAY.service(&ports::Allocation::new()));
        assert_eq!(
            service["spec"]["ports"],
            json!([{"name": "health", "port": 7001, "targetPort": 7001, "protocol": "TCP"}])
        );
        assert_eq!(service["metadata"]["annotations"][ports::ANNOTATION], "{}");
    }

    #[test]
    fn the_developer_may_port_forward_into_their_relay_only() {
        let role = value(&RELAY.role());
        assert_eq!(
            role["rules"],
            json!([
                {"apiGroups": [""], "resources": ["pods"],
                 "resourceNames": ["pontoon-relay-0123456789abcdef"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods/portforward"],
                 "resourceNames": ["pontoon-relay-0123456789abcdef"], "verbs": ["create", "get"]}
            ])
        );
        let binding = value(&RELAY.role_binding());
        assert_eq!(
            binding["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                   "name": "pontoon-relay-0123456789abcdef"})
        );
        assert_eq!(
            binding["subjects"],
            json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                    "name": "alice@example.com"}])
        );
    }
}
