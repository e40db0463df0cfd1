//! Watching jobs: their events as they commit, to any number of watchers, from one
//! query per wake-up.
//!
//! A node keeps one [`Watchers`] hub. A watcher registers a job and the outbox `seq`
//! it has seen ([`Watchers::watch`]); the hub's loop ([`Watchers::run`]) wakes when
//! an outbox row commits (the `protomolt_jobs_outbox` notification every event
//! writes, heard on one LISTEN connection the whole node shares; with the Kafka lanes
//! off that connection is open only while anyone watches), when a watcher
//! registers or empties its channel, and once a second as a safety net, and then
//! reads the new events of every watched job in one statement (at most a channel's
//! worth per job, so one long history never crowds out the others) and hands each
//! watcher its own. Nothing polls per watcher, and it works with the Kafka lanes off.
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
const EVENTS_PER_WATCHER: usize = crate::store::WATCHED_EVENTS_PER_JOB as usize;

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
    /// Woken by the outbox listener, by new watchers, and by watchers that emptied
    /// their channel.
    wake: Arc<Notify>,
    watches: Mutex<Watches>,
    next_id: AtomicU64,
    max: usize,
    per_holder: usize,
    /// True while anyone watches: what the outbox listener follows when the Kafka
    /// lanes are off (see [`Watchers::watched`]).
    watched: tokio::sync::watch::Sender<bool>,
}

#[derive(Default)]
struct Watches {
    by_id: HashMap<u64, Watch>,
    /// Watchers held per token (the caller's position in `[auth]`).
    by_holder: HashMap<usize, usize>,
    /// The hub has stopped (the node is shutting down): no new watchers.
    closed: bool,
}

impl Watches {
    fn remove(&mut self, id: u64) {
        let Some(watch) = self.by_id.remove(&id) else {
            return;
        };
        if let Some(holder) = watch.holder
            && let Some(held) = self.by_holder.get_mut(&holder)
        {
            *held -= 1;
            if *held == 0 {
                self.by_holder.remove(&holder);
            }
        }
    }
}

/// Who holds a watcher: the token's position in `[auth]`, or `None` on a node without
/// tokens (then only the node's bound applies).
pub type Holder = Option<usize>;

struct Watch {
    /// Counted against its token's share.
    holder: Holder,
    job_id: Uuid,
    /// The last `seq` handed over.
    after: i64,
    events: mpsc::Sender<WatchedEvent>,
}

/// Why a watcher was not registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotWatching {
    /// The node already has its most watchers ([`crate::JobsConfig::max_watchers`]).
    #[error(
        "this node already serves its {0} watchers (jobs.max_watchers); try again shortly or watch through another node"
    )]
    TooMany(usize),
    /// The caller's token already holds its share
    /// ([`crate::JobsConfig::max_watchers_per_token`]).
    #[error(
        "this token already holds its {0} watchers on this node (jobs.max_watchers_per_token); close one, or try again shortly"
    )]
    TokenShare(usize),
    /// The node is shutting down.
    #[error("this node is shutting down; watch through another node")]
    ShuttingDown,
}

/// One watcher's registration: its events come from [`Watching::next`]; dropping it
/// unregisters. The channel ends when the node shuts down.
pub struct Watching {
    id: u64,
    inner: Arc<Inner>,
    events: mpsc::Receiver<WatchedEvent>,
}

impl Watching {
    /// The job's next event, in order; `None` once the hub has stopped. Taking the
    /// last one waiting wakes the hub, so a watcher that drains its channel gets the
    /// rest of a long history at once, not at the next safety-net read.
    pub async fn next(&mut self) -> Option<WatchedEvent> {
        let event = self.events.recv().await?;
        if self.events.is_empty() {
            self.inner.wake.notify_one();
        }
        Some(event)
    }

    /// Moves the position the watcher wants events after (a watcher registered with
    /// `i64::MAX`, to hold its slot before the position is read, is told it here).
    pub fn start_after(&self, after: i64) {
        let mut watches = self.inner.watches.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(watch) = watches.by_id.get_mut(&self.id) {
            watch.after = after;
        }
        drop(watches);
        self.inner.wake.notify_one();
    }

    /// Every event already handed over, without waiting.
    pub fn drain(&mut self) {
        while self.events.try_recv().is_ok() {}
        self.inner.wake.notify_one();
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let mut watches = self.inner.watches.lock().unwrap_or_else(|p| p.into_inner());
        watches.remove(self.id);
        if watches.by_id.is_empty() {
            self.inner.watched.send_replace(false);
        }
    }
}

