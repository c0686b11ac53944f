//! The embedded default: one SQLite file in WAL mode.
//!
//! Commits are `synchronous = FULL`, so an answer given after a commit survives
//! a power cut, not only a crash of the process.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

use super::{
    rows, shared, Backend, BulkOutcome, DeliveryFilter, IncomingEffects, ResendFailed, Slot, FinishEffects, FinishedAttempt, NewEvent, NextStep, Page, Published, Result,
    StorageError,
};
use crate::domain::*;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

#[derive(Debug, Clone)]
pub struct SqliteStorage {
    pub(crate) pool: SqlitePool,
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
            .connect_with(options)
            .await?;
        Ok(Self { pool })
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

impl_storage!(SqliteStorage, sqlx::Sqlite, {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    async fn claim_due(&self, now: UnixMs, limit: i64, lease_margin_ms: i64) -> Result<Vec<Delivery>> {
        // One atomic statement: SQLite has a single writer, so no two workers can take the same row.
        let sql = format!(
            "UPDATE deliveries SET status = 'sending', updated_at = $1, \
               lease_expires_at = $1 + $3 + 1000 * (SELECT timeout_seconds FROM destinations d \
                                                    WHERE d.id = deliveries.destination_id) \
             WHERE id IN (SELECT id FROM deliveries \
                          WHERE status IN ('pending', 'retrying') AND paused = FALSE AND next_attempt_at <= $1 \
                          ORDER BY next_attempt_at LIMIT $2) \
             RETURNING {}",
            shared::DELIVERY
        );
        let rows = sqlx::query_as::<_, rows::DeliveryRow>(&sql)
            .bind(now)
            .bind(limit)
            .bind(lease_margin_ms)
            .fetch_all(&self.pool)
            .await?;
        rows::convert_all(rows)
    }

    async fn migrate(&self) -> Result<()> {
        MIGRATOR
            .run(&self.pool)
            .await
            .map_err(|e| StorageError::Other(e.into()))
    }
});
