//! The checks of a connection provider (`wit/connection.wit`), run against
//! a real cluster in a scratch namespace that stands for the operator's.
//!
//! Two made-up clients are connected, the first with two ports of two
//! made-up bridges: each port gets an endpoint (`host:port`, distinct), the
//! same ports keep their endpoints from call to call and a port dropped
//! leaves the other's alone. Everything the provider writes (the host's
//! journal) must be in the operator namespace and the client's, by its
//! label or its name; `session` must be honest about a client never
//! connected; `clients` lists a connected client and forgets a
//! disconnected one; `disconnect` removes everything, is safe to repeat
//! and to call for an id never connected, and leaves the other client
//! alone. Nothing needs the relay (or whatever the provider runs) to
//! actually run: on a test bed its pods are fakes.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use kube::Client;
use serde_json::Value;

use super::{
    Options, fixtures,
    report::{Check, Recorder},
    writes::put_back_problem,
};
use crate::{
    bridge::{
        connections::{CLIENT_LABEL, client_id},
        sessions::default_relay_image,
    },
    plugins::{
        CallError, ClusterAccess, ConnectionModule, Discovery, Freshness, Journal, WriteTurns,
        Written,
        bindings::{
            NamespaceScope, ProviderError,
            connection_world::{
                Client as ConnClient, Endpoint, PortRequest, SessionState, Settings,
            },
        },
    },
};

const METADATA: &str = "metadata names the module and asks for the operator namespace only";
const CONNECT: &str =
    "connect for a new client gives each requested port an endpoint (host:port, distinct)";
const CONNECT_STABLE: &str = "connect again with the same ports keeps every endpoint";
const CONNECT_DROPPED: &str = "connect without one of the ports keeps the other's endpoint";
const WRITES_OWNED: &str = "everything connect wrote is in the operator namespace and the client's (labelled pontoon.dev/connection-client: <id> or named with the id; pods labelled)";
const SESSION_CONNECTED: &str = "session answers for a connected client";
const SESSION_NEVER: &str = "session of a client never connected is gone, not live";
const CLIENTS_LISTS: &str = "clients lists a connected client's id";
const DISCONNECT: &str = "disconnect completes (true within the timeout)";
const DISCONNECT_LEFTOVERS: &str = "disconnect leaves nothing connect wrote";
const CLIENTS_AFTER: &str = "clients no longer lists a disconnected client";
const SESSION_AFTER: &str = "session of a disconnected client is gone, not live";
const DISCONNECT_TWICE: &str = "disconnect again is true";
const OTHER_CLIENT: &str =
    "disconnect leaves another client's objects alone (still there, still listed)";
const DISCONNECT_UNKNOWN: &str =
    "disconnect of a client id never connected is harmless (true, never an error)";

/// Runs every check of a connection provider; returns them all.
pub(super) async fn run(
    client: Client,
    module: Arc<ConnectionModule>,
    options: &Options,
    report: Box<dyn FnMut(&Check) + Send>,
) -> anyhow::Result<Vec<Check>> {
    let suffix = fixtures::random_suffix();
    let operator_ns = format!("conformance-{suffix}-operator");
    fixtures::create_namespace(&client, &operator_ns).await?;
    let mut run = Run {
        client: client.clone(),
        module,
        discovery: Arc::default(),
        freshness: Arc::new(Freshness::consistent()),
        writes: Arc::default(),
        settings: Settings {
            operator_namespace: operator_ns.clone(),
            relay_image: default_relay_image(),
        },
        timeout: options.timeout,
        checks: Recorder::new(report),
    };
    let first = run.subject(&format!("conformance-a-{suffix}"));
    let second = run.subject(&format!("conformance-b-{suffix}"));
    run.all(&suffix, &first, &second).await;
    // What a failed check left: removed as the operator would, then with
    // the namespace.
    for subject in [&first, &second] {
        let _ = run.disconnect_until_done(subject).await;
    }
    if !options.keep_namespaces {
        let _ = fixtures::delete_namespace(&client, &operator_ns).await;
    }
    Ok(run.checks.into_checks())
}

