//! `clients`: every client that has a relay set up, found by the labels of
//! its relay Pod and Service (the Service outlives the pod in `connect` and
//! `disconnect` alike, so a half-made or half-removed relay is found too).

use std::collections::BTreeSet;

use pontoon_provider_sdk::{
    cluster,
    connection::{Error, Settings},
    k8s_openapi::{
        Metadata as _,
        api::core::v1::{Pod, Service},
        apimachinery::pkg::apis::meta::v1::ObjectMeta,
    },
};

use crate::names;

pub fn clients(settings: &Settings) -> Result<Vec<String>, Error> {
    let namespace = settings.operator_namespace.as_str();
    let selector = names::all_clients_selector();
    let pods = cluster::list::<Pod>(namespace, &selector)?;
    let services = cluster::list::<Service>(namespace, &selector)?;
    Ok(ids(pods
        .iter()
        .map(|p| p.metadata())
        .chain(services.iter().map(|s| s.metadata()))))
}

/// The distinct client ids of the relay objects among `objects`, sorted.
fn ids<'a>(objects: impl Iterator<Item = &'a ObjectMeta>) -> Vec<String> {
    objects
        .filter_map(names::client_of)
        .map(str::to_string)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_counts_once_and_only_relay_objects_count() {
        let mut stray = names::metadata("cc", "carol");
        stray.name = Some("web-1".into());
        let metas = [
            names::metadata("bb", "bob"),
            names::metadata("aa", "alice"),
            names::metadata("bb", "bob"),
            stray,
            ObjectMeta::default(),
        ];
        assert_eq!(ids(metas.iter()), ["aa", "bb"]);
    }
}
