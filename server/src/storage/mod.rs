//! Durable state, for SQLite ([`sqlite`]) and PostgreSQL ([`postgres`]), chosen at run
//! time from the database URL ([`connect`]).
//!
//! # Layout
//!
//! One store, [`Store<D>`](store::Store), generic over the [`Dialect`](store::Dialect) of
//! its database (`sqlite.rs`, `postgres.rs`: the claim statements, the locks, how a write
//! transaction begins, the due-index hint, the migrations); one module per aggregate,
//! each with its columns, row types, queries and the trait its consumers hold:
//!
//! | module             | trait                 | used by                                        |
//! |--------------------|-----------------------|------------------------------------------------|
//! | `tenants.rs`       | [`TenantStore`]       | admin commands, the console, the API-key check |
//! | `channels.rs`      | [`ChannelStore`]      | the REST API, the console                      |
//! | `events.rs`        | [`EventStore`]        | the group commit, messages, test events        |
//! | `destinations.rs`  | [`DestinationStore`]  | the REST API, the console                      |
//! | `event_types.rs`   | [`EventTypeStore`]    | the REST API, the console, schema checks       |
//! | `queue.rs`         | [`DispatchQueue`]     | the dispatch engine, and nothing else          |
//! | `deliveries.rs`    | [`DeliveryStore`]     | the REST API, the console (incl. bulk)         |
//! | `incoming.rs`      | [`IncomingStore`]     | incoming hooks, the bot API, their management  |
//! | `users.rs`         | [`UserStore`]         | sign-in, user management, the session index    |
//! | `notifications.rs` | [`NotificationStore`] | the console, the REST API                      |
//! | `stats.rs`         | [`ConsoleStats`]      | the console's overview and counters            |
//! | `retention.rs`     | [`RetentionStore`]    | the retention task (the purge)                 |
//! | `audit.rs`         | [`AuditStore`]        | the REST API, the console (writes: `audit_in`) |
//! | `search.rs`        | [`SearchStore`]       | the console's search box                       |
//!
//! [`Storage`] combines them for the server's state; [`TestStorage`] adds what only tests
//! and the benchmark use. Every write goes through `write.rs` ([`write::Writes`]: the
//! write gate and `BEGIN IMMEDIATE` on SQLite); nothing outside this module sees sqlx,
//! except through [`RawPool`] (the console's session store, tests, the benchmark).
//!
//! # Names
//!
//! - `get_x(space_id, id)` reads a record of one space; `get_x_by_id(id)` reads it across
//!   spaces (the console's admin links, the engine, incoming requests).
//! - `find_x_by_y(…)` looks a record up by a secret or another unique key
//!   (`find_api_key_by_hash`, `find_user_by_email`).
//! - `…_to_post` reads a record with all that posting through it reads, in one statement
//!   (`get_incoming_webhook_to_post`, `find_bot_to_post`).
//! - `list_x(…, page)` reads a keyset page, newest first (the REST API);
//!   `list_all_x(…)` reads every row (the console).
//!
//! Every method is one transaction: it happens entirely or not at all.

use std::sync::Arc;

use async_trait::async_trait;

use crate::domain::*;

mod alerts;
mod audit;
mod channels;
pub mod checkpoint;
mod deliveries;
mod destinations;
pub mod durable;
mod event_types;
mod events;
pub mod group_commit;
mod incoming;
pub mod moving;
mod notifications;
pub mod postgres;
mod queue;
pub mod reads;
mod retention;
mod search;
pub mod sqlite;
mod stats;
pub mod store;
mod tenants;
pub mod testing;
mod users;
pub mod write;

