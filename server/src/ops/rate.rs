//! The rate windows of docs §3 and §4: messages per second per incoming webhook, and
//! per channel for all bots together, counted in a sliding window in the database
//! (`Storage::take_rate_slot`), and the `Retry-After` a refused sender is told.
//! Incoming hooks (`http::hooks`) and the Bot API (`http::v1::bot`) use them.

use crate::domain::{ChannelId, IncomingWebhookId, UnixMs};
use crate::storage::{Slot, Storage, StorageError};

/// The rate limits of docs §3 and §4 count messages per second.
pub const WINDOW_MS: i64 = 1_000;

/// What a window counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The messages one incoming webhook accepts (the space's plan sets the limit).
    IncomingWebhook(IncomingWebhookId),
    /// The messages all bots together post into one channel.
    BotsInChannel(ChannelId),
}

impl Window {
    /// The window's key in the database.
    pub fn key(self) -> String {
        match self {
            Window::IncomingWebhook(id) => format!("iwh:{id}"),
            Window::BotsInChannel(id) => format!("botch:{id}"),
        }
    }
}

/// A request over its window's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// The window's limit, per second.
    pub limit: i64,
    /// Until a slot frees, in milliseconds, within one window.
    pub wait_ms: i64,
}

impl Limited {
    /// Whole seconds for `Retry-After`.
    pub fn retry_after_secs(self) -> i64 {
        retry_after_secs(self.wait_ms)
    }
}

/// Takes a slot of `window` (at most `limit` a second); `Some` when none is free now.
pub async fn take_slot(
    store: &dyn Storage,
    window: Window,
    limit: i64,
    now: UnixMs,
) -> Result<Option<Limited>, StorageError> {
    Ok(
        match store
            .take_rate_slot(&window.key(), limit, WINDOW_MS, now)
            .await?
        {
            Slot::Granted => None,
            Slot::Wait(wait_ms) => Some(Limited {
                limit,
                wait_ms: within_window(wait_ms),
            }),
        },
    )
}

/// Whole seconds for `Retry-After`: the wait rounded up, and at least 1.
pub fn retry_after_secs(wait_ms: i64) -> i64 {
    let wait_ms = wait_ms.max(1);
    ((wait_ms + 999) / 1000).max(1)
}

/// A limiter's wait, kept within one window. Concurrent requests read the clock before
/// their transactions run, so the oldest slot in the window can carry a time a few
/// milliseconds after this request's own: the raw wait then exceeds the window (and
/// would round up to `Retry-After: 2`) although a slot frees within one window.
pub fn within_window(wait_ms: i64) -> i64 {
    wait_ms.clamp(1, WINDOW_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_the_wait_rounded_up_to_whole_seconds_and_at_least_one() {
        assert_eq!(retry_after_secs(-5), 1);
        assert_eq!(retry_after_secs(0), 1);
        assert_eq!(retry_after_secs(1), 1);
        assert_eq!(retry_after_secs(999), 1);
        assert_eq!(retry_after_secs(1_000), 1);
        assert_eq!(retry_after_secs(1_001), 2);
        assert_eq!(retry_after_secs(59_500), 60);
    }

    #[test]
    fn a_wait_stays_within_one_window() {
        assert_eq!(within_window(-3), 1);
        assert_eq!(within_window(0), 1);
        assert_eq!(within_window(400), 400);
        assert_eq!(within_window(1_007), WINDOW_MS);
        assert_eq!(
            Limited {
                limit: 5,
                wait_ms: within_window(1_007)
            }
            .retry_after_secs(),
            1
        );
    }

    #[test]
    fn windows_are_keyed_by_what_they_count() {
        let hook: IncomingWebhookId = "iwh_01jdqz8x9k5v3w2r1t0m4n6p8q".parse().unwrap();
        let channel: ChannelId = "chn_01jdqz8x9k5v3w2r1t0m4n6p8q".parse().unwrap();
        assert_eq!(
            Window::IncomingWebhook(hook).key(),
            "iwh:iwh_01jdqz8x9k5v3w2r1t0m4n6p8q"
        );
        assert_eq!(
            Window::BotsInChannel(channel).key(),
            "botch:chn_01jdqz8x9k5v3w2r1t0m4n6p8q"
        );
    }
}
