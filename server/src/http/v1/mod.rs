//! The REST API for integrations (SPEC §5), under `/v1`. Each resource has its own
//! module exposing `fn router() -> Router<AppState>`.

use axum::Router;

use crate::startup::AppState;

pub fn router() -> Router<AppState> {
    Router::new().fallback(super::error::not_found)
}
