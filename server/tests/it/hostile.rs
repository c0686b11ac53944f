//! Hostile receivers (issue 11, item 6): real TCP listeners that misbehave at the byte
//! level (an endless body, a 10 GB `Content-Length`, headers that never end or flood,
//! a byte at a time, a reset mid-response, an answer that is not HTTP) against the real
//! engine. Each attempt ends within the destination's `timeoutSeconds` with its class,
//! at most 64 KiB of any body is kept, the process's memory stays bounded, and a
//! healthy destination in the same space keeps delivering promptly meanwhile.
//!
//! The classes, as `dispatch/classify.rs` and `Engine::attempt` decide them: a 2xx
//! status line with its headers is a success whatever the body does afterwards (endless,
//! trickling until the timeout, reset): the receiver has said it took the event, and
//! retrying would deliver it twice (Stripe and Svix judge by the status code too). No
//! complete head within the timeout is `timeout`; a connection dropped or reset before
//! the head is complete, a head larger than the client takes, or bytes that are not
//! HTTP are `connect` (retried: the receiver's side failed, as with a dropped connection).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use server::domain::{DeliveryStatus, DestinationId, ErrorClass};
use server::storage::{DeliveryFilter, Page};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::helpers::{eventually, spawn_app, Receiver};
use crate::on_both_backends;

/// How a hostile receiver answers every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hostile {
    /// `200`, chunked, and chunks forever.
    EndlessBody,
    /// `200` announcing a 10 GB `Content-Length`, then bytes as fast as they go.
    TenGigabytes,
    /// A status line, then one more header line every 100 ms, never the blank line.
    HeadersNeverEnd,
    /// Header lines as fast as they go, never the blank line.
    HeaderFlood,
    /// The answer one byte at a time, a byte a second (nothing completes in time).
    Trickle,
    /// A complete `200` head, then the body a byte every 100 ms.
    TrickleBody,
    /// Half a status line, then a TCP reset.
    ResetMidHead,
    /// A `200` head and part of the body, then a TCP reset.
    ResetMidBody,
    /// Bytes that are not HTTP, then the connection closed.
    Garbage,
}

impl Hostile {
    pub const ALL: [Hostile; 9] = [
        Hostile::EndlessBody,
        Hostile::TenGigabytes,
        Hostile::HeadersNeverEnd,
        Hostile::HeaderFlood,
        Hostile::Trickle,
        Hostile::TrickleBody,
        Hostile::ResetMidHead,
        Hostile::ResetMidBody,
        Hostile::Garbage,
    ];

    /// What the delivery must end as: its status and the attempt's class.
    fn expected(self) -> (DeliveryStatus, Option<ErrorClass>) {
        use Hostile::*;
        match self {
            EndlessBody | TenGigabytes | TrickleBody | ResetMidBody => {
                (DeliveryStatus::Succeeded, None)
            }
            HeadersNeverEnd | Trickle => (DeliveryStatus::Failed, Some(ErrorClass::Timeout)),
            HeaderFlood | ResetMidHead | Garbage => {
                (DeliveryStatus::Failed, Some(ErrorClass::Connect))
            }
        }
    }
}

/// A real TCP listener on loopback that answers every connection the hostile way.
pub async fn start_hostile(behaviour: Hostile) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                // The client hanging up ends the behaviour with an error: that is fine.
                let _ = misbehave(socket, behaviour).await;
            });
        }
    });
    addr
}

/// Reads the request head (and whatever body came with it), so the answer is not
/// mistaken for one to a request never read.
async fn read_request(socket: &mut TcpStream) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen = Vec::new();
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        seen.extend_from_slice(&buf[..n]);
    }
    Ok(())
}

