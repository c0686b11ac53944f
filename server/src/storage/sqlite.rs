//! The embedded default: one SQLite file in WAL mode.
//!
//! Commits are `synchronous = FULL`, so an answer given after a commit survives
//! a power cut, not only a crash of the process; publishes commit without the sync and
//! sync the WAL after the write gate, before they answer ([`super::durable`]). SQLite has one writer: the process's
//! writers queue on the write gate ([`Writes`]) and open `BEGIN IMMEDIATE` transactions.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};

use super::checkpoint::{Checkpointer, BACKSTOP_PAGES};
use super::destinations::{DestinationRow, DESTINATION};
use super::durable::WalSync;
use super::queue::{
    claim_choice, claim_for_choice, claim_update, claimed_all, claimed_from, fifo_head, memoized,
    renumbered, slot_date, ClaimedRow, Memo, FINISH_CHUNK, FINISH_PARAMETERS,
};
use super::reads::Reads;
use super::store::{convert_all, Dialect, Store};
use super::write::{WriteTx, Writer, Writes};
use super::{
    Backend, ClaimLimits, ClaimNext, Claimed, FinishEffects, FinishedAttempt, RawPool, Result,
    StorageError,
};
use crate::domain::*;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// The connections reads go through at once (the main pool's; the write gate keeps one more).
const READ_CONNECTIONS: u32 = 8;

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
            .max_connections(READ_CONNECTIONS)
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
        let wal = WalSync::new(options.get_filename());
        let (checkpointer, committed) = Checkpointer::new(options, pool.clone());
        tokio::spawn(checkpointer.run());
        let writes = Writes::new(
            pool.clone(),
            engine_pool.clone(),
            true,
            Some("BEGIN IMMEDIATE"),
        )
        .telling(committed)
        .syncing(wal);
        // A local file cannot go away: a kept connection is never pinged.
        let (read, engine_read) = (Reads::new(pool, None), Reads::new(engine_pool, None));
        // Every read connection open from the start, not while the first requests wait.
        read.warm(READ_CONNECTIONS as usize).await?;
        Ok(Store::new(read, engine_read, writes))
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

    /// The whole claim as one batch of statements ([`claim_batch`]): one round trip to the
    /// connection's thread. SQLite has a single writer (the gate and `BEGIN IMMEDIATE`
    /// make claims one at a time), so the in-flight count it reads is exact.
    async fn claim(
        writer: Writer<'_, sqlx::Sqlite>,
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
        limits: &ClaimLimits,
        _claimer: &str,
    ) -> Result<Claimed> {
        // The slots are dated when the write lock is held, not when it was asked for.
        let now = now.max(crate::clock::now_ms());
        let choice = claim_choice(Self::DUE_INDEX);
        let sql = format!(
            "BEGIN IMMEDIATE; {}",
            claim_batch(
                &Chosen::Many(&choice),
                &Params {
                    now: "$1",
                    margin: "$3",
                    window: "$6",
                    plans: ["$7", "$8", "$9"],
                },
                "id IN (SELECT destination_id FROM deliveries WHERE id IN ( \
                   SELECT id FROM temp.claim_batch WHERE allowed IS NULL OR n <= allowed))",
            )
        );
        let query = sqlx::query(&sql)
            .bind(now)
            .bind(limit)
            .bind(lease_margin_ms)
            .bind(limits.per_destination)
            .bind(limits.retries);
        let results = writer
            .run_transaction_batch(bind_plans(query, limits))
            .await?;
        claimed_by_batch(&results, 0)
    }

    /// One statement's choice for all the destinations, like PostgreSQL's: each one's
    /// earliest due deliveries (a correlated `IN (… LIMIT` the cap`)`, SQLite having no
    /// `LATERAL`), cut to its free slots by rank; a FIFO one's head when it has nothing
    /// in flight; then, as [`Dialect::claim`], the whole claim as one batch of statements
    /// (a loop of three statements per destination once cost more than the claim itself).
    async fn claim_for(
        writer: Writer<'_, sqlx::Sqlite>,
        next: &ClaimNext,
        now: UnixMs,
        _claimer: &str,
    ) -> Result<Claimed> {
        let now = now.max(crate::clock::now_ms());
        let sql = format!(
            "BEGIN IMMEDIATE; {}",
            claim_for_after(0, next.destinations.len(), false)
        );
        let query = bind_claim_for(sqlx::query(&sql), next, now)?;
        let results = writer.run_transaction_batch(query).await?;
        claimed_by_batch(&results, 0)
    }

    const AHEAD: super::Ahead = super::SQLITE_AHEAD;

    const FINISHES_AND_CLAIMS_AT_ONCE: bool = true;

    /// The group's [finish batches](Store::finish_batch) and [`Dialect::claim_for`]'s batch
    /// in one transaction, the claim after the attempts (it sees the slots they freed),
    /// its parameters numbered after theirs ([`renumbered`]). Up to [`FINISH_CHUNK`]
    /// attempts, the whole transaction is one string, one round trip; a larger group
    /// writes its first attempts [`FINISH_CHUNK`] a round trip, the first chunk with the
    /// `BEGIN` ([`Store::begin_finishing`], as [`Store::finish_all_at_once`] does), and
    /// its last ones with the claim.
    async fn finish_and_claim(
        mut writer: Writer<'_, sqlx::Sqlite>,
        batch: &[FinishedAttempt],
        now: UnixMs,
        next: &ClaimNext,
    ) -> Result<(Vec<FinishEffects>, Claimed)> {
        // The slots are dated when the write lock is held, not when it was asked for.
        let now = now.max(crate::clock::now_ms());
        let statements = Store::<Sqlite>::finish_batch_statements();
        let (before, last) = batch.split_at(batch.len().saturating_sub(FINISH_CHUNK));
        let m = last.len();
        let finish_and_claim = format!(
            "{}; {}",
            Store::<Sqlite>::finish_batches(m),
            claim_for_after(m * FINISH_PARAMETERS, next.destinations.len(), false)
        );
        if before.is_empty() {
            let sql = format!("BEGIN IMMEDIATE; {finish_and_claim}");
            let query = Store::<Sqlite>::finish_batches_query(&sql, last, now);
            let results = writer
                .run_transaction_batch(bind_claim_for(query, next, now)?)
                .await?;
            // BEGIN, then each attempt's statements, then the claim's.
            let claimed = claimed_by_batch(&results, m * statements)?;
            let effects = Store::<Sqlite>::finish_batches_effects(results.into_iter().skip(1), m)?;
            return Ok((effects, claimed));
        }
        let (tx, mut effects) = Store::<Sqlite>::begin_finishing(&mut writer, before, now).await?;
        // The claim's batch ends with the `COMMIT`.
        let query = Store::<Sqlite>::finish_batches_query(&finish_and_claim, last, now);
        let results = tx.commit_with(bind_claim_for(query, next, now)?).await?;
        // Each attempt's statements, then the claim's (no `BEGIN` in this string).
        let claimed = claimed_by_batch(&results, m * statements - 1)?;
        effects.extend(Store::<Sqlite>::finish_batches_effects(results, m)?);
        Ok((effects, claimed))
    }

    /// [`claim_for_batch`] with its parameters numbered after `params` others (a
    /// positional `?` counts from the string's first statement on, a `$n` is absolute).
    fn claim_for_after(params: usize, destinations: usize) -> Option<Arc<str>> {
        Some(claim_for_after(params, destinations, false))
    }

    /// It claims nothing when the event `$12` is not there.
    fn claim_for_event_after(params: usize, destinations: usize) -> Option<Arc<str>> {
        Some(claim_for_after(params, destinations, true))
    }

    fn bind_claim_for<'q>(
        query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
        next: &ClaimNext,
        now: UnixMs,
    ) -> Result<sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>> {
        bind_claim_for(query, next, now)
    }

    fn claimed_after(
        results: &[sqlx::Either<sqlx::sqlite::SqliteQueryResult, sqlx::sqlite::SqliteRow>],
        statements: usize,
    ) -> Result<Claimed> {
        // `claimed_by_batch` counts a `BEGIN` first.
        claimed_by_batch(results, statements - 1)
    }

    fn raw_pool(pool: &SqlitePool) -> RawPool {
        RawPool::Sqlite(pool.clone())
    }
}

