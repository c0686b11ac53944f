//! The REST API for integrations (docs §5), under `/v1`. Each resource has its own
//! module exposing `fn router() -> Router<AppState>`; every answer is JSON and every
//! error is `{"code","message"}`.

use axum::extract::DefaultBodyLimit;
use axum::Router;

use crate::http::AppState;

pub mod api_keys;
pub mod audit;
pub mod bot;
pub mod bots;
pub mod channels;
pub mod deliveries;
pub mod destinations;
pub mod docs;
pub mod event_types;
pub mod events;
pub mod extract;
pub mod incoming_webhooks;
pub mod notifications;
pub mod openapi;
pub mod page;
pub mod projects;
pub mod views;

pub fn router(max_body_bytes: usize) -> Router<AppState> {
    Router::new()
        .merge(destinations::router())
        .merge(events::router())
        .merge(event_types::router())
        .merge(deliveries::router())
        .merge(channels::router())
        .merge(incoming_webhooks::router())
        .merge(bots::router())
        .merge(bot::router())
        .merge(api_keys::router())
        .merge(notifications::router())
        .merge(openapi::router())
        .merge(projects::router())
        .merge(audit::router())
        .fallback(super::error::not_found)
        .layer(DefaultBodyLimit::max(max_body_bytes))
}
