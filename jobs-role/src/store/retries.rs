//! Retries by an operator: `retry-job` puts a DEAD, FAILED or CANCELLED job (or a
//! COMPLETED one, from a named step) back in the queue with a fresh retry budget,
//! decided under the row lock. Nothing automatic ever does this. A retry is an act,
//! not a request made idempotent: sent again after it was carried out (a client's
//! resend after a timeout), it finds the job finished again and re-queues it again.
//! One job or many are retried the same way (see
//! [`operator_acts`](super::operator_acts)).

use std::sync::Arc;

use super::operator_acts::{Act, ActedOn, ByJob, Recheck};
use super::*;

/// What the operator asked for.
#[derive(Debug, Clone)]
pub struct Retry<'a> {
    /// The step to run again from: its checkpoint and those of every step that runs
    /// after it (directly or through others) are dropped. `None` keeps every
    /// checkpoint (the job resumes at the first missing one).
    pub from_step: Option<RerunFrom<'a>>,
    /// The new retry budget; `None` keeps the job's own.
    pub max_attempts: Option<i32>,
    /// Why, for the RETRIED event.
    pub reason: Option<&'a str>,
    /// The snapshots the jobs move onto (`workflow: "current"`); `None` keeps each
    /// job's own.
    pub moves: Option<&'a SnapshotMoves>,
}

/// Where a retry onto the current stored workflow moves each job, decided by the verb
/// from what [`Store::retry_candidates`] read, and checked again under each row lock.
#[derive(Debug, Clone, Default)]
pub struct SnapshotMoves {
    /// The snapshots moved onto: their digests (the node's) and definitions.
    pub targets: Vec<(Arc<str>, Arc<Value>)>,
    /// Per job: where it moves, and what its checkpoints were checked at.
    pub jobs: std::collections::HashMap<Uuid, SnapshotMove>,
}

/// One job's move onto another snapshot.
#[derive(Debug, Clone)]
pub struct SnapshotMove {
    /// Its position in [`SnapshotMoves::targets`].
    pub target: usize,
    /// The snapshot the job named when its results were checked against the target.
    pub checked_digest: String,
    /// Its claims then: a claim since (the job ran again) voids the check.
    pub checked_claims: i32,
    /// For each step of the target workflow, the 1-based position of the step of the
    /// same name in the job's old one (0: none), so re-run counts follow step names.
    pub reruns_from: Arc<Vec<i32>>,
}

/// A job a retry onto the current stored workflow looks at first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryCandidate {
    /// The job.
    pub job_id: Uuid,
    /// Its workflow's name.
    pub workflow_name: String,
    /// Its status when read.
    pub status: JobStatus,
    /// The snapshot it names.
    pub digest: String,
    /// Its claims so far.
    pub claims: i32,
    /// True while the row still holds its snapshot (written before migration V21 and
    /// not moved out yet): it cannot move until it is.
    pub inline: bool,
    /// Whether it was submitted by a stored workflow's name (`None`: before V31).
    pub submitted_by_name: Option<bool>,
    /// The job whose child step started it, if any.
    pub parent_job_id: Option<Uuid>,
    /// Its input (canonical proto3 JSON).
    pub input: Value,
    /// The concurrency keys it holds.
    pub concurrency_keys: Vec<String>,
    /// The steps of its checkpoints, in the order they were written.
    pub checkpointed: Vec<String>,
    /// The steps it keeps part of a result of (stored map elements, child jobs), each
    /// once.
    pub parts: Vec<String>,
}

/// The step an operator's retry runs again from, and what that drops.
#[derive(Debug, Clone)]
pub struct RerunFrom<'a> {
    /// The step named.
    pub step: &'a str,
    /// It and every step that runs after it (its descendants in the workflow the job
    /// will run): name and position in the workflow's declaration. Their checkpoints
    /// are dropped, and each one dropped counts one more re-run of its step.
    pub dropped: Vec<(String, usize)>,
    /// Steps of the job's old workflow after the one named that the workflow it moves
    /// onto does not have (`workflow: "current"`): their results are dropped too.
    pub also_dropped: Vec<String>,
}

/// What `retry-job` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryOutcome {
    /// QUEUED again; `was` is the status it left.
    Retried {
        /// The status before the retry.
        was: JobStatus,
        /// Checkpoints kept: every one but those of `fromStep` and the steps after it
        /// (in a chain, the steps before `fromStep`, or fewer when the job never got
        /// that far).
        checkpoints_kept: i32,
        /// The digest of the snapshot the job runs now.
        snapshot: String,
        /// The one it ran before, when the retry moved it onto another.
        snapshot_before: Option<String>,
    },
    /// Its results do not fit the stored workflow it was to move onto, one finding per
    /// misfit (decided by the verb before the act; nothing changed).
    Incompatible {
        /// Its status.
        status: JobStatus,
        /// What does not fit.
        findings: Vec<String>,
    },
    /// It ran again, or moved onto another snapshot, after its results were checked
    /// against the stored workflow (nothing changed: send the retry again).
    ChangedWhileChecked {
        /// Its status now.
        status: JobStatus,
    },
    /// FAILED before it was ever claimed (its submission was refused): submit again.
    NeverRan,
    /// The job is not in a state a retry takes (live, or COMPLETED without a step).
    WrongState {
        /// Its status now.
        status: JobStatus,
    },
}

