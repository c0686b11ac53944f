//! `/v1/projects/{project}/channels`: create, list, read, rename and delete channels,
//! page through their messages, and post a message with the API key (docs §1, §5).
//! [`MessageBody`] is the body every poster sends (API key, incoming webhook, bot);
//! posting itself is [`crate::ops::messages`].

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::extract::{check_name, ApiJson, Caller};
use super::openapi::{
    BadRequest, ChannelPath, InternalError, NotFound, PayloadTooLarge, ProjectPath, Unauthorized,
    Unprocessable, UnsupportedMediaType,
};
use super::page::{self, Keyset, ListQuery};
use super::views::{rfc3339, PageOf};
use crate::clock::now_ms;
use crate::domain::*;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::AppState;
use crate::ops::messages::{self, MessageView, NewMessage, Source};
use crate::ops::names::NameKind;
use crate::ops::OpsError;
use crate::storage::StorageError;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/projects/{project}/channels", post(create).get(list))
        .route(
            "/projects/{project}/channels/{id}",
            get(read).patch(rename).delete(remove),
        )
        .route(
            "/projects/{project}/channels/{id}/messages",
            post(post_with_api_key).get(messages),
        )
}

/// A channel of the project.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelView {
    pub id: ChannelId,
    pub name: String,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<&Channel> for ChannelView {
    fn from(c: &Channel) -> Self {
        Self {
            id: c.id,
            name: c.name.clone(),
            created_at: rfc3339(c.created_at),
        }
    }
}

/// The body of a new message, whoever posts it: `{"text": "...", "attachments"?: [...]}`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = PostMessage)]
pub struct MessageBody {
    /// 1 to 40000 characters (configurable), not only white space, no NUL characters.
    #[schema(
        examples("Deploy finished"),
        min_length = 1,
        pattern = r"^[^\x00]*[^\x00\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00]*$"
    )]
    pub text: String,
    /// Any JSON values, kept as they are.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Value>>)]
    pub attachments: Option<Vec<Value>>,
}

impl MessageBody {
    /// The message, once its text meets the rules of [`NewMessage::new`] (422 otherwise,
    /// with a code that says which rule).
    pub fn check(self, max_chars: usize) -> Result<NewMessage, OpsError> {
        NewMessage::new(self.text, self.attachments, max_chars)
    }
}

/// A new channel.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateChannel)]
struct CreateBody {
    /// 1 to 100 characters after trimming (kept trimmed), not only white space, no control characters;
    /// unique in the project.
    #[schema(
        examples("deploys"),
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x1f\x7f-\x9f \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00-\x1f\x7f-\x9f]*$"
    )]
    name: String,
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/channels",
    operation_id = "createChannel",
    tag = "Channels",
    summary = "Create a channel",
    params(ProjectPath),
    request_body = CreateBody,
    responses(
        (status = 201, description = "The channel", body = ChannelView),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 409, description = "The project already has a channel of this name (`channel_name_taken`)", body = ErrorBody),
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
) -> Result<(StatusCode, Json<ChannelView>), ApiError> {
    let space_id = caller.space(&project)?;
    let channel = Channel {
        id: ChannelId::new(),
        space_id,
        name: check_name(NameKind::Channel, &body.name)?,
        created_at: now_ms(),
    };
    let audit = caller.audit(
        AuditAction::ChannelCreate,
        channel.id,
        serde_json::Value::Null,
    );
    match state.storage.create_channel(&channel, Some(&audit)).await {
        Ok(()) => Ok((StatusCode::CREATED, Json(ChannelView::from(&channel)))),
        Err(StorageError::Conflict(_)) => Err(name_taken(&channel.name)),
        Err(e) => Err(e.into()),
    }
}

/// A channel's new name.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RenameChannel)]
struct RenameBody {
    /// 1 to 100 characters after trimming (kept trimmed), not only white space, no control characters;
    /// unique in the project.
    #[schema(
        examples("releases"),
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x1f\x7f-\x9f \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00-\x1f\x7f-\x9f]*$"
    )]
    name: String,
}

fn name_taken(name: &str) -> ApiError {
    ApiError::Conflict {
        code: "channel_name_taken",
        message: format!("this project already has a channel named {name:?}"),
    }
}

#[utoipa::path(
    patch,
    path = "/v1/projects/{project}/channels/{id}",
    operation_id = "renameChannel",
    tag = "Channels",
    summary = "Rename a channel",
    params(ChannelPath),
    request_body = RenameBody,
    responses(
        (status = 200, description = "The channel with its new name", body = ChannelView),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 409, description = "The project already has a channel of this name (`channel_name_taken`)", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
    )
)]
async fn rename(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<RenameBody>,
) -> Result<Json<ChannelView>, ApiError> {
    let space_id = caller.space(&project)?;
    let mut channel = find_channel(&state, space_id, &id).await?;
    let name = check_name(NameKind::Channel, &body.name)?;
    let audit = caller.audit(
        AuditAction::ChannelRename,
        channel.id,
        serde_json::json!({ "name": name }),
    );
    match state
        .storage
        .rename_channel(space_id, channel.id, &name, Some(&audit))
        .await
    {
        Ok(()) => {
            channel.name = name;
            Ok(Json(ChannelView::from(&channel)))
        }
        Err(StorageError::Conflict(_)) => Err(name_taken(&name)),
        Err(StorageError::NotFound) => Err(ApiError::NotFound(format!("no channel {id:?}"))),
        Err(e) => Err(e.into()),
    }
}

