//! `/v1/projects/{project}/channels`: create, list and read channels, page through
//! their messages, and post a message with the API key (SPEC §1, §5).
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

use super::events::{page_limit, ListQuery};
use super::extract::{ApiJson, Caller};
use super::openapi::{
    BadRequest, ChannelPath, InternalError, NotFound, PayloadTooLarge, ProjectPath, Unauthorized,
    Unprocessable, UnsupportedMediaType,
};
use super::views::{rfc3339, PageOf};
use crate::clock::now_ms;
use crate::domain::*;
use crate::http::error::{ApiError, ErrorBody};
use crate::startup::AppState;
use crate::storage::{NewEvent, Page, Published, StorageError};

/// The type of the event every new message emits (SPEC §1).
pub const MESSAGE_CREATED: &str = "message.created";

/// The longest channel name, in characters.
const MAX_CHANNEL_NAME_CHARS: usize = 100;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/projects/{project}/channels", post(create).get(list))
        .route("/projects/{project}/channels/{id}", get(read))
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
    #[schema(examples("Deploy finished"))]
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
    if let Published::Created { destinations, .. } =
        state.storage.post_message(&message, &event, now).await?
    {
        state.hints.due_now(destinations);
    }
    Ok(view)
}

/// `limit` and `cursor` of a listing; a malformed query answers JSON like every error.
pub fn list_query(q: Result<Query<ListQuery>, QueryRejection>) -> Result<ListQuery, ApiError> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::invalid("invalid_query", e.body_text()))
}

/// Keyset pagination, newest first, over a listing that storage returns whole:
/// the items with an ID below `cursor`, at most `limit` of them, and the cursor of
/// the next page when there may be one.
pub fn page_by_id<T, I>(
    mut items: Vec<T>,
    id: impl Fn(&T) -> I,
    q: ListQuery,
) -> Result<PageOf<T>, ApiError>
where
    I: Ord + std::str::FromStr + std::fmt::Display,
{
    let limit = page_limit(q.limit)?;
    let before = q
        .cursor
        .map(|c| {
            c.parse::<I>()
                .map_err(|_| ApiError::invalid("invalid_cursor", "cursor is not one this API gave"))
        })
        .transpose()?;
    items.sort_by_key(|item| std::cmp::Reverse(id(item)));
    let data: Vec<T> = items
        .into_iter()
        .filter(|item| before.as_ref().is_none_or(|b| id(item) < *b))
        .take(limit as usize)
        .collect();
    let next_cursor = (data.len() as i64 == limit)
        .then(|| data.last().map(|item| id(item).to_string()))
        .flatten();
    Ok(PageOf { data, next_cursor })
}

/// A new channel.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateChannel)]
struct CreateBody {
    /// 1 to 100 characters (trimmed), no control characters; unique in the project.
    #[schema(
        examples("deploys"),
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    name: String,
}

fn check_name(name: &str) -> Result<String, ApiError> {
    let name = name.trim();
    let chars = name.chars().count();
    if chars == 0 || chars > MAX_CHANNEL_NAME_CHARS || name.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "invalid_name",
            format!("a channel name needs 1 to {MAX_CHANNEL_NAME_CHARS} characters and no control characters"),
        ));
    }
    Ok(name.to_owned())
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
        name: check_name(&body.name)?,
        created_at: now_ms(),
    };
    match state.storage.create_channel(&channel).await {
        Ok(()) => Ok((StatusCode::CREATED, Json(ChannelView::from(&channel)))),
        Err(StorageError::Conflict(_)) => Err(ApiError::Conflict {
            code: "channel_name_taken",
            message: format!(
                "this project already has a channel named {:?}",
                channel.name
            ),
        }),
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
    let q = list_query(q)?;
    let all = state.storage.list_channels(space_id).await?;
    let page = page_by_id(all, |c| c.id, q)?;
    Ok(Json(PageOf {
        data: page.data.iter().map(ChannelView::from).collect(),
        next_cursor: page.next_cursor,
    }))
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
    let q = list_query(q)?;
    let limit = page_limit(q.limit)?;
    let before = q
        .cursor
        .map(|c| {
            c.parse::<MessageId>()
                .map_err(|_| ApiError::invalid("invalid_cursor", "cursor is not one this API gave"))
        })
        .transpose()?;
    let found = state
        .storage
        .list_messages(channel.id, Page { before, limit })
        .await?;
    let next_cursor = (found.len() as i64 == limit)
        .then(|| found.last().map(|m| m.id.to_string()))
        .flatten();
    Ok(Json(PageOf {
        data: found.iter().map(MessageView::from).collect(),
        next_cursor,
    }))
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

    #[test]
    fn keyset_pages_run_newest_first_and_end_without_a_cursor() {
        let ids: Vec<ChannelId> = (0..5)
            .map(|i| ChannelId::lower_bound_at(1_000 + i))
            .collect();
        let q = |cursor: Option<String>| ListQuery {
            limit: Some(2),
            cursor,
        };
        let first = page_by_id(ids.clone(), |c| *c, q(None)).unwrap();
        assert_eq!(first.data, vec![ids[4], ids[3]]);
        let second = page_by_id(ids.clone(), |c| *c, q(first.next_cursor)).unwrap();
        assert_eq!(second.data, vec![ids[2], ids[1]]);
        let third = page_by_id(ids.clone(), |c| *c, q(second.next_cursor)).unwrap();
        assert_eq!(third.data, vec![ids[0]]);
        assert!(third.next_cursor.is_none());
        assert!(page_by_id(ids, |c| *c, q(Some("nope".into()))).is_err());
    }
}
