//! Running a CPU-bound closure on a bounded set of detached threads within a deadline.
//!
//! CEL (`when` gates and `buf.validate` rules) runs on the `cel` crate's evaluator,
//! which has no cancellation: once started, an evaluation runs to its end. So it
//! must never run on an async worker (it would pin it), and not on tokio's blocking
//! pool either: tokio's runtime drop waits for every blocking task, so an evaluation
//! abandoned after its time limit would hold a node that received SIGTERM until it
//! finished, and enough of them would fill the pool (512 threads) that every other
//! blocking task queues behind them.
//!
//! [`run_within`] runs the closure on a dedicated OS thread (named
//! [`THREAD_NAME`], [`STACK_BYTES`] of stack) that nothing ever joins, and waits at
//! most `limit` for its answer. Past the limit the caller gets
//! [`OffloadError::TimedOut`] and the thread is abandoned: it finishes in the
//! background, its work bounded by the static and cost bounds of the expression,
//! and it never delays runtime shutdown (the process exits under it).
//!
//! How many such threads exist at once is bounded process-wide by
//! [`max_concurrent`] slots. A call first waits for a slot, within the same `limit`;
//! if none frees up in time it fails with the same time-limit error. The slot moves
//! into the thread and is released when the thread really finishes, not when the
//! caller stops waiting, so abandoned evaluations count against the bound until
//! they are done.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::time::Instant;

/// Name of the threads evaluations run on (visible in `top -H`, debuggers, panics).
pub const THREAD_NAME: &str = "cel-eval";

/// Stack of an evaluation thread. The evaluator recurses once per AST level with
/// large frames; expressions are at most [`crate::gate::MAX_EXPRESSION_DEPTH`] deep,
/// which fits 2 MiB, and the `buf.validate` validator adds its own frames on top.
/// The memory is reserved, and only used as deep as an evaluation goes.
pub const STACK_BYTES: usize = 8 * 1024 * 1024;

/// Why an offloaded closure gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffloadError {
    /// No answer within the limit: either no slot freed up in time, or the closure
    /// was still running (it is abandoned and finishes in the background).
    #[error("did not finish within {} ms", .limit.as_millis())]
    TimedOut {
        /// The limit the caller gave.
        limit: Duration,
    },
    /// The closure panicked.
    #[error("panicked")]
    Panicked,
    /// The operating system refused a new thread.
    #[error("could not start a thread: {0}")]
    NoThread(String),
}

/// Most evaluation threads alive at once in this process: twice the available
/// parallelism, at least 2. Enough to keep every core busy while some threads are
/// abandoned, few enough that abandoned work cannot crowd out the node.
pub fn max_concurrent() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .saturating_mul(2)
        .max(2)
}

/// The process-wide slots behind [`run_within`].
fn slots() -> &'static Arc<Semaphore> {
    static SLOTS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    SLOTS.get_or_init(|| Arc::new(Semaphore::new(max_concurrent())))
}

/// Runs `work` on a dedicated evaluation thread and waits at most `limit` (slot
/// wait included) for its result; see the module docs. Cancel-safe: dropping the
/// future abandons the thread, which still releases its slot when it finishes.
pub async fn run_within<T, F>(limit: Duration, work: F) -> Result<T, OffloadError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    run_with_slots(slots().clone(), limit, work).await
}

/// [`run_within`] against a given set of slots (tests use a small private one).
pub(crate) async fn run_with_slots<T, F>(
    slots: Arc<Semaphore>,
    limit: Duration,
    work: F,
) -> Result<T, OffloadError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let deadline = Instant::now() + limit;
    let timed_out = OffloadError::TimedOut { limit };
    let permit = match tokio::time::timeout_at(deadline, slots.acquire_owned()).await {
        Ok(Ok(permit)) => permit,
        // The semaphore is never closed; treat it like no slot in time regardless.
        Ok(Err(_)) | Err(_) => return Err(timed_out),
    };
    let (answer, result) = oneshot::channel();
    spawn(permit, move || {
        // The receiver may be gone (the caller timed out): nothing to tell then.
        let _ = answer.send(work());
    })?;
    match tokio::time::timeout_at(deadline, result).await {
        Ok(Ok(value)) => Ok(value),
        // The sender was dropped without sending: the closure panicked.
        Ok(Err(_)) => Err(OffloadError::Panicked),
        Err(_) => Err(timed_out),
    }
}

