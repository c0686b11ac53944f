//! What only tests and the benchmark use: [`TestStorage`] is [`Storage`] plus a few
//! methods the server itself never calls, and the raw pool for their own SQL. Production
//! code holds `dyn Storage` (or a narrower trait), which does not include them.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use super::store::{Args, Conn, DbRow, Dialect, SqlArg, SqlValue, Store};
use super::write::Durability;
use super::*;

/// [`Storage`] with the methods only tests and the benchmark call.
#[async_trait]
pub trait TestStorage: Storage {
    /// [`DispatchQueue::claim`] with the default limits.
    async fn claim_due(
        &self,
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
    ) -> Result<Vec<Delivery>>;

    /// Writes the event and one delivery per active destination of the space that
    /// subscribes to its type, in one transaction; counts the inactive ones it skipped.
    /// With an idempotency key seen before, writes nothing and returns the first answer.
    async fn publish_event(&self, new: &NewEvent, now: UnixMs) -> Result<Published>;

    async fn create_notification(&self, notification: &Notification) -> Result<()>;

    /// The pool, for SQL of the test's own (and for closing it under the server).
    fn raw_pool(&self) -> RawPool;

    /// Whether every write done so far is on disk, and how many times this store has
    /// synced the WAL after a write's commit (SQLite's publishes, [`Durability::Deferred`];
    /// elsewhere always synced, never).
    async fn synced(&self) -> (bool, u64);
}

#[async_trait]
impl<D: Dialect> TestStorage for Store<D>
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
    async fn claim_due(
        &self,
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
    ) -> Result<Vec<Delivery>> {
        let limits = ClaimLimits::default();
        let claimed = DispatchQueue::claim(self, now, limit, lease_margin_ms, &limits).await?;
        Ok(claimed.deliveries)
    }

    async fn publish_event(&self, new: &NewEvent, now: UnixMs) -> Result<Published> {
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        match Self::publish_in(&mut tx, new, now).await? {
            Some(published) => {
                tx.commit().await?;
                Ok(published)
            }
            None => {
                tx.rollback().await?;
                drop(writer);
                let key = new.idempotency_key.as_deref().unwrap_or_default();
                self.first_answer(new.event.space_id, key).await
            }
        }
    }

    async fn create_notification(&self, n: &Notification) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO notifications (id, space_id, kind, subject_kind, subject_id, message, created_at, read_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(n.id.to_string())
        .bind(n.space_id.map(|s| s.to_string()))
        .bind(&n.kind)
        .bind(&n.subject_kind)
        .bind(&n.subject_id)
        .bind(&n.message)
        .bind(n.created_at)
        .bind(n.read_at);
        self.execute(Durability::Full, query).await?;
        Ok(())
    }

    fn raw_pool(&self) -> RawPool {
        D::raw_pool(self.read.pool())
    }

    async fn synced(&self) -> (bool, u64) {
        (self.writes.all_synced().await, self.writes.syncs())
    }
}

/// Opens the database named by `url` (`sqlite://…` or `postgres://…`) with the test-only
/// methods; [`super::connect`] is the server's way in.
pub async fn connect(url: &str) -> anyhow::Result<Arc<dyn TestStorage>> {
    use anyhow::Context as _;
    if url.starts_with("sqlite:") {
        let store = Store::<sqlite::Sqlite>::connect(url)
            .await
            .with_context(|| format!("opening SQLite database {url}"))?;
        Ok(Arc::new(store))
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        let store = Store::<postgres::Postgres>::connect(url)
            .await
            .context("connecting to PostgreSQL")?;
        Ok(Arc::new(store))
    } else {
        anyhow::bail!("unsupported database URL {url:?}: expected sqlite://… or postgres://…")
    }
}
