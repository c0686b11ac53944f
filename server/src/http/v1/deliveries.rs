//! `/v1/projects/{project}/deliveries`: list with filters, read one with its attempts.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::extract::{json_whitespace, not_an_object, ApiJson, Caller};
use super::openapi::{
    BadRequest, DeliveryPath, InternalError, NotFound, PayloadTooLarge, ProjectPath, Unauthorized,
    Unprocessable, UnsupportedMediaType,
};
use super::page::{self, Keyset};
use super::views::{AttemptView, DeliveryView, PageOf};
use crate::clock::now_ms;
use crate::domain::*;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::AppState;
use crate::ops::audit;
use crate::ops::replay::{self, Replay};
use crate::storage::{BulkOutcome, DeliveryFilter, StorageError};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/projects/{project}/deliveries", get(list))
        .route("/projects/{project}/deliveries/resend", post(resend_many))
        .route(
            "/projects/{project}/deliveries/resend-failed",
            post(resend_failed),
        )
        .route(
            "/projects/{project}/deliveries/resend-failed/preview",
            post(preview_resend_failed),
        )
        .route("/projects/{project}/deliveries/cancel", post(cancel_many))
        .route("/projects/{project}/deliveries/{id}", get(read))
        .route(
            "/projects/{project}/deliveries/{id}/attempts",
            get(attempts),
        )
        .route(
            "/projects/{project}/deliveries/{id}/resend",
            post(resend_one),
        )
        .route(
            "/projects/{project}/deliveries/{id}/cancel",
            post(cancel_one),
        )
}

/// The most deliveries one resend or cancel call may name (docs §2.7).
pub const MAX_CHOSEN: usize = 100;
/// The most failed deliveries one resend-failed call resends (docs §2.7).
pub const MAX_RESEND_FAILED: i64 = 1000;

/// The deliveries to act on.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = ChosenDeliveries)]
struct ChosenBody {
    /// 1 to 100 delivery IDs; unknown or malformed ones are answered `not_found`.
    #[schema(min_items = 1, max_items = 100)]
    delivery_ids: Vec<String>,
}

/// Which failed deliveries to resend; no body, `null` or `{}` means the whole project.
/// Every field narrows the choice.
#[derive(Deserialize, Default, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = ResendFailed)]
struct ResendFailedBody {
    /// Only this destination's failed deliveries.
    #[serde(default)]
    destination_id: Option<String>,
    /// Only deliveries created at or after this time (RFC 3339 or Unix milliseconds, as
    /// a string). A delivery is created when its event is published (a resent copy: when
    /// it was resent).
    #[serde(default)]
    since: Option<String>,
    /// Only deliveries created before this time (RFC 3339 or Unix milliseconds, as a string).
    #[serde(default)]
    until: Option<String>,
    /// Only deliveries of events of this type.
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9._:-]{1,100}$", examples("order.created"))]
    event_type: Option<String>,
    /// Only deliveries whose last attempt failed with this class.
    #[serde(default)]
    #[schema(value_type = Option<ErrorClass>)]
    error_class: Option<String>,
}

/// One line of a bulk answer: what happened to each ID asked for.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct BulkItem {
    /// The ID as it was asked for.
    id: String,
    #[schema(value_type = String, schema_with = bulk_result_schema)]
    result: &'static str,
    /// The new delivery, when `result` is `resent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    new_delivery_id: Option<DeliveryId>,
    /// The delivery's status, when it was not in one the action applies to.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    status: Option<DeliveryStatus>,
}

fn bulk_result_schema() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .description(Some(
            "`resent` or `cancelled`: done; `not_found`: no such delivery in this project; \
             `not_waiting`: only `pending` or `retrying` deliveries can be cancelled; `not_finished`: \
             only finished deliveries can be resent; `destination_inactive`: enable the destination first.",
        ))
        .enum_values(Some(["resent", "cancelled", "not_found", "not_waiting", "not_finished", "destination_inactive"]))
        .build()
}

/// What a bulk resend or cancel did: a count (`resent` or `cancelled`) and one line per ID.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct BulkAnswer {
    /// How many were resent (resend only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    resent: Option<i64>,
    /// How many were cancelled (cancel only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
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
    BulkItem {
        id,
        result,
        new_delivery_id,
        status,
    }
}

