//! `ready`: the four conditions of an active mount, each with a reason a
//! human can act on.

use pontoon_provider_sdk::{
    bridge_mount::{Condition, Error},
    k8s_openapi::api::core::v1::Pod,
};

use crate::{api::Ctx, carrier_config, configured, mark, names, pods, scripts, shadow};

pub const SHADOW_PODS_READY: &str = "ShadowPodsReady";
pub const CARRIER_INSTALLED: &str = "CarrierInstalled";
pub const ORIGINAL_PODS_READY: &str = "OriginalPodsReady";
pub const UPSTREAM_SET: &str = "UpstreamSet";

pub fn ready(ctx: &Ctx) -> Result<Vec<Condition>, Error> {
    let workload = ctx.require_workload()?;
    let container = ctx.container();
    let shadow_name = format!(
        "{}/{}",
        ctx.target.kind.short_name(),
        names::shadow_workload(&ctx.target.name)
    );
    let shadow = match ctx.shadow()? {
        None => Condition::new(
            SHADOW_PODS_READY,
            false,
            format!(
                "the shadow {shadow_name} does not exist in namespace `{}`; prepare has not run",
                ctx.target_namespace()
            ),
        ),
        Some(object) if !mark::is_ours(&object, &ctx.mount.uid) => Condition::new(
            SHADOW_PODS_READY,
            false,
            format!(
                "{shadow_name} in namespace `{}` was not made by this mount",
                ctx.target_namespace()
            ),
        ),
        Some(object) => match shadow::stale(&object, &workload) {
            Some(why) => Condition::new(
                SHADOW_PODS_READY,
                false,
                format!("{why}; it is copied again"),
            ),
            None => shadow_condition(&ctx.shadow_pods(&object)?, container, &shadow_name),
        },
    };
    let originals = ctx.original_pods(&workload)?;
    let (installed, installed_reason) =
        pods::image_report(&originals, container, ctx.carrier_image());
    Ok(vec![
        shadow,
        Condition::new(CARRIER_INSTALLED, installed, installed_reason),
        originals_condition(&originals, container),
        upstream_condition(ctx, &originals),
    ])
}

fn shadow_condition(shadow_pods: &[Pod], container: &str, shadow_name: &str) -> Condition {
    let total = shadow_pods.len();
    let ready = shadow_pods
        .iter()
        .filter(|p| pods::running_and_ready(p, container))
        .count();
    if ready > 0 {
        Condition::new(
            SHADOW_PODS_READY,
            true,
            format!("{ready} of {total} pods of the shadow {shadow_name} are ready"),
        )
    } else if total == 0 {
        Condition::new(
            SHADOW_PODS_READY,
            false,
            format!("the shadow {shadow_name} has no pods yet"),
        )
    } else {
        let why: Vec<String> = shadow_pods
            .iter()
            .map(|p| pods::not_ready_reason(p, container))
            .collect();
        Condition::new(
            SHADOW_PODS_READY,
            false,
            format!(
                "none of the {total} pods of the shadow {shadow_name} is ready: {}",
                why.join("; ")
            ),
        )
    }
}

fn originals_condition(originals: &[Pod], container: &str) -> Condition {
    let total = originals.len();
    if total == 0 {
        return Condition::new(ORIGINAL_PODS_READY, false, "no original pods found");
    }
    let why: Vec<String> = originals
        .iter()
        .filter(|p| !pods::running_and_ready(p, container))
        .map(|p| pods::not_ready_reason(p, container))
        .collect();
    if why.is_empty() {
        Condition::new(
            ORIGINAL_PODS_READY,
            true,
            format!("all {total} original pods are running and ready"),
        )
    } else {
        Condition::new(
            ORIGINAL_PODS_READY,
            false,
            format!(
                "{} of {total} original pods are not ready: {}",
                why.len(),
                why.join("; ")
            ),
        )
    }
}

