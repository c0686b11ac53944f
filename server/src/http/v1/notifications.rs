//! `/v1/projects/{project}/notifications`: what admins were told about this space
//! (a destination or incoming webhook disabled, early warnings), read or unread.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::extract::Caller;
use super::openapi::{
    InternalError, NotFound, NotificationPath, ProjectPath, Unauthorized, Unprocessable,
};
use super::page::{self, Keyset};
use super::views::{rfc3339, PageOf};
use crate::clock::now_ms;
use crate::domain::*;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::storage::StorageError;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/projects/{project}/notifications", get(list))
        .route(
            "/projects/{project}/notifications/{id}/read",
            post(mark_read),
        )
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// `true`: only unread ones; `false`: only read ones; absent: all.
    #[serde(default)]
    unread: Option<bool>,
    /// At most this many: 1 to 250, 50 by default.
    #[serde(default)]
    #[param(minimum = 1, maximum = 250)]
    limit: Option<i64>,
    /// The `nextCursor` of the previous page of the same listing, unchanged.
    #[serde(default)]
    #[param(pattern = "^[A-Za-z0-9_-]+$")]
    cursor: Option<String>,
}

/// Something admins were told about this project.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Notification)]
struct NotificationView {
    id: NotificationId,
    /// What happened: `destination.failing`, `destination.disabled` or `incoming_webhook.disabled`.
    kind: String,
    /// The kind of thing it is about, e.g. `destination`.
    #[schema(required = true)]
    subject_kind: Option<String>,
    /// The ID of the thing it is about.
    #[schema(required = true)]
    subject_id: Option<String>,
    message: String,
    #[schema(format = DateTime)]
    created_at: String,
    /// `null` while it is unread.
    #[schema(required = true, format = DateTime)]
    read_at: Option<String>,
}

impl From<&Notification> for NotificationView {
    fn from(n: &Notification) -> Self {
        Self {
            id: n.id,
            kind: n.kind.clone(),
            subject_kind: n.subject_kind.clone(),
            subject_id: n.subject_id.clone(),
            message: n.message.clone(),
            created_at: rfc3339(n.created_at),
            read_at: n.read_at.map(rfc3339),
        }
    }
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/notifications",
    operation_id = "listNotifications",
    tag = "Notifications",
    summary = "List notifications",
    params(ProjectPath, ListQuery),
    responses(
        (status = 200, description = "A page of notifications, newest first", body = PageOf<NotificationView>),
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
) -> Result<Json<PageOf<NotificationView>>, ApiError> {
    let space_id = caller.space(&project)?;
    let q = page::query(q)?;
    let keyset = Keyset::<NotificationId>::new(space_id, q.limit, q.cursor.as_deref())?;
    let rows = state
        .storage
        .list_space_notifications(space_id, q.unread, keyset.page())
        .await?;
    Ok(Json(keyset.answer(
        rows,
        |n| n.id,
        |n| NotificationView::from(n),
    )))
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/notifications/{id}/read",
    operation_id = "markNotificationRead",
    tag = "Notifications",
    summary = "Mark a notification read",
    params(NotificationPath),
    responses(
        (status = 204, description = "Marked read"),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn mark_read(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let space_id = caller.space(&project)?;
    let not_found = || ApiError::NotFound(format!("no notification {id:?}"));
    let nid: NotificationId = id.parse().map_err(|_| not_found())?;
    let audit = caller.audit(AuditAction::NotificationRead, nid, serde_json::Value::Null);
    match state
        .storage
        .mark_space_notification_read(space_id, nid, now_ms(), Some(&audit))
        .await
    {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        Err(StorageError::NotFound) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}
