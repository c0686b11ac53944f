//! Prometheus metrics (docs §8 "Metrics"): the one place that owns every metric's name,
//! unit, description and label values, and the small functions the rest of the server
//! records through. A leaf: it knows the domain's closed value sets and nothing else of
//! the server, so the engine, the HTTP layer and the console can all use it.
//!
//! The rule for labels: **no label whose values grow with tenants** — no space,
//! destination, webhook or URL, and HTTP routes only as their templates
//! (`/v1/projects/{project}/events`), so the number of series is fixed by the code.
//! Label values are `&'static str`, so recording allocates nothing.
//!
//! The recorder is process-wide ([`install`], once); `http::metrics` serves it on its
//! own address (`metrics_listen`), never on the public one, and counts the public
//! listener's requests. Without an installed recorder
//! every call here is a no-op.

use std::collections::HashMap;
use std::sync::{LazyLock, OnceLock, RwLock};
use std::time::Duration;

use metrics::{counter, gauge, histogram, Unit};
use metrics::{describe_counter, describe_gauge, describe_histogram, Counter, Gauge, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::domain::ErrorClass;

pub const BUILD_INFO: &str = "partyflow_build_info";
pub const READY: &str = "partyflow_ready";
pub const EVENTS_PUBLISHED: &str = "partyflow_events_published_total";
pub const DELIVERIES_FINISHED: &str = "partyflow_deliveries_finished_total";
pub const ATTEMPTS: &str = "partyflow_attempts_total";
pub const ATTEMPT_DURATION: &str = "partyflow_attempt_duration_seconds";
pub const FIRST_ATTEMPT_LAG: &str = "partyflow_first_attempt_lag_seconds";
pub const HELD_BACK: &str = "partyflow_deliveries_held_back_total";
pub const CLAIMED_AHEAD: &str = "partyflow_deliveries_claimed_ahead_total";
pub const QUEUE_DELIVERIES: &str = "partyflow_queue_deliveries";
pub const QUEUE_OLDEST_DUE_AGE: &str = "partyflow_queue_oldest_due_age_seconds";
pub const ATTEMPTS_IN_FLIGHT: &str = "partyflow_attempts_in_flight";
pub const AUTO_DISABLES: &str = "partyflow_auto_disables_total";
pub const INCOMING_REQUESTS: &str = "partyflow_incoming_webhook_requests_total";
pub const BOT_REQUESTS: &str = "partyflow_bot_requests_total";
pub const HTTP_REQUESTS: &str = "partyflow_http_requests_total";
pub const HTTP_REQUEST_DURATION: &str = "partyflow_http_request_duration_seconds";
pub const DB_POOL_CONNECTIONS: &str = "partyflow_db_pool_connections";
pub const DB_POOL_MAX_CONNECTIONS: &str = "partyflow_db_pool_max_connections";
pub const DB_WRITE_WAIT: &str = "partyflow_db_write_wait_seconds";
pub const DB_WRITE_HELD: &str = "partyflow_db_write_held_seconds";
/// Recorded by the retention task (its `table` label: the table purged).
pub const RETENTION_PURGED_ROWS: &str = "partyflow_retention_purged_rows_total";

/// Every metric this server exposes, for the documentation test and the dashboard's.
pub const ALL: &[&str] = &[
    BUILD_INFO,
    READY,
    EVENTS_PUBLISHED,
    DELIVERIES_FINISHED,
    ATTEMPTS,
    ATTEMPT_DURATION,
    FIRST_ATTEMPT_LAG,
    HELD_BACK,
    CLAIMED_AHEAD,
    QUEUE_DELIVERIES,
    QUEUE_OLDEST_DUE_AGE,
    ATTEMPTS_IN_FLIGHT,
    AUTO_DISABLES,
    INCOMING_REQUESTS,
    BOT_REQUESTS,
    HTTP_REQUESTS,
    HTTP_REQUEST_DURATION,
    DB_POOL_CONNECTIONS,
    DB_POOL_MAX_CONNECTIONS,
    DB_WRITE_WAIT,
    DB_WRITE_HELD,
    RETENTION_PURGED_ROWS,
];

/// Buckets of the attempt duration: a receiver's answer, 5 ms to the longest timeout (60 s).
const ATTEMPT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Buckets of the publish→first-attempt lag: milliseconds when idle, minutes in a backlog.
const LAG_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];
/// Buckets of an HTTP request's duration.
const HTTP_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of a write transaction's wait for its connection (SQLite: the write gate) and
/// of its hold on it: 50 µs to 1 s.
const WRITE_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Where a published event came from (`source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventSource {
    /// `POST /v1/projects/{p}/events` and messages posted with an API key.
    Api,
    /// A message from an incoming webhook.
    Incoming,
    /// A message from a bot.
    Bot,
    /// A console test event (`partyflow.test`).
    Test,
}

impl EventSource {
    pub fn as_str(self) -> &'static str {
        match self {
            EventSource::Api => "api",
            EventSource::Incoming => "incoming",
            EventSource::Bot => "bot",
            EventSource::Test => "test",
        }
    }
}

/// How a delivery ended (`outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    /// Dead-lettered (retries used up, or not retryable), or lost three times in a row.
    Failed,
    Cancelled,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// Which limit held a claimed delivery back (`scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldBy {
    /// The destination's own `rateLimit`.
    Destination,
    /// The space's plan (its shared outgoing rate).
    Plan,
}