/// Parses the chosen IDs; unknown or malformed ones are reported, never dropped.
/// The audit detail of a resend or cancel of chosen deliveries: the IDs asked for (the
/// count is filled in by storage with those it changed).
fn chosen_detail(ids: &[DeliveryId]) -> serde_json::Value {
    let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
    audit::ids_detail(0, &ids)
}

fn chosen(body: ChosenBody) -> Result<(Vec<DeliveryId>, Vec<BulkItem>), ApiError> {
    if body.delivery_ids.is_empty() || body.delivery_ids.len() > MAX_CHOSEN {
        return Err(ApiError::invalid(
            "too_many_deliveries",
            format!(
                "deliveryIds needs 1 to {MAX_CHOSEN} IDs, got {}",
                body.delivery_ids.len()
            ),
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

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/deliveries/{id}/resend",
    operation_id = "resendDelivery",
    tag = "Deliveries",
    summary = "Resend a delivery",
    params(DeliveryPath),
    responses(
        (status = 202, description = "The new delivery: the same event to the same destination, with the same `webhookId`, sent straight away with a full set of attempts", body = DeliveryView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 409, description = "The delivery is not finished (`delivery_not_finished`) or its destination is inactive (`destination_inactive`)", body = ErrorBody),
        (status = 500, response = InternalError),
    )
)]
async fn resend_one(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<(StatusCode, Json<DeliveryView>), ApiError> {
    let d = find(&state, &caller, &project, &id).await?;
    let audit = caller.audit(
        AuditAction::DeliveriesResend,
        d.id,
        audit::ids_detail(0, &[d.id.to_string()]),
    );
    let outcome = state
        .storage
        .resend_deliveries(d.space_id, &[d.id], now_ms(), Some(&audit))
        .await?;
    match outcome.first().map(|(_, o)| *o) {
        Some(BulkOutcome::Resent(new)) => {
            state.engine.wake();
            let copy = state.storage.get_delivery_by_id(new).await?;
            Ok((StatusCode::ACCEPTED, Json(DeliveryView::from(&copy))))
        }
        Some(BulkOutcome::DestinationInactive) => Err(ApiError::Conflict {
            code: "destination_inactive",
            message: "the delivery's destination is inactive; enable it before sending again"
                .into(),
        }),
        Some(BulkOutcome::WrongStatus(s)) => Err(ApiError::Conflict {
            code: "delivery_not_finished",
            message: format!("the delivery is {s}; only a finished delivery can be sent again"),
        }),
        _ => Err(ApiError::NotFound(format!("no delivery {id:?}"))),
    }
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/deliveries/resend",
    operation_id = "resendDeliveries",
    tag = "Deliveries",
    summary = "Resend chosen deliveries",
    params(ProjectPath),
    request_body = ChosenBody,
    responses(
        (status = 200, description = "What happened to each ID", body = BulkAnswer),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
    )
)]
async fn resend_many(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
    ApiJson(body): ApiJson<ChosenBody>,
) -> Result<Json<BulkAnswer>, ApiError> {
    let space_id = caller.space(&project)?;
    let (ids, mut results) = chosen(body)?;
    let audit = caller.audit(AuditAction::DeliveriesResend, "", chosen_detail(&ids));
    let outcomes = state
        .storage
        .resend_deliveries(space_id, &ids, now_ms(), Some(&audit))
        .await?;
    let resent = outcomes
        .iter()
        .filter(|(_, o)| matches!(o, BulkOutcome::Resent(_)))
        .count() as i64;
    if resent > 0 {
        state.engine.wake();
    }
    results.extend(
        outcomes
            .into_iter()
            .map(|(id, o)| bulk_item(id.to_string(), o, false)),
    );
    Ok(Json(BulkAnswer {
        resent: Some(resent),
        cancelled: None,
        results,
    }))
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct ResendFailedAnswer {
    resent: i64,
    /// Failed deliveries not yet resent: call again while this is above zero.
    remaining: i64,
}

/// How many failed deliveries resend-failed would resend with the same body, in all
/// its calls; nothing is sent.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct ResendFailedPreview {
    count: i64,
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/deliveries/resend-failed",
    operation_id = "resendFailedDeliveries",
    tag = "Deliveries",
    summary = "Resend failed deliveries",
    description = "Resends up to 1000 `failed` deliveries of the project (or of one destination, event type, error class or creation window) that were not resent before, oldest first.",
    params(ProjectPath),
    request_body(content = Option<ResendFailedBody>, description = "Optional; JSON whatever the `Content-Type`", content_type = "application/json"),
    responses(
        (status = 200, description = "How many were resent, and how many remain: call again while `remaining` is above zero", body = ResendFailedAnswer),
        (status = 400, description = "The body is not valid JSON (`malformed_json`) or could not be read", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 404, description = "No such project, or no such destination in it (`not_found`)", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
    )
)]
async fn resend_failed(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<ResendFailedAnswer>, ApiError> {
    let filter = replay_of(&state, &caller, &project, body).await?;
    let audit = caller.audit(
        AuditAction::DeliveriesResendFailed,
        filter
            .destination_id
            .map(|d| d.to_string())
            .unwrap_or_default(),
        audit::bulk_detail(0, audit::delivery_filter_detail(&filter)),
    );
    let done = state
        .storage
        .resend_failed(&filter, MAX_RESEND_FAILED, now_ms(), Some(&audit))
        .await?;
    if done.resent > 0 {
        state.engine.wake();
    }
    Ok(Json(ResendFailedAnswer {
        resent: done.resent,
        remaining: done.remaining,
    }))
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/deliveries/resend-failed/preview",
    operation_id = "previewResendFailedDeliveries",
    tag = "Deliveries",
    summary = "Count the failed deliveries a resend would take",
    description = "Takes the body of resend-failed and answers how many deliveries it would resend now, in all its calls, without sending any.",
    params(ProjectPath),
    request_body(content = Option<ResendFailedBody>, description = "Optional; JSON whatever the `Content-Type`", content_type = "application/json"),
    responses(
        (status = 200, description = "How many would be resent", body = ResendFailedPreview),
        (status = 400, description = "The body is not valid JSON (`malformed_json`) or could not be read", body = ErrorBody),
        (status = 401, response = Unauthorized),
        (status = 404, description = "No such project, or no such destination in it (`not_found`)", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
    )
)]
async fn preview_resend_failed(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<ResendFailedPreview>, ApiError> {
    let filter = replay_of(&state, &caller, &project, body).await?;
    let count = state.storage.count_resend_failed(&filter).await?;
    Ok(Json(ResendFailedPreview { count }))
}

/// The failed deliveries a resend-failed body chooses (the rule: [`ops::replay`]).
async fn replay_of(
    state: &AppState,
    caller: &Caller,
    project: &str,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<DeliveryFilter, ApiError> {
    let space_id = caller.space(project)?;
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::Status {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "body_too_large",
            message: "the request body is larger than this server accepts".into(),
        },
        status => ApiError::Status {
            status,
            code: "bad_request",
            message: rejection.body_text(),
        },
    })?;
    // The body is optional: none (or `{}`) means the whole space.
    let body: ResendFailedBody = if body.iter().all(json_whitespace) {
        ResendFailedBody::default()
    } else if let Some(err) = not_an_object(&body) {
        return Err(err);
    } else {
        serde_json::from_slice::<Option<ResendFailedBody>>(&body)
            .map(Option::unwrap_or_default)
            .map_err(|e| {
                if e.is_data() {
                    ApiError::invalid("invalid_body", e.to_string())
                } else {
                    ApiError::Status {
                        status: StatusCode::BAD_REQUEST,
                        code: "malformed_json",
                        message: e.to_string(),
                    }
                }
            })?
    };
    let destination_id = match body.destination_id {
        None => None,
        Some(raw) => {
            let id: DestinationId = raw
                .parse()
                .map_err(|_| ApiError::NotFound(format!("no destination {raw:?}")))?;
            state
                .storage
                .get_destination(space_id, id)
                .await
                .map_err(|e| match e {
                    StorageError::NotFound => ApiError::NotFound(format!("no destination {raw:?}")),
                    other => other.into(),
                })?;
            Some(id)
        }
    };
    let error_class = match body.error_class {
        None => None,
        Some(raw) => Some(
            raw.parse::<ErrorClass>()
                .map_err(|e| ApiError::invalid("invalid_filter", format!("errorClass: {e}")))?,
        ),
    };
    let replay = Replay {
        destination_id,
        event_type: body.event_type,
        error_class,
        since: body.since.map(|s| parse_time("since", &s)).transpose()?,
        until: body.until.map(|s| parse_time("until", &s)).transpose()?,
    };
    Ok(replay::failed_filter(space_id, replay)?)
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/deliveries/{id}/cancel",
    operation_id = "cancelDelivery",
    tag = "Deliveries",
    summary = "Cancel a delivery",
    params(DeliveryPath),
    responses(
        (status = 200, description = "The delivery, now `cancelled`; it is never sent again", body = DeliveryView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 409, description = "The delivery is not `pending` or `retrying` (`delivery_not_waiting`)", body = ErrorBody),
        (status = 500, response = InternalError),
    )
)]
async fn cancel_one(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<DeliveryView>, ApiError> {
    let d = find(&state, &caller, &project, &id).await?;
    let audit = caller.audit(
        AuditAction::DeliveriesCancel,
        d.id,
        audit::ids_detail(0, &[d.id.to_string()]),
    );
    let outcome = state
        .storage
        .cancel_deliveries(d.space_id, &[d.id], now_ms(), Some(&audit))
        .await?;
    match outcome.first().map(|(_, o)| *o) {
        Some(BulkOutcome::Cancelled) => {
            crate::metrics::deliveries_finished(crate::metrics::Outcome::Cancelled, 1);
            Ok(Json(DeliveryView::from(
                &state.storage.get_delivery_by_id(d.id).await?,
            )))
        }
        Some(BulkOutcome::WrongStatus(s)) => Err(ApiError::Conflict {
            code: "delivery_not_waiting",
            message: format!(
                "the delivery is {s}; only a pending or retrying delivery can be cancelled"
            ),
        }),
        _ => Err(ApiError::NotFound(format!("no delivery {id:?}"))),
    }
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/deliveries/cancel",
    operation_id = "cancelDeliveries",
    tag = "Deliveries",
    summary = "Cancel chosen deliveries",
    params(ProjectPath),
    request_body = ChosenBody,
    responses(
        (status = 200, description = "What happened to each ID", body = BulkAnswer),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
    )
)]
async fn cancel_many(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
    ApiJson(body): ApiJson<ChosenBody>,
) -> Result<Json<BulkAnswer>, ApiError> {
    let space_id = caller.space(&project)?;
    let (ids, mut results) = chosen(body)?;
    let audit = caller.audit(AuditAction::DeliveriesCancel, "", chosen_detail(&ids));
    let outcomes = state
        .storage
        .cancel_deliveries(space_id, &ids, now_ms(), Some(&audit))
        .await?;
    let cancelled = outcomes
        .iter()
        .filter(|(_, o)| matches!(o, BulkOutcome::Cancelled))
        .count() as i64;
    crate::metrics::deliveries_finished(crate::metrics::Outcome::Cancelled, cancelled as u64);
    results.extend(
        outcomes
            .into_iter()
            .map(|(id, o)| bulk_item(id.to_string(), o, true)),
    );
    Ok(Json(BulkAnswer {
        resent: None,
        cancelled: Some(cancelled),
        results,
    }))
}

/// The filters of the delivery listing, and its page.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Only deliveries in this status.
    #[serde(default)]
    #[param(value_type = Option<DeliveryStatus>, inline)]
    status: Option<String>,
    /// Only deliveries to this destination.
    #[serde(default)]
    #[param(value_type = Option<DestinationId>, inline)]
    destination_id: Option<String>,
    /// Only deliveries of events of this type.
    #[serde(default)]
    event_type: Option<String>,
    /// The class of the last failed attempt.
    #[serde(default)]
    #[param(value_type = Option<ErrorClass>, inline)]
    error_class: Option<String>,
    /// Created at or after: RFC 3339 or Unix milliseconds.
    #[serde(default)]
    since: Option<String>,
    /// Created before: RFC 3339 or Unix milliseconds.
    #[serde(default)]
    until: Option<String>,
    /// At most this many: 1 to 250, 50 by default.
    #[serde(default)]
    #[param(minimum = 1, maximum = 250)]
    limit: Option<i64>,
    /// The `nextCursor` of the previous page of the same listing, unchanged.
    #[serde(default)]
    #[param(pattern = "^[A-Za-z0-9_-]+$")]
    cursor: Option<String>,
}

pub(super) fn parse_time(name: &str, s: &str) -> Result<UnixMs, ApiError> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
        .map_err(|_| {
            ApiError::invalid(
                "invalid_filter",
                format!("{name} must be RFC 3339 or Unix milliseconds"),
            )
        })
}

