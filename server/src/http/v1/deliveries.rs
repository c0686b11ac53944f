//! `/v1/projects/{project}/deliveries`: list with filters, read one with its attempts.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::events::page_limit;
use super::extract::{ApiJson, Caller};
use crate::clock::now_ms;
use super::views::{AttemptView, DeliveryView, PageOf};
use crate::domain::*;
use crate::http::error::ApiError;
use crate::startup::AppState;
use crate::storage::{BulkOutcome, DeliveryFilter, Page, StorageError};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/projects/{project}/deliveries", get(list))
        .route("/projects/{project}/deliveries/resend", post(resend_many))
        .route("/projects/{project}/deliveries/resend-failed", post(resend_failed))
        .route("/projects/{project}/deliveries/cancel", post(cancel_many))
        .route("/projects/{project}/deliveries/{id}", get(read))
        .route("/projects/{project}/deliveries/{id}/attempts", get(attempts))
        .route("/projects/{project}/deliveries/{id}/resend", post(resend_one))
        .route("/projects/{project}/deliveries/{id}/cancel", post(cancel_one))
}

/// The most deliveries one resend or cancel call may name (SPEC §2.7).
pub const MAX_CHOSEN: usize = 100;
/// The most failed deliveries one resend-failed call resends (SPEC §2.7).
pub const MAX_RESEND_FAILED: i64 = 1000;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ChosenBody {
    delivery_ids: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResendFailedBody {
    #[serde(default)]
    destination_id: Option<String>,
}

/// One line of a bulk answer: what happened to each ID asked for.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BulkItem {
    id: String,
    /// `resent`, `cancelled`, `not_found`, `not_waiting`, `not_finished`, `destination_inactive`.
    result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    new_delivery_id: Option<DeliveryId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<DeliveryStatus>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BulkAnswer {
    #[serde(skip_serializing_if = "Option::is_none")]
    resent: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cancelled: Option<i64>,
    results: Vec<BulkItem>,
}

fn bulk_item(id: String, outcome: BulkOutcome, cancelling: bool) -> BulkItem {
    let (result, new_delivery_id, status) = match outcome {
        BulkOutcome::Resent(new) => ("resent", Some(new), None),
        BulkOutcome::Cancelled => ("cancelled", None, None),
        BulkOutcome::NotFound => ("not_found", None, None),
        BulkOutcome::WrongStatus(s) if cancelling => ("not_waiting", None, Some(s)),
        BulkOutcome::WrongStatus(s) => ("not_finished", None, Some(s)),
        BulkOutcome::DestinationInactive => ("destination_inactive", None, None),
    };
    BulkItem { id, result, new_delivery_id, status }
}

/// Parses the chosen IDs; unknown or malformed ones are reported, never dropped.
fn chosen(body: ChosenBody) -> Result<(Vec<DeliveryId>, Vec<BulkItem>), ApiError> {
    if body.delivery_ids.is_empty() || body.delivery_ids.len() > MAX_CHOSEN {
        return Err(ApiError::invalid(
            "too_many_deliveries",
            format!("deliveryIds needs 1 to {MAX_CHOSEN} IDs, got {}", body.delivery_ids.len()),
        ));
    }
    let mut ids = Vec::new();
    let mut bad = Vec::new();
    for raw in body.delivery_ids {
        match raw.parse::<DeliveryId>() {
            Ok(id) if !ids.contains(&id) => ids.push(id),
            Ok(_) => {}
            Err(_) => bad.push(bulk_item(raw, BulkOutcome::NotFound, false)),
        }
    }
    Ok((ids, bad))
}

async fn resend_one(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<(StatusCode, Json<DeliveryView>), ApiError> {
    let d = find(&state, &caller, &project, &id).await?;
    let outcome = state.storage.resend_deliveries(d.space_id, &[d.id], now_ms()).await?;
    match outcome.first().map(|(_, o)| *o) {
        Some(BulkOutcome::Resent(new)) => {
            state.wake.notify_one();
            let copy = state.storage.get_delivery(new).await?;
            Ok((StatusCode::ACCEPTED, Json(DeliveryView::from(&copy))))
        }
        Some(BulkOutcome::DestinationInactive) => Err(ApiError::Conflict {
            code: "destination_inactive",
            message: "the delivery's destination is inactive; enable it before sending again".into(),
        }),
        Some(BulkOutcome::WrongStatus(s)) => Err(ApiError::Conflict {
            code: "delivery_not_finished",
            message: format!("the delivery is {s}; only a finished delivery can be sent again"),
        }),
        _ => Err(ApiError::NotFound(format!("no delivery {id:?}"))),
    }
}

async fn resend_many(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
    ApiJson(body): ApiJson<ChosenBody>,
) -> Result<Json<BulkAnswer>, ApiError> {
    let space_id = caller.space(&project)?;
    let (ids, mut results) = chosen(body)?;
    let outcomes = state.storage.resend_deliveries(space_id, &ids, now_ms()).await?;
    let resent = outcomes.iter().filter(|(_, o)| matches!(o, BulkOutcome::Resent(_))).count() as i64;
    if resent > 0 {
        state.wake.notify_one();
    }
    results.extend(outcomes.into_iter().map(|(id, o)| bulk_item(id.to_string(), o, false)));
    Ok(Json(BulkAnswer { resent: Some(resent), cancelled: None, results }))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResendFailedAnswer {
    resent: i64,
    /// Failed deliveries not yet resent: call again while this is above zero.
    remaining: i64,
}

async fn resend_failed(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<ResendFailedAnswer>, ApiError> {
    let space_id = caller.space(&project)?;
    // The body is optional: none (or `{}`) means the whole space.
    let body: ResendFailedBody = if body.iter().all(u8::is_ascii_whitespace) {
        ResendFailedBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            if e.is_data() {
                ApiError::invalid("invalid_body", e.to_string())
            } else {
                ApiError::Status { status: StatusCode::BAD_REQUEST, code: "malformed_json", message: e.to_string() }
            }
        })?
    };
    let destination_id = match body.destination_id {
        None => None,
        Some(raw) => {
            let id: DestinationId = raw.parse().map_err(|_| ApiError::NotFound(format!("no destination {raw:?}")))?;
            state.storage.get_destination(space_id, id).await.map_err(|e| match e {
                StorageError::NotFound => ApiError::NotFound(format!("no destination {raw:?}")),
                other => other.into(),
            })?;
            Some(id)
        }
    };
    let done = state.storage.resend_failed(space_id, destination_id, MAX_RESEND_FAILED, now_ms()).await?;
    if done.resent > 0 {
        state.wake.notify_one();
    }
    Ok(Json(ResendFailedAnswer { resent: done.resent, remaining: done.remaining }))
}

async fn cancel_one(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<DeliveryView>, ApiError> {
    let d = find(&state, &caller, &project, &id).await?;
    let outcome = state.storage.cancel_deliveries(d.space_id, &[d.id], now_ms()).await?;
    match outcome.first().map(|(_, o)| *o) {
        Some(BulkOutcome::Cancelled) => Ok(Json(DeliveryView::from(&state.storage.get_delivery(d.id).await?))),
        Some(BulkOutcome::WrongStatus(s)) => Err(ApiError::Conflict {
            code: "delivery_not_waiting",
            message: format!("the delivery is {s}; only a pending or retrying delivery can be cancelled"),
        }),
        _ => Err(ApiError::NotFound(format!("no delivery {id:?}"))),
    }
}

async fn cancel_many(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
    ApiJson(body): ApiJson<ChosenBody>,
) -> Result<Json<BulkAnswer>, ApiError> {
    let space_id = caller.space(&project)?;
    let (ids, mut results) = chosen(body)?;
    let outcomes = state.storage.cancel_deliveries(space_id, &ids, now_ms()).await?;
    let cancelled = outcomes.iter().filter(|(_, o)| matches!(o, BulkOutcome::Cancelled)).count() as i64;
    results.extend(outcomes.into_iter().map(|(id, o)| bulk_item(id.to_string(), o, true)));
    Ok(Json(BulkAnswer { resent: None, cancelled: Some(cancelled), results }))
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
