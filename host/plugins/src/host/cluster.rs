//! The `cluster` interface: what a provider may do on the cluster, checked
//! against its capability scope before anything is sent.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions},
    runtime::events::{Event, EventType as KubeEventType},
};

use super::exec::exec;
use crate::{
    Journal,
    access::{ClusterAccess, api_error},
    bindings::{ClusterError, EventType, ExecOutput, ExecRequest, ObjectRef, PatchType, Verb},
    scope::Request,
    state::CallState,
};
use pontoon_support::metrics::METRICS;

fn to_json(object: &DynamicObject) -> Result<String, ClusterError> {
    serde_json::to_string(object)
        .map_err(|e| ClusterError::Api(format!("cannot encode object: {e}")))
}

/// An object a provider wants to write, with what the scope check needs.
struct Submitted {
    object: DynamicObject,
    api_version: String,
    kind: String,
    name: String,
}

impl Submitted {
    fn reference(&self, namespace: &str) -> ObjectRef {
        ObjectRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: namespace.to_string(),
            name: self.name.clone(),
        }
    }
}

fn parse_object(namespace: &str, text: &str) -> Result<Submitted, ClusterError> {
    let mut object: DynamicObject = serde_json::from_str(text).map_err(|e| {
        ClusterError::Invalid(format!(
            "object is not valid JSON for a Kubernetes object: {e}"
        ))
    })?;
    let types = object
        .types
        .clone()
        .ok_or_else(|| ClusterError::Invalid("object has no apiVersion/kind".into()))?;
    let name = object
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ClusterError::Invalid(format!("{} has no metadata.name", types.kind)))?;
    match object.metadata.namespace.as_deref() {
        None => object.metadata.namespace = Some(namespace.to_string()),
        Some(ns) if ns == namespace => {}
        Some(ns) => {
            return Err(ClusterError::Invalid(format!(
                "{} `{name}` says namespace `{ns}` but was sent to namespace `{namespace}`",
                types.kind
            )));
        }
    }
    Ok(Submitted {
        object,
        api_version: types.api_version,
        kind: types.kind,
        name,
    })
}

impl CallState {
    /// The call's cluster access if `request` is within its scope.
    fn allowed(&self, request: Request<'_>) -> Result<&ClusterAccess, ClusterError> {
        pontoon_support::chaos::point(format_args!(
            "{} {}",
            crate::scope::verb_name(request.verb),
            request.kind
        ));
        let access = self.cluster.as_ref().ok_or_else(|| {
            METRICS.sandbox_stop(&self.module, "denied");
            ClusterError::Denied(format!("{request}: no cluster access in this call"))
        })?;
        access.scope.check(&request).map_err(|message| {
            METRICS.sandbox_stop(&self.module, "denied");
            tracing::warn!(module = &*self.module, subject = &*self.subject, %message, "denied a cluster call");
            ClusterError::Denied(message)
        })?;
        Ok(access)
    }
}

impl CallState {
    /// Access to one named object for `verb`, if the scope allows it.
    /// (`&mut self` because the call state is `Send` but not `Sync`.)
    async fn object_api(
        &mut self,
        r: &ObjectRef,
        verb: Verb,
    ) -> Result<(&ClusterAccess, Api<DynamicObject>), ClusterError> {
        let access = self.allowed(Request {
            api_version: &r.api_version,
            kind: &r.kind,
            verb,
            namespace: &r.namespace,
            name: Some(&r.name),
        })?;
        let api = access.api(&r.api_version, &r.kind, &r.namespace).await?;
        Ok((access, api))
    }

    /// Access for writing a submitted object with `verb`, if the scope allows it.
    async fn submitted_api(
        &mut self,
        s: &Submitted,
        namespace: &str,
        verb: Verb,
    ) -> Result<(&ClusterAccess, Api<DynamicObject>), ClusterError> {
        let access = self.allowed(Request {
            api_version: &s.api_version,
            kind: &s.kind,
            verb,
            namespace,
            name: Some(&s.name),
        })?;
        let api = access.api(&s.api_version, &s.kind, namespace).await?;
        Ok((access, api))
    }
}

/// How many commands of one `exec-all` run at the same time: enough for the
/// pods of a workload to answer together, few enough that a mount of a
/// large workload does not open hundreds of streams to the API server at once.
const EXEC_ALL_CONCURRENCY: usize = 16;