impl Watchers {
    /// A hub over `store` serving at most `max` watchers at once, at most
    /// `per_holder` of them to one token.
    pub fn new(store: Store, max: usize, per_holder: usize) -> Watchers {
        Watchers {
            inner: Arc::new(Inner {
                store,
                wake: Arc::new(Notify::new()),
                watches: Mutex::new(Watches::default()),
                next_id: AtomicU64::new(0),
                max,
                per_holder,
                watched: tokio::sync::watch::Sender::new(false),
            }),
        }
    }

    /// What the outbox listener wakes (`notify_one`: a wake-up while the hub reads is
    /// kept for its next turn).
    pub fn wake(&self) -> Arc<Notify> {
        self.inner.wake.clone()
    }

    /// Follows whether anyone watches: true from the first watcher, false once the
    /// last one is gone.
    pub fn watched(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.watched.subscribe()
    }

    /// How many watchers are registered.
    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    /// True once the hub has stopped (the node is shutting down).
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// True when nobody watches.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Watches `job_id`'s events after outbox position `after` (0: all of them).
    pub fn watch(&self, job_id: Uuid, after: i64, holder: Holder) -> Result<Watching, NotWatching> {
        let (sender, events) = mpsc::channel(EVENTS_PER_WATCHER);
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut watches = self.lock();
            if watches.closed {
                return Err(NotWatching::ShuttingDown);
            }
            if watches.by_id.len() >= self.inner.max {
                return Err(NotWatching::TooMany(self.inner.max));
            }
            if let Some(token) = holder {
                let held = watches.by_holder.entry(token).or_default();
                if *held >= self.inner.per_holder {
                    return Err(NotWatching::TokenShare(self.inner.per_holder));
                }
                *held += 1;
            }
            watches.by_id.insert(
                id,
                Watch {
                    holder,
                    job_id,
                    after,
                    events: sender,
                },
            );
            // Under the lock, so a last watcher leaving cannot overwrite it.
            self.inner
                .watched
                .send_if_modified(|watched| !std::mem::replace(watched, true));
        }
        self.inner.wake.notify_one();
        Ok(Watching {
            id,
            inner: self.inner.clone(),
            events,
        })
    }

    /// The hub's loop, until `shutdown`; then every watcher's channel ends.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = self.inner.wake.notified() => {}
                () = tokio::time::sleep(SAFETY_NET) => {}
                () = shutdown.cancelled() => break,
            }
            if let Err(error) = self.hand_out().await {
                tracing::warn!(%error, "watchers: reading the watched jobs' events failed; trying again");
                tokio::select! {
                    () = tokio::time::sleep(SAFETY_NET) => {}
                    () = shutdown.cancelled() => break,
                }
            }
        }
        // Dropping the senders ends every stream and waiting get-job now, so the
        // node's shutdown does not wait for them.
        let mut watches = self.lock();
        watches.closed = true;
        watches.by_id.clear();
        watches.by_holder.clear();
    }

    /// Reads the new events of the watched jobs and hands each watcher its own.
    async fn hand_out(&self) -> Result<(), crate::store::StoreError> {
        // Each job once, from the earliest position any of its watchers that has
        // room needs (a watcher with a full channel waits for the next turn, so it
        // never holds the read back for the others).
        let read_from: HashMap<Uuid, i64> = {
            let watches = self.lock();
            let mut wanted: HashMap<Uuid, i64> = HashMap::new();
            for watch in watches.by_id.values().filter(|w| w.events.capacity() > 0) {
                let after = wanted.entry(watch.job_id).or_insert(watch.after);
                *after = (*after).min(watch.after);
            }
            wanted
        };
        if read_from.is_empty() {
            return Ok(());
        }
        let (job_ids, after): (Vec<Uuid>, Vec<i64>) =
            read_from.iter().map(|(id, after)| (*id, *after)).unzip();
        let (events, more) = self.inner.store.events_after(&job_ids, &after).await?;
        let mut by_job: HashMap<Uuid, Vec<WatchedEvent>> = HashMap::new();
        for event in events {
            by_job.entry(event.job_id).or_default().push(event);
        }
        let mut watches = self.lock();
        for watch in watches.by_id.values_mut() {
            let (Some(events), Some(from)) =
                (by_job.get(&watch.job_id), read_from.get(&watch.job_id))
            else {
                continue;
            };
            // A watcher that registered during the read wants events from before
            // where this read started: the next read (its registration woke the
            // hub) serves it from its own position.
            if watch.after < *from {
                continue;
            }
            let seen = watch.after;
            for event in events.iter().filter(|e| e.seq > seen) {
                // A full channel keeps the rest in the outbox for a later turn.
                if watch.events.try_send(event.clone()).is_err() {
                    break;
                }
                watch.after = event.seq;
            }
        }
        if more {
            // A job had more than one read's share: read on at once (watchers whose
            // channel is full sit that read out).
            self.inner.wake.notify_one();
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watches> {
        self.inner.watches.lock().unwrap_or_else(|p| p.into_inner())
    }
}
