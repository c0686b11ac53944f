//! `/v1/projects/{project}/incoming-webhooks`: create (the URL and token shown once),
//! list, read, delete, enable (resets the failure streak) and disable (docs §3, §5).
//! The senders' side, `POST /hooks/{id}/{token}`, is [`crate::http::hooks`].

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::channels::find_channel;
use super::extract::{check_name, ApiJson, Caller};
use super::openapi::{
    BadRequest, IncomingWebhookPath, InternalError, NotFound, PayloadTooLarge, ProjectPath,
    Unauthorized, Unprocessable, UnsupportedMediaType,
};
use super::page::{self, Keyset, ListQuery};
use super::views::{rfc3339, PageOf};
use crate::clock::now_ms;
use crate::dispatch::signing;
use crate::domain::*;
use crate::http::error::ApiError;
use crate::http::hooks;
use crate::http::AppState;
use crate::ops::credentials::Credential;
use crate::ops::names::NameKind;
use crate::storage::StorageError;

/// Key sizes the Standard Webhooks spec recommends for a `whsec_` secret (bytes).
const SECRET_KEY_BYTES: std::ops::RangeInclusive<usize> = 24..=64;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/projects/{project}/incoming-webhooks",
            post(create).get(list),
        )
        .route(
            "/projects/{project}/incoming-webhooks/{id}",
            get(read).delete(remove),
        )
        .route(
            "/projects/{project}/incoming-webhooks/{id}/enable",
            post(enable),
        )
        .route(
            "/projects/{project}/incoming-webhooks/{id}/disable",
            post(disable),
        )
}

/// An incoming webhook as the API shows it. `url`, `token` and a generated
/// `signingSecret` appear only in the answer to its creation: only the token's hash is kept.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = IncomingWebhook)]
struct WebhookView {
    id: IncomingWebhookId,
    channel_id: ChannelId,
    name: String,
    /// Where senders post messages: the server's public URL (`PARTYFLOW_PUBLIC_URL`) +
    /// `/hooks/{id}/{token}`; only in the answer to its creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    url: Option<String>,
    /// Only in the answer to its creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^pfh_[A-Za-z0-9]{40}$")]
    token: Option<String>,
    /// A generated `whsec_…` secret; only in the answer to the creation that asked for one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^whsec_")]
    signing_secret: Option<String>,
    status: IncomingWebhookStatus,
    /// Failed requests in a row; at 100 the webhook is disabled.
    consecutive_failures: i64,
    /// Messages per second it accepts, from the space's plan.
    rate_per_second: i64,
    /// Whether senders must sign their requests (Standard Webhooks).
    signed: bool,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(required = true, format = DateTime)]
    disabled_at: Option<String>,
}

fn view(w: &IncomingWebhook, rate_per_second: i64) -> WebhookView {
    WebhookView {
        id: w.id,
        channel_id: w.channel_id,
        name: w.name.clone(),
        url: None,
        token: None,
        signing_secret: None,
        status: w.status,
        consecutive_failures: w.consecutive_failures,
        rate_per_second,
        signed: w.signing_secret.is_some(),
        created_at: rfc3339(w.created_at),
        disabled_at: w.disabled_at.map(rfc3339),
    }
}

/// The plan's incoming rate (docs §3), for the `ratePerSecond` field.
async fn rate_of(state: &AppState, space_id: SpaceId) -> Result<i64, ApiError> {
    let space = state.storage.get_space(space_id).await?;
    Ok(state.config.limits.incoming_per_second.for_plan(space.plan))
}

/// A new incoming webhook.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = CreateIncomingWebhook)]
struct CreateBody {
    /// A channel of this project (`unknown_channel`, 422, otherwise).
    #[schema(value_type = ChannelId)]
    channel_id: String,
    /// 1 to 100 characters after trimming (kept trimmed), not only white space, no control characters.
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x1f\x7f-\x9f \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\x00-\x1f\x7f-\x9f]*$"
    )]
    name: String,
    /// `true`: generate a secret (answered once); a `whsec_…` string: use it;
    /// `false`, `null` or absent: requests are not signed.
    #[serde(default)]
    #[schema(schema_with = signing_secret_schema)]
    signing_secret: Option<Value>,
}

fn signing_secret_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::Array(vec![Type::Boolean, Type::String, Type::Null]))
        .description(Some(
            "`true`: generate a secret (answered once); a `whsec_…` string (base64 of a 24 to 64 byte key): \
             use it; `false`, `null` or absent: requests are not signed.",
        ))
        .build()
}

