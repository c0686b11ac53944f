//! [`AppState`]: what every handler can reach — the API's, the incoming hooks', the
//! console's (through its guard) — built once by `startup::run`.

use std::sync::Arc;

use app::port::SharedBackend;
use leptos::prelude::LeptosOptions;

use crate::config::{Config, PublicUrl};
use crate::storage::Storage;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub storage: Arc<dyn Storage>,
    /// Tells the dispatch engine that deliveries were written or released.
    pub engine: crate::dispatch::engine::EngineHandle,
    /// Publishes, committed in groups.
    pub publisher: crate::storage::group_commit::Publisher,
    pub console: SharedBackend,
    /// Where tenants' programs (transformations) are checked and run.
    pub sandbox: crate::sandbox::Sandbox,
    pub leptos_options: LeptosOptions,
    pub config: Arc<Config>,
    /// The base of every URL the product shows (`PARTYFLOW_PUBLIC_URL`), never a `Host` header.
    pub public_url: PublicUrl,
    /// The event types' compiled schemas, which every publish checks payloads against.
    pub schemas: crate::ops::event_types::SchemaCache,
    /// When this process last wrote each API key's `last_used_at` (at most once a minute).
    pub key_use: crate::ops::audit::KeyUse,
}

impl axum::extract::FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}
