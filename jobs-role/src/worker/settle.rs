//! Settling a segment: what its outcome comes to for the row (`decide`),
//! and writing it through the flusher, sent again through a blip, CANCELLED instead
//! when an operator asked, a release when the store failed, FAILED loud when
//! PostgreSQL refuses what it would store.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::Value;
use workflow::runner::{WaitKind, WaitingStep};
use workflow::{CompiledWorkflow, FailureKind, SegmentError, SegmentOutcome, StepFailure};

use super::Worker;
use super::flusher::Flusher;
use super::retry;
use super::sink::commit_through;
use crate::status::JobStatus;
use crate::store::{
    Claim, ClaimWrite, ClaimedJob, ParkedTimeout, ParkedWait, Settlement, StepCheckpoint,
    StoreError, nul_path,
};

impl Worker {
    /// Commits a settlement (after `held`, the final checkpoint, when there is one).
    async fn commit_settlement(
        &self,
        flusher: &Flusher,
        claim: &Claim,
        held: Option<(StepCheckpoint, Option<Value>)>,
        settlement: Settlement,
    ) -> Result<(), StoreError> {
        let outcome = match &settlement {
            Settlement::Completed { .. } => "completed",
            Settlement::Waiting { .. } => "waiting",
            Settlement::Sleeping { .. } => "sleeping",
            Settlement::Failed { .. } => "failed",
            Settlement::Dead { .. } => "dead",
            Settlement::Retry { .. } => "retried",
        };
        let (held, timing) = held.map_or((None, None), |(held, timing)| (Some(held), timing));
        let write = ClaimWrite::settle(claim, held, settlement)?.with_timing(timing);
        match self.commit_write(flusher, claim, write).await {
            // Every settlement is refused once an operator asked to cancel.
            Err(lost) if lost.is_lost_claim() => self.cancelled_instead(claim, lost).await,
            settled => {
                if settled.is_ok() {
                    self.metrics.settled(outcome, &claim.workflow_name);
                }
                settled
            }
        }
    }

    /// Offers a job that just parked on event steps the events sent on their keys
    /// before it parked (within each step's lookback): run once the park committed,
    /// under the keys' locks, so an event sent meanwhile is either delivered by its
    /// send or found here.
    async fn catch_up_on_events(&self, job_id: uuid::Uuid) {
        // A few tries through a blip; past them the sweeper requeues a job that
        // still missed an event kept for its key, and the next park catches up.
        for pause_ms in [0u64, 200, 1_000] {
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
            let compiled = self.compiled.clone();
            let taken = self
                .store
                .take_kept_signals(job_id, |definition, step, payload, event_id| {
                    let compiled = compiled.clone();
                    Box::pin(async move {
                        crate::signals::offer(&compiled, &definition, &step, &payload, &event_id)
                            .await
                    })
                })
                .await;
            match taken {
                Ok(answered) => {
                    if !answered.is_empty() {
                        tracing::info!(%job_id, steps = ?answered, "answered by events sent before the job parked");
                    }
                    return;
                }
                Err(error) => {
                    tracing::warn!(%job_id, %error, "catching up on events sent before the job parked failed; trying again");
                }
            }
        }
    }

    /// Cancels the live descendants of a parent that ended FAILED or DEAD (a failed
    /// child, a failed step beside its children): nothing waits on them any more. A
    /// failure is logged; an operator's cancel of the parent does it again.
    async fn cancel_orphans(&self, job_id: uuid::Uuid) {
        let reason = "it ended without completing";
        match self.store.cancel_descendants(job_id, reason).await {
            Ok(0) => {}
            Ok(cancelled) => {
                tracing::info!(%job_id, cancelled, "cancelled the live children of a parent that failed")
            }
            Err(error) => {
                tracing::warn!(%job_id, %error, "cancelling the live children of a parent that failed did not finish")
            }
        }
    }

    /// Commits a settlement's write, sending it again (with backoff) while it fails
    /// for a reason that may pass: the caller runs this beside the lease renewal,
    /// which ends it if the claim is lost. Safe to send twice: a settlement moves the
    /// row out of RUNNING, so a second one matches nothing, and the store reads back
    /// whether it was the first one that landed.
    async fn commit_write(
        &self,
        flusher: &Flusher,
        claim: &Claim,
        write: ClaimWrite,
    ) -> Result<(), StoreError> {
        let alone = AtomicBool::new(false);
        retry::until_written(
            "settlement",
            claim.job_id,
            || true,
            || commit_through(&self.store, flusher, write.clone(), &alone),
        )
        .await
    }

