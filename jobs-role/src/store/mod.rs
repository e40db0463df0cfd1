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

mod cancels;
mod children;
mod claims;
pub mod clock;
mod completions;
mod dedupe;
mod event_batch;
pub mod events;
mod filed_snapshots;
mod flow;
mod group_commit;
mod items;
mod limits;
mod operator_acts;
mod outbox;
mod parked;
mod pruning;
mod reads;
mod retries;
mod schedules;
mod signals;
mod snapshots;
pub mod sql;
mod submissions;
pub mod tls;
mod unstorable;
mod watching;
mod writes;

pub use cancels::CancelOutcome;
pub use children::{ChildRow, NewChild};
pub use claims::{Claim, ClaimedJob, RefusedSince, SweepReport};
pub use dedupe::{Dedupe, DedupeMode};
pub use flow::{HoldUps, KeyState, KeysSummary, PausedWorkflow};
pub use items::StoredItem;
pub use limits::{LimitAsk, LimitState};
pub use operator_acts::{
    ActedOn, ByJob, JOBS_PER_TRANSACTION, JobSelection, LOCK_WAIT, Recheck, Selected,
};
pub use outbox::{
    DrainReport, LaneCounts, OutboxRow, PendingEvent, PublishOutcome, RejectedRecord,
};
pub use parked::{ParkedAnswer, ParkedCompletion, TimedOut, has_checkpoint, outstanding_steps};
pub use pruning::{EventsOut, MAX_BATCHES_PER_ROUND, Pruned};
pub use reads::{FleetState, JobFilter, PoolStatus};
pub use retries::{RerunFrom, Retry, RetryCandidate, RetryOutcome, SnapshotMove, SnapshotMoves};
pub use schedules::{Fired, Firing, ScheduleRow};
pub use signals::{MAX_SIGNALS_PER_KEY, Offer, Offering, SignalOutcome};
pub use snapshots::{MovedSnapshots, PrunedSnapshots};
pub use submissions::{DEFAULT_PRIORITY, Inserted, NewJob, RunAfter, ScheduledTick};
pub use unstorable::{nul_path, printable};
pub use watching::{WATCHED_EVENTS_PER_JOB, WatchedEvent};
pub use writes::{
    ClaimWrite, Lease, ParkedTimeout, ParkedWait, Settlement, StepCheckpoint, StepItems,
};

use std::time::Duration;

use deadpool_postgres::{Pool, Runtime};
use event_batch::EventBatch;
use jobs_proto::v1::workflow_run_event::Type;
use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Transaction};
use uuid::Uuid;

use crate::status::{JobStatus, UnknownStatus};
use events::EventFacts;

mod embedded {
    refinery::embed_migrations!("../migrations");
}

/// How long the readiness check waits for the database.
const READY_WITHIN: Duration = Duration::from_secs(3);

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
    /// restarting, serialization): retried by every background task. Shown with
    /// PostgreSQL's own message and SQLSTATE, or the connection's error, never only
    /// the driver's "db error".
    #[error("database error: {}", causes(.0))]
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
    /// No connection could be had from the pool. Shown with the driver's whole
    /// chain of causes (PostgreSQL's own message, the socket's error), not only the
    /// pool's outermost words.
    #[error("no database connection: {}", causes(.0))]
    Pool(#[from] deadpool_postgres::PoolError),
    /// The node could not connect at start-up: where it tried (host, port, database,
    /// user; never the password) and why, in PostgreSQL's or the socket's words.
    #[error("cannot connect to PostgreSQL at {target}: {reason}")]
    Connect {
        /// `host:port/database as user`.
        target: String,
        /// The cause.
        reason: String,
    },
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
    /// A batch of claim writes failed as a whole (no connection, or its `COMMIT`
    /// failed, so whether it landed is unknown); a failure that may pass.
    #[error("committing a batch of job writes failed: {0}")]
    GroupCommit(String),
    /// A batch of writes failed because the database's disk is full (SQLSTATE
    /// 53100, shared by every write of the batch); a failure that passes once space
    /// is freed.
    #[error("the jobs database's disk is full: {0}")]
    DiskFull(String),
    /// The job id exists with a different workflow or input.
    #[error("job {0} already exists with a different workflow or input; use a new jobId")]
    Conflict(Uuid),
    /// A job of this id ran and retention deleted it: a replay of its submission (a
    /// request topic read again, a client's late retry) is never run again.
    #[error(
        "job {0} already ran and retention deleted it (jobs.retention); an id is never run twice: use a new jobId"
    )]
    Pruned(Uuid),
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

