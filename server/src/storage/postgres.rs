//! PostgreSQL, for scale-out: several server instances share one database.

use sqlx::postgres::{PgPool, PgPoolOptions};

use super::write::{WriteTx, Writer};
use super::{
    rows, shared, Backend, BulkOutcome, ClaimLimits, DeliveryFilter, FinishEffects,
    FinishedAttempt, IncomingEffects, NewEvent, NextStep, Page, Published, RateScope, ResendFailed,
    Result, Slot, StorageError, UserChange,
};
use crate::domain::*;

/// The advisory lock that serializes claims across instances.
const CLAIM_LOCK: i64 = 0x5046_4c4f_5700_0001;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

#[derive(Debug, Clone)]
pub struct PostgresStorage {
    pub(crate) pool: PgPool,
    /// The same pool: PostgreSQL commits are durable either way.
    pub(crate) engine_pool: PgPool,
}

impl PostgresStorage {
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(super::ACQUIRE_TIMEOUT)
            .connect(url)
            .await?;
        Ok(Self {
            engine_pool: pool.clone(),
            pool,
        })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// PostgreSQL's planner has statistics: no index named.
    pub(super) const DUE_INDEX: &'static str = "";

    /// PostgreSQL has row locks and many writers: no gate.
    pub(super) async fn gate(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        None
    }

    /// Claims from every instance take turns, so the per-destination in-flight count
    /// they read is exact; a claim takes milliseconds.
    pub(super) async fn lock_claims(tx: &mut WriteTx<'_, sqlx::Postgres>) -> sqlx::Result<()> {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(CLAIM_LOCK)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Serializes changes to `users` that depend on the other users (the first admin,
    /// the last admin): under READ COMMITTED two of them could each see the other's
    /// row as it was and both pass. Reads and sign-ins are not blocked.
    pub(super) async fn lock_users(tx: &mut WriteTx<'_, sqlx::Postgres>) -> Result<()> {
        sqlx::query("LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE")
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// The one way to open a write transaction: a connection closed instead of pooled
    /// unless its transaction ends cleanly ([`Writer`]).
    pub(super) async fn writer(&self, pool: &PgPool) -> sqlx::Result<Writer<'_, sqlx::Postgres>> {
        Writer::acquire(None, pool, None).await
    }
}

impl_storage!(PostgresStorage, sqlx::Postgres, {
    fn backend(&self) -> Backend {
        Backend::Postgres
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
        let mut writer = self.writer(&self.pool).await?;
        let mut tx = writer.begin().await?;
        Self::lock_claims(&mut tx).await?;
        let rows = sqlx::query_as::<_, rows::DeliveryRow>(&shared::claim_sql(Self::DUE_INDEX))
            .bind(now)
            .bind(limit)
            .bind(lease_margin_ms)
            .bind(limits.per_destination)
            .bind(limits.retries)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows::convert_all(rows)
    }

    /// One statement for all the destinations (each one's earliest due deliveries through
    /// `LATERAL … LIMIT` its free slots): a round trip to the server per destination would
    /// cost more than the claim itself.
    async fn claim_for(
        &self,
        destinations: &[DestinationId],
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
        limits: &ClaimLimits,
    ) -> Result<Vec<Delivery>> {
        let sql = format!(
            "WITH targets AS ( \
               SELECT t.destination_id, t.ord FROM unnest($1::text[]) WITH ORDINALITY AS t(destination_id, ord) \
             ), busy AS ( \
               SELECT destination_id, COUNT(*) AS n FROM deliveries \
               WHERE status = 'sending' AND destination_id = ANY($1::text[]) GROUP BY destination_id \
             ), due AS ( \
               SELECT x.id, x.status, x.next_attempt_at, targets.ord FROM targets \
               LEFT JOIN busy ON busy.destination_id = targets.destination_id \
               CROSS JOIN LATERAL ( \
                 SELECT id, status, next_attempt_at FROM deliveries \
                 WHERE destination_id = targets.destination_id AND status IN ('pending', 'retrying') \
                   AND paused = FALSE AND next_attempt_at <= $2 AND ($3 OR status = 'pending') \
                 ORDER BY next_attempt_at, id \
                 LIMIT GREATEST($4 - COALESCE(busy.n, 0), 0) \
               ) x \
             ), ranked AS ( \
               SELECT id, status, next_attempt_at, ord, \
                 ROW_NUMBER() OVER (PARTITION BY status ORDER BY next_attempt_at, id) AS nth FROM due \
             ), chosen AS ( \
               SELECT id FROM ranked WHERE status = 'pending' OR nth <= $5 \
               ORDER BY ord, next_attempt_at, id LIMIT $6 \
             ) \
             UPDATE deliveries SET status = 'sending', updated_at = $2, \
               lease_expires_at = $2 + $7 + 1000 * (SELECT timeout_seconds FROM destinations d \
                                                    WHERE d.id = deliveries.destination_id) \
             WHERE id IN (SELECT id FROM chosen) \
             RETURNING {}",
            shared::DELIVERY
        );
        let ids: Vec<String> = destinations.iter().map(|d| d.to_string()).collect();
        let mut writer = self.writer(&self.pool).await?;
        let mut tx = writer.begin().await?;
        Self::lock_claims(&mut tx).await?;
        let rows = sqlx::query_as::<_, rows::DeliveryRow>(&sql)
            .bind(&ids)
            .bind(now)
            .bind(limits.retries > 0)
            .bind(limits.per_destination)
            .bind(limits.retries)
            .bind(limit)
            .bind(lease_margin_ms)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        let mut claimed: Vec<Delivery> = rows::convert_all(rows)?;
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
