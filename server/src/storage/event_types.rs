//! The event-type catalog (docs §1): one row per (space, name) with its description,
//! optional JSON Schema and example, and whether it is deprecated.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use super::store::{
    convert_all, json_opt, parse, Args, Conn, DbRow, Dialect, SqlArg, SqlValue, Store,
};
use super::*;

pub(super) const EVENT_TYPE: &str =
    "id, space_id, name, description, schema, example, deprecated, created_at, updated_at";

/// The catalog: kept by the REST API and the console, read by every publish that checks
/// payloads against a type's schema.
#[async_trait]
pub trait EventTypeStore: Send + Sync + std::fmt::Debug {
    /// `Conflict` when the space has a type of that name already.
    async fn create_event_type(
        &self,
        event_type: &EventType,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    /// Description, schema, example and `deprecated`, by ID (the name never changes).
    async fn update_event_type(
        &self,
        event_type: &EventType,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    async fn find_event_type_by_name(&self, space_id: SpaceId, name: &str) -> Result<EventType>;
    /// The `updated_at` of the space's type `name` if it has a schema; `None` when the
    /// type has none or is not catalogued. What a publish reads before it validates.
    async fn find_event_type_schema_version(
        &self,
        space_id: SpaceId,
        name: &str,
    ) -> Result<Option<UnixMs>>;
    /// A page of the space's types, newest first (the REST API).
    async fn list_event_types(
        &self,
        space_id: SpaceId,
        page: Page<EventTypeId>,
    ) -> Result<Vec<EventType>>;
    /// Every type of the space, by name (the console).
    async fn list_all_event_types(&self, space_id: SpaceId) -> Result<Vec<EventType>>;
    /// A page of event types, of one space or all,, newest first, for the console's list: with `pattern` only
    /// those whose lower-cased name or description is `LIKE` it (`Store::search_page`).
    async fn search_event_types(
        &self,
        space_id: Option<SpaceId>,
        pattern: Option<&str>,
        page: Page<EventTypeId>,
    ) -> Result<Vec<EventType>>;
}

#[async_trait]
impl<D: Dialect> EventTypeStore for Store<D>
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
    async fn create_event_type(&self, t: &EventType, audit: Option<&AuditEntry>) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO event_types (id, space_id, name, description, schema, example, deprecated, \
             created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(t.id.to_string())
        .bind(t.space_id.to_string())
        .bind(&t.name)
        .bind(&t.description)
        .bind(t.schema.as_ref().map(|s| s.to_string()))
        .bind(t.example.as_ref().map(|e| e.to_string()))
        .bind(t.deprecated)
        .bind(t.created_at)
        .bind(t.updated_at);
        self.execute_audited(query, audit).await?;
        Ok(())
    }

    async fn update_event_type(&self, t: &EventType, audit: Option<&AuditEntry>) -> Result<()> {
        self.write_one_audited(
            sqlx::query(
                "UPDATE event_types SET description = $1, schema = $2, example = $3, deprecated = $4, \
                 updated_at = $5 WHERE id = $6 AND space_id = $7",
            )
            .bind(&t.description)
            .bind(t.schema.as_ref().map(|s| s.to_string()))
            .bind(t.example.as_ref().map(|e| e.to_string()))
            .bind(t.deprecated)
            .bind(t.updated_at)
            .bind(t.id.to_string())
            .bind(t.space_id.to_string()),
            audit,
        )
        .await
    }

    async fn find_event_type_by_name(&self, space_id: SpaceId, name: &str) -> Result<EventType> {
        let sql = format!(
            "SELECT {} FROM event_types WHERE space_id = $1 AND name = $2",
            EVENT_TYPE
        );
        sqlx::query_as::<_, EventTypeRow>(&sql)
            .bind(space_id.to_string())
            .bind(name)
            .fetch_one(&self.read)
            .await?
            .try_into()
    }

    async fn find_event_type_schema_version(
        &self,
        space_id: SpaceId,
        name: &str,
    ) -> Result<Option<UnixMs>> {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT updated_at FROM event_types \
             WHERE space_id = $1 AND name = $2 AND schema IS NOT NULL",
        )
        .bind(space_id.to_string())
        .bind(name)
        .fetch_optional(&self.read)
        .await?;
        Ok(row.map(|(updated_at,)| updated_at))
    }

    async fn list_event_types(
        &self,
        space_id: SpaceId,
        page: Page<EventTypeId>,
    ) -> Result<Vec<EventType>> {
        let rows: Vec<EventTypeRow> = self
            .keyset_page(
                (EVENT_TYPE, "event_types"),
                ("space_id", space_id.to_string()),
                "",
                page,
            )
            .await?;
        convert_all(rows)
    }

    async fn list_all_event_types(&self, space_id: SpaceId) -> Result<Vec<EventType>> {
        let rows: Vec<EventTypeRow> = self
            .all_of_space((EVENT_TYPE, "event_types"), space_id, "name")
            .await?;
        convert_all(rows)
    }

    async fn search_event_types(
        &self,
        space_id: Option<SpaceId>,
        pattern: Option<&str>,
        page: Page<EventTypeId>,
    ) -> Result<Vec<EventType>> {
        let rows: Vec<EventTypeRow> = self
            .search_page(
                (EVENT_TYPE, "event_types"),
                space_id.map(|s| ("space_id", s.to_string())),
                (&["name", "description"], pattern),
                page,
            )
            .await?;
        convert_all(rows)
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct EventTypeRow {
    id: String,
    space_id: String,
    name: String,
    description: String,
    schema: Option<String>,
    example: Option<String>,
    deprecated: bool,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<EventTypeRow> for EventType {
    type Error = StorageError;
    fn try_from(r: EventTypeRow) -> Result<Self, StorageError> {
        Ok(EventType {
            id: parse("event_types.id", &r.id)?,
            space_id: parse("event_types.space_id", &r.space_id)?,
            name: r.name,
            description: r.description,
            schema: json_opt("event_types.schema", r.schema)?,
            example: json_opt("event_types.example", r.example)?,
            deprecated: r.deprecated,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}
