//! The one way to write: [`Writes`] holds the pools that writes go through and the write
//! gate (SQLite), and hands out [`Writer`]s (the gate and a connection, held together); a
//! [`Writer`] runs one statement on its own ([`Writer::execute`],
//! [`Writer::fetch_all`]) or opens a [`WriteTx`] (`BEGIN IMMEDIATE` on SQLite). The
//! write pools are private to this module, so a write that skips the gate cannot be
//! written by accident: reads go through the store's read pool, writes through here.
//!
//! The invariant: **no connection goes back to the pool inside a transaction.** A
//! [`WriteTx`] sends its own `BEGIN` and `COMMIT` (so that on SQLite they can travel in
//! one string with the transaction's statements), and after a statement or a `COMMIT`
//! that failed nobody knows whether the transaction is still open: SQLite rolls it back by
//! itself on `SQLITE_FULL`, `SQLITE_IOERR`, `SQLITE_NOMEM` and keeps it open on most other
//! errors, and a dead PostgreSQL connection has none left. (When these transactions went
//! through sqlx's transaction manager, its depth counter stayed above zero after such a
//! failure and every later `BEGIN` on that connection was refused.) A connection that saw
//! anything but a clean `COMMIT` or `ROLLBACK` is therefore closed, never pooled: the
//! [`Writer`] marks it `close_on_drop` unless its transaction ended cleanly. That covers
//! errors returned with `?`, panics, and futures dropped mid-write (a client that hung
//! up). The pool opens a fresh connection in its place.
//!
//! On SQLite a transaction written as one string holds the gate only until its string is
//! queued on the connection's thread ([`Writer::run_transaction_batch`]), so writers'
//! strings run back to back there, in the gate's order; a writer of the other connection
//! first waits for them to end. (What must be dated when it runs, such as a rate slot, is
//! dated by SQLite in the string: [`super::queue::slot_date`].)
//!
//! On SQLite the gate keeps the writers' connections itself, one per [`Durability`], taken
//! out of the pools once ([`PoolConnection::detach`]): writers go one at a time anyway, and
//! a connection handed back to a sqlx pool is pinged on the way in, by a task spawned for
//! it. On SQLite that ping is a round trip to the connection's thread, one more per write
//! transaction for nothing. A kept connection that saw anything but a clean end is dropped
//! (which closes it), and the next writer takes a fresh one from the pool.

use std::cell::Cell;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use sqlx::pool::PoolConnection;
use sqlx::query::{Query, QueryAs};
use sqlx::{Database, Executor, FromRow, IntoArguments, Pool};
use tokio::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard};

use super::checkpoint::Committed;
use super::durable::WalSync;
use super::reads::Kept as Lending;

tokio::task_local! {
    /// The time the writers of a task inside [`metered`] have held their connection.
    static HELD: Cell<Duration>;
}

/// Runs `work` with its writers' hold time counted: [`held`], read inside it, answers how
/// long they have held a writer so far. A writer holds from the moment it has the gate
/// (SQLite) and a connection to the moment it gives them back, its `COMMIT` included; the
/// wait for the gate is not counted. That is the time a background task such as the
/// retention purge keeps the engine's claims and finishes waiting, which its wall time,
/// lengthened by its own wait behind them, overstates under load.
pub async fn metered<F: Future>(work: F) -> F::Output {
    HELD.scope(Cell::new(Duration::ZERO), work).await
}

/// How long this task's writers have held a writer so far inside [`metered`] (zero
/// outside it).
pub fn held() -> Duration {
    HELD.try_with(Cell::get).unwrap_or_default()
}

/// The first statement of a batch that [syncs in its commit](Writer::sync_in_commit),
/// before its `BEGIN`, and its last, after its `COMMIT`.
const SYNCED_ON: &str = "PRAGMA synchronous = FULL";
const SYNCED_OFF: &str = "; PRAGMA synchronous = NORMAL";

/// Which pool a write goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Accepted events, deliveries and everything people change: on SQLite committed with
    /// `synchronous = FULL`, so an answered request survives a power cut.
    Full,
    /// Accepted events (publishes): as durable as [`Durability::Full`] once answered, but
    /// on SQLite committed with `synchronous = NORMAL` on the engine's connection, and
    /// synced after the write gate is given back ([`Writes::sync`], which the writer
    /// must await before it answers): the gate is not held through the sync, and
    /// publishes that commit meanwhile share one ([`super::durable`]); one alone at the
    /// gate may sync inside its `COMMIT` instead ([`Writer::sync_in_commit`]). PostgreSQL:
    /// the same pool as the others, its commits durable already.
    Deferred,
    /// The engine's own bookkeeping (claims, attempts, rate slots): on SQLite committed
    /// with `synchronous = NORMAL`; a power cut may lose the last attempts' records,
    /// which then come back as lost claims and are sent again. PostgreSQL: the same pool.
    Engine,
}

impl Durability {
    /// Its place in [`crate::metrics::WRITE_DURABILITIES`] (the metrics' `durability`).
    fn metric(self) -> usize {
        match self {
            Durability::Full => 0,
            Durability::Deferred => 1,
            Durability::Engine => 2,
        }
    }
}

/// The pools writes go through, and the write gate: the only source of [`Writer`]s.
#[derive(Debug, Clone)]
pub struct Writes<DB: Database> {
    full: Pool<DB>,
    engine: Pool<DB>,
    /// SQLite has one writer. Writers of this process queue here, in order, instead of
    /// polling SQLite's lock with the busy handler's growing sleeps; the gate keeps their
    /// connections. `None`: no gate (PostgreSQL has row locks and many writers).
    gate: Option<Arc<Mutex<Kept<DB>>>>,
    /// How a write transaction begins: `BEGIN IMMEDIATE` on SQLite; `None`: `BEGIN`.
    begin: Option<&'static str>,
    /// PostgreSQL: the store's kept connections ([`super::reads`]), lent to writers too.
    /// `None`: writers without a gate take a connection of the pool.
    lending: Option<Arc<Lending<DB>>>,
    /// SQLite: told after each write, so the WAL is checkpointed off the write path
    /// ([`super::checkpoint`]). `None`: nobody to tell (PostgreSQL, tests).
    committed: Option<Committed>,
    /// SQLite: the WAL's sync, which [`Durability::Deferred`] writes await after the gate
    /// ([`Writes::sync`]). `None`: their commits are durable already (PostgreSQL, tests).
    wal: Option<Arc<WalSync>>,
    /// When a writer outside [`metered`] (the engine, a publish, a person's change) last
    /// asked for the write path: a background task takes shorter turns while they write.
    others: Arc<LastWrite>,
    /// Writers waiting for the gate now ([`Writer::sync_in_commit`] asks).
    queued: Arc<AtomicUsize>,
    /// The strings sent to each kept connection and not yet answered
    /// ([`Writer::run_transaction_batch`]), by [`Kept::index`].
    sent: Arc<[Sent; 2]>,
}

