//! What a segment writes as it runs: each step's checkpoint, through the flusher and
//! before the next step is called (the last one held back for the settlement), and
//! the metadata every step call carries.

use std::collections::HashMap;

use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};

use workflow::runner::{Admission, CallCost, Wake};
use workflow::{
    CallGuard, CallMetadata, Checkpoint, CheckpointSink, CompiledStep, ItemOutcome, SinkError,
};

use super::{LeaseClock, TargetLimits, retry};
use crate::metrics::JobsMetrics;
use crate::store::{
    Claim, ClaimWrite, StepCheckpoint, StepItems, Store, StoreError, nul_path, printable,
};
use crate::worker::Flusher;

/// Persists each checkpoint, fenced, through the flusher before the engine runs the
/// next step; the last step's checkpoint is held for the settlement instead.
pub(super) struct StoreSink<'a> {
    pub(super) store: &'a Store,
    pub(super) flusher: &'a Flusher,
    pub(super) claim: &'a Claim,
    /// Whether the claim may have lapsed: checked before each step call.
    pub(super) clock: &'a LeaseClock,
    pub(super) metrics: &'a JobsMetrics,
    /// When the previous step of the segment ended (or the segment started).
    pub(super) last_step_ended: std::time::Instant,
    /// How many checkpoints the row holds before the next one: its position (steps
    /// of parallel branches are recorded one at a time, in the order they end).
    pub(super) next_step: usize,
    /// The position of the workflow's last checkpoint (its step count less one).
    pub(super) last_step: usize,
    /// The per-target caps, for calls that run beside others.
    pub(super) limits: &'a TargetLimits,
    /// When the first call of each step still running started (wall clock, for the
    /// timeline, and monotonic, for its duration).
    pub(super) started: HashMap<String, (std::time::SystemTime, std::time::Instant)>,
    /// Map elements this segment stored: progress, even when the segment fails.
    pub(super) stored_items: usize,
    pub(super) held: Option<StepCheckpoint>,
    /// The held checkpoint's timing (its event's `timing`).
    pub(super) held_timing: Option<Value>,
    /// When the sleeps the job parked on end, by step (the claim read them).
    pub(super) sleeps: &'a HashMap<String, i64>,
    /// The database's time of the claim, in milliseconds since the Unix epoch.
    pub(super) claimed_at_ms: i64,
    /// The fleet's limits on calls, taken before each.
    pub(super) throttle: &'a super::throttle::Throttle,
}

