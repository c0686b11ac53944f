//! What the console needs from the server (server side only). The server
//! implements [`ConsoleBackend`] over its storage and provides it as
//! `Arc<dyn ConsoleBackend>` in the Leptos context of every request.

use std::sync::Arc;

use crate::error::ConsoleError;
use crate::types::SessionUser;

/// The session key under which the signed-in user's ID is kept.
pub const SESSION_USER_KEY: &str = "user_id";

#[async_trait::async_trait]
pub trait ConsoleBackend: Send + Sync + 'static {
    /// Checks an email and password; `BadCredentials` when they don't match a live user.
    async fn authenticate(&self, email: &str, password: &str) -> Result<SessionUser, ConsoleError>;

    /// The live user with this ID, if any.
    async fn user(&self, id: &str) -> Result<Option<SessionUser>, ConsoleError>;
}

pub type SharedBackend = Arc<dyn ConsoleBackend>;

/// The backend from the request's context.
pub fn backend() -> Result<SharedBackend, ConsoleError> {
    leptos::prelude::use_context::<SharedBackend>().ok_or(ConsoleError::Internal)
}
