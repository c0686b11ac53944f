//! `/v1/projects/{project}/bots`: create a bot (its token shown once), list and read
//! bots, revoke one (docs §4, §5). Bots post through [`super::bot`].

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::extract::{ApiJson, Caller};
use super::openapi::{
    BadRequest, BotPath, InternalError, NotFound, PayloadTooLarge, ProjectPath, Unauthorized,
    Unprocessable, UnsupportedMediaType,
};
use super::page::{self, Keyset, ListQuery};
use super::views::{rfc3339, PageOf};
use crate::clock::now_ms;
use crate::domain::*;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::credentials;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/projects/{project}/bots", post(create).get(list))
        .route("/projects/{project}/bots/{id}", get(read))
        .route("/projects/{project}/bots/{id}/revoke", post(revoke))
}

/// A bot as the API shows it; `token` only in the answer to its creation.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Bot)]
struct BotView {
    id: BotId,
    name: String,
    /// For `Authorization: Bot <token>`; only in the answer to its creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^pfb_[A-Za-z0-9]{40}$")]
    token: Option<String>,
    #[schema(format = DateTime)]
    created_at: String,
    /// When its token was revoked; `null` while it is live.
    #[schema(required = true, format = DateTime)]
    revoked_at: Option<String>,
}

impl From<&Bot> for BotView {
    fn from(b: &Bot) -> Self {
        Self {
            id: b.id,
            name: b.name.clone(),
            token: None,
            created_at: rfc3339(b.created_at),
            revoked_at: b.revoked_at.map(rfc3339),
        }
    }
}

/// A new bot.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateBot)]
struct CreateBody {
    /// 1 to 100 characters after trimming (kept trimmed), not only white space, no control characters.
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x1f\x7f-\x9f \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00-\x1f\x7f-\x9f]*$"
    )]
    name: String,
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/bots",
    operation_id = "createBot",
    tag = "Bots",
    summary = "Create a bot",
    params(ProjectPath),
    request_body = CreateBody,
    responses(
        (status = 201, description = "The bot with its `token` (shown only here)", body = BotView),
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
) -> Result<(StatusCode, Json<BotView>), ApiError> {
    let space_id = caller.space(&project)?;
    let (bot, minted) = credentials::new_bot(space_id, &body.name, now_ms())?;
    let audit = caller.audit(
        AuditAction::BotCreate,
        bot.id,
        serde_json::json!({ "name": bot.name }),
    );
    state.storage.create_bot(&bot, Some(&audit)).await?;
    let mut v = BotView::from(&bot);
    v.token = Some(minted.secret);
    Ok((StatusCode::CREATED, Json(v)))
}

/// The bot `id` of the caller's space (revoked ones included), or 404.
async fn find(state: &AppState, caller: &Caller, project: &str, id: &str) -> Result<Bot, ApiError> {
    let space_id = caller.space(project)?;
    Ok(credentials::find_bot(state.storage.as_ref(), space_id, id).await?)
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/bots",
    operation_id = "listBots",
    tag = "Bots",
    summary = "List bots",
    params(ProjectPath, ListQuery),
    responses(
        (status = 200, description = "A page of bots (revoked ones included), newest first", body = PageOf<BotView>),
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
) -> Result<Json<PageOf<BotView>>, ApiError> {
    let space_id = caller.space(&project)?;
    let q = page::query(q)?;
    let keyset = Keyset::<BotId>::new(space_id, q.limit, q.cursor.as_deref())?;
    let bots = state.storage.list_bots(space_id, keyset.page()).await?;
    Ok(Json(keyset.answer(bots, |b| b.id, |b| BotView::from(b))))
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/bots/{id}",
    operation_id = "getBot",
    tag = "Bots",
    summary = "Read a bot",
    params(BotPath),
    responses(
        (status = 200, description = "The bot", body = BotView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<BotView>, ApiError> {
    Ok(Json(BotView::from(
        &find(&state, &caller, &project, &id).await?,
    )))
}

/// Revokes a bot's token for good; revoking it again answers the same.
#[utoipa::path(
    post,
    path = "/v1/projects/{project}/bots/{id}/revoke",
    operation_id = "revokeBot",
    tag = "Bots",
    summary = "Revoke a bot's token",
    params(BotPath),
    responses(
        (status = 200, description = "The bot, revoked for good (revoking again answers the same)", body = BotView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<BotView>, ApiError> {
    let space_id = caller.space(&project)?;
    let bot = credentials::revoke_bot(
        state.storage.as_ref(),
        space_id,
        &id,
        now_ms(),
        &caller.author(),
    )
    .await?;
    Ok(Json(BotView::from(&bot)))
}