/// A made-up client and what the provider wrote for it.
struct Subject {
    client: ConnClient,
    journal: Arc<Journal>,
}

impl Subject {
    fn id(&self) -> &str {
        &self.client.id
    }
}

struct Run {
    client: Client,
    module: Arc<ConnectionModule>,
    discovery: Arc<Discovery>,
    freshness: Arc<Freshness>,
    writes: Arc<WriteTurns>,
    settings: Settings,
    timeout: Duration,
    checks: Recorder,
}

/// Polls until a wait's timeout passes.
struct Deadline(Instant, Duration);

impl Deadline {
    fn passed(&self) -> bool {
        self.0.elapsed() > self.1
    }
}

async fn pause(wait: Duration) {
    tokio::time::sleep(wait.clamp(Duration::from_millis(200), Duration::from_secs(5))).await;
}

impl Run {
    fn subject(&self, name: &str) -> Subject {
        Subject {
            client: ConnClient {
                name: name.into(),
                id: client_id(name),
                settings: self.settings.clone(),
            },
            journal: Arc::default(),
        }
    }

    /// The cluster as the operator gives it to a call for client `id`
    /// (`""`: no client, as for `clients`), recording writes in `journal`.
    fn access(&self, id: &str, journal: Option<&Arc<Journal>>) -> ClusterAccess {
        ClusterAccess {
            client: self.client.clone(),
            discovery: self.discovery.clone(),
            freshness: self.freshness.clone(),
            writes: self.writes.clone(),
            scope: self.module.scope_for(&self.settings, id),
            field_manager: self.module.name().to_string(),
            events: None,
            journal: journal.cloned(),
            bridges: Arc::new([]),
            notes: None,
        }
    }

    fn deadline(&self) -> Deadline {
        Deadline(Instant::now(), self.timeout)
    }

    async fn all(&mut self, suffix: &str, first: &Subject, second: &Subject) {
        let metadata = metadata_problem(&self.module);
        self.checks.record(METADATA, metadata.map_or(Ok(()), Err));

        let requests = sample_requests(suffix);
        let connected = self.connect_steps(first, &requests).await;

        let written = self.owned_problems(first).await;
        self.checks.record(WRITES_OWNED, written);

        let session = self
            .module
            .session(self.access(first.id(), Some(&first.journal)), &first.client)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        self.checks.record(SESSION_CONNECTED, session);
        let never = self.subject(&format!("conformance-never-{suffix}"));
        let honest = self.gone(&never, "was never connected").await;
        self.checks.record(SESSION_NEVER, honest);

        if connected {
            let listed = self.wait_listed(first.id(), true).await;
            self.checks.record(CLIENTS_LISTS, listed);
        } else {
            self.checks
                .skip(&[CLIENTS_LISTS], &format!("`{CONNECT}` failed"));
        }

        // The second client, whose objects the first's disconnect must leave.
        let other = self
            .drive_connect(second, &requests[..1])
            .await
            .map_err(|e| format!("connect for a second client failed: {e}"));
        let other_before = match other {
            Ok(_) => Ok(self.read_written(second).await),
            Err(e) => Err(e),
        };

        let disconnected = self.disconnect_until_done(first).await;
        let done = self.checks.record(DISCONNECT, disconnected);
        let left = self.wait_put_back(first).await;
        self.checks.record(DISCONNECT_LEFTOVERS, left);
        if done {
            let forgotten = self.wait_listed(first.id(), false).await;
            self.checks.record(CLIENTS_AFTER, forgotten);
            let honest = self.gone(first, "was disconnected").await;
            self.checks.record(SESSION_AFTER, honest);
            let again = match self
                .module
                .disconnect(
                    self.access(first.id(), Some(&first.journal)),
                    &self.settings,
                    first.id(),
                )
                .await
            {
                Ok(true) => Ok(()),
                Ok(false) => Err("disconnect said false after it had said true".into()),
                Err(e) => Err(e.to_string()),
            };
            self.checks.record(DISCONNECT_TWICE, again);
        } else {
            self.checks.skip(
                &[CLIENTS_AFTER, SESSION_AFTER, DISCONNECT_TWICE],
                &format!("`{DISCONNECT}` failed"),
            );
        }

        match other_before {
            Ok(before) => {
                let untouched = self.untouched_problem(second, &before).await;
                self.checks.record(OTHER_CLIENT, untouched);
            }
            Err(why) => self.checks.skip(&[OTHER_CLIENT], &why),
        }

        let unknown = self.subject(&format!("conformance-unknown-{suffix}"));
        let harmless = self.disconnect_until_done(&unknown).await;
        self.checks.record(DISCONNECT_UNKNOWN, harmless);
    }

