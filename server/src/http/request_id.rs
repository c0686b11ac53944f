//! Every answer carries an `x-request-id` that the server made itself, and a failure of
//! ours is logged once, here, with that ID — the client sees only generic words and the
//! ID to quote ([`crate::http::error::ApiError::Internal`]).
//!
//! [`assign`] runs inside the request span ([`crate::startup`]): it makes the ID (a
//! client's own `x-request-id` is replaced, never trusted: it could forge another
//! request's ID in our logs), records it in the span so every log line of the request
//! names it, and answers it in the header. An error response that carries a
//! [`Failure`] extension (put there by `ApiError`'s `IntoResponse`) has its cause logged
//! here, with the ID, and its body rewritten to `{"code", "message", "requestId"}`.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::http::error::ErrorBody;

/// The header that carries the request ID, both ways.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The ID of the request being served, as a request extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

impl RequestId {
    /// `req_` + a lowercase ULID, like every other ID the product makes.
    pub fn new() -> Self {
        Self(format!(
            "req_{}",
            ulid::Ulid::new().to_string().to_ascii_lowercase()
        ))
    }
}

impl Default for RequestId {
    fn default() -> Self {
        Self::new()
    }
}

/// A failure of ours behind an error answer: logged with the request ID by [`assign`],
/// never shown. Only `code` and `message` (fixed, generic words) reach the client.
#[derive(Clone)]
pub struct Failure {
    pub code: &'static str,
    pub message: &'static str,
    pub cause: Arc<anyhow::Error>,
}

/// The middleware: makes the request's ID, logs a [`Failure`] once, answers the ID.
pub async fn assign(mut req: Request, next: Next) -> Response {
    let id = RequestId::new();
    let value = HeaderValue::from_str(&id.0).expect("a ULID is a valid header value");
    // Whatever the client sent is replaced: everything below sees our ID only.
    req.headers_mut()
        .insert(X_REQUEST_ID.clone(), value.clone());
    req.extensions_mut().insert(id.clone());
    tracing::Span::current().record("request_id", id.0.as_str());

    let mut resp = next.run(req).await;
    if let Some(failure) = resp.extensions_mut().remove::<Failure>() {
        tracing::error!(request_id = %id.0, error = ?failure.cause, "request failed");
        let status = resp.status();
        let body = ErrorBody {
            code: failure.code.to_owned(),
            message: failure.message.to_owned(),
            request_id: Some(id.0.clone()),
            violations: None,
        };
        let mut rewritten = (status, Json(body)).into_response();
        for (name, v) in resp.headers() {
            if name != header::CONTENT_LENGTH && name != header::CONTENT_TYPE {
                rewritten.headers_mut().append(name.clone(), v.clone());
            }
        }
        resp = rewritten;
    }
    resp.headers_mut().insert(X_REQUEST_ID.clone(), value);
    resp
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use axum::routing::get;
    use axum::Router;
    use tower::ServiceExt;

    use super::*;
    use crate::http::error::ApiError;

    #[test]
    fn request_ids_are_prefixed_lowercase_ulids_and_never_repeat() {
        let (a, b) = (RequestId::new(), RequestId::new());
        assert_ne!(a, b);
        let ulid = a.0.strip_prefix("req_").unwrap();
        assert_eq!(ulid.len(), 26);
        assert!(ulid.parse::<ulid::Ulid>().is_ok());
        assert_eq!(ulid, ulid.to_ascii_lowercase());
    }

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_failure_is_logged_once_with_the_request_id_and_answered_without_its_cause() {
        let logs = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer({
                let logs = logs.clone();
                move || logs.clone()
            })
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);

        let app = Router::new()
            .route(
                "/",
                get(|| async {
                    ApiError::Internal(anyhow::anyhow!(
                        "UNIQUE constraint failed: channels.space_id, channels.name"
                    ))
                }),
            )
            .layer(axum::middleware::from_fn(assign));
        let req = Request::builder()
            .uri("/")
            .header("x-request-id", "forged")
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = app.oneshot(req).await.unwrap();
        assert_eq!(resp.status(), 500);
        let id = resp.headers()[&X_REQUEST_ID].to_str().unwrap().to_owned();
        assert!(id.starts_with("req_"), "{id}");
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["code"], "internal");
        assert_eq!(body["requestId"], id.as_str());
        assert!(!body.to_string().contains("constraint"), "{body}");

        let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains("request failed"))
            .collect();
        assert_eq!(lines.len(), 1, "{logs}");
        assert!(lines[0].contains(&format!("request_id={id}")), "{logs}");
        assert!(lines[0].contains("UNIQUE constraint failed"), "{logs}");
    }
}
