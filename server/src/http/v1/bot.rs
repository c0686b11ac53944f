//! The Bot REST API (docs §4): `POST /v1/bot/channels/{channelId}/messages` with
//! `Authorization: Bot <token>` and `{"text": "...", "attachments"?: [...]}` posts a
//! message into a channel of the bot's space, answered `201` with the message.
//!
//! At most `limits.bot_per_channel_per_second` messages per second go into one
//! channel, all bots together; over it, `429` with `Retry-After`. As for incoming
//! webhooks, the limit is checked last, so only requests that would become messages
//! take a slot and a broken request learns what is wrong instead of "retry later".

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

use super::channels::MessageBody;
use super::extract::ApiJson;
use super::openapi::{
    BadRequest, InternalError, PayloadTooLarge, Unprocessable, UnsupportedMediaType,
};
use crate::auth;
use crate::clock::now_ms;
use crate::domain::*;
use crate::http::error::{too_many_requests, ApiError, ErrorBody};
use crate::http::hooks::only_post;
use crate::http::AppState;
use crate::ops::messages::{self, MessageView, Source};
use crate::ops::rate::{self, Window};
use crate::storage::StorageError;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/bot/channels/{channel_id}/messages",
            post(post_as_bot).fallback(only_post),
        )
        .route_layer(axum::middleware::from_fn(crate::http::metrics::track_bot))
}

/// The token in `Authorization: Bot <token>`, hashed; the bot is looked up with what its
/// message reads ([`post_as_bot`]).
struct BotToken(String);

/// 401 `invalid_bot_token`, with the scheme the API expects.
struct InvalidBotToken;

impl IntoResponse for InvalidBotToken {
    fn into_response(self) -> Response {
        let mut resp = ApiError::Status {
            status: StatusCode::UNAUTHORIZED,
            code: "invalid_bot_token",
            message: "missing, invalid or revoked bot token: send `Authorization: Bot <token>`"
                .into(),
        }
        .into_response();
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bot"));
        resp
    }
}

impl FromRequestParts<AppState> for BotToken {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, Response> {
        parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bot"))
            .map(|(_, token)| token.trim())
            .filter(|t| !t.is_empty())
            .map(|token| BotToken(auth::hash_token(token)))
            .ok_or_else(|| InvalidBotToken.into_response())
    }
}

/// The channel a bot posts into.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct BotChannelPath {
    /// A channel of the bot's project; any other answers 404.
    #[param(inline)]
    channel_id: ChannelId,
}

#[utoipa::path(
    post,
    path = "/v1/bot/channels/{channel_id}/messages",
    operation_id = "postBotMessage",
    tag = "Bot API",
    summary = "Post a message as a bot",
    description = "Bots may post at most `limits.bot_per_channel_per_second` messages per second into one \
        channel, all bots together.",
    params(BotChannelPath),
    request_body = MessageBody,
    security(("BotTokenAuth" = [])),
    responses(
        (status = 201, description = "The message (`sourceKind: bot`); its `message.created` event is published",
            body = MessageView),
        (status = 400, response = BadRequest),
        (status = 401, description = "Missing, invalid or revoked bot token (`invalid_bot_token`)", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bot`"))),
        (status = 404, description = "No such channel in the bot's project (`not_found`)", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = Unprocessable),
        (status = 429, description = "Over the channel's rate for bots (`rate_limited`)", body = ErrorBody,
            headers(("Retry-After" = i64, description = "Seconds to wait"))),
        (status = 500, response = InternalError),
    )
)]
async fn post_as_bot(
    State(state): State<AppState>,
    BotToken(token_hash): BotToken,
    Path(channel_id): Path<String>,
    body: Result<ApiJson<MessageBody>, ApiError>,
) -> Result<Response, ApiError> {
    // The bot, its channel and the publish checks, in one read, before the body's answer:
    // a wrong token is 401 whatever the body, as on every route.
    let id = channel_id.parse::<ChannelId>().ok();
    let (bot, channel, checks) = match state
        .storage
        .find_bot_to_post(&token_hash, id, messages::MESSAGE_CREATED)
        .await
    {
        Ok(found) => found,
        Err(StorageError::NotFound) => return Ok(InvalidBotToken.into_response()),
        Err(e) => return Err(e.into()),
    };
    let ApiJson(body) = body?;
    // A channel of another space is as unknown to the bot as one that does not exist.
    let Some(channel) = channel else {
        return Err(ApiError::NotFound(format!("no channel {channel_id:?}")));
    };
    let limits = &state.config.limits;
    let new = body.check(limits.message_max_chars)?;

    let limit = limits.bot_per_channel_per_second;
    let window = Window::BotsInChannel(channel.id);
    if let Some(limited) = rate::take_slot(state.storage.as_ref(), window, limit, now_ms()).await? {
        return Ok(too_many_requests(
            limited,
            &format!("bots may post at most {limit} messages per second into one channel"),
        ));
    }

    let message = messages::post(
        state.storage.as_ref(),
        &state.engine,
        messages::Judges {
            schemas: &state.schemas,
            programs: &state.sandbox,
        },
        messages::Target {
            channel: &channel,
            checks: Some(checks),
        },
        new,
        Source::Bot(bot.id),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(MessageView::from(&message))).into_response())
}
