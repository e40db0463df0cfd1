//! The worker of one node: a dispatcher that claims jobs in batches as slots free up
//! (at most `max_in_flight` segments at once), one task per claimed job, and one
//! flusher that commits the checkpoints and settlements of all of them, many jobs per
//! transaction ([`flusher`]); beside them the sweeper and the wake-up listener.
//!
//! Per claimed job, renewing the lease from the moment of the claim: re-parse the
//! snapshot, replay the checkpoints (the engine's non-trusting replay), take the
//! per-target permit for the next unexecuted step (a claim waiting for its permit
//! keeps its lease), run a segment, persist each checkpoint before the next step,
//! then settle. The workflow's final checkpoint is held back and commits with the
//! settlement, in one transaction (so a job whose claim is released by a shutdown
//! right after its last call runs that step again, as any step whose checkpoint did
//! not land does):
//!
//! | segment outcome                                        | settles as                              |
//! |--------------------------------------------------------|-----------------------------------------|
//! | completed                                              | COMPLETED, verdict `N steps, output T`  |
//! | parked at an external step                             | WAITING on that step                    |
//! | retryable failure (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, a connection failing under the call, deadline) | QUEUED after base × 2^(attempt−1), or DEAD when attempts are spent |
//! | validation failure                                     | FAILED with the violations (a verdict)  |
//! | gate, mapping or workflow failure; drifted snapshot    | FAILED loud                             |
//! | PostgreSQL refuses a response or the output (a NUL, a size limit) | FAILED loud: `WORKFLOW: step 'x': its response cannot be stored: ...` |
//! | transient store failure while checkpointing            | QUEUED again, attempt not burned        |
//! | released `max_releases` times in a row without progress | DEAD: `RELEASED: ...`                  |
//! | the claim was lost                                     | nothing: the new holder owns the job    |
//!
//! Every step call carries `x-protomolt-job-id`, `x-protomolt-step`,
//! `x-protomolt-attempt` and `idempotency-key: <job_id>/<step>` (`/rerun-<n>` once
//! operators' `retry-job` with `fromStep` dropped that step's checkpoint `n` times:
//! see migration V18), because a retried step may have done its side effect before
//! its checkpoint landed.
//!
//! | module     | concept                                                           |
//! |------------|-------------------------------------------------------------------|
//! | this one   | the worker, and a claimed job: its lease, segment and cancel      |
//! | `dispatch` | the claim loop: batches as slots free up, lost claims given back  |
//! | `settle`   | the segment's outcome as a settlement, and writing it             |
//! | `sink`     | each step's checkpoint, written before the next step runs         |
//! | `flusher`  | the group commit: many jobs' writes in one transaction            |
//! | `retry`    | writes after a claim sent again through a blip, with backoff      |
//! | `lease`    | when the lease was last renewed, so a stalled node calls no step  |
//! | `cancels`  | how a running job hears an operator's cancel                      |
//! | `children` | a parent's children started before it parks on them               |
//! | `limits`   | per-target permits                                                |
//! | `throttle` | fleet-wide limits (target limits, a step's `rateLimit`) before each call |
//! | `sweeper`  | expired leases and parked waits, requeued or ended                |

mod cancels;
mod children;
mod dispatch;
pub mod flusher;
mod lease;
pub mod limits;
mod retry;
mod settle;
mod sink;
mod sweeper;
pub mod throttle;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;
use workflow::compile::decode_json;
use workflow::{CompiledWorkflow, Runner, SegmentError, SegmentOutcome, replay_checkpoints};

use cancels::{CANCEL_CHECK_GAP, CancelWatch, Cancels};
pub use flusher::Flusher;
pub use lease::LeaseClock;
pub use limits::TargetLimits;
use sink::{JobMetadata, StoreSink};
pub use sweeper::sweep_loop;

use crate::compiled::{CompiledCache, SNAPSHOT_DIGEST_PREFIX};
use crate::config::JobsConfig;
use crate::metrics::JobsMetrics;
use crate::store::{Claim, ClaimWrite, ClaimedJob, Lease, StepCheckpoint, Store, StoreError};

