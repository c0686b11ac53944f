//! The one store, generic over the [`Dialect`] of its database: [`Store<D>`] holds the
//! read pools and the [`Writes`] (the only way to write), and each aggregate module
//! (`tenants.rs`, `events.rs`, `queue.rs`, …) implements its trait for it with the SQL
//! both backends accept. The dialects ([`super::sqlite::Sqlite`],
//! [`super::postgres::Postgres`]) hold what differs: the claim statements, the locks, how
//! a write transaction begins, the due-index hint and the migrations.
//!
//! Queries are runtime `sqlx::query()` strings: they are not checked when the server is
//! built, by either backend; the test suite runs every one of them on both
//! (`server/tests/it`, `on_both_backends!`).
//!
//! # The bounds every generic impl carries
//!
//! sqlx code that is generic over the database needs where-clauses saying what the
//! database can do (Rust implies the bounds of an associated type, but not a trait's
//! where-clauses). Every `impl<D: Dialect> … for Store<D>` carries the same block, in
//! this order:
//!
//! ```text
//! where
//!     for<'c> &'c mut Conn<D>: Executor<'c, Database = D::DB>,   // run on a connection
//!     for<'q> Args<'q, D>: IntoArguments<'q, D::DB>,              // bind arguments
//!     for<'q> &'q str: SqlArg<'q, D::DB> + ColumnIndex<DbRow<D>>, // bind text, read by name
//!     for<'q> Option<&'q str>: SqlArg<'q, D::DB>,
//!     usize: ColumnIndex<DbRow<D>>,                               // read tuples
//!     i64: SqlValue<D::DB>,                                       // the column types
//!     Option<i64>: SqlValue<D::DB>,
//!     bool: SqlValue<D::DB>,
//!     String: SqlValue<D::DB>,
//!     Option<String>: SqlValue<D::DB>,
//! ```
//!
//! (sqlx encodes `Option<T>` per backend, so the nullable ones are named too; `&T`
//! follows from sqlx's own impls); `rows_affected` comes from
//! [`Dialect::DB`]'s bound ([`RowsAffected`]), which is implied.

use std::future::Future;
use std::marker::PhantomData;

use async_trait::async_trait;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Type};

use super::reads::Reads;
use super::write::{Durability, WriteTx, Writer, Writes};
use super::{Backend, ClaimLimits, Page, RawPool, Result, StorageError};
use crate::domain::UnixMs;

