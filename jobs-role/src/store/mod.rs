//! The store: the only module that talks to PostgreSQL.
//!
//! Schema changes are the plain SQL files under `migrations/` at the workspace root,
//! embedded at build time and applied with refinery at start-up. Every statement is a
//! named constant in [`sql`]. Every commit point (accept, checkpoint, park, terminal
//! state) writes its outbox row in the same transaction as the job change, so an event
//! can never drift from the state it describes.
//!
//! Writes after a claim are fenced by `(job_id, lease_owner, claims)` while the row is
//! RUNNING (`claims` is the claim's token, which only ever grows): when the fence
//! matches nothing the claim was lost, the transaction is rolled back, and the caller
//! gets [`StoreError::LostClaim`] with nothing committed.
//!
//! Two rules keep the pool and the lanes alive under hostile input:
//! - **one connection at a time**: no method takes a second pooled connection while it
//!   holds one (a burst of callers would otherwise wait on each other for ever), and
//!   waiting for a connection is bounded ([`POOL_WAIT`]), so an exhausted pool answers
//!   [`StoreError::Pool`] instead of hanging;
//! - **data errors are permanent**: PostgreSQL refusing a value (SQLSTATE classes 22
//!   data exception, 23 integrity constraint, 54 program limit: a NUL in `jsonb` or
//!   `text`, a value past a size limit) is [`StoreError::Data`], which no caller
//!   retries; every other database error may pass and is retried.

pub mod events;
pub mod sql;

use std::time::Duration;

use deadpool_postgres::{Pool, Runtime, Timeouts};
use jobs_proto::v1::workflow_run_event::Type;
use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Transaction};
use uuid::Uuid;

use crate::status::{JobStatus, UnknownStatus};
use events::EventFacts;

mod embedded {
    refinery::embed_migrations!("../migrations");
}

/// How long a caller waits for a pooled connection before the store answers
/// [`StoreError::Pool`] (a timeout) instead of waiting for ever.
pub const POOL_WAIT: Duration = Duration::from_secs(10);

