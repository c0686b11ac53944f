//! What the retention task deletes (docs D10): old finished deliveries and their attempts,
//! events no delivery needs any more, idempotency keys, idle rate-limit rows, expired
//! console sessions, old read notifications and alert e-mails given up on; and, on SQLite, handing the freed pages
//! back to the file system (`PRAGMA incremental_vacuum`).
//!
//! Each method is one small write transaction of at most `limit` rows (the caller passes
//! 1,000 or fewer and pauses between them), so the engine's claims and finishes interleave
//! with a purge instead of waiting behind one huge `DELETE`. "Older than" is an ID range:
//! IDs are time-ordered ULIDs (`domain/ids.rs`), so each look-up is a range of an
//! `(space_id, …, id)` index, never a scan of the table.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use super::store::{
    parse, Args, Conn, DbRow, Dialect, RowsAffected as _, Sql, SqlArg, SqlValue, Store,
};
use super::write::Durability;
use super::*;

/// The statuses a delivery never leaves: the only ones the purge deletes.
const FINISHED: &str = "('succeeded', 'failed', 'cancelled')";

/// The retention task's reads and deletes.
#[async_trait]
pub trait RetentionStore: Send + Sync + std::fmt::Debug {
    /// Up to `limit` finished deliveries of the space created before `before` (Unix ms),
    /// oldest first (through `deliveries_by_space_status`).
    async fn finished_deliveries_before(
        &self,
        space_id: SpaceId,
        before: UnixMs,
        limit: i64,
    ) -> Result<Vec<DeliveryId>>;

    /// Deletes these deliveries that are finished (a waiting one, or one resent meanwhile,
    /// is never touched) with all their attempts, in one transaction; how many deliveries
    /// and attempts it deleted.
    async fn purge_finished(&self, deliveries: &[DeliveryId]) -> Result<(u64, u64)>;

    /// Whether a writer other than a metered background task (the purge) asked for the
    /// write path within `window`: the engine or a person is writing, so the purge takes
    /// shorter turns.
    fn others_wrote_within(&self, window: std::time::Duration) -> bool;

    /// Looks at up to `limit` events of the space created before `before`, after the
    /// cursor `after`, and deletes those with no delivery left; returns how many it
    /// deleted and the last event looked at (the next cursor; `None`: no more).
    async fn purge_events(
        &self,
        space_id: SpaceId,
        before: UnixMs,
        after: Option<EventId>,
        limit: i64,
    ) -> Result<(u64, Option<EventId>)>;

    /// Deletes at most `limit` idempotency keys created before `before`.
    async fn purge_idempotency_keys(&self, before: UnixMs, limit: i64) -> Result<u64>;
    /// Up to `limit` audit entries made before `before` (docs D14, `[retention] audit`).
    async fn purge_audit_entries(&self, before: UnixMs, limit: i64) -> Result<u64>;

    /// Looks at up to `limit` rate-limit keys after the cursor `after` (by key) and deletes
    /// those not touched since `idle_before` with their recorded events (a deleted key,
    /// destination or webhook, or one idle for longer than any window); returns the rows
    /// deleted (events and keys together) and the next cursor (`None`: no more).
    async fn purge_rate_rows(
        &self,
        idle_before: UnixMs,
        after: Option<String>,
        limit: i64,
    ) -> Result<(u64, Option<String>)>;

    /// Deletes at most `limit` rows of the console's session index that expired before `now`.
    async fn purge_console_sessions(&self, now: UnixMs, limit: i64) -> Result<u64>;

    /// Deletes at most `limit` read notifications of the space (`None`: the install's
    /// own, of no space) created before `before`.
    async fn purge_read_notifications(
        &self,
        space_id: Option<SpaceId>,
        before: UnixMs,
        limit: i64,
    ) -> Result<u64>;

    /// Deletes at most `limit` alert e-mails given up on (no next attempt; docs §8
    /// "Alerts") that were queued before `before`. Waiting ones are never touched.
    async fn purge_given_up_alert_emails(&self, before: UnixMs, limit: i64) -> Result<u64>;

    /// SQLite: hands up to `pages` free pages back to the file system
    /// (`PRAGMA incremental_vacuum`, on a database with `auto_vacuum = INCREMENTAL`), so
    /// the file stops growing. PostgreSQL: nothing (autovacuum reuses the space).
    async fn reclaim_free_pages(&self, pages: i64) -> Result<()>;
}

