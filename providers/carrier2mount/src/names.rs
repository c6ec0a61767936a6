//! Names of what carrier2mount creates, as Gefyra's operator names them, so
//! that Gefyra's client and Pontoon agree on what is where.

/// Suffix of the shadow workload (and of its HPA copy) and of every label
/// value the shadow carries.
pub const SHADOW_SUFFIX: &str = "-gefyra";
/// Suffix of the shadow Service (after `<workload>-<container>`).
pub const SERVICE_SUFFIX: &str = "-gefyra-svc";
/// Label on the shadow pods that the shadow Service selects.
pub const DUPLICATION_ID_LABEL: &str = "bridge.gefyra.dev/duplication-id";
/// Longest name (and label value) Kubernetes accepts for the objects we name.
pub const MAX_NAME: usize = 63;

/// `name` + `suffix`, with `name` cut so the whole fits in 63 characters;
/// the suffix is always kept whole. This is the rule Gefyra's operator uses
/// (`generate_k8s_conform_name`), so both find the same objects.
pub fn conform_name(name: &str, suffix: &str) -> String {
    let suffix_len = suffix.chars().count();
    if name.chars().count() + suffix_len <= MAX_NAME {
        return format!("{name}{suffix}");
    }
    let kept: String = name
        .chars()
        .take(MAX_NAME.saturating_sub(suffix_len))
        .collect();
    format!("{kept}{suffix}")
}

/// The shadow workload of a target named `name` (same kind, same namespace).
pub fn shadow_workload(name: &str) -> String {
    conform_name(name, SHADOW_SUFFIX)
}

/// The copy of an HPA that scales the target Deployment `name`.
pub fn shadow_hpa(name: &str) -> String {
    conform_name(name, SHADOW_SUFFIX)
}

/// The Service in front of the shadow pods.
pub fn shadow_service(workload: &str, container: &str) -> String {
    conform_name(&format!("{workload}-{container}"), SERVICE_SUFFIX)
}

/// A label value of the shadow: the original value with `-gefyra`, cut like a
/// name. An empty value becomes `gefyra` (`-gefyra` is not a valid value: it
/// must start with a letter or digit), the same on selector and pods.
pub fn shadow_label_value(value: &str) -> String {
    if value.is_empty() {
        return SHADOW_SUFFIX.trim_start_matches('-').to_string();
    }
    conform_name(value, SHADOW_SUFFIX)
}

/// `host:port` of the shadow Service as Carrier2 dials it.
pub fn cluster_upstream(service: &str, namespace: &str, port: i32) -> String {
    format!("{service}.{namespace}.svc.cluster.local:{port}")
}

/// A duplication id for a new shadow, derived from the mount's uid so that
/// it is the same at every call: a valid label value (alphanumerics, `-`,
/// `_`, `.`; alphanumeric at both ends; at most 63 characters).
pub fn duplication_id_from_uid(uid: &str) -> String {
    let cleaned: String = uid
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = cleaned.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let cut: String = trimmed.chars().take(MAX_NAME).collect();
    let cut = cut.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    if cut.is_empty() {
        "pontoon".to_string()
    } else {
        cut.to_string()
    }
}

/// Kubernetes' rule for names of the kinds carrier2mount copies (an RFC 1123
/// subdomain: dot-separated labels of lowercase letters, digits and `-`,
/// each starting and ending with a letter or digit).
fn subdomain_problem(name: &str) -> Option<&'static str> {
    if name.len() > 253 {
        return Some("it is longer than 253 characters");
    }
    name.split('.').find_map(|label| {
        let ok_chars = !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        let ends = label
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
            && label
                .bytes()
                .last()
                .is_some_and(|b| b.is_ascii_alphanumeric());
        (!(ok_chars && ends)).then_some(
            "each dot-separated part must hold only lowercase letters, digits and `-`, \
             and start and end with a letter or digit",
        )
    })
}

/// Kubernetes' rule for Service names (an RFC 1035 label).
fn service_name_problem(name: &str) -> Option<&'static str> {
    let bytes = name.as_bytes();
    if bytes.len() > MAX_NAME {
        return Some("it is longer than 63 characters");
    }
    if !bytes.first().is_some_and(u8::is_ascii_lowercase) {
        return Some("a Service name must start with a lowercase letter");
    }
    if !bytes.last().is_some_and(u8::is_ascii_alphanumeric) {
        return Some("a Service name must end with a letter or digit");
    }
    if !bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    {
        return Some("a Service name holds only lowercase letters, digits and `-` (no `.`)");
    }
    None
}

