//! Live pages (issue 16 item 5): the overview, the deliveries table and a delivery's
//! page ask their own server functions again every few seconds, in the browser only.
//! The server renders a page once, as before, so without JavaScript nothing polls and
//! the page works as it always did; a reload shows what is new.
//!
//! [`ticks`] is a counter that a page adds to its resource's key (the overview, a
//! delivery: the whole page is read again and the [`Transition`] keeps the old one
//! until the new one is there); [`poll`] calls a function instead (the deliveries table,
//! which swaps its rows without touching the filters being edited or the checked rows).

use std::time::Duration;

use leptos::prelude::*;

/// How often a live page asks again.
pub const POLL_MS: u64 = 3000;

/// Calls `tick` every [`POLL_MS`] while the page is shown and its browser tab visible;
/// never on the server (an effect runs only once the page is live in the browser).
pub fn poll(tick: impl Fn() + 'static) {
    let mut tick = Some(tick);
    Effect::new(move |_| {
        let Some(tick) = tick.take() else {
            return;
        };
        let handle = set_interval_with_handle(
            move || {
                if !document().hidden() {
                    tick();
                }
            },
            Duration::from_millis(POLL_MS),
        );
        if let Ok(handle) = handle {
            on_cleanup(move || handle.clear());
        }
    });
}

/// A counter bumped every [`POLL_MS`] in the browser (0 on the server and at hydration,
/// so both render the same page first).
pub fn ticks() -> RwSignal<u64> {
    let n = RwSignal::new(0_u64);
    poll(move || n.update(|n| *n += 1));
    n
}

/// The latest answer of `fetch`, asked every [`POLL_MS`] in the browser: `None` until
/// one differs from what the page shows (so an unchanged page is not redrawn, and an
/// open `<details>` stays open). One request at a time; a failed one is skipped.
pub fn latest<T, Fut>(fetch: impl Fn() -> Fut + 'static) -> RwSignal<Option<T>>
where
    T: Clone + PartialEq + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<T, crate::error::ConsoleError>> + 'static,
{
    let latest = RwSignal::new(None::<T>);
    let busy = std::rc::Rc::new(std::cell::Cell::new(false));
    poll(move || {
        if busy.replace(true) {
            return;
        }
        let answer = fetch();
        let busy = busy.clone();
        leptos::task::spawn_local(async move {
            if let Ok(v) = answer.await {
                if latest.with_untracked(|l| l.as_ref() != Some(&v)) {
                    latest.set(Some(v));
                }
            }
            busy.set(false);
        });
    });
    latest
}
