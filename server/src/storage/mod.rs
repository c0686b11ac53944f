//! Durable state: one [`Storage`] trait, implemented for SQLite ([`sqlite`]) and
//! PostgreSQL ([`postgres`]), chosen at run time from the database URL.
//!
//! The two implementations share their SQL text where the dialects agree
//! ([`shared`]: times are Unix milliseconds, JSON is TEXT, placeholders are `$n`)
//! and split it where they don't. Rows are converted to domain records in
//! [`rows`]; nothing outside this module sees sqlx.

use async_trait::async_trait;

use crate::domain::*;

#[macro_use]
mod shared;
pub mod group_commit;
pub mod postgres;
mod rows;
pub mod sqlite;
pub mod write;

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
    /// The database cannot be reached or cannot take writes right now (connection
    /// refused or lost, pool exhausted, disk full, I/O error): nothing was written, and
    /// the same request may succeed later. HTTP answers 503.
    #[error("database unavailable: {0}")]
    Unavailable(String),
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

/// What [`Storage::publish_event`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// The event and its deliveries are on disk.
    Created {
        event_id: EventId,
        deliveries: i64,
        skipped: i64,
        /// The destinations the new deliveries go to (for the engine's wake-up).
        destinations: Vec<DestinationId>,
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
}

impl Default for ClaimLimits {
    fn default() -> Self {
        Self {
            per_destination: 5,
            retries: i64::MAX,
        }
    }
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

/// Everything the server keeps, behind one interface for both backends.
///
/// Every method is a single transaction: it either happens entirely or not at all.
#[async_trait]
pub trait Storage: Send + Sync + std::fmt::Debug + 'static {
    fn backend(&self) -> Backend;

    /// The concrete storage, for the few places that need its pool (the session store).
    fn as_any(&self) -> &dyn std::any::Any;

    /// Applies the backend's migrations; safe to call on every start.
    async fn migrate(&self) -> Result<()>;

    /// A round trip to the database, for `/readyz`.
    async fn ping(&self) -> Result<()>;

    // Spaces and API keys.
    async fn create_space(&self, space: &Space) -> Result<()>;
    async fn get_space(&self, id: SpaceId) -> Result<Space>;
    async fn list_all_spaces(&self) -> Result<Vec<Space>>;
    async fn create_api_key(&self, key: &ApiKey, key_hash: &str) -> Result<()>;
    /// The live (not revoked) key with this hash.
    async fn find_api_key_by_hash(&self, key_hash: &str) -> Result<ApiKey>;
    /// Every key of the space, oldest first (the console).
    async fn list_all_api_keys(&self, space_id: SpaceId) -> Result<Vec<ApiKey>>;
    /// A page of the space's keys, newest first (the REST API).
    async fn list_api_keys(&self, space_id: SpaceId, page: Page<ApiKeyId>) -> Result<Vec<ApiKey>>;
    async fn revoke_api_key(&self, space_id: SpaceId, id: ApiKeyId, now: UnixMs) -> Result<()>;

    // Channels and messages.
    async fn create_channel(&self, channel: &Channel) -> Result<()>;
    async fn get_channel(&self, space_id: SpaceId, id: ChannelId) -> Result<Channel>;
    /// Renames a channel (`Conflict` when the space has one of that name already).
    async fn rename_channel(&self, space_id: SpaceId, id: ChannelId, name: &str) -> Result<()>;
    /// Deletes a channel with its messages and incoming webhooks.
    async fn delete_channel(&self, space_id: SpaceId, id: ChannelId) -> Result<()>;
    /// Every channel of the space, by name (the console).
    async fn list_all_channels(&self, space_id: SpaceId) -> Result<Vec<Channel>>;
    /// A page of the space's channels, newest first (the REST API).
    async fn list_channels(&self, space_id: SpaceId, page: Page<ChannelId>)
        -> Result<Vec<Channel>>;
    async fn list_messages(
        &self,
        channel_id: ChannelId,
        page: Page<MessageId>,
    ) -> Result<Vec<Message>>;

    // Events and their fan-out.
    /// Writes the event and one delivery per active destination of the space that
    /// subscribes to its type, in one transaction; counts the inactive ones it skipped.
    /// With an idempotency key seen before, writes nothing and returns the first answer.
    async fn publish_event(&self, new: &NewEvent, now: UnixMs) -> Result<Published>;

    /// [`Storage::publish_event`] for several events in one transaction (one commit, one
    /// fsync): each event in its own savepoint, so one that fails leaves the others
    /// written. The outer error is for the commit; the inner ones are per event.
    async fn publish_events(
        &self,
        batch: &[NewEvent],
        now: UnixMs,
    ) -> Result<Vec<Result<Published>>>;
    async fn get_event(&self, space_id: SpaceId, id: EventId) -> Result<Event>;
    async fn list_events(&self, space_id: SpaceId, page: Page<EventId>) -> Result<Vec<Event>>;

