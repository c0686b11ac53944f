//! The embedded default: one SQLite file in WAL mode.
//!
//! Commits are `synchronous = FULL`, so an answer given after a commit survives
//! a power cut, not only a crash of the process. SQLite has one writer: the process's
//! writers queue on the write gate ([`Writes`]) and open `BEGIN IMMEDIATE` transactions.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};

use super::checkpoint::{Checkpointer, BACKSTOP_PAGES};
use super::destinations::{DestinationRow, DESTINATION};
use super::queue::{claim_for_tail, claim_sql, claimed_from, fifo_head, ClaimedOne, ClaimedRow};
use super::store::{convert_all, ClaimedFor, Dialect, Store};
use super::write::{WriteTx, Writer, Writes};
use super::{Backend, ClaimLimits, RawPool, Result, StorageError};
use crate::domain::*;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// SQLite's dialect.
#[derive(Debug, Clone, Copy)]
pub struct Sqlite;

impl Store<Sqlite> {
    /// Opens (creating if needed, with its parent folder) the database at `url`.
    ///
    /// A new database gets `auto_vacuum = INCREMENTAL` (set on every connection before
    /// `journal_mode`; SQLite takes it only while the file has no table yet, so on an
    /// existing database it changes nothing): pages freed by the retention purge go back
    /// to the file system through `PRAGMA incremental_vacuum` (docs §8 "Retention").
    /// `partyflow vacuum` converts an older file.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .auto_vacuum(SqliteAutoVacuum::Incremental)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10))
            // Statement journals and sorts in memory: on disk each was a file created and
            // unlinked in /var/tmp, which a publish and a claim did once an event.
            .pragma("temp_store", "memory")
            // Checkpoints are the checkpointer's ([`Checkpointer`]), not a `COMMIT`'s made
            // while the write gate is held; a writer checkpoints only past the backstop.
            .pragma("wal_autocheckpoint", BACKSTOP_PAGES.to_string());
        if let Some(parent) = options.get_filename().parent() {
            if !parent.as_os_str().is_empty() {
                std::fs::create_dir_all(parent)?;
            }
        }
        // No ping before a pooled connection is handed out (sqlx's default): a connection to
        // a local file cannot go stale, and the ping was a round trip to the connection's
        // thread on every acquire.
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .acquire_timeout(super::ACQUIRE_TIMEOUT)
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await?;
        // The engine's own bookkeeping commits with `synchronous = NORMAL` ([`Durability::Engine`]).
        let engine_pool = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(super::ACQUIRE_TIMEOUT)
            .test_before_acquire(false)
            .connect_with(options.clone().synchronous(SqliteSynchronous::Normal))
            .await?;
        let (checkpointer, committed) = Checkpointer::new(options, pool.clone());
        tokio::spawn(checkpointer.run());
        let writes = Writes::new(
            pool.clone(),
            engine_pool.clone(),
            true,
            Some("BEGIN IMMEDIATE"),
        )
        .telling(committed);
        Ok(Store::new(pool, engine_pool, writes))
    }
}

impl Dialect for Sqlite {
    type DB = sqlx::Sqlite;

    const BACKEND: Backend = Backend::Sqlite;

    /// The due-queue index, named: without statistics SQLite may pick the status index
    /// and walk every waiting delivery (a million-row retry backlog: a fifth of a second).
    const DUE_INDEX: &'static str = "INDEXED BY deliveries_due";

    async fn migrate(pool: &SqlitePool) -> Result<()> {
        MIGRATOR
            .run(pool)
            .await
            .map_err(|e| StorageError::Other(e.into()))
    }

    /// Changes to `users` that depend on the other users (the first admin, the last
    /// admin) need no lock here: SQLite has one writer at a time, and these
    /// transactions write first.
    async fn lock_users(_tx: &mut WriteTx<'_, sqlx::Sqlite>) -> Result<()> {
        Ok(())
    }

