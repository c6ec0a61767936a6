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
    sync::Arc,
    time::{Duration, Instant},
};

use kube::Client;
use serde_json::Value;

use super::{
    Options,
    connection_answers::{
        describe, endpoint_problems, kept, metadata_problem, ownership_problem, sample_requests,
        untouched,
    },
    fixtures,
    report::{Check, Recorder},
    writes::put_back_problem,
};
use crate::{
    bridge::{connections::client_id, sessions::default_relay_image},
    plugins::{
        CallError, ClusterAccess, ConnectionModule, Discovery, Freshness, Journal, WriteTurns,
        Written,
        bindings::{
            ProviderError,
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
