//! The connections reads go through: [`Reads`] is an executor (`.fetch_one(&self.read)`)
//! over connections it keeps ([`Kept`]), taken out of a sqlx pool once
//! ([`PoolConnection::detach`](sqlx::pool::PoolConnection::detach)) and lent one
//! statement at a time. On PostgreSQL the writers borrow from the same [`Kept`] set.
//!
//! sqlx 0.8 pings every connection given back to a pool, from a task spawned for it, and
//! (by default) every connection it hands out. On SQLite a ping is a round trip to the
//! connection's own thread, on PostgreSQL one to the server: together they doubled or
//! tripled the round trips of every read and write transaction, each one a thread
//! wake-up on both sides and on PostgreSQL a network hop. A kept connection goes back
//! without one. The pings' purposes are kept otherwise:
//! - **flushing what a dropped query left behind**: a connection goes back only after
//!   its statement ran to the end and either succeeded or was refused by the database
//!   itself; one whose read was dropped midway, or that failed any other way (an I/O
//!   error, a protocol error), is closed, and the pool opens another;
//! - **noticing a server that went away** (PostgreSQL): a connection that sat idle
//!   longer than [`Kept`]'s `check_after` is pinged before it is lent again, the way
//!   HikariCP skips its alive-check for a connection used within the last 500 ms
//!   (`aliveBypassWindowMs`). Under load connections never sit that long; after an
//!   outage each stale one fails its ping and is replaced.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::{BoxFuture, FutureExt as _};
use futures_util::stream::{self, BoxStream, StreamExt as _, TryStreamExt as _};
use sqlx::{Connection as _, Database, Describe, Either, Error, Execute, Executor, Pool};
use tokio::sync::{Semaphore, SemaphorePermit};

/// How long a PostgreSQL connection may sit idle and still be lent without a ping
/// (HikariCP's `aliveBypassWindowMs`).
pub const PING_AFTER_IDLE: Duration = Duration::from_millis(500);

/// The read side of a store: a pool, and the connections kept out of it.
#[derive(Debug)]
pub struct Reads<DB: Database> {
    pool: Pool<DB>,
    kept: Arc<Kept<DB>>,
}

impl<DB: Database> Clone for Reads<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            kept: self.kept.clone(),
        }
    }
}

/// Connections taken out of a pool and kept: the idle ones (most recently used last),
/// and a permit for each connection that may be out at once.
pub struct Kept<DB: Database> {
    idle: Mutex<Vec<(DB::Connection, Stamps)>>,
    permits: Semaphore,
    /// A connection older than this is closed when it comes back (the pool's
    /// `max_lifetime`, which a connection taken out of the pool no longer sees).
    max_lifetime: Option<Duration>,
    /// An idle connection older than this is pinged before it is lent (`None`: never,
    /// a local file cannot go away).
    check_after: Option<Duration>,
}

/// When a kept connection was opened, last given back, and last told to plan afresh, and
/// how long until it plans afresh again.
#[derive(Debug, Clone, Copy)]
pub struct Stamps {
    opened: Instant,
    idle_since: Instant,
    replanned: Instant,
    /// `None` until the first time asked ([`Lent::replan_due`]).
    replan_after: Option<Duration>,
}

impl Stamps {
    fn new() -> Self {
        let now = Instant::now();
        Self {
            opened: now,
            idle_since: now,
            replanned: now,
            replan_after: None,
        }
    }
}

impl<DB: Database> std::fmt::Debug for Kept<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("available", &self.permits.available_permits())
            .finish()
    }
}

impl<DB: Database> Reads<DB> {
    /// Reads through connections taken out of `pool` and kept, as many at once as the
    /// pool's maximum; with `check_after`, one idle longer than that is pinged first.
    pub fn new(pool: Pool<DB>, check_after: Option<Duration>) -> Self {
        let kept = Arc::new(Kept {
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(pool.options().get_max_connections() as usize),
            max_lifetime: pool.options().get_max_lifetime(),
            check_after,
        });
        Self { pool, kept }
    }

    /// Opens `n` connections now and keeps them idle, so that the first burst of reads
    /// after a start does not wait while they open (on SQLite each is a thread and its
    /// pragmas, which took up to half a second under load).
    pub async fn warm(&self, n: usize) -> Result<(), Error> {
        let n = n.min(self.kept.permits.available_permits());
        let lent =
            futures_util::future::try_join_all((0..n).map(|_| self.kept.take(&self.pool))).await?;
        for conn in lent {
            conn.give_back();
        }
        Ok(())
    }

    /// The pool behind (migrations, the pool gauges, what a connection needs to open).
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// The kept connections, to lend to writers too (PostgreSQL: one set for the store).
    pub fn kept(&self) -> Arc<Kept<DB>> {
        self.kept.clone()
    }

    /// Kept connections open now, idle or out.
    pub fn kept_connections(&self) -> (u32, u32) {
        let idle = self
            .kept
            .idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len() as u32;
        let max = self.pool.options().get_max_connections();
        let out = max - self.kept.permits.available_permits() as u32;
        (idle + out, idle)
    }
}

/// Whether a connection whose statement ended with `result` may be lent again: it ran to
/// the end, and either succeeded or the database itself refused it (the connection then
/// is as it was). Anything else (an I/O or protocol error) may have left it broken.
pub fn still_usable<T>(result: &Result<T, Error>) -> bool {
    matches!(result, Ok(_) | Err(Error::Database(_)))
}

