//! The server side of the Leptos console: the [`app::port::ConsoleBackend`]
//! implementation over storage, the database-backed session store, and the
//! guard that keeps every console page behind sign-in.

use std::sync::Arc;

use app::error::ConsoleError;
use app::port::{ConsoleBackend, SESSION_USER_KEY};
use app::types::SessionUser;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use tower_sessions::Session;

use crate::auth;
use crate::domain::{User, UserId};
use crate::startup::AppState;
use crate::storage::{Storage, StorageError};

pub mod sessions;

/// The console's view of the server.
pub struct Backend {
    storage: Arc<dyn Storage>,
    /// Wakes the dispatch engine after the console writes deliveries (resend, re-enable).
    #[allow(dead_code)]
    wake: Arc<tokio::sync::Notify>,
    #[allow(dead_code)]
    config: Arc<crate::config::Config>,
}

impl Backend {
    pub fn new(storage: Arc<dyn Storage>, wake: Arc<tokio::sync::Notify>, config: Arc<crate::config::Config>) -> Self {
        Self { storage, wake, config }
    }
}

fn session_user(u: &User) -> SessionUser {
    SessionUser { id: u.id.to_string(), email: u.email.clone(), role: u.role.as_str().to_owned() }
}

fn internal(err: impl std::fmt::Display) -> ConsoleError {
    tracing::error!(error = %err, "console request failed");
    ConsoleError::Internal
}

#[async_trait::async_trait]
impl ConsoleBackend for Backend {
    async fn authenticate(&self, email: &str, password: &str) -> Result<SessionUser, ConsoleError> {
        let email = email.to_lowercase();
        let user = match self.storage.find_user_by_email(&email).await {
            Ok(u) => u,
            Err(StorageError::NotFound) => {
                let password = password.to_owned();
                let _ = tokio::task::spawn_blocking(move || auth::verify_password_against_nothing(&password)).await;
                return Err(ConsoleError::BadCredentials);
            }
            Err(e) => return Err(internal(e)),
        };
        let hash = user.password_hash.clone();
        let password = password.to_owned();
        let ok = tokio::task::spawn_blocking(move || auth::verify_password(&password, &hash))
            .await
            .map_err(internal)?;
        if !ok || user.disabled_at.is_some() {
            return Err(ConsoleError::BadCredentials);
        }
        Ok(session_user(&user))
    }

    async fn user(&self, id: &str) -> Result<Option<SessionUser>, ConsoleError> {
        let Ok(id) = id.parse::<UserId>() else { return Ok(None) };
        match self.storage.get_user(id).await {
            Ok(u) if u.disabled_at.is_none() => Ok(Some(session_user(&u))),
            Ok(_) | Err(StorageError::NotFound) => Ok(None),
            Err(e) => Err(internal(e)),
        }
    }
}

/// Paths of the console that anyone may load: the sign-in page, its assets and
/// the server functions (each of which checks the session itself).
fn is_public(path: &str) -> bool {
    path == "/login" || path.starts_with("/pkg/") || path.starts_with("/api/") || path == "/favicon.ico"
}

/// Sends anyone not signed in to `/login?next=…` before a console page renders.
pub async fn require_login(State(state): State<AppState>, session: Session, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    if is_public(&path) {
        return next.run(req).await;
    }
    let user_id: Option<String> = session.get(SESSION_USER_KEY).await.ok().flatten();
    let signed_in = match user_id {
        Some(id) => matches!(state.console.user(&id).await, Ok(Some(_))),
        None => false,
    };
    if signed_in {
        next.run(req).await
    } else {
        let target = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let encoded: String = form_urlencoded::byte_serialize(target.as_bytes()).collect();
        Redirect::to(&format!("/login?next={encoded}")).into_response()
    }
}
