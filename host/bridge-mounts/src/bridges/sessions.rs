//! Where each client of a connection provider stands (live, in its grace,
//! away, expired), against the administrator's grace and limit: written by
//! the connection controller, read by the bridge controller.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use k8s_openapi::jiff::Timestamp;
use pontoon_plugins::bindings::connection_world::SessionState;

use crate::timestamps::parse_timestamp;

/// The default of `--session-grace`: how long a client may be gone before
/// its bridges leave Carrier2's config (a laptop's network hiccup, a
/// port-forward being re-established, must not send its requests away).
pub const DEFAULT_SESSION_GRACE: Duration = Duration::from_secs(10);
/// The default of `--session-limit`: how long a client may be gone before
/// its bridges are deleted.
pub const DEFAULT_SESSION_LIMIT: Duration = Duration::from_secs(3600);
/// The default of `--client-keep`: how long what a provider set up for a
/// client (the tunnel's relay pod and Service) stays after no bridge names
/// the client, so that the developer's next `pontoon bridge` finds it
/// running, and its Service long routed by kube-proxy.
pub const DEFAULT_CLIENT_KEEP: Duration = Duration::from_secs(600);

/// How precisely a session's end is known. A provider reads it from what
/// the cluster shows (the tunnel: its relay's Ready condition), which a
/// readiness probe sets up to a period (a second) after the end and the API
/// writes in whole seconds. The grace is judged against the earliest end
/// (requests going to the shadow a moment early costs nothing), the limit
/// against the latest (bridges are never deleted early).
const END_UNCERTAINTY: Duration = Duration::from_secs(1);

/// The administrator's settings of connections.
#[derive(Clone, Debug)]
pub struct ConnectionSettings {
    /// Pontoon's own image, whose `pontoon relay` the `tunnel` provider runs.
    pub relay_image: String,
    pub grace: Duration,
    pub limit: Duration,
    /// How long an idle client's setup is kept (`--client-keep`).
    pub keep: Duration,
}

impl Default for ConnectionSettings {
    fn default() -> Self {
        Self {
            relay_image: default_relay_image(),
            grace: DEFAULT_SESSION_GRACE,
            limit: DEFAULT_SESSION_LIMIT,
            keep: DEFAULT_CLIENT_KEEP,
        }
    }
}

/// The image this build of Pontoon is published as.
pub fn default_relay_image() -> String {
    format!(
        "ghcr.io/pontoon-operator/pontoon:{}",
        env!("CARGO_PKG_VERSION")
    )
}

/// Where a client's session stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Requests sent to the endpoints reach the client.
    Live,
    /// Gone since `since`, for less than the grace: its bridges stay.
    Grace { since: Timestamp },
    /// Gone for longer than the grace: its bridges are out of Carrier2's
    /// config; deleted at `deleted_at`.
    Away {
        since: Timestamp,
        deleted_at: Timestamp,
    },
    /// Gone for longer than the limit.
    Expired,
    /// Nothing of the client exists yet.
    Starting,
}

impl Standing {
    /// What the provider said, against the administrator's grace and limit.
    pub fn of(session: &SessionState, now: Timestamp, settings: &ConnectionSettings) -> Self {
        let since = match session {
            SessionState::Live => return Standing::Live,
            SessionState::Gone(None) => return Standing::Starting,
            SessionState::Gone(Some(since)) => match parse_timestamp(since) {
                Some(since) => since,
                None => return Standing::Starting,
            },
        };
        let gone = now.duration_since(since).unsigned_abs();
        if gone + END_UNCERTAINTY < settings.grace {
            Standing::Grace { since }
        } else if gone < settings.limit {
            Standing::Away {
                since,
                deleted_at: since + settings.limit,
            }
        } else {
            Standing::Expired
        }
    }

    /// The standing of one bridge of the client, made at `made`: a bridge
    /// cannot have lost its client before it existed, so its grace starts
    /// no earlier than its creation. A developer's new run makes a new
    /// bridge and connects right after: its bridge takes the endpoints of
    /// the relay kept from an earlier run at once, instead of waiting for
    /// the relay's readiness probe to see the new session.
    pub fn of_bridge(
        session: &SessionState,
        made: Option<Timestamp>,
        now: Timestamp,
        settings: &ConnectionSettings,
    ) -> Self {
        let later = match (session, made) {
            (SessionState::Gone(Some(since)), Some(made))
                if parse_timestamp(since).is_some_and(|since| made > since) =>
            {
                SessionState::Gone(Some(made.to_string()))
            }
            _ => session.clone(),
        };
        Self::of(&later, now, settings)
    }

    /// Whether the bridges keep their endpoints.
    pub(super) fn serves(&self) -> bool {
        matches!(self, Standing::Live | Standing::Grace { .. })
    }

