//! The target of a mount as users write it: `deploy/NAME`, `sts/NAME`,
//! `pod/NAME` (and their long forms), or a bare `NAME` for a Deployment.

use std::{fmt, str::FromStr};

/// The kind of workload a mount targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TargetKind {
    Deployment,
    StatefulSet,
    Pod,
}

impl TargetKind {
    /// `apiVersion` of the kind, as the `cluster` interface wants it.
    pub fn api_version(self) -> &'static str {
        match self {
            Self::Deployment | Self::StatefulSet => "apps/v1",
            Self::Pod => "v1",
        }
    }

    /// API group (`""` for the core group), as a capability names it.
    pub fn api_group(self) -> &'static str {
        match self {
            Self::Deployment | Self::StatefulSet => "apps",
            Self::Pod => "",
        }
    }

    /// The kind as in an object's `kind` field.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Deployment => "Deployment",
            Self::StatefulSet => "StatefulSet",
            Self::Pod => "Pod",
        }
    }

    /// The short prefix users write (`deploy`, `sts`, `pod`).
    pub fn short_name(self) -> &'static str {
        match self {
            Self::Deployment => "deploy",
            Self::StatefulSet => "sts",
            Self::Pod => "pod",
        }
    }

    fn from_prefix(prefix: &str) -> Option<Self> {
        match prefix {
            "deploy" | "deployment" | "deployments" => Some(Self::Deployment),
            "sts" | "statefulset" | "statefulsets" => Some(Self::StatefulSet),
            "pod" | "pods" => Some(Self::Pod),
            _ => None,
        }
    }
}

impl fmt::Display for TargetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

/// A parsed, valid target.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub kind: TargetKind,
    pub name: String,
}

impl Target {
    /// Parses a target as written in a mount; the error message is meant for
    /// the user who wrote it.
    pub fn parse(target: &str) -> Result<Self, TargetError> {
        let fail = |reason| {
            Err(TargetError {
                target: target.to_string(),
                reason,
            })
        };
        if target.is_empty() {
            return fail(Reason::Empty);
        }
        let (kind, name) = match target.split_once('/') {
            None => (TargetKind::Deployment, target),
            Some((prefix, rest)) => {
                if rest.contains('/') {
                    return fail(Reason::TooManySlashes);
                }
                let Some(kind) = TargetKind::from_prefix(prefix) else {
                    return fail(Reason::UnknownKind(prefix.to_string()));
                };
                (kind, rest)
            }
        };
        if name.is_empty() {
            return fail(Reason::EmptyName);
        }
        if let Err(problem) = check_dns1123_subdomain(name) {
            return fail(Reason::InvalidName(name.to_string(), problem));
        }
        Ok(Self {
            kind,
            name: name.to_string(),
        })
    }
}

impl FromStr for Target {
    type Err = TargetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Canonical short form, e.g. `deploy/web`.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind.short_name(), self.name)
    }
}

/// Why a target could not be parsed; `Display` gives the whole message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetError {
    target: String,
    reason: Reason,
}

