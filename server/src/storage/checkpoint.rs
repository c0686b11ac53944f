//! SQLite's WAL checkpoints, moved off the write path (docs §7).
//!
//! By default SQLite checkpoints inside the `COMMIT` that takes the WAL past 1,000 pages:
//! that writer copies the WAL back into the database file and syncs both, while it still
//! holds the write gate, so every claim, finish and publish queued behind it waits too.
//! After a retention batch (thousands of index pages freed) that is tens of milliseconds.
//!
//! Here the write connections checkpoint only as a backstop ([`BACKSTOP_PAGES`], should
//! this task fall behind or stop), and a task of their own does the work: woken by a
//! commit, it waits [`Checkpointer::PERIOD`] for more to gather, then runs
//! `PRAGMA wal_checkpoint(PASSIVE)` on a connection of its own. A passive checkpoint
//! takes neither the write lock nor the gate: writers append to the WAL while it copies.
//!
//! A writer starts the WAL over from its beginning only if, when its transaction began,
//! a checkpoint had copied *all* of it. Under a steady stream of writes that is never so
//! after an unguarded pass: by the time it ends, the next writer's transaction is open.
//! Left at that, the WAL grows by everything written until the backstop (tens of
//! megabytes; seen: a 24 MB disk filled by the WAL alone, which freeing other files could
//! not cure). So a second pass follows with the write gate held: it copies only what was
//! appended during the first (often nothing: a short hold), and the next writer starts
//! the WAL over, which stays about one period of writes long. Idle, the task sleeps; it
//! ends when the store is dropped or its pool closed.

use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePool};
use sqlx::{ConnectOptions as _, Connection as _};
use tokio::sync::mpsc;

use super::write::Writes;

/// The WAL size (pages) at which a writer's own `COMMIT` checkpoints anyway: only when the
/// task has fallen far behind (SQLite's default is 1,000).
pub const BACKSTOP_PAGES: u32 = 10_000;

/// What the write path holds: a way to say "something was committed" that never waits.
#[derive(Debug, Clone)]
pub struct Committed(mpsc::Sender<()>);

impl Committed {
    /// A commit happened: the checkpointer will look at the WAL soon. Free when it
    /// already knows.
    pub fn tell(&self) {
        let _ = self.0.try_send(());
    }
}

/// The checkpointing task's settings and state.
pub struct Checkpointer {
    options: SqliteConnectOptions,
    pool: SqlitePool,
    /// For the write gate, held during a second pass.
    writes: Writes<sqlx::Sqlite>,
    commits: mpsc::Receiver<()>,
}

impl Checkpointer {
    /// How long after a commit the task checkpoints, so that a burst of commits costs one
    /// checkpoint, not one each.
    pub const PERIOD: Duration = Duration::from_millis(250);

    /// A checkpointer for the database of `options` (its own connection) whose writers go
    /// through `writes`, stopping when `pool` closes or every [`Committed`] is dropped; and
    /// the handle the writers tell (`writes` itself must not be telling it, or the task
    /// would keep itself alive).
    pub fn new(
        options: SqliteConnectOptions,
        pool: SqlitePool,
        writes: Writes<sqlx::Sqlite>,
    ) -> (Self, Committed) {
        let (tell, commits) = mpsc::channel(1);
        (
            Self {
                options,
                pool,
                writes,
                commits,
            },
            Committed(tell),
        )
    }

    /// One checkpoint: a passive pass, then a second with the gate held, which copies what
    /// writers appended meanwhile (often nothing) and, above all, ends with no write
    /// transaction open. Only a writer that begins after a checkpoint has copied the whole
    /// WAL starts it over; under a stream of writes one is always open by the time the
    /// unguarded pass ends, so without the second pass the WAL is never started over.
    async fn checkpoint(&self, conn: &mut SqliteConnection) -> sqlx::Result<()> {
        let (_, frames, _) = passive(conn).await?;
        if frames > 0 {
            let _gate = self.writes.hold_gate().await;
            passive(conn).await?;
        }
        Ok(())
    }

    /// Runs until the store is gone. A checkpoint that fails is logged and tried again
    /// after the next commit (the backstop keeps the WAL bounded meanwhile).
    pub async fn run(mut self) {
        let mut conn = None;
        loop {
            tokio::select! {
                told = self.commits.recv() => if told.is_none() { break },
                _ = self.pool.close_event() => break,
            }
            tokio::time::sleep(Self::PERIOD).await;
            if conn.is_none() {
                match self.options.connect().await {
                    Ok(c) => conn = Some(c),
                    Err(e) => {
                        tracing::warn!(error = %e, "opening the checkpoint connection failed");
                        continue;
                    }
                }
            }
            let Some(c) = conn.as_mut() else { continue };
            if let Err(e) = self.checkpoint(c).await {
                tracing::warn!(error = %e, "checkpointing the WAL failed; trying again later");
                conn = None;
            }
        }
        if let Some(c) = conn {
            let _ = c.close().await;
        }
    }
}

