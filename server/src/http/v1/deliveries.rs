//! `/v1/projects/{project}/deliveries`: list with filters, read one with its attempts.

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use super::events::page_limit;
use super::extract::Caller;
use super::views::{AttemptView, DeliveryView, PageOf};
use crate::domain::*;
use crate::http::error::ApiError;
use crate::startup::AppState;
use crate::storage::{DeliveryFilter, Page, StorageError};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/projects/{project}/deliveries", get(list))
        .route("/projects/{project}/deliveries/{id}", get(read))
        .route("/projects/{project}/deliveries/{id}/attempts", get(attempts))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    destination_id: Option<String>,
    #[serde(default)]
    event_type: Option<String>,
    #[serde(default)]
    error_class: Option<String>,
    /// RFC 3339 or Unix milliseconds.
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    until: Option<String>,
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    cursor: Option<String>,
}

fn parse_time(name: &str, s: &str) -> Result<UnixMs, ApiError> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
        .map_err(|_| ApiError::invalid("invalid_filter", format!("{name} must be RFC 3339 or Unix milliseconds")))
}

fn filter_value<T: std::str::FromStr>(name: &str, v: Option<String>) -> Result<Option<T>, ApiError>
where
    T::Err: std::fmt::Display,
{
    v.map(|s| s.parse::<T>().map_err(|e| ApiError::invalid("invalid_filter", format!("{name}: {e}"))))
        .transpose()
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
    Query(q): Query<ListQuery>,
) -> Result<Json<PageOf<DeliveryView>>, ApiError> {
    let space_id = caller.space(&project)?;
    let limit = page_limit(q.limit)?;
    let filter = DeliveryFilter {
        space_id: Some(space_id),
        status: filter_value("status", q.status)?,
        destination_id: filter_value("destinationId", q.destination_id)?,
        event_type: q.event_type,
        error_class: filter_value("errorClass", q.error_class)?,
        since: q.since.as_deref().map(|s| parse_time("since", s)).transpose()?,
        until: q.until.as_deref().map(|s| parse_time("until", s)).transpose()?,
    };
    let before = filter_value::<DeliveryId>("cursor", q.cursor)?;
    let rows = state.storage.list_deliveries(&filter, Page { before, limit }).await?;
    let next_cursor = (rows.len() as i64 == limit).then(|| rows.last().map(|d| d.id.to_string())).flatten();
    Ok(Json(PageOf { data: rows.iter().map(DeliveryView::from).collect(), next_cursor }))
}

/// The delivery, if it is in the caller's space.
pub async fn find(state: &AppState, caller: &Caller, project: &str, id: &str) -> Result<Delivery, ApiError> {
    let space_id = caller.space(project)?;
    let not_found = || ApiError::NotFound(format!("no delivery {id:?}"));
    let id: DeliveryId = id.parse().map_err(|_| not_found())?;
    match state.storage.get_delivery(id).await {
        Ok(d) if d.space_id == space_id => Ok(d),
        Ok(_) | Err(StorageError::NotFound) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}

async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<DeliveryView>, ApiError> {
    let d = find(&state, &caller, &project, &id).await?;
    let attempts = state.storage.list_attempts(d.id).await?;
    let mut v = DeliveryView::from(&d);
    v.attempts = Some(attempts.iter().map(AttemptView::from).collect());
    Ok(Json(v))
}

async fn attempts(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<PageOf<AttemptView>>, ApiError> {
    let d = find(&state, &caller, &project, &id).await?;
    let attempts = state.storage.list_attempts(d.id).await?;
    Ok(Json(PageOf { data: attempts.iter().map(AttemptView::from).collect(), next_cursor: None }))
}