/// The whole transactions sent to one of the gate's connections that have not answered
/// yet: each holds a read guard of `running` until its results came; a writer of the
/// other connection takes the write guard first (SQLite has one writer: it would wait for
/// the lock in the busy handler's sleeps). `stale`: one of them failed or its writer went
/// away, or a writer left the connection unclean, so the next writer waits for those
/// still running and replaces the connection.
#[derive(Debug, Default)]
struct Sent {
    running: RwLock<()>,
    stale: std::sync::atomic::AtomicBool,
}

/// The last time a writer not [`metered`] asked for the write path: microseconds after
/// `origin`, plus one (0: never).
#[derive(Debug)]
struct LastWrite {
    origin: Instant,
    at: AtomicU64,
}

impl Default for LastWrite {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            at: AtomicU64::new(0),
        }
    }
}

impl LastWrite {
    fn now(&self) {
        let micros = self.origin.elapsed().as_micros() as u64 + 1;
        self.at.store(micros, Ordering::Relaxed);
    }

    fn within(&self, window: Duration) -> bool {
        match self.at.load(Ordering::Relaxed) {
            0 => false,
            at => {
                let now = self.origin.elapsed().as_micros() as u64 + 1;
                Duration::from_micros(now.saturating_sub(at)) <= window
            }
        }
    }
}

/// The connections the write gate keeps, one per [`Durability`]; `None` until the first
/// writer of that durability (or after one was closed).
struct Kept<DB: Database> {
    full: Option<DB::Connection>,
    engine: Option<DB::Connection>,
}

impl<DB: Database> Default for Kept<DB> {
    fn default() -> Self {
        Self {
            full: None,
            engine: None,
        }
    }
}

impl<DB: Database> std::fmt::Debug for Kept<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("full", &self.full.is_some())
            .field("engine", &self.engine.is_some())
            .finish()
    }
}

impl<DB: Database> Kept<DB> {
    fn slot(&mut self, durability: Durability) -> &mut Option<DB::Connection> {
        match durability {
            Durability::Full => &mut self.full,
            Durability::Engine | Durability::Deferred => &mut self.engine,
        }
    }

    /// The connection's place in [`Writes::sent`], and the other's.
    fn index(durability: Durability) -> (usize, usize) {
        match durability {
            Durability::Full => (0, 1),
            Durability::Engine | Durability::Deferred => (1, 0),
        }
    }
}

impl<DB: Database> Writes<DB> {
    /// Writes through `full` and `engine` (see [`Durability`]), behind a gate when `gated`,
    /// with transactions opened by `begin` (`None`: the backend's plain `BEGIN`).
    pub fn new(full: Pool<DB>, engine: Pool<DB>, gated: bool, begin: Option<&'static str>) -> Self {
        Self {
            full,
            engine,
            gate: gated.then(Default::default),
            begin,
            lending: None,
            committed: None,
            wal: None,
            others: Arc::default(),
            queued: Arc::default(),
            sent: Arc::default(),
        }
    }

    /// Whether a writer outside [`metered`] asked for the write path within `window`.
    pub fn others_wrote_within(&self, window: Duration) -> bool {
        self.others.within(window)
    }

    /// Writers without a gate borrow from `kept` (the store's kept connections) instead of
    /// the pool, which pings a connection on the way out and on the way back.
    pub fn lending(mut self, kept: Arc<Lending<DB>>) -> Self {
        self.lending = Some(kept);
        self
    }

    /// [`Durability::Deferred`] writes are synced by `wal` ([`Writes::sync`]).
    pub fn syncing(mut self, wal: WalSync) -> Self {
        self.wal = Some(Arc::new(wal));
        self
    }

    /// Returns once every [`Durability::Deferred`] write done so far is on disk (SQLite:
    /// the WAL file synced, by this call or by one that began after those writes); at once
    /// where commits are durable by themselves. Await it after giving back the writer and
    /// before answering.
    pub async fn sync(&self) -> std::io::Result<()> {
        match &self.wal {
            Some(wal) => wal.sync().await,
            None => Ok(()),
        }
    }

    /// How many times the WAL was synced after [`Durability::Deferred`] writes.
    pub fn syncs(&self) -> u64 {
        self.wal.as_ref().map_or(0, |wal| wal.syncs())
    }

    /// Whether every [`Durability::Deferred`] write done so far is on disk.
    pub async fn all_synced(&self) -> bool {
        match &self.wal {
            Some(wal) => wal.all_synced().await,
            None => true,
        }
    }

    /// Tells `committed` after every write (SQLite's checkpointer).
    pub fn telling(mut self, committed: Committed) -> Self {
        self.committed = Some(committed);
        self
    }

    /// The gate (when there is one: first come first served) and the connection it keeps
    /// for `durability`; without a gate, a connection of the pool for `durability`. The
    /// gate is the queue, so writers never wait on the pool while holding a connection.
    pub async fn writer(&self, durability: Durability) -> sqlx::Result<Writer<'_, DB>> {
        let pool = match durability {
            Durability::Full => &self.full,
            Durability::Engine | Durability::Deferred => &self.engine,
        };
        if HELD.try_with(|_| ()).is_err() {
            self.others.now();
        }
        let asked = Instant::now();
        let held = match &self.gate {
            Some(gate) => {
                let mut kept = {
                    let _queued = Queued::enter(&self.queued);
                    gate.lock().await
                };
                let (mine, other) = Kept::<DB>::index(durability);
                // SQLite has one writer: what was sent to the other connection ends first.
                drop(self.sent[other].running.write().await);
                if self.sent[mine].stale.swap(false, Ordering::AcqRel) {
                    // Replaced once the strings sent behind the one that failed have ended.
                    drop(self.sent[mine].running.write().await);
                    kept.slot(durability).take();
                }
                // A closed pool closes what it lent out too.
                if pool.is_closed() {
                    kept.slot(durability).take();
                    return Err(sqlx::Error::PoolClosed);
                }
                if kept.slot(durability).is_none() {
                    *kept.slot(durability) = Some(pool.acquire().await?.detach());
                }
                Held::Kept(kept, durability)
            }
            None => match &self.lending {
                Some(kept) => Held::Lent(kept.take(pool).await?),
                None => Held::Pooled(pool.acquire().await?),
            },
        };
        let deferred = match durability {
            Durability::Deferred => self.wal.as_deref(),
            Durability::Full | Durability::Engine => None,
        };
        crate::metrics::write_waited(durability.metric(), asked.elapsed());
        let mut writer = Writer::new(
            held,
            self.begin,
            self.committed.as_ref(),
            deferred,
            durability,
        );
        if self.gate.is_some() {
            writer.queued = Some(&self.queued);
            writer.sent = Some(&self.sent[Kept::<DB>::index(durability).0]);
        }
        Ok(writer)
    }
}

