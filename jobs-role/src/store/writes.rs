//! Writes after a claim: lease renewals, checkpoints, settlements and releases, each
//! fenced on `(job_id, lease_owner, claims)` while the row is RUNNING.

use super::*;
use workflow::runner::{WaitKind, Wake};

/// How a settle ends a claim.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// COMPLETED with the output and the one-line verdict.
    Completed {
        /// proto3 JSON of the output.
        result: Value,
        /// `N steps, output <type>`.
        verdict: String,
    },
    /// WAITING on steps that wait for an answer or an event (sleeps may wait beside
    /// them): the first is the one whose wait ends first. Made by
    /// [`Settlement::parked`].
    Waiting {
        /// The step.
        step: String,
        /// The request its rules built (what its reviewer is shown), if it has a
        /// request type.
        request: Option<Value>,
        /// How long the wait may last and how the job ends then; `None` waits for
        /// ever.
        timeout: Option<ParkedTimeout>,
        /// What the step waits for.
        kind: WaitKind,
        /// The other steps waited for at the same time (parallel branches), in the
        /// order their waits end (those that wait for ever last).
        others: Vec<ParkedWait>,
        /// What the job waits on, for the WAITING event (see [`ParkedWait::summary`]).
        waiting_on: Value,
        /// With a child step among the waits: the parent's count of ended children
        /// as its claim read it (a park that finds it moved resumes at once).
        children_seen: Option<i64>,
    },
    /// QUEUED until the first of its sleeps ends: every wait is a sleep. Made by
    /// [`Settlement::parked`].
    Sleeping {
        /// The sleeps, in declaration order.
        waits: Vec<ParkedWait>,
        /// What the job waits on, for the WAITING event.
        waiting_on: Value,
    },
    /// FAILED: a validation verdict or a non-retryable error.
    Failed {
        /// The error, prefixed with its kind.
        error: String,
        /// The violations of a validation verdict.
        verdict: Option<String>,
        /// The step that failed (the FAILED event's `step`); `None` when the job, not
        /// a step, is at fault (its stored state no longer fits its workflow).
        step: Option<String>,
    },
    /// DEAD: retries exhausted.
    Dead {
        /// The last error, verbatim.
        error: String,
    },
    /// QUEUED again after a retryable failure, claimable after `delay`.
    Retry {
        /// The backoff.
        delay: Duration,
        /// The error that caused it.
        error: String,
    },
}

impl Settlement {
    /// The status the job lands in.
    pub fn status(&self) -> JobStatus {
        match self {
            Settlement::Completed { .. } => JobStatus::Completed,
            Settlement::Waiting { .. } => JobStatus::Waiting,
            Settlement::Sleeping { .. } => JobStatus::Queued,
            Settlement::Failed { .. } => JobStatus::Failed,
            Settlement::Dead { .. } => JobStatus::Dead,
            Settlement::Retry { .. } => JobStatus::Queued,
        }
    }

    /// True for a park with a step that waits for an event: the worker then offers
    /// the job the events sent before it parked.
    pub fn waits_on_events(&self) -> bool {
        match self {
            Settlement::Waiting { kind, others, .. } => {
                matches!(kind, WaitKind::Event { .. })
                    || others
                        .iter()
                        .any(|w| matches!(w.kind, WaitKind::Event { .. }))
            }
            _ => false,
        }
    }

    /// How a job parks on `waits` (at least one; in declaration order): QUEUED until
    /// the first sleep ends when every wait is a sleep, WAITING otherwise (`child_ends`:
    /// the parent's count of ended children as its claim read it) with the
    /// wait that ends first as the first (those that wait for ever last; ties keep
    /// declaration order). `None` for no waits.
    pub fn parked(mut waits: Vec<ParkedWait>, child_ends: i64) -> Option<Settlement> {
        let waiting_on = Value::Array(waits.iter().map(ParkedWait::summary).collect());
        if waits.iter().all(|w| matches!(w.kind, WaitKind::Sleep(_))) {
            return (!waits.is_empty()).then_some(Settlement::Sleeping { waits, waiting_on });
        }
        let children_seen = waits
            .iter()
            .any(|w| matches!(w.kind, WaitKind::Child { .. }))
            .then_some(child_ends);
        waits.sort_by_key(|w| (w.timeout.is_none(), w.timeout.map(|t| t.after)));
        let mut waits = waits.into_iter();
        let first = waits.next()?;
        Some(Settlement::Waiting {
            step: first.step,
            request: first.request,
            timeout: first.timeout,
            kind: first.kind,
            others: waits.collect(),
            waiting_on,
            children_seen,
        })
    }