    // Destinations.
    async fn create_destination(&self, destination: &Destination) -> Result<()>;
    async fn get_destination(&self, space_id: SpaceId, id: DestinationId) -> Result<Destination>;
    /// Every destination of the space, oldest first (the console).
    async fn list_all_destinations(&self, space_id: SpaceId) -> Result<Vec<Destination>>;
    /// A page of the space's destinations, newest first (the REST API).
    async fn list_destinations(
        &self,
        space_id: SpaceId,
        page: Page<DestinationId>,
    ) -> Result<Vec<Destination>>;

    async fn update_destination(&self, destination: &Destination) -> Result<()>;
    async fn delete_destination(&self, space_id: SpaceId, id: DestinationId) -> Result<()>;
    /// Enables or disables a destination. Disabling pauses its waiting deliveries; enabling
    /// resumes them and resets the dead-letter streak (docs D6).
    async fn set_destination_status(
        &self,
        space_id: SpaceId,
        id: DestinationId,
        status: DestinationStatus,
        reason: Option<&str>,
        now: UnixMs,
    ) -> Result<Destination>;
    /// Waiting deliveries of a destination that are paused (resume on re-enable).
    async fn count_paused(&self, destination_id: DestinationId) -> Result<i64>;

    // The dispatch engine.
    /// Atomically moves up to `limit` due deliveries to `sending` under a lease of the
    /// destination's timeout plus `lease_margin_ms`, and returns them, oldest due first,
    /// never more than `limits.per_destination` in flight to one destination (counting
    /// every instance's claims) and at most `limits.retries` deliveries that are retries.
    async fn claim(
        &self,
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
        limits: &ClaimLimits,
    ) -> Result<Vec<Delivery>>;

    /// [`Storage::claim`] for the named destinations only: each one's earliest due
    /// deliveries, up to its free in-flight slots, without looking at the rest of the
    /// queue. The engine calls it for destinations it knows have work (a publish just
    /// fanned out to them, an attempt to them just ended); its cost does not grow with
    /// the backlog of other destinations.
    async fn claim_for(
        &self,
        destinations: &[DestinationId],
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
        limits: &ClaimLimits,
    ) -> Result<Vec<Delivery>>;

    /// [`Storage::claim`] with the default limits.
    async fn claim_due(
        &self,
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
    ) -> Result<Vec<Delivery>> {
        self.claim(now, limit, lease_margin_ms, &ClaimLimits::default())
            .await
    }

    /// A rate limit said "not now" to a claimed delivery: give it back without using an
    /// attempt, due at `until`, marked `rate_limited`, with every other due delivery of
    /// the same scope (so they are not claimed only to be refused again).
    async fn defer_rate_limited(
        &self,
        id: DeliveryId,
        scope: RateScope,
        until: UnixMs,
        now: UnixMs,
    ) -> Result<()>;
    /// When the earliest waiting, unpaused delivery is due.
    async fn next_due_at(&self) -> Result<Option<UnixMs>>;
    /// Claims whose lease ran out (their worker crashed or was killed).
    async fn expired_claims(&self, now: UnixMs, limit: i64) -> Result<Vec<Delivery>>;
    /// Records an attempt and its consequences: the delivery's new state, the
    /// destination's dead-letter streak, auto-disable and admin notifications.
    async fn finish_attempt(
        &self,
        finished: &FinishedAttempt,
        rule: &AutoDisable,
        now: UnixMs,
    ) -> Result<FinishEffects>;
    /// Several finished attempts in one transaction (one commit for many attempts).
    async fn finish_attempts(
        &self,
        batch: &[FinishedAttempt],
        rule: &AutoDisable,
        now: UnixMs,
    ) -> Result<Vec<FinishEffects>>;
    /// Gives a claim back without an attempt (e.g. its destination was disabled meanwhile).
    async fn release_claim(&self, id: DeliveryId, pause: bool, now: UnixMs) -> Result<()>;

    // Resend and cancel (docs §2.7, §2.8).
    /// Cancels waiting deliveries of the space; others are reported, not touched.
    async fn cancel_deliveries(
        &self,
        space_id: SpaceId,
        ids: &[DeliveryId],
        now: UnixMs,
    ) -> Result<Vec<(DeliveryId, BulkOutcome)>>;
    /// New deliveries of the same events to the same destinations, sent at once with a
    /// full set of attempts; originals and copies are linked.
    async fn resend_deliveries(
        &self,
        space_id: SpaceId,
        ids: &[DeliveryId],
        now: UnixMs,
    ) -> Result<Vec<(DeliveryId, BulkOutcome)>>;
    /// Resends up to `limit` failed deliveries not resent before (of one destination or the
    /// whole space), skipping those of inactive destinations.
    async fn resend_failed(
        &self,
        space_id: SpaceId,
        destination_id: Option<DestinationId>,
        limit: i64,
        now: UnixMs,
    ) -> Result<ResendFailed>;

