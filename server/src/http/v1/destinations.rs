//! `/v1/projects/{project}/destinations`: create, read, change, delete, list;
//! enable, disable, rotate the signing secret (SPEC §5).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::extract::{ApiJson, Caller};
use super::openapi::{
    BadRequest, DestinationPath, InternalError, NotFound, PayloadTooLarge, ProjectPath,
    Unauthorized, Unprocessable, UnsupportedMediaType,
};
use super::page::{self, Keyset, ListQuery};
use super::views::{rfc3339, DestinationView, PageOf};
use crate::clock::now_ms;
use crate::dispatch::jq as transform;
use crate::dispatch::{retry::RetryPolicy, signing};
use crate::domain::*;
use crate::http::error::ApiError;
use crate::startup::AppState;

/// How long the old secret keeps signing after a rotation.
pub const ROTATION_OVERLAP_MS: i64 = 24 * 3600 * 1000;

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
}

/// Absent stays `None`; `null` becomes `Some(None)`: PATCH can clear a field.
fn nullable<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// The fields to change; absent fields (and `null` for `url`, `description`,
/// `maxAttempts`, `timeoutSeconds`, `retryPolicy`) stay as they are. `null` clears
/// `eventTypes` (every type), `rateLimit` and `transformation`.
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
}

fn invalid(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(code, message)
}

/// An event type: 1–100 of `A–Z a–z 0–9 . _ : -`.
pub fn check_event_type(t: &str) -> Result<(), ApiError> {
    let ok = !t.is_empty()
        && t.len() <= 100
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "invalid_event_type",
            format!("{t:?} is not an event type: use 1-100 of A-Z a-z 0-9 . _ : -"),
        ))
    }
}

fn check_url(url: &str) -> Result<String, ApiError> {
    let parsed = url::Url::parse(url)
        .map_err(|e| invalid("invalid_url", format!("{url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid("invalid_url", "the URL must use http or https"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(invalid("invalid_url", "the URL needs a host"));
    }
    if url.chars().count() > 2048 {
        return Err(invalid(
            "invalid_url",
            "the URL may have at most 2048 characters",
        ));
    }
    Ok(parsed.to_string())
}

fn check_event_types(types: Option<Vec<String>>) -> Result<Option<Vec<String>>, ApiError> {
    let Some(types) = types else { return Ok(None) };
    if types.is_empty() || types.len() > 100 {
        return Err(invalid(
            "invalid_event_types",
            "eventTypes needs 1 to 100 entries, or null for every type",
        ));
    }
    for t in &types {
        if t != "*" {
            check_event_type(t)?;
        }
    }
    Ok(Some(types))
}

fn check_rate_limit(r: Option<RateLimit>) -> Result<Option<RateLimit>, ApiError> {
    match r {
        Some(r) if r.count == 0 || r.count > 1_000_000 => Err(invalid(
            "invalid_rate_limit",
            "rateLimit.count must be between 1 and 1000000",
        )),
        other => Ok(other),
    }
}

fn check_timeout(t: Option<i64>) -> Result<i64, ApiError> {
    match t {
        None => Ok(30),
        Some(t @ 1..=60) => Ok(t),
        Some(t) => Err(invalid(
            "invalid_timeout",
            format!("timeoutSeconds must be between 1 and 60, not {t}"),
        )),
    }
}

fn check_policy(
    policy: Option<&Value>,
    max_attempts: Option<i64>,
) -> Result<RetryPolicy, ApiError> {
    RetryPolicy::parse(policy, max_attempts)
        .map_err(|e| invalid("invalid_retry_policy", e.to_string()))
}

fn check_transformation(program: Option<String>) -> Result<Option<String>, ApiError> {
    match program {
        None => Ok(None),
        Some(p) if p.trim().is_empty() => Ok(None),
        Some(p) if p.contains('\0') => Err(invalid(
            "invalid_transformation",
            "the program must not contain NUL",
        )),
        Some(p) => {
            transform::compile(&p).map_err(|e| invalid("invalid_transformation", e.to_string()))?;
            Ok(Some(p))
        }
    }
}

fn check_description(d: Option<String>) -> Result<String, ApiError> {
    let d = d.unwrap_or_default();
    if d.chars().count() > 1000 {
        return Err(invalid(
            "invalid_description",
            "description may have at most 1000 characters",
        ));
    }
    if d.contains('\0') {
        return Err(invalid(
            "invalid_description",
            "description must not contain NUL",
        ));
    }
    Ok(d)
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
    let policy = check_policy(body.retry_policy.as_ref(), body.max_attempts)?;
    let now = now_ms();
    let destination = Destination {
        id: DestinationId::new(),
        space_id,
        url: check_url(&body.url)?,
        description: check_description(body.description)?,
        event_types: check_event_types(body.event_types)?,
        secret: signing::new_secret(),
        previous_secret: None,
        previous_secret_expires_at: None,
        rate_limit: check_rate_limit(body.rate_limit)?,
        max_attempts: i64::from(policy.max_attempts),
        timeout_seconds: check_timeout(body.timeout_seconds)?,
        retry_policy: policy.to_json(),
        transformation: check_transformation(body.transformation)?,
        status: DestinationStatus::Active,
        consecutive_dead_letters: 0,
        skipped_events: 0,
        disabled_reason: None,
        created_at: now,
        updated_at: now,
    };
    state.storage.create_destination(&destination).await?;
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
        .list_destinations_page(space_id, keyset.page())
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
    if let Some(url) = body.url {
        d.url = check_url(&url)?;
    }
    if let Some(desc) = body.description {
        d.description = check_description(Some(desc))?;
    }
    if let Some(types) = body.event_types {
        d.event_types = check_event_types(types)?;
    }
    if let Some(limit) = body.rate_limit {
        d.rate_limit = check_rate_limit(limit)?;
    }
    if let Some(t) = body.timeout_seconds {
        d.timeout_seconds = check_timeout(Some(t))?;
    }
    if body.retry_policy.is_some() || body.max_attempts.is_some() {
        let current = RetryPolicy::parse(Some(&d.retry_policy), Some(d.max_attempts)).ok();
        let policy_json = body.retry_policy.or_else(|| current.map(|p| p.to_json()));
        let policy = check_policy(
            policy_json.as_ref(),
            body.max_attempts.or(Some(d.max_attempts)),
        )?;
        d.max_attempts = i64::from(policy.max_attempts);
        d.retry_policy = policy.to_json();
    }
    if let Some(program) = body.transformation {
        d.transformation = check_transformation(program)?;
    }
    d.updated_at = now_ms();
    state.storage.update_destination(&d).await?;
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
    state.storage.delete_destination(d.space_id, d.id).await?;
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
    let updated = state
        .storage
        .set_destination_status(
            d.space_id,
            d.id,
            status,
            Some("disabled through the API"),
            now_ms(),
        )
        .await?;
    if status == DestinationStatus::Active {
        state.wake.notify_one();
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
    let now = now_ms();
    d.previous_secret = Some(std::mem::replace(&mut d.secret, signing::new_secret()));
    d.previous_secret_expires_at = Some(now + ROTATION_OVERLAP_MS);
    d.updated_at = now;
    state.storage.update_destination(&d).await?;
    let mut v = view(&d);
    v.secret = Some(d.secret.clone());
    v.previous_secret_expires_at = d.previous_secret_expires_at.map(rfc3339);
    Ok(Json(v))
}
