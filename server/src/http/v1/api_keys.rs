//! `/v1/projects/{project}/api-keys`: more keys for a space, listed without their
//! secret, revocable. A key is shown once, when it is made; only its hash is kept.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::extract::{check_name, ApiJson, Caller};
use super::openapi::{
    ApiKeyPath, BadRequest, InternalError, NotFound, PayloadTooLarge, ProjectPath, Unauthorized,
    Unprocessable, UnsupportedMediaType,
};
use super::page::{self, Keyset, ListQuery};
use super::views::{rfc3339, PageOf};
use crate::auth;
use crate::clock::now_ms;
use crate::domain::*;
use crate::http::error::{ApiError, ErrorBody};
use crate::startup::AppState;
use crate::storage::StorageError;

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
    /// 1 to 100 characters, not only white space (kept trimmed), no control characters.
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
    let name = check_name("an API key name", &body.name, 100)?;
    let secret = auth::new_token("pfk");
    let key = ApiKey {
        id: ApiKeyId::new(),
        space_id,
        name,
        prefix: secret[..12].to_owned(),
        created_at: now_ms(),
        last_used_at: None,
        revoked_at: None,
    };
    state
        .storage
        .create_api_key(&key, &auth::hash_token(&secret))
        .await?;
    let mut view = ApiKeyView::from(&key);
    view.key = Some(secret);
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
        (status = 204, description = "Revoked: the key answers 401 from now on"),
        (status = 401, response = Unauthorized),
        (status = 404, description = "No such live key in this project, or no such project (`not_found`)", body = ErrorBody),
        (status = 500, response = InternalError),
    )
)]
async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let space_id = caller.space(&project)?;
    let not_found = || ApiError::NotFound(format!("no live API key {id:?}"));
    let key_id: ApiKeyId = id.parse().map_err(|_| not_found())?;
    match state
        .storage
        .revoke_api_key(space_id, key_id, now_ms())
        .await
    {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        Err(StorageError::NotFound) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}
