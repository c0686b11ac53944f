//! The demo space's moving parts in the server (issue 16, docs D17): the sample receiver
//! built into the server's own listener (`/_demo/receiver/{healthy|flaky|missing|slow}`),
//! the one set of URLs the SSRF guard lets the engine call there, and the task that
//! sends the demo space's sample traffic while it lasts. Creating and removing the
//! space is `ops::demo` (the CLI's `partyflow demo`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::dispatch::engine::EngineHandle;
use crate::domain::*;
use crate::storage::{FilterVerdicts, NewEvent, Published, Storage};

/// The sample receiver's answers, one path each.
pub const RECEIVERS: [&str; 4] = ["healthy", "flaky", "missing", "slow"];

/// Where the receiver's paths start.
pub const RECEIVER_PATH: &str = "/_demo/receiver";

/// How long the slow receiver takes when it is too slow: past the demo destination's
/// one-second timeout.
const TOO_SLOW_MS: u64 = 1_500;

/// The demo's timings (`[demo]`): shrunk by the tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Between two rounds of sample events.
    pub traffic_ms: u64,
    /// How long the sample traffic of a new demo space lasts.
    pub duration_ms: i64,
    /// How long the slow receiver takes to answer (every fourth time: [`TOO_SLOW_MS`]).
    pub slow_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            traffic_ms: 2_000,
            duration_ms: 10 * 60 * 1000,
            slow_ms: 300,
        }
    }
}

/// The base of the receiver's URLs for a server listening on `listen`: the address
/// itself, or loopback when it listens on every address.
pub fn receiver_base(listen: SocketAddr) -> String {
    let ip = match listen.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!(
        "http://{}{RECEIVER_PATH}",
        SocketAddr::new(ip, listen.port())
    )
}

/// The receiver's URL that answers as `kind` (one of [`RECEIVERS`]).
pub fn receiver_url(base: &str, kind: &str) -> String {
    format!("{base}/{kind}")
}

/// Every receiver URL: exactly what the SSRF guard lets the engine call there.
pub fn receiver_urls(base: &str) -> Vec<url::Url> {
    RECEIVERS
        .iter()
        .filter_map(|kind| url::Url::parse(&receiver_url(base, kind)).ok())
        .collect()
}

/// The receiver's state: how many requests each kind has answered.
#[derive(Debug, Default)]
struct Receiver {
    flaky: AtomicU64,
    slow: AtomicU64,
    slow_ms: u64,
}

/// The sample receiver's routes, on the server's own listener.
pub fn router<S>(settings: Settings) -> Router<S> {
    let receiver = Arc::new(Receiver {
        slow_ms: settings.slow_ms,
        ..Default::default()
    });
    Router::new()
        .route(&format!("{RECEIVER_PATH}/{{kind}}"), post(receive))
        .with_state(receiver)
}

/// What a receiver of `kind` answers to its `n`th request (from 0): healthy 200, flaky
/// 503 with `Retry-After: 1` every other time, missing 404, slow 200 after a while
/// (too long every fourth time). `None`: no such receiver.
pub fn answer(kind: &str, n: u64, slow_ms: u64) -> Option<(StatusCode, Option<u64>, u64)> {
    match kind {
        "healthy" => Some((StatusCode::OK, None, 0)),
        "flaky" if n.is_multiple_of(2) => Some((StatusCode::SERVICE_UNAVAILABLE, Some(1), 0)),
        "flaky" => Some((StatusCode::OK, None, 0)),
        "missing" => Some((StatusCode::NOT_FOUND, None, 0)),
        "slow" if n % 4 == 3 => Some((StatusCode::OK, None, TOO_SLOW_MS)),
        "slow" => Some((StatusCode::OK, None, slow_ms)),
        _ => None,
    }
}

async fn receive(State(r): State<Arc<Receiver>>, Path(kind): Path<String>) -> Response {
    let n = match kind.as_str() {
        "flaky" => r.flaky.fetch_add(1, Ordering::Relaxed),
        "slow" => r.slow.fetch_add(1, Ordering::Relaxed),
        _ => 0,
    };
    let Some((status, retry_after, delay_ms)) = answer(&kind, n, r.slow_ms) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    }
    let body = axum::Json(json!({"demo": kind, "status": status.as_u16()}));
    match retry_after {
        Some(s) => (status, [(header::RETRY_AFTER, s.to_string())], body).into_response(),
        None => (status, body).into_response(),
    }
}