/// What differs between SQLite and PostgreSQL; everything else is [`Store`]'s shared SQL.
pub trait Dialect: std::fmt::Debug + Send + Sync + Sized + 'static {
    type DB: Database<QueryResult: RowsAffected> + super::write::Pipeline;

    const BACKEND: Backend;

    /// Names the due-queue index where the planner needs telling (SQLite: without
    /// statistics it may pick the status index and walk every waiting delivery).
    const DUE_INDEX: &'static str;

    /// Applies the backend's migrations; safe to call on every start.
    fn migrate(pool: &Pool<Self::DB>) -> impl Future<Output = Result<()>> + Send;

    /// Serializes changes to `users` that depend on the other users (the first admin, the
    /// last admin).
    fn lock_users(tx: &mut WriteTx<'_, Self::DB>) -> impl Future<Output = Result<()>> + Send;

    /// [`super::DispatchQueue::claim`] on `writer`, in one transaction: the deliveries
    /// claimed (claims take turns across instances, so the in-flight counts they read are
    /// exact) by the instance `claimer` ([`Store::claimer`]), the plan limit applied to
    /// them and their destinations read.
    fn claim(
        writer: Writer<'_, Self::DB>,
        now: UnixMs,
        limit: i64,
        lease_margin_ms: i64,
        limits: &ClaimLimits,
        claimer: &str,
    ) -> impl Future<Output = Result<super::Claimed>> + Send;

    /// [`super::DispatchQueue::claim_for`] on `writer`, as [`Dialect::claim`].
    fn claim_for(
        writer: Writer<'_, Self::DB>,
        next: &super::ClaimNext,
        now: UnixMs,
        claimer: &str,
    ) -> impl Future<Output = Result<super::Claimed>> + Send;

    /// How far this backend's engine claims ahead ([`super::DispatchQueue::claims_ahead`]).
    const AHEAD: super::Ahead;

    /// Whether [`Dialect::finish_and_claim`] is there: a group of finished attempts and a
    /// claim in one transaction, one round trip (SQLite).
    const FINISHES_AND_CLAIMS_AT_ONCE: bool = false;

    /// [`super::DispatchQueue::finish_and_claim`] on `writer` for attempts that all
    /// [finish at once](Store::finishes_at_once), in one transaction; only where
    /// [`Dialect::FINISHES_AND_CLAIMS_AT_ONCE`].
    fn finish_and_claim(
        writer: Writer<'_, Self::DB>,
        batch: &[super::FinishedAttempt],
        now: UnixMs,
        next: &super::ClaimNext,
    ) -> impl Future<Output = Result<(Vec<super::FinishEffects>, super::Claimed)>> + Send {
        let _ = (writer, batch, now, next);
        async {
            Err(StorageError::Internal(
                "this backend finishes and claims in two transactions".into(),
            ))
        }
    }

    /// [`super::DispatchQueue::claim_for`]'s claim as statements that run after others
    /// in one string, their parameters numbered after the `params` of those, and end
    /// with the transaction's `COMMIT`: a publish claims its own deliveries in the round
    /// trip of its `COMMIT` (SQLite). `destinations`: how many it claims for (the
    /// [`super::ClaimNext`] bound to it). `None` where a claim is a transaction of its own.
    fn claim_for_after(params: usize, destinations: usize) -> Option<std::sync::Arc<str>> {
        let _ = (params, destinations);
        None
    }

    /// [`Dialect::claim_for_after`] that claims nothing unless the event whose ID is its
    /// parameter `$12` (numbered after `params` too, bound after
    /// [`Dialect::bind_claim_for`]'s) was written in the string: the claim of a publish
    /// whose write is guarded (`EventStore::publish_events`).
    fn claim_for_event_after(params: usize, destinations: usize) -> Option<std::sync::Arc<str>> {
        let _ = (params, destinations);
        None
    }

    /// Binds [`Dialect::claim_for_after`]'s parameters for `next` at `now`.
    fn bind_claim_for<'q>(
        query: sqlx::query::Query<'q, Self::DB, Args<'q, Self>>,
        next: &super::ClaimNext,
        now: UnixMs,
    ) -> Result<sqlx::query::Query<'q, Self::DB, Args<'q, Self>>> {
        let _ = (next, now);
        Ok(query)
    }

    /// What [`Dialect::claim_for_after`]'s statements claimed, from the string's results,
    /// after `statements` others.
    fn claimed_after(
        results: &[sqlx::Either<<Self::DB as Database>::QueryResult, DbRow<Self>>],
        statements: usize,
    ) -> Result<super::Claimed> {
        let _ = (results, statements);
        Err(StorageError::Internal(
            "this backend claims in a transaction of its own".into(),
        ))
    }

    /// The pool, typed by backend (the console's session store, tests, the benchmark).
    fn raw_pool(pool: &Pool<Self::DB>) -> RawPool;
}

/// How many rows a statement changed (sqlx has it per backend, not in a trait).
pub trait RowsAffected {
    fn rows_affected(&self) -> u64;
}

impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::sqlite::SqliteQueryResult::rows_affected(self)
    }
}

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::postgres::PgQueryResult::rows_affected(self)
    }
}

/// A column type both ways: bound as an argument and read back from a row.
pub trait SqlValue<DB: Database>:
    for<'q> Encode<'q, DB> + for<'r> Decode<'r, DB> + Type<DB>
{
}
impl<DB: Database, T> SqlValue<DB> for T where
    T: for<'q> Encode<'q, DB> + for<'r> Decode<'r, DB> + Type<DB>
{
}

