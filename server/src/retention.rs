//! The retention task (docs D10): every `[retention] interval` it deletes what the
//! product no longer keeps, in small batches with pauses so dispatch is never held up:
//!
//! - finished deliveries (succeeded, failed, cancelled) older than their space's
//!   retention ([`retention_for`]: the space's own, else its plan's), their attempts
//!   first, then the space's events with no delivery left (a waiting delivery keeps its
//!   event, whatever its age);
//! - read notifications older than the space's retention (the install's own, of no
//!   space, and alert e-mails given up on, after the longest plan retention);
//! - idempotency keys after 24 hours, rate-limit rows of keys idle for longer than any
//!   window (deleted destinations, webhooks and bots included), expired console
//!   sessions (tower-sessions' table and the index `console_sessions`);
//! - then, on SQLite, a bounded `PRAGMA incremental_vacuum` so the file stops growing.
//!
//! Each batch is one write transaction through the storage's writer (finished deliveries
//! and their attempts together; on SQLite as one batch of statements, one round trip),
//! sized by time: each kind starts at [`MIN_BATCH`] rows and is resized after each batch
//! so one holds the write lock for about [`Settings::busy_batch_time`] (1 ms) while others
//! write (the engine, publishes, people: [`OTHERS_WINDOW`]) and [`Settings::batch_time`]
//! (5 ms) when the purge has the database to itself ([`next_batch`]; the hold is counted
//! by [`storage::write::metered`], the wait for the lock left out), since what delays a
//! claim or a publish is how long the purge holds the write lock, not how many rows it
//! deletes. Each batch is followed by a rest of nine times its own time while others
//! write and four times when alone (at least [`Settings::pause`]), so a purge takes at
//! most a tenth of the write lock under traffic and a fifth when idle. The free pages go
//! back to the file
//! system the same way, [`VACUUM_STEP`] pages at a time. Rows purged
//! are counted in `partyflow_retention_purged_rows_total{table}`, and a run that purged
//! anything logs one line with its counts.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::console::sessions::AnyStore;
use crate::domain::{retention_for, PerPlan, Retention, UnixMs};
use crate::storage::{self, Storage};

/// How long an idempotency key is remembered (docs §5).
pub const IDEMPOTENCY_KEY_MS: i64 = 24 * 3600 * 1000;

/// A rate-limit key idle for longer than this is past every window (the longest, a
/// destination's `per hour`, and a margin).
pub const RATE_KEY_IDLE_MS: i64 = 2 * 3600 * 1000;

/// What the task does and how fast (built by `config.rs` from `[retention]`).
#[derive(Debug, Clone)]
pub struct Settings {
    pub per_plan: PerPlan<Retention>,
    /// How often a run starts.
    pub interval: Duration,
    /// Rows per write transaction, at most.
    pub batch: i64,
    /// How long one batch should hold the write lock when the purge has the database to
    /// itself: the batch size follows it.
    pub batch_time: Duration,
    /// The same while others write (the engine, publishes, people): a claim or a publish
    /// that arrives during a batch waits for it.
    pub busy_batch_time: Duration,
    /// The pause after each batch, so the engine's claims and finishes interleave.
    pub pause: Duration,
    /// Free pages handed back by the `PRAGMA incremental_vacuum` after a run that purged
    /// something (SQLite); pages left over are reused by new rows.
    pub vacuum_pages: i64,
    /// Audit entries are kept this long (the audit log's purge is added with it).
    pub audit: Retention,
}

impl Default for Settings {
    fn default() -> Self {
        let config = crate::config::RetentionConfig::default();
        config.settings()
    }
}

/// Rows one run deleted, per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    pub deliveries: u64,
    pub attempts: u64,
    pub events: u64,
    pub notifications: u64,
    pub idempotency_keys: u64,
    pub rate_limits: u64,
    pub sessions: u64,
    pub audit_entries: u64,
    pub alert_emails: u64,
}