/// Reads `/tmp/config.yaml` back from every original pod that runs
/// Carrier2, except those `install` saw take their config moments ago (in
/// the container instance that still runs: see `configured`).
fn upstream_condition(ctx: &Ctx, originals: &[Pod]) -> Condition {
    let total = originals.len();
    if total == 0 {
        return Condition::new(UPSTREAM_SET, false, "no original pods found");
    }
    let runs_carrier = |pod: &Pod| {
        pods::running_image(pod, ctx.container()).is_some_and(|image| {
            pontoon_provider_sdk::image::same_image(image, ctx.carrier_image())
        })
    };
    let seen = configured::recent();
    let seen_configured = |pod: &Pod| {
        seen.as_ref()
            .is_some_and(|seen| seen.configured(pod, ctx.container()))
    };
    let read_back = |pod: &Pod| runs_carrier(pod) && !seen_configured(pod);
    // Read back from every other pod that runs Carrier2 at once.
    let script = scripts::cat_config_script();
    let reading: Vec<(&str, &str)> = originals
        .iter()
        .filter(|pod| read_back(pod))
        .map(|pod| (pods::name(pod), script.as_str()))
        .collect();
    let mut outputs = ctx.run_scripts(&reading).into_iter();
    let mut missing = Vec::new();
    let mut taken_as_seen = 0;
    for pod in originals {
        let name = pods::name(pod);
        if !runs_carrier(pod) {
            missing.push(format!("{name} does not run Carrier2 yet"));
            continue;
        }
        if seen_configured(pod) {
            taken_as_seen += 1;
            continue;
        }
        match outputs.next() {
            Some(Ok(output)) if output.exit_code == 0 => {
                if !carrier_config::has_cluster_upstream(&String::from_utf8_lossy(&output.stdout)) {
                    missing.push(format!(
                        "{name}: {} has no clusterUpstream",
                        carrier_config::CONFIG_PATH
                    ));
                }
            }
            Some(Ok(output)) => missing.push(format!(
                "{name}: cannot read {} ({})",
                carrier_config::CONFIG_PATH,
                scripts::tail(&String::from_utf8_lossy(&output.stderr), 1)
            )),
            Some(Err(err)) => missing.push(format!("{name}: exec failed: {err:?}")),
            None => missing.push(format!("{name}: the host answered no read-back")),
        }
    }
    if missing.is_empty() {
        let how = match &seen {
            Some(seen) if taken_as_seen > 0 => {
                let (which, others) = if taken_as_seen == total {
                    ("all", String::new())
                } else {
                    ("some", format!("; {} read back", total - taken_as_seen))
                };
                format!(
                    " ({which} as install saw Carrier2 take its config {:.1} s ago, in \
                     containers that have not restarted since{others})",
                    seen.age.as_secs_f64()
                )
            }
            _ => String::new(),
        };
        Condition::new(
            UPSTREAM_SET,
            true,
            format!("Carrier2 in all {total} original pods forwards to the shadow Service{how}"),
        )
    } else {
        Condition::new(
            UPSTREAM_SET,
            false,
            format!(
                "{} of {total} original pods have no upstream set: {}",
                missing.len(),
                missing.join("; ")
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::tests::pod;

    #[test]
    fn shadow_needs_one_ready_pod() {
        let c = shadow_condition(
            &[
                pod("s-1", "nginx", Some("nginx"), true),
                pod("s-2", "nginx", None, false),
            ],
            "app",
            "deploy/web-gefyra",
        );
        assert!(c.ready);
        assert_eq!(
            c.reason,
            "1 of 2 pods of the shadow deploy/web-gefyra are ready"
        );
        let none = shadow_condition(
            &[pod("s-2", "nginx", None, false)],
            "app",
            "deploy/web-gefyra",
        );
        assert!(!none.ready);
        assert_eq!(
            none.reason,
            "none of the 1 pods of the shadow deploy/web-gefyra is ready: s-2: container `app` is waiting (ContainerCreating)"
        );
        assert!(!shadow_condition(&[], "app", "x").ready);
    }

    #[test]
    fn originals_must_all_be_ready() {
        let ok = originals_condition(&[pod("a", "x", Some("x"), true)], "app");
        assert!(ok.ready, "{}", ok.reason);
        let not = originals_condition(
            &[
                pod("a", "x", Some("x"), true),
                pod("b", "x", Some("x"), false),
            ],
            "app",
        );
        assert!(!not.ready);
        assert_eq!(
            not.reason,
            "1 of 2 original pods are not ready: b: container `app` is not ready"
        );
        assert!(!originals_condition(&[], "app").ready);
    }
}