/// One command the scope allowed, with what running it needs.
struct ExecRun {
    pods: Api<Pod>,
    journal: Option<std::sync::Arc<Journal>>,
    request: ExecRequest,
}

impl ExecRun {
    async fn run(self) -> Result<ExecOutput, ClusterError> {
        let ExecRequest {
            pod,
            container,
            command,
            stdin,
            ..
        } = self.request;
        let output = exec(&self.pods, &pod, &container, command, stdin).await?;
        if let Some(journal) = self.journal {
            journal.executed();
        }
        Ok(output)
    }
}

impl CallState {
    /// `request` ready to run, if the scope allows it.
    fn exec_run(&self, request: ExecRequest) -> Result<ExecRun, ClusterError> {
        let access = self.allowed(Request {
            api_version: "v1",
            kind: "Pod",
            verb: Verb::Exec,
            namespace: &request.namespace,
            name: Some(&request.pod),
        })?;
        Ok(ExecRun {
            pods: Api::namespaced(access.client.clone(), &request.namespace),
            journal: access.journal.clone(),
            request,
        })
    }
}

/// One cluster call's time, logged when it ends at debug level
/// (`RUST_LOG=pontoon::plugins=debug`): where a step's time goes, call by call.
struct Timed {
    module: std::sync::Arc<str>,
    subject: std::sync::Arc<str>,
    what: String,
    started: std::time::Instant,
}

impl Drop for Timed {
    fn drop(&mut self) {
        tracing::debug!(
            module = &*self.module,
            subject = &*self.subject,
            ms = format_args!("{:.1}", self.started.elapsed().as_secs_f64() * 1e3),
            "cluster call {}",
            self.what
        );
    }
}

impl CallState {
    /// Times a cluster call when debug logging is on; `what` names it.
    fn timed(&self, what: impl FnOnce() -> String) -> Option<Timed> {
        tracing::enabled!(tracing::Level::DEBUG).then(|| Timed {
            module: self.module.clone(),
            subject: self.subject.clone(),
            what: what(),
            started: std::time::Instant::now(),
        })
    }
}

impl crate::bindings::provider::pontoon::provider::cluster::Host for CallState {
    async fn get(&mut self, r: ObjectRef) -> Result<Option<String>, ClusterError> {
        let _timed = self.timed(|| format!("get {} {}/{}", r.kind, r.namespace, r.name));
        let (_, api) = self.object_api(&r, Verb::Get).await?;
        match api.get_opt(&r.name).await.map_err(api_error)? {
            Some(object) => {
                let json = to_json(&object)?;
                self.hold_host(json.len(), || format!("{} `{}`", r.kind, r.name))
                    .await?;
                Ok(Some(json))
            }
            None => Ok(None),
        }
    }

    async fn list(
        &mut self,
        api_version: String,
        kind: String,
        namespace: String,
        label_selector: String,
    ) -> Result<Vec<String>, ClusterError> {
        let request = Request {
            api_version: &api_version,
            kind: &kind,
            verb: Verb::List,
            namespace: &namespace,
            name: None,
        };
        let _timed = self.timed(|| format!("list {kind} {namespace} {label_selector}"));
        let access = self.allowed(request)?;
        let api = access.api(&api_version, &kind, &namespace).await?;
        let params = access.freshness.list_params(&api_version, &kind);
        let params = if label_selector.is_empty() {
            params
        } else {
            params.labels(&label_selector)
        };
        let listed = list_bounded(&api, params, &api_version, &kind, &namespace).await?;
        self.hold_host(listed.iter().map(String::len).sum(), || {
            format!("the list of {kind} in namespace `{namespace}`")
        })
        .await?;
        Ok(listed)
    }

    async fn create(&mut self, namespace: String, object: String) -> Result<String, ClusterError> {
        let s = parse_object(&namespace, &object)?;
        let _timed = self.timed(|| format!("create {} {namespace}/{}", s.kind, s.name));
        let (access, api) = self.submitted_api(&s, &namespace, Verb::Create).await?;
        let reference = s.reference(&namespace);
        // A created object had no earlier state for the journal to keep.
        write(access, &api, &reference, Write::Create, async {
            api.create(&PostParams::default(), &s.object).await
        })
        .await
    }

