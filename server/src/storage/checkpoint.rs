//! SQLite's WAL checkpoints, moved off the write path (docs §7).
//!
//! By default SQLite checkpoints inside the `COMMIT` that takes the WAL past 1,000 pages:
//! that writer copies the WAL back into the database file and syncs both, while it still
//! holds the write gate, so every claim, finish and publish queued behind it waits too.
//! After a retention batch (thousands of index pages freed) that is tens of milliseconds.
//!
//! Here a task of the store's own does the copying: woken by a commit, it waits
//! [`Checkpointer::PERIOD`] for more to gather, then runs `PRAGMA wal_checkpoint(PASSIVE)`
//! on a connection of its own. A passive checkpoint takes neither the write lock nor the
//! gate: writers append to the WAL while it copies. Idle, the task sleeps; it ends when
//! the store is dropped or its pool closed.
//!
//! Copying is not all: the WAL file is *started over* (written again from its beginning)
//! only by a writer whose transaction began after a checkpoint had copied all of it. At
//! low load that happens soon after each pass. Under a steady stream of writes it never
//! does: by the time a pass ends, the next writer's transaction is already open. There the
//! writers' own checkpoint bounds the WAL: the `COMMIT` that takes it past
//! [`BACKSTOP_PAGES`] checkpoints with the gate held, which copies only the tail the task
//! has not copied yet, and the next writer starts the WAL over. So the WAL file stays
//! under about [`BACKSTOP_PAGES`] pages (40 MiB), and that writer pays a short copy and
//! two syncs once per 40 MiB written. (Finishing every pass under the gate instead bounded
//! the WAL tighter but cost dispatch 2–3× its p99 during a retention purge: two syncs a
//! pass, four passes a second.)

use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
use sqlx::{ConnectOptions as _, Connection as _};
use tokio::sync::mpsc;

/// The WAL size (pages) at which a writer's own `COMMIT` checkpoints: the bound on the WAL
/// under a steady stream of writes, and the backstop should the task fall behind
/// (SQLite's default is 1,000).
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
    commits: mpsc::Receiver<()>,
}

impl Checkpointer {
    /// How long after a commit the task checkpoints, so that a burst of commits costs one
    /// checkpoint, not one each.
    pub const PERIOD: Duration = Duration::from_millis(250);

    /// A checkpointer for the database of `options` (its own connection), stopping when
    /// `pool` closes or every [`Committed`] is dropped; and the handle the writers tell.
    pub fn new(options: SqliteConnectOptions, pool: SqlitePool) -> (Self, Committed) {
        let (tell, commits) = mpsc::channel(1);
        (
            Self {
                options,
                pool,
                commits,
            },
            Committed(tell),
        )
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
            let done: sqlx::Result<(i64, i64, i64)> =
                sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                    .fetch_one(&mut *c)
                    .await;
            if let Err(e) = done {
                tracing::warn!(error = %e, "checkpointing the WAL failed; trying again later");
                conn = None;
            }
        }
        if let Some(c) = conn {
            let _ = c.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::Store;
    use super::super::write::Durability;
    use super::*;

    type SqliteStore = Store<super::super::sqlite::Sqlite>;

    fn file_len(path: &std::path::Path) -> u64 {
        std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
    }

    async fn store_at(path: &std::path::Path) -> SqliteStore {
        SqliteStore::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap()
    }

    /// One statement through the store's writers (the gate and its kept connection).
    async fn write(store: &SqliteStore, durability: Durability, sql: &'static str) {
        store
            .writes
            .writer(durability)
            .await
            .unwrap()
            .execute(sqlx::query(sql))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn committed_pages_reach_the_database_file_without_a_writer_checkpointing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let store = store_at(&path).await;
        let write = |sql| write(&store, Durability::Full, sql);
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
    async fn under_a_steady_stream_of_writes_the_wal_stays_within_the_backstop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = store_at(&path).await;
        let write = |sql| write(&store, Durability::Engine, sql);
        write("CREATE TABLE t (v INTEGER)").await;
        // Commits back to back from two tasks queueing at the gate, each appending at
        // least one frame: far more than the backstop's worth in all, while the task's
        // passes run and never see the WAL without an open writer.
        let target = 2 * u64::from(BACKSTOP_PAGES) + 5_000;
        let commits = std::sync::atomic::AtomicU64::new(0);
        let stream = || async {
            while commits.load(std::sync::atomic::Ordering::Relaxed) < target {
                write("INSERT INTO t VALUES (1)").await;
                commits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        };
        tokio::join!(stream(), stream());
        // The file's length is the most frames the WAL ever held (a page and a 24-byte
        // header each): never far past the backstop, though it was passed twice. (On a
        // loaded machine the backstop's own checkpoint may not complete at the first
        // commit past it, and the next ones add their frames meanwhile: CI saw 11,034.
        // Without the backstop the WAL holds every one of the 25,000 commits.)
        let frames = file_len(&dir.path().join("s.db-wal")) / (4096 + 24);
        assert!(
            frames <= u64::from(BACKSTOP_PAGES) + 3_000,
            "the WAL grew to {frames} frames"
        );
    }

    #[tokio::test]
    async fn the_checkpointer_stops_when_the_store_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("d.db"))
            .create_if_missing(true);
        let pool = SqlitePool::connect_with(options.clone()).await.unwrap();
        let (checkpointer, committed) = Checkpointer::new(options, pool);
        let task = tokio::spawn(checkpointer.run());
        committed.tell();
        drop(committed);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the task ended")
            .unwrap();
    }
}