pub use alerts::AlertStore;
pub use audit::{AuditFilter, AuditStore};
pub use channels::ChannelStore;
pub use deliveries::DeliveryStore;
pub use destinations::DestinationStore;
pub use event_types::EventTypeStore;
pub use events::{EventStore, PublishChecks, ReadSubscribers};
pub use incoming::{IncomingStore, WebhookToPost};
pub use notifications::NotificationStore;
pub use queue::DispatchQueue;
pub use retention::RetentionStore;
pub use search::SearchStore;
pub use stats::ConsoleStats;
pub use tenants::TenantStore;
pub use testing::TestStorage;
pub use users::UserStore;

/// What can go wrong in storage, in terms that mean the same on both backends.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("not found")]
    NotFound,
    /// A uniqueness or reference rule was broken (e.g. a duplicate channel name).
    #[error("conflict: {0}")]
    Conflict(String),
    /// A stored value could not be read back as a domain value.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// A REST publish's checks came from memory ([`EventStore::publish_checks_cached`])
    /// and the write found them out of date (a key revoked, a schema or a filter added,
    /// a subscriber changed): nothing was written. Read them afresh and publish again.
    #[error("the publish's checks were out of date")]
    Stale,
    /// The database cannot be reached or cannot take writes right now (connection
    /// refused or lost, pool exhausted, disk full, I/O error): nothing was written, and
    /// the same request may succeed later. HTTP answers 503.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// A failure of our own, not the database's (e.g. the group commit a publish was part
    /// of failed): an internal error, described in words.
    #[error("{0}")]
    Internal(String),
    #[error(transparent)]
    Other(sqlx::Error),
}

/// How long a request waits for a database connection before it is answered
/// [`StorageError::Unavailable`]: an unreachable database fails requests quickly
/// instead of letting them pile up.
pub const ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

impl From<sqlx::Error> for StorageError {
    fn from(err: sqlx::Error) -> Self {
        if is_unavailable(&err) {
            return StorageError::Unavailable(err.to_string());
        }
        match err {
            sqlx::Error::RowNotFound => StorageError::NotFound,
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                StorageError::Conflict(db.message().to_owned())
            }
            sqlx::Error::Database(db) if db.is_foreign_key_violation() => {
                StorageError::Conflict(db.message().to_owned())
            }
            other => StorageError::Other(other),
        }
    }
}

/// Whether PostgreSQL aborted the transaction because it and another waited on each other
/// (SQLSTATE 40P01, `deadlock_detected`): tried again, it goes through.
pub fn is_deadlock(err: &StorageError) -> bool {
    matches!(err, StorageError::Other(sqlx::Error::Database(db)) if db.code().as_deref() == Some("40P01"))
}

/// Whether `err` says the database is out of reach or out of room for now, rather than
/// that this request is wrong: the connection (refused, reset, timed out, pool closed or
/// exhausted), SQLite's `SQLITE_BUSY`, `SQLITE_NOMEM`, `SQLITE_IOERR*`, `SQLITE_FULL`,
/// `SQLITE_CANTOPEN`, and PostgreSQL's SQLSTATE classes 08 (connection exception),
/// 53 (insufficient resources: disk full, out of memory, too many connections),
/// 57P01–57P03 (shutting down, crashed, starting up) and 58 (system/I/O error).
pub fn is_unavailable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                let code = db.code().and_then(|c| c.parse::<i32>().ok()).unwrap_or(0);
                sqlite_code_is_unavailable(code)
            } else if let Some(e) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
                sqlstate_is_unavailable(e.code())
            } else {
                false
            }
        }
        _ => false,
    }
}

/// SQLite result codes (primary or extended) that mean "not now" rather than "not this".
fn sqlite_code_is_unavailable(code: i32) -> bool {
    const BUSY: i32 = 5;
    const NOMEM: i32 = 7;
    const IOERR: i32 = 10;
    const FULL: i32 = 13;
    const CANTOPEN: i32 = 14;
    matches!(code & 0xff, BUSY | NOMEM | IOERR | FULL | CANTOPEN)
}

