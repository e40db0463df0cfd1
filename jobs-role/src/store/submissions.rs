//! Submissions: a job row with its ACCEPTED event, or a job FAILED from the start;
//! a resubmission of the same job is recognised on the inserting transaction.

use futures_util::{StreamExt, TryStreamExt};

use super::*;

/// A job to insert.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// Client-generated (or minted) id; also the idempotency key.
    pub job_id: Uuid,
    /// The workflow's name.
    pub workflow_name: String,
    /// The envelope snapshot (shared: the jobs of one batch may share one).
    pub definition: std::sync::Arc<Value>,
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
        let first = FirstState {
            statement: sql::INSERT_JOB,
            last_param: &job.max_attempts,
            event: Type::Accepted,
            status: JobStatus::Queued,
            error: None,
        };
        self.insert_new_job(job, first).await
    }

    /// Inserts a job that is FAILED from the start (a submission that could not be
    /// accepted, recorded loudly), with its FAILED event; idempotent on the id, and
    /// [`StoreError::Conflict`] when the id holds a different submission.
    pub async fn insert_failed_job(
        &self,
        job: &NewJob,
        error: &str,
    ) -> Result<Inserted, StoreError> {
        let error = printable(error);
        let first = FirstState {
            statement: sql::INSERT_FAILED_JOB,
            last_param: &error,
            event: Type::Failed,
            status: JobStatus::Failed,
            error: Some(&error),
        };
        self.insert_new_job(job, first).await
    }

    /// The one insert both submissions share: the row, its first event and, for a
    /// QUEUED job, the wake-up, in one transaction. An id already taken is answered
    /// on the same transaction: the same submission seen again (a client's retry, a
    /// redelivery) is `created: false`, a different one a conflict, never a silent
    /// no-op.
    async fn insert_new_job(
        &self,
        job: &NewJob,
        first: FirstState<'_>,
    ) -> Result<Inserted, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let inserted = tx
            .query_opt(
                first.statement,
                &[
                    &job.job_id,
                    &job.workflow_name,
                    &*job.definition,
                    &job.input,
                    first.last_param,
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
            kind: first.event,
            step: None,
            attempt: 0,
            verdict: None,
            error: first.error,
            status: first.status,
        };
        insert_event(&tx, &facts).await?;
        if first.status == JobStatus::Queued {
            tx.execute(sql::NOTIFY_QUEUED, &[&job.job_id.to_string()])
                .await?;
        }
        tx.commit().await?;
        Ok(Inserted {
            created: true,
            status: first.status,
        })
    }
}

impl Store {
    /// Inserts many jobs in one transaction, answering each as [`Store::insert_job`]
    /// would (a conflict is that item's answer, not the batch's). When PostgreSQL
    /// refuses a value the batch is rolled back and each job inserted on its own, so
    /// only the refused one fails. The answers are in the order of `jobs`.
    pub async fn insert_jobs(&self, jobs: &[NewJob]) -> Vec<Result<Inserted, StoreError>> {
        if jobs.is_empty() {
            return Vec::new();
        }
        match self.try_insert_jobs(jobs).await {
            Ok(answers) => answers,
            Err(BatchFailure::Rolledback(refused)) if jobs.len() > 1 => {
                tracing::debug!(jobs = jobs.len(), error = %refused, "a batched insert failed; inserting each job alone");
                let mut answers = Vec::with_capacity(jobs.len());
                for job in jobs {
                    answers.push(self.insert_job(job).await);
                }
                answers
            }
            Err(failure) => failure.answers(jobs.len()),
        }
    }

    async fn try_insert_jobs(
        &self,
        jobs: &[NewJob],
    ) -> Result<Vec<Result<Inserted, StoreError>>, BatchFailure> {
        let mut client = batch_connection(&self.pool).await?;
        let tx = begin_batch(&mut client).await?;
        let answers = insert_batch(&tx, jobs)
            .await
            .map_err(BatchFailure::Rolledback)?;
        tx.commit()
            .await
            .map_err(|e| BatchFailure::Whole(e.into()))?;
        Ok(answers)
    }
}

/// Inserts of one batch in flight on its connection at once.
const PIPELINED_INSERTS: usize = 64;

/// The statements of a batch of submissions inside its transaction: per job its
/// insert (and, when the id is taken, the same-submission check) and its ACCEPTED
/// event, pipelined on the one connection; then one wake-up for the workers and one
/// for the relays.
async fn insert_batch(
    tx: &deadpool_postgres::Transaction<'_>,
    jobs: &[NewJob],
) -> Result<Vec<Result<Inserted, StoreError>>, StoreError> {
    let insert = tx.prepare_cached(sql::INSERT_JOB).await?;
    let insert_event = tx.prepare_cached(sql::INSERT_EVENT).await?;
    // In job id order, so two batches holding the same ids lock them in the same order
    // (never a deadlock); at most PIPELINED_INSERTS in flight, so a large batch never
    // has all of its rows encoded in the connection's buffer at once.
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| jobs[i].job_id);
    let inserts: Vec<_> = order
        .iter()
        .map(|&i| {
            let job = &jobs[i];
            let (insert, insert_event) = (&insert, &insert_event);
            async move {
                let params: [&(dyn ToSql + Sync); 5] = [
                    &job.job_id,
                    &job.workflow_name,
                    &*job.definition,
                    &job.input,
                    &job.max_attempts,
                ];
                if tx.query_opt(insert, &params).await?.is_none() {
                    // A conflict is this item's answer; a database error the batch's.
                    return match existing_submission(tx, job).await {
                        Err(conflict @ StoreError::Conflict(_)) => Ok(Err(conflict)),
                        seen => seen.map(Ok),
                    };
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
                let (event_id, payload) = events::encode(&facts)?;
                tx.execute(
                    insert_event,
                    &[
                        &event_id,
                        &job.job_id,
                        &events::type_name(Type::Accepted),
                        &payload,
                    ],
                )
                .await?;
                Ok::<_, StoreError>(Ok(Inserted {
                    created: true,
                    status: JobStatus::Queued,
                }))
            }
        })
        .collect();
    let sorted: Vec<Result<Inserted, StoreError>> = futures_util::stream::iter(inserts)
        .buffered(PIPELINED_INSERTS)
        .try_collect()
        .await?;
    let mut answers: Vec<Option<Result<Inserted, StoreError>>> =
        (0..jobs.len()).map(|_| None).collect();
    for (&i, answer) in order.iter().zip(sorted) {
        answers[i] = Some(answer);
    }
    let answers: Vec<Result<Inserted, StoreError>> = answers
        .into_iter()
        .map(|answer| {
            answer
                .unwrap_or_else(|| Err(StoreError::GroupCommit("the insert got no answer".into())))
        })
        .collect();
    let first_created = jobs
        .iter()
        .zip(&answers)
        .find(|(_, answer)| matches!(answer, Ok(Inserted { created: true, .. })));
    if let Some((job, _)) = first_created {
        // One wake-up is enough: an idle worker claims as many jobs as it has room for.
        tx.execute(sql::NOTIFY_QUEUED, &[&job.job_id.to_string()])
            .await?;
        tx.execute(sql::NOTIFY_OUTBOX, &[]).await?;
    }
    Ok(answers)
}

/// How a new job starts: its insert statement (whose last parameter differs), its
/// first event and status.
struct FirstState<'a> {
    statement: &'static str,
    last_param: &'a (dyn ToSql + Sync),
    event: Type,
    status: JobStatus,
    error: Option<&'a str>,
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
                &*job.definition,
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
