//! Group commit, for any store call that takes a batch: callers hand their item to a
//! queue and wait for its own answer; one loop hands everything waiting to one store
//! call (one transaction) and answers each item.
//!
//! The batching is natural: while one transaction commits, the items that arrive
//! wait, and the next call takes all of them (up to a bound). A lone item on an idle
//! node is committed at once, with no timer; a busy node shares each commit among
//! many. The worker's flusher (checkpoints and settlements) and the submitter (single
//! submissions) are the two queues.

use std::future::Future;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::store::StoreError;

/// An item waiting for its batch, with where its answer goes.
pub struct Queued<T, A> {
    item: T,
    answer: oneshot::Sender<Result<A, StoreError>>,
}

/// The handle callers commit through. Cloned per caller.
pub struct BatchQueue<T, A> {
    queue: mpsc::Sender<Queued<T, A>>,
    what: &'static str,
}

impl<T, A> Clone for BatchQueue<T, A> {
    fn clone(&self) -> Self {
        BatchQueue {
            queue: self.queue.clone(),
            what: self.what,
        }
    }
}

impl<T, A> BatchQueue<T, A> {
    /// A queue (its loop named `what` in errors) and the receiving end its
    /// [`batch_loop`] drains.
    pub fn new(what: &'static str, capacity: usize) -> (Self, mpsc::Receiver<Queued<T, A>>) {
        let (queue, queued) = mpsc::channel(capacity.max(1));
        (BatchQueue { queue, what }, queued)
    }

    /// Commits `item` with the next batch and answers for it alone.
    pub async fn commit(&self, item: T) -> Result<A, StoreError> {
        self.commit_or_return(item)
            .await
            .unwrap_or_else(|_| Err(self.stopped()))
    }

    /// [`Self::commit`], except that an item the loop can no longer take (it stopped
    /// at shutdown) is handed back, `Err(item)`, for the caller to commit another way.
    pub async fn commit_or_return(&self, item: T) -> Result<Result<A, StoreError>, T> {
        let (answer, answered) = oneshot::channel();
        if let Err(refused) = self.queue.send(Queued { item, answer }).await {
            return Err(refused.0.item);
        }
        Ok(answered.await.unwrap_or_else(|_| Err(self.stopped())))
    }

    fn stopped(&self) -> StoreError {
        StoreError::GroupCommit(format!("the node's {} has stopped", self.what))
    }
}

/// Drains `queued`: each round hands everything waiting (up to `max_items`) to
/// `commit` and answers every item with the answer at its position. Ends when every
/// [`BatchQueue`] handle is dropped and nothing is left, or once `shutdown` is
/// cancelled and what was already queued has been committed.
pub async fn batch_loop<T, A, F, Fut>(
    mut queued: mpsc::Receiver<Queued<T, A>>,
    max_items: usize,
    shutdown: CancellationToken,
    mut commit: F,
) where
    F: FnMut(Vec<T>) -> Fut,
    Fut: Future<Output = Vec<Result<A, StoreError>>>,
{
    let mut batch = Vec::with_capacity(max_items);
    loop {
        let received = tokio::select! {
            received = queued.recv_many(&mut batch, max_items) => received,
            () = shutdown.cancelled() => {
                // Commit what is queued already; later callers hear the queue stopped.
                queued.close();
                queued.recv_many(&mut batch, max_items).await
            }
        };
        if received == 0 {
            break;
        }
        let (items, answers): (Vec<T>, Vec<_>) = batch
            .drain(..)
            .map(|queued| (queued.item, queued.answer))
            .unzip();
        let mut results = commit(items).await.into_iter();
        for answer in answers {
            let result = results
                .next()
                .unwrap_or_else(|| Err(StoreError::GroupCommit("the item got no answer".into())));
            // The caller may be gone (a dropped request, a shutdown): nobody to tell.
            let _ = answer.send(result);
        }
    }
}
