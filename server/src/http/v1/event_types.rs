//! `/v1/projects/{project}/event-types`: the project's event-type catalog — create,
//! list, read and change a type by its name (docs §1, §5). The rules are in
//! [`crate::ops::event_types`].

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::extract::{ApiJson, Caller};
use super::openapi::{
    BadRequest, InternalError, NotFound, PayloadTooLarge, ProjectPath, Unauthorized, Unprocessable,
    UnsupportedMediaType,
};
use super::page::{self, Keyset, ListQuery};
use super::views::{rfc3339, PageOf};
use crate::clock::now_ms;
use crate::domain::*;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::AppState;
use crate::ops::event_types::{self, Changes, NewEventType};
use crate::storage::StorageError;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/projects/{project}/event-types", post(create).get(list))
        .route(
            "/projects/{project}/event-types/{name}",
            get(read).patch(update),
        )
}

/// A catalogued event type.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = EventType)]
pub struct EventTypeView {
    pub id: EventTypeId,
    /// The event type, as published (`type`).
    #[schema(pattern = "^[A-Za-z0-9._:-]{1,100}$", examples("order.created"))]
    pub name: String,
    pub description: String,
    /// The JSON Schema (draft 2020-12) its payloads must match; `null` for none.
    #[schema(value_type = Option<Value>, required = true)]
    pub schema: Option<Value>,
    /// An example payload (it matches `schema`); `null` for none.
    #[schema(value_type = Option<Value>, required = true)]
    pub example: Option<Value>,
    /// Still publishable; shown as deprecated in the console.
    pub deprecated: bool,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

impl From<&EventType> for EventTypeView {
    fn from(t: &EventType) -> Self {
        Self {
            id: t.id,
            name: t.name.clone(),
            description: t.description.clone(),
            schema: t.schema.clone(),
            example: t.example.clone(),
            deprecated: t.deprecated,
            created_at: rfc3339(t.created_at),
            updated_at: rfc3339(t.updated_at),
        }
    }
}

/// A new event type; only `name` is required.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = CreateEventType)]
struct CreateBody {
    /// 1-100 of `A-Z a-z 0-9 . _ : -`; unique in the project.
    #[schema(pattern = "^[A-Za-z0-9._:-]{1,100}$", examples("order.created"))]
    name: String,
    /// At most 1000 characters, no NUL.
    #[serde(default)]
    #[schema(max_length = 1000, pattern = r"^[^\x00]*$")]
    description: Option<String>,
    /// A JSON Schema (draft 2020-12; at most 64 KiB) that payloads of this type must match
    /// when published. `$ref` may only point inside it.
    #[serde(default)]
    #[schema(value_type = Option<Value>)]
    schema: Option<Value>,
    /// An example payload (at most 64 KiB); it must match `schema` when both are given.
    #[serde(default)]
    #[schema(value_type = Option<Value>)]
    example: Option<Value>,
    /// `false` by default.
    #[serde(default)]
    deprecated: Option<bool>,
}

/// Absent stays `None`; `null` becomes `Some(None)`: PATCH can clear a field.
fn nullable<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// The fields to change; absent fields stay as they are, `null` clears `schema` or
/// `example`. The name never changes.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = UpdateEventType)]
struct UpdateBody {
    /// At most 1000 characters, no NUL.
    #[serde(default)]
    #[schema(max_length = 1000, pattern = r"^[^\x00]*$")]
    description: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Value>)]
    schema: Option<Option<Value>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Value>)]
    example: Option<Option<Value>>,
    #[serde(default)]
    deprecated: Option<bool>,
}