/// A value that can be bound as an argument of a query living for `'q`.
pub trait SqlArg<'q, DB: Database>: Encode<'q, DB> + Type<DB> {}
impl<'q, DB: Database, T> SqlArg<'q, DB> for T where T: Encode<'q, DB> + Type<DB> {}

/// The connection type of a dialect's database.
pub type Conn<D> = <<D as Dialect>::DB as Database>::Connection;
/// The argument buffer of a dialect's database.
pub type Args<'q, D> = <<D as Dialect>::DB as Database>::Arguments<'q>;
/// The row type of a dialect's database.
pub type DbRow<D> = <<D as Dialect>::DB as Database>::Row;

/// Everything the server keeps, in one database of dialect `D`.
#[derive(Debug)]
pub struct Store<D: Dialect> {
    /// Reads (and `/readyz`): through the pool of durable writes, which sees every commit.
    pub(super) read: Reads<D::DB>,
    /// The engine's reads (the due queue, expired claims): its own pool on SQLite.
    pub(super) engine_read: Reads<D::DB>,
    /// The only way to write.
    pub(super) writes: Writes<D::DB>,
    /// REST publishes' checks kept in memory, checked again by each write that uses them
    /// ([`super::events::ChecksCache`]).
    pub(super) checks: super::events::ChecksCache,
    /// This instance among those sharing the database, as its claims name it
    /// (`claimed_by`, PostgreSQL): a random ID, new with each store.
    pub(super) claimer: String,
    dialect: PhantomData<D>,
}

impl<D: Dialect> Store<D> {
    /// A store reading from `read` and `engine_read` and writing through `writes`.
    pub(super) fn new(
        read: Reads<D::DB>,
        engine_read: Reads<D::DB>,
        writes: Writes<D::DB>,
    ) -> Self {
        Self {
            read,
            engine_read,
            writes,
            checks: Default::default(),
            claimer: ulid::Ulid::new().to_string(),
            dialect: PhantomData,
        }
    }
}

