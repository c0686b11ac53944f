//! The API's one error type: every failure answers JSON `{"code", "message"}` with
//! the right status. Internal causes are logged once here and never shown.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use crate::storage::StorageError;

/// The body of every error answer.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(example = json!({"code": "not_found", "message": "no destination \"dst_01jdqz8x9k5v3w2r1t0m4n6p8q\""}))]
pub struct ErrorBody {
    /// A stable, machine-readable snake_case code, e.g. `not_found`, `invalid_body`,
    /// `delivery_not_waiting`.
    pub code: String,
    /// What went wrong, for people; it may change between versions.
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    NotFound(String),
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("missing or invalid API key")]
    Unauthorized,
    /// Any other status with its own code.
    #[error("{message}")]
    Status {
        status: StatusCode,
        code: &'static str,
        message: String,
    },
    /// The database is out of reach or out of room (`StorageError::Unavailable`):
    /// 503 with `Retry-After`; the same request may succeed shortly.
    #[error("the service is temporarily unavailable (its database cannot be reached or is full); nothing was changed: try again shortly")]
    Unavailable,
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

/// Seconds a client is told to wait (`Retry-After`) when the database is unavailable.
pub const UNAVAILABLE_RETRY_AFTER_SECONDS: u64 = 5;

impl ApiError {
    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::Invalid {
            code,
            message: message.into(),
        }
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Invalid { code, .. } => (StatusCode::UNPROCESSABLE_ENTITY, code),
            ApiError::Conflict { code, .. } => (StatusCode::CONFLICT, code),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Status { status, code, .. } => (*status, code),
            ApiError::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl From<crate::destinations::SettingsError> for ApiError {
    fn from(err: crate::destinations::SettingsError) -> Self {
        ApiError::invalid(err.code, err.message)
    }
}

impl From<StorageError> for ApiError {
    fn from(err: StorageError) -> Self {
        match err {
            StorageError::NotFound => ApiError::NotFound("not found".into()),
            StorageError::Conflict(msg) => ApiError::Conflict {
                code: "conflict",
                message: msg,
            },
            StorageError::Unavailable(why) => {
                tracing::warn!(error = %why, "database unavailable: answering 503");
                ApiError::Unavailable
            }
            other => ApiError::Internal(other.into()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if let ApiError::Internal(cause) = &self {
            tracing::error!(error = ?cause, "request failed");
        }
        let body = ErrorBody {
            code: code.to_owned(),
            message: self.to_string(),
        };
        let mut response = (status, Json(body)).into_response();
        if matches!(self, ApiError::Unavailable) {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(UNAVAILABLE_RETRY_AFTER_SECONDS),
            );
        }
        response
    }
}

/// An answer for paths no route knows.
pub async fn not_found() -> ApiError {
    ApiError::NotFound("no such endpoint".into())
}

/// An answer for a method a known path does not take (axum adds the `Allow` header).
pub async fn method_not_allowed() -> ApiError {
    ApiError::Status {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: "method_not_allowed",
        message: "this path does not take this method; `Allow` lists those it takes".into(),
    }
}
