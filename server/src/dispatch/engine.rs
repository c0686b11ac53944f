//! The worker: claims due deliveries from the database, makes one attempt each,
//! and records the outcome. Woken at once after ingest; otherwise sleeps until
//! the next delivery is due. Durable by construction: every state lives in the
//! database, so a crash loses at most the attempts in flight, which come back
//! as `lost` when their lease expires (docs D3).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rand::Rng as _;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::retry::{Decision, RetryPolicy};
use super::transform::TransformError;
use super::{classify, retry_after, signing, ssrf};
use crate::clock::now_ms;
use crate::domain::*;
use crate::sandbox::Sandbox;
use std::sync::atomic::Ordering;

use crate::storage::{
    ClaimLimits, ClaimNext, Claimed, DispatchQueue, FinishEffects, FinishedAttempt, NextStep,
    PlanLimits, RateScope, Slot, StorageError,
};

/// The most of a response body read and kept in the attempt log: reading stops there
/// (an endless body, a 10 GB `Content-Length`), so a receiver cannot make the engine read
/// or store more.
pub const RESPONSE_BODY_LIMIT: usize = 64 * 1024;
/// The most of the response headers (names and values) kept in the attempt log; hyper
/// refuses heads over ~400 KiB before that.
pub const RESPONSE_HEADERS_LIMIT: usize = 64 * 1024;
/// When the sandbox cannot run a transformation at all (not the program's
/// fault), the delivery is tried again this much later.
const SANDBOX_RETRY_MS: i64 = 5_000;

/// How the engine runs; from `[dispatch]` in the configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Attempts in flight at once in this process.
    pub concurrency: usize,
    /// Added to a destination's timeout to make a claim's lease.
    pub lease_margin: Duration,
    /// On shutdown, how long in-flight attempts may finish before they are cut short.
    pub shutdown_grace: Duration,
    /// The longest sleep between looks at the queue when nothing is due (other
    /// instances may add work this process is not told about).
    pub idle_poll: Duration,
    pub auto_disable: AutoDisable,
    /// Attempts in flight to one destination, across instances (docs §2.5).
    pub per_destination_in_flight: i64,
    /// Sends per second shared by a space's destinations, by plan (docs D4).
    pub plan_per_second: crate::domain::PerPlan,
    /// The share of `concurrency` retries may take.
    pub retry_share: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            per_destination_in_flight: 5,
            plan_per_second: crate::domain::PerPlan::OUTGOING_PER_SECOND,
            retry_share: 0.8,
            concurrency: 64,
            lease_margin: Duration::from_secs(15),
            shutdown_grace: Duration::from_secs(10),
            idle_poll: Duration::from_secs(1),
            auto_disable: AutoDisable::default(),
        }
    }
}

/// Destinations that may have deliveries due now: a publish just fanned out to them
/// (sure: claimed for at once), or an attempt to them just ended, freeing a slot (maybe:
/// the engine first reads whether anything waits, which at low load nothing does; sure,
/// or no hint, when the attempt's record said). The
/// engine claims for these by name ([`DispatchQueue::claim_for`](crate::storage::DispatchQueue::claim_for)), which costs the same whatever
/// else waits in the queue; the full, time-ordered scan runs only when woken without
/// names, on a timer, and when the next delivery falls due.
#[derive(Default)]
struct Hints {
    /// The destinations hinted, oldest first, and whether each is sure to have work.
    due: Mutex<(
        std::collections::VecDeque<DestinationId>,
        std::collections::HashMap<DestinationId, bool>,
    )>,
    notify: Notify,
}

impl Hints {
    /// These destinations have work due now (`sure`), or may have (an attempt ended).
    fn due(&self, destinations: impl IntoIterator<Item = DestinationId>, sure: bool) {
        let mut due = self.due.lock().unwrap_or_else(|p| p.into_inner());
        let (queue, known) = &mut *due;
        for d in destinations {
            match known.entry(d) {
                std::collections::hash_map::Entry::Occupied(mut e) => *e.get_mut() |= sure,
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(sure);
                    queue.push_back(d);
                }
            }
        }
        drop(due);
        self.notify.notify_one();
    }

    /// Up to `max` hinted destinations, oldest hint first: those sure to have work, and
    /// those that may have.
    fn take(&self, max: usize) -> (Vec<DestinationId>, Vec<DestinationId>) {
        let mut due = self.due.lock().unwrap_or_else(|p| p.into_inner());
        let (queue, known) = &mut *due;
        let n = max.min(queue.len());
        let (mut sure, mut maybe) = (Vec::new(), Vec::new());
        for d in queue.drain(..n) {
            if known.remove(&d).unwrap_or(false) {
                sure.push(d);
            } else {
                maybe.push(d);
            }
        }
        (sure, maybe)
    }
}

/// The earliest due time as the engine last read it, kept while nothing can have moved it
/// earlier: an idle engine woken by a hint (a publish, an ended attempt) goes back to
/// sleep without reading `next_due_at` again, which at low load was two reads per event.
/// Anything that may make a delivery due sooner than the known time forgets it, after its
/// write has committed (so a read made before the write cannot stay known): a scheduled
/// publish, a wake, a retry or a lost attempt, a rate limit's "not now", a plan hold.
/// Other instances' writes are seen at the next poll (the sleep never passes it).
#[derive(Default)]
struct NextDue(Mutex<Option<Option<UnixMs>>>);