impl<D: Dialect> Store<D>
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
    /// One statement on its own, as a write (through the gate, like every write).
    pub(super) async fn execute<'q>(
        &self,
        durability: Durability,
        query: sqlx::query::Query<'q, D::DB, Args<'q, D>>,
    ) -> Result<<D::DB as Database>::QueryResult> {
        Ok(self.writes.writer(durability).await?.execute(query).await?)
    }

    /// One statement that must change a row (else `NotFound`), as a durable write.
    pub(super) async fn write_one<'q>(
        &self,
        query: sqlx::query::Query<'q, D::DB, Args<'q, D>>,
    ) -> Result<()> {
        if self.execute(Durability::Full, query).await?.rows_affected() == 0 {
            return Err(StorageError::NotFound);
        }
        Ok(())
    }

    /// A keyset page, newest first: the rows of `table` whose `owner` column holds the
    /// given key, that also meet `only` (SQL text, no binds), with an ID below `before`.
    /// The cursor is pushed only when there is one, so both planners read it as a range
    /// of the `(owner, id)` index; `($n IS NULL OR id < $n)` would make SQLite walk every
    /// newer row of the owner on each page.
    pub(super) async fn keyset_page<R, I: ToString>(
        &self,
        (columns, table): (&'static str, &'static str),
        (owner, key): (&'static str, String),
        only: &'static str,
        page: Page<I>,
    ) -> Result<Vec<R>>
    where
        R: for<'r> sqlx::FromRow<'r, DbRow<D>> + Send + Unpin,
    {
        let mut q = Sql::<D>::new(format!("SELECT {columns} FROM {table} WHERE {owner} = "));
        q.push_bind(key).push(only).push_newest_first(page);
        let (sql, args) = q.into_parts()?;
        Ok(sqlx::query_as_with::<_, R, _>(&sql, args)
            .fetch_all(&self.read)
            .await?)
    }

    /// A page of one of the console's long lists (issue 16 item 6), newest first: the
    /// rows of `table`, of one space (`owner`, the space column, with its key) or of all,
    /// and with `pattern` only those where one of `fields`, lower-cased, is `LIKE` it
    /// (escaped with `\`: `ops::search::fragment_pattern`); with an ID below `before`.
    /// Read on the `(space_id, id)` index or the primary key, newest first, stopping at
    /// the page's end; the cursor is pushed only when there is one (see [`Self::keyset_page`]).
    pub(super) async fn search_page<R, I: ToString>(
        &self,
        (columns, table): (&'static str, &'static str),
        owner: Option<(&'static str, String)>,
        (fields, pattern): (&[&'static str], Option<&str>),
        page: Page<I>,
    ) -> Result<Vec<R>>
    where
        R: for<'r> sqlx::FromRow<'r, DbRow<D>> + Send + Unpin,
    {
        let mut q = Sql::<D>::new(format!("SELECT {columns} FROM {table} WHERE 1 = 1"));
        if let Some((column, key)) = owner {
            q.push(format_args!(" AND {column} = ")).push_bind(key);
        }
        if let Some(p) = pattern {
            for (i, field) in fields.iter().enumerate() {
                q.push(if i == 0 { " AND (" } else { " OR " })
                    .push(format_args!("LOWER({field}) LIKE "))
                    .push_bind(p.to_owned())
                    .push(" ESCAPE '\\'");
            }
            if !fields.is_empty() {
                q.push(")");
            }
        }
        q.push_newest_first(page);
        let (sql, args) = q.into_parts()?;
        Ok(sqlx::query_as_with::<_, R, _>(&sql, args)
            .fetch_all(&self.read)
            .await?)
    }

    /// Every row of `table` that belongs to the space, ordered by `order` (SQL text): the
    /// console's every-row reads.
    pub(super) async fn all_of_space<R>(
        &self,
        (columns, table): (&'static str, &'static str),
        space_id: crate::domain::SpaceId,
        order: &'static str,
    ) -> Result<Vec<R>>
    where
        R: for<'r> sqlx::FromRow<'r, DbRow<D>> + Send + Unpin,
    {
        let sql = format!("SELECT {columns} FROM {table} WHERE space_id = $1 ORDER BY {order}");
        Ok(sqlx::query_as::<_, R>(&sql)
            .bind(space_id.to_string())
            .fetch_all(&self.read)
            .await?)
    }
}

#[async_trait]
impl<D: Dialect> super::Storage for Store<D>
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
    fn backend(&self) -> Backend {
        D::BACKEND
    }

    async fn migrate(&self) -> Result<()> {
        D::migrate(self.read.pool()).await
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.read).await?;
        Ok(())
    }
}

/// SQL text and its arguments, built together: what sqlx's `QueryBuilder` does, in a shape
/// generic code can run (a `QueryBuilder` is borrowed by the query it builds, which generic
/// code cannot prove lives long enough). Placeholders are each backend's own, written by
/// its arguments as `QueryBuilder` does: `$n` on PostgreSQL, a bare `?` on SQLite, which
/// binds by position (SQLite looks a `$n` up by name, a linear search per parameter that
/// made a 5,000-value fan-out INSERT quadratic). So the text given to [`Sql::new`] and
/// [`Sql::push`] carries no placeholders of its own.
pub(super) struct Sql<'a, D: Dialect> {
    text: String,
    args: Args<'a, D>,
    error: Option<sqlx::error::BoxDynError>,
}

