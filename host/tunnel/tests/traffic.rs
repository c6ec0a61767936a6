//! Bytes through the bridge: cluster client → relay port → session → local target, and back.

// Helpers outside `#[test]` functions too: a panic is how a test reports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::{TestRelay, echo_server, next_event, relay_addr, round_trip};
use pontoon_tunnel::SessionEvent;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// The bytes of connection `index`: its own, so a mix-up between connections shows.
fn payload(index: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31) ^ index.wrapping_mul(131)) as u8)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_connections_each_get_their_own_bytes_back() {
    const CONNECTIONS: usize = 200;
    const CLIENTS: usize = 32;
    const SIZES: [usize; 6] = [1, 17, 4096, 16 * 1024 + 3, 100_000, 300_000];

    let relay = TestRelay::start(2, |_| {});
    let (echo_a, echo_b) = (echo_server().await, echo_server().await);
    let ports = [relay.ports[0], relay.ports[1]];
    let (session, mut events) = relay.open(&[(ports[0], echo_a), (ports[1], echo_b)]).await;

    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let next = next.clone();
            tokio::spawn(async move {
                let mut done = 0;
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= CONNECTIONS {
                        return done;
                    }
                    let sent = payload(index, SIZES[index % SIZES.len()]);
                    let back = round_trip(relay_addr(ports[index % 2]), &sent).await;
                    assert!(
                        back == sent,
                        "connection {index}: {} bytes sent, {} different bytes back",
                        sent.len(),
                        back.len()
                    );
                    done += 1;
                }
            })
        })
        .collect();
    let mut total = 0;
    for client in clients {
        total += tokio::time::timeout(Duration::from_secs(120), client)
            .await
            .expect("clients did not finish")
            .unwrap();
    }
    assert_eq!(total, CONNECTIONS);

    let mut connections = 0;
    while let Ok(event) = events.try_recv() {
        if matches!(event, SessionEvent::Connection { .. }) {
            connections += 1;
        }
    }
    assert_eq!(
        connections, CONNECTIONS,
        "one Connection event per connection"
    );
    session.close().await;
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_reaches_the_target_and_its_answer_comes_back() {
    let relay = TestRelay::start(1, |_| {});
    // A target that answers only after the request ended: it needs the client's EOF.
    let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target_addr = target.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = target.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                tcp.read_to_end(&mut request).await.unwrap();
                let answer = format!("got {} bytes", request.len());
                tcp.write_all(answer.as_bytes()).await.unwrap();
                tcp.shutdown().await.unwrap();
            });
        }
    });
    let port = relay.ports[0];
    let (session, _events) = relay.open(&[(port, target_addr)]).await;

    let mut client = TcpStream::connect(relay_addr(port)).await.unwrap();
    client.write_all(&vec![7u8; 10_000]).await.unwrap();
    client.shutdown().await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), client.read_to_string(&mut answer))
        .await
        .expect("no answer after half-close")
        .unwrap();
    assert_eq!(answer, "got 10000 bytes");

    session.close().await;
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_cannot_be_dialled_closes_the_cluster_connection() {
    let relay = TestRelay::start(2, |_| {});
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let echo = echo_server().await;
    let (dead_port, live_port) = (relay.ports[0], relay.ports[1]);
    let (session, mut events) = relay.open(&[(dead_port, dead), (live_port, echo)]).await;

    let mut client = TcpStream::connect(relay_addr(dead_port)).await.unwrap();
    // The request may or may not be taken before the close; either is fine.
    let _ = client.write_all(b"GET / HTTP/1.1\r\n\r\n").await;
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buf))
        .await
        .expect("the cluster connection stayed open after the dial failed");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "got bytes from nowhere: {read:?}"
    );

    let (port, target, error) =
        next_event(&mut events, Duration::from_secs(5), |event| match event {
            SessionEvent::DialFailed {
                port,
                target,
                error,
            } => Some((port, target, error)),
            _ => None,
        })
        .await;
    assert_eq!(port, dead_port);
    assert_eq!(target, dead.to_string());
    assert!(!error.is_empty());

    // The failure was that connection's, not the session's.
    assert_eq!(
        round_trip(relay_addr(live_port), b"still here").await,
        b"still here"
    );
    session.close().await;
    relay.stop().await;
}