#[async_trait]
impl<D: Dialect> RetentionStore for Store<D>
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
    async fn finished_deliveries_before(
        &self,
        space_id: SpaceId,
        before: UnixMs,
        limit: i64,
    ) -> Result<Vec<DeliveryId>> {
        let sql = format!(
            "SELECT id FROM deliveries \
             WHERE space_id = $1 AND status IN {FINISHED} AND id < $2 LIMIT $3"
        );
        let ids: Vec<(String,)> = sqlx::query_as(&sql)
            .bind(space_id.to_string())
            .bind(DeliveryId::lower_bound_at(before).to_string())
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        ids.iter().map(|(id,)| parse("deliveries.id", id)).collect()
    }

    async fn purge_finished(&self, deliveries: &[DeliveryId]) -> Result<(u64, u64)> {
        if deliveries.is_empty() {
            return Ok((0, 0));
        }
        let ids = || deliveries.iter().map(|d| d.to_string());
        if D::BACKEND == Backend::Sqlite {
            // The whole transaction as one batch of statements, one round trip to the
            // connection's thread, so the write gate is held for the work alone and not
            // also for the purge task's turns on the runtime between statements (under
            // load each of those waits behind the engine's tasks). The IDs go as one JSON
            // array, read twice.
            let batch = format!(
                "BEGIN IMMEDIATE; \
                 DELETE FROM attempts WHERE delivery_id IN ( \
                   SELECT id FROM deliveries WHERE status IN {FINISHED} \
                     AND id IN (SELECT value FROM json_each($1))); \
                 DELETE FROM deliveries WHERE status IN {FINISHED} \
                   AND id IN (SELECT value FROM json_each($1)); \
                 COMMIT"
            );
            let ids = serde_json::to_string(&ids().collect::<Vec<_>>())
                .map_err(|e| StorageError::Internal(e.to_string()))?;
            let writer = self.writes.writer(Durability::Engine).await?;
            let results = writer
                .run_transaction_batch(sqlx::query(&batch).bind(ids))
                .await?;
            // BEGIN, the attempts, the deliveries, COMMIT.
            let changed: Vec<u64> = results
                .iter()
                .filter_map(|r| r.as_ref().left().map(|done| done.rows_affected()))
                .collect();
            return Ok((
                changed.get(2).copied().unwrap_or(0),
                changed.get(1).copied().unwrap_or(0),
            ));
        }
        // The attempts first (they point at their delivery), of finished deliveries only:
        // finished is checked again here, under the write lock.
        let mut attempts = Sql::<D>::new(format!(
            "DELETE FROM attempts WHERE delivery_id IN ( \
               SELECT id FROM deliveries WHERE status IN {FINISHED} AND id IN ("
        ));
        attempts.push_list(ids()).push("))");
        let mut finished = Sql::<D>::new(format!(
            "DELETE FROM deliveries WHERE status IN {FINISHED} AND id IN ("
        ));
        finished.push_list(ids()).push(")");
        let (attempts_sql, attempts_args) = attempts.into_parts()?;
        let (finished_sql, finished_args) = finished.into_parts()?;
        let mut writer = self.writes.writer(Durability::Engine).await?;
        let mut tx = writer.begin().await?;
        let attempts = sqlx::query_with(&attempts_sql, attempts_args)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let deliveries = sqlx::query_with(&finished_sql, finished_args)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok((deliveries, attempts))
    }

    fn others_wrote_within(&self, window: std::time::Duration) -> bool {
        self.writes.others_wrote_within(window)
    }

    async fn purge_events(
        &self,
        space_id: SpaceId,
        before: UnixMs,
        after: Option<EventId>,
        limit: i64,
    ) -> Result<(u64, Option<EventId>)> {
        let mut q = Sql::<D>::new("SELECT id FROM events WHERE space_id = ");
        q.push_bind(space_id.to_string())
            .push(" AND id < ")
            .push_bind(EventId::lower_bound_at(before).to_string());
        if let Some(after) = after {
            q.push(" AND id > ").push_bind(after.to_string());
        }
        q.push(" ORDER BY id LIMIT ").push_bind(limit);
        let (sql, args) = q.into_parts()?;
        let seen: Vec<(String,)> = sqlx::query_as_with(&sql, args)
            .fetch_all(&self.read)
            .await?;
        let Some((last,)) = seen.last() else {
            return Ok((0, None));
        };
        let next = parse("events.id", last)?;
        // Checked again as it deletes: an event with any delivery (waiting, sending, or
        // finished but younger) stays.
        let mut q = Sql::<D>::new("DELETE FROM events WHERE id IN (");
        q.push_list(seen.iter().map(|(id,)| id.clone()))
            .push(") AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id)");
        let (sql, args) = q.into_parts()?;
        let done = self
            .execute(Durability::Engine, sqlx::query_with(&sql, args))
            .await?;
        let more = (seen.len() as i64) >= limit;
        Ok((done.rows_affected(), more.then_some(next)))
    }

    async fn purge_audit_entries(&self, before: UnixMs, limit: i64) -> Result<u64> {
        // IDs sort by time: the oldest entries are a range of the primary key.
        let query = sqlx::query(
            "DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE id < $1 LIMIT $2)",
        )
        .bind(AuditId::lower_bound_at(before).to_string())
        .bind(limit);
        Ok(self
            .execute(Durability::Engine, query)
            .await?
            .rows_affected())
    }

    async fn purge_idempotency_keys(&self, before: UnixMs, limit: i64) -> Result<u64> {
        let query = sqlx::query(
            "DELETE FROM idempotency_keys WHERE (space_id, key) IN ( \
               SELECT space_id, key FROM idempotency_keys WHERE created_at < $1 LIMIT $2)",
        )
        .bind(before)
        .bind(limit);
        Ok(self
            .execute(Durability::Engine, query)
            .await?
            .rows_affected())
    }

    async fn purge_given_up_alert_emails(&self, before: UnixMs, limit: i64) -> Result<u64> {
        let query = sqlx::query(
            "DELETE FROM alert_outbox WHERE id IN ( \
               SELECT id FROM alert_outbox \
               WHERE next_attempt_at IS NULL AND created_at < $1 LIMIT $2)",
        )
        .bind(before)
        .bind(limit);
        Ok(self
            .execute(Durability::Engine, query)
            .await?
            .rows_affected())
    }

    async fn purge_rate_rows(
        &self,
        idle_before: UnixMs,
        after: Option<String>,
        limit: i64,
    ) -> Result<(u64, Option<String>)> {
        // Keyset over the primary key: one look per key, without an index on `touched_at`
        // that every rate slot taken would have to update.
        let keys: Vec<(String, i64)> = sqlx::query_as(
            "SELECT key, touched_at FROM rate_keys WHERE key > $1 ORDER BY key LIMIT $2",
        )
        .bind(after.unwrap_or_default())
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        let next = if (keys.len() as i64) >= limit {
            keys.last().map(|(k, _)| k.clone())
        } else {
            None
        };
        let mut deleted = 0;
        for (key, touched_at) in keys {
            if touched_at >= idle_before {
                continue;
            }
            let mut writer = self.writes.writer(Durability::Engine).await?;
            let mut tx = writer.begin().await?;
            // Re-read under the write: a slot taken meanwhile keeps the key.
            let removed = sqlx::query("DELETE FROM rate_keys WHERE key = $1 AND touched_at < $2")
                .bind(&key)
                .bind(idle_before)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if removed > 0 {
                // Bounded: each slot taken drops the key's events older than its window.
                let events = sqlx::query("DELETE FROM rate_events WHERE key = $1")
                    .bind(&key)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                deleted += removed + events;
            }
            tx.commit().await?;
        }
        Ok((deleted, next))
    }

    async fn purge_console_sessions(&self, now: UnixMs, limit: i64) -> Result<u64> {
        let query = sqlx::query(
            "DELETE FROM console_sessions WHERE session_id IN ( \
               SELECT session_id FROM console_sessions WHERE expires_at < $1 LIMIT $2)",
        )
        .bind(now)
        .bind(limit);
        Ok(self
            .execute(Durability::Engine, query)
            .await?
            .rows_affected())
    }

    async fn purge_read_notifications(
        &self,
        space_id: Option<SpaceId>,
        before: UnixMs,
        limit: i64,
    ) -> Result<u64> {
        let owner = match space_id {
            Some(_) => "space_id = $1",
            None => "space_id IS NULL AND $1 IS NULL",
        };
        let sql = format!(
            "DELETE FROM notifications WHERE id IN ( \
               SELECT id FROM notifications \
               WHERE {owner} AND read_at IS NOT NULL AND id < $2 LIMIT $3)"
        );
        let query = sqlx::query(&sql)
            .bind(space_id.map(|s| s.to_string()))
            .bind(NotificationId::lower_bound_at(before).to_string())
            .bind(limit);
        Ok(self
            .execute(Durability::Engine, query)
            .await?
            .rows_affected())
    }

    async fn reclaim_free_pages(&self, pages: i64) -> Result<()> {
        if D::BACKEND != Backend::Sqlite {
            return Ok(());
        }
        // A PRAGMA takes no bound arguments; `pages` is a number we chose.
        let sql = format!("PRAGMA incremental_vacuum({})", pages.max(1));
        self.execute(Durability::Engine, sqlx::query(&sql)).await?;
        Ok(())
    }
}
