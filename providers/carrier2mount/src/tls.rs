//! TLS settings in the mount's `providerParameter`, in the shape Gefyra's
//! client sends them:
//!
//! ```yaml
//! tls:                 # every proxied port ...
//!   certificate: /path/in/container.pem          # a file already there, or
//!   key: {secret: {name: web-tls, key: tls.key, namespace: shop}}   # from a Secret
//!   sni: shop.example.com                        # optional; a string or a Secret too
//! "8443":              # ... or one port, which wins over `tls`
//!   tls: {certificate: ..., key: ...}
//! ```
//!
//! Secret material is written into the container at
//! `/tmp/from_k8s_secret_{cert,key}_<port or "all">.pem`, Gefyra's paths.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::carrier_config::Tls;

/// Files to write into the container: path → content.
pub type TlsFiles = BTreeMap<String, String>;

/// Where one TLS value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A literal: a file path in the container (certificate, key) or the SNI name.
    Literal(String),
    Secret(SecretRef),
}

/// One key of a Secret in the target namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretRef {
    pub name: String,
    pub key: String,
}

/// The TLS settings that apply to some ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsParam {
    /// `all`, or the port number: part of the injected file names.
    pub scope: String,
    pub certificate: Source,
    pub key: Source,
    pub sni: Option<Source>,
}

/// Every TLS setting of a mount.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsParameters {
    pub all: Option<TlsParam>,
    pub ports: BTreeMap<i32, TlsParam>,
}

pub fn cert_path(scope: &str) -> String {
    format!("/tmp/from_k8s_secret_cert_{scope}.pem")
}

pub fn key_path(scope: &str) -> String {
    format!("/tmp/from_k8s_secret_key_{scope}.pem")
}