/// [`claim_for_batch`] with its parameters numbered after `params` others (a positional
/// `?` counts from the string's first statement on, a `$n` is absolute), built once for
/// each shape ([`memoized`]).
fn claim_for_after(params: usize, destinations: usize, guarded: bool) -> Arc<str> {
    static CLAIMS: Memo<(usize, bool, bool), Arc<str>> = Memo::new(Default::default);
    memoized(&CLAIMS, (params, destinations == 1, guarded), || {
        renumbered(&claim_for_batch(destinations, guarded), params).into()
    })
}

/// [`Dialect::claim_for`]'s batch for `destinations` destinations, after its
/// `BEGIN IMMEDIATE`: [`claim_for_one`]'s for one, [`claim_for_many`]'s for more; when
/// `guarded`, it claims nothing unless the event `$12` is there (a publish's claim of its
/// own deliveries, whose write is guarded). Its parameters: [`bind_claim_for`].
fn claim_for_batch(destinations: usize, guarded: bool) -> String {
    let event = "EXISTS (SELECT 1 FROM events WHERE id = $12)";
    if destinations == 1 {
        let guard = if guarded { event } else { "TRUE" };
        return claim_batch(&Chosen::One(&claim_for_one(guard)), &FOR_PARAMS, ONE_READ);
    }
    let from = match guarded {
        true => format!("CASE WHEN {event} THEN $1 ELSE '[]' END"),
        false => "$1".to_owned(),
    };
    claim_for_many(&from)
}