/// A writer waiting for the gate, counted in [`Writes::queued`] until it has it (or gave up).
struct Queued<'a>(&'a AtomicUsize);

impl<'a> Queued<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(count)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Where a [`Writer`]'s connection comes from and goes back to.
enum Held<'g, DB: Database> {
    /// A pool's: back to the pool on drop.
    Pooled(PoolConnection<DB>),
    /// One of the store's kept connections (PostgreSQL): back among them when clean.
    Lent(super::reads::Lent<'g, DB>),
    /// Given back (only while the writer drops).
    Gone,
    /// The one the write gate keeps (SQLite), with the gate held.
    Kept(MutexGuard<'g, Kept<DB>>, Durability),
}

impl<DB: Database> Held<'_, DB> {
    fn conn(&mut self) -> &mut DB::Connection {
        match self {
            Held::Pooled(conn) => conn,
            Held::Lent(lent) => lent.conn(),
            Held::Gone => unreachable!("a writer's connection goes only when the writer drops"),
            Held::Kept(kept, durability) => kept
                .slot(*durability)
                .as_mut()
                .expect("the gate opens its connection before handing out a writer"),
        }
    }
}

/// A connection taken for one write transaction, with the write gate (SQLite) held for
/// as long as it lives. Closed on drop unless its transaction committed or rolled back.
pub struct Writer<'g, DB: Database> {
    held: Held<'g, DB>,
    /// `BEGIN IMMEDIATE` on SQLite; `None`: the backend's plain `BEGIN`.
    begin: Option<&'static str>,
    clean: bool,
    /// When the gate and the connection were taken (for [`held`]).
    taken: Instant,
    /// Told when the writer is done (see [`Writes::telling`]).
    committed: Option<&'g Committed>,
    /// A [`Durability::Deferred`] writer's WAL sync, told when the writer is done.
    deferred: Option<&'g WalSync>,
    /// The writers waiting for the gate behind this one (SQLite; `None`: no gate).
    queued: Option<&'g AtomicUsize>,
    /// Its batch syncs the WAL inside its `COMMIT` ([`Writer::sync_in_commit`]).
    synced: bool,
    /// The strings sent to its kept connection (SQLite; `None`: no gate).
    sent: Option<&'g Sent>,
    /// Its own string sent and the gate given back, until its results come.
    running: Option<RwLockReadGuard<'g, ()>>,
    /// [`Durability::metric`] of the writes it is for.
    durability: usize,
}

impl<'g, DB: Database> Writer<'g, DB> {
    fn new(
        held: Held<'g, DB>,
        begin: Option<&'static str>,
        committed: Option<&'g Committed>,
        deferred: Option<&'g WalSync>,
        durability: Durability,
    ) -> Self {
        Self {
            held,
            begin,
            clean: false,
            taken: Instant::now(),
            committed,
            deferred,
            queued: None,
            synced: false,
            sent: None,
            running: None,
            durability: durability.metric(),
        }
    }

    /// Takes a connection from `pool`, without a gate.
    #[cfg(test)]
    async fn acquire(pool: &Pool<DB>, begin: Option<&'static str>) -> sqlx::Result<Self> {
        Ok(Self::new(
            Held::Pooled(pool.acquire().await?),
            begin,
            None,
            None,
            Durability::Engine,
        ))
    }

    fn conn(&mut self) -> &mut DB::Connection {
        self.held.conn()
    }

    /// Whether it is time for this writer's connection to plan its statements afresh
    /// ([`super::reads::Lent::replan_due`]); only kept PostgreSQL connections say so.
    pub fn replan_due(&mut self, first: Duration, most: Duration) -> bool {
        match &mut self.held {
            Held::Lent(lent) => lent.replan_due(first, most),
            _ => false,
        }
    }

    /// What a batch that opens this writer's transaction starts with ([`Writer::begin_with`]):
    /// on SQLite, `BEGIN IMMEDIATE; `, the transaction's first statements then travel with
    /// it; on PostgreSQL nothing (sqlx cannot send several statements with parameters in
    /// one string there, so `begin_with` sends `BEGIN` first).
    pub fn opening(&self) -> String {
        match (self.begin, self.synced) {
            (Some(statement), true) => format!("{SYNCED_ON}; {statement}; "),
            (Some(statement), false) => format!("{statement}; "),
            (None, _) => String::new(),
        }
    }

    /// A [`Durability::Deferred`] writer on SQLite with no other writer waiting for the
    /// gate and no string [sent](Writer::run_transaction_batch) before it still running
    /// (a publish at low load): its batch is committed with `synchronous = FULL`, the
    /// WAL synced inside its `COMMIT` on the connection's thread, instead of after the
    /// gate on a blocking thread ([`super::durable`]): one hand-off between threads and
    /// back fewer, and nobody waits behind the gate meanwhile (one who comes waits for
    /// the sync). The batch must start with [`Writer::opening`] and end with
    /// [`Writer::after_commit`], and go through [`Writer::run_transaction_batch`].
    /// Says whether it will.
    pub fn sync_in_commit(&mut self) -> bool {
        // Nobody waits for the gate, and no string sent before runs on the connection
        // (the strings sent behind would wait for the sync).
        let alone = self
            .queued
            .is_some_and(|queued| queued.load(Ordering::Acquire) == 0)
            && self
                .sent
                .is_some_and(|sent| sent.running.try_write().is_ok());
        self.synced = alone && self.deferred.is_some() && self.begin.is_some();
        self.synced
    }

    /// What a batch that opened with [`Writer::opening`] ends with after its `COMMIT`:
    /// on a writer that [syncs in its commit](Writer::sync_in_commit), `synchronous`
    /// back to `NORMAL` (SQLite refuses to change it inside a transaction); else nothing.
    pub fn after_commit(&self) -> &'static str {
        match self.synced {
            true => SYNCED_OFF,
            false => "",
        }
    }
}

