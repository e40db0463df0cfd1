//! Submissions: a job row with its ACCEPTED event, or a job FAILED from the start;
//! a resubmission of the same job is recognised on the inserting transaction.

use super::*;

/// A job to insert.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// Client-generated (or minted) id; also the idempotency key.
    pub job_id: Uuid,
    /// The workflow's name.
    pub workflow_name: String,
    /// The envelope snapshot.
    pub definition: Value,
    /// The input snapshot.
    pub input: Value,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// Submitted by a stored workflow's name: a resubmission with the same id matches
    /// on the name and the input only, since the stored workflow may have been edited
    /// since (an inline submission matches on its definition too).
    pub by_name: bool,
}

/// What an insert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inserted {
    /// False when the job already existed with the same submission.
    pub created: bool,
    /// The job's current status.
    pub status: JobStatus,
}

impl Store {
    /// Inserts a job with its ACCEPTED event, or recognises a resubmission of the same
    /// job (same id, same workflow and input: `created: false`); the same id with a
    /// different submission is [`StoreError::Conflict`].
    pub async fn insert_job(&self, job: &NewJob) -> Result<Inserted, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let inserted = tx
            .query_opt(
                sql::INSERT_JOB,
                &[
                    &job.job_id,
                    &job.workflow_name,
                    &job.definition,
                    &job.input,
                    &job.max_attempts,
                ],
            )
            .await?;
        if inserted.is_none() {
            let existing = existing_submission(&tx, job).await;
            tx.rollback().await?;
            return existing;
        }
        let facts = EventFacts {
            job_id: job.job_id,
            workflow_name: &job.workflow_name,
            kind: Type::Accepted,
            step: None,
            attempt: 0,
            verdict: None,
            error: None,
            status: JobStatus::Queued,
        };
        insert_event(&tx, &facts).await?;
        tx.execute(sql::NOTIFY_QUEUED, &[&job.job_id.to_string()])
            .await?;
        tx.commit().await?;
        Ok(Inserted {
            created: true,
            status: JobStatus::Queued,
        })
    }

    /// Inserts a job that is FAILED from the start (a submission that could not be
    /// accepted, recorded loudly), with its FAILED event; idempotent on the id, and
    /// [`StoreError::Conflict`] when the id holds a different submission.
    pub async fn insert_failed_job(
        &self,
        job: &NewJob,
        error: &str,
    ) -> Result<Inserted, StoreError> {
        let error = &printable(error);
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let inserted = tx
            .query_opt(
                sql::INSERT_FAILED_JOB,
                &[
                    &job.job_id,
                    &job.workflow_name,
                    &job.definition,
                    &job.input,
                    &error,
                ],
            )
            .await?;
        let Some(_) = inserted else {
            // The same failed submission seen again (a redelivery) is `created: false`;
            // the id taken by a different submission is a conflict, never a silent no-op.
            let existing = existing_submission(&tx, job).await;
            tx.rollback().await?;
            return existing;
        };
        let facts = EventFacts {
            job_id: job.job_id,
            workflow_name: &job.workflow_name,
            kind: Type::Failed,
            step: None,
            attempt: 0,
            verdict: None,
            error: Some(error),
            status: JobStatus::Failed,
        };
        insert_event(&tx, &facts).await?;
        tx.commit().await?;
        Ok(Inserted {
            created: true,
            status: JobStatus::Failed,
        })
    }
}

/// Tells a resubmission (same workflow name, definition and input: `created: false`)
/// from a conflict, on the transaction that found the id taken: never a second
/// connection.
async fn existing_submission(tx: &Transaction<'_>, job: &NewJob) -> Result<Inserted, StoreError> {
    let row = tx
        .query_one(
            sql::SAME_SUBMISSION,
            &[
                &job.job_id,
                &job.workflow_name,
                &job.definition,
                &job.input,
                &job.by_name,
            ],
        )
        .await?;
    if row.get::<_, bool>("same") {
        Ok(Inserted {
            created: false,
            status: row.get::<_, String>("status").parse()?,
        })
    } else {
        Err(StoreError::Conflict(job.job_id))
    }
}