impl StoreError {
    /// The refusal PostgreSQL would answer for a NUL at `path` (SQLSTATE 22P05), said
    /// before anything is sent.
    pub fn unstorable(path: &str) -> StoreError {
        StoreError::Data {
            sqlstate: "22P05".into(),
            message: format!(
                "{path}: holds a NUL character (\\u0000), which PostgreSQL cannot store"
            ),
        }
    }

    /// True when the claim was lost (another worker resumed the job).
    pub fn is_lost_claim(&self) -> bool {
        matches!(self, StoreError::LostClaim { .. })
    }

    /// True when PostgreSQL itself answered with the error (a SQLSTATE): one
    /// statement failed there and the connection is fine. False for a lost
    /// connection, a pool that had none to give, or an answer that never came.
    pub fn is_answered_by_server(&self) -> bool {
        match self {
            StoreError::Database(e) => e.as_db_error().is_some(),
            StoreError::Data { .. } => true,
            _ => false,
        }
    }

    /// True when PostgreSQL refused a value: retrying the same write cannot help.
    pub fn is_data_error(&self) -> bool {
        matches!(self, StoreError::Data { .. })
    }

    /// True when a statement gave up waiting for a row lock (`lock_timeout`): another
    /// transaction holds the row, and the same write may pass once it ends.
    pub fn is_lock_timeout(&self) -> bool {
        matches!(self, StoreError::Database(e)
            if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE))
    }

    /// True when the database's disk is full (SQLSTATE 53100): nothing was written,
    /// and the same write passes once space is freed.
    pub fn is_disk_full(&self) -> bool {
        match self {
            StoreError::Database(e) => {
                e.code() == Some(&tokio_postgres::error::SqlState::DISK_FULL)
            }
            StoreError::DiskFull(_) => true,
            _ => false,
        }
    }

    /// True when the database refused this node altogether, not one statement: a
    /// connection could not be made or broke (refused, reset, unreachable, timed out,
    /// closed; SQLSTATE class 08 but a pooler's protocol answers, 08P01), the server was
    /// shutting down or starting up (57P01 to 57P03), or its disk is full. What the
    /// sweeper counts as a refusal (`worker::sweeper`); a busy pool, a lock or
    /// statement timeout, a deadlock, a TLS or encoding failure is not.
    pub fn is_refusal(&self) -> bool {
        fn refused(error: &tokio_postgres::Error) -> bool {
            use std::io::ErrorKind;
            match error.code() {
                Some(code) => {
                    let code = code.code();
                    (code.starts_with("08") && code != "08P01")
                        || ["57P01", "57P02", "57P03", "53100"].contains(&code)
                }
                None => {
                    let network = std::error::Error::source(error)
                        .and_then(|cause| cause.downcast_ref::<std::io::Error>())
                        .is_some_and(|io| {
                            matches!(
                                io.kind(),
                                ErrorKind::ConnectionRefused
                                    | ErrorKind::ConnectionReset
                                    | ErrorKind::ConnectionAborted
                                    | ErrorKind::BrokenPipe
                                    | ErrorKind::TimedOut
                                    | ErrorKind::NotConnected
                                    | ErrorKind::HostUnreachable
                                    | ErrorKind::NetworkUnreachable
                                    | ErrorKind::UnexpectedEof
                            )
                        });
                    error.is_closed() || network
                }
            }
        }
        use deadpool_postgres::{PoolError, TimeoutType};
        match self {
            StoreError::Database(e) | StoreError::Pool(PoolError::Backend(e)) => refused(e),
            StoreError::Pool(PoolError::Timeout(TimeoutType::Create | TimeoutType::Recycle)) => {
                true
            }
            StoreError::DiskFull(_) => true,
            _ => false,
        }
    }

    /// True when PostgreSQL broke a deadlock by failing this transaction: the same
    /// writes, in smaller transactions, may pass.
    pub fn is_deadlock(&self) -> bool {
        matches!(self, StoreError::Database(e)
            if e.code() == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED))
    }
}