/// What went wrong talking to PostgreSQL.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A schema migration failed to apply; the database is left at the last good version.
    #[error("applying the jobs schema migrations failed: {0}")]
    Migration(#[from] refinery::Error),
    /// A statement failed for a reason that may pass (connection lost, server
    /// restarting, serialization): retried by every background task.
    #[error("database error: {0}")]
    Database(tokio_postgres::Error),
    /// PostgreSQL refused a value (SQLSTATE class 22, 23 or 54): retrying the same
    /// write can never succeed, so no caller retries it.
    #[error("PostgreSQL refused the value ({sqlstate}): {message}")]
    Data {
        /// The SQLSTATE, e.g. `22P05` (a NUL in `jsonb`).
        sqlstate: String,
        /// PostgreSQL's own message (not its detail), with any NUL shown as `\\u0000`.
        message: String,
    },
    /// No connection could be had from the pool.
    #[error("no database connection: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// The pool could not be built from the configured URL.
    #[error("jobs.database_url is unusable: {0}")]
    Config(String),
    /// The fence matched nothing: another worker holds this job now.
    #[error("the claim on job {job_id} (attempt {attempt}) was lost; nothing was committed")]
    LostClaim {
        /// The job.
        job_id: Uuid,
        /// The attempt whose claim was lost.
        attempt: i32,
    },
    /// The job id exists with a different workflow or input.
    #[error("job {0} already exists with a different workflow or input; use a new jobId")]
    Conflict(Uuid),
    /// The event for a commit point breaks the wire contract (a defect, not data).
    #[error("the event breaks the wire contract: {0}")]
    Event(#[from] jobs_proto::ContractError),
    /// A row holds a status outside the state machine.
    #[error(transparent)]
    UnknownStatus(#[from] UnknownStatus),
    /// The store was asked for a transition the state machine forbids.
    #[error("illegal transition {from} -> {to}")]
    IllegalTransition {
        /// The current status.
        from: JobStatus,
        /// The requested status.
        to: JobStatus,
    },
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(error: tokio_postgres::Error) -> Self {
        match error.as_db_error() {
            // PostgreSQL's message names the problem; its detail can quote the whole
            // failing row (a CHECK violation), so it stays in the log, out of answers.
            Some(db) if is_data_class(db.code().code()) => {
                if let Some(detail) = db.detail() {
                    tracing::debug!(sqlstate = db.code().code(), detail, "a value was refused");
                }
                StoreError::Data {
                    sqlstate: db.code().code().to_owned(),
                    message: printable(db.message()),
                }
            }
            _ => StoreError::Database(error),
        }
    }
}

/// SQLSTATE classes that describe the value, not the database's health: 22 data
/// exception, 23 integrity constraint violation, 54 program limit exceeded.
fn is_data_class(sqlstate: &str) -> bool {
    ["22", "23", "54"]
        .iter()
        .any(|class| sqlstate.starts_with(class))
}

/// The path (`root.field[2].name`) of the first string or key in `value` holding a
/// NUL character, which PostgreSQL stores in neither `jsonb` nor `text`; `None` when
/// the whole value is storable. Submissions and answers are checked with it before
/// anything is written, so the caller hears which field to fix.
pub fn nul_path(value: &Value, root: &str) -> Option<String> {
    match value {
        Value::String(text) if text.contains('\0') => Some(root.to_owned()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| nul_path(item, &format!("{root}[{i}]"))),
        Value::Object(fields) => fields.iter().find_map(|(key, item)| {
            let path = format!("{root}.{}", printable(key));
            if key.contains('\0') {
                Some(path)
            } else {
                nul_path(item, &path)
            }
        }),
        _ => None,
    }
}

/// `text` with its NULs written out, so an error about a NUL can itself be stored.
pub fn printable(text: &str) -> String {
    text.replace('\0', "\\u0000")
}

impl StoreError {
    /// True when the claim was lost (another worker resumed the job).
    pub fn is_lost_claim(&self) -> bool {
        matches!(self, StoreError::LostClaim { .. })
    }

    /// True when PostgreSQL refused a value: retrying the same write cannot help.
    pub fn is_data_error(&self) -> bool {
        matches!(self, StoreError::Data { .. })
    }
}

/// Applies every pending migration on `client`. Safe to call from many nodes at once:
/// an advisory lock serialises them, and applying an up-to-date schema is a no-op.
pub async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    client.execute(sql::LOCK_MIGRATIONS, &[]).await?;
    let applied = embedded::migrations::runner()
        .set_abort_divergent(true)
        .run_async(client)
        .await;
    // Release even when the migration failed, so a fixed node can retry at once.
    let released = client.execute(sql::UNLOCK_MIGRATIONS, &[]).await;
    applied?;
    released?;
    Ok(())
}

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

/// How a settle ends a claim.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement<'a> {
    /// COMPLETED with the output and the one-line verdict.
    Completed {
        /// proto3 JSON of the output.
        result: &'a Value,
        /// `N steps, output <type>`.
        verdict: &'a str,
    },
    /// WAITING on an external step.
    Waiting {
        /// The step.
        step: &'a str,
    },
    /// FAILED: a validation verdict or a non-retryable error.
    Failed {
        /// The error, prefixed with its kind.
        error: &'a str,
        /// The violations of a validation verdict.
        verdict: Option<&'a str>,
    },
    /// DEAD: retries exhausted.
    Dead {
        /// The last error, verbatim.
        error: &'a str,
    },
    /// QUEUED again after a retryable failure, claimable after `delay`.
    Retry {
        /// The backoff.
        delay: Duration,
        /// The error that caused it.
        error: &'a str,
    },
}

impl Settlement<'_> {
    fn status(&self) -> JobStatus {
        match self {
            Settlement::Completed { .. } => JobStatus::Completed,
            Settlement::Waiting { .. } => JobStatus::Waiting,
            Settlement::Failed { .. } => JobStatus::Failed,
            Settlement::Dead { .. } => JobStatus::Dead,
            Settlement::Retry { .. } => JobStatus::Queued,
        }
    }
}

