//! Extractors for the REST API: the API key, and JSON bodies whose every rejection
//! answers JSON `{"code","message"}` like the rest of the API.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::auth;
use crate::domain::{ApiKey, SpaceId};
use crate::http::error::ApiError;
use crate::startup::AppState;
use crate::storage::StorageError;

/// The space whose API key authenticated this request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub space_id: SpaceId,
    pub key: ApiKey,
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
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
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
        match state.storage.find_api_key(&auth::hash_token(token)).await {
            Ok(key) => Ok(Caller {
                space_id: key.space_id,
                key,
            }),
            Err(StorageError::NotFound) => Err(ApiError::Unauthorized),
            Err(e) => Err(e.into()),
        }
    }
}

/// `Json<T>` whose rejections are [`ApiError`]s: 400 malformed, 415 wrong content
/// type, 413 too large, 422 valid JSON of the wrong shape (unknown fields included).
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
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
        JsonRejection::MissingJsonContentType(_) => ApiError::Status {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code: "unsupported_media_type",
            message: "expected a JSON body with `Content-Type: application/json`".into(),
        },
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