/// Applies every pending migration on `client`. Safe to call from many nodes at once:
/// an advisory lock serialises them, and applying an up-to-date schema is a no-op.
pub async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    run_migrations(client, refinery::Target::Latest).await
}

/// Applies the migrations up to and including `version` only, under the same lock as
/// [`migrate`]: for tests that write rows as a node of that version did, then
/// [`migrate`] the rest.
pub async fn migrate_to(client: &mut Client, version: u32) -> Result<(), StoreError> {
    run_migrations(client, refinery::Target::Version(version)).await
}

async fn run_migrations(client: &mut Client, target: refinery::Target) -> Result<(), StoreError> {
    client.batch_execute(sql::LOCK_MIGRATIONS).await?;
    let applied = embedded::migrations::runner()
        .set_abort_divergent(true)
        .set_target(target)
        .run_async(client)
        .await;
    // Release even when the migration failed, so a fixed node can retry at once.
    let released = client.batch_execute(sql::UNLOCK_MIGRATIONS).await;
    applied?;
    released?;
    Ok(())
}

/// What every connection of the node sets unless `database_url` says otherwise:
/// - `lock_timeout` of 5 s for the session: a statement waiting on a row another
///   transaction holds (an operator's open transaction; a lease renewal, a
///   `complete-step`) fails and is tried again instead of hanging for as long as that
///   transaction lasts; the transactions that must wait longer set their own;
/// - TCP keepalives (after 30 s idle, every 10 s, 3 probes) and a TCP user timeout of
///   30 s: a connection whose peer vanished without a word (a failover leaving a
///   stale address, a NAT forgetting the flow) is found dead in seconds, not after
///   the kernel's 15 minutes, which would hold the flusher's every write meanwhile.
fn session_defaults(config: &mut tokio_postgres::Config) {
    let options = config.get_options().unwrap_or_default().to_owned();
    if !options.contains("lock_timeout") {
        config.options(format!("{options} -c lock_timeout=5000").trim());
    }
    // tokio-postgres's defaults (keepalives on, idle 2 h) mean no one chose these.
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .keepalives_interval(Duration::from_secs(10))
            .keepalives_retries(3);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(Duration::from_secs(30));
    }
}

/// The stream a listener's connection runs over (TLS or not, as `sslmode` says).
pub type ListenerStream =
    <tls::DatabaseTls as tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>>::Stream;

/// The jobs store over a connection pool.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// How to open a connection of its own (the listener's), as the pool does.
    connect: (tokio_postgres::Config, tls::DatabaseTls),
    /// Connections operator acts may hold while they wait in a row's lock queue (a
    /// quarter of the pool), so waiting acts never starve the workers.
    waiting_acts: std::sync::Arc<tokio::sync::Semaphore>,
    /// Connections everything but the worker's own writes may hold at once (see
    /// [`Store::shared`]).
    shared: std::sync::Arc<tokio::sync::Semaphore>,
    /// The snapshot digests this node saw filed: their submissions send the digest
    /// alone.
    filed: filed_snapshots::FiledSnapshots,
}

/// The connections of a pool of `max` kept for the worker's own writes (claims,
/// lease renewals, the flusher's checkpoints and settlements, releases, the
/// sweepers): a quarter, at least two, leaving the others at least one.
pub fn reserved_for_the_worker(max: usize) -> usize {
    (max / 4).max(2).min(max.saturating_sub(1))
}

