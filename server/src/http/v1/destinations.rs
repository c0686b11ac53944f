//! `/v1/projects/{project}/destinations`: create, read, change, delete, list;
//! enable, disable, rotate the signing secret (docs §5).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::collections::BTreeMap;

use super::extract::{ApiJson, Caller};
use super::openapi::{
    BadRequest, DestinationPath, InternalError, NotFound, PayloadTooLarge, ProjectPath,
    Unauthorized, Unprocessable, UnsupportedMediaType,
};
use super::page::{self, Keyset, ListQuery};
use super::views::{rfc3339, DestinationView, PageOf};
use crate::clock::now_ms;
use crate::dispatch::retry::RetryPolicy;
use crate::domain::*;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::destinations;
use crate::ops::headers::HeaderChanges;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/projects/{project}/destinations", post(create).get(list))
        .route(
            "/projects/{project}/destinations/{id}",
            get(read).patch(update).delete(remove),
        )
        .route("/projects/{project}/destinations/{id}/enable", post(enable))
        .route(
            "/projects/{project}/destinations/{id}/disable",
            post(disable),
        )
        .route(
            "/projects/{project}/destinations/{id}/rotate-secret",
            post(rotate_secret),
        )
}

/// A new destination; only `url` is required.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = CreateDestination)]
struct CreateBody {
    /// An `http` or `https` URL with a host, at most 2048 characters.
    #[schema(
        format = "uri",
        pattern = "^[Hh][Tt][Tt][Pp][Ss]?://",
        max_length = 2048,
        examples("https://example.com/webhooks")
    )]
    url: String,
    /// At most 1000 characters, no NUL.
    #[serde(default)]
    #[schema(max_length = 1000, pattern = r"^[^\x00]*$")]
    description: Option<String>,
    /// 1 to 100 event types (1-100 of `A-Z a-z 0-9 . _ : -`) or `*`; `null` or absent
    /// subscribes to every type.
    #[serde(default)]
    #[schema(value_type = Option<Vec<super::openapi::EventTypePattern>>, min_items = 1, max_items = 100)]
    event_types: Option<Vec<String>>,
    #[serde(default)]
    rate_limit: Option<RateLimit>,
    /// Attempts in all, the first included: 1 to 20 (the preset's by default).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 20)]
    max_attempts: Option<i64>,
    /// 1 to 60; 30 by default.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 60)]
    timeout_seconds: Option<i64>,
    /// The `partyflow` preset by default.
    #[serde(default)]
    #[schema(value_type = Option<super::openapi::RetryPolicyInput>)]
    retry_policy: Option<Value>,
    /// A jq program applied to each payload before it is sent; blank means none.
    #[serde(default)]
    transformation: Option<String>,
    /// A jq expression run on each payload at publish, e.g. `.total > 100 and .currency == "EUR"`:
    /// only `true` lets the event through; `false` or `null` keeps it out (counted in
    /// `filteredEvents`); anything else fails that event's delivery (class
    /// `transformation`). Blank means none; one that does not compile is refused (422
    /// `invalid_filter`).
    #[serde(default)]
    filter: Option<String>,
    /// `none` by default.
    #[serde(default)]
    ordering: Option<DeliveryOrdering>,
    /// Its own request headers, sent on every attempt; the values are secrets: every
    /// answer (this one too) shows them masked.
    #[serde(default)]
    #[schema(value_type = Option<super::openapi::HeadersInput>)]
    headers: Option<BTreeMap<String, String>>,
    /// What it is called in the console and in notifications: 1 to 100 characters after
    /// trimming (kept trimmed), not only white space, no control characters. Absent or
    /// `null`: it goes by its URL's host (with the port when not the default).
    #[serde(default)]
    #[schema(
        examples("Orders"),
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x1f\x7f-\x9f \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00-\x1f\x7f-\x9f]*$"
    )]
    name: Option<String>,
}