/// Where [`claim_for_batch`]'s statements find their values ([`bind_claim_for`]).
const FOR_PARAMS: Params = Params {
    now: "$2",
    margin: "$7",
    window: "$8",
    plans: ["$9", "$10", "$11"],
};

/// Which destinations [`claim_for_one`]'s batch reads: its own (`$1`), when it claimed
/// something.
const ONE_READ: &str = "id = $1 AND EXISTS (SELECT 1 FROM temp.claim_one)";

/// The choice of [`claim_for_many`] for one destination, `$1` (its ID) with its cap `$4`:
/// the same deliveries in the same order, without most of the temporary b-trees of its
/// CTEs, window functions and sorts (a dozen, whatever it found: at low load each publish
/// claims its own delivery this way, and most of the engine's claims are for one
/// destination). Its earliest due deliveries (read in order from
/// `deliveries_due_by_destination`) up to its free slots, `p`, of which a retry is kept
/// while fewer than `$5` retries of `p` come before it (counted only where `$5` is below
/// the cap: `p` cannot hold more; and in `p`, at most a cap's rows, never in the index,
/// where a backlog of retries due at the same millisecond would be walked for each); or a
/// FIFO destination's head when it has nothing in flight; at most `$6`, inserted in their
/// order (an `ORDER BY` of their own: a sorter of a few rows, not a b-tree), so that the
/// temporary table's rowid is their rank in their space (docs D4).
/// `guard`: a condition on everything.
fn claim_for_one(guard: &str) -> String {
    let fifo = "EXISTS (SELECT 1 FROM destinations f WHERE f.id = $1 AND f.ordering = 'fifo')";
    let busy =
        "(SELECT COUNT(*) FROM deliveries b WHERE b.destination_id = $1 AND b.status = 'sending')";
    format!(
        "WITH p AS ( \
           SELECT x.id, x.space_id, x.next_attempt_at, x.status FROM deliveries x \
           WHERE x.destination_id = $1 AND x.status IN ('pending', 'retrying') \
             AND x.paused = FALSE AND x.next_attempt_at <= $2 AND ($3 OR x.status = 'pending') \
             AND NOT {fifo} AND {guard} \
           ORDER BY x.next_attempt_at, x.id LIMIT MAX(0, $4 - {busy})) \
         INSERT INTO temp.claim_one (id, space_id) \
         SELECT id, space_id FROM ( \
           SELECT p.id, p.space_id, p.next_attempt_at FROM p \
           WHERE p.status = 'pending' OR $5 >= $4 OR $5 > ( \
             SELECT COUNT(*) FROM p AS q WHERE q.status = 'retrying' \
               AND (q.next_attempt_at, q.id) < (p.next_attempt_at, p.id)) \
           UNION ALL \
           SELECT h.id, h.space_id, h.next_attempt_at FROM deliveries h \
           WHERE h.id = ({head}) AND {fifo} AND {busy} = 0 AND $4 >= 1 AND {guard} \
             AND h.paused = FALSE AND h.next_attempt_at <= $2 AND ($3 OR h.status = 'pending') \
             AND (h.status = 'pending' OR $5 >= 1) \
           ORDER BY 3, 1 LIMIT $6) \
         ORDER BY next_attempt_at, id",
        head = fifo_head("$1"),
    )
}