impl<'g, DB: Database> Writer<'g, DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
{
    /// Opens the write transaction on this connection.
    pub async fn begin(&mut self) -> sqlx::Result<WriteTx<'_, DB>> {
        self.clean = false;
        sqlx::query(self.begin.unwrap_or("BEGIN"))
            .execute(self.held.conn())
            .await?;
        Ok(self.transaction())
    }

    /// Opens the write transaction and runs `then`, statements without parameters, in the
    /// same string (one round trip; PostgreSQL's simple protocol takes several statements).
    pub async fn begin_then(&mut self, then: &str) -> sqlx::Result<WriteTx<'_, DB>> {
        self.clean = false;
        let sql = format!("{}; {then}", self.begin.unwrap_or("BEGIN"));
        Executor::execute(self.held.conn(), sql.as_str()).await?;
        Ok(self.transaction())
    }

    /// Opens the write transaction with `query`'s statements, whose string starts with
    /// [`Writer::opening`] (SQLite: `BEGIN IMMEDIATE; …`, one round trip to the connection's
    /// thread for both), and answers their results. The transaction stays open: end it
    /// with [`WriteTx::commit`] or [`WriteTx::commit_with`].
    pub async fn begin_with<'q, A>(
        &mut self,
        query: Query<'q, DB, A>,
    ) -> sqlx::Result<(WriteTx<'_, DB>, Vec<sqlx::Either<DB::QueryResult, DB::Row>>)>
    where
        A: 'q + IntoArguments<'q, DB>,
    {
        use futures_util::TryStreamExt as _;
        self.clean = false;
        if self.begin.is_none() {
            sqlx::query("BEGIN").execute(self.held.conn()).await?;
        }
        let results = Executor::fetch_many(self.held.conn(), query)
            .try_collect()
            .await?;
        Ok((self.transaction(), results))
    }

    /// The transaction just opened on this writer's connection.
    fn transaction(&mut self) -> WriteTx<'_, DB> {
        WriteTx {
            batches: self.begin.is_some(),
            conn: self.held.conn(),
            clean: &mut self.clean,
        }
    }

    /// Runs one statement on its own, outside a transaction (it commits by itself). A
    /// statement that ran to its end, failed or not, leaves no transaction behind, so the
    /// connection goes back to the pool; one dropped midway is closed.
    pub async fn execute<'q, A>(mut self, query: Query<'q, DB, A>) -> sqlx::Result<DB::QueryResult>
    where
        A: 'q + IntoArguments<'q, DB>,
    {
        let done = query.execute(self.conn()).await;
        self.clean = true;
        done
    }

    /// Runs a batch of statements that opens and commits its own transaction (SQLite:
    /// `BEGIN IMMEDIATE; …; COMMIT` in one string, one round trip), with every statement's
    /// results. On SQLite the string is sent to the connection's thread and the gate given
    /// back before it runs ([`Pipeline::send_whole`]): the next writer's string runs behind
    /// it, with no hand-off between threads in between, and a transaction it leaves open
    /// is rolled back before that. The connection counts as clean only if all of it ran: a
    /// batch that failed midway, or was dropped, closes its connection (a kept one is
    /// replaced by the next writer, [`Sent::stale`]).
    pub async fn run_transaction_batch<'q, A>(
        mut self,
        query: Query<'q, DB, A>,
    ) -> sqlx::Result<Vec<sqlx::Either<DB::QueryResult, DB::Row>>>
    where
        A: 'q + IntoArguments<'q, DB>,
        DB: Pipeline,
    {
        use futures_util::TryStreamExt as _;
        let mut all: sqlx::Result<Vec<_>> = match self.sent {
            Some(sent) => {
                let answer = DB::send_whole(self.conn(), query).await?;
                // Queued on the connection's thread: the next writer's string may go
                // behind it. The gate is given back; the connection stays with it.
                self.running = Some(sent.running.read().await);
                self.held = Held::Gone;
                answer.await
            }
            None => Executor::fetch_many(self.conn(), query).try_collect().await,
        };
        self.clean = all.is_ok();
        if let (true, Ok(results)) = (self.synced, &mut all) {
            debug_assert!(
                results.len() >= 2,
                "a synced batch answers its switches too"
            );
            // Committed and synced: nothing for the WAL's next sync to do for it.
            if let Some(wal) = self.deferred.take() {
                wal.synced_in_commit();
            }
            // The `synchronous` switches' results: the callers see their statements' only.
            if results.len() >= 2 {
                results.pop();
                results.remove(0);
            }
        }
        all
    }

    /// Runs one statement that returns rows on its own, outside a transaction.
    pub async fn fetch_all<'q, O, A>(mut self, query: QueryAs<'q, DB, O, A>) -> sqlx::Result<Vec<O>>
    where
        A: 'q + IntoArguments<'q, DB>,
        O: Send + Unpin + for<'r> FromRow<'r, DB::Row>,
    {
        let rows = query.fetch_all(self.conn()).await;
        self.clean = true;
        rows
    }
}

impl<DB: Database> Drop for Writer<'_, DB> {
    fn drop(&mut self) {
        if !self.clean {
            match &mut self.held {
                Held::Pooled(conn) => conn.close_on_drop(),
                // Dropped, it closes (its thread ends and SQLite rolls back what was open),
                // once the strings sent to it before have run: the next writer waits for
                // them before it opens another.
                Held::Kept(kept, durability) => {
                    drop(kept.slot(*durability).take());
                    if let Some(sent) = self.sent {
                        sent.stale.store(true, Ordering::Release);
                    }
                }
                // Not given back: closed when the writer's fields drop.
                Held::Lent(_) => {}
                // Its string sent, the gate given back: the next writer replaces it.
                Held::Gone => {
                    if let Some(sent) = self.sent {
                        sent.stale.store(true, Ordering::Release);
                    }
                }
            }
        } else if let Held::Lent(lent) = std::mem::replace(&mut self.held, Held::Gone) {
            lent.give_back();
        }
        if let Some(committed) = self.committed {
            committed.tell();
        }
        // Committed or not (a failed `COMMIT` may have written): the next sync covers it.
        if let Some(wal) = self.deferred {
            wal.committed();
        }
        let held = self.taken.elapsed();
        crate::metrics::write_held(self.durability, held);
        // Outside `metered` there is nothing to count into.
        let _ = HELD.try_with(|total| total.set(total.get() + held));
    }
}

/// A backend whose connection takes a whole transaction's string and answers its results
/// later ([`Writer::run_transaction_batch`]).
pub trait Pipeline: Database {
    /// Sends `query`, a string that opens and ends its own transaction, and answers once
    /// the connection has taken it, with its results to come: the connection may take the
    /// next command meanwhile, which runs after it. A transaction left open when its
    /// statements stop (one failed, or its results were dropped) is rolled back before
    /// the next command. By default (PostgreSQL, whose writers have no gate to give back)
    /// the string runs, then answers.
    fn send_whole<'c, 'q, A>(
        conn: &'c mut Self::Connection,
        query: Query<'q, Self, A>,
    ) -> BoxFuture<'c, sqlx::Result<Answer<Self>>>
    where
        A: 'q + IntoArguments<'q, Self>,
        'q: 'c,
        for<'e> &'e mut Self::Connection: Executor<'e, Database = Self>,
    {
        use futures_util::TryStreamExt as _;
        Box::pin(async move {
            let results = Executor::fetch_many(conn, query).try_collect().await;
            Ok(Box::pin(std::future::ready(results)) as Answer<Self>)
        })
    }
}