    // Rate limits shared by every instance.
    /// Takes a slot of at most `limit` per `window_ms` for `key`, or says when one frees.
    async fn take_rate_slot(
        &self,
        key: &str,
        limit: i64,
        window_ms: i64,
        now: UnixMs,
    ) -> Result<Slot>;
    /// Takes up to `wanted` slots at once; returns how many were granted and, when fewer,
    /// the milliseconds until the next one frees.
    async fn take_rate_slots(
        &self,
        key: &str,
        wanted: i64,
        limit: i64,
        window_ms: i64,
        now: UnixMs,
    ) -> Result<(i64, i64)>;

    // Messages, incoming webhooks and bots (docs §3, §4).
    /// Stores a message and its `message.created` event with the event's fan-out, in one
    /// transaction; with `replay`, that transaction also remembers the request's
    /// `webhook-id`, and `None` (nothing written) answers one that was remembered before.
    async fn post_message(
        &self,
        message: &Message,
        event: &NewEvent,
        replay: Option<IncomingReplay<'_>>,
        now: UnixMs,
    ) -> Result<Option<Published>>;
    /// Counts an incoming webhook request: a success resets the streak; a failure grows it and,
    /// at `disable_after` in a row, disables the webhook and notifies admins.
    async fn record_incoming_result(
        &self,
        id: IncomingWebhookId,
        success: bool,
        disable_after: i64,
        now: UnixMs,
    ) -> Result<IncomingEffects>;
    /// Enables (resetting the streak) or disables an incoming webhook.
    async fn set_incoming_webhook_status(
        &self,
        space_id: SpaceId,
        id: IncomingWebhookId,
        status: IncomingWebhookStatus,
        now: UnixMs,
    ) -> Result<IncomingWebhook>;
    async fn delete_incoming_webhook(&self, space_id: SpaceId, id: IncomingWebhookId)
        -> Result<()>;
    async fn revoke_bot(&self, space_id: SpaceId, id: BotId, now: UnixMs) -> Result<()>;
    async fn get_channel_by_id(&self, id: ChannelId) -> Result<Channel>;

    // Deliveries and attempts.
    async fn get_delivery_by_id(&self, id: DeliveryId) -> Result<Delivery>;
    async fn list_deliveries(
        &self,
        filter: &DeliveryFilter,
        page: Page<DeliveryId>,
    ) -> Result<Vec<Delivery>>;
    async fn list_all_attempts(&self, delivery_id: DeliveryId) -> Result<Vec<Attempt>>;

    // Incoming webhooks and bots.
    async fn create_incoming_webhook(&self, webhook: &IncomingWebhook) -> Result<()>;
    async fn get_incoming_webhook_by_id(&self, id: IncomingWebhookId) -> Result<IncomingWebhook>;
    /// Every incoming webhook of the space, oldest first (the console).
    async fn list_all_incoming_webhooks(&self, space_id: SpaceId) -> Result<Vec<IncomingWebhook>>;
    /// A page of the space's incoming webhooks, newest first (the REST API).
    async fn list_incoming_webhooks(
        &self,
        space_id: SpaceId,
        page: Page<IncomingWebhookId>,
    ) -> Result<Vec<IncomingWebhook>>;
    async fn create_bot(&self, bot: &Bot) -> Result<()>;
    async fn find_bot_by_token_hash(&self, token_hash: &str) -> Result<Bot>;
    /// Every bot of the space (revoked ones too), oldest first (the console).
    async fn list_all_bots(&self, space_id: SpaceId) -> Result<Vec<Bot>>;
    /// A page of the space's bots, newest first (the REST API).
    async fn list_bots(&self, space_id: SpaceId, page: Page<BotId>) -> Result<Vec<Bot>>;

    // Console users.
    async fn create_user(&self, user: &User) -> Result<()>;
    async fn get_user(&self, id: UserId) -> Result<User>;
    async fn find_user_by_email(&self, email: &str) -> Result<User>;
    async fn count_users(&self) -> Result<i64>;
    async fn list_all_users(&self) -> Result<Vec<User>>;