impl RetryOutcome {
    /// What a retry does to a job in `status` that `claims` claims have run, decided
    /// under the row lock (`from_a_step`: the operator named a step to run again from).
    fn of(status: JobStatus, claims: i32, from_a_step: bool) -> Option<RetryOutcome> {
        if !status.can_be_retried(from_a_step) {
            return Some(RetryOutcome::WrongState { status });
        }
        // FAILED before any claim: its submission was refused (a broker-native request
        // naming an unknown workflow, or an input its rules reject). Running it would
        // skip those checks; it must be submitted again instead.
        if status == JobStatus::Failed && claims == 0 {
            return Some(RetryOutcome::NeverRan);
        }
        debug_assert!(status.can_become(JobStatus::Queued));
        None
    }
}

/// `retry-job` and `retry-jobs`: see [`operator_acts`](super::operator_acts).
struct RetryAct {
    /// The step to run again from, and what that drops (with positions, then the old
    /// workflow's steps the new one lacks).
    from_step: Option<OwnedRerunFrom>,
    max_attempts: Option<i32>,
    reason: Option<String>,
    moves: Option<SnapshotMoves>,
}

/// [`RerunFrom`], owned by the act: the step, the steps dropped with their positions,
/// and the old workflow's steps dropped that the new one lacks.
type OwnedRerunFrom = (String, Vec<(String, usize)>, Vec<String>);

/// A job the act re-queues: its id, the status it leaves, its workflow's name, its
/// metadata, the snapshot it runs and (moved) the one it ran.
struct Requeued {
    job_id: Uuid,
    was: JobStatus,
    workflow_name: String,
    metadata: Option<Value>,
    snapshot: String,
    snapshot_before: Option<String>,
}

impl Act for RetryAct {
    type Outcome = RetryOutcome;
    const LOCK: &'static str = sql::LOCK_JOBS_FOR_RETRY;
    const LOCK_WAITING: &'static str = sql::LOCK_JOBS_FOR_RETRY_WAITING;

