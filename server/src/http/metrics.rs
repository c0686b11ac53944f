//! The metrics listener (`metrics_listen`, docs §8 "Metrics"): `GET /metrics` in the
//! Prometheus text format on its own address, never on the public one; and the
//! middleware that counts the public listener's requests by route template.
//!
//! What is sampled rather than counted — the queue gauges, the oldest due delivery's
//! age, the pools, readiness — is read when Prometheus scrapes, at most once a second
//! whatever the number of scrapers, each query bounded ([`QUEUE_CAP`]) and the whole
//! sample within [`SAMPLE_TIMEOUT`] (past it, the last values stay).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::metrics as m;
use crate::storage::Storage;

/// Each queue gauge counts up to this many deliveries.
pub const QUEUE_CAP: i64 = 1_000_000;
/// The longest a scrape waits for the database.
pub const SAMPLE_TIMEOUT: Duration = Duration::from_secs(2);
/// Scrapes closer together than this share one sample.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// How often the recorder's upkeep runs (histogram buffers drained).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

#[derive(Clone)]
struct Scrape {
    handle: PrometheusHandle,
    storage: Arc<dyn Storage>,
    last_sample: Arc<tokio::sync::Mutex<Option<Instant>>>,
}

/// Serves `GET /metrics` on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    handle: PrometheusHandle,
    storage: Arc<dyn Storage>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let upkeep = tokio::spawn({
        let handle = handle.clone();
        let shutdown = shutdown.clone();
        async move {
            let mut every = tokio::time::interval(UPKEEP_EVERY);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = every.tick() => handle.run_upkeep(),
                }
            }
        }
    });
    let state = Scrape {
        handle,
        storage,
        last_sample: Default::default(),
    };
    let app = Router::new()
        .route("/metrics", get(scrape))
        .with_state(state);
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await;
    upkeep.abort();
    Ok(served?)
}

async fn scrape(State(s): State<Scrape>) -> Response {
    {
        let mut last = s.last_sample.lock().await;
        if last.is_none_or(|at| at.elapsed() >= SAMPLE_EVERY) {
            if tokio::time::timeout(SAMPLE_TIMEOUT, sample(s.storage.as_ref()))
                .await
                .is_err()
            {
                tracing::warn!(
                    "metrics: the database did not answer within {SAMPLE_TIMEOUT:?}; \
                     the queue gauges keep their last values"
                );
            }
            *last = Some(Instant::now());
        }
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.handle.render(),
    )
        .into_response()
}

/// Reads the sampled gauges: readiness, the queue, the oldest due delivery, the pools.
async fn sample(storage: &dyn Storage) {
    let ready = super::ready(storage).await.is_ok();
    m::set_ready(ready);
    for p in storage.pool_connections() {
        let busy = p.size.saturating_sub(p.idle);
        gauge!(m::DB_POOL_CONNECTIONS, "pool" => p.pool, "state" => "idle").set(f64::from(p.idle));
        gauge!(m::DB_POOL_CONNECTIONS, "pool" => p.pool, "state" => "busy").set(f64::from(busy));
        gauge!(m::DB_POOL_MAX_CONNECTIONS, "pool" => p.pool).set(f64::from(p.max));
    }
    if !ready {
        return;
    }
    match storage.queue_counts(QUEUE_CAP).await {
        Ok(q) => {
            for (status, n) in [
                ("pending", q.pending),
                ("retrying", q.retrying),
                ("sending", q.sending),
                ("paused", q.paused),
            ] {
                gauge!(m::QUEUE_DELIVERIES, "status" => status).set(n as f64);
            }
        }
        Err(e) => tracing::warn!(error = %e, "metrics: counting the queue failed"),
    }
    match storage.next_due_at().await {
        Ok(due) => gauge!(m::QUEUE_OLDEST_DUE_AGE).set(oldest_due_age_seconds(due, now_ms())),
        Err(e) => tracing::warn!(error = %e, "metrics: reading the oldest due delivery failed"),
    }
}

/// How long the earliest due delivery has been due, in seconds; 0 when nothing is due yet.
pub fn oldest_due_age_seconds(next_due: Option<i64>, now: i64) -> f64 {
    next_due.map_or(0.0, |at| (now - at).max(0) as f64 / 1000.0)
}

/// Counts every request of the public listener by method, route template (axum's
/// `MatchedPath`; `unmatched` for the rest: never a raw path, which carries IDs and
/// tokens) and status, with its duration.
pub async fn track(req: Request, next: Next) -> Response {
    let method = m::method_label(req.method());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or(m::UNMATCHED_ROUTE, |p| m::route_label(p.as_str()));
    let started = Instant::now();
    let resp = next.run(req).await;
    let status = m::status_label(resp.status().as_u16());
    counter!(m::HTTP_REQUESTS, "method" => method, "route" => route, "status" => status)
        .increment(1);
    histogram!(m::HTTP_REQUEST_DURATION, "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    resp
}

/// Counts an incoming webhook's requests by answered status (layered on `/hooks/…`).
pub async fn track_incoming(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = m::status_label(resp.status().as_u16());
    counter!(m::INCOMING_REQUESTS, "status" => status).increment(1);
    resp
}

/// Counts the bot API's requests by answered status (layered on `/v1/bot/…`).
pub async fn track_bot(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = m::status_label(resp.status().as_u16());
    counter!(m::BOT_REQUESTS, "status" => status).increment(1);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_due_age_is_how_long_it_has_been_due() {
        assert_eq!(oldest_due_age_seconds(None, 10_000), 0.0);
        assert_eq!(oldest_due_age_seconds(Some(7_500), 10_000), 2.5);
        assert_eq!(
            oldest_due_age_seconds(Some(12_000), 10_000),
            0.0,
            "due later"
        );
    }
}