/// Absent stays `None`; `null` becomes `Some(None)`: PATCH can clear a field.
fn nullable<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// The fields to change; absent fields (and `null` for `url`, `description`,
/// `maxAttempts`, `timeoutSeconds`, `retryPolicy`, `headers`) stay as they are. `null`
/// clears `eventTypes` (every type), `rateLimit`, `transformation`, `filter` and `name` (back to its URL's host). `headers`
/// is merged: `{"X-Team": "new"}` changes that header only, `{"X-Team": null}` removes it.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = UpdateDestination)]
struct UpdateBody {
    #[serde(default)]
    #[schema(
        format = "uri",
        pattern = "^[Hh][Tt][Tt][Pp][Ss]?://",
        max_length = 2048
    )]
    url: Option<String>,
    /// At most 1000 characters, no NUL.
    #[serde(default)]
    #[schema(max_length = 1000, pattern = r"^[^\x00]*$")]
    description: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Vec<super::openapi::EventTypePattern>>, min_items = 1, max_items = 100)]
    event_types: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<RateLimit>)]
    rate_limit: Option<Option<RateLimit>>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 20)]
    max_attempts: Option<i64>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 60)]
    timeout_seconds: Option<i64>,
    #[serde(default)]
    #[schema(value_type = Option<super::openapi::RetryPolicyInput>)]
    retry_policy: Option<Value>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    transformation: Option<Option<String>>,
    /// A new filter (see `CreateDestination.filter`); `null` or blank removes it.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    filter: Option<Option<String>>,
    #[serde(default)]
    ordering: Option<DeliveryOrdering>,
    /// Header name to a new value, or to `null` to remove it; the others stay.
    #[serde(default)]
    #[schema(value_type = Option<super::openapi::HeadersPatch>)]
    headers: Option<BTreeMap<String, Option<String>>>,
    /// A new name (see `CreateDestination.name`); `null` drops its own name, so it goes
    /// by its URL's host again.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(
        value_type = Option<String>,
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x1f\x7f-\x9f \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00-\x1f\x7f-\x9f]*$"
    )]
    name: Option<Option<String>>,
}

/// An event type: 1–100 of `A–Z a–z 0–9 . _ : -` (the rule lives in [`crate::ops::destinations`]).
pub fn check_event_type(t: &str) -> Result<(), ApiError> {
    Ok(destinations::check_event_type(t)?)
}

pub fn view(d: &Destination) -> DestinationView {
    let policy = RetryPolicy::parse(Some(&d.retry_policy), Some(d.max_attempts))
        .map(|p| p.to_json())
        .unwrap_or_else(|_| d.retry_policy.clone());
    DestinationView::new(d, policy)
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/destinations",
    operation_id = "createDestination",
    tag = "Destinations",
    summary = "Create a destination",
    params(ProjectPath),
    request_body = CreateBody,
    responses(
        (status = 201, description = "The destination, with its signing secret (shown only here and on rotation)", body = DestinationView),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
    )
)]
async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<(StatusCode, Json<DestinationView>), ApiError> {
    let space_id = caller.space(&project)?;
    let settings = destinations::NewSettings {
        url: body.url,
        description: body.description,
        event_types: body.event_types,
        rate_limit: body.rate_limit,
        max_attempts: body.max_attempts,
        timeout_seconds: body.timeout_seconds,
        retry_policy: body.retry_policy,
        transformation: body.transformation,
        filter: body.filter,
        ordering: body.ordering,
        headers: body
            .headers
            .map(|h| HeaderChanges::Merge(h.into_iter().map(|(n, v)| (n, Some(v))).collect())),
        name: body.name,
    };
    let destination = destinations::create(space_id, settings, now_ms(), &state.sandbox).await?;
    let audit = caller.audit(AuditAction::DestinationCreate, destination.id, Value::Null);
    state
        .storage
        .create_destination(&destination, Some(&audit))
        .await?;
    let mut v = view(&destination);
    v.secret = Some(destination.secret.clone());
    Ok((StatusCode::CREATED, Json(v)))
}

fn parse_id(id: &str) -> Result<DestinationId, ApiError> {
    id.parse()
        .map_err(|_| ApiError::NotFound(format!("no destination {id:?}")))
}