/// What was switched off automatically (`kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disabled {
    Destination,
    IncomingWebhook,
}

impl Disabled {
    pub fn as_str(self) -> &'static str {
        match self {
            Disabled::Destination => "destination",
            Disabled::IncomingWebhook => "incoming_webhook",
        }
    }
}

/// The `error_class` label of an attempt: its class, or `none` for a success.
pub fn error_class_label(class: Option<ErrorClass>) -> &'static str {
    class.map_or("none", ErrorClass::as_str)
}

/// An HTTP status as a `&'static str` label (`"404"`); outside 100–599, `"other"`.
pub fn status_label(status: u16) -> &'static str {
    static CODES: LazyLock<Vec<String>> =
        LazyLock::new(|| (100..600).map(|c: u16| c.to_string()).collect());
    match status {
        100..=599 => &CODES[usize::from(status - 100)],
        _ => "other",
    }
}

/// An HTTP method as a label; anything unusual is `other` (a client chooses the method).
pub fn method_label(method: &http::Method) -> &'static str {
    match *method {
        http::Method::GET => "GET",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::PATCH => "PATCH",
        http::Method::DELETE => "DELETE",
        http::Method::HEAD => "HEAD",
        http::Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// A route template as a `&'static str`: templates are a closed set fixed by the code
/// (axum's `MatchedPath`), so each is kept once, for the life of the process.
pub fn route_label(template: &str) -> &'static str {
    static ROUTES: LazyLock<RwLock<HashMap<String, &'static str>>> =
        LazyLock::new(Default::default);
    if let Some(known) = ROUTES
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(template)
    {
        return known;
    }
    let mut routes = ROUTES.write().unwrap_or_else(|p| p.into_inner());
    routes
        .entry(template.to_owned())
        .or_insert_with(|| Box::leak(template.to_owned().into_boxed_str()))
}

/// The label of a request no route matched (assets, unknown paths): never the path itself.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// Installs the process-wide Prometheus recorder (once; later calls return the same
/// handle) with every metric described and the histograms' buckets set.
pub fn install() -> PrometheusHandle {
    INSTALLED
        .get_or_init(|| {
            let handle = builder()
                .install_recorder()
                .expect("no other metrics recorder is installed in this process");
            describe();
            gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
            handle
        })
        .clone()
}

/// The installed recorder's handle ([`install`]).
static INSTALLED: OnceLock<PrometheusHandle> = OnceLock::new();