    async fn apply(&mut self, namespace: String, object: String) -> Result<String, ClusterError> {
        let s = parse_object(&namespace, &object)?;
        let _timed = self.timed(|| format!("apply {} {namespace}/{}", s.kind, s.name));
        let (access, api) = self.submitted_api(&s, &namespace, Verb::Apply).await?;
        let params = PatchParams::apply(&access.field_manager).force();
        let reference = s.reference(&namespace);
        write(access, &api, &reference, Write::Apply, async {
            api.patch(&s.name, &params, &Patch::Apply(&s.object)).await
        })
        .await
    }

    async fn patch(
        &mut self,
        r: ObjectRef,
        patch_type: PatchType,
        patch: String,
    ) -> Result<String, ClusterError> {
        let _timed = self.timed(|| format!("patch {} {}/{}", r.kind, r.namespace, r.name));
        let (access, api) = self.object_api(&r, Verb::Patch).await?;
        let invalid =
            |e: serde_json::Error| ClusterError::Invalid(format!("patch is not valid JSON: {e}"));
        let patch: Patch<serde_json::Value> = match patch_type {
            PatchType::Merge => Patch::Merge(serde_json::from_str(&patch).map_err(invalid)?),
            PatchType::Strategic => {
                Patch::Strategic(serde_json::from_str(&patch).map_err(invalid)?)
            }
            PatchType::Json => Patch::Json(serde_json::from_str(&patch).map_err(invalid)?),
        };
        let params = PatchParams {
            field_manager: Some(access.field_manager.clone()),
            ..Default::default()
        };
        write(access, &api, &r, Write::Patch, async {
            api.patch(&r.name, &params, &patch).await
        })
        .await
    }

    async fn delete(&mut self, r: ObjectRef) -> Result<bool, ClusterError> {
        let _timed = self.timed(|| format!("delete {} {}/{}", r.kind, r.namespace, r.name));
        let (access, api) = self.object_api(&r, Verb::Delete).await?;
        let journal = access.journal.clone();
        let _turn = access
            .writes
            .turn(&r.api_version, &r.kind, &r.namespace, &r.name)
            .await;
        delete(&api, &r, &DeleteParams::background(), journal.as_deref()).await
    }

    async fn delete_if_unchanged(
        &mut self,
        r: ObjectRef,
        resource_version: String,
    ) -> Result<bool, ClusterError> {
        let _timed =
            self.timed(|| format!("delete-if-unchanged {} {}/{}", r.kind, r.namespace, r.name));
        let (access, api) = self.object_api(&r, Verb::Delete).await?;
        let journal = access.journal.clone();
        if resource_version.is_empty() {
            // An empty precondition would be ignored by the API server, which
            // would turn this into an unconditional delete.
            return Err(ClusterError::Invalid(format!(
                "delete-if-unchanged of {} `{}`: the resource version is empty",
                r.kind, r.name
            )));
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(resource_version),
                uid: None,
            }),
            ..DeleteParams::background()
        };
        let _turn = access
            .writes
            .turn(&r.api_version, &r.kind, &r.namespace, &r.name)
            .await;
        // A failed precondition is a 409 Conflict, which `api_error` maps to `conflict`.
        delete(&api, &r, &params, journal.as_deref()).await
    }

    async fn exec(
        &mut self,
        namespace: String,
        pod: String,
        container: String,
        command: Vec<String>,
        stdin: Option<Vec<u8>>,
    ) -> Result<ExecOutput, ClusterError> {
        let _timed = self.timed(|| format!("exec {namespace}/{pod}"));
        let what = format!("the output of exec in pod `{pod}`");
        let output = self
            .exec_run(ExecRequest {
                namespace,
                pod,
                container,
                command,
                stdin,
            })?
            .run()
            .await?;
        self.hold_host(output.stdout.len() + output.stderr.len(), || what)
            .await?;
        Ok(output)
    }

    async fn exec_all(
        &mut self,
        requests: Vec<ExecRequest>,
    ) -> Vec<Result<ExecOutput, ClusterError>> {
        let _timed = self.timed(|| format!("exec-all in {} pods", requests.len()));
        // Each command is checked as `exec` checks it, all before any runs:
        // a denied one fails on its own and never reaches the API server.
        let runs: Vec<_> = requests.into_iter().map(|r| self.exec_run(r)).collect();
        let count = runs.len();
        let mut running = futures::stream::iter(runs)
            .map(|run| async move { run?.run().await })
            .buffered(EXEC_ALL_CONCURRENCY);
        // Each output counts against the call's memory as soon as it is
        // read, not once all are: a workload of many pods, each printing
        // up to the exec cap, would otherwise be held whole before any
        // limit applied. Past the limit the commands not yet read are
        // dropped (which ends them) and the call fails.
        let mut outputs = Vec::with_capacity(count);
        while let Some(output) = running.next().await {
            if let Ok(read) = &output {
                let bytes = read.stdout.len() + read.stderr.len();
                let held = self
                    .hold_host(bytes, || "the outputs of exec-all".to_string())
                    .await;
                if let Err(refused) = held {
                    drop(running);
                    return (0..count).map(|_| Err(refused.clone())).collect();
                }
            }
            outputs.push(output);
        }
        outputs
    }

    async fn event(
        &mut self,
        event_type: EventType,
        reason: String,
        message: String,
    ) -> Result<(), ClusterError> {
        let module = self.module.to_string();
        let Some(events) = self.cluster.as_ref().and_then(|c| c.events.clone()) else {
            tracing::info!(module, subject = &*self.subject, reason, "{message}");
            return Ok(());
        };
        let event = Event {
            type_: match event_type {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason,
            note: Some(pontoon_support::controller_support::event_note(message)),
            action: module,
            secondary: None,
        };
        // Posted in the background: an Event is a write the provider's step
        // does not depend on, and waiting for each one (three pods patched,
        // three Events) held the step, and its turn, for every round trip.
        // One after the other, as the guest sent them: the recorder folds a
        // repeated reason into one Event's series only when the earlier
        // post is done. At most EVENTS_IN_FLIGHT wait at once; a module
        // posting faster waits for a place.
        let place = EVENTS_IN_FLIGHT
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ClusterError::Api("the operator is stopping".into()))?;
        let subject = self.subject.to_string();
        let previous = self.last_event.take();
        self.last_event = Some(tokio::spawn(async move {
            if let Some(previous) = previous {
                // A post that panicked is over too.
                let _ = previous.await;
            }
            if let Err(err) = events.recorder.publish(&event, &events.object).await {
                tracing::warn!(subject, reason = event.reason, error = %err, "cannot post a provider's Event");
            }
            drop(place);
        }));
        Ok(())
    }
}