    /// One statement, sent with the `BEGIN IMMEDIATE` that opens its transaction: SQLite
    /// has a single writer (the gate and `BEGIN IMMEDIATE` make claims one at a time), so
    /// the in-flight count it reads is exact.
    async fn claim_in<'w>(
        writer: &'w mut Writer<'_, sqlx::Sqlite>,
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
        limits: &ClaimLimits,
    ) -> Result<(WriteTx<'w, sqlx::Sqlite>, Vec<ClaimedOne>)> {
        let sql = format!("{}{}", writer.opening(), claim_sql(Self::DUE_INDEX));
        let query = sqlx::query(&sql)
            .bind(now)
            .bind(limit)
            .bind(lease_margin_ms)
            .bind(limits.per_destination)
            .bind(limits.retries);
        let (tx, results) = writer.begin_with(query).await?;
        let rows = rows_of(&results, 1)?;
        Ok((tx, claimed_from(rows)?))
    }

    /// One statement for all the destinations, like PostgreSQL's: each one's earliest due
    /// deliveries (a correlated `IN (… LIMIT` the cap`)`, SQLite having no `LATERAL`), cut
    /// to its free slots by rank; a FIFO one's head when it has nothing in flight. Each
    /// statement is a round trip to sqlx's connection thread, made while the write lock
    /// is held: a loop of three per destination cost more than the claim itself. The
    /// `BEGIN IMMEDIATE` that opens the transaction and the read of the named
    /// destinations travel in the same string: the whole is one round trip.
    async fn claim_for_in<'w>(
        writer: &'w mut Writer<'_, sqlx::Sqlite>,
        destinations: &[DestinationId],
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
        limits: &ClaimLimits,
    ) -> Result<ClaimedFor<'w, sqlx::Sqlite>> {
        let sql = format!(
            "{opening}WITH targets AS ( \
               SELECT t.value AS destination_id, t.key AS ord, \
                 COALESCE(dst.ordering = 'fifo', FALSE) AS fifo, \
                 (SELECT COUNT(*) FROM deliveries b \
                  WHERE b.destination_id = t.value AND b.status = 'sending') AS busy \
               FROM json_each($1) AS t LEFT JOIN destinations dst ON dst.id = t.value \
             ), due AS ( \
               SELECT x.id, x.destination_id, x.status, x.next_attempt_at, targets.ord, targets.busy \
               FROM targets JOIN deliveries x ON x.id IN ( \
                 SELECT id FROM deliveries \
                 WHERE destination_id = targets.destination_id AND NOT targets.fifo \
                   AND status IN ('pending', 'retrying') AND paused = FALSE \
                   AND next_attempt_at <= $2 AND ($3 OR status = 'pending') \
                 ORDER BY next_attempt_at, id LIMIT $4) \
               UNION ALL \
               SELECT h.id, h.destination_id, h.status, h.next_attempt_at, targets.ord, targets.busy \
               FROM targets JOIN deliveries h ON h.id = ({head}) \
               WHERE targets.fifo AND targets.busy = 0 AND $4 >= 1 \
                 AND h.paused = FALSE AND h.next_attempt_at <= $2 AND ($3 OR h.status = 'pending') \
             ), fits AS ( \
               SELECT * FROM ( \
                 SELECT id, status, next_attempt_at, ord, \
                   ROW_NUMBER() OVER (PARTITION BY destination_id ORDER BY next_attempt_at, id) \
                     + busy AS slot \
                 FROM due) \
               WHERE slot <= $4 \
             ){tail}; \
             SELECT {DESTINATION} FROM destinations WHERE id IN (SELECT value FROM json_each($1))",
            opening = writer.opening(),
            head = fifo_head("targets.destination_id"),
            tail = claim_for_tail("fits"),
        );
        let ids: Vec<String> = destinations.iter().map(|d| d.to_string()).collect();
        let query = sqlx::query(&sql)
            .bind(serde_json::to_string(&ids).map_err(|e| StorageError::Internal(e.to_string()))?)
            .bind(now)
            .bind(limits.retries > 0)
            .bind(limits.per_destination)
            .bind(limits.retries)
            .bind(limit)
            .bind(lease_margin_ms);
        let (tx, results) = writer.begin_with(query).await?;
        // BEGIN, then the claim's rows, then the destinations'.
        let rows: Vec<ClaimedRow> = rows_of(&results, 1)?;
        let read: Vec<DestinationRow> = rows_of(&results, 2)?;
        Ok((tx, claimed_from(rows)?, Some(convert_all(read)?)))
    }

    fn raw_pool(pool: &SqlitePool) -> RawPool {
        RawPool::Sqlite(pool.clone())
    }
}

/// The rows of statement `n` (from 0) of a batch's results, as `T`.
pub(super) fn rows_of<T>(
    results: &[sqlx::Either<sqlx::sqlite::SqliteQueryResult, sqlx::sqlite::SqliteRow>],
    n: usize,
) -> Result<Vec<T>>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>,
{
    let mut statement = 0;
    let mut rows = Vec::new();
    for step in results {
        match step {
            sqlx::Either::Left(_) => statement += 1,
            sqlx::Either::Right(row) if statement == n => rows.push(T::from_row(row)?),
            sqlx::Either::Right(_) => {}
        }
    }
    Ok(rows)
}

/// What `partyflow vacuum` did to a SQLite database.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Vacuumed {
    /// `PRAGMA auto_vacuum` before and after: 0 none, 1 full, 2 incremental.
    pub auto_vacuum_before: i64,
    pub auto_vacuum: i64,
    /// The database's size (pages × page size) before and after.
    pub bytes_before: i64,
    pub bytes: i64,
}

/// Converts an existing SQLite database to `auto_vacuum = INCREMENTAL` and compacts it
/// (`VACUUM`: rewrites the whole file, so the server must be stopped; it needs free disk
/// space for a copy of the database). A database made by this version already is
/// incremental; the `VACUUM` then only compacts it.
pub async fn vacuum(pool: &RawPool) -> anyhow::Result<Vacuumed> {
    let RawPool::Sqlite(pool) = pool else {
        anyhow::bail!(
            "vacuum converts a SQLite database; PostgreSQL's autovacuum reuses the space itself"
        );
    };
    // One connection throughout: the setting and the VACUUM that applies it.
    let mut conn = pool.acquire().await?;
    let size = "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()";
    let (auto_vacuum_before,): (i64,) = sqlx::query_as("PRAGMA auto_vacuum")
        .fetch_one(&mut *conn)
        .await?;
    let (bytes_before,): (i64,) = sqlx::query_as(size).fetch_one(&mut *conn).await?;
    sqlx::query("PRAGMA auto_vacuum = INCREMENTAL")
        .execute(&mut *conn)
        .await?;
    sqlx::query("VACUUM").execute(&mut *conn).await?;
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut *conn)
        .await?;
    let (auto_vacuum,): (i64,) = sqlx::query_as("PRAGMA auto_vacuum")
        .fetch_one(&mut *conn)
        .await?;
    let (bytes,): (i64,) = sqlx::query_as(size).fetch_one(&mut *conn).await?;
    Ok(Vacuumed {
        auto_vacuum_before,
        auto_vacuum,
        bytes_before,
        bytes,
    })
}