    /// A settlement or release matched nothing: either the claim was lost (`lost`
    /// stands) or an operator asked to cancel the job, which is then settled
    /// CANCELLED.
    async fn cancelled_instead(&self, claim: &Claim, lost: StoreError) -> Result<(), StoreError> {
        // Sent again through a database blip for as long as the lease would last;
        // past it the sweeper settles the job CANCELLED anyway.
        let until = std::time::Instant::now() + self.config.lease();
        let settled = retry::until_written(
            "cancelled settlement",
            claim.job_id,
            || std::time::Instant::now() < until,
            || self.store.settle_cancelled(claim),
        )
        .await;
        match settled {
            Ok(()) => {
                self.metrics.settled("cancelled", &claim.workflow_name);
                tracing::info!(job_id = %claim.job_id, "cancelled by an operator");
                Ok(())
            }
            Err(e) if e.is_lost_claim() => Err(lost),
            Err(e) => Err(e),
        }
    }

    /// Abandons the job for an operator's cancel: whatever it queued commits first
    /// (the flusher keeps the order), then it settles CANCELLED.
    pub(super) async fn cancel_now(
        &self,
        flusher: &Flusher,
        claim: &Claim,
    ) -> Result<(), StoreError> {
        let _ = flusher.commit(ClaimWrite::barrier(claim)).await;
        self.cancelled_instead(claim, claim.lost()).await
    }

    /// Fails a job whose stored state no longer fits its workflow: loud, no retry.
    pub(super) async fn fail_loud(
        &self,
        flusher: &Flusher,
        claim: &Claim,
        error: String,
    ) -> Result<(), StoreError> {
        let failed = Settlement::Failed {
            error,
            verdict: None,
            step: None,
        };
        self.commit_settlement(flusher, claim, None, failed).await
    }

    /// Gives the claim back without spending its attempt, unless the job was given
    /// back `max_releases` times in a row without progress (the row's own count, which
    /// a checkpoint resets): then it lands DEAD with the reason, so a job that can
    /// never make progress does not loop for ever.
    pub(super) async fn release(
        &self,
        claim: &Claim,
        delay: Duration,
        reason: &str,
    ) -> Result<(), StoreError> {
        let status = match retry::until_written(
            "release",
            claim.job_id,
            || true,
            || {
                self.store
                    .release_claim(claim, delay, self.config.max_releases, reason)
            },
        )
        .await
        {
            Err(lost) if lost.is_lost_claim() => return self.cancelled_instead(claim, lost).await,
            released => released?,
        };
        if status == JobStatus::Dead {
            self.metrics.settled("dead", &claim.workflow_name);
            tracing::warn!(job_id = %claim.job_id, %reason, "released too often without progress: the job is DEAD");
        } else {
            self.metrics.settled("released", &claim.workflow_name);
        }
        Ok(())
    }

    /// Gives back a claim whose next call a fleet-wide limit throttled (attempt kept,
    /// not counted as a release), claimable after `delay`.
    async fn release_throttled(
        &self,
        claim: &Claim,
        delay: Duration,
        reason: &str,
    ) -> Result<(), StoreError> {
        match retry::until_written(
            "throttled release",
            claim.job_id,
            || true,
            || self.store.release_throttled(claim, delay, reason),
        )
        .await
        {
            Err(lost) if lost.is_lost_claim() => self.cancelled_instead(claim, lost).await,
            released => {
                released?;
                self.metrics.settled("throttled", &claim.workflow_name);
                tracing::debug!(job_id = %claim.job_id, %reason, "throttled: given back until the limit has room");
                Ok(())
            }
        }
    }