/// The `n`th sample event: its type and payload. A mix of types; every fifth order
/// paid has no total, which the demo's reshaping destination cannot transform.
pub fn sample_event(n: u64) -> (&'static str, Value) {
    const TYPES: [&str; 4] = [
        "order.created",
        "order.paid",
        "invoice.sent",
        "user.signed_up",
    ];
    let event_type = TYPES[(n % 4) as usize];
    let payload = match event_type {
        "order.paid" if n % 20 == 1 => json!({"order": n, "total": null}),
        "order.created" | "order.paid" => json!({"order": n, "total": (n % 90) + 10}),
        "invoice.sent" => json!({"invoice": format!("INV-{n:05}"), "order": n}),
        _ => json!({"user": format!("user{n}@example.com")}),
    };
    (event_type, payload)
}

/// Sends the sample traffic: every `traffic_ms`, four events (one of each type) to each
/// demo space whose traffic still runs, until `shutdown`. Of several instances on one
/// database only the one that claims a round sends it (`claim_demo_round`).
pub async fn run_traffic(
    storage: Arc<dyn Storage>,
    engine: EngineHandle,
    settings: Settings,
    shutdown: CancellationToken,
) {
    let mut n: u64 = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(settings.traffic_ms.max(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = now_ms();
        let spaces = match storage.live_demo_spaces(now).await {
            Ok(spaces) => spaces,
            Err(e) => {
                tracing::warn!(error = %e, "demo: reading the demo spaces failed");
                continue;
            }
        };
        for space_id in spaces {
            // Every instance ticks; the one that claims the round sends it (docs D17).
            let next = crate::ops::demo::next_round_at(now, settings.traffic_ms);
            match storage.claim_demo_round(space_id, now, next).await {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "demo: claiming the round failed");
                    continue;
                }
            }
            // One event of each type at once: the rate-limited destination gets two
            // orders together, so one waits (`rate_limited`).
            let batch: Vec<NewEvent> = (0..4)
                .map(|_| {
                    let (event_type, payload) = sample_event(n);
                    n += 1;
                    NewEvent {
                        event: Event {
                            id: EventId::new_in_order(),
                            space_id,
                            event_type: event_type.to_owned(),
                            payload,
                            created_at: now,
                            deliver_at: None,
                        },
                        idempotency_key: None,
                        request_hash: String::new(),
                        filters: FilterVerdicts::default(),
                        claim: None,
                        subscribers: None,
                    }
                })
                .collect();
            match storage.publish_events(&batch, now).await {
                Ok(outcomes) => {
                    for outcome in outcomes {
                        match outcome {
                            Ok(Published::Created { destinations, .. }) => {
                                engine.due_now(destinations)
                            }
                            Ok(Published::Replayed { .. }) => {}
                            Err(e) => tracing::warn!(error = %e, "demo: a sample event failed"),
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "demo: the sample events failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receiver_lives_on_the_servers_own_address_loopback_for_every_address() {
        let base = receiver_base("0.0.0.0:3000".parse().unwrap());
        assert_eq!(base, "http://127.0.0.1:3000/_demo/receiver");
        assert_eq!(
            receiver_base("[::]:8080".parse().unwrap()),
            "http://[::1]:8080/_demo/receiver"
        );
        assert_eq!(
            receiver_base("10.0.0.5:80".parse().unwrap()),
            "http://10.0.0.5:80/_demo/receiver"
        );
        let urls: Vec<String> = receiver_urls(&base).iter().map(|u| u.to_string()).collect();
        assert_eq!(
            urls,
            [
                "http://127.0.0.1:3000/_demo/receiver/healthy",
                "http://127.0.0.1:3000/_demo/receiver/flaky",
                "http://127.0.0.1:3000/_demo/receiver/missing",
                "http://127.0.0.1:3000/_demo/receiver/slow",
            ]
        );
    }

    #[test]
    fn each_receiver_answers_its_own_way() {
        let status = |kind, n| answer(kind, n, 300).map(|(s, r, d)| (s.as_u16(), r, d));
        assert_eq!(status("healthy", 7), Some((200, None, 0)));
        assert_eq!(status("flaky", 0), Some((503, Some(1), 0)));
        assert_eq!(status("flaky", 1), Some((200, None, 0)));
        assert_eq!(status("missing", 0), Some((404, None, 0)));
        assert_eq!(status("slow", 0), Some((200, None, 300)));
        assert_eq!(status("slow", 3), Some((200, None, TOO_SLOW_MS)));
        assert_eq!(status("other", 0), None);
    }

    #[test]
    fn the_sample_traffic_mixes_types_and_now_and_then_an_order_without_a_total() {
        let types: Vec<&str> = (0..4).map(|n| sample_event(n).0).collect();
        assert_eq!(
            types,
            [
                "order.created",
                "order.paid",
                "invoice.sent",
                "user.signed_up"
            ]
        );
        assert!(sample_event(1).1["total"].is_null());
        assert!(sample_event(5).1["total"].is_number());
    }
}