/// The answer to a parked step.
#[derive(Debug, Clone)]
pub enum ParkedAnswer {
    /// Append this checkpoint entry and requeue.
    Accept {
        /// The checkpoint (`{name, skipped: false, response}`).
        checkpoint: Value,
    },
    /// The response broke its step's rules: the job fails with this verdict.
    Reject {
        /// The error, prefixed with its kind.
        error: String,
        /// The violations.
        verdict: String,
    },
}

/// What `complete_parked_step` decided, atomically under the row lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParkedCompletion {
    /// The answer was applied: the job is QUEUED again (or FAILED on a rejection).
    Completed {
        /// The status after.
        status: JobStatus,
    },
    /// The step was answered before: nothing was appended.
    AlreadyDone {
        /// The job's current status.
        status: JobStatus,
    },
    /// The job is not parked on that step.
    WrongState {
        /// The job's current status.
        status: JobStatus,
        /// The step it is parked on, if any.
        outstanding_step: Option<String>,
    },
    /// No such job.
    NotFound,
}

/// Filters of `list-jobs`.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Only this status.
    pub status: Option<JobStatus>,
    /// Only this workflow.
    pub workflow_name: Option<String>,
    /// At most this many.
    pub limit: i64,
    /// Skip this many.
    pub offset: i64,
}

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Jobs requeued with their attempts kept.
    pub requeued: usize,
    /// Jobs whose last attempt's lease expired: DEAD.
    pub dead: usize,
}

/// One outbox row.
#[derive(Debug, Clone)]
pub struct OutboxRow {
    /// The event id.
    pub event_id: Uuid,
    /// `ACCEPTED`, `STEP_CHECKPOINT`, ...
    pub event_type: String,
    /// The encoded event.
    pub payload: Vec<u8>,
    /// `PENDING`, `PUBLISHED` or `FAILED`.
    pub status: String,
}

/// A PENDING outbox row handed to the relay.
#[derive(Debug, Clone)]
pub struct PendingEvent {
    /// The event id (also the record's event_id).
    pub event_id: Uuid,
    /// The job: the record key.
    pub job_id: Uuid,
    /// The encoded event.
    pub payload: Vec<u8>,
    /// Failed publishes so far.
    pub attempts: i32,
}

/// What became of one publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The broker acknowledged it.
    Published,
    /// The record itself was refused (too large, invalid): counts an attempt.
    Failed(String),
    /// The broker could not take it right now (a timeout, no leader for the
    /// partition, not enough in-sync replicas): an outage, not the row's fault. The
    /// row stays PENDING with its attempts untouched.
    Outage(String),
}

/// What one relay batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Rows published.
    pub published: usize,
    /// Rows whose publish failed and that wait for another attempt.
    pub retrying: usize,
    /// Rows that spent their attempts and landed FAILED.
    pub dead_lettered: Vec<Uuid>,
    /// Rows the broker could not take (an outage): PENDING, attempts untouched.
    pub outage: usize,
    /// The last outage error, when `outage > 0`.
    pub outage_error: Option<String>,
}

impl DrainReport {
    /// Rows the batch handled (published, retried or dead-lettered; not the rows an
    /// outage left untouched).
    pub fn handled(&self) -> usize {
        self.published + self.retrying + self.dead_lettered.len()
    }
}

/// Backlog of the Kafka lanes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneCounts {
    /// Outbox rows waiting for the relay.
    pub pending_events: i64,
    /// Outbox rows that spent their attempts (the dead-letter queue).
    pub failed_events: i64,
    /// HELD rows: an earlier row of the same job is FAILED; they publish, in order,
    /// once an operator redrives that row.
    pub held_events: i64,
    /// Poison records of the request topic.
    pub rejected_requests: i64,
}

/// A record of the request topic that could not become a job row.
#[derive(Debug, Clone)]
pub struct RejectedRecord<'a> {
    /// Its topic.
    pub topic: &'a str,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its key, if any.
    pub key: Option<&'a [u8]>,
    /// Its payload, if any.
    pub payload: Option<&'a [u8]>,
    /// Why it was rejected.
    pub error: &'a str,
}