    /// Errors and verdicts may quote a step target's own message: a NUL in them must
    /// not make the settlement unstorable.
    fn storable(self) -> Settlement {
        match self {
            Settlement::Failed {
                error,
                verdict,
                step,
            } => Settlement::Failed {
                error: printable(&error),
                verdict: verdict.as_deref().map(printable),
                step,
            },
            Settlement::Dead { error } => Settlement::Dead {
                error: printable(&error),
            },
            Settlement::Retry { delay, error } => Settlement::Retry {
                delay,
                error: printable(&error),
            },
            other => other,
        }
    }
}

/// What a lease renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// Extended; the job runs on.
    Renewed,
    /// Extended, but an operator asked to cancel the job: settle it CANCELLED.
    CancelRequested,
}

/// How long a parked step waits for its answer, and how its job ends when nobody
/// answers in time (the sweeper settles it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParkedTimeout {
    /// The wait.
    pub after: Duration,
    /// FAILED or DEAD when it runs out.
    pub on_timeout: workflow::OnTimeout,
}

/// One step a parked job waits for (see [`Settlement::parked`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ParkedWait {
    /// The step.
    pub step: String,
    /// The request its rules built, if it has a request type.
    pub request: Option<Value>,
    /// Its own wait; `None` waits for ever (a sleep's end is its `kind`'s).
    pub timeout: Option<ParkedTimeout>,
    /// What it waits for.
    pub kind: WaitKind,
}

impl ParkedWait {
    /// What it waits on, as the WAITING event's `waitingOn` and get-job show it:
    /// the step, the kind, and the key of an event step or the sleep as written.
    pub fn summary(&self) -> Value {
        Value::Object(self.entry())
    }

    /// [`ParkedWait::summary`]'s fields.
    fn entry(&self) -> serde_json::Map<String, Value> {
        let mut entry = serde_json::Map::new();
        entry.insert("step".into(), Value::String(self.step.clone()));
        entry.insert("kind".into(), Value::from(self.kind.as_str()));
        match &self.kind {
            WaitKind::External => {}
            WaitKind::Sleep(Wake::After(duration)) => {
                let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
                entry.insert("forMs".into(), Value::from(millis));
            }
            WaitKind::Sleep(Wake::At(millis)) => {
                entry.insert("wakeMs".into(), Value::from(*millis));
            }
            WaitKind::Event { key, lookback } => {
                let millis = u64::try_from(lookback.as_millis()).unwrap_or(u64::MAX);
                entry.insert("key".into(), Value::String(key.clone()));
                entry.insert("lookbackMs".into(), Value::from(millis));
            }
            // The children's inputs are theirs to keep: the parent names the elements.
            WaitKind::Child { workflow, starts } => {
                entry.insert("workflow".into(), Value::String(workflow.clone()));
                entry.insert(
                    "items".into(),
                    starts
                        .iter()
                        .map(|(index, _)| Value::from(*index))
                        .collect(),
                );
            }
        }
        entry
    }

    /// Its entry in V22's `waits` column (without `untilMs`, which the database sets
    /// from its own clock when the job parks).
    pub fn to_json(&self) -> Value {
        let mut entry = self.entry();
        if let Some(request) = &self.request {
            entry.insert("request".into(), request.clone());
        }
        if let Some(timeout) = self.timeout {
            let millis = u64::try_from(timeout.after.as_millis()).unwrap_or(u64::MAX);
            entry.insert("timeoutMs".into(), Value::from(millis));
            entry.insert(
                "onTimeout".into(),
                Value::String(timeout.on_timeout.as_str().into()),
            );
        }
        Value::Object(entry)
    }
}

/// One step's checkpoint entry, as a claim appends it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCheckpoint {
    /// The step.
    pub step: String,
    /// Where the entry goes in the job's checkpoint array (the step's index): the
    /// append matches only while the array holds exactly this many entries, so an
    /// append sent twice (a COMMIT whose answer was lost) lands once.
    pub position: i32,
    /// The checkpoint entry (a JSON object: name, skipped, response).
    pub entry: Value,
}

