//! What `pontoon bridge` will ask for, judged from its arguments before
//! anything in the cluster is touched: the target, the ports, the rules of
//! the bridge, and where each local port's requests go.

use std::collections::BTreeMap;

use anyhow::{Context as _, anyhow, bail};
use pontoon_provider_sdk::target::Target;
use serde_json::{Value, json};

use super::args::BridgeArgs;

/// What the developer asked for, parsed before anything is touched.
pub(super) struct Plan {
    pub(super) target: Target,
    /// (local, remote)
    pub(super) ports: Vec<(u16, u16)>,
    pub(super) matches: Vec<Value>,
    /// Where each local port's requests go on this side.
    pub(super) to: BTreeMap<u16, String>,
    /// For the result line.
    pub(super) described: String,
}

impl Plan {
    pub(super) fn of(args: &BridgeArgs) -> anyhow::Result<Self> {
        let target = Target::parse(&args.workload).map_err(|e| anyhow!("{e}"))?;
        let mut ports = Vec::new();
        for mapping in &args.ports {
            let parsed = mapping.split_once(':').and_then(|(l, r)| {
                Some((
                    l.trim().parse::<u16>().ok().filter(|p| *p > 0)?,
                    r.trim().parse::<u16>().ok().filter(|p| *p > 0)?,
                ))
            });
            match parsed {
                Some(pair) if ports.iter().any(|(_, r)| *r == pair.1) => {
                    bail!("--port {mapping}: remote port {} is given twice", pair.1)
                }
                Some(pair) => ports.push(pair),
                None => bail!("--port {mapping}: expected LOCAL:REMOTE, e.g. 8080:80"),
            }
        }
        let mut matches = Vec::new();
        let mut described = Vec::new();
        for (given, kind, flag) in [
            (&args.headers, "exact", "--header"),
            (&args.header_prefixes, "prefix", "--header-prefix"),
            (&args.header_regexes, "regex", "--header-regex"),
        ] {
            for pair in given {
                let Some((name, value)) = pair.split_once('=').filter(|(n, _)| !n.is_empty())
                else {
                    bail!("{flag} {pair}: expected NAME=VALUE, e.g. x-dev=alice");
                };
                matches.push(json!({"matchHeader": {"name": name, "value": value, "type": kind}}));
                described.push(match kind {
                    "exact" => format!("{name}: {value}"),
                    "prefix" => format!("{name}: {value}…"),
                    _ => format!("{name} ~ /{value}/"),
                });
            }
        }
        for (given, kind) in [(&args.paths, "exact"), (&args.path_prefixes, "prefix")] {
            for path in given {
                if !path.starts_with('/') {
                    bail!("path `{path}` must start with /");
                }
                matches.push(json!({"matchPath": {"path": path, "type": kind}}));
                described.push(match kind {
                    "exact" => format!("path {path}"),
                    _ => format!("path {path}…"),
                });
            }
        }
        if matches.is_empty() {
            bail!(
                "say which requests are yours: --header x-dev=alice (or --header-prefix, \
                 --header-regex, --path, --path-prefix); everyone else's keep going to the shadow"
            );
        }
        let to = destinations(&args.to, &ports)?;
        Ok(Self {
            target,
            ports,
            matches,
            to,
            described: described.join(" and "),
        })
    }
}

/// Local port → `host:port` on this side.
fn destinations(to: &str, ports: &[(u16, u16)]) -> anyhow::Result<BTreeMap<u16, String>> {
    let (host, port) = match to.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') || host.starts_with('[') => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .with_context(|| format!("--to {to}: `{port}` is not a port"))?;
            (host.to_string(), Some(port))
        }
        _ => (to.to_string(), None),
    };
    if port.is_some() && ports.len() != 1 {
        bail!("--to {to} names a port: give exactly one --port with it");
    }
    Ok(ports
        .iter()
        .map(|(local, _)| (*local, format!("{host}:{}", port.unwrap_or(*local))))
        .collect())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BridgeArgs,
    }

    fn plan(line: &[&str]) -> anyhow::Result<Plan> {
        let cli = Cli::try_parse_from(std::iter::once("bridge").chain(line.iter().copied()))?;
        Plan::of(&cli.args)
    }

    #[test]
    fn a_developers_flags_become_rules_and_routes() {
        let given = plan(&[
            "deploy/api",
            "-p",
            "8080:80",
            "--header",
            "x-dev=alice",
            "--path-prefix",
            "/v2",
        ])
        .unwrap();
        assert_eq!(given.ports, [(8080, 80)]);
        assert_eq!(given.to[&8080], "127.0.0.1:8080");
        assert_eq!(
            given.matches,
            [
                json!({"matchHeader": {"name": "x-dev", "value": "alice", "type": "exact"}}),
                json!({"matchPath": {"path": "/v2", "type": "prefix"}}),
            ]
        );
        assert_eq!(given.described, "x-dev: alice and path /v2…");
        let to = plan(&[
            "deploy/api",
            "-p",
            "8080:80",
            "--header",
            "a=b",
            "--to",
            "10.0.0.5:9000",
        ])
        .unwrap();
        assert_eq!(to.to[&8080], "10.0.0.5:9000");
    }

    #[test]
    fn what_cannot_work_is_refused_before_anything_is_touched() {
        let err = |line: &[&str]| plan(line).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(&["deploy/api", "-p", "8080:80"]).contains("say which requests are yours"));
        assert!(
            err(&["deploy/api", "-p", "80", "--header", "a=b"]).contains("expected LOCAL:REMOTE")
        );
        assert!(
            err(&["deploy/api", "-p", "1:80", "-p", "2:80", "--header", "a=b"])
                .contains("given twice")
        );
        assert!(err(&["deploy/api", "-p", "1:80", "--header", "novalue"]).contains("NAME=VALUE"));
        assert!(err(&["job/x", "-p", "1:80", "--header", "a=b"]).contains("job"));
        assert!(
            err(&[
                "deploy/api",
                "-p",
                "1:80",
                "-p",
                "2:81",
                "--header",
                "a=b",
                "--to",
                "h:9"
            ])
            .contains("exactly one --port")
        );
    }
}
