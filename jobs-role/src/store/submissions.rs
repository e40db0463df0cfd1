//! Submissions: a job row with its ACCEPTED event, or a job FAILED from the start;
//! a resubmission of the same job is recognised on the inserting transaction.

use futures_util::{StreamExt, TryStreamExt};

use super::dedupe::{Dedupe, DedupeMode};
use super::*;

/// The priority of a job whose submission names none.
pub const DEFAULT_PRIORITY: i16 = 5;

/// A job to insert.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// Client-generated (or minted) id; also the idempotency key.
    pub job_id: Uuid,
    /// The workflow's name.
    pub workflow_name: String,
    /// The envelope snapshot (shared: the jobs of one batch may share one).
    pub definition: std::sync::Arc<Value>,
    /// The snapshot's digest as the submitter computed it
    /// ([`crate::compiled::snapshot_digest`]); the jobs of a batch with the same
    /// digest send their snapshot once. `None`: PostgreSQL computes one.
    pub definition_digest: Option<std::sync::Arc<str>>,
    /// The input snapshot.
    pub input: Value,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// Claim order, 0 to 9 (higher first; [`DEFAULT_PRIORITY`] unless asked).
    pub priority: i16,
    /// When the job becomes claimable.
    pub run_after: RunAfter,
    /// The submitter's W3C trace context (`traceparent`), when it was traced.
    pub trace_context: Option<String>,
    /// Submitted by a stored workflow's name: a resubmission with the same id matches
    /// on the name and the input only, since the stored workflow may have been edited
    /// since (an inline submission matches on its definition too).
    pub by_name: bool,
    /// The concurrency keys it holds while RUNNING (computed from the workflow's
    /// `concurrency` at submission; empty: none).
    pub concurrency: Vec<workflow::compile::ConcurrencyKey>,
    /// Its dedupe key and mode, when the submission gave one.
    pub dedupe: Option<Dedupe>,
    /// The schedule and tick that fired it, when a schedule did.
    pub schedule: Option<ScheduledTick>,
    /// Its metadata, a JSON object of strings (`None`: none), checked by the submitter.
    pub metadata: Option<Value>,
}

/// When a new job becomes claimable. A delay is added to the database's clock when
/// the row is inserted, never to the node's: a node whose clock is off must not start
/// a delayed job early or late.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunAfter {
    /// At once.
    #[default]
    Now,
    /// At this instant (a past one: at once, so it never jumps the queue).
    At(std::time::SystemTime),
    /// This long after the insert, by the database's clock.
    Delay(std::time::Duration),
}

impl RunAfter {
    /// The instant asked for (`$8` of the submission statements).
    fn at(self) -> Option<std::time::SystemTime> {
        match self {
            RunAfter::At(at) => Some(at),
            RunAfter::Now | RunAfter::Delay(_) => None,
        }
    }

    /// The delay asked for, in ms (0: none); a submission's delay is at most 366
    /// days, far below `i64::MAX` ms.
    fn delay_ms(self) -> i64 {
        match self {
            RunAfter::Delay(delay) => i64::try_from(delay.as_millis()).unwrap_or(i64::MAX),
            RunAfter::Now | RunAfter::At(_) => 0,
        }
    }
}

/// The schedule tick a job was fired for (`workflow_run.schedule_name`,
/// `scheduled_for`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledTick {
    /// The schedule's name.
    pub name: String,
    /// The tick (for `trigger-schedule`, when it was asked).
    pub at: chrono::DateTime<chrono::Utc>,
}

/// What an insert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inserted {
    /// False when the job already existed with the same submission.
    pub created: bool,
    /// The job's current status.
    pub status: JobStatus,
    /// Another job of the submission's dedupe key that stands for it (nothing was
    /// inserted); `status` is that job's.
    pub stands_for: Option<Uuid>,
}