    /// Settles the segment's outcome. When PostgreSQL refuses what the settlement
    /// writes, the job fails loud instead (retrying the same write could never
    /// succeed), naming the step when it was the held final checkpoint that was
    /// refused.
    pub(super) async fn settle(
        &self,
        flusher: &Flusher,
        job: &ClaimedJob,
        compiled: &CompiledWorkflow,
        outcome: Result<SegmentOutcome, SegmentError>,
        held: Option<(StepCheckpoint, Option<Value>)>,
        progressed: bool,
    ) -> Result<(), StoreError> {
        let claim = &job.claim;
        let settlement = match self.decide(job, compiled, outcome, progressed) {
            Decision::Settle(Settlement::Completed { result, .. })
                if let Some(path) = nul_path(&result, "output") =>
            {
                let refused = StoreError::unstorable(&path);
                let error = format!("WORKFLOW: the job's settlement cannot be stored: {refused}");
                return self.fail_loud(flusher, claim, error).await;
            }
            Decision::Settle(settlement) => settlement,
            Decision::Release { delay, reason } => {
                return self.release(claim, delay, &reason).await;
            }
            Decision::Throttle { delay, reason } => {
                return self.release_throttled(claim, delay, &reason).await;
            }
            Decision::Lost(lost) => return Err(lost),
        };
        // The children a park waits for exist before it parks.
        let settlement = match self.start_children(job, compiled, &settlement).await {
            Ok(Ok(())) => settlement,
            Ok(Err(failed)) => failed,
            Err(lost) if lost.is_lost_claim() => return self.cancelled_instead(claim, lost).await,
            Err(refused) if refused.is_data_error() => {
                let error = format!("WORKFLOW: the job's children cannot be stored: {refused}");
                return self.fail_loud(flusher, claim, error).await;
            }
            Err(StoreError::Conflict(id)) => {
                let error = format!(
                    "WORKFLOW: child job id {id} is taken by a job that is not this job's child"
                );
                return self.fail_loud(flusher, claim, error).await;
            }
            Err(e) => {
                let delay = self.config.backoff(claim.attempt);
                return self
                    .release(
                        claim,
                        delay,
                        &format!("starting child workflows failed: {e}"),
                    )
                    .await;
            }
        };
        let waits_on_events = settlement.waits_on_events();
        // A parent that ends without completing takes its live children with it.
        let orphans = matches!(
            settlement,
            Settlement::Failed { .. } | Settlement::Dead { .. }
        ) && compiled.steps.iter().any(|s| s.child.is_some());
        let refused = match self
            .commit_settlement(flusher, claim, held.clone(), settlement.clone())
            .await
        {
            Err(refused) if refused.is_data_error() => refused,
            Ok(()) if waits_on_events => {
                self.catch_up_on_events(claim.job_id).await;
                return Ok(());
            }
            Ok(()) if orphans => {
                self.cancel_orphans(claim.job_id).await;
                return Ok(());
            }
            settled => return settled,
        };
        // Tell the refused checkpoint from the refused settlement: the checkpoint
        // alone first, then the settlement alone.
        if let Some((checkpoint, timing)) = held {
            let step = checkpoint.step.clone();
            match flusher
                .commit(ClaimWrite::checkpoint(claim, checkpoint).with_timing(timing))
                .await
            {
                Err(e) if e.is_data_error() => {
                    let error =
                        format!("WORKFLOW: step '{step}': its response cannot be stored: {e}");
                    return self.fail_loud(flusher, claim, error).await;
                }
                Err(e) => return Err(e),
                Ok(()) => match self
                    .commit_settlement(flusher, claim, None, settlement)
                    .await
                {
                    Err(refused) if refused.is_data_error() => {
                        let error =
                            format!("WORKFLOW: the job's settlement cannot be stored: {refused}");
                        return self.fail_loud(flusher, claim, error).await;
                    }
                    settled => return settled,
                },
            }
        }
        let error = format!("WORKFLOW: the job's settlement cannot be stored: {refused}");
        self.fail_loud(flusher, claim, error).await
    }