async fn find(
    state: &AppState,
    caller: &Caller,
    project: &str,
    id: &str,
) -> Result<Destination, ApiError> {
    let space_id = caller.space(project)?;
    let id = parse_id(id)?;
    state
        .storage
        .get_destination(space_id, id)
        .await
        .map_err(|e| match e {
            crate::storage::StorageError::NotFound => {
                ApiError::NotFound(format!("no destination {id}"))
            }
            other => other.into(),
        })
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/destinations",
    operation_id = "listDestinations",
    tag = "Destinations",
    summary = "List destinations",
    params(ProjectPath, ListQuery),
    responses(
        (status = 200, description = "A page of destinations, newest first", body = PageOf<DestinationView>),
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
) -> Result<Json<PageOf<DestinationView>>, ApiError> {
    let space_id = caller.space(&project)?;
    let q = page::query(q)?;
    let keyset = Keyset::<DestinationId>::new(space_id, q.limit, q.cursor.as_deref())?;
    let rows = state
        .storage
        .list_destinations(space_id, keyset.page())
        .await?;
    Ok(Json(keyset.answer(rows, |d| d.id, view)))
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/destinations/{id}",
    operation_id = "getDestination",
    tag = "Destinations",
    summary = "Read a destination",
    params(DestinationPath),
    responses(
        (status = 200, description = "The destination", body = DestinationView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<DestinationView>, ApiError> {
    Ok(Json(view(&find(&state, &caller, &project, &id).await?)))
}

#[utoipa::path(
    patch,
    path = "/v1/projects/{project}/destinations/{id}",
    operation_id = "updateDestination",
    tag = "Destinations",
    summary = "Change a destination",
    params(DestinationPath),
    request_body = UpdateBody,
    responses(
        (status = 200, description = "The destination as changed", body = DestinationView),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
    )
)]
async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<UpdateBody>,
) -> Result<Json<DestinationView>, ApiError> {
    let mut d = find(&state, &caller, &project, &id).await?;
    let changes = destinations::Changes {
        url: body.url,
        description: body.description,
        event_types: body.event_types,
        rate_limit: body.rate_limit,
        max_attempts: body.max_attempts.map(Some),
        timeout_seconds: body.timeout_seconds,
        retry_policy: body.retry_policy,
        transformation: body.transformation,
        filter: body.filter,
        ordering: body.ordering,
        headers: body
            .headers
            .map(|h| HeaderChanges::Merge(h.into_iter().collect())),
        name: body.name,
    };
    destinations::apply(&mut d, changes, now_ms(), &state.sandbox).await?;
    let audit = caller.audit(AuditAction::DestinationUpdate, d.id, Value::Null);
    state.storage.update_destination(&d, Some(&audit)).await?;
    Ok(Json(view(&d)))
}

#[utoipa::path(
    delete,
    path = "/v1/projects/{project}/destinations/{id}",
    operation_id = "deleteDestination",
    tag = "Destinations",
    summary = "Delete a destination",
    params(DestinationPath),
    responses(
        (status = 204, description = "Deleted, with its deliveries"),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let d = find(&state, &caller, &project, &id).await?;
    let audit = caller.audit(AuditAction::DestinationDelete, d.id, Value::Null);
    state
        .storage
        .delete_destination(d.space_id, d.id, Some(&audit))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_status(
    state: &AppState,
    caller: &Caller,
    project: &str,
    id: &str,
    status: DestinationStatus,
) -> Result<Json<DestinationView>, ApiError> {
    let d = find(state, caller, project, id).await?;
    let action = match status {
        DestinationStatus::Active => AuditAction::DestinationEnable,
        DestinationStatus::Inactive => AuditAction::DestinationDisable,
    };
    let audit = caller.audit(action, d.id, Value::Null);
    let updated = state
        .storage
        .set_destination_status(
            d.space_id,
            d.id,
            status,
            Some("disabled through the API"),
            now_ms(),
            Some(&audit),
        )
        .await?;
    if status == DestinationStatus::Active {
        state.engine.wake();
    }
    Ok(Json(view(&updated)))
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/destinations/{id}/enable",
    operation_id = "enableDestination",
    tag = "Destinations",
    summary = "Enable a destination",
    params(DestinationPath),
    responses(
        (status = 200, description = "The destination, now `active`", body = DestinationView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn enable(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<DestinationView>, ApiError> {
    set_status(&state, &caller, &project, &id, DestinationStatus::Active).await
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/destinations/{id}/disable",
    operation_id = "disableDestination",
    tag = "Destinations",
    summary = "Disable a destination",
    params(DestinationPath),
    responses(
        (status = 200, description = "The destination, now `inactive`: it gets no new deliveries", body = DestinationView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn disable(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<DestinationView>, ApiError> {
    set_status(&state, &caller, &project, &id, DestinationStatus::Inactive).await
}

/// A new secret; the old one keeps signing for 24 hours so receivers can switch over.
#[utoipa::path(
    post,
    path = "/v1/projects/{project}/destinations/{id}/rotate-secret",
    operation_id = "rotateDestinationSecret",
    tag = "Destinations",
    summary = "Rotate the signing secret",
    params(DestinationPath),
    responses(
        (status = 200, description = "The destination with its new `secret`; the old one keeps signing until `previousSecretExpiresAt` (24 hours)", body = DestinationView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn rotate_secret(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<DestinationView>, ApiError> {
    let mut d = find(&state, &caller, &project, &id).await?;
    destinations::rotate_secret(&mut d, now_ms());
    let audit = caller.audit(AuditAction::DestinationRotateSecret, d.id, Value::Null);
    state.storage.update_destination(&d, Some(&audit)).await?;
    let mut v = view(&d);
    v.secret = Some(d.secret.clone());
    v.previous_secret_expires_at = d.previous_secret_expires_at.map(rfc3339);
    Ok(Json(v))
}
