//! Extractors for the REST API: the API key, and JSON bodies whose every rejection
//! answers JSON `{"code","message"}` like the rest of the API; the name rule.

use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;

use std::net::{IpAddr, SocketAddr};

use axum::extract::ConnectInfo;
use serde_json::Value;

use crate::auth;
use crate::clock::now_ms;
use crate::domain::{ApiKey, ApiKeyId, AuditAction, AuditEntry, SpaceId};
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::audit::Author;
use crate::ops::names::{self, NameKind};
use crate::storage::StorageError;

/// The space whose API key authenticated this request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub space_id: SpaceId,
    pub key: ApiKey,
    /// The TCP peer's address (`ConnectInfo`), never a header the client sent.
    pub source: Option<IpAddr>,
}

impl Caller {
    /// The `{project}` of the path must be the key's own space; anything else is a 404,
    /// so a key never learns whether another space exists.
    pub fn space(&self, project: &str) -> Result<SpaceId, ApiError> {
        match project.parse::<SpaceId>() {
            Ok(id) if id == self.space_id => Ok(id),
            _ => Err(ApiError::NotFound(format!("no project {project:?}"))),
        }
    }

    /// Who the audit log names for this request's changes: the key (docs D14).
    pub fn author(&self) -> Author {
        Author::api_key(self.key.id, self.source)
    }

    /// The audit entry of `action` on `target_id` in the key's space, now.
    pub fn audit(
        &self,
        action: AuditAction,
        target_id: impl ToString,
        detail: Value,
    ) -> AuditEntry {
        self.author()
            .entry(action, Some(self.space_id), target_id, detail, now_ms())
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Bearer::from_request_parts(parts, state)
            .await?
            .caller(state)
            .await
    }
}

/// An API key as sent (`Authorization: Bearer …`), not yet looked up: what [`Caller`] reads
/// first, and what a handler takes instead when it looks the key up together with what
/// it reads anyway (publishing: [`crate::storage::EventStore::publish_checks_with_key`]).
/// 401 without one.
pub struct Bearer {
    /// The SHA-256 of the token, as stored.
    pub key_hash: String,
    source: Option<IpAddr>,
}

impl Bearer {
    /// Looks the key up on its own: the caller, or 401.
    pub async fn caller(self, state: &AppState) -> Result<Caller, ApiError> {
        match state.storage.find_api_key_by_hash(&self.key_hash).await {
            Ok(key) => Ok(self.caller_of(state, key)),
            Err(StorageError::NotFound) => Err(ApiError::Unauthorized),
            Err(e) => Err(e.into()),
        }
    }

    /// The caller whose key (found by [`Self::key_hash`], not revoked) is `key`.
    pub fn caller_of(&self, state: &AppState, key: ApiKey) -> Caller {
        remember_use(state, key.id);
        Caller {
            space_id: key.space_id,
            key,
            source: self.source,
        }
    }
}

impl FromRequestParts<AppState> for Bearer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, ApiError> {
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .ok_or(ApiError::Unauthorized)?;
        let token = header
            .strip_prefix("Bearer ")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(ApiError::Unauthorized)?;
        let source = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| peer.ip());
        Ok(Bearer {
            key_hash: auth::hash_token(token),
            source,
        })
    }
}

/// Records the key's use (`api_keys.last_used_at`) at most once an interval per key and
/// process ([`KeyUse`](crate::ops::audit::KeyUse)), off the request's path: spawned, a failure logged, never the
/// request's.
fn remember_use(state: &AppState, key: ApiKeyId) {
    let now = now_ms();
    if !state.key_use.take(key, now) {
        return;
    }
    let storage = state.storage.clone();
    let interval = state.key_use.interval_ms;
    tokio::spawn(async move {
        if let Err(error) = storage.touch_api_key(key, now, interval).await {
            tracing::warn!(%error, key.id = %key, "could not record an API key's use");
        }
    });
}