/// The results of a string sent by [`Pipeline::send_whole`], to come.
pub type Answer<DB> = BoxFuture<
    'static,
    sqlx::Result<Vec<sqlx::Either<<DB as Database>::QueryResult, <DB as Database>::Row>>>,
>;

impl Pipeline for sqlx::Sqlite {
    fn send_whole<'c, 'q, A>(
        conn: &'c mut Self::Connection,
        query: Query<'q, Self, A>,
    ) -> BoxFuture<'c, sqlx::Result<Answer<Self>>>
    where
        A: 'q + IntoArguments<'q, Self>,
        'q: 'c,
    {
        Box::pin(async move {
            let sent = conn.send_whole(query).await?;
            Ok(Box::pin(sent.results()) as Answer<Self>)
        })
    }
}

impl Pipeline for sqlx::Postgres {}

/// A write transaction on a [`Writer`]'s connection. Use it as the connection
/// (`&mut **tx` is an executor); end it with [`WriteTx::commit`], [`WriteTx::commit_with`]
/// or [`WriteTx::rollback`]. Its `BEGIN` and `COMMIT` are sent as plain statements (not
/// through sqlx's transaction manager), so that on SQLite they can travel in one string
/// with the transaction's first and last statements; a transaction that did not end
/// cleanly closes its connection all the same ([`Writer`]'s drop).
pub struct WriteTx<'c, DB: Database> {
    conn: &'c mut DB::Connection,
    clean: &'c mut bool,
    /// Several statements with parameters may go in one string (SQLite).
    batches: bool,
}

impl<DB: Database> WriteTx<'_, DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
{
    /// Commits. Only a commit that succeeded lets the connection back into the pool.
    pub async fn commit(self) -> sqlx::Result<()> {
        sqlx::query("COMMIT").execute(&mut *self.conn).await?;
        *self.clean = true;
        Ok(())
    }

    /// Rolls back on purpose (e.g. a refused idempotency key).
    pub async fn rollback(self) -> sqlx::Result<()> {
        sqlx::query("ROLLBACK").execute(&mut *self.conn).await?;
        *self.clean = true;
        Ok(())
    }

    /// What a batch that ends the transaction ends with ([`WriteTx::commit_with`]): on
    /// SQLite `; COMMIT`, on PostgreSQL nothing (`commit_with` sends it apart).
    pub fn closing(&self) -> &'static str {
        if self.batches {
            "; COMMIT"
        } else {
            ""
        }
    }

    /// Runs `query`, the transaction's last statements, whose string ends with
    /// [`WriteTx::closing`] (SQLite: `…; COMMIT`, one round trip for both), and commits;
    /// answers the statements' results.
    pub async fn commit_with<'q, A>(
        self,
        query: Query<'q, DB, A>,
    ) -> sqlx::Result<Vec<sqlx::Either<DB::QueryResult, DB::Row>>>
    where
        A: 'q + IntoArguments<'q, DB>,
    {
        use futures_util::TryStreamExt as _;
        let results = Executor::fetch_many(&mut *self.conn, query)
            .try_collect()
            .await?;
        if !self.batches {
            sqlx::query("COMMIT").execute(&mut *self.conn).await?;
        }
        *self.clean = true;
        Ok(results)
    }
}

impl<DB: Database> Deref for WriteTx<'_, DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &Self::Target {
        self.conn
    }
}

impl<DB: Database> DerefMut for WriteTx<'_, DB> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.conn
    }
}