impl Purged {
    /// Each table's count, by the name the metric and the log line use.
    pub fn by_table(&self) -> [(&'static str, u64); 9] {
        [
            ("deliveries", self.deliveries),
            ("attempts", self.attempts),
            ("events", self.events),
            ("notifications", self.notifications),
            ("idempotency_keys", self.idempotency_keys),
            ("rate_limits", self.rate_limits),
            ("sessions", self.sessions),
            ("audit_log", self.audit_entries),
            ("alert_outbox", self.alert_emails),
        ]
    }

    pub fn total(&self) -> u64 {
        self.by_table().iter().map(|(_, n)| n).sum()
    }
}

/// Runs a purge every `settings.interval` until `shutdown`; a run that fails is logged
/// and tried again at the next interval.
pub async fn run(
    storage: Arc<dyn Storage>,
    sessions: AnyStore,
    settings: Settings,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(settings.interval) => {}
        }
        let started = std::time::Instant::now();
        match purge(
            storage.as_ref(),
            &settings,
            crate::clock::now_ms(),
            &shutdown,
        )
        .await
        {
            Ok(purged) => report(&purged, started.elapsed()),
            Err(e) => tracing::warn!(error = %e, "retention purge failed; trying again later"),
        }
        if let Err(e) = sessions.delete_expired_now().await {
            tracing::warn!(error = %e, "deleting expired console sessions failed");
        }
    }
}

/// Counts the run in the metric and, when anything went, in one log line.
fn report(purged: &Purged, took: Duration) {
    for (table, n) in purged.by_table() {
        if n > 0 {
            metrics::counter!("partyflow_retention_purged_rows_total", "table" => table)
                .increment(n);
        }
    }
    if purged.total() > 0 {
        tracing::info!(
            deliveries = purged.deliveries,
            attempts = purged.attempts,
            events = purged.events,
            notifications = purged.notifications,
            idempotency_keys = purged.idempotency_keys,
            rate_limits = purged.rate_limits,
            sessions = purged.sessions,
            took_ms = took.as_millis() as u64,
            "retention purge"
        );
    }
}

/// One run: every space's old finished deliveries, attempts, events and read
/// notifications, then the install-wide rows, then the free pages. Stops between
/// batches when `shutdown` is cancelled.
pub async fn purge(
    storage: &dyn Storage,
    settings: &Settings,
    now: UnixMs,
    shutdown: &CancellationToken,
) -> storage::Result<Purged> {
    // Metered, so each batch is sized by the time it held the write lock.
    storage::write::metered(purge_paced(storage, settings, now, shutdown)).await
}