/// Whether Kubernetes accepts the names this mount's shadow objects get
/// (derived from the target's name and container as Gefyra's operator
/// derives them); the message names the object, its name and the rule.
pub fn check_shadow_names(kind: &str, target: &str, container: &str) -> Result<(), String> {
    let workload = shadow_workload(target);
    if let Some(why) = subdomain_problem(&workload) {
        return Err(format!(
            "the shadow {kind} would be named `{workload}` (the target's name cut to fit 63 \
             characters, then `{SHADOW_SUFFIX}`), which Kubernetes refuses: {why}; rename the target"
        ));
    }
    let service = shadow_service(target, container);
    if let Some(why) = service_name_problem(&service) {
        return Err(format!(
            "the shadow Service would be named `{service}` (`<target>-<container>` cut to fit 63 \
             characters, then `{SERVICE_SUFFIX}`), which Kubernetes refuses: {why}; a mount needs a \
             target whose name starts with a letter and has no `.` in its first part, and a \
             container named with lowercase letters, digits and `-`"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadow_names_kubernetes_refuses_are_named_with_the_rule() {
        assert_eq!(check_shadow_names("Deployment", "web", "app"), Ok(()));
        assert_eq!(
            check_shadow_names("Deployment", "web.v2", "app")
                .map_err(|e| e.contains("`web.v2-app-gefyra-svc`") && e.contains("no `.`")),
            Err(true)
        );
        let digit = check_shadow_names("Deployment", "1web", "app").unwrap_err();
        assert!(
            digit.contains("must start with a lowercase letter"),
            "{digit}"
        );
        let container = check_shadow_names("Pod", "web", "App_1").unwrap_err();
        assert!(container.contains("`web-App_1-gefyra-svc`"), "{container}");
        // Cut at 56 characters, the name ends in `.`: `x.-gefyra` is no subdomain.
        let cut =
            check_shadow_names("Deployment", &format!("{}.b", "a".repeat(55)), "app").unwrap_err();
        assert!(
            cut.starts_with("the shadow Deployment would be named"),
            "{cut}"
        );
    }

    #[test]
    fn short_names_get_the_suffix() {
        assert_eq!(shadow_workload("web"), "web-gefyra");
        assert_eq!(shadow_service("web", "app"), "web-app-gefyra-svc");
        assert_eq!(shadow_hpa("web"), "web-gefyra");
    }

    #[test]
    fn long_names_are_cut_to_63_keeping_the_suffix() {
        let name = "a".repeat(60);
        let shadow = shadow_workload(&name);
        assert_eq!(shadow.len(), 63);
        assert_eq!(shadow, format!("{}-gefyra", "a".repeat(56)));

        // Exactly 63 with the suffix: nothing is cut.
        let fits = "b".repeat(56);
        assert_eq!(shadow_workload(&fits), format!("{fits}-gefyra"));

        let svc = shadow_service(&"w".repeat(40), &"c".repeat(30));
        assert_eq!(svc.len(), 63);
        assert!(svc.ends_with("-gefyra-svc"));
        assert_eq!(
            svc,
            format!("{}-{}-gefyra-svc", "w".repeat(40), "c".repeat(11))
        );
    }

    #[test]
    fn label_values_follow_the_same_rule() {
        assert_eq!(shadow_label_value("web"), "web-gefyra");
        assert_eq!(shadow_label_value(""), "gefyra");
        assert_eq!(shadow_label_value(&"x".repeat(63)).len(), 63);
    }

    #[test]
    fn upstream_is_the_service_dns_name_and_port() {
        assert_eq!(
            cluster_upstream("web-app-gefyra-svc", "shop", 8080),
            "web-app-gefyra-svc.shop.svc.cluster.local:8080"
        );
    }

    #[test]
    fn duplication_id_is_a_valid_label_value() {
        assert_eq!(
            duplication_id_from_uid("6f1c2a4e-0d5b-4b8e-9a51-3c2f8d7e1b00"),
            "6f1c2a4e-0d5b-4b8e-9a51-3c2f8d7e1b00"
        );
        assert_eq!(duplication_id_from_uid("--a/b--"), "a-b");
        assert_eq!(duplication_id_from_uid("///"), "pontoon");
        let long = duplication_id_from_uid(&format!("{}-x", "u".repeat(62)));
        assert_eq!(long, "u".repeat(62));
    }
}
