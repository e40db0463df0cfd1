//! The worker fleet of one node: `worker_count` claim loops, the sweeper, and the
//! wake-up listener.
//!
//! Per claimed job, renewing the lease from the moment of the claim: re-parse the
//! snapshot, replay the checkpoints (the engine's non-trusting replay), take the
//! per-target permit for the next unexecuted step (a claim waiting for its permit
//! keeps its lease), run a segment, persist each checkpoint before the next step,
//! then settle:
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
//! `x-protomolt-attempt` and `idempotency-key: <job_id>/<step>`, because a retried
//! step may have done its side effect before its checkpoint landed.

mod limits;
mod sweeper;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use workflow::compile::decode_json;
use workflow::{
    CallMetadata, Checkpoint, CheckpointSink, CompiledStep, CompiledWorkflow, FailureKind, Runner,
    SegmentError, SegmentOutcome, SinkError, StepFailure, replay_checkpoints,
};

pub use limits::TargetLimits;
pub use sweeper::sweep_loop;

use crate::compiled::CompiledCache;
use crate::config::JobsConfig;
use crate::status::JobStatus;
use crate::store::{Claim, ClaimedJob, Settlement, Store, StoreError};

/// What the claim loops of one node share.
pub struct Worker {
    store: Store,
    runner: Arc<Runner>,
    config: JobsConfig,
    limits: TargetLimits,
    wake: Arc<Notify>,
    compiled: Arc<CompiledCache>,
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
        let limits = TargetLimits::new(config.max_concurrent_per_target);
        Arc::new(Worker {
            store,
            runner,
            config,
            limits,
            wake,
            compiled,
        })
    }

    /// One claim loop: claims and runs jobs until `shutdown`, sleeping on the wake-up
    /// (or the poll interval) when nothing is claimable.
    pub async fn claim_loop(self: Arc<Self>, index: usize, shutdown: CancellationToken) {
        let owner = format!("{}/loop-{index}", self.config.worker_id);
        while !shutdown.is_cancelled() {
            // Register for the wake-up before looking, so a NOTIFY that lands between
            // the empty claim and the wait is not missed.
            let woken = self.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match self.store.claim_next_job(&owner, self.config.lease()).await {
                Ok(Some(job)) => {
                    self.run_job(job, &shutdown).await;
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(%owner, error = %e, "claiming failed; retrying after the poll interval")
                }
            }
            tokio::select! {
                () = &mut woken => {}
                () = tokio::time::sleep(self.config.poll_interval()) => {}
                () = shutdown.cancelled() => {}
            }
        }
        tracing::debug!(%owner, "claim loop stopped");
    }

    /// Runs one claimed job to a settlement. On shutdown the segment may finish within
    /// the grace period; after that its claim is released for another node.
    pub async fn run_job(&self, job: ClaimedJob, shutdown: &CancellationToken) {
        let claim = job.claim.clone();
        let run = self.execute(job);
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
                self.release(&claim, Duration::ZERO, "the node shut down")
                    .await
            }
        };
        match settlement_result {
            Ok(()) => {}
            Err(e) if e.is_lost_claim() => {
                tracing::warn!(job_id = %claim.job_id, attempt = claim.attempt, "the claim was lost; another worker owns the job now")
            }
            Err(e) => {
                tracing::error!(job_id = %claim.job_id, error = %e, "settling failed; the sweeper will requeue the job when its lease passes")
            }
        }
    }

    /// Fails a job whose stored state no longer fits its workflow: loud, no retry.
    async fn fail_loud(&self, claim: &Claim, error: String) -> Result<(), StoreError> {
        let failed = Settlement::Failed {
            error: &error,
            verdict: None,
        };
        self.store.settle(claim, failed).await
    }

    /// Gives the claim back without spending its attempt, unless the job was given
    /// back `max_releases` times in a row without progress (the row's own count, which
    /// a checkpoint resets): then it lands DEAD with the reason, so a job that can
    /// never make progress does not loop for ever.
    async fn release(
        &self,
        claim: &Claim,
        delay: Duration,
        reason: &str,
    ) -> Result<(), StoreError> {
        let status = self
            .store
            .release_claim(claim, delay, self.config.max_releases, reason)
            .await?;
        if status == JobStatus::Dead {
            tracing::warn!(job_id = %claim.job_id, %reason, "released too often without progress: the job is DEAD");
        }
        Ok(())
    }

    /// Runs the claimed job and settles it; the lease is renewed from the claim until
    /// the segment ends (also while the claim waits for its per-target permit). The
    /// error is the store's.
    async fn execute(&self, job: ClaimedJob) -> Result<(), StoreError> {
        let claim = &job.claim;
        let ran = tokio::select! {
            ran = self.run_segment(&job) => ran,
            lost = self.keep_lease(claim) => return Err(lost),
        };
        match ran {
            Ran::Segment { compiled, outcome } => self.settle(&job, &compiled, outcome).await,
            Ran::Drifted(error) => self.fail_loud(claim, error).await,
        }
    }

    /// Compiles, replays, waits for the permit and runs one segment.
    async fn run_segment(&self, job: &ClaimedJob) -> Ran {
        let claim = &job.claim;
        let compiled = match self
            .compiled
            .get_or_compile_off_thread(&job.definition)
            .await
        {
            Ok(compiled) => compiled,
            Err(findings) => {
                return Ran::Drifted(format!(
                    "WORKFLOW: the stored definition no longer compiles: {findings}"
                ));
            }
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
        let next_target = compiled
            .steps
            .get(prior.len())
            .filter(|step| !step.is_external())
            .and_then(|step| step.target.clone());
        let _permit = match &next_target {
            Some(target) => self.limits.acquire(target).await,
            None => None,
        };

        let mut sink = StoreSink {
            store: &self.store,
            claim,
        };
        let metadata = JobMetadata {
            job_id: claim.job_id.to_string(),
            attempt: claim.attempt,
        };
        let outcome = self
            .runner
            .run_segment(&compiled, &input, prior, &mut sink, &metadata)
            .await;
        Ran::Segment { compiled, outcome }
    }

    /// Renews the lease every third of its length until the renewal fails; returns
    /// that failure (a lost claim stops the segment).
    async fn keep_lease(&self, claim: &Claim) -> StoreError {
        let lease = self.config.lease();
        let every = (lease / 3).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(every).await;
            match self.store.renew_lease(claim, lease).await {
                Ok(()) => {}
                Err(e) if e.is_lost_claim() => return e,
                // A transient store failure: try again at the next tick; the lease
                // still has two thirds to run.
                Err(e) => {
                    tracing::warn!(job_id = %claim.job_id, error = %e, "renewing the lease failed")
                }
            }
        }
    }

    /// Settles the segment's outcome. When PostgreSQL refuses what the settlement
    /// writes (the output holds a NUL, say), the job fails loud instead: retrying the
    /// same write could never succeed.
    async fn settle(
        &self,
        job: &ClaimedJob,
        compiled: &CompiledWorkflow,
        outcome: Result<SegmentOutcome, SegmentError>,
    ) -> Result<(), StoreError> {
        match self.settle_outcome(job, compiled, outcome).await {
            Err(refused) if refused.is_data_error() => {
                let error = format!("WORKFLOW: the job's settlement cannot be stored: {refused}");
                self.fail_loud(&job.claim, error).await
            }
            settled => settled,
        }
    }

    async fn settle_outcome(
        &self,
        job: &ClaimedJob,
        compiled: &CompiledWorkflow,
        outcome: Result<SegmentOutcome, SegmentError>,
    ) -> Result<(), StoreError> {
        let claim = &job.claim;
        match outcome {
            Ok(SegmentOutcome::Completed {
                output_json: result,
                steps,
                ..
            }) => {
                let verdict = format!(
                    "{} steps, output {}",
                    steps.len(),
                    compiled.output_type().full_name()
                );
                self.store
                    .settle(
                        claim,
                        Settlement::Completed {
                            result: &result,
                            verdict: &verdict,
                        },
                    )
                    .await
            }
            Ok(SegmentOutcome::Parked { step, .. }) => {
                self.store
                    .settle(claim, Settlement::Waiting { step: &step })
                    .await
            }
            Err(SegmentError::Failed(failure)) => self.settle_failure(job, &failure).await,
            Err(SegmentError::Checkpoint { step, source }) => match source.downcast::<StoreError>()
            {
                Ok(store_error) if store_error.is_lost_claim() => Err(*store_error),
                Ok(store_error) if store_error.is_data_error() => {
                    let error = format!(
                        "WORKFLOW: step '{step}': its response cannot be stored: {store_error}"
                    );
                    self.fail_loud(claim, error).await
                }
                Ok(store_error) => {
                    tracing::warn!(job_id = %claim.job_id, %step, error = %store_error, "checkpointing failed; requeueing without burning the attempt");
                    let delay = self.config.backoff(claim.attempt);
                    let reason = format!("checkpointing step '{step}' failed: {store_error}");
                    self.release(claim, delay, &reason).await
                }
                Err(other) => {
                    let error = format!(
                        "WORKFLOW: recording the checkpoint of step '{step}' failed: {other}"
                    );
                    self.store
                        .settle(
                            claim,
                            Settlement::Failed {
                                error: &error,
                                verdict: None,
                            },
                        )
                        .await
                }
            },
        }
    }

    async fn settle_failure(
        &self,
        job: &ClaimedJob,
        failure: &StepFailure,
    ) -> Result<(), StoreError> {
        let claim = &job.claim;
        let error = failure.to_string();
        if failure.is_retryable() {
            if claim.attempt < job.max_attempts {
                let delay = self.config.backoff(claim.attempt);
                tracing::info!(job_id = %claim.job_id, attempt = claim.attempt, delay_ms = delay.as_millis() as u64, %error, "retryable failure: requeued with backoff");
                return self
                    .store
                    .settle(
                        claim,
                        Settlement::Retry {
                            delay,
                            error: &error,
                        },
                    )
                    .await;
            }
            return self
                .store
                .settle(claim, Settlement::Dead { error: &error })
                .await;
        }
        let verdict = match &failure.kind {
            FailureKind::Validation { violations } => Some(
                violations
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            _ => None,
        };
        self.store
            .settle(
                claim,
                Settlement::Failed {
                    error: &error,
                    verdict: verdict.as_deref(),
                },
            )
            .await
    }
}

