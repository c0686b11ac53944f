//! Publishing: events, their fan-out to subscribed destinations, idempotency keys, channel
//! messages (with the incoming replay memory) and console test events.

use std::collections::hash_map::{Entry, HashMap};

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use super::destinations::{DestinationRow, DESTINATION};
use super::store::{
    convert_all, json, parse, Args, Conn, DbRow, Dialect, RowsAffected, Sql, SqlArg, SqlValue,
    Store,
};
use super::tenants::{ApiKeyRow, API_KEY_AS_KEY};
use super::write::{Durability, WriteTx};
use super::*;

pub(super) const EVENT: &str = "id, space_id, event_type, payload, created_at, deliver_at";

/// The INSERT of new deliveries, before their values ([`Store::push_deliveries`]).
const DELIVERY_INSERT: &str = "INSERT INTO deliveries (id, space_id, event_id, destination_id, \
    event_type, status, attempts, next_attempt_at, created_at, updated_at, deliver_at)";

/// Rows per multi-row INSERT when fanning an event out (below both backends' bind limits).
pub(super) const FAN_OUT_CHUNK: usize = 500;

/// The active and the inactive destinations subscribed to an event type.
type Subscribers = (Vec<DestinationId>, Vec<DestinationId>);

/// Publishing (the group commit, channel messages, the console's test events) and the
/// event reads of the REST API.
#[async_trait]
pub trait EventStore: Send + Sync + std::fmt::Debug {
    /// Writes each event and one delivery per active destination of its space that
    /// subscribes to its type, counting the inactive ones it skipped; with an idempotency
    /// key seen before, writes nothing for that event and returns the first answer. All
    /// in one transaction (one commit, one fsync), each event in its own savepoint, so one
    /// that fails leaves the others written; answers once it is on disk (SQLite: the WAL
    /// synced after the write gate, [`super::durable`]). The outer error is for the commit
    /// or the sync; the inner ones are per event.
    async fn publish_events(
        &self,
        batch: &[NewEvent],
        now: UnixMs,
    ) -> Result<Vec<Result<Published>>>;
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
    /// Stores `event` with one delivery, to `destination_id` only (whatever its event
    /// types), in one transaction; `Conflict` when that destination is not active in
    /// the event's space. The delivery goes out through the engine like any other.
    /// With the destination's filter's verdict in `filters`: kept out, the event is
    /// stored and counted without a delivery (`None`); failed, the delivery has failed.
    async fn publish_test_event(
        &self,
        event: &Event,
        destination_id: DestinationId,
        filters: &FilterVerdicts,
        now: UnixMs,
    ) -> Result<Option<DeliveryId>>;
    async fn get_event(&self, space_id: SpaceId, id: EventId) -> Result<Event>;
    async fn list_events(&self, space_id: SpaceId, page: Page<EventId>) -> Result<Vec<Event>>;
    /// What publishing an event of `event_type` in `space_id` checks before it writes, in
    /// one read: the version of the type's schema, if it has one
    /// (`find_event_type_schema_version`), and the space's active destinations with a
    /// filter (`list_filtered_destinations`).
    async fn publish_checks(&self, space_id: SpaceId, event_type: &str) -> Result<PublishChecks>;
    /// The API key whose hash is `key_hash` (not revoked; `NotFound` otherwise) and
    /// [`Self::publish_checks`] of `space_id`, in one read: a REST publish looks its key up
    /// with what it reads anyway, one round trip instead of two. The key may be another
    /// space's: the caller compares.
    async fn publish_checks_with_key(
        &self,
        key_hash: &str,
        space_id: SpaceId,
        event_type: &str,
    ) -> Result<(ApiKey, PublishChecks)>;
    /// [`Self::publish_checks_with_key`] as read a moment ago, kept in memory when it can be
    /// checked again by the write (no filter in the space, every subscriber active, the
    /// fan-out one INSERT), or read now. What comes from memory is marked
    /// ([`ReadSubscribers`]): its write goes through only if a read at the write would say
    /// the same, and answers [`StorageError::Stale`] otherwise (nothing written).
    async fn publish_checks_cached(
        &self,
        key_hash: &str,
        space_id: SpaceId,
        event_type: &str,
    ) -> Result<(ApiKey, PublishChecks)>;
}

/// What [`EventStore::publish_checks`] reads of `space`'s catalogue for `event_type` (SQL
/// expressions, which may name a column of the statement's first table): the schema's
/// version, and a filtering destination's columns from [`filtering_in`]'s join.
pub(super) fn checks_of_space(space: &str, event_type: &str) -> String {
    format!(
        "(SELECT updated_at FROM event_types \
           WHERE space_id = {space} AND name = {event_type} AND schema IS NOT NULL) AS schema_version, d.*"
    )
}

/// The join that gives [`checks_of_space`] its rows: one per active filtering destination
/// of `space`, or one of NULLs without any.
pub(super) fn filtering_in(space: &str) -> String {
    format!(
        "LEFT JOIN (SELECT {DESTINATION} FROM destinations \
           WHERE payload_filter IS NOT NULL AND status = 'active') AS d ON d.space_id = {space}"
    )
}

/// What [`EventStore::publish_checks`] read.
#[derive(Debug, Clone, Default)]
pub struct PublishChecks {
    pub schema_version: Option<UnixMs>,
    pub filtering: Vec<Destination>,
    /// The subscribers of the event's type, where the read took them (a REST publish):
    /// the publish writes its fan-out from them in one round trip.
    pub subscribers: Option<ReadSubscribers>,
}

/// The subscribers of an event's type as a publish read them before its write:
/// each one's ID, status, `updated_at` and types, in one JSON text ([`subscribers_json`]).
/// The publish's one string writes only if the same text, computed again in the write
/// (under SQLite's write lock; in PostgreSQL's statement, as the transaction of a publish
/// read them statement by statement), is unchanged; otherwise it writes nothing and the
/// publish reads them again in its transaction, as always
/// ([`EventStore::publish_events`]). So the fan-out is the one of the moment of the
/// write, as when the subscribers are read in the write's transaction.
///
/// The text holds more than the subscribers ([`checks_json`]): whether the publish's key
/// is still good, its type's schema version and whether the space has filters, so a
/// publish whose checks came from memory ([`EventStore::publish_checks_cached`]) is
/// written only if they all still hold, and is refused as [`StorageError::Stale`]
/// otherwise, never written the statement-by-statement way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadSubscribers {
    text: String,
    /// The publish's API key, whose state the text holds.
    key: String,
    /// From memory, not read for this publish.
    cached: bool,
}

/// SQL: the text of [`ReadSubscribers`] — `[key, schema, filters]` then
/// [`subscribers_json`], one after the other: the state of the API key `key` (0 while it
/// is not revoked, its revocation time once it is, NULL once deleted), the version of the
/// schema of `event_type` in `space`, how many of the space's active destinations have a
/// filter, then the subscribers. The same text on both sides of a publish whose checks
/// came from memory: its checks' read and its guarded write ([`guard_sql`]).
fn checks_json(backend: Backend, space: &str, keys: &str, event_type: &str, key: &str) -> String {
    let key_state = format!("(SELECT COALESCE(revoked_at, 0) FROM api_keys WHERE id = {key})");
    let schema = format!(
        "(SELECT updated_at FROM event_types \
          WHERE space_id = {space} AND name = {event_type} AND schema IS NOT NULL)"
    );
    let filters = format!(
        "(SELECT COUNT(*) FROM destinations \
          WHERE space_id = {space} AND payload_filter IS NOT NULL AND status = 'active')"
    );
    let subscribers = subscribers_json(backend, space, keys);
    match backend {
        Backend::Sqlite => format!("json_array({key_state}, {schema}, {filters}) || {subscribers}"),
        Backend::Postgres => {
            format!("json_build_array({key_state}, {schema}, {filters})::text || {subscribers}")
        }
    }
}

/// SQL: a publish's write goes on only if this is true — the whole [`checks_json`] again
/// for checks from memory (`key` is then a parameter), only the subscribers' part
/// ([`subscribers_json`]) for checks read for this publish, which were read a moment ago
/// and whose fan-out is all the write needs to be sure of. `from_memory`: the event type
/// and the key's parameters; `read`: the one holding what [`ReadSubscribers::guarded`]
/// gives.
fn guard_sql(
    backend: Backend,
    (space, keys): (&str, &str),
    from_memory: Option<(&str, &str)>,
    read: &str,
) -> String {
    match from_memory {
        Some((event_type, key)) => format!(
            "{} = {read}",
            checks_json(backend, space, keys, event_type, key)
        ),
        None => format!("{} = {read}", subscribers_json(backend, space, keys)),
    }
}