/// Path parameters: the project and an event type's name.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct EventTypePath {
    /// The project (space) of the API key; any other answers 404.
    #[param(inline)]
    project: SpaceId,
    /// The event type's name.
    #[param(pattern = "^[A-Za-z0-9._:-]{1,100}$")]
    name: String,
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/event-types",
    operation_id = "createEventType",
    tag = "Event types",
    summary = "Add an event type to the catalog",
    description = "The schema is checked when saved (422 `invalid_schema` saying why it is not a JSON \
        Schema), and so is the example against it (422 `invalid_example` with `violations`).",
    params(ProjectPath),
    request_body = CreateBody,
    responses(
        (status = 201, description = "The event type", body = EventTypeView),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 409, description = "The project has an event type of this name (`event_type_exists`)",
            body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, description = "A value out of range (`invalid_event_type`, `invalid_description`, \
            `invalid_schema`, `invalid_body`) or an example that breaks the schema (`invalid_example`, \
            with `violations`)", body = ErrorBody),
        (status = 500, response = InternalError),
    )
)]
async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<(StatusCode, Json<EventTypeView>), ApiError> {
    let space_id = caller.space(&project)?;
    let new = NewEventType {
        name: body.name,
        description: body.description,
        schema: body.schema,
        example: body.example,
        deprecated: body.deprecated,
    };
    let t = event_types::create(space_id, new, now_ms())?;
    let audit = caller.audit(
        AuditAction::EventTypeCreate,
        t.id,
        serde_json::json!({ "name": t.name }),
    );
    match state.storage.create_event_type(&t, Some(&audit)).await {
        Ok(()) => Ok((StatusCode::CREATED, Json(EventTypeView::from(&t)))),
        Err(StorageError::Conflict(_)) => Err(ApiError::Conflict {
            code: "event_type_exists",
            message: format!("the project has an event type {:?} already", t.name),
        }),
        Err(e) => Err(e.into()),
    }
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/event-types",
    operation_id = "listEventTypes",
    tag = "Event types",
    summary = "List the catalog's event types",
    params(ProjectPath, ListQuery),
    responses(
        (status = 200, description = "A page of event types, newest first", body = PageOf<EventTypeView>),
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
) -> Result<Json<PageOf<EventTypeView>>, ApiError> {
    let space_id = caller.space(&project)?;
    let q = page::query(q)?;
    let keyset = Keyset::<EventTypeId>::new(space_id, q.limit, q.cursor.as_deref())?;
    let rows = state
        .storage
        .list_event_types(space_id, keyset.page())
        .await?;
    Ok(Json(keyset.answer(
        rows,
        |t| t.id,
        |t| EventTypeView::from(t),
    )))
}

async fn find(
    state: &AppState,
    caller: &Caller,
    project: &str,
    name: &str,
) -> Result<EventType, ApiError> {
    let space_id = caller.space(project)?;
    match state.storage.find_event_type_by_name(space_id, name).await {
        Ok(t) => Ok(t),
        Err(StorageError::NotFound) => Err(ApiError::NotFound(format!("no event type {name:?}"))),
        Err(e) => Err(e.into()),
    }
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/event-types/{name}",
    operation_id = "getEventType",
    tag = "Event types",
    summary = "Read an event type",
    params(EventTypePath),
    responses(
        (status = 200, description = "The event type", body = EventTypeView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, name)): Path<(String, String)>,
) -> Result<Json<EventTypeView>, ApiError> {
    Ok(Json(EventTypeView::from(
        &find(&state, &caller, &project, &name).await?,
    )))
}

#[utoipa::path(
    patch,
    path = "/v1/projects/{project}/event-types/{name}",
    operation_id = "updateEventType",
    tag = "Event types",
    summary = "Change an event type",
    description = "A new schema applies to the next publish, on every instance. The example must still \
        match the schema after the change.",
    params(EventTypePath),
    request_body = UpdateBody,
    responses(
        (status = 200, description = "The event type as changed", body = EventTypeView),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, description = "A value out of range (`invalid_description`, `invalid_schema`, \
            `invalid_body`) or an example that breaks the schema (`invalid_example`, with `violations`)",
            body = ErrorBody),
        (status = 500, response = InternalError),
    )
)]
async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, name)): Path<(String, String)>,
    ApiJson(body): ApiJson<UpdateBody>,
) -> Result<Json<EventTypeView>, ApiError> {
    let mut t = find(&state, &caller, &project, &name).await?;
    let changes = Changes {
        description: body.description,
        schema: body.schema,
        example: body.example,
        deprecated: body.deprecated,
    };
    event_types::apply(&mut t, changes, now_ms())?;
    let audit = caller.audit(
        AuditAction::EventTypeUpdate,
        t.id,
        serde_json::json!({ "name": t.name }),
    );
    state.storage.update_event_type(&t, Some(&audit)).await?;
    Ok(Json(EventTypeView::from(&t)))
}
