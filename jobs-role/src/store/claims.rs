//! Claims: taking eligible QUEUED rows for a worker, and the sweeper's requeue of
//! claims whose lease passed.

use std::collections::HashMap;

use super::cancels::insert_cancelled_event;
use super::*;

/// A worker's hold on a job: what every fenced write carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The job.
    pub job_id: Uuid,
    /// The node holding it (its `worker_id`).
    pub owner: String,
    /// The fencing token: the job's `claims` after this claim. Only ever grows, so a
    /// released or lost claim can never write again.
    pub token: i32,
    /// The attempt this claim is (the retry budget, for backoff, events and metadata).
    pub attempt: i32,
    /// The job's workflow (for events).
    pub workflow_name: String,
    /// The job's metadata (for events; `None`: none).
    pub metadata: Option<Value>,
}

impl Claim {
    /// The error every write of this claim answers once the fence matches nothing.
    pub fn lost(&self) -> StoreError {
        StoreError::LostClaim {
            job_id: self.job_id,
            attempt: self.attempt,
        }
    }
}

/// A claimed job, as the worker needs it.
#[derive(Debug, Clone)]
pub struct ClaimedJob {
    /// The hold.
    pub claim: Claim,
    /// The digest of the workflow snapshot (the snapshot itself is fetched with
    /// [`Store::job_definition`] only when the node has not compiled it yet).
    pub definition_digest: String,
    /// The input snapshot.
    pub input: Value,
    /// The stored checkpoint array.
    pub checkpoints: Value,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// Its claim order, 0 to 9 (its children inherit it).
    pub priority: i16,
    /// Claims given back in a row without progress before this one.
    pub releases: i32,
    /// Per step (by index): operator retries that dropped its checkpoint, part of
    /// its calls' idempotency key once non-zero (a step past the end: none).
    pub step_reruns: Vec<i32>,
    /// The submitter's W3C trace context: the parent of the segment's span.
    pub trace_context: Option<String>,
    /// When this process sent the claim, by its monotonic clock: the lease runs from
    /// no earlier than this, so the worker can tell when it may have lapsed.
    pub asked_at: std::time::Instant,
    /// The sleeps the job parked on, by step: when each ends, in milliseconds since
    /// the Unix epoch by the database's clock.
    pub sleeps: HashMap<String, i64>,
    /// The database's time of the claim, in milliseconds since the Unix epoch: a
    /// sleep whose end is not after it is over.
    pub claimed_at_ms: i64,
    /// How many of its children had ended when it was claimed (a park on child steps
    /// resumes at once if more have since).
    pub child_ends: i64,
}

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Jobs requeued with their attempts kept.
    pub requeued: usize,
    /// Jobs whose last attempt's lease expired: DEAD.
    pub dead: usize,
    /// Jobs an operator asked to cancel whose worker went quiet: CANCELLED.
    pub cancelled: usize,
    /// Jobs requeued with their attempt given back: their lease ran out while the
    /// database refused the fleet's writes.
    pub given_back: usize,
}

/// When the sweeper's last sweep before the database began refusing it was sent (by
/// the node's monotonic clock): a lease that ran out since was lost to the refusal.
/// Counted back from the database's own time, so no wall clock is compared with
/// another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusedSince(pub std::time::Instant);

/// The wake times the claim read (`{step: untilMs}`); a value that is not a whole
/// number is left out (that sleep is then not over, and parks again).
fn sleeps_of(sleeps: Option<Value>) -> HashMap<String, i64> {
    match sleeps {
        Some(Value::Object(map)) => map
            .into_iter()
            .filter_map(|(step, until)| Some((step, until.as_i64()?)))
            .collect(),
        _ => HashMap::new(),
    }
}

