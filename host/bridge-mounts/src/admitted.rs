//! What the operator admitted for each mount, kept where only the operator
//! writes: a ConfigMap `pontoon-admitted-<uid>` in its own namespace.
//!
//! A mount's request (its target namespace, target, container and
//! provider) is judged once, when the operator admits it; from then on the
//! provider is told what was admitted, never what the mount's fields say
//! now. The CRD refuses changes of those fields, but a cluster may carry an
//! older CRD (Helm never upgrades the CRDs of `crds/`), or one edited by
//! hand: what a user writes after admission can then not widen what the
//! operator does. A mount the operator has no record of has not been
//! admitted by it, whatever its `state` says, and goes through admission.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams},
};
use serde::{Deserialize, Serialize};

use super::{crd::GefyraBridgeMount, settings::MountSettings};
use pontoon_plugins::bindings::Mount;

/// The label on every admission record: the mount's uid.
pub const RECORD_LABEL: &str = "pontoon.dev/admitted-mount";
/// The label on every admission record: the mount's namespace.
pub const NAMESPACE_LABEL: &str = "pontoon.dev/mount-namespace";
/// The record's one key.
const RECORD_KEY: &str = "admitted";

/// The ConfigMap (in the operator's namespace) whose presence closes
/// admission: `pontoon terminate-mounts` (the chart's pre-delete hook)
/// writes it before it ends every mount, so that none is admitted while
/// the operator goes away. Its `reason` key says why, for the refusal.
pub const CLOSED_MARKER: &str = "pontoon-admission-closed";

/// The name of the record of the mount with `uid`.
pub fn record_name(uid: &str) -> String {
    format!("pontoon-admitted-{uid}")
}

/// What a mount was admitted for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Admitted {
    /// `namespace/name` of the mount, for people reading the record.
    pub mount: String,
    pub target_namespace: String,
    pub target: String,
    pub target_container: String,
    pub provider: String,
}

impl Admitted {
    /// What `cr` asks for now.
    pub fn of(cr: &GefyraBridgeMount) -> Self {
        Self {
            mount: cr.qualified_name(),
            target_namespace: cr.target_namespace(),
            target: cr.fields.target.clone().unwrap_or_default(),
            target_container: cr.fields.target_container.clone().unwrap_or_default(),
            provider: cr.provider_name().to_string(),
        }
    }

    /// Each field of `cr` that no longer says what was admitted, as
    /// `targetNamespace: admitted `a`, now `b``.
    pub fn drift(&self, cr: &GefyraBridgeMount) -> Vec<String> {
        let now = Self::of(cr);
        [
            (
                "targetNamespace",
                &self.target_namespace,
                &now.target_namespace,
            ),
            ("target", &self.target, &now.target),
            (
                "targetContainer",
                &self.target_container,
                &now.target_container,
            ),
            ("provider", &self.provider, &now.provider),
        ]
        .into_iter()
        .filter(|(_, admitted, now)| admitted != now)
        .map(|(field, admitted, now)| format!("{field}: admitted `{admitted}`, now `{now}`"))
        .collect()
    }

    /// The mount as its provider sees it: what was admitted, with the
    /// mount's parameters as they are now (the admission policy judges each
    /// change of them) and the operator's settings.
    pub fn mount(&self, cr: &GefyraBridgeMount, settings: &MountSettings) -> Mount {
        Mount {
            name: cr.name_any(),
            namespace: cr.namespace().unwrap_or_default(),
            uid: cr.uid().unwrap_or_default(),
            target: self.target.clone(),
            target_namespace: self.target_namespace.clone(),
            target_container: self.target_container.clone(),
            parameters: cr
                .fields
                .provider_parameter
                .as_ref()
                .map(|p| serde_json::Value::Object(p.clone()).to_string()),
            settings: settings.for_provider(&cr.uid().unwrap_or_default()),
        }
    }

    /// `deploy/web` in namespace `shop`, container `app`, provider
    /// `carrier2mount`, for messages.
    pub fn describe(&self) -> String {
        format!(
            "`{}` in namespace `{}`, container `{}`, provider `{}`",
            self.target, self.target_namespace, self.target_container, self.provider
        )
    }

    fn decode(config_map: &ConfigMap) -> Option<Self> {
        let text = config_map.data.as_ref()?.get(RECORD_KEY)?;
        serde_json::from_str(text).ok()
    }
}

/// The admission records of the operator's namespace, with the ones read or
/// written since the operator started held in memory: a record changes
/// only when the operator writes it, so each is read at most once.
pub struct Admissions {
    api: Api<ConfigMap>,
    known: Mutex<HashMap<String, Admitted>>,
}

