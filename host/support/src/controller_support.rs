//! What every controller of the operator shares, so that they behave alike:
//! the probe that fails early when a controller's CRDs are missing, how an
//! API error is told apart (gone, a lost race, anything else), the one retry
//! policy that follows from it, and metadata-only watches.

use std::time::Duration;

use kube::{
    Api, Client, Resource,
    api::ListParams,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        controller::Action,
        utils::ResetTimerBackoff,
        watcher::{self, ExponentialBackoff, watcher},
    },
};

/// How a write that lost a race is retried: the newer version of the object
/// arrives through the watch anyway, so soon is enough.
pub const RACE_RETRY: Duration = Duration::from_millis(200);
/// How any other failure of a reconcile is retried.
pub const FAILURE_RETRY: Duration = Duration::from_secs(5);

/// A controller's CRDs are not installed; the message says how to install them.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MissingCrds(pub String);

/// Whether an API error says the resource does not exist. When a whole API
/// group is missing the server answers a plain-text 404, which kube turns
/// into a `Status` with the code but without the `NotFound` reason.
pub fn not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.is_not_found() || status.code == 404)
}

/// Fails early, with what to do (`missing`), when the kind of `api` is not
/// served: its CRD is not installed.
pub async fn ensure_crd<K>(api: &Api<K>, missing: &str, kind: &str) -> anyhow::Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(err) if not_found(&err) => Err(MissingCrds(missing.to_string()).into()),
        Err(err) => Err(anyhow::Error::new(err).context(format!("cannot list {kind}"))),
    }
}

/// The longest note an Event may carry (events.k8s.io/v1 refuses longer).
pub const MAX_EVENT_NOTE_BYTES: usize = 1024;

/// `message` as an Event's note: cut to what the API server accepts, on a
/// character boundary and marked, so a long message (a trap's backtrace)
/// still posts its Event instead of being refused as invalid. The full
/// message stays in the condition and the log.
pub fn event_note(mut message: String) -> String {
    const MORE: &str = " …";
    if message.len() > MAX_EVENT_NOTE_BYTES {
        message.truncate(message.floor_char_boundary(MAX_EVENT_NOTE_BYTES - MORE.len()));
        message.push_str(MORE);
    }
    message
}

/// What an API error means for the reconcile that met it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiFailure {
    /// The object is gone: a reconcile queued before it went away.
    Gone,
    /// A write lost a race: a resourceVersion precondition (409), or a JSON
    /// patch whose `test` failed because the object changed meanwhile (422;
    /// kube-runtime's finalizer helper writes those).
    Raced,
    Other,
}

impl ApiFailure {
    pub fn of(err: &kube::Error) -> Self {
        match err {
            kube::Error::Api(status) if status.is_not_found() => ApiFailure::Gone,
            kube::Error::Api(status) if status.is_conflict() || status.code == 422 => {
                ApiFailure::Raced
            }
            _ => ApiFailure::Other,
        }
    }

    /// The one retry policy of every controller: a gone object waits for a
    /// change, a race is looked at again soon, anything else in 5 s. Logs
    /// what it decided about `object` (races at debug: they are expected).
    pub fn action(self, object: &str, err: &dyn std::fmt::Display) -> Action {
        match self {
            ApiFailure::Gone => {
                tracing::debug!(%object, "the object is gone");
                Action::await_change()
            }
            ApiFailure::Raced => {
                tracing::debug!(%object, error = %err, "the object changed meanwhile; looking again");
                Action::requeue(RACE_RETRY)
            }
            ApiFailure::Other => other_failure(object, err),
        }
    }
}

/// A failure that is not the API's verdict on one object: retried in 5 s.
pub fn other_failure(object: &str, err: &dyn std::fmt::Display) -> Action {
    tracing::warn!(%object, error = %err, "reconcile failed; retrying in {} s", FAILURE_RETRY.as_secs());
    Action::requeue(FAILURE_RETRY)
}

/// How every watch of the operator lists: "at any version", which the API
/// server serves from its watch cache (cheap for the cluster-wide ones).
pub fn watch_config() -> watcher::Config {
    watcher::Config::default().any_semantic()
}

