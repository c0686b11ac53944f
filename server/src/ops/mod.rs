//! The operations layer: every rule that more than one adapter uses, written once.
//!
//! The adapters — the REST API and incoming hooks (`http/`), the console (`console/`)
//! and the command line (`cli.rs`) — read their input (JSON, a form, arguments), call
//! an operation here and turn its answer or its [`OpsError`] into their own (`ApiError`
//! in `http/error.rs`, `ConsoleError` in `console/mod.rs`: one mapping each). Operations
//! take what they need explicitly (storage, the engine handle, a time), never an
//! adapter's state, so any adapter can call them.
//!
//! - [`messages`]: posting a message (its `message.created` event, the replay memory);
//! - [`credentials`]: minting and revoking API keys, bot tokens and incoming-webhook tokens;
//! - [`names`]: names and their limits, one per kind, and the one trimming rule;
//! - [`tenants`]: creating spaces (with their first API key) and users;
//! - [`rate`]: the per-second rate windows and `Retry-After`;
//! - [`destinations`]: a destination's settings and their rules;
//! - [`filters`]: payload filters' verdicts at publish, and the console's "try it";
//! - [`event_types`]: the event-type catalog, and payloads checked against its schemas.
//! - [`replay`]: which failed deliveries a resend of all failed (and its preview) takes;
//! - [`headers`]: a destination's own request headers (names, limits, merging, masking);
//! - [`schedule`]: scheduled delivery (`deliverAt`: when an event's deliveries go out).
//! - [`retention`]: a space's own retention, set by the REST API and the console.
//! - [`audit`]: who made a change and its audit entry; when a key's use is written.
//! - [`demo`]: the demo space: created with its destinations, removed with everything in it.
//! - [`search`]: what the console's search box looks a query up as.

pub mod audit;
pub mod credentials;
pub mod demo;
pub mod destinations;
pub mod event_types;
pub mod filters;
pub mod headers;
pub mod messages;
pub mod names;
pub mod rate;
pub mod replay;
pub mod retention;
pub mod schedule;
pub mod search;
pub mod tenants;

use crate::storage::StorageError;

/// Why an operation refused or failed. Each adapter answers it in its own terms; the
/// words (`message`) are written for people and shown as they are.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// A value breaks a rule (the API's 422 with `code`, e.g. `invalid_name`).
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    /// A JSON document breaks a JSON Schema (the API's 422 with `code` and every
    /// violation): a payload its event type's schema, an example its type's.
    #[error("{message}")]
    Violations {
        code: &'static str,
        message: String,
        violations: Vec<event_types::Violation>,
    },
    /// The thing asked for does not exist, or is not the caller's to see.
    #[error("no {what} {id:?}")]
    NotFound { what: &'static str, id: String },
    /// A value that must be unique is taken (the API's 409 with `code`).
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// Storage failed in a way the operation did not expect (unavailable, corrupt, …).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A failure of ours that is not storage's (hashing, serialising).
    #[error(transparent)]
    Internal(anyhow::Error),
}

impl OpsError {
    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        OpsError::Invalid {
            code,
            message: message.into(),
        }
    }

    pub fn not_found(what: &'static str, id: impl Into<String>) -> Self {
        OpsError::NotFound {
            what,
            id: id.into(),
        }
    }
}