/// The secret to store and whether it was generated here (then it is answered once).
fn check_secret(given: Option<Value>) -> Result<(Option<String>, bool), ApiError> {
    let invalid = |why: &str| {
        ApiError::invalid(
            "invalid_signing_secret",
            format!("signingSecret must be true, false or a \"whsec_\" secret: {why}"),
        )
    };
    match given {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok((None, false)),
        Some(Value::Bool(true)) => Ok((Some(signing::new_secret()), true)),
        Some(Value::String(secret)) => {
            signing::sign(&secret, "check", 0, b"").map_err(|e| invalid(&e.to_string()))?;
            let key_len = secret
                .strip_prefix("whsec_")
                .and_then(|b64| BASE64.decode(b64).ok())
                .map_or(0, |key| key.len());
            if !SECRET_KEY_BYTES.contains(&key_len) {
                return Err(invalid(&format!(
                    "its key must have {} to {} bytes, not {key_len}",
                    SECRET_KEY_BYTES.start(),
                    SECRET_KEY_BYTES.end()
                )));
            }
            Ok((Some(secret), false))
        }
        Some(_) => Err(invalid("got another kind of JSON value")),
    }
}

#[utoipa::path(
    post,
    path = "/v1/projects/{project}/incoming-webhooks",
    operation_id = "createIncomingWebhook",
    tag = "Incoming webhooks",
    summary = "Create an incoming webhook",
    params(ProjectPath),
    request_body = CreateBody,
    responses(
        (status = 201, description = "The webhook with its `url` and `token` (shown only here)", body = WebhookView),
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
) -> Result<(StatusCode, Json<WebhookView>), ApiError> {
    let space_id = caller.space(&project)?;
    let name = check_name(NameKind::IncomingWebhook, &body.name)?;
    let (signing_secret, generated) = check_secret(body.signing_secret)?;
    let channel = find_channel(&state, space_id, &body.channel_id)
        .await
        .map_err(|e| match e {
            ApiError::NotFound(_) => ApiError::invalid(
                "unknown_channel",
                format!("this project has no channel {:?}", body.channel_id),
            ),
            other => other,
        })?;
    let minted = Credential::IncomingWebhookToken.mint();
    let now = now_ms();
    let webhook = IncomingWebhook {
        id: IncomingWebhookId::new(),
        space_id,
        channel_id: channel.id,
        name,
        token_hash: minted.hash,
        signing_secret,
        status: IncomingWebhookStatus::Active,
        consecutive_failures: 0,
        created_at: now,
        updated_at: now,
        disabled_at: None,
    };
    let audit = caller.audit(
        AuditAction::IncomingWebhookCreate,
        webhook.id,
        serde_json::json!({ "name": webhook.name, "channelId": webhook.channel_id.to_string() }),
    );
    state
        .storage
        .create_incoming_webhook(&webhook, Some(&audit))
        .await?;
    let mut v = view(&webhook, rate_of(&state, space_id).await?);
    v.url = Some(
        state
            .public_url
            .join(&hooks::path(webhook.id, &minted.secret)),
    );
    v.token = Some(minted.secret);
    if generated {
        v.signing_secret = webhook.signing_secret.clone();
    }
    Ok((StatusCode::CREATED, Json(v)))
}