/// How every watch of the operator retries: from 0.5 s, doubling, at most
/// 4 s apart, back to 0.5 s after 30 s without an error. kube's default
/// (client-go's: up to 30 s, reset after 120 s) grows through an API server
/// outage and then again through the expired-version relist that follows a
/// restart: the caches stayed as before the restart for two minutes, and
/// every write bound to their versions conflicted meanwhile
/// (host/tests/outage.rs).
pub fn watch_backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    ResetTimerBackoff::new(
        ExponentialBackoff::from(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(500))
                .with_max_delay(Duration::from_secs(4))
                .with_factor(2.0)
                .with_jitter()
                .without_max_times(),
        ),
        Duration::from_secs(30),
    )
}

/// Changes of every object of kind `K`, metadata only: a watch of whole
/// objects (pods, Secrets) would keep every one of the cluster in memory.
pub fn metadata_watch<K>(
    client: &Client,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    watcher(
        Api::<PartialObjectMeta<K>>::all(client.clone()),
        watch_config(),
    )
    .backoff(watch_backoff())
    .touched_objects()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure("x", reason).with_code(code)))
    }

    #[test]
    fn a_long_event_note_is_cut_to_what_the_api_server_takes() {
        assert_eq!(event_note("short".into()), "short");
        let long = "é".repeat(2000);
        let note = event_note(long.clone());
        assert!(note.len() <= MAX_EVENT_NOTE_BYTES, "{}", note.len());
        assert!(note.ends_with(" …"));
        assert!(long.starts_with(note.trim_end_matches(" …")));
    }

    #[test]
    fn errors_are_told_apart_as_every_controller_retries_them() {
        assert_eq!(ApiFailure::of(&api(404, "NotFound")), ApiFailure::Gone);
        assert_eq!(ApiFailure::of(&api(409, "Conflict")), ApiFailure::Raced);
        assert_eq!(ApiFailure::of(&api(422, "Invalid")), ApiFailure::Raced);
        assert_eq!(ApiFailure::of(&api(403, "Forbidden")), ApiFailure::Other);
        assert_eq!(
            ApiFailure::of(&api(500, "InternalError")),
            ApiFailure::Other
        );
    }

    #[test]
    fn a_race_is_looked_at_again_soon_and_anything_else_in_five_seconds() {
        let err = "e";
        assert_eq!(
            ApiFailure::Raced.action("o", &err),
            Action::requeue(RACE_RETRY)
        );
        assert_eq!(
            ApiFailure::Other.action("o", &err),
            Action::requeue(FAILURE_RETRY)
        );
        assert_eq!(ApiFailure::Gone.action("o", &err), Action::await_change());
    }

    #[test]
    fn a_missing_api_group_counts_as_not_found() {
        assert!(not_found(&api(404, "")));
        assert!(not_found(&api(404, "NotFound")));
        assert!(!not_found(&api(403, "Forbidden")));
    }
}

/// A new id for one reconcile, carried by its span so that every log line
/// of one pass through an object can be told from the next pass's: 16 hex
/// digits, unique in this process, and unlikely to repeat across restarts
/// (they start from the clock).
pub fn trace_id() -> String {
    use std::sync::{
        LazyLock,
        atomic::{AtomicU64, Ordering},
    };
    static NEXT: LazyLock<AtomicU64> = LazyLock::new(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        // The nanoseconds spread over the high bits, the count in the low.
        AtomicU64::new((now.as_nanos() as u64).rotate_left(32))
    });
    format!("{:016x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// `namespace/name` of a namespaced object, as log spans name it.
pub fn key<K: kube::Resource>(object: &K) -> String {
    format!(
        "{}/{}",
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod trace_tests {
    use super::*;

    #[test]
    fn trace_ids_are_sixteen_hex_digits_and_never_repeat() {
        let ids: std::collections::BTreeSet<String> = (0..1000).map(|_| trace_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(
            ids.iter()
                .all(|id| id.len() == 16 && id.chars().all(|c| c.is_ascii_hexdigit()))
        );
    }
}
