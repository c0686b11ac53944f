//! PostgreSQL, for scale-out: several server instances share one database.

use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

use super::{
    rows, shared, Backend, BulkOutcome, DeliveryFilter, IncomingEffects, ResendFailed, Slot, FinishEffects, FinishedAttempt, NewEvent, NextStep, Page, Published, Result,
    StorageError,
};
use crate::domain::*;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

#[derive(Debug, Clone)]
pub struct PostgresStorage {
    pub(crate) pool: PgPool,
}

impl PostgresStorage {
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await?;
        Ok(Self { pool })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

impl_storage!(PostgresStorage, sqlx::Postgres, {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    async fn claim_due(&self, now: UnixMs, limit: i64, lease_margin_ms: i64) -> Result<Vec<Delivery>> {
        // SKIP LOCKED: concurrent workers (of any instance) take disjoint rows without waiting.
        let sql = format!(
            "UPDATE deliveries SET status = 'sending', updated_at = $1, \
               lease_expires_at = $1 + $3 + 1000 * (SELECT timeout_seconds FROM destinations d \
                                                    WHERE d.id = deliveries.destination_id) \
             WHERE id IN (SELECT id FROM deliveries \
                          WHERE status IN ('pending', 'retrying') AND paused = FALSE AND next_attempt_at <= $1 \
                          ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
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