#[utoipa::path(
    delete,
    path = "/v1/projects/{project}/channels/{id}",
    operation_id = "deleteChannel",
    tag = "Channels",
    summary = "Delete a channel",
    description = "Deletes the channel with its messages and its incoming webhooks (their URLs answer 401 \
        from then on). The `message.created` events already published stay.",
    params(ChannelPath),
    responses(
        (status = 204, description = "Deleted"),
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
    let space_id = caller.space(&project)?;
    let not_found = || ApiError::NotFound(format!("no channel {id:?}"));
    let channel_id: ChannelId = id.parse().map_err(|_| not_found())?;
    let audit = caller.audit(
        AuditAction::ChannelDelete,
        channel_id,
        serde_json::Value::Null,
    );
    match state
        .storage
        .delete_channel(space_id, channel_id, Some(&audit))
        .await
    {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        Err(StorageError::NotFound) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}

/// The channel `id` of the caller's space, or 404.
pub async fn find_channel(
    state: &AppState,
    space_id: SpaceId,
    id: &str,
) -> Result<Channel, ApiError> {
    let not_found = || ApiError::NotFound(format!("no channel {id:?}"));
    let channel_id: ChannelId = id.parse().map_err(|_| not_found())?;
    match state.storage.get_channel(space_id, channel_id).await {
        Ok(c) => Ok(c),
        Err(StorageError::NotFound) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/channels",
    operation_id = "listChannels",
    tag = "Channels",
    summary = "List channels",
    params(ProjectPath, ListQuery),
    responses(
        (status = 200, description = "A page of channels, newest first", body = PageOf<ChannelView>),
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
) -> Result<Json<PageOf<ChannelView>>, ApiError> {
    let space_id = caller.space(&project)?;
    let q = page::query(q)?;
    let keyset = Keyset::<ChannelId>::new(space_id, q.limit, q.cursor.as_deref())?;
    let channels = state.storage.list_channels(space_id, keyset.page()).await?;
    Ok(Json(keyset.answer(
        channels,
        |c| c.id,
        |c| ChannelView::from(c),
    )))
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/channels/{id}",
    operation_id = "getChannel",
    tag = "Channels",
    summary = "Read a channel",
    params(ChannelPath),
    responses(
        (status = 200, description = "The channel", body = ChannelView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<ChannelView>, ApiError> {
    let space_id = caller.space(&project)?;
    Ok(Json(ChannelView::from(
        &find_channel(&state, space_id, &id).await?,
    )))
}

/// The channel's messages, newest first (keyset: `limit`, `cursor` → `nextCursor`).
#[utoipa::path(
    get,
    path = "/v1/projects/{project}/channels/{id}/messages",
    operation_id = "listChannelMessages",
    tag = "Channels",
    summary = "List a channel's messages",
    params(ChannelPath, ListQuery),
    responses(
        (status = 200, description = "A page of messages, newest first", body = PageOf<MessageView>),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
    )
)]
async fn messages(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<PageOf<MessageView>>, ApiError> {
    let space_id = caller.space(&project)?;
    let channel = find_channel(&state, space_id, &id).await?;
    let q = page::query(q)?;
    let keyset = Keyset::<MessageId>::new(space_id, q.limit, q.cursor.as_deref())?;
    let found = state
        .storage
        .list_messages(channel.id, keyset.page())
        .await?;
    Ok(Json(keyset.answer(
        found,
        |m| m.id,
        |m| MessageView::from(m),
    )))
}

/// Posts a message as the integration itself (`sourceKind: "api"`, `sourceId`: the API key).
#[utoipa::path(
    post,
    path = "/v1/projects/{project}/channels/{id}/messages",
    operation_id = "postChannelMessage",
    tag = "Channels",
    summary = "Post a message with the API key",
    params(ChannelPath),
    request_body = MessageBody,
    responses(
        (status = 201, description = "The message (`sourceKind: api`); its `message.created` event is published", body = MessageView),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
    )
)]
async fn post_with_api_key(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<MessageBody>,
) -> Result<(StatusCode, Json<MessageView>), ApiError> {
    let space_id = caller.space(&project)?;
    let channel = find_channel(&state, space_id, &id).await?;
    let new = body.check(state.config.limits.message_max_chars)?;
    let message = messages::post(
        state.storage.as_ref(),
        &state.engine,
        messages::Judges {
            schemas: &state.schemas,
            programs: &state.sandbox,
        },
        (&channel).into(),
        new,
        Source::Api(caller.key.id),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(MessageView::from(&message))))
}
