//! Destinations and their subscriptions.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use super::events::FAN_OUT_CHUNK;
use super::store::{
    convert_all, json, parse, Args, Conn, DbRow, Dialect, RowsAffected, Sql, SqlArg, SqlValue,
    Store,
};
use super::write::{Durability, WriteTx, Writer};
use super::*;

pub(super) const DESTINATION: &str = "id, space_id, url, description, event_types, secret, \
    previous_secret, previous_secret_expires_at, rate_limit_count, rate_limit_period, max_attempts, \
    timeout_seconds, retry_policy, transformation, status, consecutive_dead_letters, skipped_events, \
    disabled_reason, created_at, updated_at, payload_filter, filtered_events, ordering, headers, name";

/// Destinations: created, read, changed, enabled and disabled by the REST API and the
/// console.
#[async_trait]
pub trait DestinationStore: Send + Sync + std::fmt::Debug {
    async fn create_destination(
        &self,
        destination: &Destination,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    async fn get_destination(&self, space_id: SpaceId, id: DestinationId) -> Result<Destination>;
    /// A destination by ID alone (the console links to destinations across spaces).
    async fn get_destination_by_id(&self, id: DestinationId) -> Result<Destination>;
    /// A page of the space's destinations, newest first (the REST API).
    async fn list_destinations(
        &self,
        space_id: SpaceId,
        page: Page<DestinationId>,
    ) -> Result<Vec<Destination>>;
    /// Every destination of the space, oldest first (the console).
    async fn list_all_destinations(&self, space_id: SpaceId) -> Result<Vec<Destination>>;
    async fn update_destination(
        &self,
        destination: &Destination,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    async fn delete_destination(
        &self,
        space_id: SpaceId,
        id: DestinationId,
        audit: Option<&AuditEntry>,
    ) -> Result<()>;
    /// Enables or disables a destination. Disabling pauses its waiting deliveries; enabling
    /// resumes them and resets the dead-letter streak (docs D6).
    async fn set_destination_status(
        &self,
        space_id: SpaceId,
        id: DestinationId,
        status: DestinationStatus,
        reason: Option<&str>,
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<Destination>;
    /// The space's active destinations that have a filter, whatever their event types
    /// (publishing runs their filters before it writes: `ops::filters`). On an index
    /// of the filtered destinations only: a space without any reads nothing.
    async fn list_filtered_destinations(&self, space_id: SpaceId) -> Result<Vec<Destination>>;
}

#[async_trait]
impl<D: Dialect> DestinationStore for Store<D>
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
    async fn create_destination(&self, d: &Destination, audit: Option<&AuditEntry>) -> Result<()> {
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        let event_types = d
            .event_types
            .as_ref()
            .map(|t| serde_json::Value::from(t.clone()).to_string());
        sqlx::query(
            "INSERT INTO destinations (id, space_id, url, description, event_types, secret, previous_secret, \
             previous_secret_expires_at, rate_limit_count, rate_limit_period, max_attempts, timeout_seconds, \
             retry_policy, transformation, status, consecutive_dead_letters, skipped_events, disabled_reason, \
             created_at, updated_at, payload_filter, filtered_events, headers, name) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, \
             $21, $22, $23, $24)",
        )
        .bind(d.id.to_string())
        .bind(d.space_id.to_string())
        .bind(&d.url)
        .bind(&d.description)
        .bind(event_types)
        .bind(&d.secret)
        .bind(&d.previous_secret)
        .bind(d.previous_secret_expires_at)
        .bind(d.rate_limit.map(|r| i64::from(r.count)))
        .bind(d.rate_limit.map(|r| r.period.as_str()))
        .bind(d.max_attempts)
        .bind(d.timeout_seconds)
        .bind(d.retry_policy.to_string())
        .bind(&d.transformation)
        .bind(d.status.as_str())
        .bind(d.consecutive_dead_letters)
        .bind(d.skipped_events)
        .bind(&d.disabled_reason)
        .bind(d.created_at)
        .bind(d.updated_at)
        .bind(&d.filter)
        .bind(d.filtered_events)
        .bind(headers_json(&d.headers))
        .bind(&d.name)
        .execute(&mut *tx)
        .await?;
        Self::write_ordering(&mut tx, d).await?;
        Self::write_subscriptions(&mut tx, d).await?;
        Self::audit_in(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn get_destination(&self, space_id: SpaceId, id: DestinationId) -> Result<Destination> {
        let sql = format!(
            "SELECT {} FROM destinations WHERE id = $1 AND space_id = $2",
            DESTINATION
        );
        sqlx::query_as::<_, DestinationRow>(&sql)
            .bind(id.to_string())
            .bind(space_id.to_string())
            .fetch_one(&self.read)
            .await?
            .try_into()
    }

    async fn get_destination_by_id(&self, id: DestinationId) -> Result<Destination> {
        let sql = format!("SELECT {} FROM destinations WHERE id = $1", DESTINATION);
        sqlx::query_as::<_, DestinationRow>(&sql)
            .bind(id.to_string())
            .fetch_one(&self.read)
            .await?
            .try_into()
    }

    async fn list_destinations(
        &self,
        space_id: SpaceId,
        page: Page<DestinationId>,
    ) -> Result<Vec<Destination>> {
        let rows: Vec<DestinationRow> = self
            .keyset_page(
                (DESTINATION, "destinations"),
                ("space_id", space_id.to_string()),
                "",
                page,
            )
            .await?;
        convert_all(rows)
    }

    async fn list_all_destinations(&self, space_id: SpaceId) -> Result<Vec<Destination>> {
        let rows: Vec<DestinationRow> = self
            .all_of_space((DESTINATION, "destinations"), space_id, "id")
            .await?;
        convert_all(rows)
    }

    async fn update_destination(&self, d: &Destination, audit: Option<&AuditEntry>) -> Result<()> {
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        let event_types = d
            .event_types
            .as_ref()
            .map(|t| serde_json::Value::from(t.clone()).to_string());
        let done = sqlx::query(
            "UPDATE destinations SET url = $1, description = $2, event_types = $3, secret = $4, \
             previous_secret = $5, previous_secret_expires_at = $6, rate_limit_count = $7, \
             rate_limit_period = $8, max_attempts = $9, timeout_seconds = $10, retry_policy = $11, \
             transformation = $12, updated_at = $13, payload_filter = $16, headers = $17, name = $18 WHERE id = $14 AND space_id = $15",
        )
        .bind(&d.url)
        .bind(&d.description)
        .bind(event_types)
        .bind(&d.secret)
        .bind(&d.previous_secret)
        .bind(d.previous_secret_expires_at)
        .bind(d.rate_limit.map(|r| i64::from(r.count)))
        .bind(d.rate_limit.map(|r| r.period.as_str()))
        .bind(d.max_attempts)
        .bind(d.timeout_seconds)
        .bind(d.retry_policy.to_string())
        .bind(&d.transformation)
        .bind(d.updated_at)
        .bind(d.id.to_string())
        .bind(d.space_id.to_string())
        .bind(&d.filter)
        .bind(headers_json(&d.headers))
        .bind(&d.name)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StorageError::NotFound);
        }
        Self::write_ordering(&mut tx, d).await?;
        Self::write_subscriptions(&mut tx, d).await?;
        Self::audit_in(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn delete_destination(
        &self,
        space_id: SpaceId,
        id: DestinationId,
        audit: Option<&AuditEntry>,
    ) -> Result<()> {
        // On PostgreSQL the cascade over the destination's deliveries locks them in its own
        // order, and the engine's record of a group of attempts to them in the group's: the
        // database then aborts one of the two. The engine's record falls back to one attempt
        // at a time; the delete is tried again.
        let mut tries = 0;
        loop {
            let deleted = self
                .write_one_audited(
                    sqlx::query("DELETE FROM destinations WHERE id = $1 AND space_id = $2")
                        .bind(id.to_string())
                        .bind(space_id.to_string()),
                    audit,
                )
                .await;
            match deleted {
                Err(e) if super::is_deadlock(&e) && tries < 3 => tries += 1,
                done => return done,
            }
        }
    }

    async fn set_destination_status(
        &self,
        space_id: SpaceId,
        id: DestinationId,
        status: DestinationStatus,
        reason: Option<&str>,
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<Destination> {
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        let done = sqlx::query(
            "UPDATE destinations SET status = $1, disabled_reason = $2, updated_at = $3, \
             consecutive_dead_letters = CASE WHEN $1 = 'active' THEN 0 ELSE consecutive_dead_letters END \
             WHERE id = $4 AND space_id = $5",
        )
        .bind(status.as_str())
        .bind(if status == DestinationStatus::Active { None } else { reason })
        .bind(now)
        .bind(id.to_string())
        .bind(space_id.to_string())
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StorageError::NotFound);
        }
        // Disabling pauses what waits; enabling resumes it at once (the receiver is
        // presumably fixed), without losing anything (docs D6).
        sqlx::query(
            "UPDATE deliveries SET paused = $1, updated_at = $2, \
               next_attempt_at = CASE WHEN $1 THEN next_attempt_at ELSE $2 END \
             WHERE destination_id = $3 AND status IN ('pending', 'retrying') AND paused <> $1",
        )
        .bind(status == DestinationStatus::Inactive)
        .bind(now)
        .bind(id.to_string())
        .execute(&mut *tx)
        .await?;
        let sql = format!("SELECT {} FROM destinations WHERE id = $1", DESTINATION);
        let row = sqlx::query_as::<_, DestinationRow>(&sql)
            .bind(id.to_string())
            .fetch_one(&mut *tx)
            .await?;
        Self::audit_in(&mut tx, audit).await?;
        tx.commit().await?;
        row.try_into()
    }

    async fn list_filtered_destinations(&self, space_id: SpaceId) -> Result<Vec<Destination>> {
        let sql = format!(
            "SELECT {} FROM destinations \
             WHERE space_id = $1 AND payload_filter IS NOT NULL AND status = 'active'",
            DESTINATION
        );
        convert_all(
            sqlx::query_as::<_, DestinationRow>(&sql)
                .bind(space_id.to_string())
                .fetch_all(&self.read)
                .await?,
        )
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
    /// The destinations named (the first [`FAN_OUT_CHUNK`] of them), read by `writer` in one
    /// statement of its own, outside a transaction: PostgreSQL's claim reads those of its
    /// deliveries after its commit ([`super::postgres`]).
    pub(super) async fn destinations_by(
        writer: Writer<'_, D::DB>,
        ids: &[DestinationId],
    ) -> Result<Vec<Destination>> {
        let mut q = Sql::<D>::new(format!(
            "SELECT {DESTINATION} FROM destinations WHERE id IN ("
        ));
        q.push_list(ids.iter().take(FAN_OUT_CHUNK).map(|d| d.to_string()));
        q.push(")");
        let (sql, args) = q.into_parts()?;
        let rows = writer
            .fetch_all(sqlx::query_as_with::<_, DestinationRow, _>(&sql, args))
            .await?;
        convert_all(rows)
    }

    /// The destination's ordering (docs D12), written apart from the other settings.
    async fn write_ordering(tx: &mut WriteTx<'_, D::DB>, d: &Destination) -> Result<()> {
        sqlx::query("UPDATE destinations SET ordering = $1 WHERE id = $2")
            .bind(d.ordering.as_str())
            .bind(d.id.to_string())
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// The destination's rows in `subscriptions`, rewritten from its `event_types`.
    async fn write_subscriptions(tx: &mut WriteTx<'_, D::DB>, d: &Destination) -> Result<()> {
        sqlx::query("DELETE FROM subscriptions WHERE destination_id = $1")
            .bind(d.id.to_string())
            .execute(&mut **tx)
            .await?;
        let mut types: Vec<&str> = match &d.event_types {
            Some(types) if !types.iter().any(|t| t == "*") => {
                types.iter().map(String::as_str).collect()
            }
            _ => vec!["*"],
        };
        types.sort_unstable();
        types.dedup();
        for chunk in types.chunks(FAN_OUT_CHUNK) {
            let mut insert =
                Sql::<D>::new("INSERT INTO subscriptions (space_id, event_type, destination_id) ");
            insert.push_values(chunk, |mut row, t| {
                row.push_bind(d.space_id.to_string())
                    .push_bind(*t)
                    .push_bind(d.id.to_string());
            });
            let (sql, args) = insert.into_parts()?;
            sqlx::query_with(&sql, args).execute(&mut **tx).await?;
        }
        Ok(())
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct DestinationRow {
    id: String,
    space_id: String,
    url: String,
    description: String,
    event_types: Option<String>,
    secret: String,
    previous_secret: Option<String>,
    previous_secret_expires_at: Option<i64>,
    rate_limit_count: Option<i64>,
    rate_limit_period: Option<String>,
    max_attempts: i64,
    timeout_seconds: i64,
    retry_policy: String,
    transformation: Option<String>,
    status: String,
    consecutive_dead_letters: i64,
    skipped_events: i64,
    disabled_reason: Option<String>,
    created_at: i64,
    updated_at: i64,
    payload_filter: Option<String>,
    filtered_events: i64,
    ordering: String,
    headers: String,
    name: Option<String>,
}

impl TryFrom<DestinationRow> for Destination {
    type Error = StorageError;
    fn try_from(r: DestinationRow) -> Result<Self, StorageError> {
        let event_types = match r.event_types {
            None => None,
            Some(s) => Some(
                serde_json::from_str(&s)
                    .map_err(|e| StorageError::Corrupt(format!("destinations.event_types: {e}")))?,
            ),
        };
        let rate_limit = match (r.rate_limit_count, r.rate_limit_period) {
            (Some(count), Some(period)) => Some(RateLimit {
                count: u32::try_from(count).map_err(|e| {
                    StorageError::Corrupt(format!("destinations.rate_limit_count: {e}"))
                })?,
                period: parse("destinations.rate_limit_period", &period)?,
            }),
            _ => None,
        };
        Ok(Destination {
            id: parse("destinations.id", &r.id)?,
            space_id: parse("destinations.space_id", &r.space_id)?,
            url: r.url,
            description: r.description,
            event_types,
            secret: r.secret,
            previous_secret: r.previous_secret,
            previous_secret_expires_at: r.previous_secret_expires_at,
            rate_limit,
            max_attempts: r.max_attempts,
            timeout_seconds: r.timeout_seconds,
            retry_policy: json("destinations.retry_policy", &r.retry_policy)?,
            transformation: r.transformation,
            status: parse("destinations.status", &r.status)?,
            consecutive_dead_letters: r.consecutive_dead_letters,
            skipped_events: r.skipped_events,
            disabled_reason: r.disabled_reason,
            created_at: r.created_at,
            updated_at: r.updated_at,
            filter: r.payload_filter,
            filtered_events: r.filtered_events,
            ordering: parse("destinations.ordering", &r.ordering)?,
            headers: headers_of(&r.headers)?,
            name: r.name,
        })
    }
}

/// A destination's headers as stored: a JSON object of name to value.
fn headers_json(headers: &CustomHeaders) -> String {
    let object: serde_json::Map<String, serde_json::Value> = headers
        .iter()
        .map(|(n, v)| (n.to_owned(), serde_json::Value::from(v)))
        .collect();
    serde_json::Value::Object(object).to_string()
}

fn headers_of(text: &str) -> Result<CustomHeaders, StorageError> {
    let corrupt = |why: String| StorageError::Corrupt(format!("destinations.headers: {why}"));
    let object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))?;
    let headers = object
        .into_iter()
        .map(|(name, value)| match value {
            serde_json::Value::String(v) => Ok((name, v)),
            _ => Err(corrupt(format!("the value of {name} is not a string"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(CustomHeaders::new(headers))
}