impl NextDue {
    /// The time known, when there is one still ahead of `now` (or none waiting at all).
    fn known(&self, now: UnixMs) -> Option<Option<UnixMs>> {
        match *self.0.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(Some(at)) if at > now => Some(Some(at)),
            Some(None) => Some(None),
            _ => None,
        }
    }

    fn set(&self, at: Option<UnixMs>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(at);
    }

    fn forget(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// What the rest of the server holds of the engine: the way to say that work is due.
/// Everything that writes or releases deliveries (publishing, posting a message, a
/// resend, re-enabling a destination) gets a clone.
#[derive(Clone, Default)]
pub struct EngineHandle {
    wake: Arc<Notify>,
    hints: Arc<Hints>,
    next_due: Arc<NextDue>,
    /// How a publish hands the engine the deliveries it claimed; set while the engine runs.
    starter: Arc<std::sync::OnceLock<Starter>>,
}

/// What starting a worker takes, outside the engine's loop: the engine, its permits, its
/// tasks and the token that cuts attempts short at shutdown.
struct Starter {
    engine: std::sync::Weak<Engine>,
    permits: Arc<Semaphore>,
    tracker: TaskTracker,
    cut_short: CancellationToken,
}

/// Permits of the engine taken for a publish's claim of its own deliveries (its
/// [`Reserved::claim`], in the publish's transaction): as many as the claim may take.
/// [`EngineHandle::published`] starts a worker for each delivery claimed and gives the
/// rest back.
pub struct Reserved {
    permit: OwnedSemaphorePermit,
    /// The claim to make (its destinations are the publish's own).
    pub claim: ClaimNext,
}

/// The most of a publish's own deliveries it claims in its transaction.
const PUBLISH_CLAIMS_AT_MOST: usize = 16;

impl EngineHandle {
    /// Permits for a publish to claim its own deliveries with (up to
    /// [`PUBLISH_CLAIMS_AT_MOST`], as many as are free); `None` while the engine does not
    /// run, is stopping, or has no free permit.
    pub fn reserve(&self) -> Option<Reserved> {
        let starter = self.starter.get()?;
        let engine = starter.engine.upgrade()?;
        if engine.stopping.load(Ordering::Relaxed) {
            return None;
        }
        let n = starter
            .permits
            .available_permits()
            .min(PUBLISH_CLAIMS_AT_MOST);
        if n == 0 {
            return None;
        }
        let permit = starter
            .permits
            .clone()
            .try_acquire_many_owned(n as u32)
            .ok()?;
        Some(Reserved {
            permit,
            claim: ClaimNext {
                destinations: Vec::new(),
                ahead: Vec::new(),
                limit: n as i64,
                lease_margin_ms: engine.settings.lease_margin.as_millis() as i64,
                limits: engine.claim_limits(),
            },
        })
    }

    /// A publish's deliveries to `destinations` are written and due now; `claimed`, what
    /// its transaction claimed with `reserved` (if it did), goes straight to workers, one
    /// permit each, and the engine claims nothing for them. A claim that took fewer than
    /// it could leaves nothing due that a slot could take (the rest wait for a slot, which
    /// the attempts in flight free and claim); one that took all it could, or none made,
    /// hints the destinations as [`Self::due_now`] does.
    pub fn published(
        &self,
        reserved: Option<Reserved>,
        destinations: Vec<DestinationId>,
        claimed: Option<Claimed>,
    ) {
        let started = match (reserved, claimed, self.starter.get()) {
            // Without the engine (gone), the claims come back when their leases expire.
            (Some(reserved), Some(claimed), Some(starter)) => starter
                .engine
                .upgrade()
                .map(|engine| engine.start(starter, reserved, claimed)),
            _ => None,
        };
        if started != Some(true) {
            self.due_now(destinations);
        }
    }

    /// New deliveries to these destinations are due now: the engine claims for them by
    /// name, which is cheaper than a look at the whole queue.
    pub fn due_now(&self, destinations: impl IntoIterator<Item = DestinationId>) {
        self.hints.due(destinations, true);
    }

    /// Deliveries were written to go out later (a scheduled event, docs §2.1): the
    /// engine looks again at when the next delivery is due, in case it sleeps past it.
    /// Nothing is claimed early: a claim takes only deliveries due by then.
    pub fn scheduled(&self) {
        self.next_due.forget();
        self.hints.notify.notify_one();
    }

    /// Deliveries were written or released without naming their destinations (a bulk
    /// resend, a re-enabled destination): the engine looks at the whole queue.
    pub fn wake(&self) {
        self.next_due.forget();
        self.wake.notify_one();
    }
}

pub struct Engine {
    storage: Arc<dyn DispatchQueue>,
    client: reqwest::Client,
    network: Arc<ssrf::NetworkPolicy>,
    handle: EngineHandle,
    settings: Settings,
    /// Where transformations run.
    sandbox: Sandbox,
    /// Retries in flight in this process.
    retries_in_flight: Arc<std::sync::atomic::AtomicI64>,
    /// Finished attempts on their way to the database, committed in groups.
    finisher: tokio::sync::mpsc::Sender<FinishRequest>,
    finish_queue: Mutex<Option<tokio::sync::mpsc::Receiver<FinishRequest>>>,
    /// Finished attempts on their way to the database, queued or being written.
    finishing: std::sync::atomic::AtomicUsize,
    /// Set when the engine stops claiming: finished attempts then claim no successor.
    stopping: std::sync::atomic::AtomicBool,
    /// The engine's metrics, as ready handles (made with the engine, after the recorder).
    metrics: crate::metrics::Dispatch,
    /// Each destination's workers and the deliveries claimed ahead for it.
    lanes: Lanes,
    /// How far claims go ahead for fast destinations ([`DispatchQueue::claims_ahead`]).
    ahead: crate::storage::Ahead,
}

type FinishRequest = (FinishedAttempt, Reply);

/// Who learns how a finished attempt was recorded: its worker, waiting for it, or nobody
/// waiting (the worker went on with a delivery claimed ahead; [`Engine::detach`]): the
/// committing task then settles it itself ([`Engine::settle`]) and places its successor.
enum Reply {
    Waiting(tokio::sync::oneshot::Sender<Result<Recorded, StorageError>>),
    Detached(Box<Detached>),
}

/// A detached attempt on its way to the database: what to settle once it is recorded, and
/// what it holds until then: a token of the engine's tasks (its shutdown waits for the
/// record), and one of the engine's permits, so that requests made and not yet recorded,
/// which a crash would repeat, never outnumber the engine's concurrency.
struct Detached {
    settling: Settling,
    _token: Option<tokio_util::task::task_tracker::TaskTrackerToken>,
    _permit: OwnedSemaphorePermit,
}

/// What is done with an attempt once it is recorded, apart from the attempt itself.
struct Settling {
    delivery: DeliveryId,
    destination: DestinationId,
    attempt: u32,
    next: NextStep,
    status: Option<i64>,
    class: Option<ErrorClass>,
    duration_ms: i64,
}

/// A claimed delivery, with what its claim read for it: its destination and its event
/// (`None`: deleted meanwhile, read again by the attempt).
struct Work {
    delivery: Delivery,
    destination: Option<Arc<Destination>>,
    event: Option<Arc<Event>>,
}

/// A finished attempt, recorded: its effects, the delivery its worker goes on with (a
/// successor claimed in the same transaction, for the slot the attempt freed), and
/// whether its destination needs another claim ([`Ended::hint`]).
struct Recorded {
    effects: FinishEffects,
    next: Option<Work>,
    hint: Option<bool>,
}

/// How an attempt's worker ended it: whether its destination needs a claim (`Some(true)`:
/// something is due there and no successor took the slot; `Some(false)`: nothing; `None`:
/// unknown, the engine looks), and the delivery it goes on with.
#[derive(Default)]
struct Ended {
    hint: Option<bool>,
    next: Option<Waiting>,
}

/// A claimed delivery on its way to a worker, since when.
struct Waiting {
    work: Work,
    retry: RetryGuard,
    since: std::time::Instant,
}

impl Waiting {
    fn new(work: Work, retries_in_flight: &Arc<std::sync::atomic::AtomicI64>) -> Self {
        Self {
            retry: RetryGuard::new(work.delivery.attempts > 0, retries_in_flight),
            work,
            since: std::time::Instant::now(),
        }
    }

    fn destination(&self) -> DestinationId {
        self.work.delivery.destination_id
    }
}

/// The longest a delivery claimed ahead waits in memory for a slot of its destination.
/// Past it, it is given back, due at once, not sent: the plan's slot it took with its
/// claim must be used within the rate window's margin ([`RATE_MARGIN_MS`]).
const AHEAD_WAITS_AT_MOST: Duration = Duration::from_millis(10);

// A destination is claimed ahead for only while its attempts take less than its backend's
// `Ahead::fast_attempt_ms`, so that what is claimed ahead goes out well within
// [`AHEAD_WAITS_AT_MOST`].
const _: () = {
    let most = AHEAD_WAITS_AT_MOST.as_millis() as i64;
    assert!(crate::storage::SQLITE_AHEAD.waits_at_most_ms() < most);
    assert!(crate::storage::POSTGRES_AHEAD.waits_at_most_ms() < most);
};

/// A destination's attempts in this process (docs §2.5): the workers serving it (each
/// makes one attempt at a time, and there are never more than the in-flight cap), and
/// the deliveries claimed ahead for it, waiting for one of them to end its attempt.
#[derive(Default)]
struct Lane {
    workers: usize,
    waiting: std::collections::VecDeque<Waiting>,
    /// Whether its last attempt took less than its backend's `Ahead::fast_attempt_ms`.
    fast: bool,
}

/// Every destination's [`Lane`] with workers or waiting deliveries, and the lanes that
/// have waiting deliveries but no worker (no permit was free): the next worker without
/// work of its own serves them.
#[derive(Default)]
struct Lanes(Mutex<LanesInner>);

#[derive(Default)]
struct LanesInner {
    lanes: std::collections::HashMap<DestinationId, Lane>,
    stranded: std::collections::VecDeque<DestinationId>,
    /// The destinations whose last recorded attempt left more due: the records of their
    /// attempts claim their successors in the same transaction ([`Lanes::claims_in_record`]).
    more_due: std::collections::HashSet<DestinationId>,
}

/// The most destinations [`LanesInner::more_due`] remembers; past it, it starts afresh
/// (a destination deleted with more due would otherwise stay in it). Forgetting costs a
/// record's claim at most: the next record says again that more is due.
const MORE_DUE_AT_MOST: usize = 65_536;

/// What a lane gives a worker: the delivery it goes on with (`waited`: one that waited in a
/// lane), and the waiting ones found too old to send ([`AHEAD_WAITS_AT_MOST`]), to give back.
struct Taken {
    next: Option<Waiting>,
    waited: bool,
    stale: Vec<Waiting>,
}

impl Taken {
    /// `next`, if any, waited in a lane.
    fn waited(next: Option<Waiting>, stale: Vec<Waiting>) -> Self {
        Self {
            waited: next.is_some(),
            next,
            stale,
        }
    }
}

impl LanesInner {
    /// Its lane's first waiting delivery still young enough to send.
    fn pop(&mut self, destination: DestinationId, stale: &mut Vec<Waiting>) -> Option<Waiting> {
        let lane = self.lanes.get_mut(&destination)?;
        while let Some(w) = lane.waiting.pop_front() {
            if w.since.elapsed() <= AHEAD_WAITS_AT_MOST {
                return Some(w);
            }
            stale.push(w);
        }
        None
    }

    /// A worker leaves its lane, which is forgotten once it has neither workers nor
    /// waiting deliveries, and stranded when it has waiting ones and no worker.
    fn leave(&mut self, destination: DestinationId) {
        if let Some(lane) = self.lanes.get_mut(&destination) {
            lane.workers = lane.workers.saturating_sub(1);
            if lane.workers == 0 {
                if lane.waiting.is_empty() {
                    self.lanes.remove(&destination);
                } else {
                    self.stranded.push_back(destination);
                }
            }
        }
    }

    /// A worker without a lane joins `destination`'s if it has waiting deliveries and
    /// room: the first one still young enough to send.
    fn join(
        &mut self,
        destination: DestinationId,
        cap: usize,
        stale: &mut Vec<Waiting>,
    ) -> Option<Waiting> {
        let lane = self.lanes.get_mut(&destination)?;
        if lane.workers >= cap || lane.waiting.is_empty() {
            return None;
        }
        lane.workers += 1;
        let next = self.pop(destination, stale);
        if next.is_none() {
            self.leave(destination);
        }
        next
    }

    /// Parks `w` in its lane, noting the lane as stranded if no worker serves it (once:
    /// when its first delivery comes to wait).
    fn park(&mut self, w: Waiting) {
        let destination = w.destination();
        let lane = self.lanes.entry(destination).or_default();
        lane.waiting.push_back(w);
        if lane.workers == 0 && lane.waiting.len() == 1 {
            self.stranded.push_back(destination);
        }
    }

    /// A worker without a lane joins the first stranded lane that still needs one.
    fn unstrand(&mut self, cap: usize, stale: &mut Vec<Waiting>) -> Option<Waiting> {
        while let Some(other) = self.stranded.pop_front() {
            if let Some(w) = self.join(other, cap, stale) {
                return Some(w);
            }
        }
        None
    }
}

impl Lanes {
    fn lock(&self) -> std::sync::MutexGuard<'_, LanesInner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A claimed delivery comes in: a worker for it (`permit`, or one taken from
    /// `permits`) when its lane has fewer than `cap` workers; otherwise it waits in its lane.
    fn enter(
        &self,
        w: Waiting,
        cap: usize,
        permit: Option<OwnedSemaphorePermit>,
        permits: Option<&Arc<Semaphore>>,
    ) -> Option<(Waiting, OwnedSemaphorePermit)> {
        let mut inner = self.lock();
        let lane = inner.lanes.entry(w.destination()).or_default();
        if lane.workers < cap {
            let permit =
                permit.or_else(|| permits.and_then(|p| p.clone().try_acquire_owned().ok()));
            if let Some(permit) = permit {
                lane.workers += 1;
                return Some((w, permit));
            }
        }
        inner.park(w);
        None
    }

    /// A worker of `destination` ended an attempt (which took less than
    /// `Ahead::fast_attempt_ms` when `fast`): the waiting delivery it goes on with, if it `may`.
    fn next_of(&self, destination: DestinationId, fast: bool, may: bool) -> Taken {
        let mut inner = self.lock();
        if let Some(lane) = inner.lanes.get_mut(&destination) {
            lane.fast = fast;
        }
        let mut stale = Vec::new();
        let next = may.then(|| inner.pop(destination, &mut stale)).flatten();
        Taken::waited(next, stale)
    }

    /// A worker of `destination` is done with its delivery and was `offered` another (a
    /// successor its record claimed): what it goes on with. An offer for its own lane, at
    /// once; one for another lane waits there; then its own lane's waiting deliveries
    /// first, else it leaves its lane and joins the offer's, or a stranded one.
    fn carry_on(
        &self,
        destination: DestinationId,
        offered: Option<Waiting>,
        cap: usize,
        stopping: bool,
    ) -> Taken {
        let mut inner = self.lock();
        let mut stale = Vec::new();
        let mut elsewhere = None;
        if let Some(w) = offered {
            if w.destination() == destination {
                return Taken {
                    next: Some(w),
                    waited: false,
                    stale,
                };
            }
            elsewhere = Some(w.destination());
            inner.park(w);
        }
        if !stopping {
            if let Some(w) = inner.pop(destination, &mut stale) {
                return Taken::waited(Some(w), stale);
            }
        }
        inner.leave(destination);
        if stopping {
            return Taken::waited(None, stale);
        }
        let next = elsewhere
            .and_then(|to| inner.join(to, cap, &mut stale))
            .or_else(|| inner.unstrand(cap, &mut stale));
        Taken::waited(next, stale)
    }

    /// A new worker (a permit came free) for a stranded lane, if one needs it.
    fn stranded(&self, cap: usize) -> Taken {
        let mut inner = self.lock();
        let mut stale = Vec::new();
        let next = inner.unstrand(cap, &mut stale);
        Taken::waited(next, stale)
    }

    /// Whether `destination`'s lane has fewer than `cap` workers.
    fn has_room(&self, destination: DestinationId, cap: usize) -> bool {
        self.lock()
            .lanes
            .get(&destination)
            .is_none_or(|lane| lane.workers < cap)
    }

    /// Of `destinations`, those to claim ahead for: their last attempt was fast.
    fn fast(&self, destinations: &[DestinationId]) -> Vec<DestinationId> {
        let inner = self.lock();
        destinations
            .iter()
            .filter(|d| inner.lanes.get(d).is_some_and(|lane| lane.fast))
            .copied()
            .collect()
    }

    /// Whether the record of an attempt to `destination` should claim its successors in
    /// its own transaction: only where the last record found more due. Elsewhere (every
    /// destination at low load, whose publishes claim their own deliveries) a claim in the
    /// record finds nothing, and on SQLite that claim was most of the record's cost; should
    /// something be due after all, the record's `more_due` hints the engine, which claims.
    fn claims_in_record(&self, destination: DestinationId) -> bool {
        self.lock().more_due.contains(&destination)
    }

    /// Notes what the records of `ended` attempts (destination, `more_due`) found, in order.
    fn note_more_due(&self, ended: &[(DestinationId, Option<bool>)]) {
        let mut inner = self.lock();
        for (destination, more_due) in ended {
            match more_due {
                Some(true) => {
                    if inner.more_due.len() >= MORE_DUE_AT_MOST {
                        inner.more_due.clear();
                    }
                    inner.more_due.insert(*destination);
                }
                Some(false) => {
                    inner.more_due.remove(destination);
                }
                None => {}
            }
        }
    }

    /// Every waiting delivery (the engine stops).
    fn drain(&self) -> Vec<Waiting> {
        let mut inner = self.lock();
        inner.stranded.clear();
        inner
            .lanes
            .values_mut()
            .flat_map(|lane| lane.waiting.drain(..))
            .collect()
    }
}

/// Which finished attempts still leave their destination something to claim: those with
/// more due (`more_due`, `None`: unknown) where the successors claimed for the
/// destination (`got`) did not take every slot the group's attempts to it freed.
fn hints(finished: &[(DestinationId, Option<bool>)], got: &[DestinationId]) -> Vec<Option<bool>> {
    finished
        .iter()
        .map(|(d, more_due)| {
            let ended = finished.iter().filter(|(x, _)| x == d).count();
            let refilled = got.iter().filter(|x| *x == d).count();
            if refilled >= ended {
                Some(false)
            } else {
                *more_due
            }
        })
        .collect()
}

/// The most finished attempts committed together.
const FINISH_BATCH: usize = 256;

/// Added to every rate window: a request leaves a little after its slot is granted, and a
/// receiver counting arrivals must still never see more than the limit in one period.
const RATE_MARGIN_MS: i64 = 25;

impl Engine {
    pub fn new(
        storage: Arc<dyn DispatchQueue>,
        network: ssrf::NetworkPolicy,
        sandbox: Sandbox,
        settings: Settings,
    ) -> anyhow::Result<Self> {
        let network = Arc::new(network);
        let (finisher, finish_queue) = tokio::sync::mpsc::channel(4096);
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would resolve names itself and bypass the SSRF guard.
            .no_proxy()
            .dns_resolver(Arc::new(ssrf::GuardedResolver::new(network.clone())))
            .user_agent(concat!("PartyFlow-Hooks/", env!("CARGO_PKG_VERSION")))
            .pool_idle_timeout(Duration::from_secs(60))
            .build()?;
        Ok(Self {
            client,
            network,
            handle: EngineHandle::default(),
            settings,
            sandbox,
            retries_in_flight: Arc::new(std::sync::atomic::AtomicI64::new(0)),
            finisher,
            finish_queue: Mutex::new(Some(finish_queue)),
            finishing: std::sync::atomic::AtomicUsize::new(0),
            stopping: std::sync::atomic::AtomicBool::new(false),
            metrics: crate::metrics::Dispatch::new(),
            lanes: Lanes::default(),
            ahead: storage.claims_ahead(),
            storage,
        })
    }

    /// The handle through which the rest of the server says that work is due.
    pub fn handle(&self) -> EngineHandle {
        self.handle.clone()
    }

    /// Runs until `shutdown`; then stops claiming, lets in-flight attempts finish for
    /// the grace period, and records the rest as `lost` (retried at once on restart).
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let permits = Arc::new(Semaphore::new(self.settings.concurrency));
        let tracker = TaskTracker::new();
        let cut_short = CancellationToken::new();
        // Publishes start workers for what they claim with these too.
        let _ = self.handle.starter.set(Starter {
            engine: Arc::downgrade(&self),
            permits: permits.clone(),
            tracker: tracker.clone(),
            cut_short: cut_short.clone(),
        });
        let committer = self
            .finish_queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .map(|queue| tokio::spawn(self.clone().commit_finished(queue)));
        let mut last_recovery = 0_i64;
        // Whether the next claim scans the whole queue (else: only hinted destinations).
        let mut rescan = true;
        // Failures in a row of the claim and the idle look-up: the waits grow while the
        // database stays out of reach, so an outage costs no core.
        let mut backoff = super::backoff::Backoff::default();
        tracing::info!(
            concurrency = self.settings.concurrency,
            "dispatch engine started"
        );

        while !shutdown.is_cancelled() {
            let now = now_ms();
            if now - last_recovery >= 1_000 {
                last_recovery = now;
                self.recover_expired(now).await;
            }
            self.unstrand();
            let free = permits.available_permits();
            if free == 0 {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    p = permits.clone().acquire_owned() => drop(p),
                }
                continue;
            }
            let want = free.min(256);
            let (mut targets, maybe) = self.handle.hints.take(want);
            if !maybe.is_empty() {
                // Claim only where something is due (a read), not for every ended attempt.
                match self.storage.due_destinations(&maybe, now).await {
                    Ok(due) => targets.extend(due),
                    Err(e) => {
                        tracing::warn!(error = %e, "looking for due destinations failed; claiming for all hinted");
                        targets.extend(maybe);
                    }
                }
                if targets.is_empty() {
                    continue;
                }
            }
            let claimed = if !targets.is_empty() {
                let next = self.claim_next(targets, want);
                self.storage.claim_for(&next, now).await
            } else if rescan {
                let margin = self.settings.lease_margin.as_millis() as i64;
                let limits = self.claim_limits();
                let claimed = self.storage.claim(now, want as i64, margin, &limits).await;
                // A full batch may have left more behind: look again straight away.
                rescan = matches!(&claimed, Ok(c) if c.deliveries.len() + c.held_by_plan as usize == want);
                claimed
            } else {
                rescan = self.idle(&shutdown, &mut backoff).await;
                continue;
            };
            if claimed.is_ok() {
                backoff.succeeded();
            }
            match claimed {
                Ok(claimed) => {
                    if claimed.held_by_plan > 0 {
                        self.handle.next_due.forget();
                        self.metrics
                            .held_back(crate::metrics::HeldBy::Plan, claimed.held_by_plan);
                    }
                    for work in works(claimed) {
                        // Counted from the claim on, so the next claim's share of retries sees it.
                        let waiting = Waiting::new(work, &self.retries_in_flight);
                        if !self.lanes.has_room(waiting.destination(), self.cap()) {
                            // Claimed ahead: it waits in its lane for one of its workers.
                            self.place(waiting);
                            continue;
                        }
                        let Ok(permit) = permits.clone().acquire_owned().await else {
                            break;
                        };
                        if let Some((w, permit)) =
                            self.lanes.enter(waiting, self.cap(), Some(permit), None)
                        {
                            tracker.spawn(self.clone().deliver(w, cut_short.clone(), permit));
                        }
                    }
                }
                Err(e) => {
                    rescan = true;
                    let wait = backoff.failed();
                    tracing::error!(error = %e, failures = backoff.failures(), wait_ms = wait.as_millis() as u64, "claiming due deliveries failed");
                    // A publish that got through (its hint) means the database is back.
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = self.handle.hints.notify.notified() => {}
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }

        self.stopping.store(true, Ordering::Relaxed);
        tracker.close();
        if tokio::time::timeout(self.settings.shutdown_grace, tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                in_flight = tracker.len(),
                "shutdown grace over: cutting in-flight attempts short"
            );
            cut_short.cancel();
            tracker.wait().await;
        }
        // Claimed ahead and never sent: due again at once, without an attempt.
        let unsent = self.lanes.drain();
        self.metrics.claimed_ahead(false, unsent.len() as u64);
        for w in unsent {
            if let Err(e) = self
                .storage
                .release_claim(w.work.delivery.id, false, now_ms())
                .await
            {
                tracing::warn!(delivery.id = %w.work.delivery.id, error = %e, "giving back a claim failed; its lease will bring it back");
            }
        }
        if let Some(task) = committer {
            task.abort();
        }
        tracing::info!("dispatch engine stopped");
    }

    /// Starts a worker for each delivery a publish claimed ([`EngineHandle::published`]),
    /// with one of `reserved`'s permits each; the rest go back. True when the claim took
    /// fewer than it could, so nothing it left is for the engine to claim now.
    fn start(self: Arc<Self>, starter: &Starter, mut reserved: Reserved, claimed: Claimed) -> bool {
        if claimed.held_by_plan > 0 {
            self.handle.next_due.forget();
            self.metrics
                .held_back(crate::metrics::HeldBy::Plan, claimed.held_by_plan);
        }
        let short = (claimed.deliveries.len() as i64) < reserved.claim.limit;
        for work in works(claimed) {
            // The claim took at most a permit's worth each; past that (never), the lease
            // brings the delivery back.
            let Some(permit) = reserved.permit.split(1) else {
                break;
            };
            let waiting = Waiting::new(work, &self.retries_in_flight);
            if let Some((w, permit)) = self.lanes.enter(waiting, self.cap(), Some(permit), None) {
                starter
                    .tracker
                    .spawn(self.clone().deliver(w, starter.cut_short.clone(), permit));
            }
        }
        short
    }

    /// Group commit: while one batch of finished attempts is being written, the next
    /// ones queue up and go together in the following transaction. No added wait.
    async fn commit_finished(
        self: Arc<Self>,
        mut queue: tokio::sync::mpsc::Receiver<FinishRequest>,
    ) {
        while let Some(first) = queue.recv().await {
            let mut batch = vec![first];
            while batch.len() < FINISH_BATCH {
                match queue.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            let (finished, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            for (reply, recorded) in replies.into_iter().zip(self.record(&finished).await) {
                match reply {
                    Reply::Waiting(reply) => {
                        let _ = reply.send(recorded);
                    }
                    Reply::Detached(detached) => {
                        self.finishing.fetch_sub(1, Ordering::AcqRel);
                        let Detached {
                            settling,
                            _token,
                            _permit,
                        } = *detached;
                        self.settle_detached(settling, recorded);
                        // Its permit is free again: a stranded lane may take it.
                        drop(_permit);
                        self.unstrand();
                    }
                }
            }
        }
    }

    /// A detached attempt's record ([`Engine::detach`]) is in: settle it, hint its
    /// destination, and place the successor claimed for it in its lane.
    fn settle_detached(
        self: &Arc<Self>,
        settling: Settling,
        recorded: Result<Recorded, StorageError>,
    ) {
        let (delivery, destination) = (settling.delivery, settling.destination);
        let ended = match recorded {
            Ok(recorded) => self.settle(settling, recorded),
            Err(e) => {
                tracing::error!(delivery.id = %delivery, error = %e, "recording an attempt failed; the lease will bring it back");
                Ended::default()
            }
        };
        self.hint(destination, ended.hint);
        if let Some(next) = ended.next {
            self.place(next);
        }
    }

    /// A claimed delivery no worker holds goes to its lane: a worker of its own when the
    /// lane has room and a permit is free, else it waits there.
    fn place(self: &Arc<Self>, w: Waiting) {
        let Some(starter) = self.handle.starter.get() else {
            return; // the engine is gone: the lease brings it back
        };
        if let Some((w, permit)) = self
            .lanes
            .enter(w, self.cap(), None, Some(&starter.permits))
        {
            starter
                .tracker
                .spawn(self.clone().deliver(w, starter.cut_short.clone(), permit));
        }
    }

    /// Starts a worker for each stranded lane ([`Lanes`]) while permits are free: called
    /// when permits come free outside a worker (a detached record written, the run loop).
    fn unstrand(self: &Arc<Self>) {
        let Some(starter) = self.handle.starter.get() else {
            return;
        };
        if self.stopping.load(Ordering::Relaxed) {
            return;
        }
        while let Ok(permit) = starter.permits.clone().try_acquire_owned() {
            let taken = self.lanes.stranded(self.cap());
            self.give_back(taken.stale);
            let Some(w) = taken.next else {
                return;
            };
            self.metrics.claimed_ahead(true, 1);
            starter
                .tracker
                .spawn(self.clone().deliver(w, starter.cut_short.clone(), permit));
        }
    }

    /// Gives back, due at once and without an attempt, deliveries claimed ahead that
    /// waited too long to be sent ([`AHEAD_WAITS_AT_MOST`]).
    fn give_back(self: &Arc<Self>, stale: Vec<Waiting>) {
        if stale.is_empty() {
            return;
        }
        self.metrics.claimed_ahead(false, stale.len() as u64);
        let Some(starter) = self.handle.starter.get() else {
            return; // the engine is gone: the leases bring them back
        };
        let engine = self.clone();
        starter.tracker.spawn(async move {
            for w in stale {
                let d = &w.work.delivery;
                match engine.storage.release_claim(d.id, false, now_ms()).await {
                    Ok(()) => engine.handle.hints.due([d.destination_id], true),
                    Err(e) => {
                        tracing::warn!(delivery.id = %d.id, error = %e, "giving back a claim failed; its lease will bring it back")
                    }
                }
            }
        });
    }

    /// The in-flight cap of a destination in this process (docs §2.5).
    fn cap(&self) -> usize {
        self.settings.per_destination_in_flight.max(1) as usize
    }

    /// Hints `destination` as an ended attempt's record said ([`Ended::hint`]).
    fn hint(&self, destination: DestinationId, hint: Option<bool>) {
        match hint {
            Some(false) => {}
            Some(true) => self.handle.hints.due([destination], true),
            None => self.handle.hints.due([destination], false),
        }
    }

    /// What a claim may take now: the per-destination cap, the retries' share of the
    /// concurrency not yet taken, the plans' limits.
    fn claim_limits(&self) -> ClaimLimits {
        let retry_capacity =
            (self.settings.concurrency as f64 * self.settings.retry_share).floor() as i64;
        ClaimLimits {
            per_destination: self.settings.per_destination_in_flight,
            retries: (retry_capacity - self.retries_in_flight.load(Ordering::Relaxed)).max(0),
            plans: Some(PlanLimits {
                per_second: self.settings.plan_per_second,
                window_ms: 1_000 + RATE_MARGIN_MS,
            }),
        }
    }

    /// Records a group of finished attempts in one transaction, with a claim for the slots
    /// they free (a successor for each worker, which goes on with it under the permit it
    /// holds: no hint, no wake-up of the engine's loop, no new task) where their
    /// destination had more due at its last record ([`Lanes::claims_in_record`]). If that
    /// fails, one by one and without successors, so one bad row does not fail its
    /// neighbours. An answer for each, in order.
    ///
    /// A fast destination ([`Lanes::fast`]) is claimed ahead for where the backend allows it
    /// ([`ClaimNext::ahead`]): up to a cap's worth more, which wait in its lane for a worker.
    async fn record(
        self: &Arc<Self>,
        finished: &[FinishedAttempt],
    ) -> Vec<Result<Recorded, StorageError>> {
        let rule = &self.settings.auto_disable;
        let mut destinations: Vec<DestinationId> = Vec::new();
        if !self.stopping.load(Ordering::Relaxed) {
            for f in finished {
                if !destinations.contains(&f.destination_id)
                    && self.lanes.claims_in_record(f.destination_id)
                {
                    destinations.push(f.destination_id);
                }
            }
        }
        let next = self.claim_next(destinations, finished.len());
        match self
            .storage
            .finish_and_claim(finished, rule, now_ms(), &next)
            .await
        {
            Ok((effects, claimed)) => self.successors(finished, effects, claimed),
            Err(_) => {
                let mut each = Vec::with_capacity(finished.len());
                for f in finished {
                    each.push(self.record_alone(f).await);
                }
                each
            }
        }
    }

    /// A claim for `destinations`: `limit` deliveries, and `Ahead::caps - 1` caps' worth
    /// more for each of them claimed ahead for ([`ClaimNext::ahead`]): those whose last
    /// attempt was fast ([`Lanes::fast`]), where the backend allows it.
    fn claim_next(&self, destinations: Vec<DestinationId>, limit: usize) -> ClaimNext {
        // How many more than the cap each destination claimed ahead for may take.
        let depth = self.cap() * (self.ahead.caps.max(1) as usize - 1);
        let mut ahead = if depth > 0 {
            self.lanes.fast(&destinations)
        } else {
            Vec::new()
        };
        // Only as many as the free permits can send on without waiting for their records
        // ([`Detached`]): a claim ahead whose worker waits for its record ages instead. And
        // half the permits are kept for the engine's own claims: a busy engine (many
        // destinations at once) gains nothing by claiming ahead, its claims do.
        let free = self
            .handle
            .starter
            .get()
            .map_or(0, |s| s.permits.available_permits());
        let spare = free.saturating_sub(self.settings.concurrency / 2);
        ahead.truncate(spare.checked_div(depth).unwrap_or(0));
        let limit = limit + ahead.len() * depth;
        ClaimNext {
            destinations,
            ahead,
            limit: limit as i64,
            lease_margin_ms: self.settings.lease_margin.as_millis() as i64,
            limits: self.claim_limits(),
        }
    }

    /// Hands the successors `claimed` for a group of `finished` attempts to their workers,
    /// one each, in order, and says which destinations still need a claim ([`hints`]).
    fn successors(
        self: &Arc<Self>,
        finished: &[FinishedAttempt],
        effects: Vec<FinishEffects>,
        claimed: Claimed,
    ) -> Vec<Result<Recorded, StorageError>> {
        if claimed.held_by_plan > 0 {
            self.handle.next_due.forget();
            self.metrics
                .held_back(crate::metrics::HeldBy::Plan, claimed.held_by_plan);
        }
        let ended: Vec<(DestinationId, Option<bool>)> = finished
            .iter()
            .zip(&effects)
            .map(|(f, e)| (f.destination_id, e.more_due))
            .collect();
        self.lanes.note_more_due(&ended);
        let got: Vec<DestinationId> = claimed
            .deliveries
            .iter()
            .map(|d| d.destination_id)
            .collect();
        let mut next = works(claimed);
        let recorded = effects
            .into_iter()
            .zip(hints(&ended, &got))
            .map(|(effects, hint)| {
                Ok(Recorded {
                    effects,
                    next: next.next(),
                    hint,
                })
            })
            .collect();
        // Claimed ahead, beyond a successor for each attempt: to their lanes.
        for work in next {
            self.place(Waiting::new(work, &self.retries_in_flight));
        }
        recorded
    }

    /// Records a finished attempt through the group commit. One that finds nothing else on
    /// its way (every attempt at low load) is written here, a group of one, without
    /// handing it to the committing task and back (two thread wake-ups); those that end
    /// meanwhile queue for the task.
    async fn finish(self: &Arc<Self>, finished: FinishedAttempt) -> Result<Recorded, StorageError> {
        let (_counted, alone) = crate::storage::group_commit::Pending::enter(&self.finishing);
        if alone {
            return self
                .record(std::slice::from_ref(&finished))
                .await
                .pop()
                .unwrap_or_else(|| {
                    Err(StorageError::Internal(
                        "a finished attempt was not recorded".into(),
                    ))
                });
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        if let Err(tokio::sync::mpsc::error::SendError((finished, _))) =
            self.finisher.send((finished, Reply::Waiting(reply))).await
        {
            return self.record_alone(&finished).await;
        }
        match answer.await {
            Ok(result) => result,
            Err(_) => Err(StorageError::Conflict(
                "the engine stopped before the attempt was recorded".into(),
            )),
        }
    }

    /// Hands a finished attempt to the committing task without waiting for its record: its
    /// worker goes on with a delivery claimed ahead meanwhile, and the task settles the
    /// record ([`Engine::settle_detached`]). The engine's shutdown waits for it.
    async fn detach(
        self: &Arc<Self>,
        finished: FinishedAttempt,
        settling: Settling,
        permit: OwnedSemaphorePermit,
    ) {
        let token = self.handle.starter.get().map(|s| s.tracker.token());
        self.finishing.fetch_add(1, Ordering::AcqRel);
        let reply = Reply::Detached(Box::new(Detached {
            settling,
            _token: token,
            _permit: permit,
        }));
        if let Err(tokio::sync::mpsc::error::SendError((finished, Reply::Detached(detached)))) =
            self.finisher.send((finished, reply)).await
        {
            self.finishing.fetch_sub(1, Ordering::AcqRel);
            let recorded = self.record_alone(&finished).await;
            self.settle_detached(detached.settling, recorded);
        }
    }

    /// Records one finished attempt in a transaction of its own, claiming no successor:
    /// when a group's record failed, or the committing task is gone.
    async fn record_alone(&self, finished: &FinishedAttempt) -> Result<Recorded, StorageError> {
        let effects = self
            .storage
            .finish_attempt(finished, &self.settings.auto_disable, now_ms())
            .await?;
        Ok(Recorded {
            hint: effects.more_due,
            effects,
            next: None,
        })
    }

    /// Sleeps until the next delivery is due, a wake-up, a hint, or shutdown. When
    /// deliveries are due but none could be claimed (their destinations are at their
    /// in-flight cap), the attempts ending will hint their destinations; the full scan
    /// then waits a little instead of asking the database again at once.
    /// Returns whether the next claim should scan the whole queue.
    async fn idle(
        &self,
        shutdown: &CancellationToken,
        backoff: &mut super::backoff::Backoff,
    ) -> bool {
        let poll = self.settings.idle_poll;
        let now = now_ms();
        let next_due = match self.handle.next_due.known(now) {
            Some(known) => Ok(known),
            None => {
                let read = self.storage.next_due_at().await;
                if let Ok(at) = read {
                    self.handle.next_due.set(at);
                }
                read
            }
        };
        if next_due.is_ok() {
            backoff.succeeded();
        }
        let sleep = match next_due {
            Ok(Some(at)) if at <= now => poll.min(Duration::from_millis(100)),
            Ok(Some(at)) => {
                Duration::from_millis((at - now).clamp(0, poll.as_millis() as i64) as u64)
            }
            Ok(None) => poll,
            Err(e) => {
                let wait = backoff.failed();
                tracing::error!(error = %e, failures = backoff.failures(), "reading the next due time failed");
                poll.max(wait)
            }
        };
        let rescan = tokio::select! {
            _ = shutdown.cancelled() => true,
            _ = self.handle.wake.notified() => true,
            _ = self.handle.hints.notify.notified() => false,
            _ = tokio::time::sleep(sleep) => true,
        };
        // Woken by a timer or without names: read the queue's next due time afresh.
        if rescan {
            self.handle.next_due.forget();
        }
        rescan
    }

    /// Claims whose lease ran out belong to a worker that died: record them as `lost`.
    async fn recover_expired(&self, now: UnixMs) {
        let expired = match self.storage.expired_claims(now, 500).await {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "looking for expired claims failed");
                return;
            }
        };
        let recovered = !expired.is_empty();
        for d in expired {
            let attempt = lost_attempt(
                &d,
                now,
                "the attempt was cut short (the worker stopped) and its lease expired",
            );
            let finished = FinishedAttempt {
                attempt,
                destination_id: d.destination_id,
                next: NextStep::Lost {
                    retry_at: now,
                    crashed: true,
                },
                only_if_lease_expired_before: Some(now),
            };
            let recorded = self
                .storage
                .finish_attempt(&finished, &self.settings.auto_disable, now)
                .await;
            if let Ok(effects) = &recorded {
                self.count(&finished, effects);
            }
            match recorded {
                Ok(e) if e.lost_for_good => {
                    tracing::error!(delivery.id = %d.id, "a delivery was lost three times in a row and failed")
                }
                Ok(e) if e.applied => {
                    tracing::warn!(delivery.id = %d.id, "recovered a lost attempt")
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(delivery.id = %d.id, error = %e, "recording a lost attempt failed")
                }
            }
        }
        if recovered {
            // Due again at once, now written: the idle engine must not sleep on an older time.
            self.handle.next_due.forget();
        }
    }

    /// A worker: delivers `work`, then each delivery its lane gives it (a successor its
    /// record claimed, one claimed ahead), under one permit, one attempt at a time.
    async fn deliver(
        self: Arc<Self>,
        work: Waiting,
        cut_short: CancellationToken,
        _permit: OwnedSemaphorePermit,
    ) {
        let cap = self.cap();
        let mut work = Some(work);
        while let Some(Waiting {
            work:
                Work {
                    delivery: d,
                    destination,
                    event,
                },
            retry,
            ..
        }) = work.take()
        {
            let in_flight = self.metrics.in_flight();
            let ended = match self
                .try_deliver(&d, destination, event, retry, &cut_short)
                .await
            {
                Ok(ended) => ended,
                Err(e) => {
                    tracing::error!(delivery.id = %d.id, error = %e, "delivery step failed; the lease will bring it back");
                    Ended::default()
                }
            };
            drop(in_flight);
            // A slot to this destination is free: its next due delivery, if any, can go. When
            // the record of the attempt said whether one is due, or claimed it, the engine
            // need not look.
            self.hint(d.destination_id, ended.hint);
            let stopping = self.stopping.load(Ordering::Relaxed);
            let taken = self
                .lanes
                .carry_on(d.destination_id, ended.next, cap, stopping);
            self.give_back(taken.stale);
            if taken.waited {
                self.metrics.claimed_ahead(true, 1);
            }
            work = taken.next;
        }
    }

    async fn try_deliver(
        self: &Arc<Self>,
        d: &Delivery,
        destination: Option<Arc<Destination>>,
        event: Option<Arc<Event>>,
        retry: RetryGuard,
        cut_short: &CancellationToken,
    ) -> Result<Ended, StorageError> {
        // Read by the claim, in its transaction; without it (deleted meanwhile), read here.
        let destination = match destination {
            Some(dst) => dst,
            None => match self.storage.destination_of(d).await {
                Ok(dst) => Arc::new(dst),
                Err(StorageError::NotFound) => return Ok(Ended::default()), // deleted with its deliveries
                Err(e) => return Err(e),
            },
        };
        if destination.status == DestinationStatus::Inactive {
            return self
                .storage
                .release_claim(d.id, true, now_ms())
                .await
                .map(|()| Ended::default());
        }
        // Read by the claim; a delivery without it (its event deleted meanwhile) reads it
        // here, and finds it gone.
        let event = match event {
            Some(event) => event,
            None => Arc::new(self.storage.event_of(d).await?),
        };
        let policy = RetryPolicy::parse(Some(&destination.retry_policy), Some(destination.max_attempts))
            .unwrap_or_else(|e| {
                tracing::error!(destination.id = %destination.id, error = %e, "stored retry policy is invalid; using the default");
                RetryPolicy::parse(None, None).expect("the default policy is valid")
            });

        // Rate limits, last thing before the request so a slot's time is the send's time:
        // the destination's own, then the plan's share of the space. A "not now" gives the
        // delivery back without an attempt, due when the slot frees.
        if let Some(limit) = destination.rate_limit {
            let key = format!("dst:{}", destination.id);
            let window = limit.period.as_millis() + RATE_MARGIN_MS;
            if let Slot::Wait(ms) = self
                .storage
                .take_rate_slot(&key, i64::from(limit.count), window, now_ms())
                .await?
            {
                let now = now_ms();
                self.metrics
                    .held_back(crate::metrics::HeldBy::Destination, 1);
                let deferred = self
                    .storage
                    .defer_rate_limited(d.id, RateScope::Destination(destination.id), now + ms, now)
                    .await;
                // Forgotten once written, so a read before the write cannot stay known.
                self.handle.next_due.forget();
                return deferred.map(|()| Ended::default());
            }
        }

        let started = now_ms();
        if d.attempts == 0 {
            let lag = crate::metrics::lag_ms(d.created_at, d.deliver_at, started);
            self.metrics
                .first_attempt_lag(Duration::from_millis(lag as u64));
        }
        let outcome = tokio::select! {
            outcome = self.attempt(d, &destination, &event) => outcome,
            _ = cut_short.cancelled() => {
                let attempt = lost_attempt(d, started, "the attempt was cut short by a shutdown");
                let finished = FinishedAttempt {
                    attempt,
                    destination_id: d.destination_id,
                    next: NextStep::Lost { retry_at: now_ms(), crashed: false },
                    only_if_lease_expired_before: None,
                };
                let effects = self.storage.finish_attempt(&finished, &self.settings.auto_disable, now_ms()).await?;
                self.handle.next_due.forget();
                self.count(&finished, &effects);
                return Ok(Ended::default());
            }
        };

        let now = now_ms();
        let attempts_made = (d.attempts + 1) as u32;
        let next = match outcome.attempt.error_class {
            _ if outcome.not_our_receivers_fault => NextStep::Lost {
                retry_at: now + SANDBOX_RETRY_MS,
                crashed: false,
            },
            None => NextStep::Succeeded,
            Some(class) => {
                let status = outcome.attempt.response_status.map(|s| s as u16);
                let jitter = rand::thread_rng().gen::<f64>();
                match policy.decide(attempts_made, class, status, outcome.retry_after_ms, jitter) {
                    Decision::Retry { delay_ms } => NextStep::Retry {
                        at: now + delay_ms as i64,
                    },
                    Decision::DeadLetter => NextStep::DeadLetter,
                }
            }
        };
        let finished = FinishedAttempt {
            attempt: outcome.attempt,
            destination_id: d.destination_id,
            next,
            only_if_lease_expired_before: None,
        };
        let settling = Settling {
            delivery: d.id,
            destination: d.destination_id,
            attempt: attempts_made,
            next,
            status: finished.attempt.response_status,
            class: finished.attempt.error_class,
            duration_ms: finished.attempt.duration_ms,
        };
        // The attempt is over: a retry no longer counts as one in flight.
        drop(retry);
        // A delivery claimed ahead for this destination goes now, while this one's record is
        // written by the committing task.
        let fast = settling.duration_ms < self.ahead.fast_attempt_ms;
        // Only with a permit free for the record (see [`Detached`]).
        let permit = match self.handle.starter.get() {
            Some(starter) if !self.stopping.load(Ordering::Relaxed) => {
                starter.permits.clone().try_acquire_owned().ok()
            }
            _ => None,
        };
        let taken = self.lanes.next_of(d.destination_id, fast, permit.is_some());
        self.give_back(taken.stale);
        if let (Some(ahead), Some(permit)) = (taken.next, permit) {
            self.metrics.claimed_ahead(true, 1);
            self.detach(finished, settling, permit).await;
            return Ok(Ended {
                hint: Some(false),
                next: Some(ahead),
            });
        }
        let recorded = self.finish(finished).await?;
        Ok(self.settle(settling, recorded))
    }

    /// What follows an attempt's record: the idle engine's next due time forgotten when the
    /// delivery is due again, the metrics, the log; the hint and the successor for its worker.
    fn settle(&self, s: Settling, recorded: Recorded) -> Ended {
        let Recorded {
            effects,
            next: successor,
            hint,
        } = recorded;
        // Due again later, maybe before the time the idle engine knows.
        if matches!(s.next, NextStep::Retry { .. } | NextStep::Lost { .. }) {
            // Forgotten once written (the hint that follows wakes the idle engine), so a
            // read made before the write cannot stay known.
            self.handle.next_due.forget();
        }
        self.count_parts(s.next, s.class, Some(s.duration_ms), &effects);
        tracing::debug!(
            delivery.id = %s.delivery,
            destination.id = %s.destination,
            attempt = s.attempt,
            status = ?s.status,
            error_class = ?s.class.map(|c| c.as_str()),
            duration_ms = s.duration_ms,
            next = ?s.next,
            "attempt recorded"
        );
        if effects.destination_disabled {
            tracing::warn!(destination.id = %s.destination, "destination auto-disabled after a dead-letter streak");
        }
        Ended {
            hint,
            next: successor.map(|work| Waiting::new(work, &self.retries_in_flight)),
        }
    }

    /// The metrics of a recorded attempt (nothing when it was no longer ours).
    fn count(&self, f: &FinishedAttempt, effects: &crate::storage::FinishEffects) {
        self.count_parts(f.next, f.attempt.error_class, None, effects);
    }

    /// [`Engine::count`] from its parts; `duration_ms` for an attempt that ran (not one
    /// recovered from a lost claim).
    fn count_parts(
        &self,
        next: NextStep,
        class: Option<ErrorClass>,
        duration_ms: Option<i64>,
        effects: &crate::storage::FinishEffects,
    ) {
        if !effects.applied {
            return;
        }
        self.metrics.attempt(class, duration_ms);
        match next {
            NextStep::Succeeded => self.metrics.finished(crate::metrics::Outcome::Succeeded),
            NextStep::DeadLetter => self.metrics.finished(crate::metrics::Outcome::Failed),
            _ if effects.lost_for_good => self.metrics.finished(crate::metrics::Outcome::Failed),
            _ => {}
        }
        if effects.destination_disabled {
            self.metrics.destination_disabled();
        }
    }

    /// One HTTP attempt, never failing: every problem becomes an error class on the attempt.
    async fn attempt(
        &self,
        d: &Delivery,
        destination: &Destination,
        event: &Event,
    ) -> AttemptOutcome {
        let started = now_ms();
        let clock = std::time::Instant::now();
        let mut attempt = Attempt {
            id: AttemptId::new(),
            delivery_id: d.id,
            space_id: d.space_id,
            attempt_number: d.attempts + 1,
            started_at: started,
            duration_ms: 0,
            request_url: destination.url.clone(),
            request_headers: serde_json::json!({}),
            request_body: String::new(),
            response_status: None,
            response_headers: None,
            response_body: None,
            error_class: None,
            error_message: None,
        };
        let fail = |mut attempt: Attempt, class: ErrorClass, message: String| {
            attempt.error_class = Some(class);
            attempt.error_message = Some(message);
            attempt.duration_ms = clock.elapsed().as_millis() as i64;
            AttemptOutcome {
                attempt,
                retry_after_ms: None,
                not_our_receivers_fault: false,
            }
        };

        // The body: the payload, or what the destination's transformation makes of it
        // (in the sandbox: whatever the program does, it cannot reach this process).
        let body = match &destination.transformation {
            None => event.payload.to_string(),
            Some(program) => {
                // Serialized once (not re-parsed) and handed to the worker as it is.
                let input = match serde_json::value::to_raw_value(&event.payload) {
                    Ok(input) => input,
                    Err(e) => {
                        let why = format!("the payload cannot be serialized: {e}");
                        return fail(attempt, ErrorClass::Transformation, why);
                    }
                };
                match self.sandbox.run(program, &input).await {
                    Ok(output) => output,
                    Err(e) => {
                        attempt.request_body = input.get().to_owned();
                        // The sandbox failing to run at all is ours, not the program's.
                        let ours = matches!(e, TransformError::Unavailable(_));
                        let class = if ours {
                            ErrorClass::Lost
                        } else {
                            ErrorClass::Transformation
                        };
                        let mut outcome = fail(attempt, class, e.to_string());
                        outcome.not_our_receivers_fault = ours;
                        return outcome;
                    }
                }
            }
        };
        attempt.request_body = body.clone();

        let url = match url::Url::parse(&destination.url) {
            Ok(u) => u,
            Err(e) => return fail(attempt, ErrorClass::Request, format!("invalid URL: {e}")),
        };
        match ssrf::check_url(&url, &self.network) {
            Ok(()) => {}
            Err(ssrf::UrlRejected::Blocked(b)) => {
                return fail(attempt, ErrorClass::Blocked, b.to_string())
            }
            Err(ssrf::UrlRejected::Invalid(why)) => return fail(attempt, ErrorClass::Request, why),
        }

        // Standard Webhooks headers; during a rotation, one signature per valid secret.
        let msg_id = d.webhook_id();
        let timestamp = started / 1000;
        let mut secrets = vec![destination.secret.as_str()];
        if let (Some(old), Some(until)) = (
            &destination.previous_secret,
            destination.previous_secret_expires_at,
        ) {
            if until > started {
                secrets.push(old.as_str());
            }
        }
        let signature =
            match signing::signature_header(&secrets, &msg_id, timestamp, body.as_bytes()) {
                Ok(s) => s,
                Err(e) => return fail(attempt, ErrorClass::Request, format!("cannot sign: {e}")),
            };
        let headers = [
            ("content-type", "application/json".to_owned()),
            ("webhook-id", msg_id.clone()),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", signature),
        ];
        // The destination's own headers (docs §2.9), never one of ours: in the log
        // masked, as the API shows them.
        let own = match own_headers(&destination.headers) {
            Ok(own) => own,
            Err(why) => return fail(attempt, ErrorClass::Request, why),
        };
        let mut logged: serde_json::Map<String, serde_json::Value> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(v.clone())))
            .collect();
        for (name, value) in destination.headers.iter() {
            if own.contains_key(name) {
                logged.insert(name.to_owned(), mask_header_value(value).into());
            }
        }
        attempt.request_headers = serde_json::Value::Object(logged);
        let mut request = self
            .client
            .post(url)
            .timeout(Duration::from_secs(
                destination.timeout_seconds.clamp(1, 60) as u64,
            ))
            .headers(own)
            .body(body);
        for (k, v) in &headers {
            request = request.header(*k, v);
        }

        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                let class = classify::classify_error(&e);
                return fail(attempt, class, error_chain(&e));
            }
        };
        let status = response.status().as_u16();
        attempt.response_status = Some(i64::from(status));
        attempt.response_headers = Some(kept_headers(response.headers(), RESPONSE_HEADERS_LIMIT));
        let retry_after_header = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body = Vec::new();
        let mut body_error = None;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = RESPONSE_BODY_LIMIT - body.len();
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if body.len() >= RESPONSE_BODY_LIMIT {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    body_error = Some(e);
                    break;
                }
            }
        }
        attempt.response_body = Some(String::from_utf8_lossy(&body).into_owned());
        attempt.duration_ms = clock.elapsed().as_millis() as i64;

        match classify::classify_status(status) {
            None => {
                // A 2xx is a success even if the body was cut off.
                AttemptOutcome {
                    attempt,
                    retry_after_ms: None,
                    not_our_receivers_fault: false,
                }
            }
            Some(class) => {
                let retry_after = retry_after::parse_retry_after(
                    status,
                    retry_after_header.as_deref(),
                    &body,
                    SystemTime::now(),
                )
                .map(|d| d.as_millis() as u64);
                attempt.error_class = Some(class);
                attempt.error_message = Some(match (class, body_error) {
                    (ErrorClass::Redirect, _) => {
                        format!("answered {status}; redirects are not followed")
                    }
                    (_, Some(e)) => format!(
                        "answered {status}; reading the body failed: {}",
                        error_chain(&e)
                    ),
                    _ => format!("answered {status}"),
                });
                AttemptOutcome {
                    attempt,
                    retry_after_ms: retry_after,
                    not_our_receivers_fault: false,
                }
            }
        }
    }
}

