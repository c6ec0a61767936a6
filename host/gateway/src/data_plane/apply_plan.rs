//! Which of a Gateway's children (ConfigMap and certificate Secret,
//! Deployment, Service) to write, and in which order. Every status change of
//! a child wakes its Gateway, so a child is written only when it would be
//! written differently from its last apply, or when the stores do not show
//! it as applied (someone deleted or edited it). Pure: the Gateway's
//! reconcile executes the plan.

use std::{
    hash::{Hash, Hasher},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{apps::v1::Deployment, core::v1::Service},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// How long after an apply the stores may still show the children as they
/// were: the watch events of the apply wake the Gateway again, so writing
/// the same children a second time would only load the API server.
pub const STORE_LAG: Duration = Duration::from_secs(1);

/// What the last applies of a Gateway's children wrote: a child that would
/// be written the same, and that nobody else changed, is not written again.
#[derive(Clone, Debug)]
pub struct Applied {
    /// The data plane's hash (config and certificates) the ConfigMap and
    /// certificate Secret were applied with, and the ConfigMap's version.
    pub data_plane: String,
    pub config_map_version: Option<String>,
    /// Fingerprints of the Deployment and Service as applied.
    pub deployment_hash: u64,
    pub service_hash: u64,
    /// When a child was last applied, and the Deployment and Service the API
    /// server returned: what counts until the stores show them.
    pub at: Instant,
    pub deployment: Arc<Deployment>,
    pub service: Arc<Service>,
}

/// The children as this reconcile would write them.
#[derive(Clone, Copy, Debug)]
pub struct Desired<'a> {
    /// The data plane's hash: of the config and the certificates.
    pub data_plane: &'a str,
    /// [`fingerprint`]s of the Deployment and the Service.
    pub deployment: u64,
    pub service: u64,
}

/// The children as the stores show them (`None`: not there).
#[derive(Clone, Copy, Debug, Default)]
pub struct Shown<'a> {
    /// The ConfigMap's metadata (the store keeps nothing else of it).
    pub config_map: Option<&'a ObjectMeta>,
    pub deployment: Option<&'a Deployment>,
    pub service: Option<&'a Service>,
}

/// In which order the children are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// A first apply: every child at once, so that the Deployment's rollout,
    /// the longest wait, starts a round trip earlier. Its pods cannot start
    /// before their ConfigMap exists (a kubelet retries the mount), so they
    /// never run a config that is not theirs.
    AllAtOnce,
    /// An update: the ConfigMap and certificate Secret first, then the
    /// Deployment and the Service, so that no pod of a rollout mounts the
    /// old config (Praxis reads its config once, at start).
    ConfigFirst,
}

/// What to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The ConfigMap, and the certificate Secret when there is one (both
    /// carry the data plane's hash).
    pub config: bool,
    pub deployment: bool,
    pub service: bool,
    pub order: Order,
    /// When to look again: a child the stores do not show as applied yet,
    /// within [`STORE_LAG`] of its apply, is not written now.
    pub recheck: Option<Duration>,
}

/// Decides which children to write, from what they would be, what the
/// stores show, and the last apply (`None`: none since this process started).
pub fn plan(
    desired: &Desired<'_>,
    shown: &Shown<'_>,
    last: Option<&Applied>,
    now: Instant,
) -> Plan {
    let order = if shown.config_map.is_none() && last.is_none() {
        Order::AllAtOnce
    } else {
        Order::ConfigFirst
    };
    let Some(last) = last else {
        return Plan {
            config: true,
            deployment: true,
            service: true,
            order,
            recheck: None,
        };
    };
    // Just after an apply the stores lag behind (their events will wake the
    // Gateway): a child is looked at again when the lag is over.
    let lag = STORE_LAG.checked_sub(now.saturating_duration_since(last.at));
    let mut recheck = None;
    let mut stale = |same: bool, shown: bool| match (same, shown, lag) {
        (false, _, _) | (true, false, None) => true,
        (true, true, _) => false,
        (true, false, Some(lag)) => {
            recheck = Some(lag);
            false
        }
    };
    let config = stale(
        last.data_plane == desired.data_plane,
        shown.config_map.map(|m| m.resource_version.clone())
            == Some(last.config_map_version.clone()),
    );
    let deployment = stale(
        last.deployment_hash == desired.deployment,
        shown.deployment.map(|d| d.metadata.generation)
            == Some(last.deployment.metadata.generation),
    );
    let service = stale(
        last.service_hash == desired.service,
        shown
            .service
            .is_some_and(|s| service_as_applied(s, &last.service)),
    );
    Plan {
        config,
        deployment,
        service,
        order,
        recheck,
    }
}