    /// What the segment's outcome comes to for the row. A retryable failure of a
    /// segment that stored map elements gives the claim back without spending the
    /// attempt (a map longer than one segment, or one element failing while the
    /// others are called, must not run out of attempts while it advances): counted as
    /// a release, which the next stored elements start over.
    fn decide(
        &self,
        job: &ClaimedJob,
        compiled: &CompiledWorkflow,
        outcome: Result<SegmentOutcome, SegmentError>,
        progressed: bool,
    ) -> Decision {
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
                Decision::Settle(Settlement::Completed { result, verdict })
            }
            Ok(SegmentOutcome::Parked {
                step,
                request,
                kind,
                also_waiting,
                ..
            }) => {
                // Each step's own wait, else the node's default, else for ever; a sleep
                // ends when it ends.
                let timeout = |name: &str, kind: &WaitKind| {
                    if matches!(kind, WaitKind::Sleep(_) | WaitKind::Child { .. }) {
                        return None;
                    }
                    compiled.step(name).and_then(|parked| {
                        let after = parked.wait_timeout.or(self.config.wait_timeout())?;
                        Some(ParkedTimeout {
                            after,
                            on_timeout: parked.on_timeout,
                        })
                    })
                };
                let first = WaitingStep {
                    step,
                    request,
                    kind,
                };
                let waits: Vec<ParkedWait> = std::iter::once(first)
                    .chain(also_waiting)
                    .map(|w| ParkedWait {
                        timeout: timeout(&w.step, &w.kind),
                        step: w.step,
                        request: w.request,
                        kind: w.kind,
                    })
                    .collect();
                match Settlement::parked(waits, job.child_ends) {
                    Some(settlement) => Decision::Settle(settlement),
                    // A parked segment names at least the step it parked on.
                    None => Decision::Settle(Settlement::Failed {
                        error: "WORKFLOW: the segment parked on no step".into(),
                        verdict: None,
                        step: None,
                    }),
                }
            }
            Err(SegmentError::Failed(failure)) if progressed && failure.is_retryable() => {
                tracing::info!(job_id = %claim.job_id, error = %failure, "retryable failure after storing map elements: requeued without spending the attempt");
                Decision::Release {
                    delay: self.config.backoff(claim.attempt),
                    reason: format!("the segment stored map elements, then: {failure}"),
                }
            }
            Err(SegmentError::Failed(failure)) => Decision::Settle(self.failure(job, &failure)),
            // A fleet-wide limit had no room (StoreSink::admit): given back, not failed.
            Err(SegmentError::NotCalled { source, .. })
                if source
                    .downcast_ref::<super::throttle::Throttled>()
                    .is_some() =>
            {
                match source.downcast::<super::throttle::Throttled>() {
                    Ok(throttled) => Decision::Throttle {
                        delay: throttled.delay,
                        reason: throttled.reason,
                    },
                    // Just checked: the downcast cannot fail.
                    Err(_) => Decision::Lost(claim.lost()),
                }
            }
            // Refused otherwise only when the claim may have lapsed
            // (StoreSink::before_call).
            Err(SegmentError::NotCalled { step, source }) => {
                tracing::warn!(job_id = %claim.job_id, %step, reason = %source, "the claim may have lapsed (this node stalled past its lease): the step is not called");
                Decision::Lost(claim.lost())
            }
            Err(SegmentError::Checkpoint { step, source }) => match source.downcast::<StoreError>()
            {
                Ok(store_error) if store_error.is_lost_claim() => Decision::Lost(*store_error),
                Ok(store_error) if store_error.is_data_error() => {
                    Decision::Settle(Settlement::Failed {
                        error: format!(
                            "WORKFLOW: step '{step}': its response cannot be stored: {store_error}"
                        ),
                        verdict: None,
                        step: Some(step.to_string()),
                    })
                }
                Ok(store_error) => {
                    tracing::warn!(job_id = %claim.job_id, %step, error = %store_error, "checkpointing failed; requeueing without burning the attempt");
                    Decision::Release {
                        delay: self.config.backoff(claim.attempt),
                        reason: format!("checkpointing step '{step}' failed: {store_error}"),
                    }
                }
                Err(other) => Decision::Settle(Settlement::Failed {
                    error: format!(
                        "WORKFLOW: recording the checkpoint of step '{step}' failed: {other}"
                    ),
                    verdict: None,
                    step: Some(step.to_string()),
                }),
            },
        }
    }

    /// How a failed step settles: retried with backoff or DEAD when retryable, FAILED
    /// otherwise (with the violations of a validation verdict).
    fn failure(&self, job: &ClaimedJob, failure: &StepFailure) -> Settlement {
        let claim = &job.claim;
        let error = failure.to_string();
        self.metrics.step_failed(
            &claim.workflow_name,
            failure.step.as_deref().unwrap_or("-"),
            &failure_code(&failure.kind),
        );
        if failure.is_retryable() {
            if claim.attempt < job.max_attempts {
                let delay = self.config.backoff(claim.attempt);
                tracing::info!(job_id = %claim.job_id, attempt = claim.attempt, delay_ms = delay.as_millis() as u64, %error, "retryable failure: requeued with backoff");
                return Settlement::Retry { delay, error };
            }
            return Settlement::Dead { error };
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
        Settlement::Failed {
            error,
            verdict,
            step: failure.step.clone(),
        }
    }
}

/// The label a failed step is counted under: its gRPC code in the canonical spelling
/// (`UNAVAILABLE`, `DEADLINE_EXCEEDED`), or the failure's kind.
fn failure_code(kind: &FailureKind) -> String {
    match kind {
        FailureKind::Grpc { code, .. } => {
            let mut canonical = String::new();
            for (i, c) in format!("{code:?}").chars().enumerate() {
                if c.is_uppercase() && i > 0 {
                    canonical.push('_');
                }
                canonical.push(c.to_ascii_uppercase());
            }
            canonical
        }
        FailureKind::Deadline => "DEADLINE".into(),
        FailureKind::Validation { .. } => "VALIDATION".into(),
        FailureKind::Gate => "GATE".into(),
        FailureKind::Mapping => "MAPPING".into(),
        FailureKind::Workflow => "WORKFLOW".into(),
        FailureKind::Child => "CHILD".into(),
    }
}

/// What a segment's outcome comes to.
enum Decision {
    /// Write this settlement.
    Settle(Settlement),
    /// Give the claim back without spending the attempt (a transient store failure).
    Release { delay: Duration, reason: String },
    /// Give the claim back, uncounted, until a fleet-wide limit has room.
    Throttle { delay: Duration, reason: String },
    /// The claim was lost: write nothing.
    Lost(StoreError),
}