pub(super) fn filter_value<T: std::str::FromStr>(
    name: &str,
    v: Option<String>,
) -> Result<Option<T>, ApiError>
where
    T::Err: std::fmt::Display,
{
    v.map(|s| {
        s.parse::<T>()
            .map_err(|e| ApiError::invalid("invalid_filter", format!("{name}: {e}")))
    })
    .transpose()
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/deliveries",
    operation_id = "listDeliveries",
    tag = "Deliveries",
    summary = "List deliveries",
    params(ProjectPath, ListQuery),
    responses(
        (status = 200, description = "A page of deliveries, newest first", body = PageOf<DeliveryView>),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
    )
)]
async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<PageOf<DeliveryView>>, ApiError> {
    let space_id = caller.space(&project)?;
    let q = page::query(q)?;
    let keyset = Keyset::<DeliveryId>::new(space_id, q.limit, q.cursor.as_deref())?;
    let filter = DeliveryFilter {
        space_id: Some(space_id),
        status: filter_value("status", q.status)?,
        destination_id: filter_value("destinationId", q.destination_id)?,
        event_type: match q.event_type {
            Some(t) if t.contains('\0') => {
                return Err(ApiError::invalid(
                    "invalid_filter",
                    "eventType must not contain NUL",
                ))
            }
            other => other,
        },
        error_class: filter_value("errorClass", q.error_class)?,
        since: q
            .since
            .as_deref()
            .map(|s| parse_time("since", s))
            .transpose()?,
        until: q
            .until
            .as_deref()
            .map(|s| parse_time("until", s))
            .transpose()?,
    };
    let rows = state
        .storage
        .list_deliveries(&filter, keyset.page())
        .await?;
    Ok(Json(keyset.answer(
        rows,
        |d| d.id,
        |d| DeliveryView::from(d),
    )))
}