/// [`claim_for_batch`] for several destinations, `from` their JSON (`$1`): one
/// statement's choice for all of them, like PostgreSQL's: each one's earliest due
/// deliveries (a correlated `IN (… LIMIT` the cap`)`, SQLite having no `LATERAL`), cut to
/// its free slots by rank; a FIFO one's head when it has nothing in flight; then, as
/// [`Dialect::claim`], the whole claim as one batch of statements (a loop of three
/// statements per destination once cost more than the claim itself). Only destinations
/// with a delivery due take part (every due row implies one), and the destinations are
/// read only when something was claimed: a claim that finds nothing (a record's, for a
/// destination whose due deliveries were taken meanwhile) costs an index look-up per
/// destination, not the whole choice and a read of the destination (docs §7).
fn claim_for_many(from: &str) -> String {
    let choice = format!(
        "WITH targets AS ( \
           SELECT t.value ->> 0 AS destination_id, t.key AS ord, t.value ->> 1 AS cap, \
             COALESCE(dst.ordering = 'fifo', FALSE) AS fifo, \
             (SELECT COUNT(*) FROM deliveries b \
              WHERE b.destination_id = t.value ->> 0 AND b.status = 'sending') AS busy \
           FROM json_each({from}) AS t LEFT JOIN destinations dst ON dst.id = t.value ->> 0 \
           WHERE EXISTS (SELECT 1 FROM deliveries w \
             WHERE w.destination_id = t.value ->> 0 AND w.status IN ('pending', 'retrying') \
               AND w.paused = FALSE AND w.next_attempt_at <= $2) \
         ), due AS ( \
           SELECT x.id, x.destination_id, x.status, x.next_attempt_at, targets.ord, targets.busy, \
             targets.cap \
           FROM targets JOIN deliveries x ON x.id IN ( \
             SELECT id FROM deliveries \
             WHERE destination_id = targets.destination_id AND NOT targets.fifo \
               AND status IN ('pending', 'retrying') AND paused = FALSE \
               AND next_attempt_at <= $2 AND ($3 OR status = 'pending') \
             ORDER BY next_attempt_at, id LIMIT $4) \
           UNION ALL \
           SELECT h.id, h.destination_id, h.status, h.next_attempt_at, targets.ord, targets.busy, \
             targets.cap \
           FROM targets JOIN deliveries h ON h.id = ({head}) \
           WHERE targets.fifo AND targets.busy = 0 AND $4 >= 1 \
             AND h.paused = FALSE AND h.next_attempt_at <= $2 AND ($3 OR h.status = 'pending') \
         ), fits AS ( \
           SELECT * FROM ( \
             SELECT id, status, next_attempt_at, ord, cap, \
               ROW_NUMBER() OVER (PARTITION BY destination_id ORDER BY next_attempt_at, id) \
                 + busy AS slot \
             FROM due) \
           WHERE slot <= cap \
         ){choice}",
        head = fifo_head("targets.destination_id"),
        choice = claim_for_choice("fits"),
    );
    claim_batch(
        &Chosen::Many(&choice),
        &FOR_PARAMS,
        &format!(
            "id IN (SELECT value ->> 0 FROM json_each({from}) \
             WHERE EXISTS (SELECT 1 FROM temp.claim_batch))"
        ),
    )
}

