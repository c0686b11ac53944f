//! The API's one error type: every failure answers JSON `{"code", "message"}` with
//! the right status. A failure of ours ([`ApiError::Internal`]) answers fixed, generic
//! words: its cause (a storage error's text may name constraints or quote SQL) travels
//! in a response extension to [`crate::http::request_id::assign`], which logs it once
//! with the request ID and adds `requestId` to the body.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use std::sync::Arc;

use crate::http::request_id::Failure;
use crate::ops::event_types::Violation;
use crate::ops::rate::Limited;
use crate::ops::OpsError;
use crate::storage::StorageError;

/// What a client is told about a failure of ours; the cause is in the log.
pub const INTERNAL_MESSAGE: &str =
    "the server failed to handle this request; it was logged under the requestId";

/// The body of every error answer.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(example = json!({"code": "not_found", "message": "no destination \"dst_01jdqz8x9k5v3w2r1t0m4n6p8q\""}))]
pub struct ErrorBody {
    /// A stable, machine-readable snake_case code, e.g. `not_found`, `invalid_body`,
    /// `delivery_not_waiting`.
    pub code: String,
    /// What went wrong, for people; it may change between versions.
    pub message: String,
    /// On failures of the server's own (`internal`): the ID of this request, the same as
    /// the `x-request-id` answer header; the cause is logged under it. Quote it when
    /// reporting the failure.
    #[serde(rename = "requestId", skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, example = "req_01jdqz8x9k5v3w2r1t0m4n6p8q")]
    pub request_id: Option<String>,
    /// On `schema_violation` (a published payload breaks its event type's schema) and
    /// `invalid_example`: every violation, each with the JSON Pointer of its value.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub violations: Option<Vec<Violation>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    NotFound(String),
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// 422 with every way a document breaks a JSON Schema.
    #[error("{message}")]
    Violations {
        code: &'static str,
        message: String,
        violations: Vec<Violation>,
    },
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
    #[error("{INTERNAL_MESSAGE}")]
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
            ApiError::Violations { code, .. } => (StatusCode::UNPROCESSABLE_ENTITY, code),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Status { status, code, .. } => (*status, code),
            ApiError::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl From<crate::ops::destinations::SettingsError> for ApiError {
    fn from(err: crate::ops::destinations::SettingsError) -> Self {
        ApiError::invalid(err.code, err.message)
    }
}

/// The operations layer's refusals in the API's terms: 422 and 409 with the rule's own
/// code, 404 `not_found`, storage's failures as for [`StorageError`].
impl From<OpsError> for ApiError {
    fn from(err: OpsError) -> Self {
        match err {
            OpsError::Invalid { code, message } => ApiError::Invalid { code, message },
            not_found @ OpsError::NotFound { .. } => ApiError::NotFound(not_found.to_string()),
            OpsError::Conflict { code, message } => ApiError::Conflict { code, message },
            OpsError::Violations {
                code,
                message,
                violations,
            } => ApiError::Violations {
                code,
                message,
                violations,
            },
            OpsError::Storage(e) => e.into(),
            OpsError::Internal(e) => ApiError::Internal(e),
        }
    }
}

impl From<StorageError> for ApiError {
    fn from(err: StorageError) -> Self {
        match err {
            StorageError::NotFound => ApiError::NotFound("not found".into()),
            // The handler expected no conflict here; the database's words stay in the log.
            StorageError::Conflict(detail) => {
                tracing::debug!(%detail, "unexpected storage conflict");
                ApiError::Conflict {
                    code: "conflict",
                    message: "the request conflicts with the stored data".into(),
                }
            }
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
        let body = ErrorBody {
            code: code.to_owned(),
            message: self.to_string(),
            request_id: None,
            violations: match &self {
                ApiError::Violations { violations, .. } => Some(violations.clone()),
                _ => None,
            },
        };
        let unavailable = matches!(self, ApiError::Unavailable);
        let failure = match self {
            ApiError::Internal(cause) => Some(Failure {
                code,
                message: INTERNAL_MESSAGE,
                cause: Arc::new(cause),
            }),
            _ => None,
        };
        let mut resp = (status, Json(body)).into_response();
        if let Some(failure) = failure {
            resp.extensions_mut().insert(failure);
        }
        if unavailable {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(UNAVAILABLE_RETRY_AFTER_SECONDS),
            );
        }
        resp
    }
}

/// `429 rate_limited` with `Retry-After` in whole seconds, for a request over a rate
/// window; `what` says which limit, e.g. "this webhook accepts at most 5 messages per second".
pub fn too_many_requests(limited: Limited, what: &str) -> Response {
    let secs = limited.retry_after_secs();
    let mut resp = ApiError::Status {
        status: StatusCode::TOO_MANY_REQUESTS,
        code: "rate_limited",
        message: format!("{what}; retry after {secs} s (Retry-After)"),
    }
    .into_response();
    resp.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from(secs),
    );
    resp
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