    /// `connect` for a new client, again, and with one port fewer; whether
    /// the first completed.
    async fn connect_steps(&mut self, subject: &Subject, requests: &[PortRequest]) -> bool {
        let first = match self.drive_connect(subject, requests).await {
            Ok(endpoints) => {
                let problems = endpoint_problems(requests, &endpoints);
                if problems.is_empty() {
                    Ok(endpoints)
                } else {
                    Err(problems.join("; "))
                }
            }
            Err(e) => Err(e),
        };
        let first = match first {
            Ok(endpoints) => {
                self.checks.record(CONNECT, Ok(()));
                endpoints
            }
            Err(why) => {
                self.checks.record(CONNECT, Err(why));
                self.checks.skip(
                    &[CONNECT_STABLE, CONNECT_DROPPED],
                    &format!("`{CONNECT}` failed"),
                );
                return false;
            }
        };
        let again = self
            .connect_once(subject, requests)
            .await
            .and_then(|now| kept(requests, &first, &now));
        self.checks.record(CONNECT_STABLE, again);
        let fewer = &requests[1..];
        let dropped = self.connect_once(subject, fewer).await.and_then(|now| {
            let mut problems = kept(fewer, &first, &now)
                .err()
                .into_iter()
                .collect::<Vec<_>>();
            let gone = &requests[0];
            if now
                .iter()
                .any(|e| e.bridge_uid == gone.bridge_uid && e.port == gone.port)
            {
                problems.push(format!(
                    "still an endpoint for {}, which is no longer requested",
                    describe(gone)
                ));
            }
            if problems.is_empty() {
                Ok(())
            } else {
                Err(problems.join("; "))
            }
        });
        self.checks.record(CONNECT_DROPPED, dropped);
        true
    }

    async fn connect_once(
        &self,
        subject: &Subject,
        requests: &[PortRequest],
    ) -> Result<Vec<Endpoint>, String> {
        self.module
            .connect(
                self.access(subject.id(), Some(&subject.journal)),
                &subject.client,
                requests,
            )
            .await
            .map(|c| c.endpoints)
            .map_err(|e| e.to_string())
    }

    /// Calls `connect` until it is complete with an endpoint for every
    /// request, as the operator calls it again while it is not.
    async fn drive_connect(
        &self,
        subject: &Subject,
        requests: &[PortRequest],
    ) -> Result<Vec<Endpoint>, String> {
        let deadline = self.deadline();
        loop {
            let outcome = self
                .module
                .connect(
                    self.access(subject.id(), Some(&subject.journal)),
                    &subject.client,
                    requests,
                )
                .await;
            let (wait, problem) = match outcome {
                Ok(connection) => {
                    let missing: Vec<String> = requests
                        .iter()
                        .filter(|r| {
                            !connection
                                .endpoints
                                .iter()
                                .any(|e| e.bridge_uid == r.bridge_uid && e.port == r.port)
                        })
                        .map(describe)
                        .collect();
                    if connection.complete && missing.is_empty() {
                        return Ok(connection.endpoints);
                    }
                    let mut problem = Vec::new();
                    if !connection.complete {
                        problem.push("connect still says incomplete".to_string());
                    }
                    if !missing.is_empty() {
                        problem.push(format!("no endpoint for {}", missing.join(", ")));
                    }
                    (Duration::from_secs(1), problem.join("; "))
                }
                Err(CallError::Provider {
                    error: ProviderError::Temporary(t),
                    ..
                }) => (
                    Duration::from_secs(t.retry_after_seconds.into()),
                    format!("connect keeps failing for now: {}", t.message),
                ),
                Err(e) => return Err(e.to_string()),
            };
            if deadline.passed() {
                return Err(format!("after {:?}: {problem}", self.timeout));
            }
            pause(wait).await;
        }
    }