impl Store {
    /// Claims up to `limit` eligible jobs for `owner` in one statement (the ones
    /// eligible the longest), skipping rows other workers hold; empty when nothing is
    /// claimable.
    pub async fn claim_jobs(
        &self,
        owner: &str,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<ClaimedJob>, StoreError> {
        self.claim_jobs_stamped(owner, lease, limit, Uuid::new_v4())
            .await
    }

    /// [`Store::claim_jobs`], stamping the rows with `nonce` (the worker keeps the
    /// nonce of a claim whose answer was lost, to give back exactly what it took:
    /// [`Store::release_unheard_claims`]).
    pub async fn claim_jobs_stamped(
        &self,
        owner: &str,
        lease: Duration,
        limit: usize,
        nonce: Uuid,
    ) -> Result<Vec<ClaimedJob>, StoreError> {
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        let client = self.pool.get().await?;
        let statement = client.prepare_cached(sql::CLAIM_JOBS).await?;
        let asked_at = std::time::Instant::now();
        let rows = client
            .query(&statement, &[&owner, &millis(lease), &limit, &nonce])
            .await?;
        Ok(rows
            .iter()
            .map(|row| ClaimedJob {
                claim: Claim {
                    job_id: row.get("job_id"),
                    owner: owner.to_owned(),
                    token: row.get("claims"),
                    attempt: row.get("attempt"),
                    workflow_name: row.get("workflow_name"),
                    metadata: row.get("metadata"),
                },
                definition_digest: row.get("definition_digest"),
                input: row.get("input"),
                checkpoints: row.get("checkpoints"),
                max_attempts: row.get("max_attempts"),
                priority: row.get("priority"),
                releases: row.get("releases"),
                step_reruns: row.get("step_reruns"),
                trace_context: row.get("trace_context"),
                asked_at,
                sleeps: sleeps_of(row.get("sleeps")),
                claimed_at_ms: row.get("claimed_at_ms"),
                child_ends: row.get("child_ends"),
            })
            .collect())
    }

    /// Gives back the jobs the claims `nonces` (whose answers were lost) took under
    /// `owner`, but for those in `running` (a task holds them), attempt returned,
    /// claimable now; answers how many. See [`sql::RELEASE_UNHEARD_CLAIMS`].
    pub async fn release_unheard_claims(
        &self,
        owner: &str,
        nonces: &[Uuid],
        running: &[Uuid],
    ) -> Result<usize, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let released = tx
            .query(sql::RELEASE_UNHEARD_CLAIMS, &[&owner, &nonces, &running])
            .await?;
        for row in &released {
            let job_id: Uuid = row.get("job_id");
            tx.execute(sql::NOTIFY_QUEUED, &[&job_id.to_string()])
                .await?;
        }
        tx.commit().await?;
        Ok(released.len())
    }

    /// The workflow snapshot of a job with its digest, read from one row version
    /// (`None` when the row is gone).
    pub async fn job_definition(
        &self,
        job_id: Uuid,
    ) -> Result<Option<(Value, String)>, StoreError> {
        let client = self.pool.get().await?;
        let row = client.query_opt(sql::JOB_DEFINITION, &[&job_id]).await?;
        Ok(row.map(|row| (row.get("workflow_definition"), row.get("definition_digest"))))
    }

    /// Claims the one job eligible the longest, or `None` when nothing is claimable.
    pub async fn claim_next_job(
        &self,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<ClaimedJob>, StoreError> {
        Ok(self.claim_jobs(owner, lease, 1).await?.pop())
    }

    /// Requeues RUNNING jobs whose lease passed (attempts kept); a job on its last
    /// attempt lands DEAD, and one an operator asked to cancel CANCELLED, each with its
    /// event. A lease that ran out since `refused` (see [`RefusedSince`]) gives its
    /// attempt back instead, unless that would be the `max_releases`th release in a
    /// row without progress.
    pub async fn sweep_expired_leases(
        &self,
        batch: i64,
        refused: Option<RefusedSince>,
        max_releases: i32,
    ) -> Result<SweepReport, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        // Counted back from the statement's own time, so a wait for the connection
        // does not slide the window onto leases that ran out after the refusal.
        let since_ms =
            refused.map(|since| i64::try_from(since.0.elapsed().as_millis()).unwrap_or(i64::MAX));
        let rows = tx
            .query(
                sql::SWEEP_EXPIRED_LEASES,
                &[&batch, &since_ms, &max_releases],
            )
            .await?;
        let mut report = SweepReport::default();
        for row in &rows {
            let status: JobStatus = row.get::<_, String>("status").parse()?;
            let job_id: Uuid = row.get("job_id");
            let name: String = row.get("workflow_name");
            if status == JobStatus::Dead {
                insert_dead_event(&tx, job_id, &name, row).await?;
                report.dead += 1;
            } else if status == JobStatus::Cancelled {
                insert_cancelled_event(&tx, job_id, &name, row).await?;
                report.cancelled += 1;
            } else {
                tx.execute(sql::NOTIFY_QUEUED, &[&job_id.to_string()])
                    .await?;
                if row.get::<_, bool>("given_back") {
                    report.given_back += 1;
                } else {
                    report.requeued += 1;
                }
            }
        }
        tx.commit().await?;
        Ok(report)
    }
}