/// Provider Events being posted at once (see `event`).
static EVENTS_IN_FLIGHT: std::sync::LazyLock<std::sync::Arc<tokio::sync::Semaphore>> =
    std::sync::LazyLock::new(|| std::sync::Arc::new(tokio::sync::Semaphore::new(64)));

/// A write of the `cluster` interface that leaves the object in place.
#[derive(Clone, Copy)]
enum Write {
    Create,
    Apply,
    Patch,
}

impl Write {
    fn verb(self) -> &'static str {
        match self {
            Write::Create => "create",
            Write::Apply => "apply",
            Write::Patch => "patch",
        }
    }
}

/// Every create, apply and patch goes the same way: it waits for the
/// object's turn (one write at a time to each object); the journal, when
/// there is one, keeps the object as it was before its first write (a
/// created object had none); the call; the list cache is told how fresh it
/// must be to show the write; the journal records it.
async fn write(
    access: &ClusterAccess,
    api: &Api<DynamicObject>,
    reference: &ObjectRef,
    kind: Write,
    call: impl Future<Output = Result<DynamicObject, kube::Error>>,
) -> Result<String, ClusterError> {
    let _turn = access
        .writes
        .turn(
            &reference.api_version,
            &reference.kind,
            &reference.namespace,
            &reference.name,
        )
        .await;
    let journal = access.journal.as_deref();
    if let (Some(journal), Write::Apply | Write::Patch) = (journal, kind) {
        journal.before_write(api, reference).await?;
    }
    let written = call.await.map_err(api_error)?;
    access.freshness.wrote(
        &reference.api_version,
        &reference.kind,
        written.metadata.resource_version.as_deref(),
    );
    if let Some(journal) = journal {
        journal.wrote(reference, kind.verb());
    }
    to_json(&written)
}

/// Deletes `r`; `false` when it was gone already. Recorded in `journal`.
async fn delete(
    api: &Api<DynamicObject>,
    r: &ObjectRef,
    params: &DeleteParams,
    journal: Option<&Journal>,
) -> Result<bool, ClusterError> {
    if let Some(journal) = journal {
        journal.before_write(api, r).await?;
    }
    let deleted = match api.delete(&r.name, params).await {
        Ok(_) => true,
        Err(kube::Error::Api(status)) if status.is_not_found() => false,
        Err(err) => return Err(api_error(err)),
    };
    if let Some(journal) = journal.filter(|_| deleted) {
        journal.wrote(r, "delete");
    }
    Ok(deleted)
}

