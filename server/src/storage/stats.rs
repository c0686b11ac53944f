//! The console's counts and charts: backlog, histogram, failing destinations.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use super::destinations::{DestinationRow, DESTINATION};
use super::store::{convert_all, Args, Conn, DbRow, Dialect, Sql, SqlArg, SqlValue, Store};
use super::*;

/// The console's overview and counters.
#[async_trait]
pub trait ConsoleStats: Send + Sync + std::fmt::Debug {
    /// Waiting deliveries of a destination that are paused (resume on re-enable).
    async fn count_paused(&self, destination_id: DestinationId) -> Result<i64>;
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
    /// Failed deliveries of a destination not resent yet (what "Send again all failed" would pick).
    async fn count_failed_unresent(&self, destination_id: DestinationId) -> Result<i64>;
    /// Events recorded by [`DispatchQueue::take_rate_slot`](super::DispatchQueue::take_rate_slot) under `key` within the window, without taking one.
    async fn count_rate_events(&self, key: &str, window_ms: i64, now: UnixMs) -> Result<i64>;
    /// The unfinished deliveries by state, each counted up to `cap` (the metrics' queue
    /// gauges): pending and retrying through the due index, sending through the status
    /// index, paused through the inactive destinations; never a walk of the whole table.
    async fn queue_counts(&self, cap: i64) -> Result<QueueCounts>;
    /// The database pools' connections right now (no query).
    fn pool_connections(&self) -> Vec<PoolConnections>;
}