async fn purge_paced(
    storage: &dyn Storage,
    settings: &Settings,
    now: UnixMs,
    shutdown: &CancellationToken,
) -> storage::Result<Purged> {
    let mut purged = Purged::default();
    // One pacer per kind of batch: their rows cost very different times.
    let pacer = Pacer::new(settings, storage);
    let finished = Pacer::new(settings, storage);
    let old_events = Pacer::new(settings, storage);
    for space in storage.list_all_spaces().await? {
        let before = retention_for(space.retention, space.plan, &settings.per_plan).cutoff(now);
        // Finished deliveries with their attempts, a batch (one transaction) at a time.
        loop {
            if shutdown.is_cancelled() {
                return Ok(purged);
            }
            let ids = storage
                .finished_deliveries_before(space.id, before, finished.rows())
                .await?;
            if ids.is_empty() {
                break;
            }
            finished.start();
            let (deliveries, attempts) = storage.purge_finished(&ids).await?;
            purged.deliveries += deliveries;
            purged.attempts += attempts;
            finished.pause().await;
            if deliveries == 0 {
                // Nothing it could delete (all resent meanwhile); never spin.
                break;
            }
        }
        // Events no delivery needs any more.
        let mut after = None;
        loop {
            if shutdown.is_cancelled() {
                return Ok(purged);
            }
            old_events.start();
            let (n, next) = storage
                .purge_events(space.id, before, after, old_events.rows())
                .await?;
            purged.events += n;
            if n > 0 {
                old_events.pause().await;
            }
            match next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        purged.notifications += drain(&pacer, |limit| {
            storage.purge_read_notifications(Some(space.id), before, limit)
        })
        .await?;
    }
    let longest = [
        settings.per_plan.free,
        settings.per_plan.pro,
        settings.per_plan.enterprise,
    ]
    .into_iter()
    .max()
    .unwrap_or(Retention::MAX);
    purged.notifications += drain(&pacer, |limit| {
        storage.purge_read_notifications(None, longest.cutoff(now), limit)
    })
    .await?;
    purged.alert_emails += drain(&pacer, |limit| {
        storage.purge_given_up_alert_emails(longest.cutoff(now), limit)
    })
    .await?;
    purged.idempotency_keys += drain(&pacer, |limit| {
        storage.purge_idempotency_keys(now - IDEMPOTENCY_KEY_MS, limit)
    })
    .await?;
    let mut after = None;
    loop {
        pacer.start();
        let (n, next) = storage
            .purge_rate_rows(now - RATE_KEY_IDLE_MS, after, pacer.rows())
            .await?;
        purged.rate_limits += n;
        match next {
            Some(next) => after = Some(next),
            None => break,
        }
        pacer.pause().await;
    }
    purged.sessions += drain(&pacer, |limit| storage.purge_console_sessions(now, limit)).await?;

    purged.audit_entries += drain(&pacer, |limit| {
        storage.purge_audit_entries(settings.audit.cutoff(now), limit)
    })
    .await?;

    if purged.total() > 0 {
        // A step at a time, paced like the purges: a long vacuum would hold the write lock.
        let mut left = settings.vacuum_pages.max(0);
        while left > 0 {
            let step = left.min(VACUUM_STEP);
            pacer.start();
            storage.reclaim_free_pages(step).await?;
            left -= step;
            if left > 0 {
                pacer.pause().await;
            }
        }
    }
    Ok(purged)
}

/// How many times a batch's own time the purge rests after it when it has the database
/// to itself: it writes at most a fifth of the time.
const REST_PER_WORK: u32 = 4;

/// The same while others write: the purge holds the write lock at most a tenth of the
/// time, in turns of about [`Settings::busy_batch_time`], so few of the engine's claims
/// and finishes, which need the same write lock on SQLite, meet one, and those that do
/// wait about a millisecond. (At 200 events/s a fifth, in 5 ms turns, put the
/// publish→first-attempt p99 at 4.5× its level without a purge; in 1 ms turns 1.6–2.4×.)
const BUSY_REST_PER_WORK: u32 = 9;

/// The fewest rows a batch is cut down to, however slow the database, so a purge on a
/// slow disk still moves. A batch is timed by how long it held the write lock, not by its
/// wall time (which, under load, adds its wait behind the engine's transactions: sized by
/// that, with a floor of 10, the purge fell to ~460 deliveries/s under 200 events/s).
const MIN_BATCH: i64 = 10;

/// Pages of the file handed back per `incremental_vacuum` transaction.
pub const VACUUM_STEP: i64 = 256;

/// The rest after a batch that took `took`: `per_work` times it, and at least `min`.
fn rest_after(took: Duration, per_work: u32, min: Duration) -> Duration {
    (took * per_work).max(min)
}

/// The size of the next batch, after `rows` rows took `took` against a `target` time: in
/// proportion, but at most twice as many (one fast batch proves little) and within
/// [`MIN_BATCH`]`..=max`.
fn next_batch(rows: i64, took: Duration, target: Duration, max: i64) -> i64 {
    let max = max.max(MIN_BATCH);
    let took = took.as_secs_f64().max(1e-6);
    let scaled = (rows as f64 * target.as_secs_f64() / took).floor() as i64;
    scaled.min(rows.saturating_mul(2)).clamp(MIN_BATCH, max)
}

/// How recently another writer (the engine, a publish, a person) must have written for
/// the purge to take its short turns ([`Settings::busy_batch_time`]).
const OTHERS_WINDOW: Duration = Duration::from_millis(250);

/// Paces a run: each batch's rows follow the time its writes held the write lock
/// ([`storage::write::held`]: the purge runs [`storage::write::metered`]), against a short
/// target while others write and a longer one when the purge has the database to itself,
/// and each pause rests in proportion to it.
struct Pacer<'s> {
    storage: &'s dyn Storage,
    min: Duration,
    /// The time a batch should hold the write lock: alone, and while others write.
    alone: Duration,
    busy: Duration,
    max: i64,
    /// The lock time counted when the current batch began, and the rows a batch may take.
    state: std::sync::Mutex<(Duration, i64)>,
}