/// The jobs store over a connection pool.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    database_url: String,
}

impl Store {
    /// Builds the pool and applies the migrations. Waiting for a connection is
    /// bounded by [`POOL_WAIT`], and so is opening one.
    pub async fn connect(database_url: &str, max_connections: usize) -> Result<Store, StoreError> {
        let mut config = deadpool_postgres::Config::new();
        config.url = Some(database_url.to_owned());
        let mut pool = deadpool_postgres::PoolConfig::new(max_connections);
        pool.timeouts = Timeouts {
            wait: Some(POOL_WAIT),
            create: Some(POOL_WAIT),
            recycle: Some(POOL_WAIT),
        };
        config.pool = Some(pool);
        let pool = config
            .create_pool(Some(Runtime::Tokio1), NoTls)
            .map_err(|e| StoreError::Config(e.to_string()))?;
        let mut client = pool.get().await?;
        migrate(&mut client).await?;
        Ok(Store {
            pool,
            database_url: database_url.to_owned(),
        })
    }

    /// Opens a dedicated connection subscribed to [`sql::QUEUED_CHANNEL`]; the caller
    /// polls the returned connection for notifications.
    pub async fn listen_for_work(
        &self,
    ) -> Result<
        (
            Client,
            tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
        ),
        StoreError,
    > {
        let (client, connection) = tokio_postgres::connect(&self.database_url, NoTls).await?;
        Ok((client, connection))
    }

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

