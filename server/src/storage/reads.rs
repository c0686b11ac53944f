//! The connections reads go through: [`Reads`] is an executor (`.fetch_one(&self.read)`),
//! backed by a sqlx pool.
//!
//! On SQLite it keeps its connections itself, taken out of the pool once
//! ([`PoolConnection::detach`](sqlx::pool::PoolConnection::detach)), and hands them out
//! one read at a time. sqlx 0.8 pings every connection given back to a pool, from a task
//! spawned for it; on SQLite the ping is a round trip to the connection's own thread,
//! which doubled the round trips of every read (a publish makes three, the engine one per
//! ended attempt), and each round trip costs a thread wake-up on both sides. A kept read
//! connection goes back without one. The ping's other purpose, flushing what a dropped
//! query left behind, is kept: a connection goes back only after its statement ran to the
//! end; one whose read was dropped midway is closed, and the pool opens another.
//!
//! PostgreSQL reads go through the pool as they are (a connection there is a socket to a
//! server that may have gone away, which the ping notices).

use std::sync::{Arc, Mutex};

use futures_util::future::{BoxFuture, FutureExt as _};
use futures_util::stream::{self, BoxStream, StreamExt as _, TryStreamExt as _};
use sqlx::{Database, Describe, Either, Error, Execute, Executor, Pool};
use tokio::sync::{Semaphore, SemaphorePermit};

/// The read side of a store: a pool, and on SQLite the connections it keeps.
#[derive(Debug)]
pub struct Reads<DB: Database> {
    pool: Pool<DB>,
    kept: Option<Arc<Kept<DB>>>,
}

impl<DB: Database> Clone for Reads<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            kept: self.kept.clone(),
        }
    }
}

/// Idle kept connections, and a permit for each connection that may be out at once.
struct Kept<DB: Database> {
    idle: Mutex<Vec<DB::Connection>>,
    permits: Semaphore,
}

impl<DB: Database> std::fmt::Debug for Kept<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("available", &self.permits.available_permits())
            .finish()
    }
}

impl<DB: Database> Reads<DB> {
    /// Reads through `pool`; with `keep`, through connections taken out of it once and
    /// kept (as many at once as the pool's maximum).
    pub fn new(pool: Pool<DB>, keep: bool) -> Self {
        let kept = keep.then(|| {
            Arc::new(Kept {
                idle: Mutex::new(Vec::new()),
                permits: Semaphore::new(pool.options().get_max_connections() as usize),
            })
        });
        Self { pool, kept }
    }

    /// The pool behind (migrations, the pool gauges, what a connection needs to open).
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Kept connections open now, idle or out (none without keeping).
    pub fn kept_connections(&self) -> (u32, u32) {
        let Some(kept) = &self.kept else {
            return (0, 0);
        };
        let idle = kept.idle.lock().unwrap_or_else(|p| p.into_inner()).len() as u32;
        let max = self.pool.options().get_max_connections();
        let out = max - kept.permits.available_permits() as u32;
        (idle + out, idle)
    }
}

impl<DB: Database> Kept<DB> {
    /// A permit and a kept connection (opened from `pool` when none is idle). Give it
    /// back with [`Kept::give_back`] once its statement has run to the end; dropped
    /// instead, it closes.
    async fn take(&self, pool: &Pool<DB>) -> Result<(SemaphorePermit<'_>, DB::Connection), Error> {
        // A closed pool closes what it lent out too.
        if pool.is_closed() {
            self.idle.lock().unwrap_or_else(|p| p.into_inner()).clear();
            return Err(Error::PoolClosed);
        }
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| Error::PoolClosed)?;
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match idle {
            Some(conn) => conn,
            None => pool.acquire().await?.detach(),
        };
        Ok((permit, conn))
    }

    fn give_back(&self, conn: DB::Connection) {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(conn);
    }
}

