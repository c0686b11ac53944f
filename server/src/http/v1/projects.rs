//! `/v1/projects/{project}`: the project (space) the API key belongs to, with its
//! retention (docs D10): its own, if set, and the one that applies. Setting it:
//! [`crate::ops::retention`].

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Deserializer, Serialize};

use super::extract::{ApiJson, Caller};
use super::openapi::{
    BadRequest, InternalError, NotFound, PayloadTooLarge, ProjectPath, Unauthorized,
    UnsupportedMediaType,
};
use super::views::rfc3339;
use crate::domain::*;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::AppState;
use crate::ops::retention;

pub fn router() -> Router<AppState> {
    Router::new().route("/projects/{project}", get(read).patch(update))
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Project)]
struct ProjectView {
    id: SpaceId,
    name: String,
    #[schema(value_type = String, example = "pro")]
    plan: String,
    #[schema(format = DateTime)]
    created_at: String,
    /// The project's own retention, a duration such as `30days`; `null`: its plan's.
    #[schema(required = true, example = "30days")]
    retention: Option<String>,
    /// The retention that applies: finished deliveries, their attempts and events and
    /// read notifications older than this are deleted.
    #[schema(example = "7days")]
    effective_retention: String,
}

/// Absent stays `None`; `null` becomes `Some(None)`: PATCH can clear a field.
fn nullable<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// The fields to change; absent fields stay as they are.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = UpdateProject)]
struct UpdateBody {
    /// A duration from `1s` to `3650d`, such as `30d`, `12h`, `10m` or `1d 12h`; `null`
    /// goes back to the plan's retention.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, example = "30d", pattern = r"^\s*[0-9]")]
    retention: Option<Option<String>>,
}

fn view(space: &Space, state: &AppState) -> ProjectView {
    let effective = retention::effective(space, &state.config.retention.per_plan());
    ProjectView {
        id: space.id,
        name: space.name.clone(),
        plan: space.plan.as_str().to_owned(),
        created_at: rfc3339(space.created_at),
        retention: space.retention.map(|r| r.to_string()),
        effective_retention: effective.to_string(),
    }
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}",
    operation_id = "getProject",
    tag = "Projects",
    summary = "Read the project",
    params(ProjectPath),
    responses(
        (status = 200, description = "The project, with its retention", body = ProjectView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
) -> Result<Json<ProjectView>, ApiError> {
    let space_id = caller.space(&project)?;
    let space = state.storage.get_space(space_id).await?;
    Ok(Json(view(&space, &state)))
}

#[utoipa::path(
    patch,
    path = "/v1/projects/{project}",
    operation_id = "updateProject",
    tag = "Projects",
    summary = "Change the project's retention",
    params(ProjectPath),
    request_body = UpdateBody,
    responses(
        (status = 200, description = "The project as changed", body = ProjectView),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, description = "A retention that is not a duration from 1s to 3650d \
            (`invalid_retention`), or a body that is not an object of these fields (`invalid_body`)",
            body = ErrorBody),
        (status = 500, response = InternalError),
    )
)]
async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
    ApiJson(body): ApiJson<UpdateBody>,
) -> Result<Json<ProjectView>, ApiError> {
    let space_id = caller.space(&project)?;
    let space = match body.retention {
        None => state.storage.get_space(space_id).await?,
        Some(raw) => {
            let chosen = raw.as_deref().map(retention::parse).transpose()?;
            retention::set(state.storage.as_ref(), space_id, chosen, &caller.author()).await?
        }
    };
    Ok(Json(view(&space, &state)))
}