/// A claim's deliveries, each with its destination and event.
fn works(claimed: Claimed) -> impl Iterator<Item = Work> {
    let Claimed {
        deliveries,
        mut events,
        destinations,
        ..
    } = claimed;
    deliveries.into_iter().map(move |delivery| Work {
        event: events.remove(&delivery.id),
        destination: destinations.get(&delivery.destination_id).cloned(),
        delivery,
    })
}

/// Counts a retry in flight for as long as it lives.
struct RetryGuard(Option<Arc<std::sync::atomic::AtomicI64>>);

impl RetryGuard {
    fn new(is_retry: bool, counter: &Arc<std::sync::atomic::AtomicI64>) -> Self {
        if is_retry {
            counter.fetch_add(1, Ordering::Relaxed);
            RetryGuard(Some(counter.clone()))
        } else {
            RetryGuard(None)
        }
    }
}

impl Drop for RetryGuard {
    fn drop(&mut self) {
        if let Some(c) = &self.0 {
            c.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

struct AttemptOutcome {
    attempt: Attempt,
    retry_after_ms: Option<u64>,
    /// The attempt failed on our side before any request (the sandbox could not
    /// run): retried later without using up an attempt.
    not_our_receivers_fault: bool,
}

fn lost_attempt(d: &Delivery, now: UnixMs, why: &str) -> Attempt {
    Attempt {
        id: AttemptId::new(),
        delivery_id: d.id,
        space_id: d.space_id,
        attempt_number: d.attempts + 1,
        started_at: now,
        duration_ms: 0,
        request_url: String::new(),
        request_headers: serde_json::json!({}),
        request_body: String::new(),
        response_status: None,
        response_headers: None,
        response_body: None,
        error_class: Some(ErrorClass::Lost),
        error_message: Some(why.to_owned()),
    }
}

/// A destination's own headers as sent: marked sensitive (hyper keeps them out of its
/// own logs), reserved names left out whatever is stored (they are refused on save).
fn own_headers(headers: &CustomHeaders) -> Result<reqwest::header::HeaderMap, String> {
    use reqwest::header::{HeaderName, HeaderValue};
    let mut map = reqwest::header::HeaderMap::new();
    for (name, value) in headers.iter() {
        if RESERVED_HEADERS
            .iter()
            .any(|r| r.eq_ignore_ascii_case(name))
        {
            continue;
        }
        let name_ok = HeaderName::from_bytes(name.as_bytes());
        let value_ok = HeaderValue::from_str(value);
        let (Ok(n), Ok(mut v)) = (name_ok, value_ok) else {
            return Err(format!("the custom header {name:?} is not valid HTTP"));
        };
        v.set_sensitive(true);
        map.insert(n, v);
    }
    Ok(map)
}

/// The response headers for the attempt log, in order, until their names and values
/// add up to `limit` bytes; a header that would go over it and all after it are left out.
fn kept_headers(headers: &reqwest::header::HeaderMap, limit: usize) -> serde_json::Value {
    let mut kept = serde_json::Map::new();
    let mut size = 0;
    for (k, v) in headers {
        size += k.as_str().len() + v.len();
        if size > limit {
            break;
        }
        let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
        // One value per name, the last of a repeated one (as the log always kept them).
        kept.insert(k.as_str().to_owned(), serde_json::Value::from(value));
    }
    serde_json::Value::Object(kept)
}

/// An error with its causes, for the attempt log (support staff read it).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

    /// A claimed delivery to `destination`, claimed `ago` ago.
    fn waiting(destination: DestinationId, ago: Duration) -> Waiting {
        let delivery = Delivery {
            id: DeliveryId::new(),
            space_id: SpaceId::new(),
            event_id: EventId::new(),
            destination_id: destination,
            event_type: "x".into(),
            status: DeliveryStatus::Sending,
            paused: false,
            attempts: 0,
            next_attempt_at: None,
            lease_expires_at: None,
            last_error_class: None,
            last_status_code: None,
            resent_from: None,
            resent_as: None,
            created_at: 0,
            updated_at: 0,
            finished_at: None,
            deliver_at: None,
        };
        let counter = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let mut w = Waiting::new(
            Work {
                delivery,
                destination: None,
                event: None,
            },
            &counter,
        );
        w.since = std::time::Instant::now() - ago;
        w
    }

    #[test]
    fn a_lane_has_at_most_its_cap_of_workers_and_its_waiting_deliveries_go_to_them_in_order() {
        let permits = Arc::new(Semaphore::new(64));
        let d = DestinationId::new();
        let lanes = Lanes::default();
        let entered: Vec<_> = (0..7)
            .map(|_| lanes.enter(waiting(d, Duration::ZERO), 5, None, Some(&permits)))
            .collect();
        assert_eq!(entered.iter().filter(|e| e.is_some()).count(), 5);
        assert_eq!(
            permits.available_permits(),
            59,
            "a permit for each worker, none for waiting"
        );
        // A worker whose attempt ended goes on with the first waiting one, then the next.
        let first = lanes.next_of(d, true, true);
        assert!(first.waited && first.next.is_some());
        assert_eq!(lanes.fast(&[d]), vec![d]);
        let second = lanes.carry_on(d, None, 5, false);
        assert!(second.waited && second.next.is_some());
        // Nothing waits: the worker leaves; a slow attempt ends claiming ahead.
        let none = lanes.carry_on(d, None, 5, false);
        assert!(none.next.is_none() && none.stale.is_empty());
        let _ = lanes.next_of(d, false, true);
        assert!(lanes.fast(&[d]).is_empty());
    }

    #[test]
    fn a_lane_with_waiting_deliveries_and_no_worker_is_served_by_the_next_free_worker() {
        let (d, other) = (DestinationId::new(), DestinationId::new());
        let lanes = Lanes::default();
        let none = Arc::new(Semaphore::new(0));
        // No permit: the delivery waits, its lane stranded.
        assert!(lanes
            .enter(waiting(d, Duration::ZERO), 5, None, Some(&none))
            .is_none());
        let permits = Arc::new(Semaphore::new(1));
        let permit = permits.clone().try_acquire_owned().unwrap();
        assert!(lanes
            .enter(waiting(other, Duration::ZERO), 5, Some(permit), None)
            .is_some());
        // The worker of the other lane, done, serves the stranded one.
        let taken = lanes.carry_on(other, None, 5, false);
        assert_eq!(taken.next.map(|w| w.destination()), Some(d));
        assert!(taken.waited);
        // A successor for a full lane waits there; the worker goes on with its own lane's.
        let full = DestinationId::new();
        let many = Arc::new(Semaphore::new(64));
        for _ in 0..5 {
            assert!(lanes
                .enter(waiting(full, Duration::ZERO), 5, None, Some(&many))
                .is_some());
        }
        let taken = lanes.carry_on(d, Some(waiting(full, Duration::ZERO)), 5, false);
        assert!(
            taken.next.is_none(),
            "its own lane has nothing, the full one no room"
        );
        let next = lanes.next_of(full, true, true);
        assert_eq!(next.next.map(|w| w.destination()), Some(full));
    }

    #[test]
    fn a_stranded_lane_gets_a_new_worker_when_a_permit_comes_free() {
        let d = DestinationId::new();
        let lanes = Lanes::default();
        let none = Arc::new(Semaphore::new(0));
        assert!(lanes.stranded(5).next.is_none(), "nothing stranded");
        lanes.enter(waiting(d, Duration::ZERO), 5, None, Some(&none));
        lanes.enter(waiting(d, Duration::ZERO), 5, None, Some(&none));
        let first = lanes.stranded(5);
        assert_eq!(first.next.map(|w| w.destination()), Some(d));
        // Its new worker serves the rest; the lane needs no other.
        assert!(lanes.stranded(5).next.is_none());
        assert!(lanes.next_of(d, true, true).next.is_some());
    }

    #[test]
    fn a_delivery_that_waited_too_long_is_given_back_not_sent_and_stopping_takes_nothing() {
        let d = DestinationId::new();
        let lanes = Lanes::default();
        let none = Arc::new(Semaphore::new(0));
        let old = AHEAD_WAITS_AT_MOST + Duration::from_millis(5);
        lanes.enter(waiting(d, old), 5, None, Some(&none));
        lanes.enter(waiting(d, Duration::ZERO), 5, None, Some(&none));
        let taken = lanes.next_of(d, true, true);
        assert_eq!(taken.stale.len(), 1, "the old one is given back");
        assert!(taken.next.is_some(), "the young one goes");
        lanes.enter(waiting(d, Duration::ZERO), 5, None, Some(&none));
        let stopping = lanes.carry_on(d, None, 5, true);
        assert!(stopping.next.is_none());
        assert_eq!(
            lanes.drain().len(),
            1,
            "what waits is given back at shutdown"
        );
    }

    #[test]
    fn a_record_claims_only_for_destinations_whose_last_record_left_more_due() {
        let lanes = Lanes::default();
        let (a, b) = (DestinationId::new(), DestinationId::new());
        assert!(!lanes.claims_in_record(a), "nothing known: no claim");
        lanes.note_more_due(&[(a, Some(true)), (b, Some(false))]);
        assert!(lanes.claims_in_record(a) && !lanes.claims_in_record(b));
        // Unknown changes nothing; the last of a group wins.
        lanes.note_more_due(&[(a, None), (b, Some(true)), (b, Some(false))]);
        assert!(lanes.claims_in_record(a) && !lanes.claims_in_record(b));
        lanes.note_more_due(&[(a, Some(false))]);
        assert!(!lanes.claims_in_record(a));
        // Bounded: past the most it remembers, it starts afresh.
        let many: Vec<_> = (0..MORE_DUE_AT_MOST)
            .map(|_| (DestinationId::new(), Some(true)))
            .collect();
        lanes.note_more_due(&many);
        lanes.note_more_due(&[(a, Some(true))]);
        assert!(lanes.claims_in_record(a) && !lanes.claims_in_record(many[0].0));
        assert_eq!(lanes.lock().more_due.len(), 1);
    }

    #[test]
    fn a_destination_is_hinted_only_when_its_successors_did_not_take_every_slot_freed() {
        let (a, b, c) = (
            DestinationId::new(),
            DestinationId::new(),
            DestinationId::new(),
        );
        // Two attempts to `a` ended and one successor came: one slot is still free, and
        // what the records said stands. `b` got its successor: nothing to claim, whatever
        // was due. `c` got none: its record decides (here: unknown, the engine looks).
        let ended = [(a, Some(true)), (a, Some(true)), (b, Some(true)), (c, None)];
        assert_eq!(
            hints(&ended, &[a, b]),
            vec![Some(true), Some(true), Some(false), None]
        );
        // Both of `a`'s slots refilled (even from a claim that also served others).
        assert_eq!(
            hints(&ended[..2], &[a, a, b]),
            vec![Some(false), Some(false)]
        );
        assert_eq!(hints(&[(a, Some(false))], &[]), vec![Some(false)]);
    }

    #[test]
    fn response_headers_are_kept_up_to_the_limit_and_no_further() {
        let mut headers = HeaderMap::new();
        for i in 0..10 {
            headers.insert(
                HeaderName::from_bytes(format!("x-h{i}").as_bytes()).unwrap(),
                HeaderValue::from_str(&"v".repeat(96)).unwrap(),
            );
        }
        // Each header is 4 + 96 = 100 bytes: 350 bytes hold three.
        let kept = kept_headers(&headers, 350);
        assert_eq!(kept.as_object().unwrap().len(), 3, "{kept}");
        assert_eq!(kept["x-h0"], "v".repeat(96));
        assert!(kept.get("x-h3").is_none());
        let all = kept_headers(&headers, RESPONSE_HEADERS_LIMIT);
        assert_eq!(all.as_object().unwrap().len(), 10);
    }

    #[test]
    fn a_destinations_own_headers_are_sent_sensitive_and_never_a_reserved_one() {
        let stored = CustomHeaders::new(vec![
            ("Authorization".into(), "Bearer abc".into()),
            // Refused on save; left out should one ever be stored.
            ("Webhook-Signature".into(), "v1,forged".into()),
            ("Host".into(), "evil.example".into()),
        ]);
        let sent = own_headers(&stored).unwrap();
        assert_eq!(sent.len(), 1);
        let auth = &sent["authorization"];
        assert_eq!(auth, "Bearer abc");
        assert!(auth.is_sensitive());

        let broken = CustomHeaders::new(vec![("X-A".into(), "line\nbreak".into())]);
        assert!(own_headers(&broken).unwrap_err().contains("X-A"));
    }
}
