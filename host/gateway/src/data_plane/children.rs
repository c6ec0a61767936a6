//! The objects that run one Gateway's data plane, all named
//! `praxis-{gateway}` ([`name`]) in the Gateway's namespace and owned by it: a
//! ConfigMap with the Praxis config, a hardened single-replica Deployment
//! running Praxis, and a LoadBalancer Service for the listener ports.

use std::{collections::BTreeMap, sync::Arc};

use gateway_api::gateways::{Gateway, GatewayInfrastructure};
use k8s_openapi::{
    ByteString,
    api::{
        apps::v1::{Deployment, DeploymentSpec},
        core::v1::{
            Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort,
            HTTPGetAction, Lifecycle, LifecycleHandler, PodSecurityContext, PodSpec,
            PodTemplateSpec, Probe, SeccompProfile, Secret, SecretVolumeSource, SecurityContext,
            Service, ServicePort, ServiceSpec, SleepAction, Volume, VolumeMount,
        },
    },
    apimachinery::pkg::{
        apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference},
        util::intstr::IntOrString,
    },
};
use kube::Resource;
use sha2::{Digest, Sha256};

use crate::data_plane::certificates::{CertificateSecret, TLS_MOUNT_ROOT};

/// Where the Deployment mounts the config.
pub const CONFIG_DIR: &str = "/etc/praxis";
pub const CONFIG_KEY: &str = "config.yaml";
/// Praxis's admin port: health (`/healthy`) and readiness (`/ready`).
pub const ADMIN_PORT: i32 = 9901;
/// The pod template annotation whose change rolls the pods when the config changes.
pub const CONFIG_HASH_ANNOTATION: &str = "gateway.pontoon.dev/config-hash";
pub const MANAGED_BY: &str = "pontoon";
/// The label naming the Gateway a data plane's objects (pods too) belong to.
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// The Gateway API's own label for what an implementation creates for a
/// Gateway (GEP-1762); the conformance suite finds the children by it.
pub const GATEWAY_NAME_LABEL: &str = "gateway.networking.k8s.io/gateway-name";

/// `praxis-{gateway}`, when that is a valid Service name (a DNS label: at
/// most 63 characters, no dots). A Gateway name may be a 253-character DNS
/// subdomain: then the name is shortened and dots become dashes, and a hash
/// of the whole Gateway name keeps apart the Gateways that would otherwise
/// share it.
pub fn name(gateway: &Gateway) -> String {
    bounded(
        &format!("praxis-{}", gateway_name(gateway)),
        gateway_name(gateway),
        false,
    )
}

/// The `app.kubernetes.io/instance` value: the Gateway's name, shortened
/// like [`name`] when it is longer than a label value may be (63).
pub fn instance(gateway: &Gateway) -> String {
    bounded(gateway_name(gateway), gateway_name(gateway), true)
}

fn gateway_name(gateway: &Gateway) -> &str {
    gateway.metadata.name.as_deref().unwrap_or_default()
}

/// `wanted` if it has at most 63 characters (and no dot unless
/// `dots`); otherwise its first characters, dots as dashes, then `-` and 8
/// hex digits of the SHA-256 of `whole`.
fn bounded(wanted: &str, whole: &str, dots: bool) -> String {
    const MAX: usize = 63;
    if wanted.len() <= MAX && (dots || !wanted.contains('.')) {
        return wanted.to_string();
    }
    let suffix = hex_prefix(&Sha256::digest(whole.as_bytes()), 4);
    // Gateway names are ASCII (DNS subdomains): cutting by bytes is safe.
    let kept = wanted[..wanted.len().min(MAX - 1 - suffix.len())]
        .replace('.', "-")
        .trim_end_matches('-')
        .to_string();
    format!("{kept}-{suffix}")
}