/// What running a claimed job's segment came to.
enum Ran {
    /// The segment ran (or failed) against the compiled workflow.
    Segment {
        compiled: Arc<CompiledWorkflow>,
        outcome: Result<SegmentOutcome, SegmentError>,
    },
    /// The stored snapshot no longer fits its workflow: fail loud with this error.
    Drifted(String),
}

/// Persists each checkpoint, fenced, before the engine runs the next step.
struct StoreSink<'a> {
    store: &'a Store,
    claim: &'a Claim,
}

impl CheckpointSink for StoreSink<'_> {
    async fn record(&mut self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        let entry: Value = checkpoint.to_json();
        self.store
            .append_checkpoint(self.claim, &checkpoint.name, &entry)
            .await
            .map_err(|e| Box::new(e) as SinkError)
    }
}

/// The metadata every step call of a job carries.
struct JobMetadata {
    job_id: String,
    attempt: i32,
}

impl CallMetadata for JobMetadata {
    fn for_step(&self, step: &CompiledStep) -> Vec<(String, String)> {
        vec![
            ("x-protomolt-job-id".into(), self.job_id.clone()),
            ("x-protomolt-step".into(), step.name.clone()),
            ("x-protomolt-attempt".into(), self.attempt.to_string()),
            (
                "idempotency-key".into(),
                format!("{}/{}", self.job_id, step.name),
            ),
        ]
    }
}
