//! `/v1/projects/{project}/notifications`: what admins were told about this space
//! (a destination or incoming webhook disabled, early warnings), read or unread.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::events::page_limit;
use super::extract::Caller;
use super::views::{rfc3339, PageOf};
use crate::clock::now_ms;
use crate::domain::*;
use crate::http::error::ApiError;
use crate::startup::AppState;
use crate::storage::{Page, StorageError};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/projects/{project}/notifications", get(list))
        .route("/projects/{project}/notifications/{id}/read", post(mark_read))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ListQuery {
    /// Only unread ones.
    #[serde(default)]
    unread: Option<bool>,
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    cursor: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NotificationView {
    id: NotificationId,
    kind: String,
    subject_kind: Option<String>,
    subject_id: Option<String>,
    message: String,
    created_at: String,
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

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(project): Path<String>,
    Query(q): Query<ListQuery>,
) -> Result<Json<PageOf<NotificationView>>, ApiError> {
    let space_id = caller.space(&project)?;
    let limit = page_limit(q.limit)?;
    let before = q
        .cursor
        .map(|c| c.parse::<NotificationId>().map_err(|_| ApiError::invalid("invalid_cursor", "cursor is not one this API gave")))
        .transpose()?;
    let rows = state
        .storage
        .list_space_notifications(space_id, q.unread.unwrap_or(false), Page { before, limit })
        .await?;
    let next_cursor = (rows.len() as i64 == limit).then(|| rows.last().map(|n| n.id.to_string())).flatten();
    Ok(Json(PageOf { data: rows.iter().map(NotificationView::from).collect(), next_cursor }))
}

async fn mark_read(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let space_id = caller.space(&project)?;
    let not_found = || ApiError::NotFound(format!("no notification {id:?}"));
    let nid: NotificationId = id.parse().map_err(|_| not_found())?;
    match state.storage.mark_space_notification_read(space_id, nid, now_ms()).await {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        Err(StorageError::NotFound) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}