/// `Json<T>` whose rejections are [`ApiError`]s: 400 malformed, 415 wrong content
/// type, 413 too large, 422 valid JSON of the wrong shape (unknown fields included,
/// and an array where an object is expected).
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if !json_content_type(req.headers()) {
            return Err(unsupported_media_type());
        }
        let body = Bytes::from_request(req, state)
            .await
            .map_err(|e| json_rejection(JsonRejection::BytesRejection(e)))?;
        let axum::Json(value) = axum::Json::<T>::from_bytes(&body).map_err(json_rejection)?;
        match not_an_object(&body) {
            Some(err) => Err(err),
            None => Ok(ApiJson(value)),
        }
    }
}

/// `application/json` or any `application/*+json`, as axum's `Json` accepts.
fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|sub| sub.ends_with("+json"))
}

/// Whether `b` is whitespace in JSON (RFC 8259 §2: space, tab, line feed, carriage
/// return). Not `u8::is_ascii_whitespace`, which also takes a form feed: a body of one
/// form feed is not JSON, not an absent body.
pub fn json_whitespace(b: &u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// serde reads a struct from a JSON array too (its fields in order); every body of
/// this API is an object, so an array is refused (422 `invalid_body`).
pub fn not_an_object(body: &[u8]) -> Option<ApiError> {
    match body.iter().find(|b| !json_whitespace(b)) {
        Some(b'[') => Some(ApiError::invalid(
            "invalid_body",
            "the body must be a JSON object, not an array",
        )),
        _ => None,
    }
}

/// A name (of a channel, bot, incoming webhook or API key) as sent, by the one name rule
/// ([`crate::ops::names::parse`]): 1 to the kind's maximum characters after trimming,
/// no control characters; kept trimmed. 422 `invalid_name` otherwise.
pub fn check_name(kind: NameKind, raw: &str) -> Result<String, ApiError> {
    Ok(names::parse(kind, raw)?)
}

fn unsupported_media_type() -> ApiError {
    ApiError::Status {
        status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
        code: "unsupported_media_type",
        message: "expected a JSON body with `Content-Type: application/json`".into(),
    }
}

fn json_rejection(r: JsonRejection) -> ApiError {
    let text = r.body_text();
    match r {
        JsonRejection::JsonDataError(_) => ApiError::invalid("invalid_body", text),
        JsonRejection::JsonSyntaxError(_) => ApiError::Status {
            status: StatusCode::BAD_REQUEST,
            code: "malformed_json",
            message: text,
        },
        JsonRejection::MissingJsonContentType(_) => unsupported_media_type(),
        JsonRejection::BytesRejection(b) if b.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::Status {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                code: "body_too_large",
                message: "the request body is larger than this server accepts".into(),
            }
        }
        other => ApiError::Status {
            status: other.status(),
            code: "bad_request",
            message: text,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_jsons_four_whitespace_characters_are_whitespace() {
        for b in [b' ', b'\t', b'\n', b'\r'] {
            assert!(json_whitespace(&b), "{b}");
        }
        for b in [0x0c, 0x0b, b'{', 0] {
            assert!(!json_whitespace(&b), "{b}");
        }
    }

    #[test]
    fn json_content_types_are_application_json_and_its_plus_json_kin() {
        let mut headers = HeaderMap::new();
        assert!(!json_content_type(&headers));
        for (value, ok) in [
            ("application/json", true),
            ("Application/JSON; charset=utf-8", true),
            ("application/merge-patch+json", true),
            ("text/json", false),
            ("application/jsonx", false),
            ("text/plain", false),
        ] {
            headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            assert_eq!(json_content_type(&headers), ok, "{value}");
        }
    }

    #[test]
    fn only_an_array_is_refused_as_not_an_object() {
        assert!(not_an_object(b" \n [null, null]").is_some());
        assert!(not_an_object(b"{}").is_none());
        assert!(not_an_object(b"").is_none());
    }
}