/// For tests: a statement that counts to three million, long enough to be running while
/// a test does something else (takes the next writer, goes away).
#[cfg(test)]
pub(super) const SLOW: &str = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 \
                               FROM n WHERE i < 3000000) SELECT COUNT(*) FROM n";

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
    use sqlx::SqlitePool;

    /// A one-connection pool on a fresh file, so the next writer gets the same
    /// connection back if it was pooled.
    async fn one_connection_pool(dir: &tempfile::TempDir, name: &str) -> SqlitePool {
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join(name))
            .create_if_missing(true);
        one_connection_pool_with(options).await
    }

    /// [`one_connection_pool`] with these options.
    async fn one_connection_pool_with(options: SqliteConnectOptions) -> SqlitePool {
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .unwrap();
        sqlx::query("CREATE TABLE t (v BLOB)")
            .execute(&pool)
            .await
            .unwrap();
        pool
    }

    /// What table `t` holds, in order.
    async fn stored(pool: &SqlitePool) -> Vec<Vec<u8>> {
        sqlx::query_scalar("SELECT v FROM t ORDER BY v")
            .fetch_all(pool)
            .await
            .unwrap()
    }

    /// Ends SQLite's transaction behind sqlx's back, as SQLite itself does on
    /// `SQLITE_FULL` or an I/O error: sqlx still counts depth 1, and its COMMIT fails.
    async fn transaction_ended_by_the_database(conn: &mut sqlx::SqliteConnection) {
        sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();
    }

    #[tokio::test]
    async fn a_metered_task_is_charged_the_time_it_held_a_writer_not_its_wait_for_the_gate() {
        let dir = tempfile::tempdir().unwrap();
        let pool = one_connection_pool(&dir, "m.db").await;
        let writes = Writes::new(pool.clone(), pool, true, Some("BEGIN IMMEDIATE"));
        // Another future holds the gate for 300 ms; the metered one waits, then holds 50 ms.
        let other = writes.writer(Durability::Engine).await.unwrap();
        let holder = async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(other);
        };
        let measured = metered(async {
            assert_eq!(held(), Duration::ZERO);
            let began = Instant::now();
            let writer = writes.writer(Durability::Engine).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(writer);
            (held(), began.elapsed())
        });
        let ((), (held, wall)) = tokio::join!(holder, measured);
        assert!(wall >= Duration::from_millis(350), "{wall:?}");
        assert!(
            held >= Duration::from_millis(50) && held < Duration::from_millis(250),
            "{held:?} of {wall:?}"
        );
        // Outside `metered`, nothing is counted.
        drop(writes.writer(Durability::Engine).await.unwrap());
        assert_eq!(super::held(), Duration::ZERO);
    }

    #[tokio::test]
    async fn a_metered_writer_is_not_counted_as_another_writer_and_an_unmetered_one_is() {
        let dir = tempfile::tempdir().unwrap();
        let pool = one_connection_pool(&dir, "o.db").await;
        let writes = Writes::new(pool.clone(), pool, true, Some("BEGIN IMMEDIATE"));
        let window = Duration::from_millis(200);
        assert!(!writes.others_wrote_within(window), "nobody wrote yet");
        metered(async { drop(writes.writer(Durability::Engine).await.unwrap()) }).await;
        assert!(
            !writes.others_wrote_within(window),
            "the purge's own writes"
        );
        drop(writes.writer(Durability::Full).await.unwrap());
        assert!(writes.others_wrote_within(window));
        tokio::time::sleep(window + Duration::from_millis(50)).await;
        assert!(!writes.others_wrote_within(window), "long enough ago");
    }

    #[tokio::test]
    async fn a_connection_whose_commit_failed_is_closed_so_the_next_write_begins_cleanly() {
        let dir = tempfile::tempdir().unwrap();

        // What plain pooled transactions do: the broken connection goes back to the pool
        // and every later BEGIN on it is refused. (This proves the scenario is real.)
        let plain = one_connection_pool(&dir, "plain.db").await;
        let mut tx = plain.begin().await.unwrap();
        transaction_ended_by_the_database(&mut tx).await;
        assert!(tx.commit().await.is_err());
        let again = plain.begin_with("BEGIN IMMEDIATE").await;
        assert!(
            again
                .as_ref()
                .is_err_and(|e| e.to_string().contains("transaction depth")),
            "{:?}",
            again.map(|_| ())
        );
        plain.close().await;

        // Through a Writer: the connection is closed, a fresh one takes its place.
        let pool = one_connection_pool(&dir, "w.db").await;
        let mut writer = Writer::acquire(&pool, Some("BEGIN IMMEDIATE"))
            .await
            .unwrap();
        let mut tx = writer.begin().await.unwrap();
        transaction_ended_by_the_database(&mut tx).await;
        assert!(tx.commit().await.is_err());
        drop(writer);
        for _ in 0..3 {
            let mut writer = Writer::acquire(&pool, Some("BEGIN IMMEDIATE"))
                .await
                .unwrap();
            let mut tx = writer.begin().await.unwrap();
            sqlx::query("INSERT INTO t (v) VALUES (x'00')")
                .execute(&mut *tx)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM t")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(n, 3);
    }

    /// A gate over [`one_connection_pool`] whose kept engine connection has a temporary
    /// table `mine`: it lives as long as its connection, so a writer that sees it has the
    /// same connection, and one that does not has a fresh one.
    async fn gate_with_a_temporary_table(
        dir: &tempfile::TempDir,
        name: &str,
    ) -> (SqlitePool, Writes<sqlx::Sqlite>) {
        let pool = one_connection_pool(dir, name).await;
        let writes = Writes::new(pool.clone(), pool.clone(), true, Some("BEGIN IMMEDIATE"));
        let writer = writes.writer(Durability::Engine).await.unwrap();
        writer
            .execute(sqlx::query("CREATE TEMP TABLE mine (v INTEGER)"))
            .await
            .unwrap();
        (pool, writes)
    }

    #[tokio::test]
    async fn the_gate_keeps_its_connection_and_replaces_one_whose_commit_failed() {
        let dir = tempfile::tempdir().unwrap();
        let (pool, writes) = gate_with_a_temporary_table(&dir, "k.db").await;
        // The next writer sees the temporary table: the same connection.
        let writer = writes.writer(Durability::Engine).await.unwrap();
        writer
            .execute(sqlx::query("INSERT INTO mine (v) VALUES (1)"))
            .await
            .unwrap();
        // The kept connection is out of the pool: the pool's one connection is still free.
        sqlx::query("SELECT 1").execute(&pool).await.unwrap();

        // A commit that failed: the kept connection is dropped, a fresh one takes its
        // place (without the temporary table) and begins cleanly.
        let mut writer = writes.writer(Durability::Engine).await.unwrap();
        let mut tx = writer.begin().await.unwrap();
        transaction_ended_by_the_database(&mut tx).await;
        assert!(tx.commit().await.is_err());
        drop(writer);
        {
            let mut writer = writes.writer(Durability::Engine).await.unwrap();
            let mut tx = writer.begin().await.unwrap();
            assert!(sqlx::query("INSERT INTO mine (v) VALUES (2)")
                .execute(&mut *tx)
                .await
                .is_err());
        }
        let mut writer = writes.writer(Durability::Engine).await.unwrap();
        let mut tx = writer.begin().await.unwrap();
        sqlx::query("INSERT INTO t (v) VALUES (x'07')")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        drop(writer);
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM t")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(n, 1);
    }

    #[tokio::test]
    async fn a_batch_that_commits_itself_is_written_and_one_that_fails_midway_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let pool = one_connection_pool(&dir, "b.db").await;
        let writes = Writes::new(pool.clone(), pool.clone(), true, Some("BEGIN IMMEDIATE"));
        let writer = writes.writer(Durability::Engine).await.unwrap();
        let results = writer
            .run_transaction_batch(
                sqlx::query(
                    "BEGIN IMMEDIATE; INSERT INTO t (v) VALUES ($1) RETURNING v; \
                     INSERT INTO t (v) VALUES ($2); COMMIT",
                )
                .bind(vec![1u8])
                .bind(vec![2u8]),
            )
            .await
            .unwrap();
        // BEGIN, the first insert's row and its end, the second insert, COMMIT.
        assert_eq!(results.len(), 5);
        assert!(results[1].is_right());
        // Fails at its second insert, inside the transaction it opened.
        let writer = writes.writer(Durability::Engine).await.unwrap();
        assert!(writer
            .run_transaction_batch(sqlx::query(
                "BEGIN IMMEDIATE; INSERT INTO t (v) VALUES (x'03'); INSERT INTO nowhere VALUES (1); COMMIT",
            ))
            .await
            .is_err());
        // Its connection was closed, so its insert went with it, and the next write
        // begins cleanly.
        let mut writer = writes.writer(Durability::Engine).await.unwrap();
        let mut tx = writer.begin().await.unwrap();
        sqlx::query("INSERT INTO t (v) VALUES (x'04')")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        drop(writer);
        assert_eq!(stored(&pool).await, [[1u8], [2], [4]]);
    }

    #[tokio::test]
    async fn a_write_that_failed_or_was_dropped_midway_leaves_no_transaction_behind() {
        let dir = tempfile::tempdir().unwrap();
        let pool = one_connection_pool(&dir, "w.db").await;
        // A statement fails inside the transaction (the error is returned with `?`).
        {
            let mut writer = Writer::acquire(&pool, Some("BEGIN IMMEDIATE"))
                .await
                .unwrap();
            let mut tx = writer.begin().await.unwrap();
            sqlx::query("INSERT INTO t (v) VALUES (x'01')")
                .execute(&mut *tx)
                .await
                .unwrap();
            assert!(sqlx::query("INSERT INTO nowhere VALUES (1)")
                .execute(&mut *tx)
                .await
                .is_err());
        }
        // A write dropped before it committed (a client that hung up).
        let dropped = async {
            let mut writer = Writer::acquire(&pool, Some("BEGIN IMMEDIATE"))
                .await
                .unwrap();
            let mut tx = writer.begin().await.unwrap();
            sqlx::query("INSERT INTO t (v) VALUES (x'02')")
                .execute(&mut *tx)
                .await
                .unwrap();
            std::future::pending::<()>().await;
        };
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), dropped)
                .await
                .is_err()
        );
        // Neither wrote anything, and the next write begins and commits.
        let mut writer = Writer::acquire(&pool, Some("BEGIN IMMEDIATE"))
            .await
            .unwrap();
        let mut tx = writer.begin().await.unwrap();
        sqlx::query("INSERT INTO t (v) VALUES (x'03')")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        drop(writer);
        assert_eq!(stored(&pool).await, [[3u8]]);
    }

    /// sqlx-sqlite hands a string's results back in bursts (`vendor/README.md`); a caller
    /// that went away while the string ran still stops it at its next statement, so the
    /// `COMMIT` at its end does not run and the transaction it abandoned writes nothing.
    #[tokio::test]
    async fn a_string_of_statements_whose_caller_went_away_stops_before_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        let pool = one_connection_pool(&dir, "w.db").await;
        // Long enough to be running when the caller goes away.
        let batch = format!(
            "BEGIN IMMEDIATE; INSERT INTO t (v) VALUES (x'01'); {SLOW}; \
             INSERT INTO t (v) VALUES (x'02'); COMMIT"
        );
        let abandoned = async {
            let writer = Writer::acquire(&pool, Some("BEGIN IMMEDIATE"))
                .await
                .unwrap();
            writer.run_transaction_batch(sqlx::query(&batch)).await
        };
        assert!(
            tokio::time::timeout(Duration::from_millis(20), abandoned)
                .await
                .is_err(),
            "the string ended within 20 ms: the test needs a slower statement"
        );
        // The next writer gets a connection (the abandoned one was closed, its transaction
        // rolled back) and sees nothing of the abandoned string.
        let mut writer = Writer::acquire(&pool, Some("BEGIN IMMEDIATE"))
            .await
            .unwrap();
        let tx = writer.begin().await.unwrap();
        tx.commit().await.unwrap();
        drop(writer);
        assert!(stored(&pool).await.is_empty());
    }

    #[tokio::test]
    async fn a_full_database_is_unavailable_not_an_internal_error() {
        let dir = tempfile::tempdir().unwrap();
        let pool = one_connection_pool(&dir, "w.db").await;
        // Room for a few pages only: SQLite answers SQLITE_FULL, as on a full disk.
        sqlx::query("PRAGMA max_page_count = 8")
            .execute(&pool)
            .await
            .unwrap();
        let mut writer = Writer::acquire(&pool, Some("BEGIN IMMEDIATE"))
            .await
            .unwrap();
        let mut tx = writer.begin().await.unwrap();
        let err = sqlx::query("INSERT INTO t (v) VALUES (zeroblob(1000000))")
            .execute(&mut *tx)
            .await
            .unwrap_err();
        let err = crate::storage::StorageError::from(err);
        assert!(
            matches!(err, crate::storage::StorageError::Unavailable(_)),
            "{err:?}"
        );
    }

    /// A publish alone at the gate (no other writer waiting) syncs the WAL inside its own
    /// `COMMIT`, leaves the connection at `synchronous = NORMAL` for the engine's writes
    /// and nothing for the WAL's next sync; with a writer waiting behind it, it defers its
    /// sync as every publish did; a batch that failed leaves its sync to the next one.
    #[tokio::test]
    async fn a_publish_alone_at_the_gate_syncs_in_its_commit_and_one_with_a_writer_behind_it_after()
    {
        use sqlx::sqlite::SqliteSynchronous;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.db");
        let options = SqliteConnectOptions::new()
            .filename(&file)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal);
        let pool = one_connection_pool_with(options).await;
        let writes = Arc::new(
            Writes::new(pool.clone(), pool.clone(), true, Some("BEGIN IMMEDIATE"))
                .syncing(WalSync::new(&file)),
        );
        async fn synchronous(writes: &Writes<sqlx::Sqlite>) -> i64 {
            let writer = writes.writer(Durability::Engine).await.unwrap();
            let (level,): (i64,) = writer
                .fetch_all(sqlx::query_as("PRAGMA synchronous"))
                .await
                .unwrap()[0];
            level
        }

        /// `statements` as one batch of `writer`'s: its opening, then its end after the `COMMIT`.
        fn batch(writer: &Writer<'_, sqlx::Sqlite>, statements: &str) -> String {
            format!("{}{statements}{}", writer.opening(), writer.after_commit())
        }

        let mut alone = writes.writer(Durability::Deferred).await.unwrap();
        assert!(alone.sync_in_commit());
        let sql = batch(
            &alone,
            "INSERT INTO t VALUES (x'01'); SELECT v FROM t; COMMIT",
        );
        assert!(
            sql.starts_with("PRAGMA synchronous = FULL; BEGIN IMMEDIATE; "),
            "{sql}"
        );
        let results = alone
            .run_transaction_batch(sqlx::query(&sql))
            .await
            .unwrap();
        // `BEGIN`, the INSERT, the SELECT's row and its end, `COMMIT`: not the switches'.
        assert_eq!(results.len(), 5);
        assert_eq!(stored(&pool).await, vec![vec![1u8]]);
        assert_eq!(writes.syncs(), 1, "counted with the syncs");
        assert!(writes.all_synced().await, "nothing left for the next sync");
        assert_eq!(synchronous(&writes).await, 1, "NORMAL again");

        // Another writer waits for the gate: this one defers its sync, as before.
        let mut first = writes.writer(Durability::Deferred).await.unwrap();
        let behind = Arc::clone(&writes);
        let waiting = tokio::spawn(async move { drop(behind.writer(Durability::Engine).await) });
        while writes.queued.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        assert!(!first.sync_in_commit());
        let sql = batch(&first, "INSERT INTO t VALUES (x'02'); COMMIT");
        assert!(sql.starts_with("BEGIN IMMEDIATE; "), "{sql}");
        first
            .run_transaction_batch(sqlx::query(&sql))
            .await
            .unwrap();
        waiting.await.unwrap();
        assert!(!writes.all_synced().await, "its sync comes after the gate");
        writes.sync().await.unwrap();
        assert!(writes.all_synced().await);
        assert_eq!(writes.syncs(), 2);

        // A string sent before it still runs on the connection: deferred, as before.
        let slow_sql = format!("BEGIN IMMEDIATE; {SLOW}; COMMIT");
        let slow = writes.writer(Durability::Engine).await.unwrap();
        let running = slow.run_transaction_batch(sqlx::query(&slow_sql));
        let behind = async {
            tokio::task::yield_now().await;
            let mut writer = writes.writer(Durability::Deferred).await.unwrap();
            assert!(!writer.sync_in_commit(), "a string runs ahead of it");
            writer.execute(sqlx::query("SELECT 1")).await.unwrap();
        };
        let (ran, ()) = tokio::join!(running, behind);
        ran.unwrap();

        // A batch that failed midway may have committed: the next sync covers it.
        let mut failed = writes.writer(Durability::Deferred).await.unwrap();
        assert!(failed.sync_in_commit());
        let sql = batch(&failed, "INSERT INTO nowhere VALUES (1); COMMIT");
        assert!(failed
            .run_transaction_batch(sqlx::query(&sql))
            .await
            .is_err());
        assert!(!writes.all_synced().await);
        writes.sync().await.unwrap();
        assert!(writes.all_synced().await);
        assert_eq!(synchronous(&writes).await, 1, "a fresh connection, NORMAL");
    }

    /// A writer's string is sent and the gate given back before it runs: the next writer
    /// takes the gate while it runs and sends its own behind it, which runs after it; a
    /// writer of the other connection waits for it to end (SQLite has one writer).
    #[tokio::test]
    async fn a_string_sent_gives_back_the_gate_and_the_next_runs_behind_it() {
        let dir = tempfile::tempdir().unwrap();
        let pool = one_connection_pool(&dir, "p.db").await;
        let writes = Writes::new(pool.clone(), pool.clone(), true, Some("BEGIN IMMEDIATE"));
        let slow = format!(
            "BEGIN IMMEDIATE; INSERT INTO t (v) VALUES (x'01'); {SLOW}; \
             INSERT INTO t (v) VALUES (x'02'); COMMIT"
        );
        let first = async {
            let writer = writes.writer(Durability::Engine).await.unwrap();
            writer.run_transaction_batch(sqlx::query(&slow)).await
        };
        let second = async {
            tokio::task::yield_now().await;
            let writer = writes.writer(Durability::Engine).await.unwrap();
            // The first string is still running: nothing of it is committed yet.
            assert!(
                stored(&pool).await.is_empty(),
                "the gate was held to the end"
            );
            let results = writer
                .run_transaction_batch(sqlx::query(
                    "BEGIN IMMEDIATE; INSERT INTO t (v) VALUES (x'03'); COMMIT",
                ))
                .await
                .unwrap();
            assert_eq!(results.len(), 3);
            // Ran behind the first.
            assert_eq!(stored(&pool).await, [[1u8], [2], [3]]);

            // Sent again behind a slow one: a writer of the other connection waits for it.
            let slow_again = writes.writer(Durability::Engine).await.unwrap();
            let sql = format!("BEGIN IMMEDIATE; INSERT INTO t (v) VALUES (x'04'); {SLOW}; COMMIT");
            let sent = slow_again.run_transaction_batch(sqlx::query(&sql));
            let other = async {
                tokio::task::yield_now().await;
                let mut writer = writes.writer(Durability::Full).await.unwrap();
                assert_eq!(
                    stored(&pool).await.len(),
                    4,
                    "it waited for the other's end"
                );
                let tx = writer.begin().await.unwrap();
                tx.commit().await.unwrap();
            };
            let (sent, ()) = tokio::join!(sent, other);
            sent.unwrap();
        };
        let (first, ()) = tokio::join!(first, second);
        assert_eq!(first.unwrap().len(), 6);
    }

    /// A string that fails midway, its transaction still open, or whose caller goes away
    /// while it runs, is rolled back by the connection's thread before the string sent
    /// behind it, which commits; the next writer after it takes a fresh connection.
    #[tokio::test]
    async fn a_string_that_fails_or_is_abandoned_is_rolled_back_before_the_one_behind_it() {
        let dir = tempfile::tempdir().unwrap();
        let (pool, writes) = gate_with_a_temporary_table(&dir, "f.db").await;
        // A missing table fails the statement and leaves the transaction open.
        let failing = format!(
            "BEGIN IMMEDIATE; INSERT INTO t (v) VALUES (x'01'); {SLOW}; \
             INSERT INTO nowhere (v) VALUES (1); COMMIT"
        );
        let abandoned = format!(
            "BEGIN IMMEDIATE; INSERT INTO t (v) VALUES (x'02'); {SLOW}; \
             INSERT INTO t (v) VALUES (x'03'); COMMIT"
        );
        let behind = "BEGIN IMMEDIATE; INSERT INTO t (v) VALUES (x'04'); COMMIT";
        let failed = async {
            let writer = writes.writer(Durability::Engine).await.unwrap();
            writer.run_transaction_batch(sqlx::query(&failing)).await
        };
        let sent_behind = async {
            tokio::task::yield_now().await;
            let writer = writes.writer(Durability::Engine).await.unwrap();
            writer.run_transaction_batch(sqlx::query(behind)).await
        };
        let (failed, sent_behind) = tokio::join!(failed, sent_behind);
        assert!(failed.is_err());
        assert_eq!(sent_behind.unwrap().len(), 3);
        assert_eq!(stored(&pool).await, [[4u8]]);

        // Given up after 20 ms, while its string runs, with another sent behind it.
        let gone = async {
            let writer = writes.writer(Durability::Engine).await.unwrap();
            tokio::time::timeout(
                Duration::from_millis(20),
                writer.run_transaction_batch(sqlx::query(&abandoned)),
            )
            .await
        };
        let sent_behind = async {
            tokio::task::yield_now().await;
            let writer = writes.writer(Durability::Engine).await.unwrap();
            writer.run_transaction_batch(sqlx::query(behind)).await
        };
        let (gone, sent_behind) = tokio::join!(gone, sent_behind);
        assert!(
            gone.is_err(),
            "it ended within 20 ms: the test needs a slower one"
        );
        assert_eq!(sent_behind.unwrap().len(), 3);
        assert_eq!(stored(&pool).await, [[4u8], [4]]);

        // The connection that saw them is replaced: its temporary table went with it.
        let writer = writes.writer(Durability::Engine).await.unwrap();
        assert!(writer
            .execute(sqlx::query("INSERT INTO mine (v) VALUES (1)"))
            .await
            .is_err());
        let writer = writes.writer(Durability::Engine).await.unwrap();
        writer
            .run_transaction_batch(sqlx::query(behind))
            .await
            .unwrap();
        assert_eq!(stored(&pool).await, [[4u8], [4], [4]]);
    }
}