    /// Each object the journal says was written for `subject`, as the
    /// cluster has it now (`None`: gone).
    async fn read_written(
        &self,
        subject: &Subject,
    ) -> Vec<(Written, Result<Option<Value>, String>)> {
        let access = self.access("", None);
        let mut objects = Vec::new();
        for written in subject.journal.written() {
            let now = access
                .host_read(&written.reference())
                .await
                .map_err(|e| format!("reading {}: {e}", written.describe()));
            objects.push((written, now));
        }
        objects
    }

    async fn owned_problems(&self, subject: &Subject) -> Result<(), String> {
        let objects = self.read_written(subject).await;
        let mut problems = Vec::new();
        for (written, now) in &objects {
            match now {
                Ok(now) => problems.extend(ownership_problem(
                    written,
                    now.as_ref(),
                    &self.settings.operator_namespace,
                    subject.id(),
                )),
                Err(e) => problems.push(e.clone()),
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "of {} object(s) written for client id {}: {}",
                objects.len(),
                subject.id(),
                problems.join(" | ")
            ))
        }
    }

    /// `session` says gone for `subject`, who `what`.
    async fn gone(&self, subject: &Subject, what: &str) -> Result<(), String> {
        match self
            .module
            .session(self.access(subject.id(), None), &subject.client)
            .await
        {
            Ok(SessionState::Gone(_)) => Ok(()),
            Ok(SessionState::Live) => Err(format!(
                "session says live for client `{}` (id {}), which {what}: live means requests \
                 sent to its endpoints reach the client",
                subject.client.name,
                subject.id()
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Polls `clients` until it lists `id` (`listed`) or no longer does.
    async fn wait_listed(&self, id: &str, listed: bool) -> Result<(), String> {
        let deadline = self.deadline();
        loop {
            let ids = self
                .module
                .clients(self.access("", None), &self.settings)
                .await
                .map_err(|e| e.to_string())?;
            if ids.iter().any(|i| i == id) == listed {
                return Ok(());
            }
            if deadline.passed() {
                let (not, still) = if listed { (" not", "") } else { ("", " still") };
                return Err(format!(
                    "after {:?} clients{still} lists [{}],{not} with {id}",
                    self.timeout,
                    ids.join(", ")
                ));
            }
            pause(Duration::from_millis(500)).await;
        }
    }

    /// Calls `disconnect` until it says true; an error ends the wait.
    async fn disconnect_until_done(&self, subject: &Subject) -> Result<(), String> {
        let deadline = self.deadline();
        loop {
            let done = self
                .module
                .disconnect(
                    self.access(subject.id(), Some(&subject.journal)),
                    &self.settings,
                    subject.id(),
                )
                .await
                .map_err(|e| format!("client id {}: {e}", subject.id()))?;
            if done {
                return Ok(());
            }
            if deadline.passed() {
                return Err(format!(
                    "disconnect of client id {} still said false after {:?}",
                    subject.id(),
                    self.timeout
                ));
            }
            pause(Duration::from_millis(500)).await;
        }
    }

    /// Polls until every object written for `subject` is gone (or, if it
    /// existed before, as it was).
    async fn wait_put_back(&self, subject: &Subject) -> Result<(), String> {
        let deadline = self.deadline();
        loop {
            let objects = self.read_written(subject).await;
            let mut problems = Vec::new();
            for (written, now) in &objects {
                match now {
                    Ok(now) => problems.extend(put_back_problem(written, now.as_ref())),
                    Err(e) => return Err(e.clone()),
                }
            }
            if problems.is_empty() {
                return Ok(());
            }
            if deadline.passed() {
                return Err(format!(
                    "after {:?}, of {} object(s) written for client id {}: {}",
                    self.timeout,
                    objects.len(),
                    subject.id(),
                    problems.join(" | ")
                ));
            }
            pause(Duration::from_millis(500)).await;
        }
    }

    /// Whether `subject`'s objects are still the ones read `before` and
    /// `clients` still lists it.
    async fn untouched_problem(
        &self,
        subject: &Subject,
        before: &[(Written, Result<Option<Value>, String>)],
    ) -> Result<(), String> {
        let now = self.read_written(subject).await;
        let mut problems = Vec::new();
        for ((written, before), (_, now)) in before.iter().zip(&now) {
            let (Ok(before), Ok(now)) = (before, now) else {
                continue;
            };
            problems.extend(untouched(written, before.as_ref(), now.as_ref()));
        }
        let ids = self
            .module
            .clients(self.access("", None), &self.settings)
            .await
            .map_err(|e| e.to_string())?;
        if !ids.iter().any(|i| i == subject.id()) {
            problems.push(format!(
                "clients lists [{}], no longer with the other client's id {}",
                ids.join(", "),
                subject.id()
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join(" | "))
        }
    }
}

/// Two ports of two made-up bridges.
fn sample_requests(suffix: &str) -> [PortRequest; 2] {
    let request = |bridge: &str, port: u16, local_port: u16| PortRequest {
        bridge_uid: format!("conformance-{suffix}-{bridge}"),
        bridge: format!("conformance/{bridge}"),
        port,
        local_port,
    };
    [request("web", 80, 3000), request("api", 8080, 3001)]
}

fn describe(request: &PortRequest) -> String {
    format!(
        "bridge {} (uid {}) port {}",
        request.bridge, request.bridge_uid, request.port
    )
}

/// What the module's metadata says that a connection provider may not.
fn metadata_problem(module: &ConnectionModule) -> Option<String> {
    let mut problems = Vec::new();
    if module.metadata.name.trim().is_empty() {
        problems.push("its name is empty".to_string());
    }
    for capability in &module.metadata.scope {
        // Refused at load already; said again here if that ever changes.
        if capability.namespace != NamespaceScope::Operator {
            problems.push(format!(
                "{:?} of `{}` is not in the operator namespace",
                capability.kinds, capability.api_group
            ));
        }
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// What is wrong with the endpoints `connect` gave for `requests`.
fn endpoint_problems(requests: &[PortRequest], endpoints: &[Endpoint]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut by_address: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for request in requests {
        let given: Vec<&Endpoint> = endpoints
            .iter()
            .filter(|e| e.bridge_uid == request.bridge_uid && e.port == request.port)
            .collect();
        match given.as_slice() {
            [] => problems.push(format!("no endpoint for {}", describe(request))),
            [endpoint] => {
                if !host_port(&endpoint.address) {
                    problems.push(format!(
                        "the endpoint of {} is `{}`, not host:port with a port above 0",
                        describe(request),
                        endpoint.address
                    ));
                }
                by_address
                    .entry(&endpoint.address)
                    .or_default()
                    .push(describe(request));
            }
            more => problems.push(format!(
                "{} endpoints for {}",
                more.len(),
                describe(request)
            )),
        }
    }
    for (address, users) in by_address {
        if users.len() > 1 {
            problems.push(format!(
                "{} share the endpoint {address}",
                users.join(" and ")
            ));
        }
    }
    for endpoint in endpoints {
        if !requests
            .iter()
            .any(|r| r.bridge_uid == endpoint.bridge_uid && r.port == endpoint.port)
        {
            problems.push(format!(
                "an endpoint for uid {} port {}, which was not requested",
                endpoint.bridge_uid, endpoint.port
            ));
        }
    }
    problems
}

/// Whether `address` is `host:port`, the port above 0.
fn host_port(address: &str) -> bool {
    address
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0))
}

/// Whether every request of `requests` has in `now` the endpoint it had
/// in `first`.
fn kept(requests: &[PortRequest], first: &[Endpoint], now: &[Endpoint]) -> Result<(), String> {
    let find = |list: &[Endpoint], r: &PortRequest| {
        list.iter()
            .find(|e| e.bridge_uid == r.bridge_uid && e.port == r.port)
            .map(|e| e.address.clone())
    };
    let problems: Vec<String> = requests
        .iter()
        .filter_map(|r| match (find(first, r), find(now, r)) {
            (Some(was), None) => Some(format!("no endpoint for {} now (was {was})", describe(r))),
            (Some(was), Some(is)) if was != is => Some(format!(
                "the endpoint of {} moved from {was} to {is}",
                describe(r)
            )),
            _ => None,
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// What is wrong with an object written for client `id` (`now`: as the
/// cluster has it, `None` if gone): outside the operator namespace, or not
/// marked as the client's (a pod by its label: the host watches by it).
fn ownership_problem(
    written: &Written,
    now: Option<&Value>,
    operator_ns: &str,
    id: &str,
) -> Option<String> {
    let what = written.describe();
    if written.namespace != operator_ns {
        return Some(format!(
            "{what} is not in the operator namespace `{operator_ns}`"
        ));
    }
    // Gone (the provider deleted it again): nothing left to mark.
    let now = now?;
    let labelled = now["metadata"]["labels"][CLIENT_LABEL].as_str() == Some(id);
    if labelled {
        return None;
    }
    if written.kind == "Pod" {
        return Some(format!(
            "{what} is not labelled {CLIENT_LABEL}: {id} (the host watches the client's pods by it)"
        ));
    }
    (!written.name.contains(id))
        .then(|| format!("{what} is neither labelled {CLIENT_LABEL}: {id} nor named with the id"))
}

/// What happened to an object of the other client since `before`.
fn untouched(written: &Written, before: Option<&Value>, now: Option<&Value>) -> Option<String> {
    let what = written.describe();
    let before = before?;
    match now {
        None => Some(format!("{what} of the other client is gone")),
        Some(now) if !now["metadata"]["deletionTimestamp"].is_null() => {
            Some(format!("{what} of the other client is being deleted"))
        }
        Some(now) if now["metadata"]["uid"] != before["metadata"]["uid"] => {
            Some(format!("{what} of the other client was replaced"))
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn endpoint(uid: &str, port: u16, address: &str) -> Endpoint {
        Endpoint {
            bridge_uid: uid.into(),
            port,
            address: address.into(),
        }
    }

    fn requests() -> [PortRequest; 2] {
        sample_requests("0000abcd")
    }

    #[test]
    fn sample_requests_are_of_two_bridges() {
        let [a, b] = requests();
        assert_ne!(a.bridge_uid, b.bridge_uid);
        assert_ne!(a.port, b.port);
    }

    #[test]
    fn each_request_needs_its_own_well_formed_endpoint() {
        let [a, b] = requests();
        let good = [
            endpoint(&a.bridge_uid, a.port, "relay.ns.svc:10000"),
            endpoint(&b.bridge_uid, b.port, "relay.ns.svc:10001"),
        ];
        assert!(endpoint_problems(&[a.clone(), b.clone()], &good).is_empty());

        let shared = [
            endpoint(&a.bridge_uid, a.port, "relay.ns.svc:10000"),
            endpoint(&b.bridge_uid, b.port, "relay.ns.svc:10000"),
        ];
        let problems = endpoint_problems(&[a.clone(), b.clone()], &shared);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("share the endpoint relay.ns.svc:10000"));

        let bad = [
            endpoint(&a.bridge_uid, a.port, "relay.ns.svc"),
            endpoint(&a.bridge_uid, 9, "x:1"),
        ];
        let problems = endpoint_problems(&[a.clone(), b.clone()], &bad);
        assert!(
            problems[0].contains("is `relay.ns.svc`, not host:port"),
            "{problems:?}"
        );
        assert!(problems[1].starts_with("no endpoint for bridge conformance/api"));
        assert!(problems[2].contains("port 9, which was not requested"));
        assert!(!host_port("h:0") && !host_port(":80") && host_port("[::1]:80"));
    }

    #[test]
    fn an_endpoint_that_moves_or_vanishes_is_named() {
        let [a, b] = requests();
        let first = [
            endpoint(&a.bridge_uid, a.port, "h:1"),
            endpoint(&b.bridge_uid, b.port, "h:2"),
        ];
        let both = [a.clone(), b.clone()];
        assert!(kept(&both, &first, &first).is_ok());
        let moved = [endpoint(&b.bridge_uid, b.port, "h:3")];
        let why = kept(&both, &first, &moved).unwrap_err();
        assert!(
            why.contains("no endpoint for bridge conformance/web"),
            "{why}"
        );
        assert!(why.contains("moved from h:2 to h:3"), "{why}");
    }

    fn written(kind: &str, namespace: &str, name: &str) -> Written {
        Written {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
            before: None,
            verbs: vec!["create"],
        }
    }

    #[test]
    fn what_connect_writes_must_be_the_clients_in_the_operator_namespace() {
        let id = "0123456789abcdef";
        let labelled = json!({"metadata": {"labels": {CLIENT_LABEL: id}}});
        let bare = json!({"metadata": {}});
        let relay = format!("relay-{id}");
        assert_eq!(
            ownership_problem(&written("Pod", "op", "x"), Some(&labelled), "op", id),
            None
        );
        assert_eq!(
            ownership_problem(&written("Service", "op", &relay), Some(&bare), "op", id),
            None
        );
        assert_eq!(
            ownership_problem(&written("ConfigMap", "op", "shared"), None, "op", id),
            None,
            "gone again"
        );
        assert_eq!(
            ownership_problem(&written("Pod", "op", &relay), Some(&bare), "op", id).as_deref(),
            Some(
                "Pod op/relay-0123456789abcdef is not labelled pontoon.dev/connection-client: \
                 0123456789abcdef (the host watches the client's pods by it)"
            )
        );
        assert_eq!(
            ownership_problem(&written("ConfigMap", "op", "shared"), Some(&bare), "op", id)
                .as_deref(),
            Some(
                "ConfigMap op/shared is neither labelled pontoon.dev/connection-client: \
                 0123456789abcdef nor named with the id"
            )
        );
        assert_eq!(
            ownership_problem(&written("Pod", "shop", &relay), Some(&labelled), "op", id)
                .as_deref(),
            Some("Pod shop/relay-0123456789abcdef is not in the operator namespace `op`")
        );
    }

    #[test]
    fn another_clients_object_must_stay_the_same_object() {
        let w = written("Pod", "op", "relay-b");
        let before = json!({"metadata": {"uid": "1"}});
        assert_eq!(untouched(&w, Some(&before), Some(&before)), None);
        assert!(
            untouched(&w, Some(&before), None)
                .unwrap()
                .ends_with("is gone")
        );
        let going = json!({"metadata": {"uid": "1", "deletionTimestamp": "2026-01-01T00:00:00Z"}});
        assert!(
            untouched(&w, Some(&before), Some(&going))
                .unwrap()
                .ends_with("being deleted")
        );
        let other = json!({"metadata": {"uid": "2"}});
        assert!(
            untouched(&w, Some(&before), Some(&other))
                .unwrap()
                .ends_with("was replaced")
        );
        assert_eq!(untouched(&w, None, None), None, "gone already before");
    }
}
