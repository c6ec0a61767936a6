//! A session's life as the relay shows it: readiness, one session at a time, listening only
//! while someone is connected, the ports asked for.

// Helpers outside `#[test]` functions too: a panic is how a test reports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{collections::BTreeMap, time::Duration};

use common::{TestRelay, echo_server, eventually, next_event, refused, relay_addr, round_trip};
use pontoon_tunnel::{Session, SessionError, SessionEvent};
use tokio::{io::DuplexStream, sync::oneshot};

/// How a stand-in port-forward breaks.
enum Break {
    /// Both ends stay open, nothing passes: a port-forward whose API server went away.
    Freeze,
    /// Both ends close.
    Drop,
}

/// A port-forward to the relay the test can break; the laptop's end of it.
async fn breakable_forward(relay: &TestRelay) -> (DuplexStream, oneshot::Sender<Break>) {
    let (laptop, mut ours) = tokio::io::duplex(256 * 1024);
    let mut tcp = relay.forward().await;
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let broken = tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut ours, &mut tcp) => return,
            broken = rx => broken,
        };
        if let Ok(Break::Freeze) = broken {
            // Hold both ends, silently, until the test's runtime ends.
            std::future::pending::<()>().await;
        }
    });
    (laptop, tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_follows_the_session_and_healthz_stays_up() {
    let relay = TestRelay::start(1, |_| {});
    let echo = echo_server().await;
    let port = relay.ports[0];
    assert_eq!(relay.probe("/ready").await, 503, "ready without a session");
    assert_eq!(relay.probe("/healthz").await, 200);
    assert!(
        refused(relay_addr(port)).await,
        "listening without a session"
    );

    let (session, _events) = relay.open(&[(port, echo)]).await;
    assert_eq!(
        relay.probe("/ready").await,
        200,
        "not ready with a live session"
    );
    assert_eq!(round_trip(relay_addr(port), b"ping").await, b"ping");

    session.close().await;
    assert!(
        eventually(Duration::from_secs(3), || async {
            relay.probe("/ready").await == 503 && refused(relay_addr(port)).await
        })
        .await,
        "still ready or listening after the session closed"
    );
    assert_eq!(relay.probe("/healthz").await, 200);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_session_is_refused_naming_when_the_live_one_connected() {
    let relay = TestRelay::start(2, |_| {});
    let echo = echo_server().await;
    let (first_port, second_port) = (relay.ports[0], relay.ports[1]);

    let before = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap();
    let (first, _events) = relay.open(&[(first_port, echo)]).await;
    let after = jiff::Timestamp::now();

    let second = Session::open(
        relay.forward().await,
        "bob@other-laptop",
        common::route_map(&[(second_port, echo)]),
    )
    .await;
    let Err(SessionError::Refused(reason)) = second else {
        panic!("second session not refused: {second:?}");
    };
    let since = reason
        .strip_prefix("another session of this relay is live (connected ")
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("reason does not name the live session's start: {reason}"));
    let since: jiff::Timestamp = since.parse().unwrap();
    assert!(
        before <= since && since <= after,
        "{since} not in {before}..{after}"
    );

    // The live session is untouched, and the refused one got nothing.
    assert_eq!(round_trip(relay_addr(first_port), b"first").await, b"first");
    assert!(refused(relay_addr(second_port)).await);
    assert_eq!(relay.probe("/ready").await, 200);

    // Once the first ends, the next one is welcome.
    first.close().await;
    let (third, _events) = relay.open(&[(second_port, echo)]).await;
    assert_eq!(
        round_trip(relay_addr(second_port), b"third").await,
        b"third"
    );
    third.close().await;
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_for_one_client_refuses_another() {
    let relay = TestRelay::start(1, |config| config.client = Some("alice@laptop".into()));
    let echo = echo_server().await;
    let routes = common::route_map(&[(relay.ports[0], echo)]);
    let other = Session::open(relay.forward().await, "mallory@laptop", routes.clone()).await;
    let Err(SessionError::Refused(reason)) = other else {
        panic!("another client's session not refused: {other:?}");
    };
    assert!(
        reason.contains("alice@laptop") && reason.contains("mallory@laptop"),
        "{reason}"
    );
    assert_eq!(relay.probe("/ready").await, 503);

    let (session, _events) = Session::open(relay.forward().await, "alice@laptop", routes)
        .await
        .unwrap();
    assert_eq!(relay.probe("/ready").await, 200);
    session.close().await;
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_laptop_is_dropped_within_the_idle_timeout() {
    let idle = Duration::from_secs(2);
    let relay = TestRelay::start(1, |config| config.idle_timeout = idle);
    let echo = echo_server().await;
    let port = relay.ports[0];
    let (stream, break_it) = breakable_forward(&relay).await;
    let (session, mut events) =
        Session::open(stream, "test@laptop", common::route_map(&[(port, echo)]))
            .await
            .unwrap();
    assert_eq!(round_trip(relay_addr(port), b"before").await, b"before");
    assert_eq!(relay.probe("/ready").await, 200);

    let _ = break_it.send(Break::Freeze);
    assert!(
        eventually(idle + Duration::from_secs(1), || async {
            refused(relay_addr(port)).await && relay.probe("/ready").await == 503
        })
        .await,
        "the relay still listens or reads ready {:?} after the laptop fell silent",
        idle + Duration::from_secs(1)
    );
    assert_eq!(relay.probe("/healthz").await, 200);

    // The laptop notices too: its pings go unanswered.
    tokio::time::timeout(Duration::from_secs(8), session.closed())
        .await
        .expect("the laptop's session did not notice the silent relay");
    let reason = next_event(&mut events, Duration::from_secs(1), |event| match event {
        SessionEvent::Closed { reason } => Some(reason),
        _ => None,
    })
    .await;
    assert!(reason.contains("not answered"), "{reason}");
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_port_forward_ends_the_session_at_once() {
    let relay = TestRelay::start(1, |config| config.idle_timeout = Duration::from_secs(30));
    let echo = echo_server().await;
    let port = relay.ports[0];
    let (stream, break_it) = breakable_forward(&relay).await;
    let (session, _events) =
        Session::open(stream, "test@laptop", common::route_map(&[(port, echo)]))
            .await
            .unwrap();
    assert_eq!(round_trip(relay_addr(port), b"before").await, b"before");

    let _ = break_it.send(Break::Drop);
    // Far within the (long) idle timeout: the end of the byte stream is the end of the session.
    assert!(
        eventually(Duration::from_secs(3), || async {
            refused(relay_addr(port)).await && relay.probe("/ready").await == 503
        })
        .await,
        "the relay kept the session of a closed port-forward"
    );
    tokio::time::timeout(Duration::from_secs(3), session.closed())
        .await
        .expect("the laptop's session outlived its stream");
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_ports_are_reported_and_set_routes_moves_the_listeners() {
    let relay = TestRelay::start(3, |_| {});
    let echo = echo_server().await;
    let [first, taken, later] = [relay.ports[0], relay.ports[1], relay.ports[2]];
    // Something else holds this one.
    let _holder = std::net::TcpListener::bind(relay_addr(taken)).unwrap();
    let outside = 1;

    let (session, mut events) = relay
        .open(&[(first, echo), (taken, echo), (outside, echo)])
        .await;
    let listening = next_event(&mut events, Duration::from_secs(1), |event| match event {
        SessionEvent::Listening(listening) => Some(listening),
        _ => None,
    })
    .await;
    assert_eq!(listening.ports, vec![first]);
    let failed: BTreeMap<u16, String> = listening
        .failed
        .into_iter()
        .map(|failure| (failure.port, failure.reason))
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert_eq!(
        failed[&outside],
        format!("outside the relay's port range {first}-{later}")
    );
    assert!(failed[&taken].contains("cannot listen"), "{failed:?}");
    assert_eq!(round_trip(relay_addr(first), b"one").await, b"one");

    let listening = session
        .set_routes(common::route_map(&[(later, echo)]))
        .await
        .unwrap();
    assert_eq!(listening.ports, vec![later]);
    assert!(listening.failed.is_empty(), "{listening:?}");
    assert!(
        refused(relay_addr(first)).await,
        "still listening on a dropped port"
    );
    assert_eq!(round_trip(relay_addr(later), b"two").await, b"two");

    session.close().await;
    relay.stop().await;
}

/// A port-forward that opened but whose far end never answers (the relay's process was not
/// listening yet): the handshake gives up at the bound the caller chose, so the caller can try
/// again soon instead of waiting the default ten seconds.
#[tokio::test]
async fn a_silent_forward_fails_the_handshake_at_the_callers_bound() {
    let (laptop, _silent) = tokio::io::duplex(1024);
    let started = std::time::Instant::now();
    let opened = Session::open_within(
        laptop,
        "test@laptop",
        BTreeMap::new(),
        Duration::from_millis(300),
    )
    .await;
    let took = started.elapsed();
    assert!(
        matches!(opened, Err(SessionError::Timeout(bound)) if bound == Duration::from_millis(300)),
        "{:?}",
        opened.map(|_| ())
    );
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "gave up after {took:?}"
    );
}