/// What one claim writes at one commit point: a checkpoint, a settlement, or a
/// workflow's final checkpoint together with its settlement (in that order, in one
/// transaction). Fenced on the claim; see [`Store::commit_claim_writes`].
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimWrite {
    pub(super) claim: Claim,
    pub(super) checkpoint: Option<StepCheckpoint>,
    pub(super) settlement: Option<Settlement>,
    /// Elements of a map step (a write of its own: never with a checkpoint or a
    /// settlement).
    pub(super) items: Option<StepItems>,
    /// When the checkpointed step's first call started and how long it took
    /// (`{startedAt, tookMs}`): carried by its STEP_CHECKPOINT event's detail
    /// (`timing`), for the console's timeline; the row's checkpoint stays as it was.
    pub(super) timing: Option<Value>,
}

/// Elements of one map step whose calls ended, as a claim stores them (migration V23).
#[derive(Debug, Clone, PartialEq)]
pub struct StepItems {
    /// The map step.
    pub step: String,
    /// Per element: its position in the list, and its response (proto3 JSON) or, for
    /// an element that failed for good under `onItemFailure: "collect"`, its error.
    pub elements: Vec<(i32, Result<Value, String>)>,
}

impl ClaimWrite {
    /// Appends one checkpoint (with its STEP_CHECKPOINT event).
    pub fn checkpoint(claim: &Claim, checkpoint: StepCheckpoint) -> ClaimWrite {
        ClaimWrite {
            claim: claim.clone(),
            checkpoint: Some(checkpoint),
            settlement: None,
            items: None,
            timing: None,
        }
    }

    /// The same write, its STEP_CHECKPOINT event carrying `timing` (see
    /// [`ClaimWrite`]'s field).
    pub fn with_timing(mut self, timing: Option<Value>) -> ClaimWrite {
        self.timing = timing;
        self
    }

    /// Stores elements of a map step (no event: the step's checkpoint has one once
    /// every element is done). An element already stored is kept, so it is safe to
    /// send twice.
    pub fn items(claim: &Claim, items: StepItems) -> ClaimWrite {
        ClaimWrite {
            claim: claim.clone(),
            checkpoint: None,
            settlement: None,
            items: Some(items),
            timing: None,
        }
    }

    /// Ends the claim, after appending `held` (the workflow's final checkpoint, kept
    /// back so it commits with the settlement) when there is one.
    pub fn settle(
        claim: &Claim,
        held: Option<StepCheckpoint>,
        settlement: Settlement,
    ) -> Result<ClaimWrite, StoreError> {
        let to = settlement.status();
        if !JobStatus::Running.can_become(to) {
            return Err(StoreError::IllegalTransition {
                from: JobStatus::Running,
                to,
            });
        }
        Ok(ClaimWrite {
            claim: claim.clone(),
            checkpoint: held,
            settlement: Some(settlement.storable()),
            items: None,
            timing: None,
        })
    }

    /// Writes nothing: answered once every write queued before it has been
    /// committed (a flusher keeps its queue's order), so a release can wait for them.
    pub fn barrier(claim: &Claim) -> ClaimWrite {
        ClaimWrite {
            claim: claim.clone(),
            checkpoint: None,
            settlement: None,
            items: None,
            timing: None,
        }
    }

    /// The job it writes.
    pub fn claim(&self) -> &Claim {
        &self.claim
    }
}

impl Store {
    /// Extends the lease of a running claim; answers whether an operator asked to
    /// cancel the job meanwhile ([`Lease::CancelRequested`]).
    ///
    /// Within a third of the lease (at most [`COMMIT_DEADLINE`]): a renewal on a
    /// connection gone silent is given up (and the connection closed), so the next one
    /// goes out in time.
    pub async fn renew_lease(&self, claim: &Claim, lease: Duration) -> Result<Lease, StoreError> {
        let mut client = Abandonable::new(self.pool.get().await?);
        let deadline = (lease / 3).clamp(Duration::from_secs(1), COMMIT_DEADLINE);
        let asked = tokio::time::timeout(deadline, async {
            let statement = client.object().prepare_cached(sql::RENEW_LEASE).await?;
            let params: [&(dyn ToSql + Sync); 4] =
                [&claim.job_id, &claim.owner, &claim.token, &millis(lease)];
            Ok::<_, StoreError>(client.object().query_opt(&statement, &params).await?)
        })
        .await;
        let renewed = match asked {
            Ok(renewed) => {
                client.finished();
                renewed?
            }
            Err(_) => {
                return Err(StoreError::GroupCommit(format!(
                    "the lease renewal got no answer within {} ms",
                    deadline.as_millis()
                )));
            }
        };
        match renewed {
            None => Err(claim.lost()),
            Some(row) if row.get::<_, bool>("cancel_requested") => Ok(Lease::CancelRequested),
            Some(_) => Ok(Lease::Renewed),
        }
    }