#[async_trait]
impl<D: Dialect> ConsoleStats for Store<D>
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
    async fn count_paused(&self, destination_id: DestinationId) -> Result<i64> {
        let (n,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM deliveries WHERE destination_id = $1 \
             AND status IN ('pending', 'retrying') AND paused = TRUE",
        )
        .bind(destination_id.to_string())
        .fetch_one(&self.read)
        .await?;
        Ok(n)
    }

    async fn count_deliveries(
        &self,
        f: &DeliveryFilter,
        before: Option<DeliveryId>,
        cap: i64,
    ) -> Result<i64> {
        let mut q = Sql::<D>::new("SELECT COUNT(*) FROM (SELECT 1 FROM deliveries WHERE 1 = 1");
        super::deliveries::push_filter(&mut q, f);
        if let Some(before) = before {
            q.push(" AND id < ").push_bind(before.to_string());
        }
        q.push(" LIMIT ").push_bind(cap).push(") AS matching");
        let (sql, args) = q.into_parts()?;
        let (n,): (i64,) = sqlx::query_as_with(&sql, args)
            .fetch_one(&self.read)
            .await?;
        Ok(n)
    }

    async fn delivery_histogram(
        &self,
        space_id: Option<SpaceId>,
        since: UnixMs,
        bucket_ms: i64,
    ) -> Result<Vec<(SpaceId, UnixMs, DeliveryStatus, Option<ErrorClass>, i64)>> {
        let rows: Vec<(String, i64, String, Option<String>, i64)> = sqlx::query_as(
            "SELECT space_id, (created_at / $1) * $1, status, last_error_class, COUNT(*) FROM deliveries \
             WHERE id >= $2 AND ($3 IS NULL OR space_id = $3) GROUP BY 1, 2, 3, 4",
        )
        .bind(bucket_ms.max(1))
        .bind(DeliveryId::lower_bound_at(since).to_string())
        .bind(space_id.map(|s| s.to_string()))
        .fetch_all(&self.read)
        .await?;
        let corrupt = |what: &str, e: &dyn std::fmt::Display| {
            StorageError::Corrupt(format!("deliveries.{what}: {e}"))
        };
        rows.into_iter()
            .map(|(space, bucket, status, class, n)| {
                Ok((
                    space.parse().map_err(|e| corrupt("space_id", &e))?,
                    bucket,
                    status.parse().map_err(|e| corrupt("status", &e))?,
                    class
                        .map(|c| c.parse())
                        .transpose()
                        .map_err(|e| corrupt("last_error_class", &e))?,
                    n,
                ))
            })
            .collect()
    }

    async fn delivery_backlog(&self) -> Result<Vec<(SpaceId, i64, i64, i64)>> {
        let rows: Vec<(String, String, bool, i64)> = sqlx::query_as(
            "SELECT space_id, status, paused, COUNT(*) FROM deliveries \
             WHERE status IN ('pending', 'retrying', 'sending') GROUP BY space_id, status, paused",
        )
        .fetch_all(&self.read)
        .await?;
        let mut out: Vec<(SpaceId, i64, i64, i64)> = Vec::new();
        for (space, status, paused, n) in rows {
            let space: SpaceId = space
                .parse()
                .map_err(|e| StorageError::Corrupt(format!("deliveries.space_id: {e}")))?;
            let i = match out.iter().position(|(s, ..)| *s == space) {
                Some(i) => i,
                None => {
                    out.push((space, 0, 0, 0));
                    out.len() - 1
                }
            };
            if status == "sending" {
                out[i].3 += n;
            } else {
                out[i].1 += n;
                if paused {
                    out[i].2 += n;
                }
            }
        }
        Ok(out)
    }

    async fn failing_destinations(&self, limit: i64) -> Result<Vec<Destination>> {
        let sql = format!(
            "SELECT {} FROM destinations WHERE status = 'inactive' OR consecutive_dead_letters > 0 \
             ORDER BY CASE WHEN status = 'inactive' THEN 0 ELSE 1 END, consecutive_dead_letters DESC, id \
             LIMIT $1",
            DESTINATION
        );
        let rows = sqlx::query_as::<_, DestinationRow>(&sql)
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        convert_all(rows)
    }

    async fn count_failed_unresent(&self, destination_id: DestinationId) -> Result<i64> {
        let (n,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM deliveries WHERE destination_id = $1 AND status = 'failed' AND resent_as IS NULL",
        )
        .bind(destination_id.to_string())
        .fetch_one(&self.read)
        .await?;
        Ok(n)
    }

    async fn count_rate_events(&self, key: &str, window_ms: i64, now: UnixMs) -> Result<i64> {
        let (n,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM rate_events WHERE key = $1 AND at > $2")
                .bind(key)
                .bind(now - window_ms)
                .fetch_one(&self.read)
                .await?;
        Ok(n)
    }

    async fn queue_counts(&self, cap: i64) -> Result<QueueCounts> {
        let due = format!(
            "SELECT COUNT(*) FROM (SELECT 1 FROM deliveries {} \
             WHERE status IN ('pending', 'retrying') AND paused = FALSE AND status = $1 \
             LIMIT $2) AS due",
            D::DUE_INDEX
        );
        let mut counts = QueueCounts::default();
        for (status, n) in [
            ("pending", &mut counts.pending),
            ("retrying", &mut counts.retrying),
        ] {
            (*n,) = sqlx::query_as(&due)
                .bind(status)
                .bind(cap)
                .fetch_one(&self.read)
                .await?;
        }
        (counts.sending,) = sqlx::query_as(
            "SELECT COUNT(*) FROM (SELECT 1 FROM deliveries WHERE status = 'sending' LIMIT $1) AS s",
        )
        .bind(cap)
        .fetch_one(&self.read)
        .await?;
        // Only inactive destinations have paused deliveries (docs D6): start from them.
        (counts.paused,) = sqlx::query_as(
            "SELECT COUNT(*) FROM (SELECT 1 FROM destinations dst \
             JOIN deliveries d ON d.destination_id = dst.id \
             WHERE dst.status = 'inactive' AND d.status IN ('pending', 'retrying') AND d.paused = TRUE \
             LIMIT $1) AS p",
        )
        .bind(cap)
        .fetch_one(&self.read)
        .await?;
        Ok(counts)
    }

    fn pool_connections(&self) -> Vec<PoolConnections> {
        // A read connection kept out of the pool ([`super::reads`]) still counts as open.
        let of = |pool: &'static str, r: &super::reads::Reads<D::DB>| {
            let p = r.pool();
            let (kept, kept_idle) = r.kept_connections();
            PoolConnections {
                pool,
                size: p.size() + kept,
                idle: p.num_idle() as u32 + kept_idle,
                max: p.options().get_max_connections(),
            }
        };
        let mut pools = vec![of("main", &self.read)];
        // PostgreSQL's engine shares the one pool.
        if D::BACKEND == Backend::Sqlite {
            pools.push(of("engine", &self.engine_read));
        }
        pools
    }
}