/// The delivery, if it is in the caller's space.
pub async fn find(
    state: &AppState,
    caller: &Caller,
    project: &str,
    id: &str,
) -> Result<Delivery, ApiError> {
    let space_id = caller.space(project)?;
    let not_found = || ApiError::NotFound(format!("no delivery {id:?}"));
    let id: DeliveryId = id.parse().map_err(|_| not_found())?;
    match state.storage.get_delivery_by_id(id).await {
        Ok(d) if d.space_id == space_id => Ok(d),
        Ok(_) | Err(StorageError::NotFound) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/deliveries/{id}",
    operation_id = "getDelivery",
    tag = "Deliveries",
    summary = "Read a delivery with its attempts",
    params(DeliveryPath),
    responses(
        (status = 200, description = "The delivery, with `attempts` (oldest first)", body = DeliveryView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<DeliveryView>, ApiError> {
    let d = find(&state, &caller, &project, &id).await?;
    let attempts = state.storage.list_all_attempts(d.id).await?;
    let mut v = DeliveryView::from(&d);
    v.attempts = Some(attempts.iter().map(AttemptView::from).collect());
    Ok(Json(v))
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/deliveries/{id}/attempts",
    operation_id = "listDeliveryAttempts",
    tag = "Deliveries",
    summary = "List a delivery's attempts",
    params(DeliveryPath),
    responses(
        (status = 200, description = "Every attempt, oldest first, in one page", body = PageOf<AttemptView>),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn attempts(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<PageOf<AttemptView>>, ApiError> {
    let d = find(&state, &caller, &project, &id).await?;
    let attempts = state.storage.list_all_attempts(d.id).await?;
    Ok(Json(PageOf {
        data: attempts.iter().map(AttemptView::from).collect(),
        next_cursor: None,
    }))
}