async fn misbehave(mut socket: TcpStream, behaviour: Hostile) -> std::io::Result<()> {
    read_request(&mut socket).await?;
    let filler = vec![b'x'; 16 * 1024];
    match behaviour {
        Hostile::EndlessBody => {
            socket
                .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                .await?;
            loop {
                socket.write_all(b"4000\r\n").await?;
                socket.write_all(&filler).await?;
                socket.write_all(b"\r\n").await?;
            }
        }
        Hostile::TenGigabytes => {
            socket
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n")
                .await?;
            loop {
                socket.write_all(&filler).await?;
            }
        }
        Hostile::HeadersNeverEnd => {
            socket.write_all(b"HTTP/1.1 200 OK\r\n").await?;
            for i in 0.. {
                socket
                    .write_all(format!("x-more-{i}: still coming\r\n").as_bytes())
                    .await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(())
        }
        Hostile::HeaderFlood => {
            socket.write_all(b"HTTP/1.1 200 OK\r\n").await?;
            for i in 0.. {
                socket
                    .write_all(format!("x-flood-{i}: {}\r\n", "y".repeat(1000)).as_bytes())
                    .await?;
            }
            Ok(())
        }
        Hostile::Trickle => {
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" {
                socket.write_all(&[*byte]).await?;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Ok(())
        }
        Hostile::TrickleBody => {
            socket
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                .await?;
            loop {
                socket.write_all(b"z").await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Hostile::ResetMidHead => {
            socket.write_all(b"HTTP/1.1 2").await?;
            socket.flush().await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
            socket.set_zero_linger()?;
            drop(socket);
            Ok(())
        }
        Hostile::ResetMidBody => {
            socket
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\npartial")
                .await?;
            socket.flush().await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
            socket.set_zero_linger()?;
            drop(socket);
            Ok(())
        }
        Hostile::Garbage => {
            socket
                .write_all(b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff\xfe garbage \x01\x02\r\n\r\n")
                .await?;
            socket.shutdown().await?;
            Ok(())
        }
    }
}

/// The resident memory of this process (the server runs in it), in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// Events published to every hostile destination.
const ROUNDS: usize = 10;
/// The destinations' `timeoutSeconds`.
const TIMEOUT_SECONDS: i64 = 1;

on_both_backends! {
    async fn hostile_receivers_end_within_their_timeout_with_their_class_and_do_not_slow_a_healthy_destination(db) {
        let app = spawn_app(&db).await.with_space().await;
        let healthy = Receiver::start().await;
        app.destination(json!({"url": healthy.url("/healthy"), "eventTypes": ["healthy"]})).await;
        let mut hostile: Vec<(Hostile, DestinationId)> = Vec::new();
        for behaviour in Hostile::ALL {
            let addr = start_hostile(behaviour).await;
            let dst = app
                .destination(json!({
                    "url": format!("http://{addr}/{behaviour:?}"),
                    "eventTypes": ["hostile"],
                    "timeoutSeconds": TIMEOUT_SECONDS,
                    "maxAttempts": 1,
                }))
                .await;
            hostile.push((behaviour, dst["id"].as_str().unwrap().parse().unwrap()));
        }

        // Warm up (the first attempts allocate the engine's pools), then measure.
        app.publish("healthy", json!({"warm": true})).await;
        healthy.wait_for(1).await;
        let rss_before = rss_kib();
        let started = Instant::now();
        for round in 0..ROUNDS {
            app.publish("hostile", json!({"round": round})).await;
        }

        // While the hostile attempts run, the healthy destination's events arrive promptly.
        let mut slowest = Duration::ZERO;
        for i in 0..20 {
            let before = healthy.received().len();
            let sent = Instant::now();
            app.publish("healthy", json!({"i": i})).await;
            healthy.wait_for(before + 1).await;
            slowest = slowest.max(sent.elapsed());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(slowest < Duration::from_millis(750), "a healthy delivery took {slowest:?} while hostile receivers ran");

        // Every hostile delivery ends as its behaviour says, each attempt within the timeout.
        let limit = Duration::from_secs(TIMEOUT_SECONDS as u64) + Duration::from_millis(750);
        for (behaviour, destination) in &hostile {
            let filter = DeliveryFilter { destination_id: Some(*destination), ..Default::default() };
            let deliveries = eventually(30, || async {
                let all = db.storage.list_deliveries(&filter, Page::first(100)).await.unwrap();
                (all.len() == ROUNDS && all.iter().all(|d| d.status.is_final())).then_some(all)
            })
            .await;
            let (status, class) = behaviour.expected();
            for d in &deliveries {
                let attempts = db.storage.list_all_attempts(d.id).await.unwrap();
                assert_eq!(attempts.len(), 1, "{behaviour:?}: {attempts:?}");
                let a = &attempts[0];
                assert_eq!((d.status, a.error_class), (status, class), "{behaviour:?}: {:?}", a.error_message);
                assert!(
                    a.duration_ms <= limit.as_millis() as i64,
                    "{behaviour:?}: the attempt took {} ms, more than the {TIMEOUT_SECONDS} s timeout",
                    a.duration_ms
                );
                let body = a.response_body.as_deref().unwrap_or("");
                assert!(body.len() <= 64 * 1024, "{behaviour:?}: kept {} bytes of body", body.len());
                match behaviour {
                    // The body stops being read at 64 KiB, long before the timeout.
                    Hostile::EndlessBody | Hostile::TenGigabytes => {
                        assert_eq!(body.len(), 64 * 1024, "{behaviour:?}");
                        assert!(a.duration_ms < 900, "{behaviour:?}: {} ms to read 64 KiB", a.duration_ms);
                    }
                    Hostile::TrickleBody => assert!(body.starts_with('z'), "{body:?}"),
                    Hostile::ResetMidBody => assert_eq!(body, "partial"),
                    _ => {}
                }
            }
        }
        let elapsed = started.elapsed();

        // Memory: 90 hostile attempts (two of them offering endless data) cost no more
        // than a generous bound; reading whole bodies would cost gigabytes.
        let rss_after = rss_kib();
        let grown_mib = rss_after.saturating_sub(rss_before) / 1024;
        assert!(grown_mib < 64, "RSS grew by {grown_mib} MiB ({rss_before} → {rss_after} KiB)");
        eprintln!(
            "hostile receivers: {} attempts in {elapsed:?}; slowest healthy delivery {slowest:?}; RSS {} → {} MiB",
            ROUNDS * Hostile::ALL.len(),
            rss_before / 1024,
            rss_after / 1024
        );
        app.stop().await;
    }
}