impl<'a, D: Dialect> Sql<'a, D> {
    pub(super) fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            args: Default::default(),
            error: None,
        }
    }

    /// Appends SQL text.
    pub(super) fn push(&mut self, text: impl std::fmt::Display) -> &mut Self {
        use std::fmt::Write as _;
        let _ = write!(self.text, "{text}");
        self
    }

    /// Appends a placeholder and binds `value` to it.
    pub(super) fn push_bind<T: 'a + Encode<'a, D::DB> + Type<D::DB>>(
        &mut self,
        value: T,
    ) -> &mut Self {
        use sqlx::Arguments as _;
        if let Err(e) = self.args.add(value) {
            self.error.get_or_insert(e);
        }
        let _ = self.args.format_placeholder(&mut self.text);
        self
    }

    /// Appends the items as placeholders separated by commas, each bound: the inside of
    /// an `IN (…)` list.
    pub(super) fn push_list<T, I>(&mut self, items: I) -> &mut Self
    where
        I: IntoIterator<Item = T>,
        T: 'a + Encode<'a, D::DB> + Type<D::DB>,
    {
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.push_bind(item);
        }
        self
    }

    /// Ends a keyset page's query: the cursor, pushed only when there is one (so both
    /// planners read a range of the index), newest first, the page's size.
    pub(super) fn push_newest_first<I: ToString>(&mut self, page: Page<I>) -> &mut Self
    where
        String: Encode<'a, D::DB> + Type<D::DB>,
        i64: Encode<'a, D::DB> + Type<D::DB>,
    {
        if let Some(before) = page.before {
            self.push(" AND id < ").push_bind(before.to_string());
        }
        self.push(" ORDER BY id DESC LIMIT ").push_bind(page.limit)
    }

    /// Appends `VALUES (…), (…)`, one row per item, its values written by `row`.
    pub(super) fn push_values<I>(
        &mut self,
        items: I,
        mut row: impl FnMut(Values<'_, 'a, D>, I::Item),
    ) where
        I: IntoIterator,
    {
        self.push("VALUES ");
        for (i, item) in items.into_iter().enumerate() {
            self.push(if i == 0 { "(" } else { ", (" });
            row(
                Values {
                    sql: self,
                    first: true,
                },
                item,
            );
            self.push(")");
        }
    }

    /// The text and the arguments, to run with `sqlx::query_with` / `query_as_with`.
    pub(super) fn into_parts(self) -> sqlx::Result<(String, Args<'a, D>)> {
        match self.error {
            Some(e) => Err(sqlx::Error::Encode(e)),
            None => Ok((self.text, self.args)),
        }
    }
}

/// One row of [`Sql::push_values`]: its values, separated by commas.
pub(super) struct Values<'s, 'a, D: Dialect> {
    sql: &'s mut Sql<'a, D>,
    first: bool,
}

impl<'a, D: Dialect> Values<'_, 'a, D> {
    pub(super) fn push_bind<T: 'a + Encode<'a, D::DB> + Type<D::DB>>(
        &mut self,
        value: T,
    ) -> &mut Self {
        if !std::mem::take(&mut self.first) {
            self.sql.push(", ");
        }
        self.sql.push_bind(value);
        self
    }
}

/// Parses a stored value; one that does not parse is [`StorageError::Corrupt`], never a panic.
pub(super) fn parse<T: std::str::FromStr>(what: &str, s: &str) -> Result<T, StorageError>
where
    T::Err: std::fmt::Display,
{
    s.parse()
        .map_err(|e| StorageError::Corrupt(format!("{what}: {e}")))
}

/// [`parse`] for a nullable column.
pub(super) fn parse_opt<T: std::str::FromStr>(
    what: &str,
    s: Option<String>,
) -> Result<Option<T>, StorageError>
where
    T::Err: std::fmt::Display,
{
    s.map(|s| parse(what, &s)).transpose()
}

/// Reads a JSON column (JSON is TEXT on both backends).
pub(super) fn json(what: &str, s: &str) -> Result<serde_json::Value, StorageError> {
    serde_json::from_str(s).map_err(|e| StorageError::Corrupt(format!("{what}: {e}")))
}

/// [`json`] for a nullable column.
pub(super) fn json_opt(
    what: &str,
    s: Option<String>,
) -> Result<Option<serde_json::Value>, StorageError> {
    s.map(|s| json(what, &s)).transpose()
}

/// Converts every row, failing on the first that does not parse.
pub(super) fn convert_all<R, T>(rows: Vec<R>) -> Result<Vec<T>, StorageError>
where
    T: TryFrom<R, Error = StorageError>,
{
    rows.into_iter().map(T::try_from).collect()
}
