//! The HTTP surface apart from the console: health and readiness, the REST API, incoming
//! hooks, and [`AppState`], what every handler (the console's guard too) can reach.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};

pub mod error;
pub mod hooks;
pub mod metrics;
pub mod request_id;
mod state;
pub mod v1;

pub use state::AppState;

pub fn router(max_body_bytes: usize) -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        // Metrics live on their own listener (`metrics_listen`), never here: a plain 404,
        // not the console's page.
        .route("/metrics", axum::routing::any(error::not_found))
        .merge(hooks::router().layer(axum::extract::DefaultBodyLimit::max(max_body_bytes)))
        .nest("/v1", v1::router(max_body_bytes))
        .method_not_allowed_fallback(error::method_not_allowed)
}

/// The process is up.
async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({ "status": "ok" }))
}

/// How long `/readyz` waits for the database: a load balancer's probe gets its 503
/// within this, however the database is failing.
pub const READINESS_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(800);

/// The readiness check of `/readyz` and of the metrics' `partyflow_ready`: the database
/// answers within [`READINESS_TIMEOUT`].
pub async fn ready(
    storage: &dyn crate::storage::Storage,
) -> Result<(), crate::storage::StorageError> {
    tokio::time::timeout(READINESS_TIMEOUT, storage.ping())
        .await
        .unwrap_or_else(|_| {
            Err(crate::storage::StorageError::Unavailable(format!(
                "no answer within {READINESS_TIMEOUT:?}"
            )))
        })
}

/// The process can serve: its database answers (within [`READINESS_TIMEOUT`]).
async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let answer = ready(state.storage.as_ref()).await;
    crate::metrics::set_ready(answer.is_ok());
    match answer {
        Ok(()) => (
            StatusCode::OK,
            Json(serde_json::json!({ "status": "ready" })),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: database unreachable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(
                    serde_json::json!({ "status": "unavailable", "reason": "database unreachable" }),
                ),
            )
        }
    }
}