    async fn on_locked(
        &self,
        tx: &Transaction<'_>,
        rows: &[tokio_postgres::Row],
    ) -> Result<Vec<(Uuid, RetryOutcome)>, StoreError> {
        let mut outcomes = Vec::with_capacity(rows.len());
        let mut retried: Vec<Requeued> = Vec::new();
        for row in rows {
            let job_id: Uuid = row.get("job_id");
            let status: JobStatus = row.get::<_, String>("status").parse()?;
            let claims: i32 = row.get("claims");
            if let Some(refused) = RetryOutcome::of(status, claims, self.from_step.is_some()) {
                outcomes.push((job_id, refused));
                continue;
            }
            let digest: String = row.get("digest");
            let mut snapshot_before = None;
            if let Some(moves) = &self.moves {
                let checked = moves.jobs.get(&job_id).filter(|checked| {
                    checked.checked_digest == digest && checked.checked_claims == claims
                });
                match checked {
                    Some(_) => snapshot_before = Some(digest.clone()),
                    None => {
                        outcomes.push((job_id, RetryOutcome::ChangedWhileChecked { status }));
                        continue;
                    }
                }
            }
            retried.push(Requeued {
                job_id,
                was: status,
                workflow_name: row.get("workflow_name"),
                metadata: row.get("metadata"),
                snapshot: digest,
                snapshot_before,
            });
        }
        if retried.is_empty() {
            return Ok(outcomes);
        }
        if let Some(moves) = &self.moves {
            move_to_snapshots(tx, moves, &mut retried).await?;
        }
        // The checkpoints of the steps dropped go, found by name (branches end in any
        // order); each step's position counts its re-runs. The names the positions
        // cover come first: the old workflow's steps the new one lacks, which have no
        // position, pair with none (`unnest` pads the shorter array with NULL).
        let dropped: Option<Vec<&str>> = self.from_step.as_ref().map(|(_, dropped, also)| {
            dropped
                .iter()
                .map(|(name, _)| name.as_str())
                .chain(also.iter().map(String::as_str))
                .collect()
        });
        let positions: Option<Vec<i32>> = self.from_step.as_ref().map(|(_, dropped, _)| {
            dropped
                .iter()
                // A workflow has at most a few hundred steps (compile bounds them).
                .map(|(_, at)| i32::try_from(*at + 1).unwrap_or(i32::MAX))
                .collect()
        });
        let ids: Vec<Uuid> = retried.iter().map(|job| job.job_id).collect();
        // A retried parent re-runs only the children that did not complete: their
        // slots are forgotten and they are re-queued too (from their checkpoints).
        let children: Vec<(Uuid, JobStatus, String, Option<Value>)> = tx
            .query(sql::FORGET_FAILED_CHILDREN, &[&ids])
            .await?
            .iter()
            .map(|row| {
                let status: JobStatus = row.get::<_, String>("status").parse()?;
                Ok((
                    row.get("job_id"),
                    status,
                    row.get("workflow_name"),
                    row.get("metadata"),
                ))
            })
            .collect::<Result<_, StoreError>>()?;
        let kept: std::collections::HashMap<Uuid, Option<i32>> = tx
            .query(
                sql::RETRY_JOBS,
                &[&ids, &self.max_attempts, &dropped, &positions],
            )
            .await?
            .iter()
            .map(|row| (row.get("job_id"), row.get("kept")))
            .collect();
        // The stored elements of the map steps re-run go with their checkpoints: the
        // next claim calls every element again.
        if let Some(dropped) = &dropped {
            tx.execute(sql::DROP_ITEMS, &[&ids, dropped]).await?;
            // Their children too: the re-run starts new ones (new ids: their steps'
            // re-runs counted), and an old one's end must not answer the new run.
            tx.execute(sql::DETACH_CHILDREN, &[&ids, dropped]).await?;
        }
        if !children.is_empty() {
            let child_ids: Vec<Uuid> = children.iter().map(|(id, ..)| *id).collect();
            let none: Option<Vec<&str>> = None;
            let no_positions: Option<Vec<i32>> = None;
            tx.execute(
                sql::RETRY_JOBS,
                &[&child_ids, &self.max_attempts, &none, &no_positions],
            )
            .await?;
        }
        let mut events = EventBatch::default();
        for (job_id, was, name, metadata) in &children {
            let detail = [("from", was.as_str()), ("reason", "its parent was retried")];
            events.push(&retried_event(*job_id, name, &detail, metadata.as_ref()))?;
        }
        for job in retried {
            let mut detail: Vec<(&str, &str)> =
                vec![("from", job.was.as_str()), ("snapshot", &job.snapshot)];
            if let Some(before) = &job.snapshot_before {
                detail.push(("snapshotBefore", before));
            }
            if let Some((step, ..)) = &self.from_step {
                detail.push(("fromStep", step));
            }
            if let Some(reason) = &self.reason {
                detail.push(("reason", reason));
            }
            events.push(&retried_event(
                job.job_id,
                &job.workflow_name,
                &detail,
                job.metadata.as_ref(),
            ))?;
            outcomes.push((
                job.job_id,
                RetryOutcome::Retried {
                    was: job.was,
                    checkpoints_kept: kept.get(&job.job_id).copied().flatten().unwrap_or(0),
                    snapshot: job.snapshot,
                    snapshot_before: job.snapshot_before,
                },
            ));
        }
        events.insert(tx).await?;
        // One wake-up is enough: an idle worker claims as many jobs as it has room for.
        tx.execute(sql::NOTIFY_QUEUED, &[&ids[0].to_string()])
            .await?;
        Ok(outcomes)
    }
}

/// Files the snapshots `retried` move onto and points their rows at them (under the
/// row locks the act holds); each job's `snapshot` becomes its new digest.
async fn move_to_snapshots(
    tx: &Transaction<'_>,
    moves: &SnapshotMoves,
    retried: &mut [Requeued],
) -> Result<(), StoreError> {
    let mut ids = Vec::with_capacity(retried.len());
    let mut digests = Vec::with_capacity(retried.len());
    let mut reruns = Vec::with_capacity(retried.len());
    let mut used = vec![false; moves.targets.len()];
    for job in retried.iter_mut() {
        // Every job here passed the check against `moves.jobs` above.
        let Some(to) = moves.jobs.get(&job.job_id) else {
            continue;
        };
        let Some((digest, _)) = moves.targets.get(to.target) else {
            continue;
        };
        used[to.target] = true;
        ids.push(job.job_id);
        digests.push(digest.to_string());
        reruns.push(Value::from(to.reruns_from.as_slice()));
        job.snapshot = digest.to_string();
    }
    let (definitions, filed): (Vec<&Value>, Vec<&str>) = moves
        .targets
        .iter()
        .zip(&used)
        .filter(|(_, used)| **used)
        .map(|((digest, definition), _)| (definition.as_ref(), digest.as_ref()))
        .unzip();
    tx.execute(sql::FILE_SNAPSHOTS_SETTINGS, &[]).await?;
    tx.execute(sql::FILE_SNAPSHOTS, &[&definitions, &filed])
        .await?;
    tx.execute(sql::FILED_SNAPSHOTS_SETTINGS_OFF, &[]).await?;
    // ON CONFLICT kept a snapshot already filed under the digest: it must be this one.
    let misfiled = tx
        .query(sql::MISFILED_SNAPSHOTS, &[&definitions, &filed])
        .await?;
    if let Some(row) = misfiled.first() {
        let digest: String = row.get(0);
        return Err(StoreError::Data {
            sqlstate: "23505".into(),
            message: format!(
                "the workflow snapshot filed under digest {digest} is not the stored workflow's: delete that snapshot (no job names it, or check which do) and retry again"
            ),
        });
    }
    let moved = tx
        .query(sql::MOVE_TO_SNAPSHOTS, &[&ids, &digests, &reruns])
        .await?;
    if moved.len() != ids.len() {
        return Err(StoreError::Data {
            sqlstate: "40001".into(),
            message: format!(
                "{} of {} jobs moved onto their current workflow: send the retry again",
                moved.len(),
                ids.len()
            ),
        });
    }
    Ok(())
}