impl CheckpointSink for StoreSink<'_> {
    /// A sleep is over when its end (fixed when the job first parked on it, or the
    /// time its `until` names) is not after the database's time of the claim: the
    /// claim happened no earlier than the job's `run_after`, which is that end, so
    /// a sleep never ends early however the node's clock is set.
    fn slept(&mut self, step: &CompiledStep, wake: Wake) -> bool {
        let end = match (self.sleeps.get(&step.name), wake) {
            (Some(end), _) => *end,
            (None, Wake::At(end)) => end,
            (None, Wake::After(_)) => return false,
        };
        end <= self.claimed_at_ms
    }

    /// A claim that may have lapsed (the node was stalled past its lease) calls
    /// nothing more: another node may hold the job and have run this step already.
    /// The segment ends as a lost claim; the sweeper requeues the job if no one else
    /// took it.
    fn before_call(&mut self, step: &str) -> Result<(), SinkError> {
        if self.clock.lapsed() {
            return Err(Box::new(self.claim.lost()));
        }
        // The first call of a step (a map step calls once per element) starts it.
        if !self.started.contains_key(step) {
            self.started.insert(
                step.to_owned(),
                (crate::store::clock::now(), std::time::Instant::now()),
            );
        }
        Ok(())
    }

    /// A configured target limit matches the step's target.
    fn limits(&self, step: &CompiledStep) -> bool {
        self.throttle.limits(step)
    }

    /// The fleet's limits (target limits, the step's `rateLimit`) have room for the
    /// call, or it waits, is held back or defers the job: see [`super::throttle`].
    async fn admit(
        &mut self,
        step: &CompiledStep,
        cost: &CallCost,
        others_in_flight: bool,
    ) -> Admission {
        self.throttle
            .admit(
                self.store,
                self.metrics,
                &self.claim.workflow_name,
                step,
                cost,
                others_in_flight,
            )
            .await
    }

    /// A call beside the segment's others needs a permit of its own target, free now.
    fn beside_others(&mut self, step: &CompiledStep) -> Option<CallGuard> {
        match &step.target {
            Some(target) => self
                .limits
                .try_acquire(target)
                .map(|permit| Box::new(permit) as CallGuard),
            None => Some(Box::new(())),
        }
    }

    /// A map step's elements, stored together (fenced, and safe to send twice: an
    /// element stored is kept) before their slots go to new calls, sent again through
    /// a database outage as a checkpoint is.
    async fn record_items(
        &mut self,
        step: &CompiledStep,
        items: &[(usize, ItemOutcome)],
    ) -> Result<(), SinkError> {
        let mut elements = Vec::with_capacity(items.len());
        for (index, outcome) in items {
            let path = format!("{}[{index}]", step.name);
            let stored = match outcome {
                ItemOutcome::Response(json) => {
                    if let Some(at) = nul_path(json, &path) {
                        return Err(Box::new(StoreError::unstorable(&at)));
                    }
                    Ok(json.clone())
                }
                // An error may quote a target's own message: no NUL reaches the row.
                ItemOutcome::Failed(error) => Err(printable(error)),
            };
            // A list holds at most [workflow].max_map_items elements, far below 2^31.
            elements.push((i32::try_from(*index).unwrap_or(i32::MAX), stored));
        }
        self.metrics
            .map_items(&self.claim.workflow_name, &step.name, items);
        let (store, flusher, claim, clock) = (self.store, self.flusher, self.claim, self.clock);
        // One write per [`ELEMENT_BYTES_PER_WRITE`] of responses: the flusher's shared
        // transaction never carries one huge statement.
        for chunk in chunks_by_bytes(elements) {
            let stored = chunk.len();
            let write = ClaimWrite::items(
                claim,
                StepItems {
                    step: step.name.clone(),
                    elements: chunk,
                },
            );
            let alone = AtomicBool::new(false);
            retry::until_written(
                "map elements",
                claim.job_id,
                || !clock.lapsed(),
                || commit_through(store, flusher, write.clone(), &alone),
            )
            .await
            .map_err(|e| Box::new(e) as SinkError)?;
            // Counted as each write lands: progress even when a later one fails.
            self.stored_items += stored;
        }
        Ok(())
    }

    async fn record(&mut self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        // When its first call started and how long until now, for the console's
        // timeline: carried by the checkpoint's event, not the row.
        let timing = self.started.remove(&checkpoint.name).map(|(at, started)| {
            let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            serde_json::json!({
                "startedAt": prost_types::Timestamp::from(at).to_string(),
                "tookMs": took,
            })
        });
        let checkpoint = StepCheckpoint {
            step: checkpoint.name.clone(),
            // A workflow has at most a few hundred steps (compile bounds them).
            position: i32::try_from(self.next_step).unwrap_or(i32::MAX),
            entry: checkpoint.to_json(),
        };
        // A NUL PostgreSQL would refuse is refused here, before it can fail a batch of
        // other jobs' writes.
        if let Some(path) = nul_path(&checkpoint.entry, "checkpoint") {
            return Err(Box::new(StoreError::unstorable(&path)));
        }
        let is_last = self.next_step >= self.last_step;
        self.next_step += 1;
        let ended = std::time::Instant::now();
        self.metrics.step_took(
            &self.claim.workflow_name,
            &checkpoint.step,
            ended - self.last_step_ended,
        );
        self.last_step_ended = ended;
        if is_last {
            self.held = Some(checkpoint);
            self.held_timing = timing;
            return Ok(());
        }
        // A database outage does not cost the step: the checkpoint (conditional on its
        // position, so safe to send twice) is sent again until it lands, while the
        // lease renewal beside this keeps the claim, or until the claim may have
        // lapsed.
        let (store, flusher, claim, clock) = (self.store, self.flusher, self.claim, self.clock);
        let write = ClaimWrite::checkpoint(claim, checkpoint).with_timing(timing);
        let alone = AtomicBool::new(false);
        retry::until_written(
            "checkpoint",
            claim.job_id,
            || !clock.lapsed(),
            || commit_through(store, flusher, write.clone(), &alone),
        )
        .await
        .map_err(|e| Box::new(e) as SinkError)
    }
}