/// Binds [`claim_for_batch`]'s parameters for `next` at `now` after `query`'s.
fn bind_claim_for<'q>(
    query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    next: &ClaimNext,
    now: UnixMs,
) -> Result<sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>> {
    let limits = &next.limits;
    let cap = |d: &DestinationId| {
        let ahead = next.ahead.contains(d);
        limits.per_destination * if ahead { Sqlite::AHEAD.caps } else { 1 }
    };
    // Each destination with its cap: `[[id, cap], …]`.
    let targets: Vec<(String, i64)> = next
        .destinations
        .iter()
        .map(|d| (d.to_string(), cap(d)))
        .collect();
    let most = targets.iter().map(|(_, cap)| *cap).max().unwrap_or(0);
    // One destination ([`claim_for_one`]): its ID alone.
    let targets = match <[_; 1]>::try_from(targets) {
        Ok([(one, _)]) => one,
        Err(targets) => {
            serde_json::to_string(&targets).map_err(|e| StorageError::Internal(e.to_string()))?
        }
    };
    let query = query
        .bind(targets)
        .bind(now)
        .bind(limits.retries > 0)
        .bind(most)
        .bind(limits.retries)
        .bind(next.limit)
        .bind(next.lease_margin_ms);
    Ok(bind_plans(query, limits))
}