impl Admissions {
    pub fn new(client: Client, operator_namespace: &str) -> Arc<Self> {
        Arc::new(Self {
            api: Api::namespaced(client, operator_namespace),
            known: Mutex::default(),
        })
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<String, Admitted>> {
        // Every change is one insert or remove under the lock.
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the mount with `uid` was admitted for, as far as this process
    /// has read or written it (no API call: for watches' mappings).
    pub fn cached(&self, uid: &str) -> Option<Admitted> {
        self.known().get(uid).cloned()
    }

    /// What the mount with `uid` was admitted for; `None` when the operator
    /// never admitted it (or its record does not read).
    pub async fn of(&self, uid: &str) -> Result<Option<Admitted>, kube::Error> {
        if let Some(known) = self.known().get(uid) {
            return Ok(Some(known.clone()));
        }
        let Some(config_map) = self.api.get_opt(&record_name(uid)).await? else {
            return Ok(None);
        };
        let admitted = Admitted::decode(&config_map);
        if let Some(admitted) = &admitted {
            self.known().insert(uid.to_string(), admitted.clone());
        }
        Ok(admitted)
    }

    /// Records that the mount `cr` is admitted for `admitted`.
    pub async fn record(
        &self,
        cr: &GefyraBridgeMount,
        admitted: &Admitted,
    ) -> Result<(), kube::Error> {
        let uid = cr.uid().unwrap_or_default();
        let config_map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(record_name(&uid)),
                labels: Some(
                    [
                        (RECORD_LABEL.to_string(), uid.clone()),
                        (
                            NAMESPACE_LABEL.to_string(),
                            cr.namespace().unwrap_or_default(),
                        ),
                        (
                            "app.kubernetes.io/managed-by".to_string(),
                            "pontoon".to_string(),
                        ),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            data: Some(
                [(
                    RECORD_KEY.to_string(),
                    serde_json::to_string(admitted).unwrap_or_default(),
                )]
                .into(),
            ),
            ..Default::default()
        };
        match self.api.create(&PostParams::default(), &config_map).await {
            Ok(_) => {}
            // Written before, by an admission that did not get to write the
            // mount's state: it judged the same request.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let patch = serde_json::json!({ "data": config_map.data });
                self.api
                    .patch(
                        &record_name(&uid),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?;
            }
            Err(err) => return Err(err),
        }
        self.known().insert(uid, admitted.clone());
        Ok(())
    }

    /// Why no mount is admitted now, when admission is closed. A marker
    /// whose `until` has passed is stale (an uninstall long over): it is
    /// deleted and admission is open.
    pub async fn closed(&self) -> Result<Option<String>, kube::Error> {
        let Some(marker) = self.api.get_opt(CLOSED_MARKER).await? else {
            return Ok(None);
        };
        let data = marker.data.unwrap_or_default();
        let until = data
            .get("until")
            .and_then(|u| u.parse::<k8s_openapi::jiff::Timestamp>().ok());
        if until.is_some_and(|until| until < k8s_openapi::jiff::Timestamp::now()) {
            let _ = self
                .api
                .delete(CLOSED_MARKER, &DeleteParams::default())
                .await;
            return Ok(None);
        }
        let why = data
            .get("reason")
            .cloned()
            .unwrap_or_else(|| "the operator is being uninstalled".into());
        Ok(Some(format!(
            "no mount is admitted now: {why} (ConfigMap `{CLOSED_MARKER}` in namespace `{}`); \
             create the mount again once the operator is back",
            self.api.namespace().unwrap_or_default()
        )))
    }

    /// Drops the record of the mount with `uid` (its deletion is done).
    pub async fn forget(&self, uid: &str) -> Result<(), kube::Error> {
        self.known().remove(uid);
        match self
            .api
            .delete(&record_name(uid), &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Deletes the records of mounts that are gone (a finalizer removed by
    /// hand takes a mount away without its cleanup): `live` holds the uids
    /// of every mount there is in `namespace` (every namespace: `None`).
    /// The number deleted.
    pub async fn prune(
        &self,
        live: &std::collections::HashSet<String>,
        namespace: Option<&str>,
    ) -> Result<usize, kube::Error> {
        let selector = match namespace {
            Some(ns) => format!("{RECORD_LABEL},{NAMESPACE_LABEL}={ns}"),
            None => RECORD_LABEL.to_string(),
        };
        let records = self
            .api
            .list_metadata(&ListParams::default().labels(&selector))
            .await?;
        let mut pruned = 0;
        for record in records.items {
            let Some(uid) = record.labels().get(RECORD_LABEL) else {
                continue;
            };
            if !live.contains(uid) {
                self.forget(uid).await?;
                pruned += 1;
            }
        }
        Ok(pruned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(fields: serde_json::Value) -> GefyraBridgeMount {
        let mut object = serde_json::json!({
            "metadata": { "name": "web-mount", "namespace": "gefyra", "uid": "u-1" },
            "target": "deploy/web",
            "targetContainer": "app",
        });
        if let (Some(object), Some(fields)) = (object.as_object_mut(), fields.as_object()) {
            object.extend(fields.clone());
        }
        serde_json::from_value(object).unwrap()
    }

    #[test]
    fn the_provider_sees_the_mount_and_the_settings() {
        let asked = mount(serde_json::json!({
            "providerParameter": { "tls": { "certificate": "/c.pem" } },
        }));
        let settings = MountSettings {
            operator_namespace: "pontoon".into(),
            carrier_image: "carrier2:1".into(),
            missing_grace_period: std::time::Duration::from_secs(300),
            reconcile_interval: std::time::Duration::from_secs(60),
            target_namespaces: Default::default(),
            guard: Default::default(),
            bridges: Default::default(),
        };
        let request = Admitted::of(&asked).mount(&asked, &settings);
        assert_eq!(request.name, "web-mount");
        assert_eq!(request.namespace, "gefyra");
        assert_eq!(request.uid, "u-1");
        assert_eq!(request.target, "deploy/web");
        assert_eq!(request.target_namespace, "gefyra");
        assert_eq!(request.target_container, "app");
        let parameters: serde_json::Value =
            serde_json::from_str(request.parameters.as_deref().unwrap()).unwrap();
        assert_eq!(parameters["tls"]["certificate"], "/c.pem");
        assert_eq!(request.settings.operator_namespace, "pontoon");
        assert_eq!(request.settings.carrier_image, "carrier2:1");
        assert_eq!(
            request.settings.restore_config_map, "gefyra-carrier2-restore-u-1",
            "the mount's own, by its uid"
        );
        let bare = mount(serde_json::json!({ "target": null, "targetContainer": null }));
        let bare = Admitted::of(&bare).mount(&bare, &settings);
        assert_eq!(
            (bare.target.as_str(), bare.target_container.as_str()),
            ("", "")
        );
        assert_eq!(bare.parameters, None);
    }

    #[test]
    fn a_mount_is_admitted_for_its_resolved_request() {
        let admitted = Admitted::of(&mount(serde_json::json!({})));
        assert_eq!(
            admitted,
            Admitted {
                mount: "gefyra/web-mount".into(),
                target_namespace: "gefyra".into(),
                target: "deploy/web".into(),
                target_container: "app".into(),
                provider: "carrier2mount".into(),
            }
        );
    }

    #[test]
    fn a_target_namespace_added_after_admission_is_drift() {
        let admitted = Admitted::of(&mount(serde_json::json!({})));
        assert!(admitted.drift(&mount(serde_json::json!({}))).is_empty());
        // Spelled out, the same namespace is no drift.
        assert!(
            admitted
                .drift(&mount(serde_json::json!({ "targetNamespace": "gefyra" })))
                .is_empty()
        );
        let moved = mount(serde_json::json!({
            "targetNamespace": "bank", "targetContainer": "api", "provider": "other"
        }));
        assert_eq!(
            admitted.drift(&moved),
            [
                "targetNamespace: admitted `gefyra`, now `bank`",
                "targetContainer: admitted `app`, now `api`",
                "provider: admitted `carrier2mount`, now `other`",
            ]
        );
    }

    #[test]
    fn a_record_that_does_not_read_is_no_record() {
        let unreadable = ConfigMap {
            data: Some([(RECORD_KEY.to_string(), "{".to_string())].into()),
            ..Default::default()
        };
        assert_eq!(Admitted::decode(&unreadable), None);
        assert_eq!(Admitted::decode(&ConfigMap::default()), None);
        let admitted = Admitted::of(&mount(serde_json::json!({})));
        let written = ConfigMap {
            data: Some(
                [(
                    RECORD_KEY.to_string(),
                    serde_json::to_string(&admitted).unwrap(),
                )]
                .into(),
            ),
            ..Default::default()
        };
        assert_eq!(Admitted::decode(&written), Some(admitted));
    }
}