    // Notifications for admins.
    async fn create_notification(&self, notification: &Notification) -> Result<()>;
    async fn list_notifications(
        &self,
        unread_only: bool,
        page: Page<NotificationId>,
    ) -> Result<Vec<Notification>>;
    async fn count_unread_notifications(&self) -> Result<i64>;
    async fn mark_notification_read(&self, id: NotificationId, now: UnixMs) -> Result<()>;
    /// The notifications about one space (what its API key may see): all of them, or only
    /// the unread (`Some(true)`) or the read ones (`Some(false)`).
    async fn list_space_notifications(
        &self,
        space_id: SpaceId,
        unread: Option<bool>,
        page: Page<NotificationId>,
    ) -> Result<Vec<Notification>>;
    async fn mark_space_notification_read(
        &self,
        space_id: SpaceId,
        id: NotificationId,
        now: UnixMs,
    ) -> Result<()>;

    // Console (issue 7).
    /// How many deliveries match `filter` (and are older than `before`), counting at most `cap`.
    async fn count_deliveries(
        &self,
        filter: &DeliveryFilter,
        before: Option<DeliveryId>,
        cap: i64,
    ) -> Result<i64>;
    /// Deliveries created since `since` (of one space or all), counted per `bucket_ms` of their
    /// creation time, by space, current status and last error class:
    /// `(space, bucket start, status, error class, count)`. A range scan on the time-sorted IDs.
    async fn delivery_histogram(
        &self,
        space_id: Option<SpaceId>,
        since: UnixMs,
        bucket_ms: i64,
    ) -> Result<Vec<(SpaceId, UnixMs, DeliveryStatus, Option<ErrorClass>, i64)>>;
    /// Unfinished deliveries per space: `(space, waiting, of which paused, sending)`.
    async fn delivery_backlog(&self) -> Result<Vec<(SpaceId, i64, i64, i64)>>;
    /// Destinations of every space that are inactive or dead-lettering, worst first.
    async fn failing_destinations(&self, limit: i64) -> Result<Vec<Destination>>;
    /// A destination by ID alone (the console links to destinations across spaces).
    async fn get_destination_by_id(&self, id: DestinationId) -> Result<Destination>;
    /// Failed deliveries of a destination not resent yet (what "Send again all failed" would pick).
    async fn count_failed_unresent(&self, destination_id: DestinationId) -> Result<i64>;
    /// Events recorded by [`Storage::take_rate_slot`] under `key` within the window, without taking one.
    async fn count_rate_events(&self, key: &str, window_ms: i64, now: UnixMs) -> Result<i64>;

    // Console: first run, user management, sessions per user, test events (issue 7).
    /// Creates `user` only if no user exists, in one transaction that two concurrent
    /// first-run setups cannot both pass; false when a user exists already.
    async fn create_first_user(&self, user: &User) -> Result<bool>;
    /// Disables a user (`Some(now)`) or enables one (`None`). Never disables the last
    /// active admin; disabling a disabled user changes nothing and is `Done`.
    async fn set_user_disabled(
        &self,
        id: UserId,
        disabled_at: Option<UnixMs>,
    ) -> Result<UserChange>;
    /// Deletes a user (and its session index), never the last active admin.
    async fn delete_user(&self, id: UserId) -> Result<UserChange>;
    /// Records that the console session `session_id` is signed in as `user_id` (until
    /// `expires_at`), so the user's sessions can be ended; forgets expired records.
    async fn remember_session(
        &self,
        session_id: &str,
        user_id: UserId,
        expires_at: UnixMs,
        now: UnixMs,
    ) -> Result<()>;
    async fn forget_session(&self, session_id: &str) -> Result<()>;
    /// The IDs of the console sessions signed in as `user_id`.
    async fn user_sessions(&self, user_id: UserId) -> Result<Vec<String>>;
    /// Stores `event` with one delivery, to `destination_id` only (whatever its event
    /// types), in one transaction; `Conflict` when that destination is not active in
    /// the event's space. The delivery goes out through the engine like any other.
    async fn publish_test_event(
        &self,
        event: &Event,
        destination_id: DestinationId,
        now: UnixMs,
    ) -> Result<DeliveryId>;
}

/// What became of a change to a console user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserChange {
    Done,
    NotFound,
    /// Refused: the user is the last active admin.
    LastAdmin,
}

/// Opens the database named by `url` (`sqlite://…` or `postgres://…`).
pub async fn connect(url: &str) -> anyhow::Result<std::sync::Arc<dyn Storage>> {
    use anyhow::Context as _;
    if url.starts_with("sqlite:") {
        let storage = sqlite::SqliteStorage::connect(url)
            .await
            .with_context(|| format!("opening SQLite database {url}"))?;
        Ok(std::sync::Arc::new(storage))
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        let storage = postgres::PostgresStorage::connect(url)
            .await
            .context("connecting to PostgreSQL")?;
        Ok(std::sync::Arc::new(storage))
    } else {
        anyhow::bail!("unsupported database URL {url:?}: expected sqlite://… or postgres://…")
    }
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