/// What the dispatcher and the job tasks of one node share.
pub struct Worker {
    store: Store,
    runner: Arc<Runner>,
    config: JobsConfig,
    limits: Arc<TargetLimits>,
    wake: Arc<Notify>,
    metrics: JobsMetrics,
    compiled: Arc<CompiledCache>,
    /// Taken by a job whose workflow is not compiled yet, one at a time.
    compile_turn: tokio::sync::Mutex<()>,
    /// The jobs this node runs, each with how its task hears of an operator's cancel.
    cancels: std::sync::Mutex<Cancels>,
    /// Drain mode: while on, the dispatcher claims nothing.
    drain: Arc<crate::drain::Drain>,
    /// The fleet's limits on calls.
    throttle: throttle::Throttle,
}

impl Worker {
    /// A worker over `store`, running segments with `runner`, sharing the node's
    /// `compiled` workflows.
    pub fn new(
        store: Store,
        runner: Arc<Runner>,
        config: JobsConfig,
        wake: Arc<Notify>,
        compiled: Arc<CompiledCache>,
    ) -> Arc<Worker> {
        Self::with_metrics(
            store,
            runner,
            config,
            wake,
            compiled,
            JobsMetrics::default(),
        )
    }

    /// [`Worker::new`], counting in `metrics`.
    pub fn with_metrics(
        store: Store,
        runner: Arc<Runner>,
        config: JobsConfig,
        wake: Arc<Notify>,
        compiled: Arc<CompiledCache>,
        metrics: JobsMetrics,
    ) -> Arc<Worker> {
        let limits = Arc::new(TargetLimits::new(config.max_concurrent_per_target));
        let throttle = throttle::Throttle::new(&config);
        Arc::new(Worker {
            store,
            runner,
            config,
            limits,
            wake,
            metrics,
            compiled,
            compile_turn: tokio::sync::Mutex::new(()),
            cancels: std::sync::Mutex::default(),
            drain: Arc::default(),
            throttle,
        })
    }

    /// The node's drain switch (its admin route turns it on and off).
    pub fn drain(&self) -> Arc<crate::drain::Drain> {
        self.drain.clone()
    }

    /// The node's per-target permits (for the metrics).
    pub fn limits(&self) -> Arc<TargetLimits> {
        self.limits.clone()
    }

    /// Tells the task running `job_id` on this node, if any, that an operator may have
    /// asked to cancel it (the cancel listener calls this for every
    /// `protomolt_jobs_cancel` notification). The task checks the row before it stops,
    /// so a stray notification costs one lease renewal, never a job. An empty payload
    /// (the listener has just (re)subscribed, and may have missed some) tells every
    /// running task; an id this node does not run yet is kept a few seconds, for a
    /// task whose claim committed just before the cancel but registers just after.
    pub fn hear_cancel(&self, payload: &str) {
        let mut cancels = self.cancels.lock().unwrap_or_else(|p| p.into_inner());
        if payload.is_empty() {
            for watch in cancels.running.values() {
                watch.notify_one();
            }
            return;
        }
        let Ok(job_id) = Uuid::parse_str(payload) else {
            return;
        };
        match cancels.running.get(&job_id) {
            // Stored as a permit when the task is not waiting right now.
            Some(watch) => watch.notify_one(),
            None => cancels.heard_early(job_id),
        }
    }

