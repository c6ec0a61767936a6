//! Whose an object of a data plane's name is: the Gateway's own child (its
//! controlling owner), or someone else's, which Pontoon never takes over;
//! and the Services the data plane's pods must not be lured behind.

use std::collections::BTreeMap;

use gateway_api::gateways::Gateway;
use k8s_openapi::{api::core::v1::Service, apimachinery::pkg::apis::meta::v1::ObjectMeta};

use crate::data_plane::children::{GATEWAY_NAME_LABEL, instance, labels, object_labels};

/// Whether an object is this Gateway's own child: it names the Gateway
/// (its uid) as its controlling owner. Pontoon sets that reference on every
/// child it makes; an object of a child's name without it is someone
/// else's, and is never applied over (which would also make it the
/// Gateway's, to be deleted with it) nor deleted.
pub fn owned_by(meta: &ObjectMeta, gateway: &Gateway) -> bool {
    let Some(uid) = gateway.metadata.uid.as_deref() else {
        return false;
    };
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// Why a Gateway's data plane is not written: `kind` `name` exists and is
/// not the Gateway's.
pub fn not_ours(kind: &str, namespace: &str, name: &str, gateway: &Gateway) -> String {
    format!(
        "{kind} `{name}` in namespace `{namespace}` exists and is not this Gateway's (it has no \
         controlling owner reference to Gateway `{}`); Pontoon does not take over or delete an \
         object it did not make: rename or delete it, or give the Gateway another name",
        gateway.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The Services of the Gateway's namespace, other than its own, whose
/// selector the data plane's pods would match only because of the
/// Gateway's `infrastructure.labels`: those labels would put Praxis behind
/// another Service, taking its traffic. As `name (selector)`.
pub fn services_lured<'a>(
    gateway: &Gateway,
    services: impl IntoIterator<Item = &'a Service>,
) -> Vec<String> {
    let with_infrastructure = object_labels(gateway);
    let own = {
        let mut own = labels(gateway);
        own.insert(GATEWAY_NAME_LABEL.to_string(), instance(gateway));
        own
    };
    let selects = |selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>| {
        !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    };
    let namespace = gateway.metadata.namespace.as_deref();
    let mut lured: Vec<String> = services
        .into_iter()
        .filter(|s| s.metadata.namespace.as_deref() == namespace)
        .filter(|s| !owned_by(&s.metadata, gateway))
        .filter_map(|s| {
            let selector = s.spec.as_ref()?.selector.as_ref()?;
            (selects(selector, &with_infrastructure) && !selects(selector, &own)).then(|| {
                let pairs: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!(
                    "{} ({})",
                    s.metadata.name.as_deref().unwrap_or_default(),
                    pairs.join(",")
                )
            })
        })
        .collect();
    lured.sort();
    lured
}

#[cfg(test)]
mod tests {
    use gateway_api::gateways::GatewayInfrastructure;
    use k8s_openapi::api::core::v1::ServiceSpec;

    use super::*;
    use crate::data_plane::children::{config_map, tests::gateway};

    #[test]
    fn only_an_object_the_gateway_controls_is_its_child() {
        let gw = gateway();
        let ours = config_map(&gw, "");
        assert!(owned_by(&ours.metadata, &gw));
        let users = ObjectMeta {
            name: Some("praxis-web".into()),
            ..Default::default()
        };
        assert!(!owned_by(&users, &gw), "no owner");
        let mut other = gw.clone();
        other.metadata.uid = Some("u-2".into());
        assert!(
            !owned_by(&config_map(&other, "").metadata, &gw),
            "a Gateway of the same name before this one"
        );
        let says = not_ours("ConfigMap", "infra", "praxis-web", &gw);
        assert!(
            says.starts_with(
                "ConfigMap `praxis-web` in namespace `infra` exists and is not this \
                 Gateway's"
            ) && says.contains("rename or delete it"),
            "{says}"
        );
    }

    #[test]
    fn infrastructure_labels_may_not_put_the_data_plane_behind_another_service() {
        let mut gw = gateway();
        gw.spec.infrastructure = Some(GatewayInfrastructure {
            labels: Some([("app".to_string(), "shop".to_string())].into()),
            ..Default::default()
        });
        let service = |name: &str, namespace: &str, selector: &[(&str, &str)]| Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some(
                    selector
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let shop = service("shop", "infra", &[("app", "shop")]);
        let elsewhere = service("shop", "other", &[("app", "shop")]);
        let unrelated = service("db", "infra", &[("app", "db")]);
        let everything = service("all", "infra", &[]);
        let praxis = service(
            "by-instance",
            "infra",
            &[("app.kubernetes.io/instance", "web")],
        );
        assert_eq!(
            services_lured(&gw, [&shop, &elsewhere, &unrelated, &everything, &praxis]),
            ["shop (app=shop)"],
            "only the Service the infrastructure labels alone make match"
        );
        assert!(services_lured(&gateway(), [&shop]).is_empty());
    }
}