/// Starts the detached thread; the permit lives exactly as long as the thread's work.
fn spawn(
    permit: OwnedSemaphorePermit,
    work: impl FnOnce() + Send + 'static,
) -> Result<(), OffloadError> {
    std::thread::Builder::new()
        .name(THREAD_NAME.into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            // Dropped at the end of this closure, after the work, panic or not.
            let _slot = permit;
            work();
        })
        // The handle is dropped: the thread is detached, never joined.
        .map(drop)
        .map_err(|e| OffloadError::NoThread(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_result_in_time_is_returned() {
        assert_eq!(run_within(Duration::from_secs(5), || 6 * 7).await, Ok(42));
    }

    #[tokio::test]
    async fn work_runs_on_a_named_thread() {
        let name = run_within(Duration::from_secs(5), || {
            std::thread::current().name().map(str::to_owned)
        })
        .await;
        assert_eq!(name, Ok(Some(THREAD_NAME.to_owned())));
    }

    #[tokio::test]
    async fn a_panic_is_reported_and_releases_its_slot() {
        let slots = Arc::new(Semaphore::new(1));
        let result: Result<(), _> =
            run_with_slots(slots.clone(), Duration::from_secs(5), || panic!("boom")).await;
        assert_eq!(result, Err(OffloadError::Panicked));
        let again = run_with_slots(slots, Duration::from_secs(5), || 1).await;
        assert_eq!(again, Ok(1));
    }

    #[tokio::test]
    async fn work_past_its_limit_times_out_promptly() {
        let started = std::time::Instant::now();
        let result = run_within(Duration::from_millis(50), || {
            std::thread::sleep(Duration::from_secs(2));
        })
        .await;
        assert_eq!(
            result,
            Err(OffloadError::TimedOut {
                limit: Duration::from_millis(50)
            })
        );
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_more_threads_than_slots_run_at_once_and_a_waiter_times_out() {
        let slots = Arc::new(Semaphore::new(2));
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let mut calls = Vec::new();
        for _ in 0..6 {
            let (running, peak) = (running.clone(), peak.clone());
            calls.push(tokio::spawn(run_with_slots(
                slots.clone(),
                Duration::from_secs(10),
                move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(50));
                    running.fetch_sub(1, Ordering::SeqCst);
                },
            )));
        }
        for call in calls {
            assert_eq!(call.await.expect("task"), Ok(()));
        }
        assert_eq!(peak.load(Ordering::SeqCst), 2);

        // Both slots held by abandoned work: a new call waits for a slot within its
        // own limit, then fails with the time-limit error without running.
        for _ in 0..2 {
            let abandoned = run_with_slots(slots.clone(), Duration::from_millis(10), || {
                std::thread::sleep(Duration::from_millis(600));
            })
            .await;
            assert!(matches!(abandoned, Err(OffloadError::TimedOut { .. })));
        }
        let ran = Arc::new(AtomicUsize::new(0));
        let started = std::time::Instant::now();
        let waiter = run_with_slots(slots.clone(), Duration::from_millis(100), {
            let ran = ran.clone();
            move || ran.fetch_add(1, Ordering::SeqCst)
        })
        .await;
        assert!(matches!(waiter, Err(OffloadError::TimedOut { .. })));
        assert!(started.elapsed() < Duration::from_millis(500));
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        // Once the abandoned threads really finish, their slots are free again.
        let later = run_with_slots(slots, Duration::from_secs(5), || 1).await;
        assert_eq!(later, Ok(1));
    }

    #[test]
    fn the_process_wide_bound_is_at_least_two() {
        assert!(max_concurrent() >= 2);
    }
}