/// The RETRIED event of a job an operator's retry re-queued.
fn retried_event<'a>(
    job_id: Uuid,
    workflow_name: &'a str,
    detail: &'a [(&'a str, &'a str)],
    metadata: Option<&'a Value>,
) -> EventFacts<'a> {
    EventFacts {
        job_id,
        workflow_name,
        kind: Type::Retried,
        step: None,
        attempt: 0,
        verdict: None,
        error: None,
        status: JobStatus::Queued,
        detail,
        data: None,
        waiting_on: None,
        metadata,
    }
}

impl Store {
    /// Re-queues a finished job for an operator, under the row lock: of two retries
    /// racing, one re-queues and the other finds the job QUEUED (`WrongState`). The
    /// job keeps its id and its events; a RETRIED event records the act.
    pub async fn retry_job(
        &self,
        job_id: Uuid,
        retry: &Retry<'_>,
    ) -> Result<ByJob<RetryOutcome>, StoreError> {
        let mut acted = self.retry_jobs(&[job_id], retry, Recheck::default()).await;
        match (acted.interrupted, acted.outcomes.pop()) {
            (Some(error), _) => Err(error),
            (None, Some((_, outcome))) => Ok(outcome),
            // Provably unreachable: an act that was not interrupted answers every id.
            (None, None) => Ok(ByJob::Busy),
        }
    }

    /// Re-queues many jobs, each as [`Store::retry_job`] would (a `from_step` names
    /// steps of one workflow: give it only for jobs of that workflow); `recheck`:
    /// what a filter selected them by, checked again under each row lock.
    pub async fn retry_jobs(
        &self,
        job_ids: &[Uuid],
        retry: &Retry<'_>,
        recheck: Recheck,
    ) -> ActedOn<RetryOutcome> {
        let act = RetryAct {
            from_step: retry.from_step.as_ref().map(|from| {
                (
                    from.step.to_owned(),
                    from.dropped.clone(),
                    from.also_dropped.clone(),
                )
            }),
            max_attempts: retry.max_attempts,
            reason: retry.reason.map(printable),
            moves: retry.moves.cloned(),
        };
        self.act_on(act, job_ids, recheck).await
    }

    /// What a retry onto the current stored workflow checks of each of `job_ids`
    /// (ids of no job are left out), read a thousand jobs at a time (each row's
    /// checkpoints are read whole).
    pub async fn retry_candidates(
        &self,
        job_ids: &[Uuid],
    ) -> Result<Vec<RetryCandidate>, StoreError> {
        let mut candidates = Vec::with_capacity(job_ids.len());
        for chunk in job_ids.chunks(1_000) {
            let client = self.shared().await?;
            let rows = client.query(sql::RETRY_CANDIDATES, &[&chunk]).await?;
            drop(client);
            candidates.extend(Self::candidates_of(&rows)?);
        }
        Ok(candidates)
    }

    fn candidates_of(rows: &[tokio_postgres::Row]) -> Result<Vec<RetryCandidate>, StoreError> {
        rows.iter()
            .map(|row| {
                let mut parts: Vec<String> = row.get("parts");
                parts.sort();
                parts.dedup();
                Ok(RetryCandidate {
                    job_id: row.get("job_id"),
                    workflow_name: row.get("workflow_name"),
                    status: row.get::<_, String>("status").parse()?,
                    digest: row.get("digest"),
                    claims: row.get("claims"),
                    inline: row.get("inline"),
                    submitted_by_name: row.get("submitted_by_name"),
                    parent_job_id: row.get("parent_job_id"),
                    input: row.get("input"),
                    concurrency_keys: row.get("concurrency_keys"),
                    checkpointed: row.get("checkpointed"),
                    parts,
                })
            })
            .collect()
    }
}