/// Objects a list asks the API server for at a time.
const LIST_PAGE: u32 = 500;
/// The most JSON one list may return to a provider: a namespace decides how
/// many pods (or HPAs) it holds, and the operator holds every tenant's calls.
pub const MAX_LIST_BYTES: usize = 8 * 1024 * 1024;

/// The first page of a list asked for with `params`: [`LIST_PAGE`] objects.
fn first_page(params: kube::api::ListParams) -> kube::api::ListParams {
    let mut params = params.limit(LIST_PAGE);
    if params.resource_version.as_deref() == Some("0") {
        // "Any version" as `0` makes the API server's cache ignore `limit`
        // and send the whole list; "not older than 1" asks for the same
        // freshness (any) and is answered from the cache a page at a time.
        params.resource_version = Some("1".into());
        params.version_match = Some(kube::api::VersionMatch::NotOlderThan);
    }
    params
}

/// Every object `params` selects, as JSON with apiVersion and kind, page by
/// page; more than [`MAX_LIST_BYTES`] fails naming the cap.
async fn list_bounded(
    api: &Api<DynamicObject>,
    params: kube::api::ListParams,
    api_version: &str,
    kind: &str,
    namespace: &str,
) -> Result<Vec<String>, ClusterError> {
    let mut params = first_page(params);
    let mut listed = Vec::new();
    let mut bytes = 0;
    loop {
        let page = api.list(&params).await.map_err(api_error)?;
        for mut object in page.items {
            // List items come without apiVersion/kind; providers parse them as objects.
            object.types = Some(kube::api::TypeMeta {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
            });
            let json = to_json(&object)?;
            bytes += json.len();
            if bytes > MAX_LIST_BYTES {
                return Err(ClusterError::Denied(format!(
                    "the list of {kind} in namespace `{namespace}` passed {} MiB after {} \
                     objects, the most a list may return to a provider; list with a label \
                     selector that takes fewer",
                    MAX_LIST_BYTES / (1024 * 1024),
                    listed.len()
                )));
            }
            listed.push(json);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            // The next page continues the first one's snapshot: a version
            // may not be given with it.
            Some(token) => {
                params.resource_version = None;
                params.version_match = None;
                params = params.continue_token(&token);
            }
            None => return Ok(listed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{first_page, parse_object};
    use crate::bindings::ClusterError;

    #[test]
    fn a_list_asks_for_pages_even_where_any_version_does() {
        use kube::api::{ListParams, VersionMatch};
        let any = first_page(ListParams::default().match_any());
        assert_eq!(any.limit, Some(500));
        assert_eq!(
            (any.resource_version.as_deref(), any.version_match),
            (Some("1"), Some(VersionMatch::NotOlderThan)),
            "`0` would make the cache ignore the limit"
        );
        let fresh = first_page(
            ListParams::default()
                .at("42")
                .matching(VersionMatch::NotOlderThan),
        );
        assert_eq!(fresh.resource_version.as_deref(), Some("42"));
        assert_eq!(first_page(ListParams::default()).resource_version, None);
    }

    #[test]
    fn an_object_goes_to_the_namespace_it_was_sent_to() {
        let sent = parse_object(
            "shop",
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web-shadow"}}"#,
        )
        .unwrap();
        assert_eq!(sent.object.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(
            (
                sent.api_version.as_str(),
                sent.kind.as_str(),
                sent.name.as_str()
            ),
            ("v1", "ConfigMap", "web-shadow")
        );
    }

    #[test]
    fn an_object_naming_another_namespace_or_no_name_is_invalid() {
        let elsewhere = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"kube-system"}}"#;
        let Err(ClusterError::Invalid(message)) = parse_object("shop", elsewhere) else {
            panic!("an object for kube-system was accepted in shop");
        };
        assert_eq!(
            message,
            "ConfigMap `x` says namespace `kube-system` but was sent to namespace `shop`"
        );
        let nameless = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":""}}"#;
        let Err(ClusterError::Invalid(message)) = parse_object("shop", nameless) else {
            panic!("an object without a name was accepted");
        };
        assert_eq!(message, "ConfigMap has no metadata.name");
    }
}
