//! Spaces and their API keys.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use super::store::{
    convert_all, parse, parse_opt, Args, Conn, DbRow, Dialect, RowsAffected, SqlArg, SqlValue,
    Store,
};
use super::write::Durability;
use super::*;

pub(super) const SPACE: &str = "id, name, plan, created_at, retention";

pub(super) const API_KEY: &str = "id, space_id, name, prefix, created_at, last_used_at, revoked_at";
/// [`API_KEY`] of the table aliased `k`, each column named `key_…` (read beside another
/// table's columns: [`ApiKeyRow::keyed`]).
pub(super) const API_KEY_AS_KEY: &str = "k.id AS key_id, k.space_id AS key_space_id, \
    k.name AS key_name, k.prefix AS key_prefix, k.created_at AS key_created_at, \
    k.last_used_at AS key_last_used_at, k.revoked_at AS key_revoked_at";

/// Spaces and API keys: the admin commands, the console's space pages and the API-key
/// extractor of the REST API.
#[async_trait]
pub trait TenantStore: Send + Sync + std::fmt::Debug {
    async fn create_space(&self, space: &Space, audit: Option<&AuditEntry>) -> Result<()>;
    async fn get_space(&self, id: SpaceId) -> Result<Space>;
    async fn list_all_spaces(&self) -> Result<Vec<Space>>;
    async fn create_api_key(
        &self,
        key: &ApiKey,
        key_hash: &str,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    /// The live (not revoked) key with this hash.
    async fn find_api_key_by_hash(&self, key_hash: &str) -> Result<ApiKey>;
    /// A page of the space's keys, newest first (the REST API).
    async fn list_api_keys(&self, space_id: SpaceId, page: Page<ApiKeyId>) -> Result<Vec<ApiKey>>;
    /// Every key of the space, oldest first (the console).
    async fn list_all_api_keys(&self, space_id: SpaceId) -> Result<Vec<ApiKey>>;
    async fn revoke_api_key(
        &self,
        space_id: SpaceId,
        id: ApiKeyId,
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    /// Records that the key was used at `now`, unless it was recorded less than
    /// `interval_ms` before (so instances together write about once an interval);
    /// true when it wrote.
    async fn touch_api_key(&self, id: ApiKeyId, now: UnixMs, interval_ms: i64) -> Result<bool>;
    /// Sets the space's own retention (docs D10); `None` goes back to its plan's.
    async fn set_space_retention(
        &self,
        id: SpaceId,
        retention: Option<Retention>,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    /// Marks `id` as the demo space (docs D17), whose sample traffic runs until `until`.
    async fn set_demo_until(&self, id: SpaceId, until: UnixMs) -> Result<()>;
    /// The demo space, when there is one (the oldest, were there several).
    async fn demo_space(&self) -> Result<Option<SpaceId>>;
    /// The demo spaces whose sample traffic still runs at `now`.
    async fn live_demo_spaces(&self, now: UnixMs) -> Result<Vec<SpaceId>>;
    /// Deletes a space and everything in it (its rows go with it, by the schema's
    /// `ON DELETE CASCADE`; its audit entries too). Only `partyflow demo --remove` does.
    async fn delete_space(&self, id: SpaceId) -> Result<()>;
    /// Claims the demo space's round due at `now`: moves its next round to `next` when
    /// it was due (none sent yet, or due at or before `now`). True for the one instance
    /// whose update took; it alone sends the round (docs D17).
    async fn claim_demo_round(&self, id: SpaceId, now: UnixMs, next: UnixMs) -> Result<bool>;
    /// A page of every space, newest first, for the console's list: with `pattern` only
    /// those whose lower-cased name is `LIKE` it (`Store::search_page`).
    async fn search_spaces(&self, pattern: Option<&str>, page: Page<SpaceId>)
        -> Result<Vec<Space>>;
    /// A page of the API keys of `space_id`, newest first, for the console's list: with `pattern` only
    /// those whose lower-cased name or prefix is `LIKE` it (`Store::search_page`).
    async fn search_api_keys(
        &self,
        space_id: SpaceId,
        pattern: Option<&str>,
        page: Page<ApiKeyId>,
    ) -> Result<Vec<ApiKey>>;
}

#[async_trait]
impl<D: Dialect> TenantStore for Store<D>
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
    async fn create_space(&self, s: &Space, audit: Option<&AuditEntry>) -> Result<()> {
        let query =
            sqlx::query("INSERT INTO spaces (id, name, plan, created_at, retention) VALUES ($1, $2, $3, $4, $5)")
                .bind(s.id.to_string())
                .bind(&s.name)
                .bind(s.plan.as_str())
                .bind(s.created_at)
                .bind(s.retention.map(|r| r.to_string()));
        self.execute_audited(query, audit).await?;
        Ok(())
    }

    async fn get_space(&self, id: SpaceId) -> Result<Space> {
        let sql = format!("SELECT {} FROM spaces WHERE id = $1", SPACE);
        sqlx::query_as::<_, SpaceRow>(&sql)
            .bind(id.to_string())
            .fetch_one(&self.read)
            .await?
            .try_into()
    }

    async fn list_all_spaces(&self) -> Result<Vec<Space>> {
        let sql = format!("SELECT {} FROM spaces ORDER BY name, id", SPACE);
        let rows = sqlx::query_as::<_, SpaceRow>(&sql)
            .fetch_all(&self.read)
            .await?;
        convert_all(rows)
    }

    async fn create_api_key(
        &self,
        k: &ApiKey,
        key_hash: &str,
        audit: Option<&AuditEntry>,
    ) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO api_keys (id, space_id, name, prefix, key_hash, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(k.id.to_string())
        .bind(k.space_id.to_string())
        .bind(&k.name)
        .bind(&k.prefix)
        .bind(key_hash)
        .bind(k.created_at);
        self.execute_audited(query, audit).await?;
        Ok(())
    }

    async fn find_api_key_by_hash(&self, key_hash: &str) -> Result<ApiKey> {
        let sql = format!(
            "SELECT {} FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
            API_KEY
        );
        sqlx::query_as::<_, ApiKeyRow>(&sql)
            .bind(key_hash)
            .fetch_one(&self.read)
            .await?
            .try_into()
    }

    async fn list_api_keys(&self, space_id: SpaceId, page: Page<ApiKeyId>) -> Result<Vec<ApiKey>> {
        let rows: Vec<ApiKeyRow> = self
            .keyset_page(
                (API_KEY, "api_keys"),
                ("space_id", space_id.to_string()),
                "",
                page,
            )
            .await?;
        convert_all(rows)
    }

    async fn list_all_api_keys(&self, space_id: SpaceId) -> Result<Vec<ApiKey>> {
        let rows: Vec<ApiKeyRow> = self
            .all_of_space((API_KEY, "api_keys"), space_id, "id")
            .await?;
        convert_all(rows)
    }

    async fn revoke_api_key(
        &self,
        space_id: SpaceId,
        id: ApiKeyId,
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<()> {
        self.write_one_audited(
            sqlx::query(
            "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND space_id = $3 AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(id.to_string())
        .bind(space_id.to_string()),
            audit,
        )
        .await
    }

    async fn set_space_retention(
        &self,
        id: SpaceId,
        retention: Option<Retention>,
        audit: Option<&AuditEntry>,
    ) -> Result<()> {
        self.write_one_audited(
            sqlx::query("UPDATE spaces SET retention = $1 WHERE id = $2")
                .bind(retention.map(|r| r.to_string()))
                .bind(id.to_string()),
            audit,
        )
        .await
    }

    async fn set_demo_until(&self, id: SpaceId, until: UnixMs) -> Result<()> {
        self.write_one_audited(
            sqlx::query("UPDATE spaces SET demo_until = $1 WHERE id = $2")
                .bind(until)
                .bind(id.to_string()),
            None,
        )
        .await
    }

    async fn demo_space(&self) -> Result<Option<SpaceId>> {
        let id: Option<(String,)> = sqlx::query_as(
            "SELECT id FROM spaces WHERE demo_until IS NOT NULL ORDER BY id LIMIT 1",
        )
        .fetch_optional(&self.read)
        .await?;
        id.map(|(id,)| parse("spaces.id", &id)).transpose()
    }

    async fn live_demo_spaces(&self, now: UnixMs) -> Result<Vec<SpaceId>> {
        let ids: Vec<(String,)> =
            sqlx::query_as("SELECT id FROM spaces WHERE demo_until > $1 ORDER BY id")
                .bind(now)
                .fetch_all(&self.read)
                .await?;
        ids.iter().map(|(id,)| parse("spaces.id", id)).collect()
    }

    async fn delete_space(&self, id: SpaceId) -> Result<()> {
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        sqlx::query("DELETE FROM audit_log WHERE space_id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
        let done = sqlx::query("DELETE FROM spaces WHERE id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StorageError::NotFound);
        }
        tx.commit().await?;
        Ok(())
    }

    async fn touch_api_key(&self, id: ApiKeyId, now: UnixMs, interval_ms: i64) -> Result<bool> {
        let query = sqlx::query(
            "UPDATE api_keys SET last_used_at = $1 \
             WHERE id = $2 AND (last_used_at IS NULL OR last_used_at < $3)",
        )
        .bind(now)
        .bind(id.to_string())
        .bind(now - interval_ms);
        Ok(self.execute(Durability::Full, query).await?.rows_affected() == 1)
    }

    async fn claim_demo_round(&self, id: SpaceId, now: UnixMs, next: UnixMs) -> Result<bool> {
        let query = sqlx::query(
            "UPDATE spaces SET demo_next_round_at = $1 \
             WHERE id = $2 AND (demo_next_round_at IS NULL OR demo_next_round_at <= $3)",
        )
        .bind(next)
        .bind(id.to_string())
        .bind(now);
        Ok(self.execute(Durability::Full, query).await?.rows_affected() == 1)
    }

    async fn search_spaces(
        &self,
        pattern: Option<&str>,
        page: Page<SpaceId>,
    ) -> Result<Vec<Space>> {
        let rows: Vec<SpaceRow> = self
            .search_page((SPACE, "spaces"), None, (&["name"], pattern), page)
            .await?;
        convert_all(rows)
    }

    async fn search_api_keys(
        &self,
        space_id: SpaceId,
        pattern: Option<&str>,
        page: Page<ApiKeyId>,
    ) -> Result<Vec<ApiKey>> {
        let rows: Vec<ApiKeyRow> = self
            .search_page(
                (API_KEY, "api_keys"),
                Some(("space_id", space_id.to_string())),
                (&["name", "prefix"], pattern),
                page,
            )
            .await?;
        convert_all(rows)
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct SpaceRow {
    id: String,
    name: String,
    plan: String,
    created_at: i64,
    retention: Option<String>,
}

impl TryFrom<SpaceRow> for Space {
    type Error = StorageError;
    fn try_from(r: SpaceRow) -> Result<Self, StorageError> {
        Ok(Space {
            id: parse("spaces.id", &r.id)?,
            name: r.name,
            plan: parse("spaces.plan", &r.plan)?,
            created_at: r.created_at,
            retention: parse_opt("spaces.retention", r.retention)?,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct ApiKeyRow {
    pub(super) id: String,
    pub(super) space_id: String,
    pub(super) name: String,
    pub(super) prefix: String,
    pub(super) created_at: i64,
    pub(super) last_used_at: Option<i64>,
    pub(super) revoked_at: Option<i64>,
}

impl TryFrom<ApiKeyRow> for ApiKey {
    type Error = StorageError;
    fn try_from(r: ApiKeyRow) -> Result<Self, StorageError> {
        Ok(ApiKey {
            id: parse("api_keys.id", &r.id)?,
            space_id: parse("api_keys.space_id", &r.space_id)?,
            name: r.name,
            prefix: r.prefix,
            created_at: r.created_at,
            last_used_at: r.last_used_at,
            revoked_at: r.revoked_at,
        })
    }
}