    /// Appends one checkpoint at `position` (the step's index) with its
    /// STEP_CHECKPOINT event, in a transaction of its own (the worker batches its
    /// checkpoints through [`Store::commit_claim_writes`]).
    pub async fn append_checkpoint(
        &self,
        claim: &Claim,
        position: i32,
        step: &str,
        checkpoint: &Value,
    ) -> Result<(), StoreError> {
        let write = ClaimWrite::checkpoint(
            claim,
            StepCheckpoint {
                step: step.to_owned(),
                position,
                entry: checkpoint.clone(),
            },
        );
        self.commit_one(write).await
    }

    /// Ends a claim: completed, parked, failed, dead or retried, each with its event
    /// (none for retries: those are row changes, not commit points), in a transaction
    /// of its own.
    pub async fn settle(&self, claim: &Claim, settlement: Settlement) -> Result<(), StoreError> {
        self.commit_one(ClaimWrite::settle(claim, None, settlement)?)
            .await
    }

    /// Commits one claim's write in a transaction of its own, outside any flusher (a
    /// write a row lock held up, which must not cost every other job's batch the
    /// lock timeout again).
    pub async fn commit_alone(&self, write: ClaimWrite) -> Result<(), StoreError> {
        self.commit_one(write).await
    }

    async fn commit_one(&self, write: ClaimWrite) -> Result<(), StoreError> {
        self.commit_claim_writes(std::slice::from_ref(&write))
            .await
            .pop()
            // One answer per write, always; an empty answer would be a defect, and
            // it still fails safe as a write that did not commit.
            .unwrap_or_else(|| Err(StoreError::GroupCommit("the write got no answer".into())))
    }

    /// Gives a claim back without spending its attempt (claimable again after
    /// `delay`), unless the job was given back `max_releases` times in a row without a
    /// checkpoint in between: then it lands DEAD (`RELEASED: ...`, naming `reason`)
    /// with its event. Decided on the row, under the fence. Returns the status after.
    pub async fn release_claim(
        &self,
        claim: &Claim,
        delay: Duration,
        max_releases: i32,
        reason: &str,
    ) -> Result<JobStatus, StoreError> {
        self.give_back(claim, delay, max_releases, reason, true)
            .await
    }

    /// Gives back a claim whose next call a fleet-wide limit throttled: claimable
    /// again after `delay` (when the limit has room), the attempt returned and the
    /// release not counted (a throttle is not a lack of progress), `reason` kept as
    /// the job's `throttled` until its next claim. Sent twice, it finds the job given
    /// back under this claim's token and answers QUEUED.
    pub async fn release_throttled(
        &self,
        claim: &Claim,
        delay: Duration,
        reason: &str,
    ) -> Result<JobStatus, StoreError> {
        self.give_back(claim, delay, i32::MAX, reason, false).await
    }

    /// [`Store::release_claim`], the release `counted` or not.
    async fn give_back(
        &self,
        claim: &Claim,
        delay: Duration,
        max_releases: i32,
        reason: &str,
        counted: bool,
    ) -> Result<JobStatus, StoreError> {
        let reason = printable(reason);
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let Some(row) = tx
            .query_opt(
                sql::RELEASE_CLAIM,
                &[
                    &claim.job_id,
                    &claim.owner,
                    &claim.token,
                    &millis(delay),
                    &max_releases,
                    &reason,
                    &counted,
                ],
            )
            .await?
        else {
            tx.rollback().await?;
            // Sent again after a COMMIT whose answer was lost, the release finds the
            // job already given back under this claim's token: that is its answer.
            let state = client
                .query_opt(sql::CLAIM_WRITES_STATE, &[&vec![claim.job_id]])
                .await?;
            if let Some(state) = state
                && state.get::<_, i32>("claims") == claim.token
                && state.get::<_, Option<String>>("lease_owner").is_none()
            {
                let status: JobStatus = state.get::<_, String>("status").parse()?;
                if matches!(status, JobStatus::Queued | JobStatus::Dead) {
                    return Ok(status);
                }
            }
            return Err(claim.lost());
        };
        let status: JobStatus = row.get::<_, String>("status").parse()?;
        if status == JobStatus::Dead {
            insert_dead_event(&tx, claim.job_id, &claim.workflow_name, &row).await?;
        } else if delay.is_zero() {
            tx.execute(sql::NOTIFY_QUEUED, &[&claim.job_id.to_string()])
                .await?;
        }
        tx.commit().await?;
        Ok(status)
    }
}
