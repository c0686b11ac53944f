//! The outgoing-webhook dispatch engine (docs §2).
//!
//! Pure rules, each tested next to it: [`retry`] (schedule and retryability),
//! [`retry_after`] (parsing the receiver's Retry-After), [`signing`] (Standard
//! Webhooks), [`ssrf`] (which addresses may be called), [`classify`] (error classes), [`backoff`] (waits while the database fails).

pub mod backoff;
pub mod classify;
pub mod engine;
pub mod retry;
pub mod retry_after;
pub mod signing;
pub mod ssrf;
pub mod transform;