/// `PRAGMA wal_checkpoint(PASSIVE)`: whether it was blocked, the WAL's frames, and how
/// many of them are now in the database file.
async fn passive(conn: &mut SqliteConnection) -> sqlx::Result<(i64, i64, i64)> {
    sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(conn)
        .await
}

#[cfg(test)]
mod tests {
    use super::super::store::Store;
    use super::super::write::Durability;
    use super::*;

    fn file_len(path: &std::path::Path) -> u64 {
        std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
    }

    #[tokio::test]
    async fn committed_pages_reach_the_database_file_without_a_writer_checkpointing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let store =
            Store::<super::super::sqlite::Sqlite>::connect(&format!("sqlite://{}", path.display()))
                .await
                .unwrap();
        let write = |sql: &'static str| async {
            store
                .writes
                .writer(Durability::Full)
                .await
                .unwrap()
                .execute(sqlx::query(sql))
                .await
                .unwrap()
        };
        write("CREATE TABLE t (v BLOB)").await;
        // About 500 pages: far below the backstop, so no COMMIT checkpoints by itself.
        write("INSERT INTO t SELECT randomblob(2000000)").await;
        let wal = dir.path().join("c.db-wal");
        assert!(file_len(&wal) > 2_000_000, "the write went to the WAL");
        // The checkpointer copies them into the database file soon after.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while file_len(&path) < 2_000_000 {
            assert!(
                std::time::Instant::now() < deadline,
                "not checkpointed: the file has {} bytes",
                file_len(&path)
            );
            tokio::time::sleep(Checkpointer::PERIOD).await;
        }
        // Once checkpointed whole, a write starts the WAL over instead of adding to the
        // ~500 frames there (the file keeps its size; the frames in use are what counts).
        let mut look = <sqlx::SqliteConnection as sqlx::Connection>::connect(&format!(
            "sqlite://{}",
            path.display()
        ))
        .await
        .unwrap();
        loop {
            write("INSERT INTO t VALUES (x'00')").await;
            let (_, frames, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                .fetch_one(&mut look)
                .await
                .unwrap();
            if frames < 10 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the WAL was not started over: {frames} frames"
            );
            tokio::time::sleep(Checkpointer::PERIOD).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_a_steady_stream_of_writes_the_wal_still_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store =
            Store::<super::super::sqlite::Sqlite>::connect(&format!("sqlite://{}", path.display()))
                .await
                .unwrap();
        let write = |sql: &'static str| async {
            store
                .writes
                .writer(Durability::Engine)
                .await
                .unwrap()
                .execute(sqlx::query(sql))
                .await
                .unwrap()
        };
        write("CREATE TABLE t (v INTEGER)").await;
        // No backstop: only the checkpointer can start the WAL over (the gate keeps the
        // one engine connection these writes use).
        write("PRAGMA wal_autocheckpoint = 0").await;
        // Commits back to back for six periods, from two tasks queueing at the gate: every
        // checkpoint's passive pass sees frames appended while it copied.
        let started = std::time::Instant::now();
        let commits = std::sync::atomic::AtomicU64::new(0);
        let stream = || async {
            while started.elapsed() < Checkpointer::PERIOD * 6 {
                write("INSERT INTO t VALUES (1)").await;
                commits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        };
        tokio::join!(stream(), stream());
        // Each commit appended at least one frame (a page and its 24-byte header). Had the
        // WAL never started over, it would hold them all; it holds about a period's worth.
        let commits = commits.into_inner();
        let frames = file_len(&dir.path().join("s.db-wal")) / (4096 + 24);
        assert!(commits > 100, "only {commits} commits");
        assert!(
            frames < commits / 2,
            "the WAL kept growing: {frames} frames after {commits} commits"
        );
    }

    #[tokio::test]
    async fn the_checkpointer_stops_when_the_store_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("d.db"))
            .create_if_missing(true);
        let pool = SqlitePool::connect_with(options.clone()).await.unwrap();
        let writes = Writes::new(pool.clone(), pool.clone(), true, Some("BEGIN IMMEDIATE"));
        let (checkpointer, committed) = Checkpointer::new(options, pool, writes);
        let task = tokio::spawn(checkpointer.run());
        committed.tell();
        drop(committed);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the task ended")
            .unwrap();
    }
}