fn source(
    value: &Value,
    field: &str,
    at: &str,
    default_key: Option<&str>,
    namespace: &str,
) -> Result<Source, String> {
    if let Some(text) = value.as_str() {
        if text.is_empty() {
            return Err(format!("{at}.{field} is empty"));
        }
        return Ok(Source::Literal(text.to_string()));
    }
    let Some(secret) = value.get("secret") else {
        return Err(format!(
            "{at}.{field} must be a string or {{secret: {{name, key, namespace}}}}"
        ));
    };
    let text = |f: &str| {
        secret
            .get(f)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let name = text("name").ok_or_else(|| format!("{at}.{field}.secret needs a name"))?;
    let key = text("key")
        .or(default_key)
        .ok_or_else(|| format!("{at}.{field}.secret needs a key"))?;
    if let Some(other) = text("namespace").filter(|ns| *ns != namespace) {
        return Err(format!(
            "{at}.{field}.secret is in namespace `{other}`; carrier2mount reads Secrets \
             only in the target namespace `{namespace}`"
        ));
    }
    Ok(Source::Secret(SecretRef {
        name: name.to_string(),
        key: key.to_string(),
    }))
}

fn param(tls: &Value, scope: &str, at: &str, namespace: &str) -> Result<TlsParam, String> {
    if !tls.is_object() {
        return Err(format!("{at} must be an object with certificate and key"));
    }
    let (Some(certificate), Some(key)) = (tls.get("certificate"), tls.get("key")) else {
        return Err(format!("{at} needs both certificate and key"));
    };
    Ok(TlsParam {
        scope: scope.to_string(),
        certificate: source(certificate, "certificate", at, Some("tls.crt"), namespace)?,
        key: source(key, "key", at, Some("tls.key"), namespace)?,
        sni: tls
            .get("sni")
            .filter(|v| !v.is_null())
            .map(|v| source(v, "sni", at, None, namespace))
            .transpose()?,
    })
}

/// Reads the TLS settings of `parameters` (the mount's `providerParameter`);
/// other keys are left to others. The message says what is wrong, for the user.
pub fn parse(parameters: Option<&Value>, namespace: &str) -> Result<TlsParameters, String> {
    let mut result = TlsParameters::default();
    let Some(parameters) = parameters.and_then(Value::as_object) else {
        return Ok(result);
    };
    if let Some(tls) = parameters.get("tls") {
        result.all = Some(param(tls, "all", "providerParameter.tls", namespace)?);
    }
    for (key, value) in parameters {
        let Ok(port) = key.parse::<i32>() else {
            continue;
        };
        if !(1..=65535).contains(&port) {
            return Err(format!("providerParameter.{key}: not a port number"));
        }
        if let Some(tls) = value.get("tls") {
            let at = format!("providerParameter.{key}.tls");
            result.ports.insert(port, param(tls, key, &at, namespace)?);
        }
    }
    Ok(result)
}

impl TlsParameters {
    pub fn for_port(&self, port: i32) -> Option<&TlsParam> {
        self.ports.get(&port).or(self.all.as_ref())
    }

    /// The `tls` section of each port that has one, and the files to inject,
    /// reading Secret values with `read`.
    pub fn resolve<E>(
        &self,
        ports: &[i32],
        mut read: impl FnMut(&SecretRef) -> Result<String, E>,
    ) -> Result<(BTreeMap<i32, Tls>, TlsFiles), E> {
        let mut sections = BTreeMap::new();
        let mut files = TlsFiles::new();
        for &port in ports {
            let Some(param) = self.for_port(port) else {
                continue;
            };
            let mut file = |source: &Source, path: String| -> Result<String, E> {
                match source {
                    Source::Literal(path) => Ok(path.clone()),
                    Source::Secret(secret) => {
                        if !files.contains_key(&path) {
                            files.insert(path.clone(), read(secret)?);
                        }
                        Ok(path)
                    }
                }
            };
            let certificate = file(&param.certificate, cert_path(&param.scope))?;
            let key = file(&param.key, key_path(&param.scope))?;
            let sni = match &param.sni {
                None => None,
                Some(Source::Literal(name)) => Some(name.clone()),
                Some(Source::Secret(secret)) => Some(read(secret)?.trim().to_string()),
            };
            sections.insert(
                port,
                Tls {
                    certificate,
                    key,
                    sni,
                },
            );
        }
        Ok((sections, files))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn secret(name: &str, key: &str) -> Source {
        Source::Secret(SecretRef {
            name: name.into(),
            key: key.into(),
        })
    }

    #[test]
    fn no_parameters_no_tls() {
        assert_eq!(parse(None, "shop").unwrap(), TlsParameters::default());
        assert_eq!(
            parse(Some(&json!({"other": 1})), "shop").unwrap(),
            TlsParameters::default()
        );
    }

    #[test]
    fn global_and_per_port_settings_in_gefyras_shape() {
        let params = json!({
            "tls": {
                "certificate": {"secret": {"name": "web-tls", "key": "tls.crt", "namespace": "shop"}},
                "key": {"secret": {"name": "web-tls"}},
                "sni": "shop.example.com"
            },
            "8443": {"tls": {"certificate": "/etc/c.pem", "key": "/etc/k.pem",
                              "sni": {"secret": {"name": "names", "key": "sni"}}}}
        });
        let parsed = parse(Some(&params), "shop").unwrap();
        assert_eq!(
            parsed.all,
            Some(TlsParam {
                scope: "all".into(),
                certificate: secret("web-tls", "tls.crt"),
                key: secret("web-tls", "tls.key"),
                sni: Some(Source::Literal("shop.example.com".into())),
            })
        );
        assert_eq!(parsed.for_port(8443).unwrap().scope, "8443");
        assert_eq!(parsed.for_port(80).unwrap().scope, "all");

        let mut reads = Vec::new();
        let (sections, files) = parsed
            .resolve(
                &[80, 443, 8443],
                |s: &SecretRef| -> Result<String, String> {
                    reads.push(format!("{}/{}", s.name, s.key));
                    Ok(format!("<{}:{}>\n", s.name, s.key))
                },
            )
            .unwrap();
        // The shared files of `all` are read once.
        assert_eq!(reads, ["web-tls/tls.crt", "web-tls/tls.key", "names/sni"]);
        assert_eq!(
            sections[&80],
            Tls {
                certificate: "/tmp/from_k8s_secret_cert_all.pem".into(),
                key: "/tmp/from_k8s_secret_key_all.pem".into(),
                sni: Some("shop.example.com".into()),
            }
        );
        assert_eq!(sections[&443], sections[&80]);
        assert_eq!(
            sections[&8443],
            Tls {
                certificate: "/etc/c.pem".into(),
                key: "/etc/k.pem".into(),
                sni: Some("<names:sni>".into()),
            }
        );
        assert_eq!(
            files,
            [
                (
                    "/tmp/from_k8s_secret_cert_all.pem".to_string(),
                    "<web-tls:tls.crt>\n".to_string()
                ),
                (
                    "/tmp/from_k8s_secret_key_all.pem".to_string(),
                    "<web-tls:tls.key>\n".to_string()
                ),
            ]
            .into()
        );
    }

    #[test]
    fn malformed_settings_say_what_is_wrong() {
        let cases = [
            (
                json!({"tls": {"certificate": "/c"}}),
                "needs both certificate and key",
            ),
            (json!({"tls": "yes"}), "must be an object"),
            (
                json!({"tls": {"certificate": 3, "key": "/k"}}),
                "must be a string or",
            ),
            (
                json!({"tls": {"certificate": {"secret": {}}, "key": "/k"}}),
                "needs a name",
            ),
            (
                json!({"8443": {"tls": {"certificate": "/c", "key": {"secret": {"name": "s", "namespace": "kube-system"}}}}}),
                "only in the target namespace `shop`",
            ),
            (json!({"70000": {"tls": {}}}), "not a port number"),
        ];
        for (params, expected) in cases {
            let err = parse(Some(&params), "shop").unwrap_err();
            assert!(err.contains(expected), "{params}: {err}");
        }
    }
}
