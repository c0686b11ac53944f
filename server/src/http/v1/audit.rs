//! `GET /v1/projects/{project}/audit-log`: the project's audit entries, newest first
//! (docs D14): who (a console user's email or an API key's ID), what, on what, from
//! which address. Keyset-paged like every listing; filters by action, actor and time.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::deliveries::{filter_value, parse_time};
use super::extract::Caller;
use super::openapi::{InternalError, NotFound, ProjectPath, Unauthorized, Unprocessable};
use super::page::{self, Keyset};
use super::views::{rfc3339, PageOf};
use crate::domain::*;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::storage::AuditFilter;

pub fn router() -> Router<AppState> {
    Router::new().route("/projects/{project}/audit-log", get(list))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Only entries of this action, e.g. `destination.update`.
    #[serde(default)]
    #[param(value_type = Option<AuditAction>, inline)]
    action: Option<String>,
    /// Only entries made by this actor: a user's ID (`usr_…`) or an API key's (`key_…`).
    #[serde(default)]
    actor: Option<String>,
    /// Made at or after: RFC 3339 or Unix milliseconds.
    #[serde(default)]
    since: Option<String>,
    /// Made before: RFC 3339 or Unix milliseconds.
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

/// Who made a change.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = AuditActor)]
struct ActorView {
    kind: ActorKind,
    /// The user's ID (`usr_…`) or the API key's (`key_…`).
    id: String,
    /// The user's email, or the API key's ID.
    label: String,
    /// The user's role (`admin` or `support`); `null` for an API key.
    #[schema(required = true)]
    role: Option<String>,
}

/// One change to the project, recorded in the transaction that made it.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = AuditEntry)]
struct AuditView {
    id: AuditId,
    actor: ActorView,
    action: AuditAction,
    /// The kind of thing changed: `destination`, `deliveries`, `channel`, …
    target_kind: String,
    /// The ID of the thing changed (empty for a bulk action on deliveries: see `detail`).
    target_id: String,
    /// More about the change; for bulk actions `count` (how many it changed) and
    /// `filter` (the filter or the IDs that chose them).
    #[schema(value_type = Object)]
    detail: Value,
    /// The TCP peer address of the request that made it.
    #[schema(required = true)]
    source: Option<String>,
    #[schema(format = DateTime)]
    created_at: String,
}

impl From<&AuditEntry> for AuditView {
    fn from(e: &AuditEntry) -> Self {
        Self {
            id: e.id,
            actor: ActorView {
                kind: e.actor.kind,
                id: e.actor.id.clone(),
                label: e.actor.label.clone(),
                role: e.actor.role.map(|r| r.as_str().to_owned()),
            },
            action: e.action,
            target_kind: e.target_kind.clone(),
            target_id: e.target_id.clone(),
            detail: match &e.detail {
                Value::Null => Value::Object(Default::default()),
                other => other.clone(),
            },
            source: e.source.clone(),
            created_at: rfc3339(e.created_at),
        }
    }
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/audit-log",
    operation_id = "listAuditLog",
    tag = "Audit log",
    summary = "List the audit log",
    description = "Every change made to the project through the REST API or the console, newest \
        first. Reads are not recorded, nor are published events and posted messages (they are \
        the project's data, listed as events).",
    params(ProjectPath, ListQuery),
    responses(
        (status = 200, description = "A page of audit entries, newest first", body = PageOf<AuditView>),
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
) -> Result<Json<PageOf<AuditView>>, ApiError> {
    let space_id = caller.space(&project)?;
    let q = page::query(q)?;
    let keyset = Keyset::<AuditId>::new(space_id, q.limit, q.cursor.as_deref())?;
    let filter = AuditFilter {
        space_id: Some(space_id),
        actor_id: match q.actor {
            Some(a) if a.contains('\0') => {
                return Err(ApiError::invalid(
                    "invalid_filter",
                    "actor must not contain NUL",
                ))
            }
            other => other,
        },
        action: filter_value("action", q.action)?,
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
    let rows = state.storage.list_audit(&filter, keyset.page()).await?;
    Ok(Json(keyset.answer(rows, |e| e.id, |e| AuditView::from(e))))
}