/// SQL: the JSON text of the subscribers of `space` whose
/// subscription entries are among `keys` (a JSON array: [`subscription_keys`]), by ID;
/// `[]` when there are none. The same text on both backends' side of a publish: its
/// checks' read and its guarded write ([`Store::publish_as_read`]).
fn subscribers_json(backend: Backend, space: &str, keys: &str) -> String {
    match backend {
        Backend::Sqlite => format!(
            "(SELECT json_group_array(json_array(f.id, f.status, f.updated_at, f.event_types) ORDER BY f.id) \
             FROM destinations AS f WHERE f.id IN (SELECT destination_id FROM subscriptions \
               WHERE space_id = {space} AND event_type IN (SELECT value FROM json_each({keys}))))"
        ),
        // The keys as an array (`= ANY`), not a set (`IN (SELECT …)`): the planner takes a
        // set of unknown size for a hundred rows and scans every subscription of the space
        // (10,000 destinations: 1 ms a read, twice a publish); an array goes by the index.
        Backend::Postgres => format!(
            "(SELECT COALESCE(json_agg(json_build_array(f.id, f.status, f.updated_at, f.event_types) \
               ORDER BY f.id), '[]')::text \
             FROM destinations AS f WHERE f.id IN (SELECT destination_id FROM subscriptions \
               WHERE space_id = {space} \
                 AND event_type = ANY (ARRAY(SELECT json_array_elements_text({keys}::json)))))"
        ),
    }
}

/// [`subscription_keys`] of `event_type` as a JSON array, for [`subscribers_json`].
fn keys_json(event_type: &str) -> Result<String> {
    serde_json::to_string(&subscription_keys(event_type))
        .map_err(|e| StorageError::Internal(e.to_string()))
}

/// REST publishes' checks kept in memory ([`EventStore::publish_checks_cached`]) by key
/// hash, space and event type: only those a write can check again in full (the key not
/// revoked, no filter in the space, every subscriber active, the fan-out one INSERT), so
/// every publish that uses them is as exact as one that read them. A read refreshes or
/// drops its entry; at [`ChecksCache::MOST`] entries it starts over.
#[derive(Debug, Default)]
pub struct ChecksCache(std::sync::Mutex<HashMap<ChecksOf, (ApiKey, PublishChecks)>>);

/// What [`ChecksCache`] keeps checks by: the key's hash, the space, the event type.
type ChecksOf = (String, SpaceId, String);

impl ChecksCache {
    const MOST: usize = 10_000;

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ChecksOf, (ApiKey, PublishChecks)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The checks kept for this publish, marked as from memory.
    fn get(
        &self,
        key_hash: &str,
        space: SpaceId,
        event_type: &str,
    ) -> Option<(ApiKey, PublishChecks)> {
        let (key, mut checks) = self
            .lock()
            .get(&(key_hash.to_owned(), space, event_type.to_owned()))?
            .clone();
        checks.subscribers.as_mut()?.cached = true;
        Some((key, checks))
    }

    /// Keeps what a read `found` for this publish if a write can check it again in full;
    /// forgets the entry otherwise.
    fn keep(
        &self,
        key_hash: &str,
        space: SpaceId,
        event_type: &str,
        found: Option<&(ApiKey, PublishChecks)>,
    ) {
        let entry = (key_hash.to_owned(), space, event_type.to_owned());
        let kept = found.filter(|(_, checks)| cacheable(checks, event_type));
        let mut cache = self.lock();
        match kept {
            Some(found) => {
                if cache.len() >= Self::MOST && !cache.contains_key(&entry) {
                    cache.clear();
                }
                cache.insert(entry, found.clone());
            }
            None => {
                cache.remove(&entry);
            }
        }
    }
}

/// Whether a write can check `checks` again in full ([`ChecksCache`]): the key not revoked,
/// no filter in the space, every subscriber of `event_type` active, and few enough of them
/// for one INSERT (the publishes written in one round trip, [`Store::publish_as_read`]).
fn cacheable(checks: &PublishChecks, event_type: &str) -> bool {
    let Some(read) = &checks.subscribers else {
        return false;
    };
    let Ok((Some(0), _, 0, rows)) = read.parsed() else {
        return false;
    };
    let Ok((active, inactive)) = split_rows(rows, event_type) else {
        return false;
    };
    checks.filtering.is_empty() && inactive.is_empty() && active.len() <= FAN_OUT_CHUNK
}

/// Whether `new`'s checks came from memory ([`ReadSubscribers::cached`]).
fn checked_from_memory(new: &NewEvent) -> bool {
    new.subscribers.as_ref().is_some_and(|read| read.cached)
}

/// What [`checks_json`] holds.
type CheckedText = (
    Option<i64>,
    Option<i64>,
    i64,
    Vec<(String, String, i64, Option<String>)>,
);

impl ReadSubscribers {
    /// Whether these checks came from memory ([`EventStore::publish_checks_cached`]).
    pub fn cached(&self) -> bool {
        self.cached
    }

    /// The text's two parts: `[key, schema, filters]` and the subscribers.
    fn parts(&self) -> Result<(&str, &str)> {
        // The first part is an array of numbers and NULLs: it ends at its first `]`.
        let end = self.text.find(']').map_or(0, |i| i + 1);
        match self.text.split_at(end) {
            ("", _) => Err(StorageError::Corrupt(
                "the checks read: no first part".into(),
            )),
            parts => Ok(parts),
        }
    }

    /// What the write compares ([`guard_sql`]): the whole text for checks from memory, the
    /// subscribers' part for checks read for this publish.
    fn guarded(&self) -> Result<&str> {
        match self.cached {
            true => Ok(&self.text),
            false => Ok(self.parts()?.1),
        }
    }

    fn parsed(&self) -> Result<CheckedText> {
        let corrupt = |e: serde_json::Error| StorageError::Corrupt(format!("the checks read: {e}"));
        let (first, subscribers) = self.parts()?;
        let (key, schema, filters) = serde_json::from_str(first).map_err(corrupt)?;
        Ok((
            key,
            schema,
            filters,
            serde_json::from_str(subscribers).map_err(corrupt)?,
        ))
    }

    /// The active and the inactive subscribers of `event_type` among them, as
    /// `Store::subscribers_of` splits the rows read under the lock.
    fn split(&self, event_type: &str) -> Result<Subscribers> {
        let (_, _, _, rows) = self.parsed()?;
        split_rows(rows, event_type)
    }
}

/// The active and the inactive subscribers of `event_type` among the `rows` of
/// [`subscribers_json`].
fn split_rows(
    rows: Vec<(String, String, i64, Option<String>)>,
    event_type: &str,
) -> Result<Subscribers> {
    let (mut active, mut inactive) = (Vec::new(), Vec::new());
    for (id, status, _, types) in rows {
        let types: Option<Vec<String>> = types
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| StorageError::Corrupt(format!("destinations.event_types: {e}")))?;
        if !subscribes(types.as_deref(), event_type) {
            continue;
        }
        let id: DestinationId = parse("destinations.id", &id)?;
        match parse::<DestinationStatus>("destinations.status", &status)? {
            DestinationStatus::Active => active.push(id),
            _ => inactive.push(id),
        }
    }
    Ok((active, inactive))
}

