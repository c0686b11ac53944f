//! `/v1/projects/{project}/channels`: create, list, read, rename and delete channels,
//! page through their messages, and post a message with the API key (docs §1, §5).
//!
//! Messages are written here for every source (REST API, incoming webhooks, bots):
//! [`post_message`] stores the message and its `message.created` event with the
//! event's fan-out in one transaction, so a message answered 201 is on its way to
//! every subscribed destination.

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
use crate::startup::AppState;
use crate::storage::{IncomingReplay, NewEvent, Published, StorageError};

/// The type of the event every new message emits (docs §1).
pub const MESSAGE_CREATED: &str = "message.created";

/// The longest channel name, in characters.
const MAX_CHANNEL_NAME_CHARS: usize = 100;

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

/// A message as every answer and the `message.created` payload show it.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Message)]
pub struct MessageView {
    pub id: MessageId,
    pub channel_id: ChannelId,
    pub text: String,
    /// Always an array; empty when the message has none.
    #[schema(value_type = Vec<Value>)]
    pub attachments: Value,
    /// `incoming_webhook`, `bot` or `api`.
    pub source_kind: MessageSourceKind,
    /// The webhook, bot or API key that posted it.
    #[schema(required = true)]
    pub source_id: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<&Message> for MessageView {
    fn from(m: &Message) -> Self {
        Self {
            id: m.id,
            channel_id: m.channel_id,
            text: m.text.clone(),
            attachments: m
                .attachments
                .clone()
                .unwrap_or_else(|| Value::Array(Vec::new())),
            source_kind: m.source_kind,
            source_id: m.source_id.clone(),
            created_at: rfc3339(m.created_at),
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

/// A message's text and attachments, once they meet the rules.
#[derive(Debug)]
pub struct NewMessage {
    pub text: String,
    pub attachments: Option<Value>,
}

impl MessageBody {
    /// The text must have 1 to `max_chars` characters and not be only white space
    /// (422 otherwise, with a code that says which rule).
    pub fn check(self, max_chars: usize) -> Result<NewMessage, ApiError> {
        if self.text.trim().is_empty() {
            return Err(ApiError::invalid("empty_text", "text must not be empty"));
        }
        if self.text.contains('\0') {
            return Err(ApiError::invalid(
                "invalid_text",
                "text must not contain NUL characters",
            ));
        }
        let chars = self.text.chars().count();
        if chars > max_chars {
            return Err(ApiError::invalid(
                "text_too_long",
                format!("text may have at most {max_chars} characters, not {chars}"),
            ));
        }
        Ok(NewMessage {
            text: self.text,
            attachments: self.attachments.map(Value::Array),
        })
    }
}

/// Stores a message in `channel` and its `message.created` event (the message JSON
/// plus `spaceId`) fanned out to the subscribed destinations, in one transaction;
/// wakes the dispatch engine when there is something to send.
pub async fn post_message(
    state: &AppState,
    channel: &Channel,
    new: NewMessage,
    source_kind: MessageSourceKind,
    source_id: Option<String>,
) -> Result<MessageView, ApiError> {
    let posted = post_message_once(state, channel, new, source_kind, source_id, None).await?;
    posted.ok_or_else(|| {
        ApiError::Internal(anyhow::anyhow!("a message without a webhook-id replayed"))
    })
}

/// [`post_message`] that also remembers a signed incoming request's `webhook-id` in the
/// same transaction; `None` when that ID was remembered before (a replay, nothing written).
pub async fn post_message_once(
    state: &AppState,
    channel: &Channel,
    new: NewMessage,
    source_kind: MessageSourceKind,
    source_id: Option<String>,
    replay: Option<IncomingReplay<'_>>,
) -> Result<Option<MessageView>, ApiError> {
    let now = now_ms();
    let message = Message {
        id: MessageId::new(),
        space_id: channel.space_id,
        channel_id: channel.id,
        text: new.text,
        attachments: new.attachments,
        source_kind,
        source_id,
        created_at: now,
    };
    let view = MessageView::from(&message);
    let mut payload = serde_json::to_value(&view)
        .map_err(|e| ApiError::Internal(anyhow::Error::new(e).context("serialising a message")))?;
    if let Value::Object(fields) = &mut payload {
        fields.insert(
            "spaceId".into(),
            Value::String(channel.space_id.to_string()),
        );
    }
    let event = NewEvent {
        event: Event {
            id: EventId::new(),
            space_id: channel.space_id,
            event_type: MESSAGE_CREATED.into(),
            payload,
            created_at: now,
        },
        idempotency_key: None,
        request_hash: String::new(),
    };
    match state
        .storage
        .post_message(&message, &event, replay, now)
        .await?
    {
        None => return Ok(None),
        Some(Published::Created { destinations, .. }) => state.engine.due_now(destinations),
        Some(_) => {}
    }
    Ok(Some(view))
}

/// A new channel.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateChannel)]
struct CreateBody {
    /// 1 to 100 characters, not only white space (kept trimmed), no control characters;
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
        name: check_name("a channel name", &body.name, MAX_CHANNEL_NAME_CHARS)?,
        created_at: now_ms(),
    };
    match state.storage.create_channel(&channel).await {
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
    /// 1 to 100 characters, not only white space (kept trimmed), no control characters;
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
    let name = check_name("a channel name", &body.name, MAX_CHANNEL_NAME_CHARS)?;
    match state
        .storage
        .rename_channel(space_id, channel.id, &name)
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
    match state.storage.delete_channel(space_id, channel_id).await {
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
    let view = post_message(
        &state,
        &channel,
        new,
        MessageSourceKind::Api,
        Some(caller.key.id.to_string()),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(view)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &str) -> MessageBody {
        MessageBody {
            text: text.into(),
            attachments: None,
        }
    }

    #[test]
    fn a_message_text_must_have_one_to_max_characters_not_bytes() {
        assert!(body("hi").check(2).is_ok());
        assert!(body("ёж").check(2).is_ok(), "two characters, four bytes");
        let err = body("abc").check(2).unwrap_err();
        assert!(matches!(
            err,
            ApiError::Invalid {
                code: "text_too_long",
                ..
            }
        ));
        for blank in ["", "  \n\t"] {
            let err = body(blank).check(10).unwrap_err();
            assert!(matches!(
                err,
                ApiError::Invalid {
                    code: "empty_text",
                    ..
                }
            ));
        }
    }
}