    /// Runs one fenced write, with its event and wake-up, in one transaction.
    async fn fenced(
        &self,
        claim: &Claim,
        statement: &str,
        extra: &[&(dyn ToSql + Sync)],
        event: Option<EventFacts<'_>>,
        wake: bool,
    ) -> Result<(), StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&claim.job_id, &claim.owner, &claim.token];
        params.extend_from_slice(extra);
        if tx.execute(statement, &params).await? == 0 {
            tx.rollback().await?;
            return Err(StoreError::LostClaim {
                job_id: claim.job_id,
                attempt: claim.attempt,
            });
        }
        if let Some(event) = event {
            insert_event(&tx, &event).await?;
        }
        if wake {
            tx.execute(sql::NOTIFY_QUEUED, &[&claim.job_id.to_string()])
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Extends the lease of a running claim.
    pub async fn renew_lease(&self, claim: &Claim, lease: Duration) -> Result<(), StoreError> {
        self.fenced(claim, sql::RENEW_LEASE, &[&millis(lease)], None, false)
            .await
    }

    /// Appends one checkpoint with its STEP_CHECKPOINT event.
    pub async fn append_checkpoint(
        &self,
        claim: &Claim,
        step: &str,
        checkpoint: &Value,
    ) -> Result<(), StoreError> {
        let event = EventFacts {
            job_id: claim.job_id,
            workflow_name: &claim.workflow_name,
            kind: Type::StepCheckpoint,
            step: Some(step),
            attempt: claim.attempt,
            verdict: None,
            error: None,
            status: JobStatus::Running,
        };
        self.fenced(
            claim,
            sql::APPEND_CHECKPOINT,
            &[checkpoint],
            Some(event),
            false,
        )
        .await
    }

    /// Ends a claim: completed, parked, failed, dead, retried or released, each with
    /// its event (none for retries and releases: those are row changes, not commit
    /// points).
    pub async fn settle(
        &self,
        claim: &Claim,
        settlement: Settlement<'_>,
    ) -> Result<(), StoreError> {
        let to = settlement.status();
        if !JobStatus::Running.can_become(to) {
            return Err(StoreError::IllegalTransition {
                from: JobStatus::Running,
                to,
            });
        }
        let facts = |kind, step, verdict, error| EventFacts {
            job_id: claim.job_id,
            workflow_name: &claim.workflow_name,
            kind,
            step,
            attempt: claim.attempt,
            verdict,
            error,
            status: to,
        };
        match settlement {
            Settlement::Completed { result, verdict } => {
                let event = facts(Type::Completed, None, Some(verdict), None);
                self.fenced(
                    claim,
                    sql::SETTLE_COMPLETED,
                    &[result, &verdict],
                    Some(event),
                    false,
                )
                .await
            }
            Settlement::Waiting { step } => {
                let event = facts(Type::Waiting, Some(step), None, None);
                self.fenced(claim, sql::SETTLE_WAITING, &[&step], Some(event), false)
                    .await
            }
            // Errors and verdicts may quote a step target's own message: a NUL in them
            // must not make the settlement unstorable.
            Settlement::Failed { error, verdict } => {
                let (error, verdict) = (&printable(error), verdict.map(printable));
                let verdict = verdict.as_deref();
                let event = facts(Type::Failed, None, verdict, Some(error));
                self.fenced(
                    claim,
                    sql::SETTLE_FAILED,
                    &[&error, &verdict],
                    Some(event),
                    false,
                )
                .await
            }
            Settlement::Dead { error } => {
                let error = &printable(error);
                let event = facts(Type::Dead, None, None, Some(error));
                self.fenced(claim, sql::SETTLE_DEAD, &[&error], Some(event), false)
                    .await
            }
            Settlement::Retry { delay, error } => {
                let error = &printable(error);
                self.fenced(
                    claim,
                    sql::SETTLE_RETRY,
                    &[&millis(delay), &error],
                    None,
                    delay.is_zero(),
                )
                .await
            }
        }
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
                ],
            )
            .await?
        else {
            tx.rollback().await?;
            return Err(StoreError::LostClaim {
                job_id: claim.job_id,
                attempt: claim.attempt,
            });
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

    /// Answers a parked step under the row lock: the gate runs again here, so racing
    /// callers get one `Completed` and the rest `AlreadyDone` or `WrongState`.
    /// `step_index` is the step's position in the job's workflow.
    pub async fn complete_parked_step(
        &self,
        job_id: Uuid,
        step_name: &str,
        step_index: usize,
        answer: &ParkedAnswer,
    ) -> Result<ParkedCompletion, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let Some(row) = tx.query_opt(sql::LOCK_JOB, &[&job_id]).await? else {
            return Ok(ParkedCompletion::NotFound);
        };
        let status: JobStatus = row.get::<_, String>("status").parse()?;
        let outstanding: Option<String> = row.get("outstanding_step");
        let checkpoints: Value = row.get("checkpoints");
        let answered = checkpoints.as_array().is_some_and(|c| c.len() > step_index);
        if status != JobStatus::Waiting || outstanding.as_deref() != Some(step_name) {
            tx.rollback().await?;
            return Ok(if answered {
                ParkedCompletion::AlreadyDone { status }
            } else {
                ParkedCompletion::WrongState {
                    status,
                    outstanding_step: outstanding,
                }
            });
        }
        let workflow_name: String = row.get("workflow_name");
        let attempt: i32 = row.get("attempt");
        let status = match answer {
            ParkedAnswer::Accept { checkpoint } => {
                tx.execute(sql::ACCEPT_PARKED_STEP, &[&job_id, checkpoint])
                    .await?;
                let event = EventFacts {
                    job_id,
                    workflow_name: &workflow_name,
                    kind: Type::StepCheckpoint,
                    step: Some(step_name),
                    attempt,
                    verdict: None,
                    error: None,
                    status: JobStatus::Queued,
                };
                insert_event(&tx, &event).await?;
                tx.execute(sql::NOTIFY_QUEUED, &[&job_id.to_string()])
                    .await?;
                JobStatus::Queued
            }
            ParkedAnswer::Reject { error, verdict } => {
                let (error, verdict) = (&printable(error), &printable(verdict));
                tx.execute(sql::REJECT_PARKED_STEP, &[&job_id, error, verdict])
                    .await?;
                let event = EventFacts {
                    job_id,
                    workflow_name: &workflow_name,
                    kind: Type::Failed,
                    step: Some(step_name),
                    attempt,
                    verdict: Some(verdict),
                    error: Some(error),
                    status: JobStatus::Failed,
                };
                insert_event(&tx, &event).await?;
                JobStatus::Failed
            }
        };
        tx.commit().await?;
        Ok(ParkedCompletion::Completed { status })
    }

    /// One job, every column (snake_case keys, as stored), or `None`.
    pub async fn get_job(&self, job_id: Uuid) -> Result<Option<Value>, StoreError> {
        let client = self.pool.get().await?;
        Ok(client
            .query_opt(sql::GET_JOB, &[&job_id])
            .await?
            .map(|row| row.get(0)))
    }

    /// Job summaries newest first.
    pub async fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<Value>, StoreError> {
        let client = self.pool.get().await?;
        let status = filter.status.map(JobStatus::as_str);
        let rows = client
            .query(
                sql::LIST_JOBS,
                &[
                    &status,
                    &filter.workflow_name,
                    &filter.limit,
                    &filter.offset,
                ],
            )
            .await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// A job's outbox rows, in order.
    pub async fn job_events(&self, job_id: Uuid) -> Result<Vec<OutboxRow>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client.query(sql::JOB_EVENTS, &[&job_id]).await?;
        Ok(rows
            .iter()
            .map(|row| OutboxRow {
                event_id: row.get("event_id"),
                event_type: row.get("event_type"),
                payload: row.get("payload"),
                status: row.get("status"),
            })
            .collect())
    }
}