/// A pooled connection taken through [`Store::shared`]; its place among the shared
/// ones is given back with it.
pub(crate) struct SharedConnection {
    client: deadpool_postgres::Object,
    _place: tokio::sync::OwnedSemaphorePermit,
}

impl std::ops::Deref for SharedConnection {
    type Target = deadpool_postgres::Object;
    fn deref(&self) -> &Self::Target {
        &self.client
    }
}

impl std::ops::DerefMut for SharedConnection {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.client
    }
}

impl Store {
    /// Builds the pool and applies the migrations. Waiting for a connection is
    /// bounded by [`POOL_WAIT`], and so is opening one.
    pub async fn connect(database_url: &str, max_connections: usize) -> Result<Store, StoreError> {
        let (mut config, tls) = tls::connect_options(database_url).map_err(StoreError::Config)?;
        session_defaults(&mut config);
        let manager = deadpool_postgres::Manager::from_config(
            config.clone(),
            tls.clone(),
            deadpool_postgres::ManagerConfig {
                recycling_method: deadpool_postgres::RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(max_connections)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(POOL_WAIT))
            .recycle_timeout(Some(POOL_WAIT))
            .build()
            .map_err(|e| StoreError::Config(e.to_string()))?;
        let mut client = pool.get().await.map_err(|error| StoreError::Connect {
            target: connection_target(database_url),
            reason: causes(&error),
        })?;
        migrate(&mut client).await?;
        clock::read_on(&client).await?;
        Ok(Store {
            pool,
            connect: (config, tls),
            waiting_acts: std::sync::Arc::new(tokio::sync::Semaphore::new(
                (max_connections / 4).max(1),
            )),
            shared: std::sync::Arc::new(tokio::sync::Semaphore::new(
                max_connections - reserved_for_the_worker(max_connections),
            )),
            filed: Default::default(),
        })
    }

    /// A connection for anything but the worker's own writes: the verbs, the
    /// readers, the watchers, the relay, the pruner, the metrics. Together they hold
    /// at most the pool less [`reserved_for_the_worker`]: however many callers wait
    /// (a storm of `list-jobs`, a thousand watchers), a running job's checkpoints and
    /// settlements always find a connection. Waiting for a place is bounded by
    /// [`POOL_WAIT`], as waiting for the pool is.
    pub(crate) async fn shared(&self) -> Result<SharedConnection, StoreError> {
        let place = tokio::time::timeout(POOL_WAIT, self.shared.clone().acquire_owned())
            .await
            .map_err(|_| {
                StoreError::Pool(deadpool_postgres::PoolError::Timeout(
                    deadpool_postgres::TimeoutType::Wait,
                ))
            })?
            // Never closed; a closed one would mean the store is going away.
            .map_err(|_| StoreError::Config("the store is closed".into()))?;
        let client = self.pool.get().await?;
        Ok(SharedConnection {
            client,
            _place: place,
        })
    }

    /// Whether the store can serve (for `/readyz`): the database answers and holds
    /// every migration this node knows. Why not, in words safe to show without a
    /// token (the driver's text, which can name hosts and users, goes to the log).
    pub async fn ready(&self) -> Result<(), String> {
        let needed = embedded::migrations::runner()
            .get_migrations()
            .iter()
            .map(|m| i64::from(m.version()))
            .max()
            .unwrap_or(0);
        // On the pool directly (not the readers' share) and within a few seconds: a
        // storm of readers must not make a healthy node look unready.
        let applied: Result<Option<i64>, StoreError> = tokio::time::timeout(READY_WITHIN, async {
            let client = self.pool.get().await?;
            Ok(client.query_one(sql::APPLIED_MIGRATION, &[]).await?.get(0))
        })
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::Pool(deadpool_postgres::PoolError::Timeout(
                deadpool_postgres::TimeoutType::Wait,
            )))
        });
        match applied {
            Ok(Some(applied)) if applied >= needed => Ok(()),
            Ok(applied) => Err(format!(
                "the jobs schema is at V{} and this node needs V{needed}: a node of this version applies it at start-up",
                applied.unwrap_or(0)
            )),
            Err(error) => {
                let reference = Uuid::now_v7();
                tracing::warn!(%reference, %error, "readiness: the jobs database does not answer");
                Err(format!(
                    "the jobs database does not answer (reference {reference} in the node's log)"
                ))
            }
        }
    }

    /// Opens a dedicated connection for a listener (LISTEN/NOTIFY); the caller polls
    /// the returned connection for notifications.
    pub async fn listen_for_work(
        &self,
    ) -> Result<
        (
            Client,
            tokio_postgres::Connection<tokio_postgres::Socket, ListenerStream>,
        ),
        StoreError,
    > {
        let (config, tls) = &self.connect;
        let (client, connection) = config.connect(tls.clone()).await?;
        Ok((client, connection))
    }
}