    /// Registers `job_id` for [`Self::hear_cancel`] until the guard drops.
    fn watch_cancel(&self, job_id: Uuid) -> CancelWatch<'_> {
        let cancel = Arc::new(Notify::new());
        let mut cancels = self.cancels.lock().unwrap_or_else(|p| p.into_inner());
        if cancels.take_early(job_id) {
            cancel.notify_one();
        }
        cancels.running.insert(job_id, cancel.clone());
        CancelWatch {
            worker: self,
            job_id,
            cancel,
        }
    }

    /// The node's worker until `shutdown`: claims jobs in batches as slots free up,
    /// runs each in its own task, and commits their writes through one flusher. After
    /// shutdown it returns once every running job has settled or released its claim
    /// and the flusher has committed what they wrote.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let (flusher, queued) = flusher::flusher();
        let flushing = flusher::flush_loop(self.store.clone(), queued);
        tokio::join!(flushing, self.dispatch(flusher, shutdown));
    }

    /// Runs one claimed job to a settlement. On shutdown the segment may finish within
    /// the grace period; after that its claim is released for another node.
    pub async fn run_job(&self, job: ClaimedJob, flusher: &Flusher, shutdown: &CancellationToken) {
        let claim = job.claim.clone();
        let started = std::time::Instant::now();
        // One span per segment, the submitter's trace its parent.
        let span = tracing::info_span!(
            "segment",
            job_id = %claim.job_id,
            workflow = %claim.workflow_name,
            attempt = claim.attempt
        );
        if let Some(traceparent) = &job.trace_context {
            registry_stub::telemetry::set_parent(&span, traceparent);
        }
        let run = self.execute(job, flusher).instrument(span);
        tokio::pin!(run);
        let settled = tokio::select! {
            settled = &mut run => Some(settled),
            () = async {
                shutdown.cancelled().await;
                tokio::time::sleep(self.config.shutdown_grace()).await;
            } => None,
        };
        let settlement_result = match settled {
            Some(result) => result,
            None => {
                tracing::info!(job_id = %claim.job_id, "shutdown grace over: releasing the claim for another node");
                // A write of this job already queued commits first (the flusher keeps
                // the order), so the release never throws away a settlement.
                let _ = flusher.commit(ClaimWrite::barrier(&claim)).await;
                // Tried for as long as the lease would last: past that the sweeper
                // requeues the job anyway.
                let release = self.release(&claim, Duration::ZERO, "the node shut down");
                tokio::time::timeout(self.config.lease(), release)
                    .await
                    .unwrap_or_else(|_| {
                        Err(StoreError::GroupCommit(
                            "releasing the claim at shutdown did not finish within the lease"
                                .into(),
                        ))
                    })
            }
        };
        self.metrics
            .segment_took(&claim.workflow_name, started.elapsed());
        match settlement_result {
            Ok(()) => {}
            Err(e) if e.is_lost_claim() => {
                self.metrics.lost_claims.inc();
                tracing::warn!(job_id = %claim.job_id, attempt = claim.attempt, "the claim was lost; another worker owns the job now")
            }
            Err(e) => {
                tracing::error!(job_id = %claim.job_id, error = %e, "settling failed; the sweeper will requeue the job when its lease passes")
            }
        }
    }

    /// Runs the claimed job and settles it; the lease is renewed from the claim until
    /// the segment ends (also while the claim waits for its per-target permit). An
    /// operator's cancel (heard from the cancel listener, or read at a lease renewal)
    /// abandons the segment, in-flight call and all, and settles CANCELLED. The error
    /// is the store's.
    async fn execute(&self, job: ClaimedJob, flusher: &Flusher) -> Result<(), StoreError> {
        let claim = &job.claim;
        let watch = self.watch_cancel(claim.job_id);
        let clock = LeaseClock::new(job.asked_at, self.config.lease());
        let ran = tokio::select! {
            ran = self.run_segment(&job, flusher, &clock) => ran,
            end = self.keep_lease(claim, Some(&watch.cancel), &clock) => {
                return match end {
                    LeaseEnd::Lost(lost) => Err(lost),
                    LeaseEnd::CancelRequested => self.cancel_now(flusher, claim).await,
                };
            }
        };
        let settling = async {
            match ran {
                Ran::Segment {
                    compiled,
                    outcome,
                    held,
                    held_timing,
                    progressed,
                } => {
                    let held = held.map(|checkpoint| (checkpoint, held_timing));
                    self.settle(flusher, &job, &compiled, *outcome, held, progressed)
                        .await
                }
                Ran::Drifted(error) => self.fail_loud(flusher, claim, error).await,
                Ran::Unavailable(lost) if lost.is_lost_claim() => Err(lost),
                Ran::Unavailable(e) => {
                    let reason = format!(
                        "reading the workflow snapshot or the stored map elements failed: {e}"
                    );
                    self.release(claim, self.config.backoff(claim.attempt), &reason)
                        .await
                }
            }
        };
        // The lease is renewed until the settlement is answered too: a flush held up
        // (a slow database) or a settlement waiting out an outage must not let the
        // sweeper requeue work that is done, charging its attempt.
        tokio::select! {
            settled = settling => settled,
            end = self.keep_lease(claim, None, &clock) => Err(end.into_error(claim)),
        }
    }

    /// Compiles, replays, waits for the permit and runs one segment.
    async fn run_segment(&self, job: &ClaimedJob, flusher: &Flusher, clock: &LeaseClock) -> Ran {
        let claim = &job.claim;
        let compiled = match self.compiled_workflow(job).await {
            Ok(compiled) => compiled,
            Err(not_compiled) => return not_compiled,
        };
        // The input's rules were checked when it was submitted; re-parsing it catches a
        // drifted snapshot without running the workflow author's CEL again here, in
        // the task that also renews the lease.
        let input = match decode_json(&compiled.input_type, &job.input) {
            Ok(input) => input,
            Err(e) => {
                return Ran::Drifted(format!("WORKFLOW: the stored input no longer parses: {e}"));
            }
        };
        let prior = match replay_checkpoints(compiled.as_ref(), &job.checkpoints) {
            Ok(prior) => prior,
            Err(failure) => return Ran::Drifted(failure.to_string()),
        };
        let done: std::collections::HashSet<&str> = prior
            .iter()
            .map(|replayed| replayed.checkpoint.name.as_str())
            .collect();
        // The elements stored of map and child steps not yet done: the segment calls
        // (or starts children for) the others.
        let unfinished_maps: Vec<String> = compiled
            .steps
            .iter()
            .filter(|step| {
                (step.map.is_some() || step.child.is_some()) && !done.contains(step.name.as_str())
            })
            .map(|step| step.name.clone())
            .collect();
        let items = if unfinished_maps.is_empty() {
            Vec::new()
        } else {
            match self.store.job_items(claim.job_id, &unfinished_maps).await {
                Ok(items) => items,
                Err(e) => return Ran::Unavailable(e),
            }
        };
        let is_done = |name: &str| done.contains(name);
        // The first ready step the segment will call (one that parks is not called).
        let next_target = compiled
            .ready_steps(&is_done)
            .find(|step| step.is_called())
            .and_then(|step| step.target.clone());
        let _permit = match &next_target {
            Some(target) => self.limits.acquire(target).await,
            None => None,
        };

        let mut sink = StoreSink {
            store: &self.store,
            flusher,
            claim,
            clock,
            metrics: &self.metrics,
            last_step_ended: std::time::Instant::now(),
            next_step: prior.len(),
            last_step: compiled.steps.len().saturating_sub(1),
            limits: &self.limits,
            started: std::collections::HashMap::new(),
            stored_items: 0,
            held: None,
            held_timing: None,
            sleeps: &job.sleeps,
            claimed_at_ms: job.claimed_at_ms,
            throttle: &self.throttle,
        };
        let metadata = JobMetadata {
            job_id: claim.job_id.to_string(),
            attempt: claim.attempt,
            reruns: compiled
                .steps
                .iter()
                .enumerate()
                .filter_map(|(i, step)| {
                    let n = job.step_reruns.get(i).copied().unwrap_or(0);
                    (n > 0).then(|| (step.name.clone(), n))
                })
                .collect(),
        };
        let outcome = self
            .runner
            .resume_segment(&compiled, &input, prior, &items, &mut sink, &metadata)
            .await;
        Ran::Segment {
            compiled,
            outcome: Box::new(outcome),
            progressed: sink.stored_items > 0,
            held: sink.held,
            held_timing: sink.held_timing,
        }
    }

    /// The job's compiled workflow: from the cache by the snapshot's digest, or the
    /// snapshot fetched and compiled (off the async threads) the first time. Misses
    /// are taken one at a time, and each looks again once it has its turn, so a burst
    /// of jobs of a new workflow fetches and compiles it once, not once per job.
    async fn compiled_workflow(&self, job: &ClaimedJob) -> Result<Arc<CompiledWorkflow>, Ran> {
        if let Some(hit) = self.compiled.get_by_digest(&job.definition_digest) {
            return Ok(hit);
        }
        let _turn = self.compile_turn.lock().await;
        if let Some(hit) = self.compiled.get_by_digest(&job.definition_digest) {
            return Ok(hit);
        }
        // The snapshot and its digest from one row version: the digest remembered is
        // the one of the snapshot compiled, whatever happened to the row since the claim.
        let (definition, digest) = match self.store.job_definition(job.claim.job_id).await {
            Ok(Some(snapshot)) => snapshot,
            // The row is gone (deleted under the claim): nothing can be written either.
            Ok(None) => return Err(Ran::Unavailable(job.claim.lost())),
            Err(e) => return Err(Ran::Unavailable(e)),
        };
        match self.compiled.get_or_compile_off_thread(&definition).await {
            Ok(compiled) => {
                // A node's digest names the snapshot's content: one that is not this
                // snapshot's own means the snapshot filed under it is some other
                // workflow (filed by someone claiming to be the node). Never run it
                // as this job's, nor let it name this workflow for other jobs.
                if digest.starts_with(SNAPSHOT_DIGEST_PREFIX) && digest != *compiled.digest {
                    return Err(Ran::Drifted(format!(
                        "WORKFLOW: the workflow snapshot filed under this job's digest ({digest}) is not the snapshot that digest names; refusing to run a workflow other than the one submitted"
                    )));
                }
                self.compiled.remember_digest(&compiled.digest, &digest);
                Ok(compiled.workflow)
            }
            Err(findings) => Err(Ran::Drifted(format!(
                "WORKFLOW: the stored definition no longer compiles: {findings}"
            ))),
        }
    }

    /// Renews the lease every third of its length until the claim is lost, or, when
    /// `cancel` is given, until an operator asks to cancel the job (heard on `cancel`
    /// or read at a renewal). Without `cancel` (a settlement in flight) a requested
    /// cancel does not stop the renewals: the store refuses that settlement, and the
    /// job is settled CANCELLED then.
    async fn keep_lease(
        &self,
        claim: &Claim,
        cancel: Option<&Notify>,
        clock: &LeaseClock,
    ) -> LeaseEnd {
        let lease = self.config.lease();
        let every = (lease / 3).max(Duration::from_millis(10));
        let mut renewed = tokio::time::Instant::now();
        // After a failed renewal the next comes sooner (a database blip of a few
        // seconds must not outlast the lease), with backoff up to the usual gap.
        let mut after_failure: Option<retry::Backoff> = None;
        loop {
            let gap = after_failure
                .as_mut()
                .map_or(every, |backoff| backoff.next_wait().min(every));
            // A cancel heard is confirmed by renewing at once: the row says whether an
            // operator asked (anyone may send a NOTIFY). A cancel heard while no one
            // waits is kept as the Notify's permit, so a fresh wait each turn misses
            // nothing.
            let heard = async {
                match cancel {
                    Some(cancel) => cancel.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = tokio::time::sleep_until(renewed + gap) => {}
                // At most one check every CANCEL_CHECK_GAP, whatever a storm of
                // notifications says.
                () = heard => tokio::time::sleep_until(renewed + CANCEL_CHECK_GAP).await,
            }
            renewed = tokio::time::Instant::now();
            let sent_at = std::time::Instant::now();
            let renewal = self.store.renew_lease(claim, lease).await;
            if renewal.is_ok() {
                clock.renewed(sent_at);
                self.metrics.lease_renewals.inc();
                after_failure = None;
            }
            match renewal {
                Ok(Lease::CancelRequested) if cancel.is_some() => {
                    return LeaseEnd::CancelRequested;
                }
                Ok(_) => {}
                Err(e) if e.is_lost_claim() => return LeaseEnd::Lost(e),
                // A transient store failure: try again soon; the lease still has
                // two thirds to run.
                Err(e) => {
                    if after_failure.is_none() {
                        tracing::warn!(job_id = %claim.job_id, error = %e, "renewing the lease failed; trying again soon");
                    }
                    after_failure.get_or_insert_with(retry::Backoff::default);
                }
            }
        }
    }
}