/// PostgreSQL SQLSTATEs that mean "not now" rather than "not this".
fn sqlstate_is_unavailable(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("58")
        || matches!(code, "57P01" | "57P02" | "57P03")
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Which database a [`Storage`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A page of a keyset-paginated listing, newest first.
#[derive(Debug, Clone, Copy)]
pub struct Page<C> {
    /// Only items strictly older than this one.
    pub before: Option<C>,
    pub limit: i64,
}

impl<C> Page<C> {
    pub fn first(limit: i64) -> Self {
        Self {
            before: None,
            limit,
        }
    }
}

/// The filters of the deliveries table (docs §5 and §6); every field is optional.
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    pub space_id: Option<SpaceId>,
    pub status: Option<DeliveryStatus>,
    pub destination_id: Option<DestinationId>,
    pub event_type: Option<String>,
    pub error_class: Option<ErrorClass>,
    /// Created at or after (Unix ms).
    pub since: Option<UnixMs>,
    /// Created before (Unix ms).
    pub until: Option<UnixMs>,
}

/// An event together with the deliveries that fan it out, written in one transaction.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub event: Event,
    /// When set, a second publish with the same key returns the first answer.
    pub idempotency_key: Option<String>,
    pub request_hash: String,
    /// What the destinations' filters said of the payload, decided before the write
    /// (`ops::filters`); the default (no verdicts) sends to every subscriber.
    pub filters: FilterVerdicts,
    /// A claim for the event's own deliveries, made in the publish's transaction where
    /// the backend can (SQLite, an event published alone, due now): as
    /// [`DispatchQueue::claim_for`] of the destinations it fans out to (`destinations` is
    /// replaced by those), so the engine sends them without a claim of its own
    /// ([`Published::Created::claimed`]).
    pub claim: Option<ClaimNext>,
    /// Its type's subscribers, with the rest of its checks, as a REST publish read them
    /// (or kept them in memory): it is written in one round trip if they are unchanged
    /// ([`ReadSubscribers`]); from memory and changed, it is refused as [`StorageError::Stale`].
    pub subscribers: Option<ReadSubscribers>,
}

/// The filters' verdicts on one event, by destination: the ones it passed are not
/// listed. A destination that is not listed gets its delivery as usual.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterVerdicts {
    /// Their filter kept the event out: no delivery, and `filtered_events` grows.
    pub filtered_out: Vec<DestinationId>,
    /// Their filter failed: a delivery that has already failed, with class
    /// `transformation` and this message on its one attempt.
    pub failed: Vec<(DestinationId, String)>,
}

/// What a publish did ([`EventStore::publish_events`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Published {
    /// The event and its deliveries are on disk.
    Created {
        event_id: EventId,
        deliveries: i64,
        skipped: i64,
        /// The destinations the new deliveries go to (for the engine's wake-up).
        destinations: Vec<DestinationId>,
        /// What [`NewEvent::claim`] claimed, in the publish's transaction; `None` when no
        /// claim was made (the engine claims as usual).
        claimed: Option<Claimed>,
    },
    /// The idempotency key was seen before: nothing was written; this was the first answer.
    /// `request_hash` lets the caller refuse a key reused for a different request.
    Replayed {
        event_id: EventId,
        deliveries: i64,
        request_hash: String,
    },
}

/// How an attempt ends, as the engine decided (docs §2.1–2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    Succeeded,
    Retry {
        at: UnixMs,
    },
    /// Dead-lettered: attempts exhausted or a failure that is not retried.
    DeadLetter,
    /// Cut short on our side (crash, shutdown): retried at `retry_at` without
    /// using up an attempt (docs D3). `crashed`: the process sending it died (its
    /// lease ran out); [`LOST_IN_A_ROW_FAILS`] of those in a row fail the delivery
    /// with class `lost`, so no input can keep the server in a crash loop.
    Lost {
        retry_at: UnixMs,
        crashed: bool,
    },
}

/// Crash-lost attempts in a row after which a delivery is failed, not retried.
pub const LOST_IN_A_ROW_FAILS: i64 = 3;