fn builder() -> PrometheusBuilder {
    let buckets = |b: PrometheusBuilder, name: &str, values: &[f64]| {
        b.set_buckets_for_metric(Matcher::Full(name.to_owned()), values)
            .expect("bucket lists are not empty")
    };
    let b = PrometheusBuilder::new();
    let b = buckets(b, ATTEMPT_DURATION, ATTEMPT_BUCKETS);
    let b = buckets(b, FIRST_ATTEMPT_LAG, LAG_BUCKETS);
    let b = buckets(b, DB_WRITE_WAIT, WRITE_BUCKETS);
    let b = buckets(b, DB_WRITE_HELD, WRITE_BUCKETS);
    buckets(b, HTTP_REQUEST_DURATION, HTTP_BUCKETS)
}

fn describe() {
    describe_gauge!(
        BUILD_INFO,
        "Always 1; the `version` label is the server's version."
    );
    describe_gauge!(
        READY,
        "1 while the server is ready (its database answers, as /readyz), else 0."
    );
    describe_counter!(
        EVENTS_PUBLISHED,
        "Events published, by source (api, incoming, bot, test)."
    );
    describe_counter!(
        DELIVERIES_FINISHED,
        "Deliveries that reached a final status, by outcome (succeeded, failed, cancelled)."
    );
    describe_counter!(
        ATTEMPTS,
        "Delivery attempts recorded, by error class (none for a 2xx)."
    );
    describe_histogram!(
        ATTEMPT_DURATION,
        Unit::Seconds,
        "How long an attempt took, from the request to the end of the response read."
    );
    describe_histogram!(
        FIRST_ATTEMPT_LAG,
        Unit::Seconds,
        "From an event's publish (or its deliverAt) to the first attempt of its delivery."
    );
    describe_counter!(
        HELD_BACK,
        "Claimed deliveries given back by a rate limit, by scope (destination, plan)."
    );
    describe_counter!(
        CLAIMED_AHEAD,
        "Deliveries claimed ahead that waited in memory for a slot of their destination, \
         by outcome (sent; given_back: waited too long, due again at once)."
    );
    describe_gauge!(
        QUEUE_DELIVERIES,
        "Unfinished deliveries by status (pending, retrying: waiting and not paused; \
         sending; paused), each counted up to 1,000,000."
    );
    describe_gauge!(
        QUEUE_OLDEST_DUE_AGE,
        Unit::Seconds,
        "How long the earliest due, unpaused delivery has been due (0 when none is)."
    );
    describe_gauge!(
        ATTEMPTS_IN_FLIGHT,
        "Attempts this process is making right now."
    );
    describe_counter!(
        AUTO_DISABLES,
        "Automatic disables, by kind (destination, incoming_webhook)."
    );
    describe_counter!(
        INCOMING_REQUESTS,
        "Requests to incoming webhooks (/hooks/...), by answered status."
    );
    describe_counter!(BOT_REQUESTS, "Requests to the bot API, by answered status.");
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests on the public listener, by method, route template and status."
    );
    describe_histogram!(
        HTTP_REQUEST_DURATION,
        Unit::Seconds,
        "HTTP request duration on the public listener, by method and route template."
    );
    describe_gauge!(
        DB_POOL_CONNECTIONS,
        "Database connections open, by pool (main, engine) and state (idle, busy)."
    );
    describe_gauge!(
        DB_POOL_MAX_CONNECTIONS,
        "The most connections a database pool opens, by pool."
    );
    describe_histogram!(
        DB_WRITE_WAIT,
        Unit::Seconds,
        "How long a write transaction waited for its connection (SQLite: the write gate, \
         which every write of the process takes in turn), by durability (full, deferred, engine)."
    );
    describe_histogram!(
        DB_WRITE_HELD,
        Unit::Seconds,
        "How long a write transaction held its connection (SQLite: the write gate), from \
         taking it to giving it back, by durability (full, deferred, engine)."
    );
    describe_counter!(
        RETENTION_PURGED_ROWS,
        "Rows deleted by retention, by table."
    );
}

/// The durabilities of write transactions (`durability`), as storage names them.
pub const WRITE_DURABILITIES: [&str; 3] = ["full", "deferred", "engine"];