/// How a batch (many jobs' writes in one transaction) ended when it did not commit.
enum BatchFailure {
    /// Before `COMMIT`: nothing landed; the items may be tried one by one.
    Rolledback(StoreError),
    /// Before `COMMIT`, at the statement of item `at`, which failed first (the items
    /// after it only say the transaction was aborted): nothing landed.
    Refused {
        /// The item's position in the batch.
        at: usize,
        /// What PostgreSQL said.
        error: StoreError,
    },
    /// Before any statement ran (no connection, or the transaction would not open),
    /// or at a `COMMIT` PostgreSQL refused: nothing landed, and trying the items one
    /// by one would only meet the same failure once per item.
    Whole(StoreError),
    /// The `COMMIT` was sent and its answer never came (the connection broke): the
    /// transaction may or may not have landed. Resolved by reading the rows back,
    /// never by sending the writes again blindly.
    Unanswered(StoreError),
}

impl From<StoreError> for BatchFailure {
    fn from(error: StoreError) -> Self {
        BatchFailure::Rolledback(error)
    }
}

impl From<tokio_postgres::Error> for BatchFailure {
    fn from(error: tokio_postgres::Error) -> Self {
        BatchFailure::Rolledback(error.into())
    }
}

/// How a failed `COMMIT` ended: PostgreSQL answered with an error (rolled back:
/// [`BatchFailure::Whole`]), or no answer came ([`BatchFailure::Unanswered`]).
fn commit_failure(error: tokio_postgres::Error) -> BatchFailure {
    if error.as_db_error().is_some() {
        BatchFailure::Whole(error.into())
    } else {
        BatchFailure::Unanswered(error.into())
    }
}

/// How long a batch of claim writes (or reading its rows back) may go unanswered
/// before the store stops waiting: a connection that went silent (its peer gone
/// without a word) must not hold every running job's writes for the kernel's 15
/// minutes. A healthy batch of 512 writes takes milliseconds.
pub const COMMIT_DEADLINE: Duration = Duration::from_secs(15);

/// A pooled connection closed, not given back to the pool, unless the work on it
/// [`Abandonable::finished`]: one whose statement was abandoned (a deadline passed)
/// may still owe an answer, and its next user would wait behind it.
pub(crate) struct Abandonable {
    object: Option<deadpool_postgres::Object>,
    finished: bool,
}

impl Abandonable {
    pub(crate) fn new(object: deadpool_postgres::Object) -> Abandonable {
        Abandonable {
            object: Some(object),
            finished: false,
        }
    }

    /// The connection (present until dropped).
    pub(crate) fn object(&mut self) -> &mut deadpool_postgres::Object {
        // Taken only in `drop`: present for as long as `self` is.
        self.object
            .as_mut()
            .unwrap_or_else(|| unreachable!("an Abandonable's connection is taken only on drop"))
    }

