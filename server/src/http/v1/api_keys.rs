//! `/v1/projects/{project}/api-keys`: more keys for a space, listed without their
//! secret, revocable. A key is shown once, when it is made; only its hash is kept
//! (minting and revoking: [`crate::ops::credentials`]).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::extract::{ApiJson, Caller};
use super::openapi::{
    ApiKeyPath, BadRequest, InternalError, NotFound, PayloadTooLarge, ProjectPath, Unauthorized,
    Unprocessable, UnsupportedMediaType,
};
use super::page::{self, Keyset, ListQuery};
use super::views::{rfc3339, PageOf};
use crate::clock::now_ms;
use crate::domain::*;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::AppState;
use crate::ops::credentials;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/projects/{project}/api-keys", post(create).get(list))
        .route("/projects/{project}/api-keys/{id}/revoke", post(revoke))
}

/// A new API key.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = CreateApiKey)]
struct CreateBody {
    /// 1 to 100 characters after trimming (kept trimmed), not only white space, no control characters.
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x1f\x7f-\x9f \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00-\x1f\x7f-\x9f]*$"
    )]
    name: String,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = ApiKey)]
struct ApiKeyView {
    id: ApiKeyId,
    name: String,
    /// The first characters of the key, to tell keys apart.
    prefix: String,
    #[schema(format = DateTime)]
    created_at: String,
    /// `null` while the key is live.
    #[schema(required = true, format = DateTime)]
    revoked_at: Option<String>,
    /// The key itself, for `Authorization: Bearer <key>`; only in the answer that creates it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    key: Option<String>,
    /// When the key last authenticated a request, to the minute (it is recorded at most
    /// once a minute); `null` if it never has.
    #[schema(required = true, format = DateTime)]
    last_used_at: Option<String>,
}

impl From<&ApiKey> for ApiKeyView {
    fn from(k: &ApiKey) -> Self {
        Self {
            id: k.id,
            name: k.name.clone(),
            prefix: k.prefix.clone(),
            created_at: rfc3339(k.created_at),
            revoked_at: k.revoked_at.map(rfc3339),
            key: None,
            last_used_at: k.last_used_at.map(rfc3339),
        }
    }
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/api-keys",
    operation_id = "createApiKey",
    tag = "API keys",
    summary = "Create an API key",
    params(ProjectPath),
    request_body = CreateBody,
    responses(
        (status = 201, description = "The key, with the secret `key` (shown only here)", body = ApiKeyView),
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
) -> Result<(StatusCode, Json<ApiKeyView>), ApiError> {
    let space_id = caller.space(&project)?;
    let (key, minted) = credentials::create_api_key(
        state.storage.as_ref(),
        space_id,
        &body.name,
        now_ms(),
        Some(&caller.author()),
    )
    .await?;
    let mut view = ApiKeyView::from(&key);
    view.key = Some(minted.secret);
    Ok((StatusCode::CREATED, Json(view)))
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/api-keys",
    operation_id = "listApiKeys",
    tag = "API keys",
    summary = "List API keys",
    params(ProjectPath, ListQuery),
    responses(
        (status = 200, description = "A page of the project's keys (revoked ones included), newest first, without secrets", body = PageOf<ApiKeyView>),
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
) -> Result<Json<PageOf<ApiKeyView>>, ApiError> {
    let space_id = caller.space(&project)?;
    let q = page::query(q)?;
    let keyset = Keyset::<ApiKeyId>::new(space_id, q.limit, q.cursor.as_deref())?;
    let keys = state.storage.list_api_keys(space_id, keyset.page()).await?;
    Ok(Json(keyset.answer(keys, |k| k.id, |k| ApiKeyView::from(k))))
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/api-keys/{id}/revoke",
    operation_id = "revokeApiKey",
    tag = "API keys",
    summary = "Revoke an API key",
    params(ApiKeyPath),
    responses(
        (status = 204, description = "Revoked: the key answers 401 from now on (revoking again answers the same)"),
        (status = 401, response = Unauthorized),
        (status = 404, description = "No such key in this project, or no such project (`not_found`)", body = ErrorBody),
        (status = 500, response = InternalError),
    )
)]
async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let space_id = caller.space(&project)?;
    credentials::revoke_api_key(
        state.storage.as_ref(),
        space_id,
        &id,
        now_ms(),
        &caller.author(),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