impl<'p, DB: Database> Executor<'p> for &'_ Reads<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    type Database = DB;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<DB::QueryResult, DB::Row>, Error>>
    where
        E: 'q + Execute<'q, DB>,
    {
        let Some(kept) = self.kept.clone() else {
            return (&self.pool).fetch_many(query);
        };
        let pool = self.pool.clone();
        // Read to the end, then handed out: the connection goes back before the rows do.
        let all = async move {
            let (permit, mut conn) = kept.take(&pool).await?;
            let rows: Result<Vec<_>, Error> = conn.fetch_many(query).try_collect().await;
            kept.give_back(conn);
            drop(permit);
            Ok::<_, Error>(stream::iter(rows?.into_iter().map(Ok)))
        };
        stream::once(all).try_flatten().boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<DB::Row>, Error>>
    where
        E: 'q + Execute<'q, DB>,
    {
        let Some(kept) = self.kept.clone() else {
            return (&self.pool).fetch_optional(query);
        };
        let pool = self.pool.clone();
        async move {
            let (permit, mut conn) = kept.take(&pool).await?;
            let row = conn.fetch_optional(query).await;
            kept.give_back(conn);
            drop(permit);
            row
        }
        .boxed()
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [DB::TypeInfo],
    ) -> BoxFuture<'e, Result<DB::Statement<'q>, Error>> {
        let pool = self.pool.clone();
        async move { pool.prepare_with(sql, parameters).await }.boxed()
    }

    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, Result<Describe<DB>, Error>> {
        let pool = self.pool.clone();
        async move { pool.describe(sql).await }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

    async fn reads(dir: &tempfile::TempDir, max: u32) -> Reads<sqlx::Sqlite> {
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("r.db"))
            .create_if_missing(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(max)
            .connect_with(options)
            .await
            .unwrap();
        sqlx::query("CREATE TABLE t (v INTEGER)")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO t (v) VALUES (1), (2), (3)")
            .execute(&pool)
            .await
            .unwrap();
        Reads::new(pool, true)
    }

    #[tokio::test]
    async fn a_kept_connection_serves_read_after_read_and_rows_arrive_whole() {
        let dir = tempfile::tempdir().unwrap();
        let reads = reads(&dir, 2).await;
        // A temporary table lives as long as its connection: one kept connection answers
        // every read made one after the other.
        sqlx::query("CREATE TEMP TABLE mine (v INTEGER)")
            .execute(&reads)
            .await
            .unwrap();
        sqlx::query("INSERT INTO temp.mine (v) VALUES (7)")
            .execute(&reads)
            .await
            .unwrap();
        let (v,): (i64,) = sqlx::query_as("SELECT v FROM temp.mine")
            .fetch_one(&reads)
            .await
            .unwrap();
        assert_eq!(v, 7);
        let all: Vec<(i64,)> = sqlx::query_as("SELECT v FROM t ORDER BY v")
            .fetch_all(&reads)
            .await
            .unwrap();
        assert_eq!(all, vec![(1,), (2,), (3,)]);
        let none: Option<(i64,)> = sqlx::query_as("SELECT v FROM t WHERE v = 9")
            .fetch_optional(&reads)
            .await
            .unwrap();
        assert_eq!(none, None);
        // A refused statement leaves the connection usable.
        assert!(sqlx::query("SELECT nothing FROM nowhere")
            .fetch_all(&reads)
            .await
            .is_err());
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM temp.mine")
            .fetch_one(&reads)
            .await
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(reads.kept_connections(), (1, 1));
        // Closing the pool closes the kept connections too.
        reads.pool().close().await;
        assert!(matches!(
            sqlx::query("SELECT 1").execute(&reads).await,
            Err(Error::PoolClosed)
        ));
        assert_eq!(reads.kept_connections(), (0, 0));
    }

    #[tokio::test]
    async fn reads_at_once_use_at_most_the_pools_maximum_and_a_dropped_read_closes_its_connection()
    {
        let dir = tempfile::tempdir().unwrap();
        let reads = reads(&dir, 2).await;
        let slow =
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000) \
                    SELECT COUNT(*) FROM c";
        let many = (0..6).map(|_| sqlx::query_as::<_, (i64,)>(slow).fetch_one(&reads));
        for (n,) in futures_util::future::try_join_all(many).await.unwrap() {
            assert_eq!(n, 200_000);
        }
        assert_eq!(reads.kept_connections(), (2, 2));
        // A read dropped before its answer: its connection is not given back.
        let dropped = tokio::time::timeout(
            std::time::Duration::from_micros(50),
            sqlx::query_as::<_, (i64,)>(slow).fetch_one(&reads),
        )
        .await;
        assert!(dropped.is_err());
        assert_eq!(reads.kept_connections(), (1, 1));
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM t")
            .fetch_one(&reads)
            .await
            .unwrap();
        assert_eq!(n, 3);
    }
}