/// The Praxis operator's standard labels (`app.kubernetes.io/name`,
/// `instance`, `managed-by`), on every child and the pods; the selectors of
/// the Deployment and the Service (a Deployment's selector cannot change,
/// so nothing else ever joins it).
pub fn labels(gateway: &Gateway) -> BTreeMap<String, String> {
    [
        ("app.kubernetes.io/name", "praxis"),
        (INSTANCE_LABEL, instance(gateway).as_str()),
        ("app.kubernetes.io/managed-by", MANAGED_BY),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The labels every child and the pods carry: the Gateway's
/// `infrastructure.labels`, then the Praxis operator's standard ones and
/// the Gateway API's own (those win: they are what the selectors and
/// watches rely on).
pub fn object_labels(gateway: &Gateway) -> BTreeMap<String, String> {
    let mut all = infrastructure(gateway, |i| i.labels.as_ref());
    all.extend(labels(gateway));
    all.insert(GATEWAY_NAME_LABEL.to_string(), instance(gateway));
    all
}

/// The Gateway's `infrastructure.annotations`, on every child and the pods.
pub fn annotations(gateway: &Gateway) -> BTreeMap<String, String> {
    infrastructure(gateway, |i| i.annotations.as_ref())
}

fn infrastructure(
    gateway: &Gateway,
    field: impl Fn(&GatewayInfrastructure) -> Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    gateway
        .spec
        .infrastructure
        .as_ref()
        .and_then(field)
        .cloned()
        .unwrap_or_default()
}

fn meta(gateway: &Gateway) -> ObjectMeta {
    let annotations = annotations(gateway);
    ObjectMeta {
        name: Some(name(gateway)),
        namespace: gateway.metadata.namespace.clone(),
        labels: Some(object_labels(gateway)),
        annotations: (!annotations.is_empty()).then_some(annotations),
        owner_references: gateway.controller_owner_ref(&()).map(|o| vec![owner(o)]),
        ..Default::default()
    }
}

fn owner(mut o: OwnerReference) -> OwnerReference {
    // Deleting the Gateway deletes its children (and waits for them in foreground deletion).
    o.block_owner_deletion = Some(true);
    o
}

pub fn config_map(gateway: &Gateway, config: &str) -> ConfigMap {
    ConfigMap {
        metadata: meta(gateway),
        data: Some([(CONFIG_KEY.to_string(), config.to_string())].into()),
        ..Default::default()
    }
}

/// The name of the Gateway's certificate Secret.
pub fn certificates_name(gateway: &Gateway) -> String {
    format!("{}-certificates", name(gateway))
}

/// The Gateway's own Secret holding every certificate and key its listeners
/// use (`CertificateSecret::keys`), copied from the Secrets they name: a pod
/// can mount Secrets of its own namespace only, and a listener may use one of
/// another namespace that a ReferenceGrant allows; and `ca_files` (file name
/// -> PEM), the CA certificates read from ConfigMaps. None without either.
pub fn certificates(
    gateway: &Gateway,
    certificates: &[CertificateSecret],
    secrets: &BTreeMap<(String, String), Arc<Secret>>,
    ca_files: &BTreeMap<String, String>,
) -> Option<Secret> {
    if certificates.is_empty() && ca_files.is_empty() {
        return None;
    }
    let mut data: BTreeMap<String, ByteString> = ca_files
        .iter()
        .map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes())))
        .collect();
    for cert in certificates {
        let source = secrets
            .get(&(cert.namespace.clone(), cert.name.clone()))
            .and_then(|s| s.data.as_ref());
        let (cert_key, key_key) = cert.keys();
        for (from, to) in [("tls.crt", cert_key), ("tls.key", key_key)] {
            if let Some(value) = source.and_then(|d| d.get(from)) {
                data.insert(to, value.clone());
            }
        }
    }
    let mut metadata = meta(gateway);
    metadata.name = Some(certificates_name(gateway));
    Some(Secret {
        metadata,
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Default::default()
    })
}

/// The hash the pods carry: of the config and of the certificates, so that
/// either changing rolls the pods.
pub fn data_plane_hash(config: &str, certificates: Option<&Secret>) -> String {
    let mut hasher = Sha256::new();
    hasher.update(config.as_bytes());
    for (key, value) in certificates
        .and_then(|s| s.data.as_ref())
        .into_iter()
        .flatten()
    {
        hasher.update(key.as_bytes());
        hasher.update(&value.0);
    }
    hex_prefix(&hasher.finalize(), 16)
}

