//! Incoming webhooks, the senders' side (docs §3): `POST /hooks/{webhookId}/{token}`
//! with `{"text": "...", "attachments"?: [...]}` becomes a message in the webhook's
//! channel, answered `201` with the message.
//!
//! The order of the checks decides what counts towards auto-disable:
//!
//! 1. unknown webhook or wrong token → `401 invalid_token`, **not counted** (D8: anyone
//!    can send it, and must not be able to disable someone else's webhook);
//! 2. webhook disabled → `410 webhook_disabled`, not counted (it is already off);
//! 3. from here on the request comes from the token's holder and every 4xx/5xx is
//!    counted: body too large `413`, unreadable `400`, bad or replayed signature `401`
//!    (when the webhook has a signing secret), malformed JSON `400`, wrong shape or
//!    text `422`, our own failure `500`;
//! 4. over the plan's rate for this webhook → `429` with `Retry-After`, **not counted** (D7).
//!
//! The rate limit comes *after* the payload checks, on purpose: a 429 says nothing
//! about the webhook's health, so it must not hide a request that is broken anyway.
//! Answering a bad payload with 429 would tell the sender "retry later" for a request
//! that can never succeed (and the seed tells senders to retry 429s), and the failure
//! streak would grow only as fast as the limit lets bad requests through. Checked
//! last, only requests that would become messages take a slot, so the plan's number
//! is exactly "messages per second", and a sender with a broken payload learns it
//! at once from a 4xx it must not retry. The replay check (which remembers the
//! `webhook-id`) comes after the rate limit, so a signed request refused with 429 can
//! be sent again with the same `webhook-id`. The `webhook-id` is remembered by the
//! transaction that writes the message (and its event and deliveries): a request that
//! fails on our side (a 5xx) remembers nothing, so the sender's retry with the same ID is
//! accepted, once; after a 2xx the same ID is refused as a replay.
//!
//! Every counted failure grows the webhook's streak; the 100th in a row
//! (`limits.incoming_disable_after`) disables it and notifies admins (storage does
//! both). Every 2xx resets the streak. Tokens and secrets are never logged.

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

use crate::auth;
use crate::clock::now_ms;
use crate::dispatch::signing::{self, VerifyError};
use crate::domain::*;
use crate::http::error::{too_many_requests, ApiError, ErrorBody};
use crate::http::v1::channels::MessageBody;
use crate::http::AppState;
use crate::ops::messages::{self, MessageView, Source};
use crate::ops::rate::{self, Limited, Window};
use crate::ops::OpsError;
use crate::storage::{IncomingReplay, StorageError, WebhookToPost};

/// How far a `webhook-timestamp` may be from our clock, either way (the Standard
/// Webhooks default); older signed requests are refused as possible replays.
pub const SIGNATURE_TOLERANCE_SECS: i64 = 5 * 60;

/// `/hooks/{id}/{token}`: where a sender posts; [`crate::config::PublicUrl::join`] makes
/// the URL shown to admins from it.
pub fn path(id: IncomingWebhookId, token: &str) -> String {
    format!("/hooks/{id}/{token}")
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/hooks/{webhook_id}/{token}",
            post(receive).fallback(only_post),
        )
        .route_layer(axum::middleware::from_fn(super::metrics::track_incoming))
}

/// `405` in JSON like every other error, for senders that use another method.
pub async fn only_post() -> Response {
    let mut resp = ApiError::Status {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: "method_not_allowed",
        message: "send messages with POST".into(),
    }
    .into_response();
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    resp
}

/// Why a request with the right token did not become a message.
enum Refusal {
    /// Over the webhook's rate: not counted (D7).
    RateLimited(Limited),
    /// Counted towards auto-disable.
    Failed(ApiError),
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Self {
        Refusal::Failed(e)
    }
}

impl From<OpsError> for Refusal {
    fn from(e: OpsError) -> Self {
        Refusal::Failed(e.into())
    }
}

impl From<StorageError> for Refusal {
    fn from(e: StorageError) -> Self {
        // The webhook and its channel were found a moment ago: anything now is ours
        // (503 when the database is out of reach, else 500).
        Refusal::Failed(e.into())
    }
}

fn invalid_token() -> ApiError {
    ApiError::Status {
        status: StatusCode::UNAUTHORIZED,
        code: "invalid_token",
        message: "no incoming webhook has this ID and token".into(),
    }
}

fn invalid_signature(message: impl Into<String>) -> ApiError {
    ApiError::Status {
        status: StatusCode::UNAUTHORIZED,
        code: "invalid_signature",
        message: message.into(),
    }
}

