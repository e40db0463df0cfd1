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
//! [`run_within`] runs the closure on one of the process's evaluation threads
//! (named [`THREAD_NAME`], [`STACK_BYTES`] of stack; started when none is waiting,
//! reused, ended after a while without work) that nothing ever joins, and waits at
//! most `limit` for its answer. Past the limit the caller gets
//! [`OffloadError::TimedOut`] and the thread is abandoned: it finishes in the
//! background, its work bounded by the static and cost bounds of the expression
//! (then waits for more), and it never delays runtime shutdown (the process exits
//! under it).
//!
//! How many such threads exist at once is bounded process-wide by
//! [`max_concurrent`] slots. A call first waits for a slot, within the same `limit`;
//! if none frees up in time it fails with the same time-limit error. The slot moves
//! into the thread and is released when the work really finishes, not when the
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

/// Most evaluation threads kept waiting for work: one per core (each keeps the stack
/// its deepest evaluation touched).
fn max_idle() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// A closure for an evaluation thread, with the slot it holds while it runs.
type Job = (OwnedSemaphorePermit, Box<dyn FnOnce() + Send>);

/// How long an evaluation thread waits for its next closure before it ends.
const IDLE_FOR: Duration = Duration::from_secs(30);

/// The evaluation threads waiting for work, each by its number and the channel it
/// waits on. A thread is started only when none waits: starting one per evaluation
/// (an 8 MiB stack mapped and unmapped each time) was a seventh of the machine in a
/// batch of a thousand submissions, each input checked by its rules.
fn idle() -> &'static std::sync::Mutex<Vec<IdleThread>> {
    static IDLE: OnceLock<std::sync::Mutex<Vec<IdleThread>>> = OnceLock::new();
    IDLE.get_or_init(Default::default)
}

/// A waiting evaluation thread: its number and the channel it waits on.
type IdleThread = (u64, std::sync::mpsc::Sender<Job>);

fn idle_threads() -> std::sync::MutexGuard<'static, Vec<IdleThread>> {
    // Each use is one push, pop or removal: a panic cannot leave the list half
    // changed, so a poisoned lock is taken as it is.
    idle()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Hands `work` to a waiting evaluation thread, or starts one; the permit lives
/// exactly as long as the work.
fn spawn(
    permit: OwnedSemaphorePermit,
    work: impl FnOnce() + Send + 'static,
) -> Result<(), OffloadError> {
    let mut job: Job = (permit, Box::new(work));
    loop {
        let waiting = idle_threads().pop();
        let Some((_, thread)) = waiting else { break };
        match thread.send(job) {
            Ok(()) => return Ok(()),
            // That thread ended (never expected: a thread lists itself only between
            // closures, and ends only unlisted): try another.
            Err(std::sync::mpsc::SendError(back)) => job = back,
        }
    }
    static NUMBER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let number = NUMBER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::thread::Builder::new()
        .name(THREAD_NAME.into())
        .stack_size(STACK_BYTES)
        .spawn(move || evaluate_until_idle(number, job))
        // The handle is dropped: the thread is detached, never joined.
        .map(drop)
        .map_err(|e| OffloadError::NoThread(e.to_string()))
}

/// An evaluation thread: runs `first`, then each closure handed to it, until none
/// comes for [`IDLE_FOR`]. A closure that panics ends the thread (its slot is released
/// as the stack unwinds; the caller hears [`OffloadError::Panicked`]).
fn evaluate_until_idle(number: u64, first: Job) {
    let (me, jobs) = std::sync::mpsc::channel::<Job>();
    let mut next = Some(first);
    while let Some((slot, work)) = next.take() {
        work();
        {
            let mut waiting = idle_threads();
            if waiting.len() >= max_idle() {
                // Enough wait already: this one ends, its stack given back.
                return;
            }
            // Waiting before the slot is given back keeps the threads within the slots.
            waiting.push((number, me.clone()));
        }
        drop(slot);
        next = match jobs.recv_timeout(IDLE_FOR) {
            Ok(job) => Some(job),
            Err(_) => {
                let mut waiting = idle_threads();
                match waiting.iter().position(|(n, _)| *n == number) {
                    // Still listed: nobody can hand it work any more; it ends.
                    Some(at) => {
                        waiting.remove(at);
                        None
                    }
                    // Taken off the list by a caller, whose closure is on its way.
                    None => {
                        drop(waiting);
                        jobs.recv().ok()
                    }
                }
            }
        };
    }
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
    async fn threads_are_reused_one_evaluation_after_another() {
        let mut threads = std::collections::HashSet::new();
        for _ in 0..20 {
            let thread = run_within(Duration::from_secs(5), || std::thread::current().id()).await;
            threads.insert(thread.expect("an answer"));
        }
        // Without reuse each evaluation is a thread of its own (a thread's id is never
        // given to another): twenty. Alone, these need one; but the other tests of this
        // binary evaluate CEL at the same time, and their threads come and go (a thread
        // ends when enough others wait), so ours may be handed any of them: a CI run saw
        // six. Half of twenty says reuse without counting on the others' timing.
        assert!(threads.len() <= 10, "{} threads", threads.len());
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
