//! The probes of a container Carrier2 takes over: which it can answer
//! itself (HTTP(S) GET on a port it does not proxy), and which it cannot.

use pontoon_provider_sdk::k8s_openapi::{
    api::core::v1::{Container, Probe},
    apimachinery::pkg::util::intstr::IntOrString,
};

/// The probe ports Carrier2 answers itself (those it does not proxy).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Probes {
    pub http_get: Vec<i32>,
    pub https_get: Vec<i32>,
}

/// The container's startup, readiness and liveness probes with their names.
fn probes_of(container: &Container) -> Vec<(&'static str, &Probe)> {
    [
        ("startupProbe", container.startup_probe.as_ref()),
        ("readinessProbe", container.readiness_probe.as_ref()),
        ("livenessProbe", container.liveness_probe.as_ref()),
    ]
    .into_iter()
    .filter_map(|(name, probe)| probe.map(|p| (name, p)))
    .collect()
}

/// Probes Carrier2 cannot stand in for: it answers HTTP(S) GET probes only.
/// The message names the probe and the container.
pub fn check_probes(container: &Container) -> Result<(), String> {
    for (name, probe) in probes_of(container) {
        let kind = if probe.exec.is_some() {
            "an exec"
        } else if probe.tcp_socket.is_some() {
            "a tcpSocket"
        } else if probe.grpc.is_some() {
            "a grpc"
        } else {
            continue;
        };
        return Err(format!(
            "container `{}` has {kind} {name}; Carrier2 can only answer httpGet probes, \
             so carrier2mount cannot take this container over (use an httpGet probe or none)",
            container.name
        ));
    }
    Ok(())
}

/// The port number of an httpGet probe, resolving a named port.
fn probe_port(container: &Container, name: &str, port: &IntOrString) -> Result<i32, String> {
    match port {
        IntOrString::Int(number) => Ok(*number),
        IntOrString::String(text) => {
            if let Ok(number) = text.parse() {
                return Ok(number);
            }
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(text.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| {
                    format!(
                        "the {name} of container `{}` uses port `{text}`, which the container does not name",
                        container.name
                    )
                })
        }
    }
}

/// The `probes` section: the HTTP and HTTPS GET probe ports that are not
/// proxied anyway; `None` when the container has no probes.
pub fn probes(container: &Container, proxied: &[i32]) -> Result<Option<Probes>, String> {
    check_probes(container)?;
    let all = probes_of(container);
    if all.is_empty() {
        return Ok(None);
    }
    let mut result = Probes::default();
    for (name, probe) in all {
        let Some(get) = &probe.http_get else { continue };
        let port = probe_port(container, name, &get.port)?;
        if proxied.contains(&port) {
            continue;
        }
        let https = get
            .scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("https"));
        let list = if https {
            &mut result.https_get
        } else {
            &mut result.http_get
        };
        if !list.contains(&port) {
            list.push(port);
        }
    }
    result.http_get.sort_unstable();
    result.https_get.sort_unstable();
    Ok(Some(result))
}

/// The container ports Carrier2 proxies, in the container's order, once each.
pub fn container_ports(container: &Container) -> Vec<i32> {
    let mut ports: Vec<i32> = Vec::new();
    for port in container.ports.iter().flatten() {
        if !ports.contains(&port.container_port) {
            ports.push(port.container_port);
        }
    }
    ports
}

#[cfg(test)]
mod tests {
    use pontoon_provider_sdk::k8s_openapi::api::core::v1::{
        ContainerPort, ExecAction, HTTPGetAction, TCPSocketAction,
    };

    use super::*;

    fn http_probe(port: IntOrString, scheme: Option<&str>) -> Probe {
        Probe {
            http_get: Some(HTTPGetAction {
                port,
                scheme: scheme.map(str::to_string),
                path: Some("/".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn container() -> Container {
        Container {
            name: "app".into(),
            image: Some("nginx:1.27".into()),
            ports: Some(vec![
                ContainerPort {
                    container_port: 80,
                    ..Default::default()
                },
                ContainerPort {
                    container_port: 8443,
                    name: Some("tls".into()),
                    ..Default::default()
                },
                ContainerPort {
                    container_port: 9090,
                    name: Some("admin".into()),
                    ..Default::default()
                },
            ]),
            readiness_probe: Some(http_probe(IntOrString::Int(8080), None)),
            liveness_probe: Some(http_probe(IntOrString::Int(9443), Some("HTTPS"))),
            startup_probe: Some(http_probe(IntOrString::String("tls".into()), Some("HTTPS"))),
            ..Default::default()
        }
    }

    #[test]
    fn probe_ports_skip_proxied_ports_and_split_by_scheme() {
        let c = container();
        let ports = container_ports(&c);
        assert_eq!(ports, [80, 8443, 9090]);
        // startup probe on `tls` = 8443 is proxied; readiness 8080 http; liveness 9443 https.
        assert_eq!(
            probes(&c, &ports).unwrap(),
            Some(Probes {
                http_get: vec![8080],
                https_get: vec![9443],
            })
        );
        let mut no_probes = c.clone();
        no_probes.readiness_probe = None;
        no_probes.liveness_probe = None;
        no_probes.startup_probe = None;
        assert_eq!(probes(&no_probes, &ports).unwrap(), None);
    }

    #[test]
    fn exec_and_tcp_probes_are_refused_naming_probe_and_container() {
        let mut c = container();
        c.liveness_probe = Some(Probe {
            exec: Some(ExecAction {
                command: Some(vec!["true".into()]),
            }),
            ..Default::default()
        });
        assert_eq!(
            probes(&c, &[80]).unwrap_err(),
            "container `app` has an exec livenessProbe; Carrier2 can only answer httpGet probes, \
             so carrier2mount cannot take this container over (use an httpGet probe or none)"
        );
        let mut t = container();
        t.readiness_probe = Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(80),
                host: None,
            }),
            ..Default::default()
        });
        let message = check_probes(&t).unwrap_err();
        assert!(message.contains("tcpSocket readinessProbe"), "{message}");
        assert!(check_probes(&container()).is_ok());
    }

    #[test]
    fn an_unknown_named_probe_port_is_an_error() {
        let mut c = container();
        c.readiness_probe = Some(http_probe(IntOrString::String("nope".into()), None));
        assert!(probes(&c, &[80]).unwrap_err().contains("port `nope`"));
    }
}