/// Deterministic bytes that do not repeat with any short period: position `i` of stream `seed`.
fn pattern_byte(seed: u64, i: u64) -> u8 {
    let mut x = i.wrapping_add(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    (x.wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 56) as u8
}

async fn send_pattern(mut write: impl AsyncWrite + Unpin, seed: u64, len: u64) {
    let mut chunk = vec![0u8; 64 * 1024];
    let mut at = 0u64;
    while at < len {
        let n = chunk.len().min((len - at) as usize);
        for (k, byte) in chunk[..n].iter_mut().enumerate() {
            *byte = pattern_byte(seed, at + k as u64);
        }
        write.write_all(&chunk[..n]).await.unwrap();
        at += n as u64;
    }
    write.shutdown().await.unwrap();
}

/// How many bytes arrived, and the position of the first wrong one.
async fn check_pattern(mut read: impl AsyncRead + Unpin, seed: u64) -> (u64, Option<u64>) {
    let mut chunk = vec![0u8; 64 * 1024];
    let mut at = 0u64;
    let mut first_wrong = None;
    loop {
        let n = read.read(&mut chunk).await.unwrap();
        if n == 0 {
            return (at, first_wrong);
        }
        if first_wrong.is_none()
            && let Some(k) = (0..n).find(|&k| chunk[k] != pattern_byte(seed, at + k as u64))
        {
            first_wrong = Some(at + k as u64);
        }
        at += n as u64;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_mib_each_way_arrive_intact() {
    const LEN: u64 = 64 * 1024 * 1024;
    const UP: u64 = 1;
    const DOWN: u64 = 2;

    let relay = TestRelay::start(1, |_| {});
    let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target_addr = target.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (tcp, _) = target.accept().await.unwrap();
        let (read, write) = tcp.into_split();
        let (received, ()) = tokio::join!(check_pattern(read, UP), send_pattern(write, DOWN, LEN));
        received
    });
    let port = relay.ports[0];
    let (session, _events) = relay.open(&[(port, target_addr)]).await;

    let client = TcpStream::connect(relay_addr(port)).await.unwrap();
    let (read, write) = client.into_split();
    let transfer =
        async { tokio::join!(check_pattern(read, DOWN), send_pattern(write, UP, LEN)).0 };
    let downloaded = tokio::time::timeout(Duration::from_secs(240), transfer)
        .await
        .expect("transfer did not finish");
    let uploaded = server.await.unwrap();
    assert_eq!(
        uploaded,
        (LEN, None),
        "laptop side: (bytes, first wrong byte)"
    );
    assert_eq!(
        downloaded,
        (LEN, None),
        "cluster side: (bytes, first wrong byte)"
    );

    session.close().await;
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_bound_are_closed_and_the_others_carry_on() {
    let relay = TestRelay::start(1, |config| config.max_streams = 2);
    let echo = echo_server().await;
    let port = relay.ports[0];
    let (session, _events) = relay.open(&[(port, echo)]).await;

    let mut held = Vec::new();
    for i in 0..2u8 {
        let mut tcp = TcpStream::connect(relay_addr(port)).await.unwrap();
        tcp.write_all(&[i]).await.unwrap();
        let mut back = [0u8; 1];
        tcp.read_exact(&mut back).await.unwrap();
        assert_eq!(back, [i]);
        held.push(tcp);
    }
    let mut third = TcpStream::connect(relay_addr(port)).await.unwrap();
    let _ = third.write_all(b"x").await;
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), third.read(&mut buf))
        .await
        .expect("the connection beyond the bound was neither carried nor closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");

    for (i, tcp) in held.iter_mut().enumerate() {
        tcp.write_all(b"more").await.unwrap();
        let mut back = [0u8; 4];
        tcp.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"more", "held connection {i}");
    }
    // A slot freed is a slot usable again.
    drop(held);
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            common::try_round_trip(relay_addr(port), b"again")
                .await
                .is_ok_and(|back| back == b"again")
        })
        .await
    );
    session.close().await;
    relay.stop().await;
}