/// The webhook `id` of the caller's space, or 404 (also for other spaces' webhooks).
async fn find(
    state: &AppState,
    caller: &Caller,
    project: &str,
    id: &str,
) -> Result<IncomingWebhook, ApiError> {
    let space_id = caller.space(project)?;
    let not_found = || ApiError::NotFound(format!("no incoming webhook {id:?}"));
    let webhook_id: IncomingWebhookId = id.parse().map_err(|_| not_found())?;
    match state.storage.get_incoming_webhook_by_id(webhook_id).await {
        Ok(w) if w.space_id == space_id => Ok(w),
        Ok(_) | Err(StorageError::NotFound) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/incoming-webhooks",
    operation_id = "listIncomingWebhooks",
    tag = "Incoming webhooks",
    summary = "List incoming webhooks",
    params(ProjectPath, ListQuery),
    responses(
        (status = 200, description = "A page of incoming webhooks, newest first", body = PageOf<WebhookView>),
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
) -> Result<Json<PageOf<WebhookView>>, ApiError> {
    let space_id = caller.space(&project)?;
    let q = page::query(q)?;
    let keyset = Keyset::<IncomingWebhookId>::new(space_id, q.limit, q.cursor.as_deref())?;
    let rate = rate_of(&state, space_id).await?;
    let hooks = state
        .storage
        .list_incoming_webhooks(space_id, keyset.page())
        .await?;
    Ok(Json(keyset.answer(hooks, |w| w.id, |w| view(w, rate))))
}

#[utoipa::path(
    get,
    path = "/v1/projects/{project}/incoming-webhooks/{id}",
    operation_id = "getIncomingWebhook",
    tag = "Incoming webhooks",
    summary = "Read an incoming webhook",
    params(IncomingWebhookPath),
    responses(
        (status = 200, description = "The webhook", body = WebhookView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<WebhookView>, ApiError> {
    let w = find(&state, &caller, &project, &id).await?;
    Ok(Json(view(&w, rate_of(&state, w.space_id).await?)))
}

#[utoipa::path(
    delete,
    path = "/v1/projects/{project}/incoming-webhooks/{id}",
    operation_id = "deleteIncomingWebhook",
    tag = "Incoming webhooks",
    summary = "Delete an incoming webhook",
    params(IncomingWebhookPath),
    responses(
        (status = 204, description = "Deleted; its URL answers 401 from now on"),
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
    let w = find(&state, &caller, &project, &id).await?;
    let audit = caller.audit(
        AuditAction::IncomingWebhookDelete,
        w.id,
        serde_json::Value::Null,
    );
    state
        .storage
        .delete_incoming_webhook(w.space_id, w.id, Some(&audit))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_status(
    state: &AppState,
    caller: &Caller,
    project: &str,
    id: &str,
    status: IncomingWebhookStatus,
) -> Result<Json<WebhookView>, ApiError> {
    let w = find(state, caller, project, id).await?;
    let action = match status {
        IncomingWebhookStatus::Active => AuditAction::IncomingWebhookEnable,
        IncomingWebhookStatus::Disabled => AuditAction::IncomingWebhookDisable,
    };
    let audit = caller.audit(action, w.id, serde_json::Value::Null);
    let updated = state
        .storage
        .set_incoming_webhook_status(w.space_id, w.id, status, now_ms(), Some(&audit))
        .await?;
    Ok(Json(view(&updated, rate_of(state, w.space_id).await?)))
}

/// Re-enables a webhook (after auto-disable or by hand); its failure streak starts over.
#[utoipa::path(
    post,
    path = "/v1/projects/{project}/incoming-webhooks/{id}/enable",
    operation_id = "enableIncomingWebhook",
    tag = "Incoming webhooks",
    summary = "Enable an incoming webhook",
    params(IncomingWebhookPath),
    responses(
        (status = 200, description = "The webhook, now `active`, its failure streak reset", body = WebhookView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn enable(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<WebhookView>, ApiError> {
    set_status(
        &state,
        &caller,
        &project,
        &id,
        IncomingWebhookStatus::Active,
    )
    .await
}

/// Disables a webhook by hand: senders get 410 until it is enabled again.
#[utoipa::path(
    post,
    path = "/v1/projects/{project}/incoming-webhooks/{id}/disable",
    operation_id = "disableIncomingWebhook",
    tag = "Incoming webhooks",
    summary = "Disable an incoming webhook",
    params(IncomingWebhookPath),
    responses(
        (status = 200, description = "The webhook, now `disabled`: senders get 410", body = WebhookView),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn disable(
    State(state): State<AppState>,
    caller: Caller,
    Path((project, id)): Path<(String, String)>,
) -> Result<Json<WebhookView>, ApiError> {
    set_status(
        &state,
        &caller,
        &project,
        &id,
        IncomingWebhookStatus::Disabled,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signing_secret_is_generated_given_or_absent() {
        let (secret, generated) = check_secret(Some(Value::Bool(true))).unwrap();
        assert!(generated && secret.unwrap().starts_with("whsec_"));
        for none in [None, Some(Value::Null), Some(Value::Bool(false))] {
            assert_eq!(check_secret(none).unwrap(), (None, false));
        }
        let given = signing::new_secret();
        assert_eq!(
            check_secret(Some(Value::String(given.clone()))).unwrap(),
            (Some(given), false)
        );
    }

    #[test]
    fn a_malformed_or_weak_signing_secret_is_refused() {
        for bad in [
            Value::String("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
            Value::String("whsec_not base64!".into()),
            Value::String("whsec_".into()),
            // Valid base64, but a 3-byte key.
            Value::String("whsec_YWJj".into()),
            Value::from(42),
        ] {
            assert!(check_secret(Some(bad.clone())).is_err(), "{bad}");
        }
    }
}
