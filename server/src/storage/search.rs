//! The console's searches: the search box (`ops::search`) and the search fields of its
//! long lists. Each look-up is bounded by its `limit` and served by an index (deliveries
//! by event, idempotency keys by key: `0016_console_at_scale.sql`), except a destination
//! fragment, a scan of the destinations newest first (thousands of rows, not millions)
//! that stops at the page's end.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Executor, IntoArguments};

use super::deliveries::{DeliveryRow, DELIVERY};
use super::destinations::{DestinationRow, DESTINATION};
use super::store::{convert_all, Args, Conn, DbRow, Dialect, Sql, SqlArg, SqlValue, Store};
use super::*;

/// What the search box looks up.
#[async_trait]
pub trait SearchStore: Send + Sync + std::fmt::Debug {
    /// The events published with idempotency key `key` (exactly), in any space, newest first.
    async fn find_events_by_idempotency_key(&self, key: &str, limit: i64) -> Result<Vec<EventId>>;
    /// The deliveries of these events, newest first.
    async fn list_deliveries_of_events(
        &self,
        events: &[EventId],
        limit: i64,
    ) -> Result<Vec<Delivery>>;
    /// A page of destinations, newest first: of one space or all, and with `pattern`
    /// only those whose lower-cased URL, description or name is `LIKE` it (escaped with `\`:
    /// `ops::search::fragment_pattern`). The search box, the destinations page and the
    /// deliveries page's destination field.
    async fn search_destinations(
        &self,
        space_id: Option<SpaceId>,
        pattern: Option<&str>,
        page: Page<DestinationId>,
    ) -> Result<Vec<Destination>>;
}

#[async_trait]
impl<D: Dialect> SearchStore for Store<D>
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
    async fn find_events_by_idempotency_key(&self, key: &str, limit: i64) -> Result<Vec<EventId>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT event_id FROM idempotency_keys WHERE key = $1 ORDER BY event_id DESC LIMIT $2",
        )
        .bind(key)
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        rows.into_iter()
            .map(|(id,)| {
                id.parse()
                    .map_err(|e| StorageError::Corrupt(format!("idempotency_keys.event_id: {e}")))
            })
            .collect()
    }

    async fn list_deliveries_of_events(
        &self,
        events: &[EventId],
        limit: i64,
    ) -> Result<Vec<Delivery>> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut q = Sql::<D>::new(format!(
            "SELECT {DELIVERY} FROM deliveries WHERE event_id IN ("
        ));
        q.push_list(events.iter().map(|e| e.to_string()))
            .push(") ORDER BY id DESC LIMIT ")
            .push_bind(limit);
        let (sql, args) = q.into_parts()?;
        let rows = sqlx::query_as_with::<_, DeliveryRow, _>(&sql, args)
            .fetch_all(&self.read)
            .await?;
        convert_all(rows)
    }

    async fn search_destinations(
        &self,
        space_id: Option<SpaceId>,
        pattern: Option<&str>,
        page: Page<DestinationId>,
    ) -> Result<Vec<Destination>> {
        let rows: Vec<DestinationRow> = self
            .search_page(
                (DESTINATION, "destinations"),
                space_id.map(|s| ("space_id", s.to_string())),
                (&["url", "description", "name"], pattern),
                page,
            )
            .await?;
        convert_all(rows)
    }
}