/// A write transaction waited `waited` for its connection and then held it `held`
/// ([`DB_WRITE_WAIT`], [`DB_WRITE_HELD`]); `durability` is an index into
/// [`WRITE_DURABILITIES`]. Through handles made once the recorder is installed: every
/// write of the process records here, so no look-up per call.
pub fn write_waited(durability: usize, waited: Duration) {
    if let Some(handles) = write_handles() {
        handles[durability].0.record(waited.as_secs_f64());
    }
}

/// See [`write_waited`].
pub fn write_held(durability: usize, held: Duration) {
    if let Some(handles) = write_handles() {
        handles[durability].1.record(held.as_secs_f64());
    }
}

/// The write histograms' handles, by durability; `None` until [`install`] (storage writes
/// its migrations before the recorder exists, and handles made then would record nowhere).
fn write_handles() -> Option<&'static [(Histogram, Histogram); 3]> {
    static HANDLES: OnceLock<[(Histogram, Histogram); 3]> = OnceLock::new();
    if let Some(handles) = HANDLES.get() {
        return Some(handles);
    }
    INSTALLED.get()?;
    Some(HANDLES.get_or_init(|| {
        WRITE_DURABILITIES.map(|d| {
            (
                histogram!(DB_WRITE_WAIT, "durability" => d),
                histogram!(DB_WRITE_HELD, "durability" => d),
            )
        })
    }))
}

/// An event (or message) was published.
pub fn event_published(source: EventSource) {
    counter!(EVENTS_PUBLISHED, "source" => source.as_str()).increment(1);
}

/// Deliveries reached a final status outside the engine (a cancel).
pub fn deliveries_finished(outcome: Outcome, n: u64) {
    if n > 0 {
        counter!(DELIVERIES_FINISHED, "outcome" => outcome.as_str()).increment(n);
    }
}

/// Something was disabled automatically.
pub fn auto_disabled(kind: Disabled) {
    counter!(AUTO_DISABLES, "kind" => kind.as_str()).increment(1);
}

/// Mirrors `/readyz`.
pub fn set_ready(ready: bool) {
    gauge!(READY).set(if ready { 1.0 } else { 0.0 });
}

/// The engine's handles, made once per engine (after [`install`]), so an attempt records
/// through ready counters: no look-up, no allocation.
#[derive(Clone)]
pub struct Dispatch {
    finished: [Counter; 3],
    /// By [`ErrorClass::ALL`]'s order, then `none` last.
    attempts: Vec<Counter>,
    duration: Histogram,
    lag: Histogram,
    held: [Counter; 2],
    ahead: [Counter; 2],
    in_flight: Gauge,
    disabled: Counter,
}

impl Default for Dispatch {
    fn default() -> Self {
        Self::new()
    }
}

impl Dispatch {
    pub fn new() -> Self {
        let finished = |o: Outcome| counter!(DELIVERIES_FINISHED, "outcome" => o.as_str());
        let attempts = ErrorClass::ALL
            .iter()
            .map(|c| Some(*c))
            .chain([None])
            .map(|c| counter!(ATTEMPTS, "error_class" => error_class_label(c)))
            .collect();
        Self {
            finished: [
                finished(Outcome::Succeeded),
                finished(Outcome::Failed),
                finished(Outcome::Cancelled),
            ],
            attempts,
            duration: histogram!(ATTEMPT_DURATION),
            lag: histogram!(FIRST_ATTEMPT_LAG),
            held: [
                counter!(HELD_BACK, "scope" => "destination"),
                counter!(HELD_BACK, "scope" => "plan"),
            ],
            ahead: [
                counter!(CLAIMED_AHEAD, "outcome" => "sent"),
                counter!(CLAIMED_AHEAD, "outcome" => "given_back"),
            ],
            in_flight: gauge!(ATTEMPTS_IN_FLIGHT),
            disabled: counter!(AUTO_DISABLES, "kind" => Disabled::Destination.as_str()),
        }
    }

