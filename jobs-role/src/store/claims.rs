//! Claims: taking eligible QUEUED rows for a worker, and the sweeper's requeue of
//! claims whose lease passed.

use super::*;

/// A worker's hold on a job: what every fenced write carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The job.
    pub job_id: Uuid,
    /// The claim loop holding it (`worker_id/loop-n`).
    pub owner: String,
    /// The fencing token: the job's `claims` after this claim. Only ever grows, so a
    /// released or lost claim can never write again.
    pub token: i32,
    /// The attempt this claim is (the retry budget, for backoff, events and metadata).
    pub attempt: i32,
    /// The job's workflow (for events).
    pub workflow_name: String,
}

/// A claimed job, as the worker needs it.
#[derive(Debug, Clone)]
pub struct ClaimedJob {
    /// The hold.
    pub claim: Claim,
    /// The workflow snapshot.
    pub definition: Value,
    /// The input snapshot.
    pub input: Value,
    /// The stored checkpoint array.
    pub checkpoints: Value,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// Claims given back in a row without progress before this one.
    pub releases: i32,
}

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Jobs requeued with their attempts kept.
    pub requeued: usize,
    /// Jobs whose last attempt's lease expired: DEAD.
    pub dead: usize,
}

impl Store {
    /// Claims the oldest eligible job for `owner`, or `None` when nothing is claimable.
    pub async fn claim_next_job(
        &self,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<ClaimedJob>, StoreError> {
        let client = self.pool.get().await?;
        let Some(row) = client
            .query_opt(sql::CLAIM_NEXT_JOB, &[&owner, &millis(lease)])
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(ClaimedJob {
            claim: Claim {
                job_id: row.get("job_id"),
                owner: owner.to_owned(),
                token: row.get("claims"),
                attempt: row.get("attempt"),
                workflow_name: row.get("workflow_name"),
            },
            definition: row.get("workflow_definition"),
            input: row.get("input"),
            checkpoints: row.get("checkpoints"),
            max_attempts: row.get("max_attempts"),
            releases: row.get("releases"),
        }))
    }

    /// Requeues RUNNING jobs whose lease passed (attempts kept); a job on its last
    /// attempt lands DEAD with its event.
    pub async fn sweep_expired_leases(&self, batch: i64) -> Result<SweepReport, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let rows = tx.query(sql::SWEEP_EXPIRED_LEASES, &[&batch]).await?;
        let mut report = SweepReport::default();
        for row in &rows {
            let status: JobStatus = row.get::<_, String>("status").parse()?;
            let job_id: Uuid = row.get("job_id");
            if status == JobStatus::Dead {
                let name: String = row.get("workflow_name");
                insert_dead_event(&tx, job_id, &name, row).await?;
                report.dead += 1;
            } else {
                tx.execute(sql::NOTIFY_QUEUED, &[&job_id.to_string()])
                    .await?;
                report.requeued += 1;
            }
        }
        tx.commit().await?;
        Ok(report)
    }
}
