//! The node's flusher: one task that commits the checkpoints and settlements of all
//! the node's running jobs, many per transaction (the store's group commit).
//!
//! A job's task hands its write over and waits for the answer, so a step still waits
//! for its own checkpoint to be durable before the next step runs. The batching is
//! natural: while one transaction commits, the writes that arrive wait, and the next
//! transaction takes all of them (up to [`MAX_WRITES_PER_FLUSH`]). An idle node adds
//! no delay to a lone write; a busy one shares each commit among many jobs.

use tokio::sync::{mpsc, oneshot};

use crate::store::{ClaimWrite, Store, StoreError};

/// The most writes one transaction carries.
pub const MAX_WRITES_PER_FLUSH: usize = 512;

/// A write waiting for its flush, with where its answer goes.
pub struct QueuedWrite {
    write: ClaimWrite,
    answer: oneshot::Sender<Result<(), StoreError>>,
}

/// The handle a job's task writes through. Cloned per job; the flusher stops once
/// every handle is gone and the queue is empty.
#[derive(Clone)]
pub struct Flusher {
    queue: mpsc::Sender<QueuedWrite>,
}

impl Flusher {
    /// A flusher handle and the queue its [`flush_loop`] drains.
    pub fn new() -> (Flusher, mpsc::Receiver<QueuedWrite>) {
        let (queue, queued) = mpsc::channel(MAX_WRITES_PER_FLUSH * 4);
        (Flusher { queue }, queued)
    }

    /// Commits `write` with the next flush and answers for it alone.
    pub async fn commit(&self, write: ClaimWrite) -> Result<(), StoreError> {
        let (answer, answered) = oneshot::channel();
        let stopped = || StoreError::GroupCommit("the node's flusher has stopped".into());
        self.queue
            .send(QueuedWrite { write, answer })
            .await
            .map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }
}

/// Drains the queue: each round commits everything waiting (up to
/// [`MAX_WRITES_PER_FLUSH`]) in one transaction and answers every write. Ends when every
/// [`Flusher`] handle is dropped and nothing is left to write.
pub async fn flush_loop(store: Store, mut queued: mpsc::Receiver<QueuedWrite>) {
    let mut batch = Vec::with_capacity(MAX_WRITES_PER_FLUSH);
    while queued.recv_many(&mut batch, MAX_WRITES_PER_FLUSH).await > 0 {
        let (writes, answers): (Vec<ClaimWrite>, Vec<_>) = batch
            .drain(..)
            .map(|queued| (queued.write, queued.answer))
            .unzip();
        let results = store.commit_claim_writes(&writes).await;
        tracing::trace!(writes = writes.len(), "flushed");
        for (answer, result) in answers.into_iter().zip(results) {
            // The job's task may be gone (shutdown grace over): nobody to tell.
            let _ = answer.send(result);
        }
    }
    tracing::debug!("flusher stopped");
}