/// One finished attempt of a claimed delivery, to record in one transaction.
#[derive(Debug, Clone)]
pub struct FinishedAttempt {
    pub attempt: Attempt,
    pub destination_id: DestinationId,
    pub next: NextStep,
    /// Recovery of a crashed claim: apply only if the lease expired before this time.
    pub only_if_lease_expired_before: Option<UnixMs>,
}

/// What recording an attempt changed besides the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FinishEffects {
    /// False when the delivery was no longer claimed (another worker recovered it).
    pub applied: bool,
    /// The destination's dead-letter streak after this attempt, when it grew.
    pub dead_letter_streak: Option<i64>,
    pub destination_disabled: bool,
    pub warned: bool,
    /// The delivery was crash-lost [`LOST_IN_A_ROW_FAILS`] times in a row and failed.
    pub lost_for_good: bool,
    /// Whether the destination has another delivery due now, read in the same
    /// transaction (SQLite's one-batch record); `None`: not read.
    pub more_due: Option<bool>,
}

/// What happened to one delivery of a bulk resend or cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkOutcome {
    /// Resent as this new delivery.
    Resent(DeliveryId),
    Cancelled,
    NotFound,
    /// Cancel: it is sending or finished. Resend: it is still waiting or sending.
    WrongStatus(DeliveryStatus),
    /// Resend: its destination is inactive.
    DestinationInactive,
}

/// The result of a resend of all failed deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResendFailed {
    pub resent: i64,
    /// Failed, not yet resent, still to do (call again).
    pub remaining: i64,
}

/// What a claim may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimLimits {
    /// Attempts in flight to one destination at once, across instances (docs §2.5: 5).
    pub per_destination: i64,
    /// Retries this claim may take (capacity is kept for first attempts).
    pub retries: i64,
    /// The plans' outgoing sends per second (docs D4), whose slots the claim takes for
    /// its whole batch in its own transaction; `None` takes none.
    pub plans: Option<PlanLimits>,
}

impl Default for ClaimLimits {
    fn default() -> Self {
        Self {
            per_destination: 5,
            retries: i64::MAX,
            plans: None,
        }
    }
}

/// How far a backend's engine claims ahead (docs §2.5, [`ClaimNext::ahead`]): `caps`, how
/// many in-flight caps' worth of a destination may be in `sending` (its cap in flight, the
/// rest claimed ahead, waiting in memory for a slot or sent and being recorded), for a
/// destination whose last attempt took less than `fast_attempt_ms`, so that each delivery
/// waiting waits for at most `caps - 1` attempts of each worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ahead {
    pub caps: i64,
    pub fast_attempt_ms: i64,
}

impl Ahead {
    /// The longest a delivery claimed ahead waits for its worker (ms): `caps - 1` fast
    /// attempts.
    pub const fn waits_at_most_ms(&self) -> i64 {
        (self.caps - 1) * self.fast_attempt_ms
    }
}

/// SQLite's: four caps in `sending`, the cap in flight and three caps claimed ahead: a
/// group of records then claims enough that the workers of a fast destination do not run
/// dry before the next group commits. Three caps over two: a flood to one destination
/// +10 %; four over three (4 runs each, out of process): the flood +9 % (3,514 → 3,843/s;
/// after the publishes, 5,615 → 6,855/s), fan-out +11 %, CPU per delivery −8 %; five
/// caps was 8 % slower.
pub const SQLITE_AHEAD: Ahead = Ahead {
    caps: 4,
    fast_attempt_ms: 3,
};

/// PostgreSQL's: five caps in `sending`, four claimed ahead, where the claims of every
/// instance take turns (~3 ms each): with two ahead, the deliveries sent and still being
/// recorded filled most of the room, a claim took ~4.2 deliveries and the engine's claims
/// followed one another without a pause; with four, a flood to one destination +23 %.
pub const POSTGRES_AHEAD: Ahead = Ahead {
    caps: 5,
    fast_attempt_ms: 2,
};