/// The most bytes of element responses one write of a map step's elements carries
/// (an element larger than this goes alone).
const ELEMENT_BYTES_PER_WRITE: usize = 8 * 1024 * 1024;

/// `elements` split into runs of at most [`ELEMENT_BYTES_PER_WRITE`] bytes of JSON.
fn chunks_by_bytes(
    elements: Vec<(i32, Result<Value, String>)>,
) -> Vec<Vec<(i32, Result<Value, String>)>> {
    let mut chunks = Vec::new();
    let mut current = Vec::new();
    let mut bytes = 0;
    for element in elements {
        let size = match &element.1 {
            Ok(json) => serde_json::to_vec(json).map_or(0, |b| b.len()),
            Err(error) => error.len(),
        };
        if !current.is_empty() && bytes + size > ELEMENT_BYTES_PER_WRITE {
            chunks.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += size;
        current.push(element);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// Commits `write` through the flusher, or in a transaction of its own once a row
/// lock held it up (`alone`): a write waiting on a row another transaction holds (an
/// operator's open transaction) must not cost every other job's batch the lock
/// timeout, retry after retry.
pub(super) async fn commit_through(
    store: &Store,
    flusher: &Flusher,
    write: ClaimWrite,
    alone: &AtomicBool,
) -> Result<(), StoreError> {
    let written = if alone.load(Ordering::SeqCst) {
        store.commit_alone(write).await
    } else {
        flusher.commit(write).await
    };
    if matches!(&written, Err(e) if e.is_lock_timeout()) {
        alone.store(true, Ordering::SeqCst);
    }
    written
}

/// The metadata every step call of a job carries.
pub(super) struct JobMetadata {
    pub(super) job_id: String,
    pub(super) attempt: i32,
    /// The steps an operator's retries re-ran (their checkpoints dropped), with how
    /// many times: such a step must not be answered from a target's idempotency
    /// cache. A step only resumed keeps its plain key.
    pub(super) reruns: HashMap<String, i32>,
}

impl JobMetadata {
    /// `<job_id>/<step>`; for a step re-run `n` times, `<job_id>/<step>/rerun-<n>`.
    fn idempotency_key(&self, step: &CompiledStep) -> String {
        match self.reruns.get(&step.name) {
            None => format!("{}/{}", self.job_id, step.name),
            Some(n) => format!("{}/{}/rerun-{n}", self.job_id, step.name),
        }
    }
}

impl CallMetadata for JobMetadata {
    fn for_step(&self, step: &CompiledStep) -> Vec<(String, String)> {
        let mut metadata = vec![
            ("x-protomolt-job-id".into(), self.job_id.clone()),
            ("x-protomolt-step".into(), step.name.clone()),
            ("x-protomolt-attempt".into(), self.attempt.to_string()),
            ("idempotency-key".into(), self.idempotency_key(step)),
        ];
        // Called inside the step's span: the target's own spans join the job's trace.
        if let Some(traceparent) = registry_stub::telemetry::current_traceparent() {
            metadata.push((registry_stub::telemetry::TRACEPARENT.into(), traceparent));
        }
        metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_writes_are_split_by_bytes_and_a_large_element_goes_alone() {
        let big = Value::String("x".repeat(ELEMENT_BYTES_PER_WRITE));
        let small = Value::String("y".into());
        let chunks = chunks_by_bytes(vec![
            (0, Ok(small.clone())),
            (1, Ok(big)),
            (2, Ok(small.clone())),
            (3, Err("failed".into())),
        ]);
        let positions: Vec<Vec<i32>> = chunks
            .iter()
            .map(|chunk| chunk.iter().map(|(at, _)| *at).collect())
            .collect();
        assert_eq!(positions, [vec![0], vec![1], vec![2, 3]]);
    }
}