    /// When the standing changes by itself (the grace or the limit ends).
    pub(super) fn next_change(
        &self,
        settings: &ConnectionSettings,
        now: Timestamp,
    ) -> Option<Duration> {
        let at = match self {
            Standing::Grace { since } => *since + settings.grace.saturating_sub(END_UNCERTAINTY),
            Standing::Away { deleted_at, .. } => *deleted_at,
            _ => return None,
        };
        Some(at.duration_since(now).unsigned_abs() + Duration::from_millis(100))
    }
}

/// What each client's provider last said of its session, by `(provider,
/// client)`: written by the connection controller before it changes a
/// bridge, read (as one bridge's standing) by the bridge controller.
#[derive(Debug, Default)]
pub struct Sessions(Mutex<HashMap<(String, String), SessionState>>);

impl Sessions {
    /// The standing of a bridge made at `made`, of this client, now.
    pub fn standing(
        &self,
        provider: &str,
        client: &str,
        made: Option<Timestamp>,
        settings: &ConnectionSettings,
    ) -> Option<Standing> {
        let session = self
            .lock()
            .get(&(provider.to_string(), client.to_string()))
            .cloned()?;
        Some(Standing::of_bridge(
            &session,
            made,
            Timestamp::now(),
            settings,
        ))
    }

    pub(super) fn set(&self, provider: &str, client: &str, session: SessionState) {
        self.lock()
            .insert((provider.to_string(), client.to_string()), session);
    }

    pub(super) fn forget(&self, provider: &str, client: &str) {
        self.lock()
            .remove(&(provider.to_string(), client.to_string()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), SessionState>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ConnectionSettings {
        ConnectionSettings {
            relay_image: "relay".into(),
            grace: Duration::from_secs(10),
            limit: Duration::from_secs(3600),
            keep: Duration::from_secs(600),
        }
    }

    #[test]
    fn a_client_gone_for_less_than_the_grace_keeps_its_bridges() {
        let now: Timestamp = "2026-12-06T10:00:00Z".parse().unwrap();
        let gone = |at: &str| SessionState::Gone(Some(at.to_string()));
        let s = settings();
        assert_eq!(Standing::of(&SessionState::Live, now, &s), Standing::Live);
        let grace = Standing::of(&gone("2026-12-06T09:59:55Z"), now, &s);
        assert!(grace.serves(), "{grace:?}");
        // The grace is judged against the earliest the session can have
        // ended: a second before what the provider says.
        assert_eq!(
            grace.next_change(&s, now),
            Some(Duration::from_millis(4100))
        );
        assert!(!Standing::of(&gone("2026-12-06T09:59:51Z"), now, &s).serves());
        let away = Standing::of(&gone("2026-12-06T09:59:49Z"), now, &s);
        assert!(!away.serves());
        assert!(
            matches!(away, Standing::Away { deleted_at, .. } if deleted_at == "2026-12-06T10:59:49Z".parse::<Timestamp>().unwrap())
        );
        assert_eq!(
            Standing::of(&gone("2026-12-06T08:59:59Z"), now, &s),
            Standing::Expired
        );
        assert_eq!(
            Standing::of(&SessionState::Gone(None), now, &s),
            Standing::Starting
        );
    }

    #[test]
    fn a_bridge_made_after_its_client_left_has_its_own_grace() {
        let now: Timestamp = "2026-12-06T10:00:00Z".parse().unwrap();
        let s = settings();
        // The relay's last session ended 20 minutes ago: its older bridges
        // are away, a bridge made 2 s ago is in its grace.
        let gone = SessionState::Gone(Some("2026-12-06T09:40:00Z".into()));
        let old = "2026-12-06T09:00:00Z".parse().ok();
        let new = "2026-12-06T09:59:58Z".parse().ok();
        assert!(!Standing::of_bridge(&gone, old, now, &s).serves());
        let fresh = Standing::of_bridge(&gone, new, now, &s);
        assert!(fresh.serves(), "{fresh:?}");
        assert_eq!(
            fresh.next_change(&s, now),
            Some(Duration::from_millis(7100))
        );
        // Past its own grace it is away, and deleted a limit after its creation.
        let later: Timestamp = "2026-12-06T10:00:10Z".parse().unwrap();
        assert!(matches!(
            Standing::of_bridge(&gone, new, later, &s),
            Standing::Away { deleted_at, .. } if deleted_at == "2026-12-06T10:59:58Z".parse::<Timestamp>().unwrap()
        ));
        // A live client, and one with nothing set up yet, are what they are.
        assert_eq!(
            Standing::of_bridge(&SessionState::Live, new, now, &s),
            Standing::Live
        );
        assert_eq!(
            Standing::of_bridge(&SessionState::Gone(None), new, now, &s),
            Standing::Starting
        );
        // A bridge older than the session's end: the session's end counts.
        let recent = SessionState::Gone(Some("2026-12-06T09:59:55Z".into()));
        assert_eq!(
            Standing::of_bridge(&recent, old, now, &s),
            Standing::of(&recent, now, &s)
        );
    }
}