/// A claim for named destinations ([`DispatchQueue::claim_for`]), also what a group of
/// finished attempts claims next, in its own transaction where the backend can
/// ([`DispatchQueue::finish_and_claim`]): up to `limit` due deliveries of `destinations`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimNext {
    pub destinations: Vec<DestinationId>,
    /// Those of `destinations` this process may claim ahead for: up to [`Ahead::caps`]
    /// times the in-flight cap in `sending`, the cap itself held in memory by the engine
    /// (docs §2.5); on PostgreSQL only while every delivery in flight to the destination
    /// is this instance's (`claimed_by`), so the cap holds across instances.
    pub ahead: Vec<DestinationId>,
    pub limit: i64,
    pub lease_margin_ms: i64,
    pub limits: ClaimLimits,
}

/// The plan limit a claim applies: sends per second shared by a space's destinations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanLimits {
    pub per_second: PerPlan,
    /// The window the sends are counted in (a second and a margin).
    pub window_ms: i64,
}

/// What a claim took: the deliveries to send now, and how many it gave straight back
/// because their space's plan limit said "not now" (`rate_limited`, due when a slot frees).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Claimed {
    pub deliveries: Vec<Delivery>,
    /// The event of each delivery (by delivery ID), read by the claim itself; one whose
    /// event was deleted meanwhile has none.
    pub events: std::collections::HashMap<DeliveryId, Arc<Event>>,
    /// The destinations of the deliveries, read in the claim's transaction; one deleted
    /// meanwhile is missing (its deliveries went with it).
    pub destinations: std::collections::HashMap<DestinationId, Arc<Destination>>,
    pub held_by_plan: u64,
}

/// Which deliveries a rate limit holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateScope {
    /// The destination's own `rateLimit`.
    Destination(DestinationId),
    /// The space's plan limit, shared by all its destinations.
    Space(SpaceId),
}

/// Whether a rate-limited action may happen now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Granted,
    /// Not now; the next slot frees in this many milliseconds.
    Wait(i64),
}

/// What recording an incoming webhook request changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IncomingEffects {
    pub consecutive_failures: i64,
    /// This request was the one that disabled the webhook.
    pub disabled: bool,
}

/// The unfinished deliveries, for the queue gauges ([`ConsoleStats::queue_counts`]): each
/// count stops at the cap it was asked with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Waiting for their first attempt, not paused.
    pub pending: i64,
    /// Waiting for a retry, not paused.
    pub retrying: i64,
    /// Claimed, an attempt in flight.
    pub sending: i64,
    /// Waiting, but held because their destination is inactive.
    pub paused: i64,
}

/// One database pool's connections right now ([`ConsoleStats::pool_connections`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConnections {
    /// `main` (requests, reads, durable writes) or `engine` (SQLite: the engine's own pool).
    pub pool: &'static str,
    /// Connections open.
    pub size: u32,
    /// Open and idle.
    pub idle: u32,
    /// The most the pool opens.
    pub max: u32,
}

/// A signed incoming request's `webhook-id` (docs §3), remembered by the transaction
/// that writes its message: a request that fails on our side remembers nothing, so the
/// sender's retry is accepted; one that succeeded makes a replay of it refused.
#[derive(Debug, Clone, Copy)]
pub struct IncomingReplay<'a> {
    pub webhook_id: IncomingWebhookId,
    pub message_id: &'a str,
}

/// How long a remembered `webhook-id` is kept: past the signature's timestamp tolerance
/// (5 minutes either way) a replay is refused for its age anyway.
pub const REPLAY_MEMORY_MS: i64 = 15 * 60 * 1000;