/// Equal hex digests, compared without an early exit.
fn same_digest(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The webhook and its token, from the URL answered when it was created.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct HookPath {
    /// The incoming webhook.
    #[param(inline)]
    webhook_id: IncomingWebhookId,
    /// Its token.
    token: String,
}

/// The Standard Webhooks headers; required when the webhook has a signing secret.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
struct SignatureHeaders {
    /// A unique ID per message; a `webhook-id` seen before is refused as a replay.
    #[param(rename = "webhook-id")]
    webhook_id: Option<String>,
    /// Unix seconds; at most 5 minutes from the server's clock.
    #[param(rename = "webhook-timestamp")]
    webhook_timestamp: Option<String>,
    /// `v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">`, space-separated if several.
    #[param(rename = "webhook-signature")]
    webhook_signature: Option<String>,
}

#[utoipa::path(
    post,
    path = "/hooks/{webhook_id}/{token}",
    operation_id = "postIncomingWebhookMessage",
    tag = "Incoming webhook senders",
    summary = "Post a message to an incoming webhook",
    description = "The body is read as JSON whatever its `Content-Type`. After 100 failed requests in a row \
        (400, 401 `invalid_signature`, 413, 422, 500) the webhook is disabled; 401 `invalid_token`, 410 and 429 \
        are not counted.",
    params(HookPath, SignatureHeaders),
    request_body(content = MessageBody, content_type = "application/json"),
    security(()),
    responses(
        (status = 201, description = "The message (`sourceKind: incoming_webhook`); its `message.created` event is \
            published", body = MessageView),
        (status = 400, description = "The body is not valid JSON (`malformed_json`) or could not be read \
            (`unreadable_body`)", body = ErrorBody),
        (status = 401, description = "No webhook has this ID and token (`invalid_token`), or the signature is \
            missing, wrong, too old or replayed (`invalid_signature`)", body = ErrorBody),
        (status = 410, description = "The webhook is disabled (`webhook_disabled`)", body = ErrorBody),
        (status = 413, description = "The body is larger than the server accepts (`body_too_large`)", body = ErrorBody),
        (status = 422, description = "Not a message (`invalid_body`), or its text is empty (`empty_text`), too long \
            (`text_too_long`) or has NUL characters (`invalid_text`)", body = ErrorBody),
        (status = 429, description = "Over the webhook's rate (`rate_limited`)", body = ErrorBody,
            headers(("Retry-After" = i64, description = "Seconds to wait"))),
        (status = 500, response = crate::http::v1::openapi::InternalError),
    )
)]
async fn receive(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    request: Request,
) -> Response {
    let Ok(Path((webhook_id, token))) = path else {
        return invalid_token().into_response();
    };
    let WebhookToPost {
        webhook,
        plan,
        channel,
        checks,
    } = match authenticate(&state, &webhook_id, &token).await {
        Ok(found) => found,
        Err(e) => return e.into_response(),
    };
    if webhook.status == IncomingWebhookStatus::Disabled {
        return ApiError::Status {
            status: StatusCode::GONE,
            code: "webhook_disabled",
            message: format!(
                "this incoming webhook is disabled (it is switched off after {} failed requests \
                 in a row, or by an admin); an admin must re-enable it before it accepts messages again",
                state.config.limits.incoming_disable_after
            ),
        }
        .into_response();
    }

    let to = messages::Target {
        channel: &channel,
        checks: Some(checks),
    };
    let outcome = accept(&state, &webhook, plan, to, request).await;
    let success = match &outcome {
        Ok(_) => true,
        Err(Refusal::RateLimited(_)) => return into_response(outcome),
        Err(Refusal::Failed(_)) => false,
    };
    // A success after successes changes nothing: no write (the count was read with the
    // webhook, a moment ago; a failure counted meanwhile counts as after this request).
    if success && webhook.consecutive_failures == 0 {
        return into_response(outcome);
    }
    let limits = &state.config.limits;
    match state
        .storage
        .record_incoming_result(webhook.id, success, limits.incoming_disable_after, now_ms())
        .await
    {
        Ok(effects) if effects.disabled => {
            crate::metrics::auto_disabled(crate::metrics::Disabled::IncomingWebhook);
            tracing::warn!(
            incoming_webhook.id = %webhook.id,
            failures = effects.consecutive_failures,
            "incoming webhook disabled after failed requests in a row"
            );
        }
        Ok(_) => {}
        // The answer stands (a stored message stays stored); only the count is lost.
        Err(e) => tracing::error!(
            incoming_webhook.id = %webhook.id,
            error = %e,
            "could not count an incoming webhook request"
        ),
    }
    let response = into_response(outcome);
    if !success {
        // The status only: messages may quote the payload.
        tracing::debug!(
            incoming_webhook.id = %webhook.id,
            status = response.status().as_u16(),
            "incoming webhook request refused"
        );
    }
    response
}