/// Identifies a child as it would be applied.
pub fn fingerprint(child: &impl serde::Serialize) -> Result<u64, serde_json::Error> {
    let mut hasher = std::hash::DefaultHasher::new();
    serde_json::to_vec(child)?.hash(&mut hasher);
    Ok(hasher.finish())
}

/// Whether the stored Service is as applied: same metadata this controller
/// sets, same spec (its status may have moved on: a load-balancer address).
fn service_as_applied(stored: &Service, ours: &Service) -> bool {
    stored.spec == ours.spec
        && stored.metadata.labels == ours.metadata.labels
        && stored.metadata.annotations == ours.metadata.annotations
        && stored.metadata.owner_references == ours.metadata.owner_references
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, ServiceSpec, ServiceStatus,
    };

    const HASH: &str = "0123456789abcdef";

    fn deployment(generation: i64) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some("praxis-gw".into()),
                generation: Some(generation),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn service(selector: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("praxis-gw".into()),
                labels: Some([("app.kubernetes.io/name".into(), "praxis".into())].into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some([("app.kubernetes.io/instance".into(), selector.into())].into()),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn config_map(version: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some("praxis-gw".into()),
            resource_version: Some(version.into()),
            ..Default::default()
        }
    }

    /// The children as this reconcile would write them: as last applied.
    fn desired(applied: &Applied) -> Desired<'_> {
        Desired {
            data_plane: &applied.data_plane,
            deployment: applied.deployment_hash,
            service: applied.service_hash,
        }
    }

    /// An apply made `ago` before the instant returned with it: ConfigMap
    /// version 7, Deployment generation 2, a Service selecting `gw`.
    fn applied_ago(ago: Duration) -> (Applied, Instant) {
        let at = Instant::now();
        let applied = Applied {
            data_plane: HASH.into(),
            config_map_version: Some("7".into()),
            deployment_hash: 11,
            service_hash: 12,
            at,
            deployment: Arc::new(deployment(2)),
            service: Arc::new(service("gw")),
        };
        (applied, at + ago)
    }

    /// What the stores show once they caught up with `applied`.
    struct Store {
        config_map: Option<ObjectMeta>,
        deployment: Option<Deployment>,
        service: Option<Service>,
    }

    impl Store {
        fn caught_up() -> Self {
            Self {
                config_map: Some(config_map("7")),
                deployment: Some(deployment(2)),
                service: Some(service("gw")),
            }
        }

        fn shown(&self) -> Shown<'_> {
            Shown {
                config_map: self.config_map.as_ref(),
                deployment: self.deployment.as_ref(),
                service: self.service.as_ref(),
            }
        }
    }

    fn everything(order: Order) -> Plan {
        Plan {
            config: true,
            deployment: true,
            service: true,
            order,
            recheck: None,
        }
    }

    fn nothing(order: Order) -> Plan {
        Plan {
            config: false,
            deployment: false,
            service: false,
            order,
            recheck: None,
        }
    }

    const LONG_AGO: Duration = Duration::from_secs(60);

    #[test]
    fn a_first_apply_writes_every_child_at_once() {
        let (last, now) = applied_ago(LONG_AGO);
        let plan = plan(&desired(&last), &Shown::default(), None, now);
        assert_eq!(plan, everything(Order::AllAtOnce));
    }

    #[test]
    fn after_a_restart_every_child_is_written_again_config_first() {
        // The operator remembers nothing, but the ConfigMap is there: its
        // pods run, so a new config must not race their rollout.
        let (last, now) = applied_ago(LONG_AGO);
        let plan = plan(&desired(&last), &Store::caught_up().shown(), None, now);
        assert_eq!(plan, everything(Order::ConfigFirst));
    }

    #[test]
    fn nothing_changed_writes_nothing() {
        let (last, now) = applied_ago(LONG_AGO);
        let plan = plan(
            &desired(&last),
            &Store::caught_up().shown(),
            Some(&last),
            now,
        );
        assert_eq!(plan, nothing(Order::ConfigFirst));
    }

    #[test]
    fn a_route_change_writes_the_config_then_the_deployment_not_the_service() {
        // A new config: a new data-plane hash, which the Deployment's pod
        // template carries (so its fingerprint changes too).
        let (last, now) = applied_ago(LONG_AGO);
        let changed = Desired {
            data_plane: "fedcba9876543210",
            deployment: 21,
            ..desired(&last)
        };
        let plan = plan(&changed, &Store::caught_up().shown(), Some(&last), now);
        assert_eq!(
            plan,
            Plan {
                config: true,
                deployment: true,
                service: false,
                order: Order::ConfigFirst,
                recheck: None,
            }
        );
    }

    /// Asserts that the plan for `store` writes `child` alone.
    fn assert_writes_only(child: &str, store: &Store, last: &Applied, now: Instant) {
        assert_eq!(
            plan(&desired(last), &store.shown(), Some(last), now),
            Plan {
                config: child == "ConfigMap",
                deployment: child == "Deployment",
                service: child == "Service",
                order: Order::ConfigFirst,
                recheck: None,
            },
            "only the {child} is written"
        );
    }

    #[test]
    fn a_child_someone_deleted_is_put_back() {
        let (last, now) = applied_ago(LONG_AGO);
        for deleted in ["ConfigMap", "Deployment", "Service"] {
            let mut store = Store::caught_up();
            match deleted {
                "ConfigMap" => store.config_map = None,
                "Deployment" => store.deployment = None,
                _ => store.service = None,
            }
            assert_writes_only(deleted, &store, &last, now);
        }
    }

    #[test]
    fn a_child_someone_edited_is_put_back() {
        let (last, now) = applied_ago(LONG_AGO);
        // An edit moves the ConfigMap's version, the Deployment's
        // generation, the Service's spec.
        for edited in ["ConfigMap", "Deployment", "Service"] {
            let mut store = Store::caught_up();
            match edited {
                "ConfigMap" => store.config_map = Some(config_map("8")),
                "Deployment" => store.deployment = Some(deployment(3)),
                _ => store.service = Some(service("elsewhere")),
            }
            assert_writes_only(edited, &store, &last, now);
        }
    }

    #[test]
    fn stores_lagging_within_the_grace_are_looked_at_again_not_written() {
        let (last, now) = applied_ago(Duration::from_millis(300));
        // The stores still show the children as they were before the apply.
        let store = Store {
            config_map: Some(config_map("6")),
            deployment: Some(deployment(1)),
            service: None,
        };
        let plan = plan(&desired(&last), &store.shown(), Some(&last), now);
        assert_eq!(
            plan,
            Plan {
                recheck: Some(Duration::from_millis(700)),
                ..nothing(Order::ConfigFirst)
            },
            "looked at again when the grace is over"
        );
    }

    #[test]
    fn stores_lagging_past_the_grace_get_the_children_written() {
        let (last, now) = applied_ago(STORE_LAG + Duration::from_millis(1));
        let store = Store {
            config_map: Some(config_map("6")),
            ..Store::caught_up()
        };
        let plan = plan(&desired(&last), &store.shown(), Some(&last), now);
        assert_eq!(
            plan,
            Plan {
                config: true,
                ..nothing(Order::ConfigFirst)
            }
        );
    }

    #[test]
    fn a_change_is_written_even_within_the_grace() {
        let (last, now) = applied_ago(Duration::from_millis(300));
        let changed = Desired {
            service: 99,
            ..desired(&last)
        };
        let plan = plan(&changed, &Store::caught_up().shown(), Some(&last), now);
        assert_eq!(
            plan,
            Plan {
                service: true,
                ..nothing(Order::ConfigFirst)
            }
        );
    }

    #[test]
    fn a_service_whose_status_alone_changed_is_not_an_edit() {
        let (last, now) = applied_ago(LONG_AGO);
        let mut addressed = service("gw");
        addressed.metadata.resource_version = Some("42".into());
        addressed.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress {
                    ip: Some("192.0.2.10".into()),
                    ..Default::default()
                }]),
            }),
            ..Default::default()
        });
        let store = Store {
            service: Some(addressed),
            ..Store::caught_up()
        };
        let plan = plan(&desired(&last), &store.shown(), Some(&last), now);
        assert_eq!(plan, nothing(Order::ConfigFirst));
    }

    #[test]
    fn a_fingerprint_changes_with_the_child() {
        let a = fingerprint(&service("gw")).unwrap();
        assert_eq!(a, fingerprint(&service("gw")).unwrap());
        assert_ne!(a, fingerprint(&service("elsewhere")).unwrap());
    }
}