impl<DB: Database> Kept<DB> {
    /// A kept connection, lent until given back ([`Lent::give_back`]); dropped instead,
    /// it closes. Opened from `pool` when none is idle; an idle one past `check_after`
    /// is pinged first, and closed if it does not answer.
    pub async fn take(&self, pool: &Pool<DB>) -> Result<Lent<'_, DB>, Error> {
        // A closed pool closes what it lent out too.
        if pool.is_closed() {
            self.idle.lock().unwrap_or_else(|p| p.into_inner()).clear();
            return Err(Error::PoolClosed);
        }
        // As long as the pool would wait for one of its own.
        let wait = pool.options().get_acquire_timeout();
        let permit = tokio::time::timeout(wait, self.permits.acquire())
            .await
            .map_err(|_| Error::PoolTimedOut)?
            .map_err(|_| Error::PoolClosed)?;
        loop {
            let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let (conn, stamps) = match idle {
                Some((mut conn, stamps)) => {
                    let since = stamps.idle_since;
                    let stale = self
                        .check_after
                        .is_some_and(|after| since.elapsed() >= after);
                    if stale && conn.ping().await.is_err() {
                        continue;
                    }
                    (conn, stamps)
                }
                None => (pool.acquire().await?.detach(), Stamps::new()),
            };
            return Ok(Lent {
                kept: self,
                _permit: permit,
                conn: Some(conn),
                stamps,
            });
        }
    }
}

/// A kept connection, out: given back with [`Lent::give_back`], closed when dropped.
pub struct Lent<'k, DB: Database> {
    kept: &'k Kept<DB>,
    _permit: SemaphorePermit<'k>,
    conn: Option<DB::Connection>,
    stamps: Stamps,
}

impl<DB: Database> Lent<'_, DB> {
    pub fn conn(&mut self) -> &mut DB::Connection {
        self.conn
            .as_mut()
            .expect("a lent connection is there until given back")
    }

    /// Whether it is time for this connection to plan its statements afresh (the caller
    /// drops its cached plans: `DISCARD PLANS`): `first` after it opened, then after twice
    /// as long each time, up to every `most`. A table grows fastest when it is new; a plan
    /// made then stops fitting soonest.
    pub fn replan_due(&mut self, first: Duration, most: Duration) -> bool {
        let after = self.stamps.replan_after.unwrap_or(first);
        let due = self.stamps.replanned.elapsed() >= after;
        if due {
            self.stamps.replanned = Instant::now();
            self.stamps.replan_after = Some((after * 2).min(most));
        } else {
            self.stamps.replan_after = Some(after);
        }
        due
    }

    /// Puts the connection back among the idle ones (its statements ran to the end), or
    /// closes it past its lifetime.
    pub fn give_back(mut self) {
        let Some(conn) = self.conn.take() else { return };
        if self
            .kept
            .max_lifetime
            .is_some_and(|max| self.stamps.opened.elapsed() >= max)
        {
            return;
        }
        let stamps = Stamps {
            idle_since: Instant::now(),
            ..self.stamps
        };
        self.kept
            .idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((conn, stamps));
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
        let (kept, pool) = (self.kept.clone(), self.pool.clone());
        // Read to the end, then handed out: the connection goes back before the rows do.
        let all = async move {
            let mut lent = kept.take(&pool).await?;
            let rows: Result<Vec<_>, Error> = lent.conn().fetch_many(query).try_collect().await;
            if still_usable(&rows) {
                lent.give_back();
            }
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
        let (kept, pool) = (self.kept.clone(), self.pool.clone());
        async move {
            let mut lent = kept.take(&pool).await?;
            let row = lent.conn().fetch_optional(query).await;
            if still_usable(&row) {
                lent.give_back();
            }
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
        Reads::new(pool, None)
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
    async fn a_kept_connection_past_the_pools_lifetime_is_closed_when_it_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("l.db"))
            .create_if_missing(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(2)
            .max_lifetime(Duration::from_millis(400))
            .connect_with(options)
            .await
            .unwrap();
        let reads = Reads::new(pool, None);
        sqlx::query("SELECT 1").execute(&reads).await.unwrap();
        assert_eq!(reads.kept_connections(), (1, 1));
        // Lent again: its plans are as old as the connection; planned afresh after 100 ms,
        // then not before 200 ms more (and never more than a minute apart).
        let kept = reads.kept();
        let mut lent = kept.take(reads.pool()).await.unwrap();
        let (first, most) = (Duration::from_millis(100), Duration::from_secs(60));
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert!(lent.replan_due(first, most));
        assert!(!lent.replan_due(first, most));
        tokio::time::sleep(Duration::from_millis(130)).await;
        assert!(
            !lent.replan_due(first, most),
            "the next is 200 ms after the first"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(lent.replan_due(first, most));
        // Past the pool's `max_lifetime`: closed on its way back, and a fresh one opened.
        tokio::time::sleep(Duration::from_millis(60)).await;
        lent.give_back();
        assert_eq!(reads.kept_connections(), (0, 0));
        sqlx::query("SELECT 1").execute(&reads).await.unwrap();
        assert_eq!(reads.kept_connections(), (1, 1));
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