impl Store {
    /// Inserts a job with its ACCEPTED event, or recognises a resubmission of the same
    /// job (same id, same workflow and input: `created: false`); the same id with a
    /// different submission is [`StoreError::Conflict`].
    pub async fn insert_job(&self, job: &NewJob) -> Result<Inserted, StoreError> {
        if let Some(dedupe) = &job.dedupe {
            return self.insert_deduped(job, dedupe).await;
        }
        if !job.concurrency.is_empty() {
            // Its keys are filed, and their strategies applied, by the batch insert.
            let answer = match self.try_insert_jobs_filed(std::slice::from_ref(job)).await {
                Ok(mut answers) => answers.pop(),
                Err(BatchFailure::Rolledback(refused)) => Some(Err(refused)),
                Err(failure) => failure.answers(1).pop(),
            };
            return answer.unwrap_or_else(|| {
                Err(StoreError::GroupCommit("the insert got no answer".into()))
            });
        }
        let first = FirstState {
            statement: sql::SUBMIT_JOB,
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
            statement: sql::SUBMIT_FAILED_JOB,
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
        let digest = job.definition_digest.as_deref();
        let send_snapshot = !digest.is_some_and(|digest| self.filed.knows(digest));
        match self.try_insert_new_job(job, &first, send_snapshot).await {
            Err(refused) if !send_snapshot && filed_snapshots::is_missing_snapshot(&refused) => {
                self.filed.forget_all();
                self.try_insert_new_job(job, &first, true).await
            }
            answered => answered,
        }
    }

    /// [`Store::insert_new_job`] once, with the snapshot or (`send_snapshot` false: the
    /// node saw it filed) its digest alone.
    async fn try_insert_new_job(
        &self,
        job: &NewJob,
        first: &FirstState<'_>,
        send_snapshot: bool,
    ) -> Result<Inserted, StoreError> {
        let definition = send_snapshot.then_some(&*job.definition);
        let (event_id, payload) = events::encode(&EventFacts {
            job_id: job.job_id,
            workflow_name: &job.workflow_name,
            kind: first.event,
            step: None,
            attempt: 0,
            verdict: None,
            error: first.error,
            status: first.status,
            detail: &[],
            data: None,
            waiting_on: None,
            metadata: job.metadata.as_ref(),
        })?;
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        let statement = tx.prepare_cached(first.statement).await?;
        let (run_at, delay_ms) = (job.run_after.at(), job.run_after.delay_ms());
        let params: [&(dyn ToSql + Sync); 15] = [
            &job.job_id,
            &job.workflow_name,
            &definition,
            &job.input,
            first.last_param,
            &job.definition_digest.as_deref(),
            &job.priority,
            &run_at,
            &job.trace_context,
            &event_id,
            &events::type_name(first.event),
            &payload,
            &job.metadata,
            &job.by_name,
            &delay_ms,
        ];
        // The settings and the write are sent together (one round trip); PostgreSQL
        // runs them in order.
        let (_, inserted) = futures_util::future::try_join(
            tx.batch_execute(sql::SUBMISSION_SETTINGS),
            tx.query_opt(&statement, &params),
        )
        .await?;
        if inserted.is_none() {
            let existing = existing_submission(&tx, job).await;
            tx.rollback().await?;
            return existing;
        }
        tx.commit().await?;
        if let Some(digest) = &job.definition_digest {
            self.filed.remember(digest);
        }
        Ok(Inserted {
            created: true,
            status: first.status,
            stands_for: None,
        })
    }
}

impl Store {
    /// Inserts `job`, which carries `dedupe`, or answers the job of its key that
    /// stands for it (`stands_for`), deciding under the key's lock.
    pub(super) async fn insert_deduped(
        &self,
        job: &NewJob,
        dedupe: &Dedupe,
    ) -> Result<Inserted, StoreError> {
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        tx.batch_execute(sql::SUBMISSION_SETTINGS).await?;
        tx.execute(sql::LOCK_DEDUPE_KEY, &[&dedupe.key]).await?;
        let seen = tx.query_opt(sql::JOB_EXISTS, &[&job.job_id]).await?;
        if seen.is_none() {
            let window = millis(dedupe.window);
            let earlier = tx
                .query_opt(sql::EARLIER_DEDUPE_ANSWER, &[&job.job_id])
                .await?;
            let standing = match dedupe.mode {
                // The same submission answered before: the same answer.
                _ if earlier.is_some() => earlier,
                DedupeMode::Singleton => {
                    tx.query_opt(sql::LIVE_DEDUPED_JOB, &[&dedupe.key]).await?
                }
                DedupeMode::Debounce => {
                    let digest = job.definition_digest.as_deref();
                    let keys: Option<Vec<&str>> = (!job.concurrency.is_empty())
                        .then(|| job.concurrency.iter().map(|k| k.key.as_str()).collect());
                    tx.query_opt(
                        sql::DEBOUNCE_JOB,
                        &[&dedupe.key, &job.input, &window, &digest, &keys],
                    )
                    .await?
                }
                DedupeMode::Throttle => {
                    tx.query_opt(sql::THROTTLING_JOB, &[&dedupe.key, &window])
                        .await?
                }
            };
            if let Some(row) = standing {
                let status: JobStatus = row.get::<_, String>("status").parse()?;
                let stands_for: Uuid = row.get("job_id");
                tx.execute(sql::RECORD_DEDUPE_ANSWER, &[&job.job_id, &stands_for])
                    .await?;
                tx.commit().await?;
                return Ok(Inserted {
                    created: false,
                    status,
                    stands_for: Some(stands_for),
                });
            }
        }
        let answer = insert_batch(&tx, std::slice::from_ref(job), None)
            .await?
            .pop()
            .unwrap_or_else(|| Err(StoreError::GroupCommit("the insert got no answer".into())));
        tx.commit().await?;
        answer
    }