    /// The work on it ended with an answer: it goes back to the pool.
    pub(crate) fn finished(&mut self) {
        self.finished = true;
    }
}

impl Drop for Abandonable {
    fn drop(&mut self) {
        if !self.finished
            && let Some(object) = self.object.take()
        {
            // Detached from the pool and dropped: the connection closes.
            drop(deadpool_postgres::Object::take(object));
        }
    }
}

/// A pooled connection for a batch; without one the batch fails whole.
async fn batch_connection(pool: &Pool) -> Result<deadpool_postgres::Object, BatchFailure> {
    pool.get().await.map_err(|e| BatchFailure::Whole(e.into()))
}

/// Opens a batch's transaction; failing to, the batch fails whole (nothing ran).
async fn begin_batch(
    client: &mut deadpool_postgres::Object,
) -> Result<deadpool_postgres::Transaction<'_>, BatchFailure> {
    client
        .transaction()
        .await
        .map_err(|e| BatchFailure::Whole(e.into()))
}

impl BatchFailure {
    /// What went wrong, owned.
    fn into_error(self) -> StoreError {
        match self {
            BatchFailure::Rolledback(e) | BatchFailure::Whole(e) | BatchFailure::Unanswered(e) => e,
            BatchFailure::Refused { error, .. } => error,
        }
    }

    /// The answers of a batch that did not commit, when its items are not retried one
    /// by one: a lone item keeps its own error; many share a [`StoreError::GroupCommit`].
    fn answers<T>(self, items: usize) -> Vec<Result<T, StoreError>> {
        let e = self.into_error();
        if items == 1 {
            return vec![Err(e)];
        }
        let (disk_full, shared) = (e.is_disk_full(), e.to_string());
        (0..items)
            .map(|_| {
                Err(if disk_full {
                    StoreError::DiskFull(shared.clone())
                } else {
                    StoreError::GroupCommit(shared.clone())
                })
            })
            .collect()
    }
}

/// The DEAD event of a job a statement just landed DEAD; `row` carries its `attempt`,
/// `error` and `metadata`.
async fn insert_dead_event(
    tx: &Transaction<'_>,
    job_id: Uuid,
    workflow_name: &str,
    row: &tokio_postgres::Row,
) -> Result<(), StoreError> {
    let error: Option<String> = row.get("error");
    let metadata: Option<Value> = row.try_get("metadata")?;
    let event = EventFacts {
        job_id,
        workflow_name,
        kind: Type::Dead,
        step: None,
        attempt: row.get("attempt"),
        verdict: None,
        error: error.as_deref(),
        status: JobStatus::Dead,
        detail: &[],
        data: None,
        waiting_on: None,
        metadata: metadata.as_ref(),
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

/// An error and its sources, each once, joined with ": " (a driver error's own
/// Display is often only "db error" or "error connecting to server"). PostgreSQL's
/// own message stands for a database error.
pub fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(current) = next {
        let text = match current.downcast_ref::<tokio_postgres::Error>() {
            Some(pg) => match pg.as_db_error() {
                Some(db) => format!("{} ({})", db.message(), db.code().code()),
                None => pg.to_string(),
            },
            None => current.to_string(),
        };
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = current.source();
    }
    parts.join(": ")
}

/// Where a database URL points, without its password: `host:port/database as user`.
pub fn connection_target(database_url: &str) -> String {
    let Some(Ok(config)) = tls::take_tls_keys(database_url)
        .ok()
        .map(|(rest, _, _)| rest.parse::<tokio_postgres::Config>())
    else {
        return "the configured jobs.database_url (it does not parse)".to_owned();
    };
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports = config.get_ports();
    let host = hosts.first().map_or("localhost", String::as_str);
    let port = ports.first().copied().unwrap_or(5432);
    format!(
        "{host}:{port}/{} as {}",
        config.get_dbname().unwrap_or("(default database)"),
        config.get_user().unwrap_or("(default user)")
    )
}
