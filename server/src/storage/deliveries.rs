//! Deliveries and their attempts: reads, resend and cancel (docs §2.7, §2.8).

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use super::store::{
    convert_all, json, json_opt, parse, parse_opt, Args, Conn, DbRow, Dialect, RowsAffected, Sql,
    SqlArg, SqlValue, Store,
};
use super::write::{Durability, WriteTx};
use super::*;

pub(super) const DELIVERY: &str =
    "id, space_id, event_id, destination_id, event_type, status, paused, \
    attempts, next_attempt_at, lease_expires_at, last_error_class, last_status_code, resent_from, \
    resent_as, created_at, updated_at, finished_at, deliver_at";

pub(super) const ATTEMPT: &str =
    "id, delivery_id, space_id, attempt_number, started_at, duration_ms, \
    request_url, request_headers, request_body, response_status, response_headers, response_body, \
    error_class, error_message";

/// Deliveries and attempts as the REST API and the console read them, and their bulk
/// resend and cancel.
#[async_trait]
pub trait DeliveryStore: Send + Sync + std::fmt::Debug {
    async fn get_delivery_by_id(&self, id: DeliveryId) -> Result<Delivery>;
    async fn list_deliveries(
        &self,
        filter: &DeliveryFilter,
        page: Page<DeliveryId>,
    ) -> Result<Vec<Delivery>>;
    async fn list_all_attempts(&self, delivery_id: DeliveryId) -> Result<Vec<Attempt>>;
    /// Cancels waiting deliveries of the space; others are reported, not touched.
    async fn cancel_deliveries(
        &self,
        space_id: SpaceId,
        ids: &[DeliveryId],
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<Vec<(DeliveryId, BulkOutcome)>>;
    /// New deliveries of the same events to the same destinations, sent at once with a
    /// full set of attempts; originals and copies are linked.
    async fn resend_deliveries(
        &self,
        space_id: SpaceId,
        ids: &[DeliveryId],
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<Vec<(DeliveryId, BulkOutcome)>>;
    /// Resends up to `limit` failed deliveries not resent before, oldest first, of those
    /// `filter` selects (its space, destination, event type, error class and creation
    /// window; see `ops::replay`), skipping those of inactive destinations.
    async fn resend_failed(
        &self,
        filter: &DeliveryFilter,
        limit: i64,
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<ResendFailed>;
    /// How many [`DeliveryStore::resend_failed`] would resend, in all its calls, now.
    async fn count_resend_failed(&self, filter: &DeliveryFilter) -> Result<i64>;
}

#[async_trait]
impl<D: Dialect> DeliveryStore for Store<D>
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
    async fn get_delivery_by_id(&self, id: DeliveryId) -> Result<Delivery> {
        let sql = format!("SELECT {} FROM deliveries WHERE id = $1", DELIVERY);
        sqlx::query_as::<_, DeliveryRow>(&sql)
            .bind(id.to_string())
            .fetch_one(&self.read)
            .await?
            .try_into()
    }

    async fn list_deliveries(
        &self,
        f: &DeliveryFilter,
        page: Page<DeliveryId>,
    ) -> Result<Vec<Delivery>> {
        let mut q = Sql::<D>::new(format!("SELECT {} FROM deliveries WHERE 1 = 1", DELIVERY));
        push_filter(&mut q, f);
        if let Some(before) = page.before {
            q.push(" AND id < ").push_bind(before.to_string());
        }
        q.push(" ORDER BY id DESC LIMIT ").push_bind(page.limit);
        let (sql, args) = q.into_parts()?;
        let rows = sqlx::query_as_with::<_, DeliveryRow, _>(&sql, args)
            .fetch_all(&self.read)
            .await?;
        convert_all(rows)
    }

    async fn list_all_attempts(&self, delivery_id: DeliveryId) -> Result<Vec<Attempt>> {
        let sql = format!(
            "SELECT {} FROM attempts WHERE delivery_id = $1 ORDER BY started_at, attempt_number",
            ATTEMPT
        );
        let rows = sqlx::query_as::<_, AttemptRow>(&sql)
            .bind(delivery_id.to_string())
            .fetch_all(&self.read)
            .await?;
        convert_all(rows)
    }

    async fn cancel_deliveries(
        &self,
        space_id: SpaceId,
        ids: &[DeliveryId],
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<Vec<(DeliveryId, BulkOutcome)>> {
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            // Only a waiting delivery can be cancelled; a worker's claim moved it to
            // `sending` atomically, so a cancel never races an attempt.
            let done = sqlx::query(
                "UPDATE deliveries SET status = 'cancelled', last_error_class = 'cancelled', \
                 next_attempt_at = NULL, finished_at = $1, updated_at = $1 \
                 WHERE id = $2 AND space_id = $3 AND status IN ('pending', 'retrying')",
            )
            .bind(now)
            .bind(id.to_string())
            .bind(space_id.to_string())
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 1 {
                out.push((*id, BulkOutcome::Cancelled));
                continue;
            }
            let status: Option<(String,)> =
                sqlx::query_as("SELECT status FROM deliveries WHERE id = $1 AND space_id = $2")
                    .bind(id.to_string())
                    .bind(space_id.to_string())
                    .fetch_optional(&mut *tx)
                    .await?;
            out.push((
                *id,
                match status {
                    None => BulkOutcome::NotFound,
                    Some((s,)) => {
                        BulkOutcome::WrongStatus(s.parse().map_err(|e| {
                            StorageError::Corrupt(format!("deliveries.status: {e}"))
                        })?)
                    }
                },
            ));
        }
        Self::audit_bulk_in(&mut tx, audit, &out).await?;
        tx.commit().await?;
        Ok(out)
    }

    async fn resend_deliveries(
        &self,
        space_id: SpaceId,
        ids: &[DeliveryId],
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<Vec<(DeliveryId, BulkOutcome)>> {
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        // Write first, so SQLite takes its write lock before the reads below (a read-then-write
        // transaction fails at once with "database is locked" if another writer came in between).
        sqlx::query("UPDATE spaces SET name = name WHERE id = $1")
            .bind(space_id.to_string())
            .execute(&mut *tx)
            .await?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let row: Option<(String, String)> = sqlx::query_as(
                "SELECT d.status, t.status FROM deliveries d \
                 JOIN destinations t ON t.id = d.destination_id WHERE d.id = $1 AND d.space_id = $2",
            )
            .bind(id.to_string())
            .bind(space_id.to_string())
            .fetch_optional(&mut *tx)
            .await?;
            let Some((status, destination_status)) = row else {
                out.push((*id, BulkOutcome::NotFound));
                continue;
            };
            let status: DeliveryStatus = status
                .parse()
                .map_err(|e| StorageError::Corrupt(format!("deliveries.status: {e}")))?;
            if !status.is_final() {
                out.push((*id, BulkOutcome::WrongStatus(status)));
                continue;
            }
            if destination_status != DestinationStatus::Active.as_str() {
                out.push((*id, BulkOutcome::DestinationInactive));
                continue;
            }
            let copy = Self::resend_in(&mut tx, &id.to_string(), now).await?;
            out.push((*id, BulkOutcome::Resent(copy)));
        }
        Self::audit_bulk_in(&mut tx, audit, &out).await?;
        tx.commit().await?;
        Ok(out)
    }

    async fn resend_failed(
        &self,
        filter: &DeliveryFilter,
        limit: i64,
        now: UnixMs,
        audit: Option<&AuditEntry>,
    ) -> Result<ResendFailed> {
        let space_id = filter.space_id.ok_or(StorageError::NotFound)?;
        let mut writer = self.writes.writer(Durability::Full).await?;
        let mut tx = writer.begin().await?;
        // Take the write lock first (SQLite), then pick the batch.
        sqlx::query("UPDATE spaces SET name = name WHERE id = $1")
            .bind(space_id.to_string())
            .execute(&mut *tx)
            .await?;
        let mut pick = resend_failed_pick::<D>("SELECT id", filter);
        pick.push(" ORDER BY id LIMIT ").push_bind(limit);
        let (sql, args) = pick.into_parts()?;
        let ids: Vec<(String,)> = sqlx::query_as_with(&sql, args).fetch_all(&mut *tx).await?;
        for (id,) in &ids {
            Self::resend_in(&mut tx, id, now).await?;
        }
        let (sql, args) = resend_failed_pick::<D>("SELECT COUNT(*)", filter).into_parts()?;
        let (remaining,): (i64,) = sqlx::query_as_with(&sql, args).fetch_one(&mut *tx).await?;
        if !ids.is_empty() {
            let entry = audit.map(|a| a.with_count(ids.len() as i64));
            Self::audit_in(&mut tx, entry.as_ref()).await?;
        }
        tx.commit().await?;
        Ok(ResendFailed {
            resent: ids.len() as i64,
            remaining,
        })
    }

    async fn count_resend_failed(&self, filter: &DeliveryFilter) -> Result<i64> {
        if filter.space_id.is_none() {
            return Err(StorageError::NotFound);
        }
        let (sql, args) = resend_failed_pick::<D>("SELECT COUNT(*)", filter).into_parts()?;
        let (n,): (i64,) = sqlx::query_as_with(&sql, args)
            .fetch_one(&self.read)
            .await?;
        Ok(n)
    }
}

/// The deliveries resend-failed takes (docs §2.7): failed ones `f` selects (its status
/// aside), not resent before, of active destinations. With the space, status and ID
/// (time) bounds first, the `(space_id, status, id)` index finds them.
fn resend_failed_pick<'a, D: Dialect>(select: &str, f: &DeliveryFilter) -> Sql<'a, D>
where
    for<'q> &'q str: SqlArg<'q, D::DB>,
    String: SqlValue<D::DB>,
{
    let failed = DeliveryFilter {
        status: Some(DeliveryStatus::Failed),
        ..f.clone()
    };
    let mut q = Sql::<D>::new(format!("{select} FROM deliveries WHERE 1 = 1"));
    push_filter(&mut q, &failed);
    q.push(
        " AND resent_as IS NULL AND EXISTS (SELECT 1 FROM destinations t \
         WHERE t.id = deliveries.destination_id AND t.status = 'active')",
    );
    q
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
    /// The audit entry of a resend or cancel of listed deliveries, with the number it
    /// changed; none when it changed nothing.
    async fn audit_bulk_in(
        tx: &mut WriteTx<'_, D::DB>,
        audit: Option<&AuditEntry>,
        out: &[(DeliveryId, BulkOutcome)],
    ) -> Result<()> {
        let changed = out
            .iter()
            .filter(|(_, o)| matches!(o, BulkOutcome::Resent(_) | BulkOutcome::Cancelled))
            .count() as i64;
        if changed == 0 {
            return Ok(());
        }
        let entry = audit.map(|a| a.with_count(changed));
        Self::audit_in(tx, entry.as_ref()).await
    }

    /// A new delivery of the same event to the same destination, due now with a full set
    /// of attempts, linked both ways to the original `id` (docs §2.7).
    async fn resend_in(tx: &mut WriteTx<'_, D::DB>, id: &str, now: UnixMs) -> Result<DeliveryId> {
        let copy = DeliveryId::new();
        sqlx::query(
            "INSERT INTO deliveries (id, space_id, event_id, destination_id, event_type, status, attempts, \
             next_attempt_at, resent_from, created_at, updated_at) \
             SELECT $1, space_id, event_id, destination_id, event_type, 'pending', 0, $2, id, $2, $2 \
             FROM deliveries WHERE id = $3",
        )
        .bind(copy.to_string())
        .bind(now)
        .bind(id)
        .execute(&mut **tx)
        .await?;
        sqlx::query("UPDATE deliveries SET resent_as = $1, updated_at = $2 WHERE id = $3")
            .bind(copy.to_string())
            .bind(now)
            .bind(id)
            .execute(&mut **tx)
            .await?;
        Ok(copy)
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct DeliveryRow {
    id: String,
    space_id: String,
    event_id: String,
    destination_id: String,
    event_type: String,
    status: String,
    paused: bool,
    attempts: i64,
    next_attempt_at: Option<i64>,
    lease_expires_at: Option<i64>,
    last_error_class: Option<String>,
    last_status_code: Option<i64>,
    resent_from: Option<String>,
    resent_as: Option<String>,
    created_at: i64,
    updated_at: i64,
    finished_at: Option<i64>,
    deliver_at: Option<i64>,
}

impl TryFrom<DeliveryRow> for Delivery {
    type Error = StorageError;
    fn try_from(r: DeliveryRow) -> Result<Self, StorageError> {
        Ok(Delivery {
            id: parse("deliveries.id", &r.id)?,
            space_id: parse("deliveries.space_id", &r.space_id)?,
            event_id: parse("deliveries.event_id", &r.event_id)?,
            destination_id: parse("deliveries.destination_id", &r.destination_id)?,
            event_type: r.event_type,
            status: parse("deliveries.status", &r.status)?,
            paused: r.paused,
            attempts: r.attempts,
            next_attempt_at: r.next_attempt_at,
            lease_expires_at: r.lease_expires_at,
            last_error_class: parse_opt("deliveries.last_error_class", r.last_error_class)?,
            last_status_code: r.last_status_code,
            resent_from: parse_opt("deliveries.resent_from", r.resent_from)?,
            resent_as: parse_opt("deliveries.resent_as", r.resent_as)?,
            created_at: r.created_at,
            updated_at: r.updated_at,
            finished_at: r.finished_at,
            deliver_at: r.deliver_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct AttemptRow {
    id: String,
    delivery_id: String,
    space_id: String,
    attempt_number: i64,
    started_at: i64,
    duration_ms: i64,
    request_url: String,
    request_headers: String,
    request_body: String,
    response_status: Option<i64>,
    response_headers: Option<String>,
    response_body: Option<String>,
    error_class: Option<String>,
    error_message: Option<String>,
}

impl TryFrom<AttemptRow> for Attempt {
    type Error = StorageError;
    fn try_from(r: AttemptRow) -> Result<Self, StorageError> {
        Ok(Attempt {
            id: parse("attempts.id", &r.id)?,
            delivery_id: parse("attempts.delivery_id", &r.delivery_id)?,
            space_id: parse("attempts.space_id", &r.space_id)?,
            attempt_number: r.attempt_number,
            started_at: r.started_at,
            duration_ms: r.duration_ms,
            request_url: r.request_url,
            request_headers: json("attempts.request_headers", &r.request_headers)?,
            request_body: r.request_body,
            response_status: r.response_status,
            response_headers: json_opt("attempts.response_headers", r.response_headers)?,
            response_body: r.response_body,
            error_class: parse_opt("attempts.error_class", r.error_class)?,
            error_message: r.error_message,
        })
    }
}

/// The conditions of a [`DeliveryFilter`], appended after `… WHERE 1 = 1`: the listing and
/// the count ([`super::stats`]) select the same deliveries.
pub(super) fn push_filter<D: Dialect>(q: &mut Sql<'_, D>, f: &DeliveryFilter)
where
    for<'q> &'q str: SqlArg<'q, D::DB>,
    String: SqlValue<D::DB>,
{
    if let Some(space) = f.space_id {
        q.push(" AND space_id = ").push_bind(space.to_string());
    }
    if let Some(status) = f.status {
        q.push(" AND status = ").push_bind(status.as_str());
    }
    if let Some(dst) = f.destination_id {
        q.push(" AND destination_id = ").push_bind(dst.to_string());
    }
    if let Some(t) = &f.event_type {
        q.push(" AND event_type = ").push_bind(t.clone());
    }
    if let Some(class) = f.error_class {
        q.push(" AND last_error_class = ").push_bind(class.as_str());
    }
    // Time bounds become ID bounds: IDs sort by creation time, and the indexes end in `id`.
    if let Some(since) = f.since {
        q.push(" AND id >= ")
            .push_bind(DeliveryId::lower_bound_at(since).to_string());
    }
    if let Some(until) = f.until {
        q.push(" AND id < ")
            .push_bind(DeliveryId::lower_bound_at(until).to_string());
    }
}