fn into_response(outcome: Result<MessageView, Refusal>) -> Response {
    match outcome {
        Ok(view) => (StatusCode::CREATED, Json(view)).into_response(),
        Err(Refusal::RateLimited(limited)) => too_many_requests(
            limited,
            &format!(
                "this webhook accepts at most {} messages per second",
                limited.limit
            ),
        ),
        Err(Refusal::Failed(e)) => e.into_response(),
    }
}

/// The webhook the path names, if the token is its own, with what posting through it
/// reads (read with it: its space's plan, its channel, the publish checks); otherwise 401
/// `invalid_token`.
async fn authenticate(
    state: &AppState,
    webhook_id: &str,
    token: &str,
) -> Result<WebhookToPost, ApiError> {
    let id: IncomingWebhookId = webhook_id.parse().map_err(|_| invalid_token())?;
    let found = match state
        .storage
        .get_incoming_webhook_to_post(id, messages::MESSAGE_CREATED)
        .await
    {
        Ok(found) => found,
        Err(StorageError::NotFound) => return Err(invalid_token()),
        Err(e) => return Err(e.into()),
    };
    if same_digest(&auth::hash_token(token), &found.webhook.token_hash) {
        Ok(found)
    } else {
        Err(invalid_token())
    }
}

/// Everything after authentication: the body, the signature, the payload, the
/// rate limit, the replay check, and the message itself.
async fn accept(
    state: &AppState,
    webhook: &IncomingWebhook,
    plan: Plan,
    to: messages::Target<'_>,
    request: Request,
) -> Result<MessageView, Refusal> {
    let headers = request.headers().clone();
    // Reading through the extractor keeps the router's body limit (DefaultBodyLimit).
    let body = Bytes::from_request(request, state)
        .await
        .map_err(|rejection| match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::Status {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                code: "body_too_large",
                message: format!(
                    "the request body is larger than the {} bytes this server accepts",
                    state.config.max_body_bytes
                ),
            },
            status => ApiError::Status {
                status,
                code: "unreadable_body",
                message: rejection.body_text(),
            },
        })?;

    let signed_id = match &webhook.signing_secret {
        Some(secret) => Some(check_signature(secret, &headers, &body)?),
        None => None,
    };

    let message: MessageBody = serde_json::from_slice(&body).map_err(|e| {
        if e.is_data() {
            ApiError::invalid("invalid_body", format!("the body is not a message: {e}"))
        } else {
            ApiError::Status {
                status: StatusCode::BAD_REQUEST,
                code: "malformed_json",
                message: format!("the body is not valid JSON: {e}"),
            }
        }
    })?;
    if let Some(err) = crate::http::v1::extract::not_an_object(&body) {
        return Err(err.into());
    }
    let new = message.check(state.config.limits.message_max_chars)?;

    let limit = state.config.limits.incoming_per_second.for_plan(plan);
    let window = Window::IncomingWebhook(webhook.id);
    if let Some(limited) = rate::take_slot(state.storage.as_ref(), window, limit, now_ms()).await? {
        return Err(Refusal::RateLimited(limited));
    }

    // The replay check is part of the message's own transaction.
    let replay = signed_id.as_deref().map(|message_id| IncomingReplay {
        webhook_id: webhook.id,
        message_id,
    });
    messages::post_once(
        state.storage.as_ref(),
        &state.engine,
        messages::Judges {
            schemas: &state.schemas,
            programs: &state.sandbox,
        },
        to,
        new,
        Source::IncomingWebhook(webhook.id),
        replay,
    )
    .await?
    .map(|message| MessageView::from(&message))
    .ok_or_else(|| {
        invalid_signature("this webhook-id was received before; a replayed request is refused")
            .into()
    })
}

/// Checks the Standard Webhooks headers and returns the `webhook-id` they carry.
fn check_signature(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<String, ApiError> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    let msg_id = text("webhook-id").trim();
    if msg_id.is_empty() {
        return Err(invalid_signature("the webhook-id header is missing"));
    }
    let now_secs = now_ms().div_euclid(1000);
    match signing::verify(
        secret,
        msg_id,
        text("webhook-timestamp"),
        body,
        text("webhook-signature"),
        now_secs,
        SIGNATURE_TOLERANCE_SECS,
    ) {
        Ok(()) => Ok(msg_id.to_owned()),
        // The stored secret itself is unusable: our failure, not the sender's.
        Err(VerifyError::Secret(e)) => Err(ApiError::Internal(
            anyhow::Error::new(e).context("the incoming webhook's stored signing secret"),
        )),
        Err(e) => Err(invalid_signature(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_match_only_when_equal() {
        let a = auth::hash_token("pfh_a");
        assert!(same_digest(&a, &auth::hash_token("pfh_a")));
        assert!(!same_digest(&a, &auth::hash_token("pfh_b")));
        assert!(!same_digest(&a, &a[..63]));
        assert!(!same_digest("", &a));
    }
}