/// The first `bytes` bytes of a digest, as lowercase hex.
fn hex_prefix(digest: &[u8], bytes: usize) -> String {
    digest
        .iter()
        .take(bytes)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How long a data-plane pod keeps serving once deleted, before Praxis is
/// told to stop (`lifecycle.preStop.sleep`).
pub const PRE_STOP_SECONDS: i64 = 5;

/// The Praxis Deployment: the config and the certificates mounted
/// read-only, probes on the admin port, a non-root, read-only, capability-
/// less container, and the config's hash on the pods.
pub fn deployment(
    gateway: &Gateway,
    image: &str,
    config_hash: &str,
    served_ports: &[u16],
    tls_files: bool,
) -> Deployment {
    let mut pod_annotations = annotations(gateway);
    pod_annotations.insert(CONFIG_HASH_ANNOTATION.to_string(), config_hash.to_string());
    let mut volumes = vec![Volume {
        name: "config".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: name(gateway),
            ..Default::default()
        }),
        ..Default::default()
    }];
    let mut mounts = vec![VolumeMount {
        name: "config".into(),
        mount_path: CONFIG_DIR.into(),
        read_only: Some(true),
        ..Default::default()
    }];
    if tls_files {
        volumes.push(Volume {
            name: "certificates".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(certificates_name(gateway)),
                ..Default::default()
            }),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: "certificates".into(),
            mount_path: TLS_MOUNT_ROOT.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    let mut ports: Vec<ContainerPort> = Vec::new();
    for &port in served_ports {
        if !ports.iter().any(|p| p.container_port == i32::from(port)) {
            ports.push(ContainerPort {
                name: Some(format!("l-{port}")),
                container_port: i32::from(port),
                protocol: Some("TCP".into()),
                ..Default::default()
            });
        }
    }
    ports.push(ContainerPort {
        name: Some("admin".into()),
        container_port: ADMIN_PORT,
        protocol: Some("TCP".into()),
        ..Default::default()
    });
    let probe = |path: &str| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(ADMIN_PORT),
            ..Default::default()
        }),
        period_seconds: Some(5),
        ..Default::default()
    };
    let container = Container {
        name: "praxis".into(),
        image: Some(image.into()),
        args: Some(vec!["-c".into(), format!("{CONFIG_DIR}/{CONFIG_KEY}")]),
        ports: Some(ports),
        volume_mounts: Some(mounts),
        liveness_probe: Some(probe("/healthy")),
        readiness_probe: Some(probe("/ready")),
        // A config change rolls the pods, and Praxis closes its listeners
        // the moment it is told to stop, while kube-proxy keeps sending the
        // old pod new connections until the endpoint update reaches it (a
        // second or so, more under churn): those would be refused. Serving
        // a little longer lets the Service drop the pod first.
        lifecycle: Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction {
                    seconds: PRE_STOP_SECONDS,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            run_as_user: Some(100),
            run_as_non_root: Some(true),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: Some(vec!["NET_BIND_SERVICE".into()]),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    Deployment {
        metadata: meta(gateway),
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels(gateway)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(object_labels(gateway)),
                    annotations: Some(pod_annotations),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(volumes),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    automount_service_account_token: Some(false),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// The LoadBalancer Service: one port per listener port the data plane
/// serves, asking for `load_balancer_ip` when the Gateway names one address.
pub fn service(
    gateway: &Gateway,
    served_ports: &[u16],
    load_balancer_ip: Option<String>,
) -> Service {
    let mut ports: Vec<ServicePort> = Vec::new();
    for &port in served_ports {
        if !ports.iter().any(|p| p.port == i32::from(port)) {
            ports.push(ServicePort {
                name: Some(format!("l-{port}")),
                port: i32::from(port),
                target_port: Some(IntOrString::Int(i32::from(port))),
                protocol: Some("TCP".into()),
                ..Default::default()
            });
        }
    }
    Service {
        metadata: meta(gateway),
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            selector: Some(labels(gateway)),
            ports: Some(ports),
            load_balancer_ip,
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    pub(crate) fn gateway() -> Gateway {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "web", "namespace": "infra", "uid": "u-1" },
            "spec": { "gatewayClassName": "pontoon", "listeners": [
                { "name": "http", "port": 80, "protocol": "HTTP" },
                { "name": "alt", "port": 80, "protocol": "HTTP", "hostname": "alt.com" },
                { "name": "tcp", "port": 9000, "protocol": "TCP" }
            ] }
        }))
        .unwrap()
    }

    #[test]
    fn children_are_named_labelled_and_owned() {
        let gw = gateway();
        let cm = config_map(&gw, "listeners: []\n");
        assert_eq!(cm.metadata.name.as_deref(), Some("praxis-web"));
        let labels = cm.metadata.labels.clone().unwrap();
        assert_eq!(labels["app.kubernetes.io/name"], "praxis");
        assert_eq!(labels["app.kubernetes.io/instance"], "web");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "pontoon");
        let owner = &cm.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Gateway", "web")
        );
        assert_eq!(owner.controller, Some(true));
    }

    #[test]
    fn infrastructure_labels_and_annotations_reach_every_child_and_the_pods() {
        let mut gw = gateway();
        gw.spec.infrastructure = Some(GatewayInfrastructure {
            labels: Some(
                [
                    ("team".to_string(), "edge".to_string()),
                    // The standard labels' keys stay the operator's.
                    ("app.kubernetes.io/name".to_string(), "other".to_string()),
                ]
                .into(),
            ),
            annotations: Some([("owner".to_string(), "ops@example.com".to_string())].into()),
            ..Default::default()
        });
        // The gateway's HTTP listeners share port 80 (its TCP one is not served).
        let ports = [80, 80];
        let d = deployment(&gw, "praxis:0.7.5", "abc", &ports, false);
        let svc = service(&gw, &ports, None);
        let cm = config_map(&gw, "");
        let spec = d.spec.clone().unwrap();
        let pod = spec.template.metadata.unwrap();
        for (what, labels, annotations) in [
            ("ConfigMap", &cm.metadata.labels, &cm.metadata.annotations),
            ("Deployment", &d.metadata.labels, &d.metadata.annotations),
            ("Service", &svc.metadata.labels, &svc.metadata.annotations),
            ("pod", &pod.labels, &pod.annotations),
        ] {
            let labels = labels.clone().unwrap();
            assert_eq!(labels["team"], "edge", "{what}");
            assert_eq!(labels["app.kubernetes.io/name"], "praxis", "{what}");
            assert_eq!(labels[GATEWAY_NAME_LABEL], "web", "{what}");
            assert_eq!(
                annotations.clone().unwrap()["owner"],
                "ops@example.com",
                "{what}"
            );
        }
        assert_eq!(pod.annotations.unwrap()[CONFIG_HASH_ANNOTATION], "abc");
        // The selectors are the standard labels only (a Deployment's cannot change).
        assert_eq!(spec.selector.match_labels.unwrap(), labels(&gw));
        assert_eq!(svc.spec.unwrap().selector.unwrap(), labels(&gw));
        // Without infrastructure metadata, no annotations at all.
        assert_eq!(config_map(&gateway(), "").metadata.annotations, None);
    }

    #[test]
    fn long_or_dotted_gateway_names_give_valid_distinct_child_names() {
        let named = |name: &str| {
            let mut gw = gateway();
            gw.metadata.name = Some(name.into());
            gw
        };
        // The suite's own: 57 characters, so `praxis-` makes 64.
        let long = named("gateway-with-one-not-matching-port-and-section-name-route");
        let child = name(&long);
        // 54 characters kept, less the dash the cut left at the end.
        assert!(
            child.starts_with("praxis-gateway-with-one-not-matching-port-and-section-")
                && child.len() == 62,
            "{child}"
        );
        assert_eq!(instance(&long), long.metadata.name.clone().unwrap());
        // Two names that differ only past the cut, or by a dot, stay apart.
        let a = named(&format!("{}-a", "x".repeat(70)));
        let b = named(&format!("{}-b", "x".repeat(70)));
        assert_ne!(name(&a), name(&b));
        assert_ne!(instance(&a), instance(&b));
        assert!(instance(&a).len() <= 63);
        let dotted = named("edge.example");
        assert_ne!(name(&dotted), name(&named("edge-example")));
        assert!(name(&dotted).starts_with("praxis-edge-example-"));
        assert!(!name(&dotted).contains('.'));
        // A label value may hold a dot.
        assert_eq!(instance(&dotted), "edge.example");
        // Every generated name is a DNS label.
        for gw in [&long, &a, &b, &dotted] {
            let n = name(gw);
            assert!(n.len() <= 63 && !n.ends_with('-'), "{n}");
            assert!(
                n.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'),
                "{n}"
            );
        }
    }

    #[test]
    fn the_deployment_is_hardened_and_carries_the_config_hash() {
        let gw = gateway();
        // The gateway's HTTP listeners share port 80 (its TCP one is not served).
        let ports = [80, 80];
        let d = deployment(&gw, "praxis:0.7.5", "abc", &ports, true);
        let spec = d.spec.unwrap();
        let template = spec.template;
        assert_eq!(
            template.metadata.unwrap().annotations.unwrap()[CONFIG_HASH_ANNOTATION],
            "abc"
        );
        let pod = template.spec.unwrap();
        assert_eq!(
            pod.security_context.unwrap().seccomp_profile.unwrap().type_,
            "RuntimeDefault"
        );
        let c = &pod.containers[0];
        let sc = c.security_context.clone().unwrap();
        assert_eq!(sc.run_as_user, Some(100));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        let caps = sc.capabilities.unwrap();
        assert_eq!(caps.drop.unwrap(), ["ALL"]);
        assert_eq!(caps.add.unwrap(), ["NET_BIND_SERVICE"]);
        let pre_stop = c
            .lifecycle
            .clone()
            .unwrap()
            .pre_stop
            .unwrap()
            .sleep
            .unwrap();
        assert_eq!(
            pre_stop.seconds, PRE_STOP_SECONDS,
            "drains before it stops listening"
        );
        let probe_path =
            |p: &Option<Probe>| p.as_ref().unwrap().http_get.as_ref().unwrap().path.clone();
        assert_eq!(probe_path(&c.liveness_probe).as_deref(), Some("/healthy"));
        assert_eq!(probe_path(&c.readiness_probe).as_deref(), Some("/ready"));
        let mounts: Vec<&str> = c
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .map(|m| m.mount_path.as_str())
            .collect();
        assert_eq!(mounts, ["/etc/praxis", "/etc/praxis-tls"]);
        // Port 80 once (two listeners share it), the unsupported listener not at all, the admin port.
        let ports: Vec<i32> = c
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .map(|p| p.container_port)
            .collect();
        assert_eq!(ports, [80, 9901]);
    }

    #[test]
    fn the_service_is_a_load_balancer_for_served_ports() {
        let gw = gateway();
        // The gateway's HTTP listeners share port 80 (its TCP one is not served).
        let ports = [80, 80];
        let spec = service(&gw, &ports, None).spec.unwrap();
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
        let ports: Vec<i32> = spec.ports.unwrap().iter().map(|p| p.port).collect();
        assert_eq!(ports, [80]);
        assert_eq!(spec.selector.unwrap()["app.kubernetes.io/instance"], "web");
    }

    #[test]
    fn the_hash_follows_the_config() {
        assert_eq!(data_plane_hash("a", None), data_plane_hash("a", None));
        assert_ne!(data_plane_hash("a", None), data_plane_hash("b", None));
        assert_eq!(data_plane_hash("a", None).len(), 32);
        // A renewed certificate rolls the pods too.
        let certs = |pem: &str| Secret {
            data: Some([("infra-site.crt".to_string(), ByteString(pem.into()))].into()),
            ..Default::default()
        };
        assert_ne!(
            data_plane_hash("a", Some(&certs("old"))),
            data_plane_hash("a", Some(&certs("new")))
        );
    }
}