impl TargetError {
    /// The target as the user wrote it.
    pub fn target(&self) -> &str {
        &self.target
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Reason {
    Empty,
    EmptyName,
    TooManySlashes,
    UnknownKind(String),
    InvalidName(String, &'static str),
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = &self.target;
        match &self.reason {
            Reason::Empty => {
                f.write_str("target is empty; use deploy/NAME, sts/NAME, pod/NAME or NAME")
            }
            Reason::EmptyName => write!(f, "target `{target}`: the name is empty"),
            Reason::TooManySlashes => {
                write!(f, "target `{target}`: too many `/`; use KIND/NAME")
            }
            Reason::UnknownKind(kind) => write!(
                f,
                "target `{target}`: unknown kind `{kind}`; use deploy/, sts/ or pod/"
            ),
            Reason::InvalidName(name, problem) => write!(
                f,
                "target `{target}`: `{name}` is not a valid name ({problem})"
            ),
        }
    }
}

impl std::error::Error for TargetError {}

/// The rule Kubernetes applies to Deployment, StatefulSet and Pod names
/// (RFC 1123 subdomain); checking it here turns a typo into a clear
/// `invalid-input` instead of an API error later.
fn check_dns1123_subdomain(name: &str) -> Result<(), &'static str> {
    if name.len() > 253 {
        return Err("longer than 253 characters");
    }
    for label in name.split('.') {
        let bytes = label.as_bytes();
        let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
            return Err("empty part between dots");
        };
        if !bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        {
            return Err("only lowercase letters, digits, `-` and `.` are allowed");
        }
        if !first.is_ascii_alphanumeric() || !last.is_ascii_alphanumeric() {
            return Err("each part must start and end with a letter or digit");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(target: &str) -> (TargetKind, String) {
        let parsed = Target::parse(target).unwrap_or_else(|e| panic!("{target}: {e}"));
        (parsed.kind, parsed.name)
    }

    fn err(target: &str) -> String {
        match Target::parse(target) {
            Ok(parsed) => panic!("{target} parsed as {parsed:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn every_prefix_maps_to_its_kind() {
        use TargetKind::*;
        for (prefix, kind) in [
            ("deploy", Deployment),
            ("deployment", Deployment),
            ("deployments", Deployment),
            ("sts", StatefulSet),
            ("statefulset", StatefulSet),
            ("statefulsets", StatefulSet),
            ("pod", Pod),
            ("pods", Pod),
        ] {
            assert_eq!(ok(&format!("{prefix}/web-1")), (kind, "web-1".into()));
        }
    }

    #[test]
    fn bare_name_is_a_deployment() {
        assert_eq!(ok("web"), (TargetKind::Deployment, "web".into()));
        assert_eq!(ok("web.v2"), (TargetKind::Deployment, "web.v2".into()));
    }

    #[test]
    fn kind_metadata_is_consistent() {
        let t = Target::parse("sts/db").unwrap();
        assert_eq!(t.kind.api_version(), "apps/v1");
        assert_eq!(t.kind.api_group(), "apps");
        assert_eq!(t.kind.kind(), "StatefulSet");
        assert_eq!(t.to_string(), "sts/db");
        let p = Target::parse("pods/x").unwrap();
        assert_eq!((p.kind.api_version(), p.kind.api_group()), ("v1", ""));
        assert_eq!(p.to_string(), "pod/x");
        assert_eq!(
            "deployment/a".parse::<Target>().unwrap().to_string(),
            "deploy/a"
        );
    }

    #[test]
    fn empty_target() {
        assert_eq!(
            err(""),
            "target is empty; use deploy/NAME, sts/NAME, pod/NAME or NAME"
        );
    }

    #[test]
    fn empty_name() {
        assert_eq!(err("deploy/"), "target `deploy/`: the name is empty");
        assert_eq!(err("pod/"), "target `pod/`: the name is empty");
    }

    #[test]
    fn unknown_kind() {
        assert_eq!(
            err("foo/bar"),
            "target `foo/bar`: unknown kind `foo`; use deploy/, sts/ or pod/"
        );
        // Kinds are matched exactly as documented in the contract.
        assert!(err("Deployment/web").contains("unknown kind `Deployment`"));
        assert!(err("/web").contains("unknown kind ``"));
        assert!(err("svc/web").contains("unknown kind `svc`"));
    }

    #[test]
    fn extra_slashes() {
        assert_eq!(
            err("deploy/a/b"),
            "target `deploy/a/b`: too many `/`; use KIND/NAME"
        );
        assert!(err("deploy//").contains("too many `/`"));
        assert!(err("foo/bar/baz").contains("too many `/`"));
    }

    #[test]
    fn invalid_names() {
        assert_eq!(
            err("deploy/Web"),
            "target `deploy/Web`: `Web` is not a valid name \
             (only lowercase letters, digits, `-` and `.` are allowed)"
        );
        assert!(err("web_1").contains("only lowercase letters"));
        assert!(err("sts/-db").contains("start and end with a letter or digit"));
        assert!(err("sts/db-").contains("start and end with a letter or digit"));
        assert!(err("pod/a..b").contains("empty part between dots"));
        assert!(err("pod/.a").contains("empty part between dots"));
        assert!(err(" web").contains("only lowercase letters"));
        assert!(err("deploy/wéb").contains("only lowercase letters"));
        assert!(err(&"a".repeat(254)).contains("longer than 253"));
    }

    #[test]
    fn longest_valid_name() {
        let name = [
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61),
        ]
        .join(".");
        assert_eq!(name.len(), 253);
        assert_eq!(ok(&format!("pod/{name}")), (TargetKind::Pod, name));
    }

    #[test]
    fn error_keeps_the_target() {
        let e = Target::parse("x/y").unwrap_err();
        assert_eq!(e.target(), "x/y");
    }
}
