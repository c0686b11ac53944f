//! Accepted events made durable after the write gate, not under it (SQLite; docs §7).
//!
//! A publish must be on disk before it is answered. With `synchronous = FULL`, SQLite
//! syncs the WAL inside the `COMMIT`, while the writer holds the write lock: every claim
//! and record of the engine queued behind a group of publishes waits for that sync too,
//! which in a flood took a third of the gate's time.
//!
//! Here a publish commits with `synchronous = NORMAL` ([`Durability::Deferred`]): its
//! frames are written to the WAL, not synced, and the gate is free again at once. Before
//! it answers, the publish waits for [`WalSync::sync`], which syncs the WAL file
//! (`fdatasync`) on a blocking thread: the frames of every commit before it are then on
//! disk, exactly what the `FULL` commit made sure of. Publishes that come meanwhile share
//! the next sync: one runs at a time, and it covers every commit made before it began.
//!
//! A publish that finds no other writer waiting for the gate (low load) has nobody for
//! the sync to hold up: it syncs inside its own `COMMIT` instead, on the connection's
//! thread ([`Writer::sync_in_commit`]), and saves the hand-off to a blocking thread and
//! back.
//!
//! Why the WAL file is enough: a commit's frames are in the WAL until a checkpoint copies
//! them into the database file, and SQLite (`synchronous = NORMAL`) syncs the database
//! file after a checkpoint and before the WAL is written over again, so frames gone from
//! the WAL are on disk in the database. A WAL file that is not there was checkpointed
//! whole and removed by the last connection to close, which syncs it first.
//!
//! [`Durability::Deferred`]: super::write::Durability::Deferred
//! [`Writer::sync_in_commit`]: super::write::Writer::sync_in_commit

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The syncing of a SQLite database's WAL file, shared by the writes that defer theirs.
#[derive(Debug)]
pub struct WalSync {
    /// `<database>-wal`.
    wal: PathBuf,
    /// Writes committed without their sync so far ([`WalSync::committed`]).
    commits: AtomicU64,
    /// How many of them the last finished sync covered; held while a sync runs, so the
    /// next waits for it and then knows whether it needs one of its own.
    synced: tokio::sync::Mutex<u64>,
    /// Syncs done (for tests and the curious).
    syncs: AtomicU64,
}

impl WalSync {
    /// The WAL of the database file at `database`.
    pub fn new(database: &Path) -> Self {
        let mut wal = database.as_os_str().to_owned();
        wal.push("-wal");
        Self {
            wal: PathBuf::from(wal),
            commits: AtomicU64::new(0),
            synced: tokio::sync::Mutex::new(0),
            syncs: AtomicU64::new(0),
        }
    }

    /// A write that defers its sync is done with the database (committed, or failed and
    /// maybe committed): the next [`WalSync::sync`] covers it.
    pub fn committed(&self) {
        self.commits.fetch_add(1, Ordering::AcqRel);
    }

    /// Returns once every write [committed](WalSync::committed) before this call is on
    /// disk: at once if a sync that began after them has ended, else after the next one.
    pub async fn sync(&self) -> std::io::Result<()> {
        let mine = self.commits.load(Ordering::Acquire);
        let mut synced = self.synced.lock().await;
        if *synced >= mine {
            return Ok(());
        }
        // Everything committed up to here is in the WAL file (or already checkpointed
        // into the database file): the sync below, which begins after, covers it all.
        let upto = self.commits.load(Ordering::Acquire);
        let wal = self.wal.clone();
        tokio::task::spawn_blocking(move || sync_file(&wal))
            .await
            .map_err(std::io::Error::other)??;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        *synced = upto;
        Ok(())
    }

    /// A write synced the WAL inside its own `COMMIT` (a publish at low load,
    /// [`Writer::sync_in_commit`](super::write::Writer::sync_in_commit)): counted with the
    /// syncs; it needs none of them.
    pub fn synced_in_commit(&self) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether every write committed so far has been synced.
    pub async fn all_synced(&self) -> bool {
        *self.synced.lock().await >= self.commits.load(Ordering::Acquire)
    }

    /// How many syncs have run, those inside a commit included.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

/// `fdatasync` of the file at `path`, opened afresh (SQLite may have removed and made it
/// again since the last sync); a file that is not there has nothing unsynced.
fn sync_file(path: &Path) -> std::io::Result<()> {
    match std::fs::File::open(path) {
        Ok(file) => file.sync_data(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_sync_after_a_commit_runs_and_one_with_nothing_new_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("w.db");
        std::fs::write(dir.path().join("w.db-wal"), b"frames").unwrap();
        let wal = WalSync::new(&db);
        assert!(wal.all_synced().await, "nothing committed yet");
        wal.sync().await.unwrap();
        assert_eq!(wal.syncs(), 0, "nothing to sync");
        wal.committed();
        assert!(!wal.all_synced().await);
        wal.sync().await.unwrap();
        assert_eq!(wal.syncs(), 1);
        assert!(wal.all_synced().await);
        wal.sync().await.unwrap();
        assert_eq!(wal.syncs(), 1, "the last sync covered everything");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_committed_before_a_sync_began_share_it_and_a_later_one_gets_its_own() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s.db-wal"), b"frames").unwrap();
        let wal = Arc::new(WalSync::new(&dir.path().join("s.db")));
        for _ in 0..64 {
            wal.committed();
        }
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let wal = wal.clone();
                tokio::spawn(async move { wal.sync().await.unwrap() })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert!(wal.all_synced().await, "every commit is covered");
        assert_eq!(wal.syncs(), 1, "64 commits made before it shared one sync");
        // A commit while a sync is under way (its lock held) is not covered by it.
        let running = wal.synced.lock().await;
        wal.committed();
        let waiting = tokio::spawn({
            let wal = wal.clone();
            async move { wal.sync().await.unwrap() }
        });
        tokio::task::yield_now().await;
        drop(running);
        waiting.await.unwrap();
        assert_eq!(wal.syncs(), 2, "the later commit got a sync of its own");
        assert!(wal.all_synced().await);
    }

    #[tokio::test]
    async fn a_wal_that_is_not_there_has_nothing_to_sync() {
        let dir = tempfile::tempdir().unwrap();
        let wal = WalSync::new(&dir.path().join("gone.db"));
        wal.committed();
        wal.sync().await.unwrap();
        assert!(wal.all_synced().await);
    }
}
