//! The embedded default: one SQLite file in WAL mode.
//!
//! Commits are `synchronous = FULL`, so an answer given after a commit survives
//! a power cut, not only a crash of the process.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use super::write::{WriteTx, Writer};
use super::{
    rows, shared, Backend, BulkOutcome, ClaimLimits, DeliveryFilter, FinishEffects,
    FinishedAttempt, IncomingEffects, NewEvent, NextStep, Page, Published, RateScope, ResendFailed,
    Result, Slot, StorageError, UserChange,
};
use crate::domain::*;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

#[derive(Debug, Clone)]
pub struct SqliteStorage {
    pub(crate) pool: SqlitePool,
    /// The engine's own bookkeeping (claims, attempts, rate slots) commits with
    /// `synchronous = NORMAL`: a power cut may lose the last attempts' records, which
    /// then come back as lost claims and are sent again; it never loses an accepted
    /// event or delivery, whose commits go through `pool` with `synchronous = FULL`.
    pub(crate) engine_pool: SqlitePool,
    /// SQLite has one writer. Writers of this process queue here, in order, instead of
    /// polling SQLite's lock with the busy handler's growing sleeps.
    write_gate: std::sync::Arc<tokio::sync::Mutex<()>>,
}

impl SqliteStorage {
    /// Opens (creating if needed, with its parent folder) the database at `url`.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        if let Some(parent) = options.get_filename().parent() {
            if !parent.as_os_str().is_empty() {
                std::fs::create_dir_all(parent)?;
            }
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .acquire_timeout(super::ACQUIRE_TIMEOUT)
            .connect_with(options.clone())
            .await?;
        let engine_pool = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(super::ACQUIRE_TIMEOUT)
            .connect_with(options.synchronous(SqliteSynchronous::Normal))
            .await?;
        Ok(Self {
            pool,
            engine_pool,
            write_gate: Default::default(),
        })
    }

    /// The due-queue index, named: without statistics SQLite may pick the status index
    /// and walk every waiting delivery (a million-row retry backlog: a fifth of a second).
    pub(super) const DUE_INDEX: &'static str = "INDEXED BY deliveries_due";

    /// Held for the whole of a write: one writer at a time, first come first served.
    pub(super) async fn gate(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        Some(self.write_gate.lock().await)
    }

    /// Claims need no lock of their own: the gate and `BEGIN IMMEDIATE` make them one at a time.
    pub(super) async fn lock_claims(_tx: &mut WriteTx<'_, sqlx::Sqlite>) -> sqlx::Result<()> {
        Ok(())
    }

    /// The one way to open a write transaction: the gate, then a connection whose
    /// transaction takes SQLite's write lock at once (`BEGIN IMMEDIATE`), so a
    /// transaction that reads before it writes never meets a changed snapshot. The
    /// connection is closed instead of pooled unless the transaction ends cleanly
    /// ([`Writer`]).
    pub(super) async fn writer(&self, pool: &SqlitePool) -> sqlx::Result<Writer<'_, sqlx::Sqlite>> {
        Writer::acquire(self.gate().await, pool, Some("BEGIN IMMEDIATE")).await
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Changes to `users` that depend on the other users (the first admin, the last
    /// admin) need no lock here: SQLite has one writer at a time, and these
    /// transactions write first.
    pub(super) async fn lock_users(_tx: &mut WriteTx<'_, sqlx::Sqlite>) -> Result<()> {
        Ok(())
    }
}

impl_storage!(SqliteStorage, sqlx::Sqlite, {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    async fn claim(
        &self,
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
        limits: &ClaimLimits,
    ) -> Result<Vec<Delivery>> {
        // One statement: SQLite has a single writer, so the in-flight count it reads is exact.
        let _gate = self.gate().await;
        let rows = sqlx::query_as::<_, rows::DeliveryRow>(&shared::claim_sql(Self::DUE_INDEX))
            .bind(now)
            .bind(limit)
            .bind(lease_margin_ms)
            .bind(limits.per_destination)
            .bind(limits.retries)
            .fetch_all(&self.engine_pool)
            .await?;
        rows::convert_all(rows)
    }

    /// A loop over the destinations: SQLite's statements run in-process, so a few per
    /// destination cost microseconds.
    async fn claim_for(
        &self,
        destinations: &[DestinationId],
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
        limits: &ClaimLimits,
    ) -> Result<Vec<Delivery>> {
        let mut writer = self.writer(&self.engine_pool).await?;
        let mut tx = writer.begin().await?;
        Self::lock_claims(&mut tx).await?;
        let mut claimed: Vec<Delivery> = Vec::new();
        let mut retries_left = limits.retries;
        for destination in destinations {
            let room = limit - claimed.len() as i64;
            if room <= 0 {
                break;
            }
            let destination = destination.to_string();
            let busy: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM deliveries WHERE destination_id = $1 AND status = 'sending'",
            )
            .bind(&destination)
            .fetch_one(&mut *tx)
            .await?;
            let free = (limits.per_destination - busy).min(room);
            if free <= 0 {
                continue;
            }
            let due: Vec<(String, String)> = sqlx::query_as(
                "SELECT id, status FROM deliveries \
                 WHERE destination_id = $1 AND status IN ('pending', 'retrying') AND paused = FALSE \
                   AND next_attempt_at <= $2 AND ($3 OR status = 'pending') \
                 ORDER BY next_attempt_at, id LIMIT $4",
            )
            .bind(&destination)
            .bind(now)
            .bind(retries_left > 0)
            .bind(free)
            .fetch_all(&mut *tx)
            .await?;
            let mut take = Vec::with_capacity(due.len());
            for (id, status) in due {
                if status == "retrying" {
                    if retries_left <= 0 {
                        continue;
                    }
                    retries_left -= 1;
                }
                take.push(id);
            }
            if take.is_empty() {
                continue;
            }
            let mut update = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "UPDATE deliveries SET status = 'sending', updated_at = ",
            );
            update
                .push_bind(now)
                .push(", lease_expires_at = ")
                .push_bind(now + lease_margin_ms)
                .push(" + 1000 * (SELECT timeout_seconds FROM destinations t WHERE t.id = deliveries.destination_id)")
                .push(" WHERE status IN ('pending', 'retrying') AND id IN (");
            let mut ids = update.separated(", ");
            for id in &take {
                ids.push_bind(id);
            }
            update.push(format!(") RETURNING {}", shared::DELIVERY));
            let rows = update
                .build_query_as::<rows::DeliveryRow>()
                .fetch_all(&mut *tx)
                .await?;
            claimed.extend(rows::convert_all(rows)?);
        }
        tx.commit().await?;
        claimed.sort_by_key(|d| (d.next_attempt_at, d.id));
        Ok(claimed)
    }

    async fn migrate(&self) -> Result<()> {
        MIGRATOR
            .run(&self.pool)
            .await
            .map_err(|e| StorageError::Other(e.into()))
    }
});