#[async_trait]
impl<D: Dialect> EventStore for Store<D>
where
    for<'c> &'c mut Conn<D>: Executor<'c, Database = D::DB>,
    for<'q> Args<'q, D>: IntoArguments<'q, D::DB>,
    for<'q> &'q str: SqlArg<'q, D::DB> + ColumnIndex<DbRow<D>>,
    for<'q> Option<&'q str>: SqlArg<'q, D::DB>,
    usize: ColumnIndex<DbRow<D>>,
    i64: SqlValue<D::DB>,
    Option<i64>: SqlValue<D::DB>,
    bool: SqlValue<D::DB>,
    String: SqlValue<D::DB>,
    Option<String>: SqlValue<D::DB>,
{
    async fn publish_events(
        &self,
        batch: &[NewEvent],
        now: UnixMs,
    ) -> Result<Vec<Result<Published>>> {
        let published = self.publish_events_unsynced(batch, now).await;
        // On disk before anything is answered, failures too: a write that failed midway
        // may have committed, and a retry would answer it as a replay.
        self.writes
            .sync()
            .await
            .map_err(|e| StorageError::Other(e.into()))?;
        published
    }

    async fn post_message(
        &self,
        m: &Message,
        event: &NewEvent,
        replay: Option<IncomingReplay<'_>>,
        now: UnixMs,
    ) -> Result<Option<Published>> {
        let mut writer = self.writes.writer(Durability::Full).await?;
        if D::BACKEND == Backend::Sqlite {
            // Two round trips to the connection's thread, as an event published alone.
            return Self::publish_alone(&mut writer, event, now, Some((m, replay))).await;
        }
        let mut tx = writer.begin().await?;
        if let Some(r) = replay {
            // Remembered only if this transaction commits: a failure below forgets it.
            // On PostgreSQL a concurrent request with the same ID waits here for
            // this one's outcome.
            let webhook = r.webhook_id.to_string();
            let mut remember = Sql::<D>::new("");
            Self::push_remember(&mut remember, &webhook, r.message_id, now);
            let (sql, args) = remember.into_parts()?;
            let fresh = sqlx::query_with(&sql, args)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                == 1;
            if !fresh {
                tx.rollback().await?;
                return Ok(None);
            }
            let mut forget = Sql::<D>::new("");
            Self::push_forget_old(&mut forget, &webhook, now);
            let (sql, args) = forget.into_parts()?;
            sqlx::query_with(&sql, args).execute(&mut *tx).await?;
        }
        let mut insert = Sql::<D>::new("");
        Self::push_message(&mut insert, m);
        let (sql, args) = insert.into_parts()?;
        sqlx::query_with(&sql, args).execute(&mut *tx).await?;
        let published = Self::publish_in(&mut tx, event, now)
            .await?
            .ok_or_else(|| {
                StorageError::Conflict("message events carry no idempotency key".into())
            })?;
        tx.commit().await?;
        Ok(Some(published))
    }

    async fn publish_test_event(
        &self,
        event: &Event,
        destination_id: DestinationId,
        filters: &FilterVerdicts,
        now: UnixMs,
    ) -> Result<Option<DeliveryId>> {
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        sqlx::query(
            "INSERT INTO events (id, space_id, event_type, payload, created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(event.id.to_string())
        .bind(event.space_id.to_string())
        .bind(&event.event_type)
        .bind(event.payload.to_string())
        .bind(event.created_at)
        .execute(&mut *tx)
        .await?;
        // Whatever the verdict, only for an active destination of the event's space.
        let active: Option<(String,)> = sqlx::query_as(
            "SELECT id FROM destinations WHERE id = $1 AND space_id = $2 AND status = 'active'",
        )
        .bind(destination_id.to_string())
        .bind(event.space_id.to_string())
        .fetch_optional(&mut *tx)
        .await?;
        if active.is_none() {
            // Rolled back on drop: no event without its delivery.
            return Err(StorageError::Conflict(
                "the destination is not active".into(),
            ));
        }
        let fan = FanOut::of(vec![destination_id], filters);
        let delivery = if fan.send.is_empty() {
            Self::count_filtered(&mut tx, fan.filtered.iter().map(|d| (*d, 1))).await?;
            Self::insert_failed(&mut tx, event, &fan.failed, now)
                .await?
                .pop()
        } else {
            let delivery = DeliveryId::new();
            sqlx::query(
                "INSERT INTO deliveries (id, space_id, event_id, destination_id, event_type, status, \
                 attempts, next_attempt_at, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, 'pending', 0, $6, $6, $6)",
            )
            .bind(delivery.to_string())
            .bind(event.space_id.to_string())
            .bind(event.id.to_string())
            .bind(destination_id.to_string())
            .bind(&event.event_type)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            Some(delivery)
        };
        tx.commit().await?;
        Ok(delivery)
    }

    async fn publish_checks(&self, space_id: SpaceId, event_type: &str) -> Result<PublishChecks> {
        let sql = format!(
            "SELECT {} FROM (SELECT 1 AS one) AS o {}",
            checks_of_space("$1", "$2"),
            filtering_in("$1")
        );
        let rows = sqlx::query(&sql)
            .bind(space_id.to_string())
            .bind(event_type)
            .fetch_all(&self.read)
            .await?;
        Self::checks_of(&rows)
    }

    async fn publish_checks_with_key(
        &self,
        key_hash: &str,
        space_id: SpaceId,
        event_type: &str,
    ) -> Result<(ApiKey, PublishChecks)> {
        // The checks' rows, each with the key's columns; none without the key. With the
        // subscribers of the type, for the publish's one round trip.
        let subscribers = checks_json(D::BACKEND, "$1", "$4", "$2", "k.id");
        let sql = format!(
            "SELECT {API_KEY_AS_KEY}, {}, {subscribers} AS subscribers FROM api_keys AS k {} \
             WHERE k.key_hash = $3 AND k.revoked_at IS NULL",
            checks_of_space("$1", "$2"),
            filtering_in("$1")
        );
        let rows = sqlx::query(&sql)
            .bind(space_id.to_string())
            .bind(event_type)
            .bind(key_hash)
            .bind(keys_json(event_type)?)
            .fetch_all(&self.read)
            .await?;
        let Some(first) = rows.first() else {
            self.checks.keep(key_hash, space_id, event_type, None);
            return Err(StorageError::NotFound);
        };
        let text = |column: &str| sqlx::Row::try_get::<String, _>(first, column);
        let key = ApiKeyRow {
            id: text("key_id")?,
            space_id: text("key_space_id")?,
            name: text("key_name")?,
            prefix: text("key_prefix")?,
            created_at: sqlx::Row::try_get(first, "key_created_at")?,
            last_used_at: sqlx::Row::try_get(first, "key_last_used_at")?,
            revoked_at: sqlx::Row::try_get(first, "key_revoked_at")?,
        };
        let mut checks = Self::checks_of(&rows)?;
        checks.subscribers =
            sqlx::Row::try_get::<Option<String>, _>(first, "subscribers")?.map(|text| {
                ReadSubscribers {
                    text,
                    key: key.id.clone(),
                    cached: false,
                }
            });
        let found = (key.try_into()?, checks);
        self.checks
            .keep(key_hash, space_id, event_type, Some(&found));
        Ok(found)
    }

    async fn publish_checks_cached(
        &self,
        key_hash: &str,
        space_id: SpaceId,
        event_type: &str,
    ) -> Result<(ApiKey, PublishChecks)> {
        match self.checks.get(key_hash, space_id, event_type) {
            Some(kept) => Ok(kept),
            None => {
                self.publish_checks_with_key(key_hash, space_id, event_type)
                    .await
            }
        }
    }

    async fn get_event(&self, space_id: SpaceId, id: EventId) -> Result<Event> {
        let sql = format!(
            "SELECT {} FROM events WHERE id = $1 AND space_id = $2",
            EVENT
        );
        sqlx::query_as::<_, EventRow>(&sql)
            .bind(id.to_string())
            .bind(space_id.to_string())
            .fetch_one(&self.read)
            .await?
            .try_into()
    }

    async fn list_events(&self, space_id: SpaceId, page: Page<EventId>) -> Result<Vec<Event>> {
        let rows: Vec<EventRow> = self
            .keyset_page(
                (EVENT, "events"),
                ("space_id", space_id.to_string()),
                "",
                page,
            )
            .await?;
        convert_all(rows)
    }
}

impl<D: Dialect> Store<D>
where
    for<'c> &'c mut Conn<D>: Executor<'c, Database = D::DB>,
    for<'q> Args<'q, D>: IntoArguments<'q, D::DB>,
    for<'q> &'q str: SqlArg<'q, D::DB> + ColumnIndex<DbRow<D>>,
    for<'q> Option<&'q str>: SqlArg<'q, D::DB>,
    usize: ColumnIndex<DbRow<D>>,
    i64: SqlValue<D::DB>,
    Option<i64>: SqlValue<D::DB>,
    bool: SqlValue<D::DB>,
    String: SqlValue<D::DB>,
    Option<String>: SqlValue<D::DB>,
{
    /// [`EventStore::publish_events`] committed with [`Durability::Deferred`]: not yet
    /// on disk until [`Writes::sync`](super::write::Writes::sync) returns.
    async fn publish_events_unsynced(
        &self,
        batch: &[NewEvent],
        now: UnixMs,
    ) -> Result<Vec<Result<Published>>> {
        // The one-round-trip write its checks' read allows, if any: alone (a group of one
        // without a key) or as a group (none with a key).
        let alone = match batch {
            [new] if new.idempotency_key.is_none() => Self::fan_out_as_read(new)?,
            _ => None,
        };
        let group = match batch.len() > 1 {
            true => Self::group_as_read(batch)?,
            false => None,
        };
        // Checks from memory go only that way, which checks them again in the write.
        if alone.is_none() && group.is_none() && batch.iter().any(checked_from_memory) {
            return self.refusing_stale(batch, now).await;
        }
        let mut writer = self.writes.writer(Durability::Deferred).await?;
        if let [new] = batch {
            // A group of one without a key (every publish at low load): one round trip
            // when its subscribers were read with its checks and have not changed since
            // ([`Self::publish_as_read`]), the WAL synced in its commit when no other
            // writer waits; else, on SQLite, two ([`Self::publish_alone`]).
            if let Some((read, fan)) = alone {
                writer.sync_in_commit();
                if let Some(published) = Self::publish_as_read(writer, new, now, read, fan).await? {
                    return Ok(vec![Ok(published)]);
                }
                if read.cached {
                    return Ok(vec![Err(StorageError::Stale)]);
                }
                writer = self.writes.writer(Durability::Deferred).await?;
            }
            if new.idempotency_key.is_none() && D::BACKEND == Backend::Sqlite {
                let published = Self::publish_alone(&mut writer, new, now, None).await?;
                return Ok(vec![published.ok_or_else(|| {
                    StorageError::Internal("a publish without a replay guard was a replay".into())
                })]);
            }
        }
        // A group of events without keys whose subscribers were read with their checks (a
        // flood of REST publishes): one round trip if none changed since (SQLite: a string
        // of statements; PostgreSQL: one statement).
        if let Some(fans) = group {
            if let Some(published) = Self::publish_group_as_read(writer, batch, fans, now).await? {
                return Ok(published.into_iter().map(Ok).collect());
            }
            if batch.iter().any(checked_from_memory) {
                return self.refusing_stale(batch, now).await;
            }
            writer = self.writes.writer(Durability::Deferred).await?;
        }
        let mut tx = writer.begin().await?;
        if let [new] = batch {
            // A group of one (every publish at low load) needs no savepoint: the
            // transaction is the event's own, rolled back when it is refused. Two
            // statements fewer, each a round trip to the connection's thread on SQLite.
            let result = Self::publish_in(&mut tx, new, now).await;
            if matches!(result, Ok(Some(_))) {
                tx.commit().await?;
            } else {
                tx.rollback().await?;
            }
            drop(writer);
            return Ok(vec![self.answer_of(new, result).await]);
        }
        // `None`: the idempotency key was taken (read the first answer after the commit).
        let mut outcomes: Vec<Option<Result<Option<Published>>>> =
            (0..batch.len()).map(|_| None).collect();
        // Events without a key all together; if that fails, one by one below, so only
        // the event at fault fails.
        let plain: Vec<usize> = (0..batch.len())
            .filter(|&i| batch[i].idempotency_key.is_none())
            .collect();
        if plain.len() > 1 {
            sqlx::query("SAVEPOINT publish_all")
                .execute(&mut *tx)
                .await?;
            let events: Vec<&NewEvent> = plain.iter().map(|&i| &batch[i]).collect();
            match Self::publish_plain_in(&mut tx, &events, now).await {
                Ok(answers) => {
                    sqlx::query("RELEASE SAVEPOINT publish_all")
                        .execute(&mut *tx)
                        .await?;
                    for (&i, answer) in plain.iter().zip(answers) {
                        outcomes[i] = Some(Ok(Some(answer)));
                    }
                }
                Err(_) => {
                    sqlx::query("ROLLBACK TO SAVEPOINT publish_all")
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query("RELEASE SAVEPOINT publish_all")
                        .execute(&mut *tx)
                        .await?;
                }
            }
        }
        for (new, outcome) in batch.iter().zip(outcomes.iter_mut()) {
            if outcome.is_some() {
                continue;
            }
            sqlx::query("SAVEPOINT publish").execute(&mut *tx).await?;
            let result = Self::publish_in(&mut tx, new, now).await;
            if matches!(result, Ok(Some(_))) {
                sqlx::query("RELEASE SAVEPOINT publish")
                    .execute(&mut *tx)
                    .await?;
            } else {
                sqlx::query("ROLLBACK TO SAVEPOINT publish")
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("RELEASE SAVEPOINT publish")
                    .execute(&mut *tx)
                    .await?;
            }
            *outcome = Some(result);
        }
        tx.commit().await?;
        drop(writer);
        let mut answers = Vec::with_capacity(batch.len());
        for (new, outcome) in batch.iter().zip(outcomes) {
            let outcome = outcome.expect("every event was written or refused");
            answers.push(self.answer_of(new, outcome).await);
        }
        Ok(answers)
    }

    /// Refuses each event of `batch` whose checks came from memory as
    /// [`StorageError::Stale`] (nothing of it written: it is read afresh and published
    /// again), and publishes the others the usual way.
    async fn refusing_stale(
        &self,
        batch: &[NewEvent],
        now: UnixMs,
    ) -> Result<Vec<Result<Published>>> {
        let rest: Vec<NewEvent> = batch
            .iter()
            .filter(|new| !checked_from_memory(new))
            .cloned()
            .collect();
        let mut written = match rest.is_empty() {
            true => Vec::new(),
            false => Box::pin(self.publish_events_unsynced(&rest, now)).await?,
        }
        .into_iter();
        Ok(batch
            .iter()
            .map(|new| match checked_from_memory(new) {
                true => Err(StorageError::Stale),
                false => written.next().unwrap_or_else(|| {
                    Err(StorageError::Internal(
                        "a publish of the group was not answered".into(),
                    ))
                }),
            })
            .collect())
    }

    /// [`PublishChecks`] from the rows of [`checks_of_space`] and [`filtering_in`].
    pub(super) fn checks_of(rows: &[DbRow<D>]) -> Result<PublishChecks> {
        let mut checks = PublishChecks::default();
        for row in rows {
            checks.schema_version = sqlx::Row::try_get::<Option<i64>, _>(row, "schema_version")?;
            if sqlx::Row::try_get::<Option<String>, _>(row, "id")?.is_some() {
                let d = <DestinationRow as sqlx::FromRow<_>>::from_row(row)?;
                checks.filtering.push(d.try_into()?);
            }
        }
        Ok(checks)
    }

    /// The event, its idempotency key and its fan-out, inside `tx`. `None` when the
    /// idempotency key was taken: the caller rolls back and reads the first answer.
    pub(super) async fn publish_in(
        tx: &mut WriteTx<'_, D::DB>,
        new: &NewEvent,
        now: UnixMs,
    ) -> Result<Option<Published>> {
        let e = &new.event;
        let space = e.space_id.to_string();
        sqlx::query(
            "INSERT INTO events (id, space_id, event_type, payload, created_at, deliver_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(e.id.to_string())
        .bind(&space)
        .bind(&e.event_type)
        .bind(e.payload.to_string())
        .bind(e.created_at)
        .bind(e.deliver_at)
        .execute(&mut **tx)
        .await?;

        if let Some(key) = &new.idempotency_key {
            let claimed = sqlx::query(
                "INSERT INTO idempotency_keys (space_id, key, request_hash, event_id, deliveries, created_at) \
                 VALUES ($1, $2, $3, $4, 0, $5) ON CONFLICT (space_id, key) DO NOTHING",
            )
            .bind(&space)
            .bind(key)
            .bind(&new.request_hash)
            .bind(e.id.to_string())
            .bind(now)
            .execute(&mut **tx)
            .await?;
            if claimed.rows_affected() == 0 {
                return Ok(None);
            }
        }

        let (active, inactive) = Self::subscribers(tx, &space, &e.event_type).await?;
        let fan = FanOut::of(active, &new.filters);
        let targets: Vec<(&Event, DestinationId)> = fan.send.iter().map(|d| (e, *d)).collect();
        Self::insert_deliveries(tx, &targets, now).await?;
        Self::insert_failed(tx, e, &fan.failed, now).await?;
        Self::count_skipped(tx, inactive.iter().map(|d| (*d, 1))).await?;
        Self::count_filtered(tx, fan.filtered.iter().map(|d| (*d, 1))).await?;
        let deliveries = fan.deliveries();
        if let Some(key) = &new.idempotency_key {
            sqlx::query(
                "UPDATE idempotency_keys SET deliveries = $1 WHERE space_id = $2 AND key = $3",
            )
            .bind(deliveries)
            .bind(&space)
            .bind(key)
            .execute(&mut **tx)
            .await?;
        }
        Ok(Some(Published::Created {
            event_id: e.id,
            deliveries,
            skipped: inactive.len() as i64,
            destinations: fan.send,
            claimed: None,
        }))
    }

    /// The active and the inactive destinations of `space` subscribed to `event_type`.
    async fn subscribers(
        tx: &mut WriteTx<'_, D::DB>,
        space: &str,
        event_type: &str,
    ) -> Result<Subscribers> {
        let mut select = Sql::<D>::new("");
        Self::push_subscribers(&mut select, space, event_type);
        let (sql, args) = select.into_parts()?;
        let destinations = sqlx::query_as_with::<_, DestinationRow, _>(&sql, args)
            .fetch_all(&mut **tx)
            .await?;
        Self::subscribers_of(destinations, event_type)
    }

    /// The statement of [`Self::subscribers`], after `before`.
    fn push_subscribers<'a>(sql: &mut Sql<'a, D>, space: &'a str, event_type: &str) {
        // The type, `*` and its wildcards (`order.*`, …): an IN list on the primary key.
        sql.push(format!(
            "SELECT {DESTINATION} FROM destinations WHERE id IN ( \
               SELECT destination_id FROM subscriptions WHERE space_id = "
        ))
        .push_bind(space)
        .push(" AND event_type IN (")
        .push_list(subscription_keys(event_type))
        .push("))");
    }

    /// [`Self::subscribers`]' rows, split into the active and the inactive subscribers.
    fn subscribers_of(rows: Vec<DestinationRow>, event_type: &str) -> Result<Subscribers> {
        let destinations: Vec<Destination> = convert_all(rows)?;
        let (active, inactive): (Vec<_>, Vec<_>) = destinations
            .iter()
            .filter(|d| d.subscribes_to(event_type))
            .partition(|d| d.status == DestinationStatus::Active);
        Ok((
            active.iter().map(|d| d.id).collect(),
            inactive.iter().map(|d| d.id).collect(),
        ))
    }

    /// One event without an idempotency key, published alone on SQLite, in two round trips
    /// to the connection's thread: `BEGIN IMMEDIATE` with the subscribers' read, then the
    /// event, its deliveries and `COMMIT` (the rare rest — a filter that failed, a
    /// destination inactive or filtering, a fan-out wider than one INSERT — statement by
    /// statement, as [`Self::publish_in`] writes it). A channel message's event comes with
    /// its `message`, written before it, and the replay guard of its request (remembered
    /// in the first round trip; `None`, nothing written, when it was remembered before).
    async fn publish_alone(
        writer: &mut super::write::Writer<'_, D::DB>,
        new: &NewEvent,
        now: UnixMs,
        message: Option<(&Message, Option<IncomingReplay<'_>>)>,
    ) -> Result<Option<Published>> {
        let e = &new.event;
        let space = e.space_id.to_string();
        let replay = message.and_then(|(_, replay)| replay);
        let webhook = replay.map(|r| r.webhook_id.to_string());
        let opening = writer.opening();
        let mut first = Sql::<D>::new(&opening);
        if let (Some(r), Some(webhook)) = (replay, &webhook) {
            Self::push_remember(&mut first, webhook, r.message_id, now);
            first.push("; ");
            Self::push_forget_old(&mut first, webhook, now);
            first.push("; ");
        }
        Self::push_subscribers(&mut first, &space, &e.event_type);
        let (sql, args) = first.into_parts()?;
        let (mut tx, results) = writer.begin_with(sqlx::query_with(&sql, args)).await?;
        if replay.is_some() {
            // The replay's INSERT is the statement after the `BEGIN`, if that is in the string.
            let fresh = results
                .iter()
                .filter_map(|step| step.as_ref().left())
                .nth(usize::from(!opening.is_empty()))
                .is_some_and(|inserted| inserted.rows_affected() == 1);
            if !fresh {
                tx.rollback().await?;
                return Ok(None);
            }
        }
        let rows = results
            .iter()
            .filter_map(|step| match step {
                sqlx::Either::Right(row) => {
                    Some(<DestinationRow as sqlx::FromRow<_>>::from_row(row))
                }
                sqlx::Either::Left(_) => None,
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let (active, inactive) = Self::subscribers_of(rows, &e.event_type)?;
        let fan = FanOut::of(active, &new.filters);
        let targets: Vec<(&Event, DestinationId)> = fan.send.iter().map(|d| (e, *d)).collect();
        Self::count_skipped(&mut tx, inactive.iter().map(|d| (*d, 1))).await?;
        Self::count_filtered(&mut tx, fan.filtered.iter().map(|d| (*d, 1))).await?;
        let payload = e.payload.to_string();
        let mut event = Sql::<D>::new("");
        if let Some((m, _)) = message {
            Self::push_message(&mut event, m);
            event.push("; ");
        }
        event.push(
            "INSERT INTO events (id, space_id, event_type, payload, created_at, deliver_at) ",
        );
        event.push_values([e], |mut row, e| {
            row.push_bind(e.id.to_string())
                .push_bind(&space)
                .push_bind(&e.event_type)
                .push_bind(&payload)
                .push_bind(e.created_at)
                .push_bind(e.deliver_at);
        });
        let mut claimed = None;
        if fan.failed.is_empty() && targets.len() <= FAN_OUT_CHUNK {
            // Due now, with a claim asked for: the claim of its destinations goes in the
            // same string, after its deliveries, and ends with the `COMMIT`.
            let claim = new
                .claim
                .as_ref()
                .filter(|_| e.deliver_at.is_none() && !targets.is_empty());
            if !targets.is_empty() {
                event.push("; ");
                Self::push_deliveries(&mut event, &targets, now);
            }
            // Declared before the arguments, which the query ties to its string's borrow.
            #[allow(clippy::needless_late_init)]
            let whole: String;
            let (sql, args) = event.into_parts()?;
            let after =
                claim.and_then(|_| D::claim_for_after(sqlx::Arguments::len(&args), fan.send.len()));
            whole = match &after {
                // The claim's statements end with the `COMMIT`.
                Some(after) => format!("{sql}; {after}"),
                None => format!("{sql}{}", tx.closing()),
            };
            match claim.filter(|_| after.is_some()) {
                Some(claim) => {
                    let next = ClaimNext {
                        destinations: fan.send.clone(),
                        ..claim.clone()
                    };
                    // The slots are dated when the write lock is held.
                    let now = now.max(crate::clock::now_ms());
                    let query = D::bind_claim_for(sqlx::query_with(&whole, args), &next, now)?;
                    let results = tx.commit_with(query).await?;
                    // After the message's INSERT (if any), the event's and the deliveries'.
                    let statements = 2 + usize::from(message.is_some());
                    claimed = Some(D::claimed_after(&results, statements)?);
                }
                None => {
                    tx.commit_with(sqlx::query_with(&whole, args)).await?;
                }
            }
        } else {
            // A failed filter's delivery (it needs the event first), or wider than one
            // INSERT: statement by statement.
            let (sql, args) = event.into_parts()?;
            sqlx::query_with(&sql, args).execute(&mut *tx).await?;
            Self::insert_failed(&mut tx, e, &fan.failed, now).await?;
            Self::insert_deliveries(&mut tx, &targets, now).await?;
            tx.commit().await?;
        }
        Ok(Some(Published::Created {
            event_id: e.id,
            deliveries: fan.deliveries(),
            skipped: inactive.len() as i64,
            destinations: fan.send,
            claimed,
        }))
    }

    /// The fan-out of `new` from the subscribers its checks read, when one string can
    /// write it: every subscriber active, none filtered out or failed, one INSERT.
    fn fan_out_as_read(new: &NewEvent) -> Result<Option<(&ReadSubscribers, FanOut<'_>)>> {
        let Some(read) = &new.subscribers else {
            return Ok(None);
        };
        let (active, inactive) = read.split(&new.event.event_type)?;
        let fan = FanOut::of(active, &new.filters);
        let plain = inactive.is_empty()
            && fan.filtered.is_empty()
            && fan.failed.is_empty()
            && fan.send.len() <= FAN_OUT_CHUNK;
        Ok(plain.then_some((read, fan)))
    }

    /// An event published alone whose subscribers its checks `read`, written in one
    /// round trip: the event, only if [`subscribers_json`] is still the text read; its
    /// deliveries, only if the event was written. On SQLite a string of statements:
    /// `BEGIN`, those two, the claim of the deliveries (none without the event: the
    /// permits reserved are for its own), `COMMIT`. On PostgreSQL one statement, its own
    /// transaction (the event's INSERT a `WITH` of the deliveries'), in place of five
    /// round trips (`BEGIN`, the event, the subscribers, the deliveries, `COMMIT`).
    /// `None` when the subscribers changed: nothing was written.
    async fn publish_as_read(
        writer: super::write::Writer<'_, D::DB>,
        new: &NewEvent,
        now: UnixMs,
        read: &ReadSubscribers,
        fan: FanOut<'_>,
    ) -> Result<Option<Published>> {
        // Declared before the arguments, which the query ties to its string's borrow.
        #[allow(clippy::needless_late_init)]
        let sql: String;
        let e = &new.event;
        let targets: Vec<(&Event, DestinationId)> = fan.send.iter().map(|d| (e, *d)).collect();
        // The deliveries' values first: their bare `?`s are the first parameters; the
        // statements' own follow, numbered (`$n` binds absolutely).
        let mut values = Sql::<D>::new("");
        if !targets.is_empty() {
            Self::push_delivery_values(&mut values, &targets, now);
        }
        let (values, args) = values.into_parts()?;
        let k = sqlx::Arguments::len(&args);
        let n = |i: usize| format!("${}", k + i);
        let claim = new
            .claim
            .as_ref()
            .filter(|_| e.deliver_at.is_none() && !targets.is_empty())
            .and_then(|claim| {
                let guard = 8 + usize::from(read.cached);
                Some((claim, D::claim_for_event_after(k + guard, fan.send.len())?))
            });
        let (event_type, key) = (n(3), n(9));
        let from_memory = read.cached.then_some((event_type.as_str(), key.as_str()));
        let event = format!(
            "INSERT INTO events (id, space_id, event_type, payload, created_at, deliver_at) \
             SELECT {}, {}, {}, {}, {}, {} WHERE {}",
            n(1),
            n(2),
            n(3),
            n(4),
            n(5),
            n(6),
            guard_sql(D::BACKEND, (&n(2), &n(7)), from_memory, &n(8)),
        );
        let one_statement = D::BACKEND == Backend::Postgres;
        sql = if one_statement {
            match targets.is_empty() {
                true => event,
                false => format!(
                    "WITH written AS ({event} RETURNING id) \
                     {DELIVERY_INSERT} SELECT * FROM ({values}) AS v \
                     WHERE EXISTS (SELECT 1 FROM written)"
                ),
            }
        } else {
            let mut text = format!("{}{event}", writer.opening());
            if !targets.is_empty() {
                text.push_str(&format!(
                    "; {DELIVERY_INSERT} SELECT * FROM ({values}) \
                     WHERE EXISTS (SELECT 1 FROM events WHERE id = {})",
                    n(1)
                ));
            }
            match &claim {
                // The claim's statements end with the `COMMIT`.
                Some((_, after)) => text.push_str(&format!("; {after}")),
                None => text.push_str("; COMMIT"),
            }
            text.push_str(writer.after_commit());
            text
        };
        let event_id = e.id.to_string();
        let mut query = sqlx::query_with(&sql, args)
            .bind(event_id.clone())
            .bind(e.space_id.to_string())
            .bind(e.event_type.clone())
            .bind(e.payload.to_string())
            .bind(e.created_at)
            .bind(e.deliver_at)
            .bind(keys_json(&e.event_type)?)
            .bind(read.guarded()?.to_owned());
        if read.cached {
            query = query.bind(read.key.clone());
        }
        if let Some((claim, _)) = &claim {
            let next = ClaimNext {
                destinations: fan.send.clone(),
                ..(*claim).clone()
            };
            // The slots are dated when the write lock is held.
            let now = now.max(crate::clock::now_ms());
            query = D::bind_claim_for(query, &next, now)?.bind(event_id);
        }
        let results = writer.run_transaction_batch(query).await?;
        let written = if one_statement {
            // All the deliveries or none (the event's, when it has none).
            let rows = targets.len().max(1) as u64;
            results
                .iter()
                .find_map(|step| step.as_ref().left())
                .is_some_and(|inserted| inserted.rows_affected() == rows)
        } else {
            // The event's INSERT is the statement after the `BEGIN`.
            results
                .iter()
                .filter_map(|step| step.as_ref().left())
                .nth(1)
                .is_some_and(|inserted| inserted.rows_affected() == 1)
        };
        if !written {
            return Ok(None);
        }
        let claimed = match &claim {
            // After the `BEGIN`, the event's INSERT and the deliveries'.
            Some(_) => Some(D::claimed_after(&results, 3)?),
            None => None,
        };
        Ok(Some(Published::Created {
            event_id: e.id,
            deliveries: fan.deliveries(),
            skipped: 0,
            destinations: fan.send,
            claimed,
        }))
    }

    /// The fan-out of each event of `batch` from the subscribers its checks read, when one
    /// string can write them all ([`Self::publish_group_as_read`]): none has an idempotency
    /// key, each fans out as read ([`Self::fan_out_as_read`]), all their deliveries go in
    /// one INSERT.
    fn group_as_read(batch: &[NewEvent]) -> Result<Option<Vec<(&ReadSubscribers, FanOut<'_>)>>> {
        let mut fans = Vec::with_capacity(batch.len());
        let mut deliveries = 0;
        for new in batch {
            if new.idempotency_key.is_some() {
                return Ok(None);
            }
            let Some((read, fan)) = Self::fan_out_as_read(new)? else {
                return Ok(None);
            };
            deliveries += fan.send.len();
            fans.push((read, fan));
        }
        Ok((deliveries <= FAN_OUT_CHUNK).then_some(fans))
    }

    /// A group of events whose subscribers their checks read, written in one round trip:
    /// the events, only if the [`subscribers_json`] of each (space, type) is still the text
    /// read, then their deliveries, only if the events were written. On SQLite a string of
    /// statements inside `BEGIN IMMEDIATE … COMMIT`; on PostgreSQL one statement (`WITH
    /// written AS (INSERT INTO events …) INSERT INTO deliveries …`), its own transaction.
    /// Seven round trips to SQLite's connection thread otherwise (`BEGIN`, the
    /// subscribers, a savepoint, the events, the deliveries, its release, `COMMIT`),
    /// between which the write lock waited for tokio; six to PostgreSQL. `None` when a
    /// subscriber changed: nothing was written, and the group goes statement by statement.
    async fn publish_group_as_read(
        writer: super::write::Writer<'_, D::DB>,
        batch: &[NewEvent],
        fans: Vec<(&ReadSubscribers, FanOut<'_>)>,
        now: UnixMs,
    ) -> Result<Option<Vec<Published>>> {
        // Declared before the arguments, which the query ties to its string's borrow.
        #[allow(clippy::needless_late_init)]
        let sql: String;
        let targets: Vec<(&Event, DestinationId)> = batch
            .iter()
            .zip(&fans)
            .flat_map(|(new, (_, fan))| fan.send.iter().map(move |d| (&new.event, *d)))
            .collect();
        // The deliveries' values first: their bare `?`s are the first parameters; the
        // others follow, numbered (`$n` binds absolutely).
        let mut values = Sql::<D>::new("");
        if !targets.is_empty() {
            Self::push_delivery_values(&mut values, &targets, now);
        }
        let (values, args) = values.into_parts()?;
        let mut last = sqlx::Arguments::len(&args);
        let mut next = || {
            last += 1;
            format!("${last}")
        };
        let rows: Vec<String> = batch
            .iter()
            .map(|_| {
                format!(
                    "({})",
                    (0..6).map(|_| next()).collect::<Vec<_>>().join(", ")
                )
            })
            .collect();
        // One guard per (space, type, text read): two events of a type read apart with
        // different texts cannot both be right, and write nothing.
        let mut guarded: Vec<(SpaceId, &str, &ReadSubscribers)> = Vec::new();
        for (new, (read, _)) in batch.iter().zip(&fans) {
            let guard = (new.event.space_id, new.event.event_type.as_str(), *read);
            if !guarded.contains(&guard) {
                guarded.push(guard);
            }
        }
        let guards: Vec<String> = guarded
            .iter()
            .map(|(_, _, read)| {
                let (space, keys, value) = (next(), next(), next());
                let from_memory = read.cached.then(|| (next(), next()));
                let from_memory = from_memory.as_ref().map(|(t, k)| (t.as_str(), k.as_str()));
                guard_sql(D::BACKEND, (&space, &keys), from_memory, &value)
            })
            .collect();
        let first = next();
        let events = format!(
            "INSERT INTO events (id, space_id, event_type, payload, created_at, deliver_at) \
             SELECT * FROM (VALUES {}) AS v WHERE {}",
            rows.join(", "),
            guards.join(" AND ")
        );
        // PostgreSQL: one statement, its own transaction (a publish alone's, as one).
        let one_statement = D::BACKEND == Backend::Postgres;
        sql = if one_statement {
            match targets.is_empty() {
                true => events,
                false => format!(
                    "WITH written AS ({events} RETURNING id) \
                     {DELIVERY_INSERT} SELECT * FROM ({values}) AS d \
                     WHERE EXISTS (SELECT 1 FROM written)"
                ),
            }
        } else {
            let mut text = format!("{}{events}", writer.opening());
            if !targets.is_empty() {
                text.push_str(&format!(
                    "; {DELIVERY_INSERT} SELECT * FROM ({values}) \
                     WHERE EXISTS (SELECT 1 FROM events WHERE id = {first})"
                ));
            }
            text.push_str("; COMMIT");
            text
        };
        let mut query = sqlx::query_with(&sql, args);
        for new in batch {
            let e = &new.event;
            query = query
                .bind(e.id.to_string())
                .bind(e.space_id.to_string())
                .bind(e.event_type.clone())
                .bind(e.payload.to_string())
                .bind(e.created_at)
                .bind(e.deliver_at);
        }
        for (space, event_type, read) in &guarded {
            query = query
                .bind(space.to_string())
                .bind(keys_json(event_type)?)
                .bind(read.guarded()?.to_owned());
            if read.cached {
                query = query.bind(event_type.to_string()).bind(read.key.clone());
            }
        }
        if !one_statement {
            query = query.bind(batch[0].event.id.to_string());
        }
        let results = writer.run_transaction_batch(query).await?;
        let written = if one_statement {
            // All the deliveries or none (the events, when they have none).
            let rows = match targets.len() {
                0 => batch.len(),
                n => n,
            } as u64;
            results
                .iter()
                .find_map(|step| step.as_ref().left())
                .is_some_and(|inserted| inserted.rows_affected() == rows)
        } else {
            // The events' INSERT is the statement after the `BEGIN`.
            results
                .iter()
                .filter_map(|step| step.as_ref().left())
                .nth(1)
                .is_some_and(|inserted| inserted.rows_affected() == batch.len() as u64)
        };
        if !written {
            return Ok(None);
        }
        Ok(Some(
            batch
                .iter()
                .zip(fans)
                .map(|(new, (_, fan))| Published::Created {
                    event_id: new.event.id,
                    deliveries: fan.deliveries(),
                    skipped: 0,
                    destinations: fan.send,
                    claimed: None,
                })
                .collect(),
        ))
    }

    /// Appends the replay guard's INSERT of a signed request's `webhook-id`: it changes a row
    /// only when the ID is new.
    fn push_remember<'a>(sql: &mut Sql<'a, D>, webhook: &'a str, message_id: &'a str, now: UnixMs) {
        sql.push("INSERT INTO incoming_replays (webhook_id, message_id, seen_at) VALUES (")
            .push_bind(webhook)
            .push(", ")
            .push_bind(message_id)
            .push(", ")
            .push_bind(now)
            .push(") ON CONFLICT (webhook_id, message_id) DO NOTHING");
    }

    /// Appends the DELETE of the webhook's remembered IDs older than the replay memory.
    fn push_forget_old<'a>(sql: &mut Sql<'a, D>, webhook: &'a str, now: UnixMs) {
        sql.push("DELETE FROM incoming_replays WHERE webhook_id = ")
            .push_bind(webhook)
            .push(" AND seen_at < ")
            .push_bind(now - crate::storage::REPLAY_MEMORY_MS);
    }

    /// Appends the INSERT of a channel message.
    fn push_message<'a>(sql: &mut Sql<'a, D>, m: &'a Message) {
        sql.push(
            "INSERT INTO messages (id, space_id, channel_id, text, attachments, source_kind, \
             source_id, created_at) ",
        );
        sql.push_values([m], |mut row, m| {
            row.push_bind(m.id.to_string())
                .push_bind(m.space_id.to_string())
                .push_bind(m.channel_id.to_string())
                .push_bind(m.text.as_str())
                .push_bind(m.attachments.as_ref().map(|a| a.to_string()))
                .push_bind(m.source_kind.as_str())
                .push_bind(m.source_id.as_deref())
                .push_bind(m.created_at);
        });
    }

    /// One pending delivery per (event, destination), due now or at the event's
    /// `deliver_at` (docs §2.1), in multi-row INSERTs.
    async fn insert_deliveries(
        tx: &mut WriteTx<'_, D::DB>,
        targets: &[(&Event, DestinationId)],
        now: UnixMs,
    ) -> Result<()> {
        for chunk in targets.chunks(FAN_OUT_CHUNK) {
            let mut insert = Sql::<D>::new("");
            Self::push_deliveries(&mut insert, chunk, now);
            let (sql, args) = insert.into_parts()?;
            sqlx::query_with(&sql, args).execute(&mut **tx).await?;
        }
        Ok(())
    }

    /// Appends the INSERT of [`Self::insert_deliveries`] for `targets` (at most
    /// [`FAN_OUT_CHUNK`]) to `sql`.
    fn push_deliveries<'a>(
        sql: &mut Sql<'a, D>,
        targets: &[(&'a Event, DestinationId)],
        now: UnixMs,
    ) {
        sql.push(DELIVERY_INSERT).push(" ");
        Self::push_delivery_values(sql, targets, now);
    }

    /// The `VALUES` of [`Self::push_deliveries`], one pending delivery per target.
    fn push_delivery_values<'a>(
        sql: &mut Sql<'a, D>,
        targets: &[(&'a Event, DestinationId)],
        now: UnixMs,
    ) {
        sql.push_values(targets, |mut row, (e, d)| {
            row.push_bind(DeliveryId::new().to_string())
                .push_bind(e.space_id.to_string())
                .push_bind(e.id.to_string())
                .push_bind(d.to_string())
                .push_bind(&e.event_type)
                .push_bind(DeliveryStatus::Pending.as_str())
                .push_bind(0_i64)
                .push_bind(e.deliver_at.unwrap_or(now))
                .push_bind(now)
                .push_bind(now)
                .push_bind(e.deliver_at);
        });
    }

    /// Deliveries that failed before they were tried: the destination's filter failed
    /// on the payload. Each has one attempt that says why, with class `transformation`
    /// (as a failed transformation), and is not tried (resending it sends it as it is).
    /// Returns their IDs.
    async fn insert_failed(
        tx: &mut WriteTx<'_, D::DB>,
        e: &Event,
        failed: &[(DestinationId, &str)],
        now: UnixMs,
    ) -> Result<Vec<DeliveryId>> {
        let mut made = Vec::with_capacity(failed.len());
        for (destination, why) in failed {
            let id = DeliveryId::new();
            let delivery = id.to_string();
            sqlx::query(
                "INSERT INTO deliveries (id, space_id, event_id, destination_id, event_type, status, \
                 attempts, next_attempt_at, last_error_class, created_at, updated_at, finished_at) \
                 VALUES ($1, $2, $3, $4, $5, 'failed', 1, NULL, $6, $7, $7, $7)",
            )
            .bind(&delivery)
            .bind(e.space_id.to_string())
            .bind(e.id.to_string())
            .bind(destination.to_string())
            .bind(&e.event_type)
            .bind(ErrorClass::Transformation.as_str())
            .bind(now)
            .execute(&mut **tx)
            .await?;
            sqlx::query(
                "INSERT INTO attempts (id, delivery_id, space_id, attempt_number, started_at, duration_ms, \
                 request_url, request_headers, request_body, error_class, error_message) \
                 SELECT $1, $2, space_id, 1, $3, 0, url, '{}', $4, $5, $6 FROM destinations WHERE id = $7",
            )
            .bind(AttemptId::new().to_string())
            .bind(&delivery)
            .bind(now)
            .bind(e.payload.to_string())
            .bind(ErrorClass::Transformation.as_str())
            .bind(*why)
            .bind(destination.to_string())
            .execute(&mut **tx)
            .await?;
            made.push(id);
        }
        Ok(made)
    }

    /// Events a destination's filter kept out: counted, not delivered.
    async fn count_filtered(
        tx: &mut WriteTx<'_, D::DB>,
        filtered: impl Iterator<Item = (DestinationId, i64)>,
    ) -> Result<()> {
        for (d, n) in filtered {
            sqlx::query(
                "UPDATE destinations SET filtered_events = filtered_events + $1 WHERE id = $2",
            )
            .bind(n)
            .bind(d.to_string())
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    /// D5: an inactive destination is not caught up later; it only counts what it missed.
    async fn count_skipped(
        tx: &mut WriteTx<'_, D::DB>,
        skipped: impl Iterator<Item = (DestinationId, i64)>,
    ) -> Result<()> {
        for (d, n) in skipped {
            sqlx::query(
                "UPDATE destinations SET skipped_events = skipped_events + $1 WHERE id = $2",
            )
            .bind(n)
            .bind(d.to_string())
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    /// Events without an idempotency key, all at once: one INSERT for the events, one
    /// look-up per (space, type), one INSERT for all their deliveries.
    async fn publish_plain_in(
        tx: &mut WriteTx<'_, D::DB>,
        events: &[&NewEvent],
        now: UnixMs,
    ) -> Result<Vec<Published>> {
        for chunk in events.chunks(FAN_OUT_CHUNK) {
            let mut insert = Sql::<D>::new(
                "INSERT INTO events (id, space_id, event_type, payload, created_at, deliver_at) ",
            );
            insert.push_values(chunk, |mut row, new| {
                let e = &new.event;
                row.push_bind(e.id.to_string())
                    .push_bind(e.space_id.to_string())
                    .push_bind(&e.event_type)
                    .push_bind(e.payload.to_string())
                    .push_bind(e.created_at)
                    .push_bind(e.deliver_at);
            });
            let (sql, args) = insert.into_parts()?;
            sqlx::query_with(&sql, args).execute(&mut **tx).await?;
        }
        let mut subscribed: HashMap<(SpaceId, &str), Subscribers> = HashMap::new();
        for new in events {
            let e = &new.event;
            if let Entry::Vacant(slot) = subscribed.entry((e.space_id, e.event_type.as_str())) {
                slot.insert(Self::subscribers(tx, &e.space_id.to_string(), &e.event_type).await?);
            }
        }
        let mut targets = Vec::new();
        let mut skipped: HashMap<DestinationId, i64> = HashMap::new();
        let mut filtered: HashMap<DestinationId, i64> = HashMap::new();
        let mut answers = Vec::with_capacity(events.len());
        for new in events {
            let e = &new.event;
            let (active, inactive) = &subscribed[&(e.space_id, e.event_type.as_str())];
            let fan = FanOut::of(active.clone(), &new.filters);
            targets.extend(fan.send.iter().map(|d| (e, *d)));
            Self::insert_failed(tx, e, &fan.failed, now).await?;
            for d in inactive {
                *skipped.entry(*d).or_default() += 1;
            }
            for d in &fan.filtered {
                *filtered.entry(*d).or_default() += 1;
            }
            answers.push(Published::Created {
                event_id: e.id,
                deliveries: fan.deliveries(),
                skipped: inactive.len() as i64,
                destinations: fan.send,
                claimed: None,
            });
        }
        Self::insert_deliveries(tx, &targets, now).await?;
        Self::count_skipped(tx, skipped.into_iter()).await?;
        Self::count_filtered(tx, filtered.into_iter()).await?;
        Ok(answers)
    }

    /// The answer to one published event: what it wrote, or, when its idempotency key
    /// was taken (`Ok(None)`), the key's first answer, read after the commit.
    async fn answer_of(
        &self,
        new: &NewEvent,
        outcome: Result<Option<Published>>,
    ) -> Result<Published> {
        match outcome {
            Ok(Some(published)) => Ok(published),
            Ok(None) => {
                let key = new.idempotency_key.as_deref().unwrap_or_default();
                self.first_answer(new.event.space_id, key).await
            }
            Err(e) => Err(e),
        }
    }

    pub(super) async fn first_answer(&self, space_id: SpaceId, key: &str) -> Result<Published> {
        let first = sqlx::query_as::<_, IdempotencyRow>(
            "SELECT request_hash, event_id, deliveries FROM idempotency_keys WHERE space_id = $1 AND key = $2",
        )
        .bind(space_id.to_string())
        .bind(key)
        .fetch_one(&self.read)
        .await?;
        Ok(Published::Replayed {
            event_id: first
                .event_id
                .parse()
                .map_err(|e| StorageError::Corrupt(format!("idempotency_keys.event_id: {e}")))?,
            deliveries: first.deliveries,
            request_hash: first.request_hash,
        })
    }
}

/// An event's active subscribers split by its filters' verdicts.
#[derive(Debug, PartialEq, Eq)]
struct FanOut<'v> {
    /// They get a pending delivery.
    send: Vec<DestinationId>,
    /// Their filter kept the event out.
    filtered: Vec<DestinationId>,
    /// Their filter failed, and why: they get a failed delivery.
    failed: Vec<(DestinationId, &'v str)>,
}

impl<'v> FanOut<'v> {
    /// A verdict counts only for a subscriber that is still active (one disabled or
    /// unsubscribed since the filters ran is left out as usual); without verdicts,
    /// every active subscriber gets its delivery, at no cost.
    fn of(active: Vec<DestinationId>, verdicts: &'v FilterVerdicts) -> Self {
        if verdicts.filtered_out.is_empty() && verdicts.failed.is_empty() {
            return Self {
                send: active,
                filtered: Vec::new(),
                failed: Vec::new(),
            };
        }
        let mut fan = Self {
            send: Vec::with_capacity(active.len()),
            filtered: Vec::new(),
            failed: Vec::new(),
        };
        for d in active {
            if verdicts.filtered_out.contains(&d) {
                fan.filtered.push(d);
            } else if let Some((_, why)) = verdicts.failed.iter().find(|(f, _)| *f == d) {
                fan.failed.push((d, why.as_str()));
            } else {
                fan.send.push(d);
            }
        }
        fan
    }

    /// The deliveries it makes: the pending ones and the failed ones.
    fn deliveries(&self) -> i64 {
        (self.send.len() + self.failed.len()) as i64
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct EventRow {
    id: String,
    space_id: String,
    event_type: String,
    payload: String,
    created_at: i64,
    deliver_at: Option<i64>,
}

impl TryFrom<EventRow> for Event {
    type Error = StorageError;
    fn try_from(r: EventRow) -> Result<Self, StorageError> {
        Ok(Event {
            id: parse("events.id", &r.id)?,
            space_id: parse("events.space_id", &r.space_id)?,
            event_type: r.event_type,
            payload: json("events.payload", &r.payload)?,
            created_at: r.created_at,
            deliver_at: r.deliver_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct IdempotencyRow {
    pub request_hash: String,
    pub event_id: String,
    pub deliveries: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdicts_split_the_active_subscribers_and_nothing_else() {
        let [a, b, c, gone] = [(); 4].map(|_| DestinationId::new());
        let none = FilterVerdicts::default();
        let fan = FanOut::of(vec![a, b], &none);
        assert_eq!((fan.deliveries(), fan.send), (2, vec![a, b]));

        let verdicts = FilterVerdicts {
            filtered_out: vec![b, gone],
            failed: vec![(c, "the filter failed: boom".into()), (gone, "x".into())],
        };
        let fan = FanOut::of(vec![a, b, c], &verdicts);
        assert_eq!(fan.send, vec![a]);
        assert_eq!(fan.filtered, vec![b]);
        assert_eq!(fan.failed, vec![(c, "the filter failed: boom")]);
        assert_eq!(fan.deliveries(), 2, "the failed delivery is one");
    }

    #[test]
    fn only_checks_a_write_can_check_again_in_full_are_kept_in_memory() {
        let [a, b] = [(); 2].map(|_| DestinationId::new().to_string());
        let checks = |text: String| PublishChecks {
            subscribers: Some(ReadSubscribers {
                text,
                key: "key_1".into(),
                cached: false,
            }),
            ..PublishChecks::default()
        };
        let text = |key: &str, filters: u32, b_status: &str, b_types: &str| {
            format!(
                r#"[{key}, 17, {filters}][["{a}", "active", 1, null], ["{b}", "{b_status}", 2, {b_types}]]"#
            )
        };
        let kept = |c: &PublishChecks| cacheable(c, "order.paid");
        assert!(kept(&checks(text("0", 0, "active", "null"))));
        assert!(
            !kept(&checks(text("1700000000000", 0, "active", "null"))),
            "a revoked key"
        );
        assert!(
            !kept(&checks(text("null", 0, "active", "null"))),
            "a deleted key"
        );
        assert!(
            !kept(&checks(text("0", 1, "active", "null"))),
            "a filter in the space"
        );
        assert!(
            !kept(&checks(text("0", 0, "inactive", "null"))),
            "an inactive subscriber"
        );
        assert!(
            kept(&checks(text("0", 0, "inactive", r#""[\"invoice.*\"]""#))),
            "an inactive destination of other types is no subscriber"
        );
        assert!(!kept(&checks("not json".into())));
        assert!(!kept(&PublishChecks::default()), "nothing read with them");

        // The write compares the whole text for checks from memory, the subscribers' part
        // for checks read for this publish.
        let mut read = checks(text("0", 0, "active", "null")).subscribers.unwrap();
        let subscribers = format!(r#"[["{a}", "active", 1, null], ["{b}", "active", 2, null]]"#);
        assert_eq!(read.guarded().unwrap(), subscribers);
        read.cached = true;
        assert_eq!(read.guarded().unwrap(), format!("[0, 17, 0]{subscribers}"));
    }
}