    /// An attempt was recorded (with its class and, when it made a request, its duration).
    pub fn attempt(&self, class: Option<ErrorClass>, duration_ms: Option<i64>) {
        let i = class.map_or(ErrorClass::ALL.len(), |c| {
            ErrorClass::ALL.iter().position(|k| *k == c).unwrap_or(0)
        });
        self.attempts[i].increment(1);
        if let Some(ms) = duration_ms {
            self.duration.record(ms.max(0) as f64 / 1000.0);
        }
    }

    pub fn finished(&self, outcome: Outcome) {
        let i = match outcome {
            Outcome::Succeeded => 0,
            Outcome::Failed => 1,
            Outcome::Cancelled => 2,
        };
        self.finished[i].increment(1);
    }

    /// The first attempt of a delivery starts `lag` after its event was due.
    pub fn first_attempt_lag(&self, lag: Duration) {
        self.lag.record(lag.as_secs_f64());
    }

    pub fn held_back(&self, by: HeldBy, n: u64) {
        let i = match by {
            HeldBy::Destination => 0,
            HeldBy::Plan => 1,
        };
        if n > 0 {
            self.held[i].increment(n);
        }
    }

    /// Deliveries claimed ahead left their lane: `sent`, or given back.
    pub fn claimed_ahead(&self, sent: bool, n: u64) {
        if n > 0 {
            self.ahead[usize::from(!sent)].increment(n);
        }
    }

    pub fn destination_disabled(&self) {
        self.disabled.increment(1);
    }

    /// Counts an attempt in flight until the returned guard drops.
    pub fn in_flight(&self) -> InFlight {
        self.in_flight.increment(1.0);
        InFlight(self.in_flight.clone())
    }
}

/// One attempt in flight ([`Dispatch::in_flight`]).
pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// `publish → first attempt`: from when the delivery could first go (its creation, or
/// its event's `deliverAt` when later) to `started`, never negative.
pub fn lag_ms(created_at: i64, deliver_at: Option<i64>, started: i64) -> i64 {
    (started - created_at.max(deliver_at.unwrap_or(i64::MIN))).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_prometheus_conventions() {
        for name in ALL {
            assert!(name.starts_with("partyflow_"), "{name}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit()),
                "{name}"
            );
        }
        for counter in [EVENTS_PUBLISHED, ATTEMPTS, HTTP_REQUESTS, AUTO_DISABLES] {
            assert!(counter.ends_with("_total"), "{counter}");
        }
        for seconds in [
            ATTEMPT_DURATION,
            FIRST_ATTEMPT_LAG,
            HTTP_REQUEST_DURATION,
            DB_WRITE_WAIT,
            DB_WRITE_HELD,
        ] {
            assert!(seconds.ends_with("_seconds"), "{seconds}");
        }
    }

    #[test]
    fn labels_are_static_and_bounded() {
        assert_eq!(status_label(404), "404");
        assert_eq!(status_label(100), "100");
        assert_eq!(status_label(599), "599");
        assert_eq!(status_label(600), "other");
        assert_eq!(status_label(42), "other");
        assert_eq!(method_label(&http::Method::POST), "POST");
        let odd = http::Method::from_bytes(b"BREW").unwrap();
        assert_eq!(method_label(&odd), "other");
        assert_eq!(error_class_label(None), "none");
        assert_eq!(error_class_label(Some(ErrorClass::Http)), "http");
        let a = route_label("/v1/projects/{project}/events");
        let b = route_label("/v1/projects/{project}/events");
        assert!(std::ptr::eq(a, b), "one copy per template");
    }

    #[test]
    fn the_lag_counts_from_the_later_of_creation_and_deliver_at() {
        assert_eq!(lag_ms(1_000, None, 1_250), 250);
        assert_eq!(lag_ms(1_000, Some(5_000), 5_100), 100);
        assert_eq!(lag_ms(1_000, Some(500), 1_100), 100);
        assert_eq!(lag_ms(1_000, None, 900), 0, "clocks of two instances");
    }
}