/// Where [`claim_batch`]'s statements find their values: the parameters' names.
struct Params {
    now: &'static str,
    margin: &'static str,
    window: &'static str,
    /// Each plan's sends per second, in [`Plan::ALL`]'s order.
    plans: [&'static str; 3],
}

/// What a [`claim_batch`] claims, kept in a temporary table with each delivery's rank
/// `n` in its space (for the plan limit) and what its space `allowed`.
enum Chosen<'a> {
    /// CTEs ending in `chosen`, the IDs, of deliveries of any spaces: kept in
    /// `temp.claim_batch`, ranked by a window function.
    Many(&'a str),
    /// An `INSERT INTO temp.claim_one (id, space_id)` of one destination's deliveries in
    /// their order (so of one space): ranked by the table's rowid, which counts from 1 in
    /// an empty table (the batch empties it before its `COMMIT`; a failed one rolls back).
    One(&'a str),
}

/// How a [`claim_batch`] keeps what it `Chosen`, in its statements' words.
struct Kept {
    /// The temporary table's name.
    table: &'static str,
    /// Its creation and the statement that fills it.
    fill: String,
    /// A `SELECT` of each of its spaces' plan key and the claim's time, one row each.
    spaces: String,
    /// A condition on `rate_events` (or `rate_keys`): its spaces' plan keys.
    keys: String,
}

impl Chosen<'_> {
    /// The table, for the plan key `key` (of a row's `space_id`) at `now`.
    fn kept(&self, key: &str, now: &str) -> Kept {
        match self {
            Chosen::Many(choice) => Kept {
                table: "claim_batch",
                fill: format!(
                    "CREATE TEMP TABLE IF NOT EXISTS claim_batch \
                       (id TEXT PRIMARY KEY, space_id TEXT NOT NULL, n INTEGER NOT NULL, \
                        allowed INTEGER); \
                     {choice} INSERT INTO temp.claim_batch (id, space_id, n) \
                       SELECT c.id, d.space_id, \
                         ROW_NUMBER() OVER (PARTITION BY d.space_id ORDER BY d.next_attempt_at, d.id) \
                       FROM chosen c JOIN deliveries d ON d.id = c.id"
                ),
                spaces: format!("SELECT DISTINCT {key}, {now} FROM temp.claim_batch WHERE TRUE"),
                keys: format!("key IN (SELECT DISTINCT {key} FROM temp.claim_batch)"),
            },
            // One space: its first row's (no `DISTINCT`, no `IN` list: each was a
            // temporary b-tree).
            Chosen::One(fill) => Kept {
                table: "claim_one",
                fill: format!(
                    "CREATE TEMP TABLE IF NOT EXISTS claim_one \
                       (n INTEGER PRIMARY KEY, id TEXT NOT NULL, space_id TEXT NOT NULL, \
                        allowed INTEGER); \
                     {fill}"
                ),
                spaces: format!("SELECT {key}, {now} FROM temp.claim_one WHERE n = 1"),
                keys: format!("key = (SELECT {key} FROM temp.claim_one WHERE n = 1)"),
            },
        }
    }
}

/// A whole claim in one string, after its transaction's `BEGIN` (SQLite): the deliveries
/// `chosen` picks, kept in a temporary table with their rank in their space; the plan
/// limit (docs D4) taken for them as `take_slots_in` takes it, in the claim's own order per
/// space; what fits moved to `sending` (returned with [`claim_update`]'s columns); what
/// does not, with the rest of its space's due deliveries, due when a slot frees and marked
/// `rate_limited`, as `defer_in` does; how many were held back; the destinations
/// `destinations` (a condition on them) names.
///
/// Every statement is a round trip to sqlx's connection thread and the write lock is held
/// through all of them: `take_slots_in`, `defer_in` and the destinations' read one after
/// the other, with `BEGIN` and `COMMIT`, were six.
fn claim_batch(chosen: &Chosen<'_>, p: &Params, destinations: &str) -> String {
    let Params {
        now,
        margin,
        window,
        plans,
    } = p;
    let limit = Plan::ALL
        .iter()
        .zip(plans)
        .map(|(plan, param)| format!("WHEN '{}' THEN {param}", plan.as_str()))
        .collect::<Vec<_>>()
        .join(" ");
    let key = "'plan:' || space_id";
    let Kept {
        table,
        fill,
        spaces,
        keys,
    } = chosen.kept(key, now);
    let dated = slot_date(now);
    let until = format!(
        "{now} + MIN({window}, MAX(1, COALESCE((SELECT MIN(r.at) FROM rate_events r \
           WHERE r.key = 'plan:' || deliveries.space_id), {now}) + {window} - {now}))"
    );
    format!(
        "{fill}; \
         INSERT INTO rate_keys (key, touched_at) {spaces} \
           ON CONFLICT (key) DO UPDATE SET touched_at = excluded.touched_at; \
         DELETE FROM rate_events WHERE {keys} AND at <= {now} - {window}; \
         UPDATE temp.{table} SET allowed = \
           (SELECT CASE s.plan {limit} END FROM spaces s WHERE s.id = {table}.space_id) \
           - (SELECT taken FROM rate_keys k WHERE k.key = 'plan:' || {table}.space_id); \
         INSERT INTO rate_events (key, at) \
           SELECT {key}, {dated} FROM temp.{table} WHERE n <= allowed; \
         {claimed}; \
         UPDATE deliveries SET next_attempt_at = {until}, last_error_class = 'rate_limited', \
           updated_at = {now} \
         WHERE space_id IN (SELECT space_id FROM temp.{table} WHERE n > allowed) \
           AND status IN ('pending', 'retrying') AND paused = FALSE AND next_attempt_at < {until}; \
         SELECT COUNT(*) FROM temp.{table} WHERE n > allowed; \
         SELECT {DESTINATION} FROM destinations WHERE {destinations}; \
         DELETE FROM temp.{table}; \
         COMMIT",
        claimed = claim_update(
            now,
            margin,
            &format!("id IN (SELECT id FROM temp.{table} WHERE allowed IS NULL OR n <= allowed)"),
            None
        ),
    )
}

/// Binds [`claim_batch`]'s window and plans' limits (`NULL` without plan limits: nothing
/// is counted or held) after `query`'s parameters.
fn bind_plans<'q>(
    query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    limits: &ClaimLimits,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    // Without plan limits, a window no slot is old enough to leave.
    let query = query.bind(limits.plans.map_or(i64::MAX / 4, |p| p.window_ms));
    Plan::ALL.iter().fold(query, |query, plan| {
        query.bind(limits.plans.map(|p| p.per_second.for_plan(*plan)))
    })
}

