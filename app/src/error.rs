//! The error every console server function returns, shown to people as is.

use leptos::server_fn::codec::JsonEncoding;
use leptos::server_fn::error::{FromServerFnError, ServerFnErrorErr};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ConsoleError {
    /// Not signed in, or the session ended.
    #[error("Please sign in again.")]
    SignedOut,
    #[error("Wrong email or password.")]
    BadCredentials,
    #[error("Too many attempts; wait a few minutes and try again.")]
    Throttled,
    /// Signed in, but the role does not allow this.
    #[error("Your role does not allow this.")]
    Forbidden,
    /// A change posted from another site (or with a foreign Origin/Referer).
    #[error("This request did not come from the console; reload the page and try again.")]
    CrossSite,
    #[error("Not found: {0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    /// Details are in the server log, never shown here.
    #[error("Something went wrong on the server; try again.")]
    Internal,
    #[error("Could not reach the server: {0}")]
    Transport(String),
}

impl FromServerFnError for ConsoleError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        ConsoleError::Transport(value.to_string())
    }
}