impl<'s> Pacer<'s> {
    fn new(settings: &Settings, storage: &'s dyn Storage) -> Self {
        Self {
            storage,
            min: settings.pause,
            alone: settings.batch_time,
            busy: settings.busy_batch_time,
            max: settings.batch.max(1),
            // Grows from the floor: the first batch of a kind cannot know its rows' cost.
            state: std::sync::Mutex::new((storage::write::held(), MIN_BATCH)),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, (Duration, i64)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The rows the next batch may take.
    fn rows(&self) -> i64 {
        self.state().1
    }

    /// A batch begins now (a write before it is not its time).
    fn start(&self) {
        self.state().0 = storage::write::held();
    }

    /// After a batch: resizes the next one by the time the batch held the lock, and rests.
    async fn pause(&self) {
        let (target, per_work) = if self.storage.others_wrote_within(OTHERS_WINDOW) {
            (self.busy, BUSY_REST_PER_WORK)
        } else {
            (self.alone, REST_PER_WORK)
        };
        let took = {
            let mut state = self.state();
            let took = storage::write::held().saturating_sub(state.0);
            state.1 = next_batch(state.1, took, target, self.max);
            took
        };
        tokio::time::sleep(rest_after(took, per_work, self.min)).await;
        self.start();
    }
}

/// Calls `step` (one batch, given its row limit) until it deletes fewer rows than its
/// limit, pacing each batch; the rows deleted.
async fn drain<F, Fut>(pacer: &Pacer<'_>, mut step: F) -> storage::Result<u64>
where
    F: FnMut(i64) -> Fut,
    Fut: std::future::Future<Output = storage::Result<u64>>,
{
    let mut total = 0;
    loop {
        pacer.start();
        let limit = pacer.rows();
        let n = step(limit).await?;
        total += n;
        if n < limit as u64 {
            return Ok(total);
        }
        pacer.pause().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_followed_by_a_multiple_of_its_time_at_rest_and_never_less_than_the_pause() {
        let ms = Duration::from_millis;
        assert_eq!(rest_after(ms(50), REST_PER_WORK, ms(20)), ms(200));
        assert_eq!(rest_after(ms(1), BUSY_REST_PER_WORK, ms(2)), ms(9));
        assert_eq!(rest_after(ms(1), REST_PER_WORK, ms(20)), ms(20));
        assert_eq!(rest_after(ms(0), REST_PER_WORK, ms(0)), ms(0));
    }

    #[test]
    fn a_batch_follows_its_time_at_most_doubling_and_within_bounds() {
        let ms = Duration::from_millis;
        // 1,000 rows took 10 ms against 5 ms: half of them next.
        assert_eq!(next_batch(1000, ms(10), ms(5), 1000), 500);
        // Fast: grows, but at most twice over, and never past the maximum.
        assert_eq!(next_batch(300, ms(1), ms(5), 1000), 600);
        assert_eq!(next_batch(800, ms(1), ms(5), 1000), 1000);
        // Very slow: never below the floor; an instant batch does not divide by zero.
        assert_eq!(
            next_batch(100, Duration::from_secs(10), ms(5), 1000),
            MIN_BATCH
        );
        assert_eq!(next_batch(300, Duration::ZERO, ms(5), 1000), 600);
        // On target: unchanged.
        assert_eq!(next_batch(300, ms(5), ms(5), 1000), 300);
    }

    #[test]
    fn a_run_counts_each_table_under_its_name() {
        let purged = Purged {
            deliveries: 3,
            attempts: 4,
            events: 2,
            sessions: 1,
            ..Purged::default()
        };
        assert_eq!(purged.total(), 10);
        let tables: Vec<_> = purged.by_table().iter().map(|(t, _)| *t).collect();
        assert_eq!(
            tables,
            [
                "deliveries",
                "attempts",
                "events",
                "notifications",
                "idempotency_keys",
                "rate_limits",
                "sessions",
                "audit_log",
                "alert_outbox"
            ]
        );
    }
}