/// What a [`claim_batch`] answered: its statements' results, in order, after `before`
/// statements of others and the transaction's `BEGIN`.
fn claimed_by_batch(
    results: &[sqlx::Either<sqlx::sqlite::SqliteQueryResult, sqlx::sqlite::SqliteRow>],
    before: usize,
) -> Result<Claimed> {
    // BEGIN, CREATE, the choice, the plan's key, its old slots, what is allowed, the
    // slots, then: the claim (7), the deferral, the count held back (9), the destinations (10).
    let rows: Vec<ClaimedRow> = rows_of(results, before + 7)?;
    let held: Vec<(i64,)> = rows_of(results, before + 9)?;
    let destinations: Vec<DestinationRow> = rows_of(results, before + 10)?;
    Ok(claimed_all(
        claimed_from(rows)?,
        convert_all(destinations)?,
        held.first().map_or(0, |(n,)| *n as u64),
    ))
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

/// Held by the one `partyflow serve` of a SQLite database: an exclusive lock (`flock`) on
/// `<database>.lock`, released by the kernel when the process ends, however it ends.
#[derive(Debug)]
pub struct ServedAlone {
    /// The lock lives as long as this open file.
    _lock: std::fs::File,
}

/// Takes the lock that makes a process the one serving the SQLite database at `url`; `None`
/// for another backend. SQLite is served by one process (several instances share a
/// PostgreSQL database, docs §7): the engine then holds deliveries claimed ahead in memory
/// (docs §2.5), which another process claiming from the same file could not see.
pub fn serve_alone(url: &str) -> anyhow::Result<Option<ServedAlone>> {
    if !url.starts_with("sqlite:") {
        return Ok(None);
    }
    let options = SqliteConnectOptions::from_str(url)?;
    let mut path = options.get_filename().as_os_str().to_owned();
    path.push(".lock");
    let path = std::path::PathBuf::from(path);
    if let Some(parent) = path.parent() {
        if !parent.as_os_str().is_empty() {
            std::fs::create_dir_all(parent)?;
        }
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| anyhow::anyhow!("opening {}: {e}", path.display()))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(ServedAlone { _lock: file })),
        Err(rustix::io::Errno::WOULDBLOCK) => anyhow::bail!(
            "another `partyflow serve` runs on this SQLite database ({} is locked): a SQLite \
             database is served by one process; several instances share a PostgreSQL database",
            path.display()
        ),
        Err(e) => anyhow::bail!("locking {}: {e}", path.display()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::write::Durability;
    use crate::storage::{DispatchQueue as _, Storage as _};

    /// A rate slot is dated as its string runs on the connection's thread, not when its
    /// writer built it: taken while a slow string runs ahead of it, it is dated after that
    /// one, although its writer began before.
    #[tokio::test]
    async fn a_rate_slot_sent_behind_a_slow_string_is_dated_when_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("d.db").display());
        let store = Store::<Sqlite>::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let slow = format!("BEGIN IMMEDIATE; {}; COMMIT", crate::storage::write::SLOW);
        let began = crate::clock::now_ms();
        let ahead = async {
            let writer = store.writes.writer(Durability::Engine).await.unwrap();
            writer
                .run_transaction_batch(sqlx::query(&slow))
                .await
                .unwrap();
            crate::clock::now_ms()
        };
        let slot = async {
            tokio::task::yield_now().await;
            store
                .take_rate_slots("dst:dated", 1, 5, 1_000, began)
                .await
                .unwrap()
        };
        let (ended, slot) = tokio::join!(ahead, slot);
        assert_eq!(slot, (1, 0));
        assert!(
            ended - began >= 50,
            "the slow string took {} ms: the test needs a slower one",
            ended - began
        );
        let (at,): (i64,) = sqlx::query_as("SELECT at FROM rate_events WHERE key = 'dst:dated'")
            .fetch_one(&SqlitePool::connect(&url).await.unwrap())
            .await
            .unwrap();
        // Dated once the slow string had ended (seen by its writer a little later).
        assert!(
            at + 20 >= ended,
            "dated {} ms after it began, the slow string ended {} ms after",
            at - began,
            ended - began
        );
    }
}
