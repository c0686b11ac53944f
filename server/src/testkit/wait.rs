//! Waiting for something to become true, with a deadline, so tests never sleep blind.

use std::future::Future;
use std::time::Duration;

/// Runs `f` until it returns `Some`, for up to `secs` seconds (every 20 ms).
pub async fn eventually<T, F, Fut>(secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within {secs}s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (up to `secs`, checking every 100 ms) until `check` says yes; panics naming
/// `what` otherwise.
pub async fn wait_until<F, Fut>(what: &str, secs: u64, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if check().await {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