/// Everything the server keeps, behind one interface for both backends: the traits of
/// its consumers together, for the server's state (`AppState`) and the console. A part of
/// the server that needs only some of it holds that trait (the engine a
/// [`DispatchQueue`], the group commit an [`EventStore`]).
#[async_trait]
pub trait Storage:
    TenantStore
    + ChannelStore
    + EventStore
    + DestinationStore
    + EventTypeStore
    + DispatchQueue
    + DeliveryStore
    + IncomingStore
    + UserStore
    + NotificationStore
    + ConsoleStats
    + AlertStore
    + RetentionStore
    + AuditStore
    + SearchStore
    + std::fmt::Debug
    + 'static
{
    fn backend(&self) -> Backend;

    /// Applies the backend's migrations; safe to call on every start.
    async fn migrate(&self) -> Result<()>;

    /// A round trip to the database, for `/readyz`.
    async fn ping(&self) -> Result<()>;
}

/// What became of a change to a console user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserChange {
    Done,
    NotFound,
    /// Refused: the user is the last active admin.
    LastAdmin,
}

/// The pool of the database in use, typed by backend: what the console's session store
/// is built on, and what tests and the benchmark run their own SQL on.
#[derive(Debug, Clone)]
pub enum RawPool {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

impl RawPool {
    /// Closes the pool: every later use of the storage fails as unavailable.
    pub async fn close(&self) {
        match self {
            RawPool::Sqlite(pool) => pool.close().await,
            RawPool::Postgres(pool) => pool.close().await,
        }
    }
}

/// An open database: the storage, and its pool for the console's session store.
#[derive(Debug, Clone)]
pub struct Connected {
    pub storage: Arc<dyn Storage>,
    pub sessions: RawPool,
}

impl From<Arc<dyn TestStorage>> for Connected {
    /// A test's storage (from [`testing::connect`]) as the server opens it.
    fn from(storage: Arc<dyn TestStorage>) -> Self {
        let sessions = storage.raw_pool();
        Connected { storage, sessions }
    }
}

/// Opens the database named by `url` (`sqlite://…` or `postgres://…`).
pub async fn connect(url: &str) -> anyhow::Result<Connected> {
    Ok(testing::connect(url).await?.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_being_out_of_reach_or_out_of_room_is_unavailable() {
        for e in [
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
            sqlx::Error::WorkerCrashed,
            sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
        ] {
            assert!(is_unavailable(&e), "{e}");
            assert!(matches!(
                StorageError::from(e),
                StorageError::Unavailable(_)
            ));
        }
        for e in [
            sqlx::Error::RowNotFound,
            sqlx::Error::Protocol("bad".into()),
            sqlx::Error::ColumnNotFound("x".into()),
        ] {
            assert!(!is_unavailable(&e), "{e}");
        }
        assert!(matches!(
            StorageError::from(sqlx::Error::RowNotFound),
            StorageError::NotFound
        ));
    }

    #[test]
    fn sqlite_full_busy_and_io_errors_are_unavailable_constraints_are_not() {
        // Primary and extended codes: SQLITE_FULL, SQLITE_IOERR_WRITE, SQLITE_IOERR_FSYNC,
        // SQLITE_BUSY, SQLITE_BUSY_SNAPSHOT, SQLITE_NOMEM, SQLITE_CANTOPEN.
        for code in [13, 778, 1034, 5, 517, 7, 14] {
            assert!(sqlite_code_is_unavailable(code), "{code}");
        }
        // SQLITE_CONSTRAINT_UNIQUE, SQLITE_CONSTRAINT_FOREIGNKEY, SQLITE_ERROR, SQLITE_CORRUPT.
        for code in [2067, 787, 1, 11] {
            assert!(!sqlite_code_is_unavailable(code), "{code}");
        }
    }

    #[test]
    fn postgres_connection_shutdown_and_resource_states_are_unavailable() {
        for code in [
            "08006", "08001", "57P01", "57P02", "57P03", "53100", "53300", "58030",
        ] {
            assert!(sqlstate_is_unavailable(code), "{code}");
        }
        for code in ["23505", "23503", "40001", "42P01", "57014"] {
            assert!(!sqlstate_is_unavailable(code), "{code}");
        }
    }
}