impl Store {
    /// One relay batch: locks up to `batch` due PENDING rows (skipping rows other
    /// relays hold, and all but the earliest PENDING row of each job), hands them to
    /// `publish`, and records each outcome in the same transaction: PUBLISHED after the
    /// broker's ack; a refused record counts one more attempt with
    /// `backoff(attempts)`, and lands FAILED once `max_attempts` are spent; a row an
    /// outage kept from the broker is left as it was. When `publish` returns `Err`
    /// (the broker is unreachable) nothing is recorded: the rows stay PENDING,
    /// attempts untouched.
    pub async fn drain_outbox<F, Fut, E>(
        &self,
        batch: i64,
        max_attempts: i32,
        backoff: impl Fn(i32) -> Duration,
        publish: F,
    ) -> Result<Result<DrainReport, E>, StoreError>
    where
        F: FnOnce(Vec<PendingEvent>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<PublishOutcome>, E>>,
    {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let rows = tx.query(sql::CLAIM_OUTBOX_BATCH, &[&batch]).await?;
        if rows.is_empty() {
            tx.commit().await?;
            return Ok(Ok(DrainReport::default()));
        }
        let pending: Vec<PendingEvent> = rows
            .iter()
            .map(|row| PendingEvent {
                event_id: row.get("event_id"),
                job_id: row.get("job_id"),
                payload: row.get("payload"),
                attempts: row.get("attempts"),
            })
            .collect();
        let ids: Vec<(Uuid, i32)> = pending.iter().map(|p| (p.event_id, p.attempts)).collect();
        let outcomes = match publish(pending).await {
            Ok(outcomes) => outcomes,
            Err(unreachable) => {
                tx.rollback().await?;
                return Ok(Err(unreachable));
            }
        };
        let mut report = DrainReport::default();
        let mut published = Vec::new();
        let mut deferred = Vec::new();
        for ((event_id, attempts), outcome) in ids.into_iter().zip(outcomes) {
            match outcome {
                PublishOutcome::Published => published.push(event_id),
                PublishOutcome::Outage(error) => {
                    deferred.push(event_id);
                    report.outage += 1;
                    report.outage_error = Some(error);
                }
                PublishOutcome::Failed(error) => {
                    let row = tx
                        .query_one(
                            sql::MARK_PUBLISH_FAILED,
                            &[
                                &event_id,
                                &printable(&error),
                                &millis(backoff(attempts + 1)),
                                &max_attempts,
                            ],
                        )
                        .await?;
                    if row.get::<_, String>("status") == "FAILED" {
                        tx.execute(sql::HOLD_BEHIND_FAILED, &[&event_id]).await?;
                        report.dead_lettered.push(event_id);
                    } else {
                        report.retrying += 1;
                    }
                }
            }
        }
        if !published.is_empty() {
            tx.execute(sql::MARK_PUBLISHED, &[&published]).await?;
        }
        if !deferred.is_empty() {
            // Not the rows' fault: no attempt is spent, but the next batch reaches
            // other rows first (their partitions may be healthy).
            tx.execute(sql::DEFER_AFTER_OUTAGE, &[&deferred, &millis(backoff(1))])
                .await?;
        }
        tx.commit().await?;
        report.published = published.len();
        Ok(Ok(report))
    }

    /// How many jobs are in `status`.
    pub async fn count_jobs(&self, status: JobStatus) -> Result<i64, StoreError> {
        let client = self.pool.get().await?;
        Ok(client
            .query_one(sql::COUNT_JOBS_IN_STATUS, &[&status.as_str()])
            .await?
            .get(0))
    }

    /// The lanes' backlog.
    pub async fn lane_counts(&self) -> Result<LaneCounts, StoreError> {
        let client = self.pool.get().await?;
        let row = client.query_one(sql::LANE_COUNTS, &[]).await?;
        Ok(LaneCounts {
            pending_events: row.get("pending"),
            failed_events: row.get("failed"),
            held_events: row.get("held"),
            rejected_requests: row.get("rejected"),
        })
    }

    /// Keeps a poison record in the dead-letter store (once per record).
    pub async fn reject_request(&self, record: &RejectedRecord<'_>) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client
            .execute(
                sql::INSERT_REQUEST_REJECT,
                &[
                    &record.topic,
                    &record.partition,
                    &record.offset,
                    &record.key,
                    &record.payload,
                    &printable(record.error),
                ],
            )
            .await?;
        Ok(())
    }

    /// An operator's redrive of a FAILED (dead-lettered) outbox row: PENDING again
    /// with a fresh budget, and the job's HELD rows behind it PENDING too, so they
    /// follow in order. False when the row is not FAILED.
    pub async fn redrive_failed_event(&self, event_id: Uuid) -> Result<bool, StoreError> {
        let client = self.pool.get().await?;
        let released = client
            .query(sql::REDRIVE_FAILED_EVENT, &[&event_id])
            .await?;
        if !released.is_empty() {
            client.execute(sql::NOTIFY_OUTBOX, &[]).await?;
        }
        Ok(!released.is_empty())
    }

    /// An outbox row's status, attempts and last error.
    pub async fn outbox_row(
        &self,
        event_id: Uuid,
    ) -> Result<Option<(String, i32, Option<String>)>, StoreError> {
        let client = self.pool.get().await?;
        Ok(client
            .query_opt(sql::OUTBOX_ROW, &[&event_id])
            .await?
            .map(|row| {
                (
                    row.get("status"),
                    row.get("attempts"),
                    row.get("last_error"),
                )
            }))
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

/// The DEAD event of a job a statement just landed DEAD; `row` carries its `attempt`
/// and `error`.
async fn insert_dead_event(
    tx: &Transaction<'_>,
    job_id: Uuid,
    workflow_name: &str,
    row: &tokio_postgres::Row,
) -> Result<(), StoreError> {
    let error: Option<String> = row.get("error");
    let event = EventFacts {
        job_id,
        workflow_name,
        kind: Type::Dead,
        step: None,
        attempt: row.get("attempt"),
        verdict: None,
        error: error.as_deref(),
        status: JobStatus::Dead,
    };
    insert_event(tx, &event).await
}

async fn insert_event(tx: &Transaction<'_>, facts: &EventFacts<'_>) -> Result<(), StoreError> {
    let (event_id, payload) = events::encode(facts)?;
    tx.execute(
        sql::INSERT_EVENT,
        &[
            &event_id,
            &facts.job_id,
            &events::type_name(facts.kind),
            &payload,
        ],
    )
    .await?;
    // Wake idle relays when this transaction commits.
    tx.execute(sql::NOTIFY_OUTBOX, &[]).await?;
    Ok(())
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
