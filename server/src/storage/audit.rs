//! The audit log (docs D14): [`audit_in`](Store::audit_in), which every audited write
//! method calls in its own transaction, the single-statement writes with their entry
//! ([`execute_audited`](Store::execute_audited), [`write_one_audited`](Store::write_one_audited)),
//! and the listing ([`AuditStore`]) for the REST API and the console.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Database, Executor, IntoArguments};

use super::store::{
    convert_all, json, parse, parse_opt, Args, Conn, DbRow, Dialect, RowsAffected, Sql, SqlArg,
    SqlValue, Store,
};
use super::write::{Durability, WriteTx};
use super::*;

pub(super) const AUDIT: &str = "id, space_id, actor_kind, actor_id, actor_label, role, action, \
    target_kind, target_id, detail, source, created_at";

/// Which audit entries a listing reads; every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub space_id: Option<SpaceId>,
    /// The actor's ID (`usr_…` or `key_…`).
    pub actor_id: Option<String>,
    pub action: Option<AuditAction>,
    /// Made at or after (Unix ms).
    pub since: Option<UnixMs>,
    /// Made before (Unix ms).
    pub until: Option<UnixMs>,
}

/// Reading the audit log (writing it is part of every audited change).
#[async_trait]
pub trait AuditStore: Send + Sync + std::fmt::Debug {
    /// A page of the entries `filter` selects, newest first.
    async fn list_audit(
        &self,
        filter: &AuditFilter,
        page: Page<AuditId>,
    ) -> Result<Vec<AuditEntry>>;
}

#[async_trait]
impl<D: Dialect> AuditStore for Store<D>
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
    async fn list_audit(&self, f: &AuditFilter, page: Page<AuditId>) -> Result<Vec<AuditEntry>> {
        let mut q = Sql::<D>::new(format!("SELECT {AUDIT} FROM audit_log WHERE 1 = 1"));
        if let Some(space) = f.space_id {
            q.push(" AND space_id = ").push_bind(space.to_string());
        }
        if let Some(actor) = &f.actor_id {
            q.push(" AND actor_id = ").push_bind(actor.clone());
        }
        if let Some(action) = f.action {
            q.push(" AND action = ")
                .push_bind(action.as_str().to_owned());
        }
        // Time ranges are ID ranges: IDs sort by creation time.
        if let Some(since) = f.since {
            q.push(" AND id >= ")
                .push_bind(AuditId::lower_bound_at(since).to_string());
        }
        if let Some(until) = f.until {
            q.push(" AND id < ")
                .push_bind(AuditId::lower_bound_at(until).to_string());
        }
        if let Some(before) = page.before {
            q.push(" AND id < ").push_bind(before.to_string());
        }
        q.push(" ORDER BY id DESC LIMIT ").push_bind(page.limit);
        let (sql, args) = q.into_parts()?;
        let rows = sqlx::query_as_with::<_, AuditRow, _>(&sql, args)
            .fetch_all(&self.read)
            .await?;
        convert_all(rows)
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
    /// Records `entry` in the transaction of the change it describes (docs D14); `None`
    /// (a change made by no console user or API key: the CLI, tests) records nothing.
    pub(super) async fn audit_in(
        tx: &mut WriteTx<'_, D::DB>,
        entry: Option<&AuditEntry>,
    ) -> Result<()> {
        let Some(e) = entry else {
            return Ok(());
        };
        sqlx::query(
            "INSERT INTO audit_log (id, space_id, actor_kind, actor_id, actor_label, role, \
             action, target_kind, target_id, detail, source, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(e.id.to_string())
        .bind(e.space_id.map(|s| s.to_string()))
        .bind(e.actor.kind.as_str())
        .bind(e.actor.id.clone())
        .bind(e.actor.label.clone())
        .bind(e.actor.role.map(|r| r.as_str()))
        .bind(e.action.as_str())
        .bind(e.target_kind.clone())
        .bind(e.target_id.clone())
        .bind(e.detail.to_string())
        .bind(e.source.clone())
        .bind(e.created_at)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// One statement and its audit entry, in one durable transaction (without an entry,
    /// the statement alone, as [`Store::execute`]).
    pub(super) async fn execute_audited<'q>(
        &self,
        query: sqlx::query::Query<'q, D::DB, Args<'q, D>>,
        entry: Option<&AuditEntry>,
    ) -> Result<<D::DB as Database>::QueryResult> {
        if entry.is_none() {
            return self.execute(Durability::Full, query).await;
        }
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        let done = query.execute(&mut *tx).await?;
        Self::audit_in(&mut tx, entry).await?;
        tx.commit().await?;
        Ok(done)
    }

    /// One statement that must change a row (else `NotFound`, and no entry), with its
    /// audit entry, in one durable transaction.
    pub(super) async fn write_one_audited<'q>(
        &self,
        query: sqlx::query::Query<'q, D::DB, Args<'q, D>>,
        entry: Option<&AuditEntry>,
    ) -> Result<()> {
        if entry.is_none() {
            return self.write_one(query).await;
        }
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        if query.execute(&mut *tx).await?.rows_affected() == 0 {
            tx.rollback().await?;
            return Err(StorageError::NotFound);
        }
        Self::audit_in(&mut tx, entry).await?;
        tx.commit().await?;
        Ok(())
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct AuditRow {
    id: String,
    space_id: Option<String>,
    actor_kind: String,
    actor_id: String,
    actor_label: String,
    role: Option<String>,
    action: String,
    target_kind: String,
    target_id: String,
    detail: String,
    source: Option<String>,
    created_at: i64,
}

impl TryFrom<AuditRow> for AuditEntry {
    type Error = StorageError;

    fn try_from(r: AuditRow) -> Result<Self> {
        Ok(AuditEntry {
            id: parse("audit id", &r.id)?,
            space_id: parse_opt("space id", r.space_id)?,
            actor: Actor {
                kind: parse("actor kind", &r.actor_kind)?,
                id: r.actor_id,
                label: r.actor_label,
                role: parse_opt("role", r.role)?,
            },
            action: parse("audit action", &r.action)?,
            target_kind: r.target_kind,
            target_id: r.target_id,
            detail: json("audit detail", &r.detail)?,
            source: r.source,
            created_at: r.created_at,
        })
    }
}
