//! Image references compared as container runtimes report them: what a
//! provider asked a pod for against what the pod runs, and what the
//! conformance check compares before and after.

/// An image reference as a container runtime reports it: registry
/// `docker.io` and namespace `library` spelled out or not, tag `latest`
/// implied. `nginx`, `nginx:latest` and `docker.io/library/nginx:latest` are
/// the same image.
fn normalized(image: &str) -> String {
    let image = image.trim();
    let image = image.strip_prefix("docker.io/").unwrap_or(image);
    let image = image.strip_prefix("library/").unwrap_or(image);
    let last = image.rsplit('/').next().unwrap_or(image);
    if last.contains(':') || last.contains('@') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

/// Whether two image references name the same image.
pub fn same_image(a: &str, b: &str) -> bool {
    normalized(a) == normalized(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_compare_as_runtimes_report_them() {
        assert!(same_image("nginx", "docker.io/library/nginx:latest"));
        assert!(same_image("nginx:1.27", "docker.io/library/nginx:1.27"));
        assert!(same_image(
            "quay.io/gefyra/carrier2:latest",
            "quay.io/gefyra/carrier2:latest"
        ));
        assert!(same_image(
            "localhost:5000/app",
            "localhost:5000/app:latest"
        ));
        assert!(!same_image("nginx:1.27", "nginx:1.28"));
        assert!(!same_image("quay.io/gefyra/carrier2", "nginx"));
    }

    #[test]
    fn same_image_treats_docker_hub_short_names_as_the_full_reference() {
        assert!(same_image("nginx:1.27", "docker.io/library/nginx:1.27"));
        assert!(same_image("docker.io/library/nginx:1.27", "nginx:1.27"));
        assert!(same_image("library/nginx:1.27", "nginx:1.27"));
        assert!(same_image(
            "docker.io/bitnami/nginx:1.27",
            "bitnami/nginx:1.27"
        ));
    }

    #[test]
    fn same_image_reads_a_missing_tag_as_latest() {
        assert!(same_image("nginx", "nginx:latest"));
        assert!(same_image("nginx", "docker.io/library/nginx:latest"));
        assert!(!same_image("nginx", "nginx:1.27"));
        // A registry's port is not a tag.
        assert!(same_image("registry:5000/app", "registry:5000/app:latest"));
    }

    #[test]
    fn same_image_tells_other_tags_digests_and_registries_apart() {
        assert!(!same_image("nginx:1.27", "nginx:1.26"));
        assert!(!same_image("nginx:1.27", "ghcr.io/carrier2/carrier2:1.27"));
        assert!(!same_image("nginx:1.27", "quay.io/library/nginx:1.27"));
        assert!(same_image(
            "nginx@sha256:0123abcd",
            "docker.io/library/nginx@sha256:0123abcd"
        ));
        assert!(!same_image(
            "nginx@sha256:0123abcd",
            "nginx@sha256:4567ef01"
        ));
        assert!(!same_image("nginx@sha256:0123abcd", "nginx:1.27"));
    }
}