/// Why [`Worker::keep_lease`] stopped renewing.
enum LeaseEnd {
    /// The claim was lost.
    Lost(StoreError),
    /// An operator asked to cancel the job.
    CancelRequested,
}

impl LeaseEnd {
    fn into_error(self, claim: &Claim) -> StoreError {
        match self {
            LeaseEnd::Lost(lost) => lost,
            // Not returned without a cancel to hear; fail safe as a lost claim.
            LeaseEnd::CancelRequested => claim.lost(),
        }
    }
}

/// What running a claimed job's segment came to.
enum Ran {
    /// The segment ran (or failed) against the compiled workflow.
    Segment {
        compiled: Arc<CompiledWorkflow>,
        /// Boxed: a park carries what it waits on, far larger than the other variants.
        outcome: Box<Result<SegmentOutcome, SegmentError>>,
        /// The final step's checkpoint, held back for the settlement.
        held: Option<StepCheckpoint>,
        /// Its timing, for its event.
        held_timing: Option<serde_json::Value>,
        /// The segment stored map elements (progress a retryable failure keeps).
        progressed: bool,
    },
    /// The stored snapshot no longer fits its workflow: fail loud with this error.
    Drifted(String),
    /// The snapshot could not be read (a store failure that may pass): give the
    /// claim back without spending the attempt.
    Unavailable(StoreError),
}
