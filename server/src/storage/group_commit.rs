//! Group commit for publishes: concurrent publishes share one transaction.
//!
//! Every accepted event must be on disk before it is answered, and on SQLite a
//! durable commit is an fsync. One fsync per event caps ingest at the disk's
//! sync rate; here, while one group is being committed, the publishes that arrive
//! queue up and go together in the next. There is no added wait: a publish that
//! finds nothing else on its way is written at once, alone, by its caller. Two groups
//! are written at once ([`GROUPS_IN_FLIGHT`]): on SQLite one commits while the one
//! before it waits for the WAL's sync.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::{EventStore, NewEvent, Published, Result, StorageError};
use crate::clock::now_ms;

/// The most events written in one transaction.
pub const MAX_GROUP: usize = 256;

type Request = (NewEvent, oneshot::Sender<Result<Published>>);

/// A handle to the publishing task; cheap to clone. The task ends when every handle is gone.
#[derive(Clone)]
pub struct Publisher {
    queue: mpsc::Sender<Request>,
    storage: Arc<dyn EventStore>,
    /// Publishes on their way to the database: queued, being written by the task, or
    /// being written alone by their caller.
    pending: Arc<AtomicUsize>,
}

impl Publisher {
    /// Starts the task that writes queued publishes to `storage`.
    pub fn start(storage: Arc<dyn EventStore>) -> Self {
        let (queue, requests) = mpsc::channel(4 * MAX_GROUP);
        let pending = Arc::new(AtomicUsize::new(0));
        tokio::spawn(write_groups(storage.clone(), requests));
        Self {
            queue,
            storage,
            pending,
        }
    }

    /// Whether no publish is on its way now: the next one is then likely written alone,
    /// by its caller, the only way a publish claims its own deliveries. Publishes that
    /// queue for a group claim nothing, so they take none of the engine's permits for it.
    pub fn idle(&self) -> bool {
        self.pending.load(Ordering::Acquire) == 0
    }

    /// Writes the event and its deliveries; answers once they are committed. A publish
    /// that finds nothing else on its way (every publish at low load) is written by its
    /// caller, a group of one, without handing it to the task and back (two thread
    /// wake-ups); those that come meanwhile queue for the task, which writes them together
    /// when the gate frees.
    pub async fn publish(&self, new: NewEvent) -> Result<Published> {
        let (_counted, alone) = Pending::enter(&self.pending);
        if alone {
            let mut answers = self
                .storage
                .publish_events(std::slice::from_ref(&new), now_ms())
                .await?;
            return answers.pop().unwrap_or_else(|| Err(stopped()));
        }
        let (reply, answer) = oneshot::channel();
        self.queue.send((new, reply)).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// Work on its way to the database (a publish, a finished attempt) counted in `count`
/// from [`Pending::enter`] until dropped (answered, or given up), to tell whether the next
/// comes alone.
pub(crate) struct Pending<'a>(&'a AtomicUsize);

impl<'a> Pending<'a> {
    /// Counts one more in `count`; `true` when nothing else was on its way.
    pub(crate) fn enter(count: &'a AtomicUsize) -> (Self, bool) {
        let before = count.fetch_add(1, Ordering::AcqRel);
        (Self(count), before == 0)
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn stopped() -> StorageError {
    StorageError::Unavailable("the publishing task stopped".into())
}

/// The error each publish of a group gets when the group's transaction failed: the
/// same kind (so an unreachable database still answers 503), with the group named.
fn for_each_of_group(e: &StorageError) -> StorageError {
    match e {
        StorageError::Unavailable(why) => StorageError::Unavailable(why.clone()),
        StorageError::NotFound => StorageError::NotFound,
        StorageError::Conflict(why) => StorageError::Conflict(why.clone()),
        StorageError::Corrupt(why) => StorageError::Corrupt(why.clone()),
        StorageError::Stale => StorageError::Stale,
        StorageError::Internal(why) => StorageError::Internal(why.clone()),
        StorageError::Other(e) => StorageError::Internal(format!("the group commit failed: {e}")),
    }
}

/// Groups written at once: one committing while the one before it waits for its sync
/// (SQLite's WAL sync comes after the write gate, [`super::durable`]): the next group's
/// commit does not wait for the last one's fsync.
const GROUPS_IN_FLIGHT: usize = 2;

async fn write_groups(storage: Arc<dyn EventStore>, mut requests: mpsc::Receiver<Request>) {
    use futures_util::stream::{FuturesUnordered, StreamExt as _};
    let mut group = Vec::with_capacity(MAX_GROUP);
    let mut in_flight = FuturesUnordered::new();
    let mut open = true;
    loop {
        tokio::select! {
            // `recv_many` is cancel safe: a group not taken now stays queued.
            n = requests.recv_many(&mut group, MAX_GROUP),
                if open && in_flight.len() < GROUPS_IN_FLIGHT =>
            {
                if n == 0 {
                    open = false;
                    continue;
                }
                let (events, replies): (Vec<_>, Vec<_>) = group.drain(..).unzip();
                let storage = storage.clone();
                in_flight.push(async move {
                    let written = storage.publish_events(&events, now_ms()).await;
                    (replies, written)
                });
            }
            Some((replies, written)) = in_flight.next(), if !in_flight.is_empty() => {
                answer(replies, written, &mut requests);
            }
            else => break,
        }
    }
}

/// Answers a group's publishes with what its write did.
fn answer(
    replies: Vec<oneshot::Sender<Result<Published>>>,
    written: Result<Vec<Result<Published>>>,
    requests: &mut mpsc::Receiver<Request>,
) {
    match written {
        Ok(answers) => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(answer);
            }
        }
        // The commit failed: nothing of the group was written; each gets the error.
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(for_each_of_group(&e)));
            }
            // The database is out of reach: those queued behind this group would each
            // wait out the connection timeout again. Answer them now; new publishes
            // try again.
            if matches!(e, StorageError::Unavailable(_)) {
                while let Ok((_, reply)) = requests.try_recv() {
                    let _ = reply.send(Err(for_each_of_group(&e)));
                }
            }
        }
    }
}
