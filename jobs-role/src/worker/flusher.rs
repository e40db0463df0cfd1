//! The node's flusher: one loop that commits the checkpoints and settlements of all
//! the node's running jobs, many per transaction (the store's group commit, through
//! [`crate::batch`]).
//!
//! A job's task hands its write over and waits for the answer, so a step still waits
//! for its own checkpoint to be durable before the next step runs. The flusher keeps
//! the order of its queue, so a write waits for every write queued before it (the
//! shutdown release relies on it). It outlives the shutdown signal: running jobs still
//! settle during the grace period, and it ends once every job's handle is gone.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::batch::{BatchQueue, Queued, batch_loop};
use crate::store::{ClaimWrite, Store};

/// The most writes one transaction carries.
pub const MAX_WRITES_PER_FLUSH: usize = 512;

/// The handle a job's task writes through.
pub type Flusher = BatchQueue<ClaimWrite, ()>;

/// A flusher handle and the queue its [`flush_loop`] drains.
pub fn flusher() -> (Flusher, mpsc::Receiver<Queued<ClaimWrite, ()>>) {
    BatchQueue::new("flusher", MAX_WRITES_PER_FLUSH * 4)
}

/// Commits everything queued, up to [`MAX_WRITES_PER_FLUSH`] writes per transaction,
/// until every [`Flusher`] handle is dropped and nothing is left to write.
pub async fn flush_loop(store: Store, queued: mpsc::Receiver<Queued<ClaimWrite, ()>>) {
    // Never cancelled: the loop ends when the last job lets go of its handle.
    let never = CancellationToken::new();
    batch_loop(queued, MAX_WRITES_PER_FLUSH, never, |writes| {
        let store = store.clone();
        async move { store.commit_claim_writes(&writes).await }
    })
    .await;
    tracing::debug!("flusher stopped");
}
