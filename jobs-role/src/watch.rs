//! Watching jobs: their events as they commit, to any number of watchers, from one
//! query per wake-up.
//!
//! A node keeps one [`Watchers`] hub. A watcher registers a job and the outbox `seq`
//! it has seen ([`Watchers::watch`]); the hub's loop ([`Watchers::run`]) wakes when
//! an outbox row commits (the `protomolt_jobs_outbox` notification every event
//! writes, heard on one LISTEN connection the whole node shares), when a watcher
//! registers, and once a second as a safety net, and then reads the new events of
//! every watched job in one statement and hands each watcher its own. Nothing polls
//! per watcher, and it works with the Kafka lanes off.
//!
//! A job's events commit in `seq` order (each is written in the transaction that
//! changed the job, under its row lock), so "after the last `seq` seen" never skips
//! one. A watcher too slow to take its events keeps them waiting in the outbox, not
//! in memory: its position advances only by what it took.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::store::{Store, WatchedEvent};

/// Events a watcher's channel holds before the hub waits for it to take them.
const EVENTS_PER_WATCHER: usize = 64;

/// The safety net: the hub reads at least this often while anyone watches (a
/// notification lost while its listener reconnected).
const SAFETY_NET: Duration = Duration::from_secs(1);

/// The node's watch hub (cheap to clone).
#[derive(Clone)]
pub struct Watchers {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    /// Woken by the outbox listener and by new watchers.
    wake: Arc<Notify>,
    watches: Mutex<HashMap<u64, Watch>>,
    next_id: AtomicU64,
    max: usize,
}

struct Watch {
    job_id: Uuid,
    /// The last `seq` handed over.
    after: i64,
    events: mpsc::Sender<WatchedEvent>,
}

/// The node already has its most watchers ([`crate::JobsConfig::max_watchers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "this node already serves its {0} watchers; try again shortly or watch through another node"
)]
pub struct TooManyWatchers(pub usize);

/// One watcher's registration: its events arrive on [`Watching::events`]; dropping it
/// unregisters.
pub struct Watching {
    id: u64,
    inner: Arc<Inner>,
    /// The job's events after the position given, in order.
    pub events: mpsc::Receiver<WatchedEvent>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.inner
            .watches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

impl Watchers {
    /// A hub over `store` serving at most `max` watchers at once.
    pub fn new(store: Store, max: usize) -> Watchers {
        Watchers {
            inner: Arc::new(Inner {
                store,
                wake: Arc::new(Notify::new()),
                watches: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(0),
                max,
            }),
        }
    }

    /// What the outbox listener wakes (`notify_one`: a wake-up while the hub reads is
    /// kept for its next turn).
    pub fn wake(&self) -> Arc<Notify> {
        self.inner.wake.clone()
    }

    /// How many watchers are registered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when nobody watches.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Watches `job_id`'s events after outbox position `after` (0: all of them).
    pub fn watch(&self, job_id: Uuid, after: i64) -> Result<Watching, TooManyWatchers> {
        let (sender, events) = mpsc::channel(EVENTS_PER_WATCHER);
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut watches = self.lock();
            if watches.len() >= self.inner.max {
                return Err(TooManyWatchers(self.inner.max));
            }
            watches.insert(
                id,
                Watch {
                    job_id,
                    after,
                    events: sender,
                },
            );
        }
        self.inner.wake.notify_one();
        Ok(Watching {
            id,
            inner: self.inner.clone(),
            events,
        })
    }

    /// The hub's loop, until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = self.inner.wake.notified() => {}
                () = tokio::time::sleep(SAFETY_NET) => {}
                () = shutdown.cancelled() => return,
            }
            if let Err(error) = self.hand_out().await {
                tracing::warn!(%error, "watchers: reading the watched jobs' events failed; trying again");
                tokio::select! {
                    () = tokio::time::sleep(SAFETY_NET) => {}
                    () = shutdown.cancelled() => return,
                }
            }
        }
    }

    /// Reads the new events of every watched job and hands each watcher its own.
    async fn hand_out(&self) -> Result<(), crate::store::StoreError> {
        // Each job once, from the earliest position any of its watchers needs.
        let wanted: HashMap<Uuid, i64> = {
            let watches = self.lock();
            let mut wanted: HashMap<Uuid, i64> = HashMap::new();
            for watch in watches.values() {
                let after = wanted.entry(watch.job_id).or_insert(watch.after);
                *after = (*after).min(watch.after);
            }
            wanted
        };
        if wanted.is_empty() {
            return Ok(());
        }
        let (job_ids, after): (Vec<Uuid>, Vec<i64>) = wanted.into_iter().unzip();
        let (events, more) = self.inner.store.events_after(&job_ids, &after).await?;
        let mut by_job: HashMap<Uuid, Vec<WatchedEvent>> = HashMap::new();
        for event in events {
            by_job.entry(event.job_id).or_default().push(event);
        }
        let mut watches = self.lock();
        for watch in watches.values_mut() {
            let Some(events) = by_job.get(&watch.job_id) else {
                continue;
            };
            let seen = watch.after;
            for event in events.iter().filter(|e| e.seq > seen) {
                // A full channel keeps the rest in the outbox for the next turn.
                if watch.events.try_send(event.clone()).is_err() {
                    break;
                }
                watch.after = event.seq;
            }
        }
        if more {
            // The read was cut at its limit: read on at once.
            self.inner.wake.notify_one();
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Watch>> {
        self.inner.watches.lock().unwrap_or_else(|p| p.into_inner())
    }
}