    /// Inserts many jobs in one transaction, answering each as [`Store::insert_job`]
    /// would (a conflict is that item's answer, not the batch's). When PostgreSQL
    /// refuses a value, or an id stays locked by another transaction for the lock
    /// timeout, the batch is rolled back and each job inserted on its own, so only
    /// that one fails. Any other failure (the connection lost, the server down) is
    /// every job's answer at once: inserting each alone would only meet it again, once
    /// per job. The answers are in the order of `jobs`.
    pub async fn insert_jobs(&self, jobs: &[NewJob]) -> Vec<Result<Inserted, StoreError>> {
        if jobs.is_empty() {
            return Vec::new();
        }
        if jobs.iter().any(|job| job.dedupe.is_some()) {
            // Each deduplicated job is decided on its own, under its key's lock; the
            // others are inserted together.
            let plain: Vec<NewJob> = jobs
                .iter()
                .filter(|j| j.dedupe.is_none())
                .cloned()
                .collect();
            let mut inserted = Box::pin(self.insert_jobs(&plain)).await.into_iter();
            let mut answers = Vec::with_capacity(jobs.len());
            for job in jobs {
                answers.push(match &job.dedupe {
                    Some(dedupe) => self.insert_deduped(job, dedupe).await,
                    None => inserted.next().unwrap_or_else(|| {
                        Err(StoreError::GroupCommit("the insert got no answer".into()))
                    }),
                });
            }
            return answers;
        }
        match self.try_insert_jobs_filed(jobs).await {
            Ok(answers) => answers,
            Err(BatchFailure::Rolledback(refused))
                if jobs.len() > 1
                    && (refused.is_data_error()
                        || refused.is_lock_timeout()
                        || refused.is_deadlock()) =>
            {
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

    /// [`Store::try_insert_jobs`], sending the snapshots the node saw filed as their
    /// digests, and once more with every snapshot when one of those was pruned since.
    async fn try_insert_jobs_filed(
        &self,
        jobs: &[NewJob],
    ) -> Result<Vec<Result<Inserted, StoreError>>, BatchFailure> {
        let attempt = self.try_insert_jobs(jobs, false).await;
        if matches!(&attempt, Err(BatchFailure::Rolledback(refused))
                if filed_snapshots::is_missing_snapshot(refused))
        {
            // A snapshot the node saw filed was pruned since: send them all.
            self.filed.forget_all();
            return self.try_insert_jobs(jobs, true).await;
        }
        attempt
    }

    /// One try of [`Store::insert_jobs`]: the snapshots the node saw filed are sent as
    /// their digests alone, unless `send_snapshots`.
    async fn try_insert_jobs(
        &self,
        jobs: &[NewJob],
        send_snapshots: bool,
    ) -> Result<Vec<Result<Inserted, StoreError>>, BatchFailure> {
        let filed = (!send_snapshots).then_some(&self.filed);
        let mut client = self.shared().await.map_err(BatchFailure::Whole)?;
        let tx = begin_batch(&mut client).await?;
        tx.batch_execute(sql::SUBMISSION_SETTINGS)
            .await
            .map_err(|e| BatchFailure::Whole(e.into()))?;
        let answers = insert_batch(&tx, jobs, filed)
            .await
            .map_err(BatchFailure::Rolledback)?;
        tx.commit()
            .await
            .map_err(|e| BatchFailure::Whole(e.into()))?;
        for (job, answer) in jobs.iter().zip(&answers) {
            if let (Some(digest), Ok(Inserted { created: true, .. })) =
                (&job.definition_digest, answer)
            {
                self.filed.remember(digest);
            }
        }
        Ok(answers)
    }
}

/// Inserts a parent's children inside the parent's transaction (its snapshots sent
/// whole): an id taken by the same child is found, one taken by anything else is a
/// conflict.
pub(super) async fn insert_children(
    tx: &deadpool_postgres::Transaction<'_>,
    jobs: &[NewJob],
) -> Result<(), StoreError> {
    for answer in insert_batch(tx, jobs, None).await? {
        answer?;
    }
    Ok(())
}

/// Same-submission checks of one batch in flight on its connection at once.
const PIPELINED_CHECKS: usize = 64;

/// The statements of a batch of submissions inside its transaction: one insert of
/// every row (each distinct snapshot sent once), the same-submission check of each id
/// it found taken, one insert of the ACCEPTED events of the rows it wrote, then one
/// wake-up for the workers and one for the relays.
pub(super) async fn insert_batch(
    tx: &deadpool_postgres::Transaction<'_>,
    jobs: &[NewJob],
    filed: Option<&filed_snapshots::FiledSnapshots>,
) -> Result<Vec<Result<Inserted, StoreError>>, StoreError> {
    // In job id order (stable: an id given twice is inserted as its first item), so
    // two batches holding the same ids lock them in the same order: never a deadlock.
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| jobs[i].job_id);
    let rows = SnapshotRows::of(jobs, &order, filed);
    flow::file_keys(tx, jobs).await?;
    let inserted: std::collections::HashSet<Uuid> = tx
        .query(
            sql::INSERT_JOBS,
            &[
                &rows.job_ids,
                &rows.workflow_names,
                &rows.snapshot,
                &rows.inputs,
                &rows.max_attempts,
                &rows.definitions,
                &rows.digests,
                &rows.priorities,
                &rows.run_afters,
                &rows.trace_contexts,
                &rows.concurrency_keys,
                &rows.dedupe_keys,
                &rows.schedule_names,
                &rows.scheduled_fors,
                &rows.metadata,
                &rows.by_name,
                &rows.delays_ms,
            ],
        )
        .await?
        .iter()
        .map(|row| row.get::<_, Uuid>("job_id"))
        .collect();

    // The first item of each inserted id created its row; any other item met a taken
    // id and is a resubmission or a conflict.
    let mut created = std::collections::HashSet::new();
    let answers: Vec<_> = order
        .iter()
        .map(|&i| {
            let job = &jobs[i];
            let is_new = inserted.contains(&job.job_id) && created.insert(job.job_id);
            async move {
                if is_new {
                    return Ok(Ok(Inserted {
                        created: true,
                        status: JobStatus::Queued,
                        stands_for: None,
                    }));
                }
                // A conflict is this item's answer; a database error the batch's.
                match existing_submission(tx, job).await {
                    Err(refused @ (StoreError::Conflict(_) | StoreError::Pruned(_))) => {
                        Ok(Err(refused))
                    }
                    seen => seen.map(Ok),
                }
            }
        })
        .collect();
    let sorted: Vec<Result<Inserted, StoreError>> = futures_util::stream::iter(answers)
        .buffered(PIPELINED_CHECKS)
        .try_collect()
        .await?;

    let mut events = EventBatch::default();
    for (&i, answer) in order.iter().zip(&sorted) {
        if matches!(answer, Ok(Inserted { created: true, .. })) {
            let job = &jobs[i];
            // A scheduled job's ACCEPTED event names its schedule and tick.
            let tick = job.schedule.as_ref().map(|tick| {
                (
                    tick.name.as_str(),
                    tick.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                )
            });
            let detail: Vec<(&str, &str)> = match &tick {
                Some((name, at)) => vec![("scheduleName", name), ("scheduledFor", at.as_str())],
                None => Vec::new(),
            };
            events.push(&EventFacts {
                job_id: job.job_id,
                workflow_name: &job.workflow_name,
                kind: Type::Accepted,
                step: None,
                attempt: 0,
                verdict: None,
                error: None,
                status: JobStatus::Queued,
                detail: &detail,
                data: None,
                waiting_on: None,
                metadata: job.metadata.as_ref(),
            })?;
        }
    }
    if let Some(first) = events.first_job() {
        events.insert(tx).await?;
        // One wake-up is enough: an idle worker claims as many jobs as it has room for.
        tx.execute(sql::NOTIFY_QUEUED, &[&first.to_string()])
            .await?;
    }
    // After the ACCEPTED events, so a job a strategy cancels reads ACCEPTED, CANCELLED.
    let created: std::collections::HashSet<Uuid> = order
        .iter()
        .zip(&sorted)
        .filter(|(_, answer)| matches!(answer, Ok(Inserted { created: true, .. })))
        .map(|(&i, _)| jobs[i].job_id)
        .collect();
    let cancelled = flow::apply_strategies(tx, jobs, &created).await?;
    let sorted = sorted
        .into_iter()
        .zip(&order)
        .map(|(answer, &i)| match answer {
            Ok(Inserted { created: true, .. }) if cancelled.contains(&jobs[i].job_id) => {
                Ok(Inserted {
                    created: true,
                    status: JobStatus::Cancelled,
                    stands_for: None,
                })
            }
            other => other,
        });

    let mut answers: Vec<Option<Result<Inserted, StoreError>>> =
        (0..jobs.len()).map(|_| None).collect();
    for (&i, answer) in order.iter().zip(sorted) {
        answers[i] = Some(answer);
    }
    Ok(answers
        .into_iter()
        .map(|answer| {
            answer
                .unwrap_or_else(|| Err(StoreError::GroupCommit("the insert got no answer".into())))
        })
        .collect())
}

/// The columns of [`sql::INSERT_JOBS`]: one entry per job, and one per distinct
/// snapshot (jobs with the same digest share one; a job without a digest has its own),
/// its definition left out (NULL) when the node saw it filed.
struct SnapshotRows<'a> {
    job_ids: Vec<Uuid>,
    workflow_names: Vec<&'a str>,
    snapshot: Vec<i32>,
    inputs: Vec<&'a Value>,
    max_attempts: Vec<i32>,
    definitions: Vec<Option<&'a Value>>,
    digests: Vec<Option<&'a str>>,
    priorities: Vec<i16>,
    run_afters: Vec<Option<std::time::SystemTime>>,
    /// Each job's delay from the insert, by the database's clock (0: none).
    delays_ms: Vec<i64>,
    trace_contexts: Vec<Option<&'a str>>,
    /// Each job's keys as a JSON list (NULL: none).
    concurrency_keys: Vec<Option<Value>>,
    /// Each job's dedupe key (NULL: none).
    dedupe_keys: Vec<Option<&'a str>>,
    /// Each job's schedule and tick (NULL: not a scheduled job).
    schedule_names: Vec<Option<&'a str>>,
    scheduled_fors: Vec<Option<chrono::DateTime<chrono::Utc>>>,
    /// Each job's metadata (NULL: none).
    metadata: Vec<Option<&'a Value>>,
    /// Whether each was submitted by a stored workflow's name.
    by_name: Vec<bool>,
}

impl<'a> SnapshotRows<'a> {
    fn of(
        jobs: &'a [NewJob],
        order: &[usize],
        filed: Option<&filed_snapshots::FiledSnapshots>,
    ) -> Self {
        let mut rows = SnapshotRows {
            job_ids: Vec::with_capacity(order.len()),
            workflow_names: Vec::with_capacity(order.len()),
            snapshot: Vec::with_capacity(order.len()),
            inputs: Vec::with_capacity(order.len()),
            max_attempts: Vec::with_capacity(order.len()),
            definitions: Vec::new(),
            digests: Vec::new(),
            priorities: Vec::with_capacity(order.len()),
            run_afters: Vec::with_capacity(order.len()),
            delays_ms: Vec::with_capacity(order.len()),
            trace_contexts: Vec::with_capacity(order.len()),
            concurrency_keys: Vec::with_capacity(order.len()),
            dedupe_keys: Vec::with_capacity(order.len()),
            schedule_names: Vec::with_capacity(order.len()),
            scheduled_fors: Vec::with_capacity(order.len()),
            metadata: Vec::with_capacity(order.len()),
            by_name: Vec::with_capacity(order.len()),
        };
        let mut by_digest: std::collections::HashMap<&str, i32> = Default::default();
        for &i in order {
            let job = &jobs[i];
            let digest = job.definition_digest.as_deref();
            let known = digest.and_then(|digest| by_digest.get(digest).copied());
            let at = known.unwrap_or_else(|| {
                let known = digest.zip(filed).is_some_and(|(d, filed)| filed.knows(d));
                rows.definitions.push((!known).then_some(&*job.definition));
                rows.digests.push(digest);
                // 1-based, as WITH ORDINALITY counts; a batch holds at most a few
                // thousand jobs, far below i32::MAX.
                let at = rows.definitions.len() as i32;
                if let Some(digest) = digest {
                    by_digest.insert(digest, at);
                }
                at
            });
            rows.job_ids.push(job.job_id);
            rows.workflow_names.push(&job.workflow_name);
            rows.snapshot.push(at);
            rows.inputs.push(&job.input);
            rows.max_attempts.push(job.max_attempts);
            rows.priorities.push(job.priority);
            rows.run_afters.push(job.run_after.at());
            rows.delays_ms.push(job.run_after.delay_ms());
            rows.trace_contexts.push(job.trace_context.as_deref());
            rows.dedupe_keys
                .push(job.dedupe.as_ref().map(|d| d.key.as_str()));
            rows.schedule_names
                .push(job.schedule.as_ref().map(|tick| tick.name.as_str()));
            rows.scheduled_fors
                .push(job.schedule.as_ref().map(|tick| tick.at));
            rows.metadata.push(job.metadata.as_ref());
            rows.by_name.push(job.by_name);
            rows.concurrency_keys
                .push((!job.concurrency.is_empty()).then(|| {
                    Value::from_iter(job.concurrency.iter().map(|held| held.key.clone()))
                }));
        }
        rows
    }
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
        .query_opt(
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
    // The insert found the id neither free nor taken: retention deleted its job.
    let Some(row) = row else {
        return Err(StoreError::Pruned(job.job_id));
    };
    if row.get::<_, bool>("same") {
        Ok(Inserted {
            created: false,
            status: row.get::<_, String>("status").parse()?,
            stands_for: None,
        })
    } else {
        Err(StoreError::Conflict(job.job_id))
    }
}
