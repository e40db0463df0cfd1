//! Submission: strict about what it persists.
//!
//! The definition (inline, or a stored name resolved through the registry's
//! `WorkflowRepository`) is compiled and verified, and the input is parsed and checked
//! against the workflow's input type, and every string is checked to be storable (no
//! NUL, which PostgreSQL refuses in `jsonb`), **before** anything is written. Then the
//! envelope and the input are snapshotted into the job row, so a workflow edited
//! later never shifts a live job. On any failure no row is written.

use std::sync::Arc;

use std::future::Future;

use futures_util::StreamExt;
use registry_stub::WorkflowRepository;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use workflow::compile::{MessageError, RULES_TIME_LIMIT, encode_json};
use workflow::outbound::OutboundPolicy;
use workflow::{CompiledWorkflow, Findings};

use crate::batch::{BatchQueue, batch_loop};
use crate::compiled::{Compiled, CompiledCache};
use crate::status::JobStatus;
use crate::store::{
    DEFAULT_PRIORITY, Dedupe, DedupeMode, Inserted, NewJob, RunAfter, Store, StoreError, nul_path,
};

/// Submissions of one `submit_many` call prepared at once.
const PREPARING_AT_ONCE: usize = 8;

/// Where the definition comes from: exactly one source.
#[derive(Debug, Clone)]
pub enum DefinitionSource {
    /// An inline envelope (shared: a batch's items may name the same one).
    Inline(Arc<Value>),
    /// A stored workflow's name.
    Stored(String),
}

/// A submission.
#[derive(Debug, Clone)]
pub struct Submission {
    /// The definition.
    pub source: DefinitionSource,
    /// The input (proto3 JSON of the input type).
    pub input: Value,
    /// The job id; minted (uuid v7) when absent.
    pub job_id: Option<Uuid>,
    /// Attempts allowed; the configured default when absent.
    pub max_attempts: Option<i32>,
    /// When to start: at once, at an instant, or after a delay.
    pub start: Start,
    /// Claim order 0..=9, higher first; [`DEFAULT_PRIORITY`] when absent.
    pub priority: Option<i16>,
    /// Its dedupe key (as given: the submitter scopes it to the workflow), mode and
    /// window ([`dedupe_of`]).
    pub dedupe: Option<Dedupe>,
    /// Its metadata, checked by [`metadata_of`] (`None`: none).
    pub metadata: Option<Value>,
}

/// The most metadata entries a submission may give.
pub const MAX_METADATA_ENTRIES: usize = 32;

/// The longest metadata key, in characters.
pub const MAX_METADATA_KEY_CHARS: usize = 64;

/// The longest metadata value, in bytes (UTF-8).
pub const MAX_METADATA_VALUE_BYTES: usize = 512;

/// A submission's `metadata` (a JSON object of strings; absent, null or empty: none),
/// or the error naming the key: at most [`MAX_METADATA_ENTRIES`] entries, keys of 1 to
/// [`MAX_METADATA_KEY_CHARS`] characters `[a-z0-9_.-]`, values of at most
/// [`MAX_METADATA_VALUE_BYTES`] bytes without a NUL (PostgreSQL cannot store one).
pub fn metadata_of(value: Option<&Value>) -> Result<Option<Value>, String> {
    let fields = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(fields)) => fields,
        Some(other) => {
            return Err(format!(
                "metadata: a JSON object of strings ({{\"customer\": \"acme\"}}), not {other}"
            ));
        }
    };
    if fields.len() > MAX_METADATA_ENTRIES {
        return Err(format!(
            "metadata: {} entries; at most {MAX_METADATA_ENTRIES}",
            fields.len()
        ));
    }
    for (key, value) in fields {
        let fine = !key.is_empty()
            && key.chars().count() <= MAX_METADATA_KEY_CHARS
            && key.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-')
            });
        if !fine {
            // Shown cut short: a hostile key of a megabyte must not land in an error
            // that every list of failed jobs repeats.
            let shown: String = key.chars().take(MAX_METADATA_KEY_CHARS).collect();
            let cut = if shown.len() < key.len() { "..." } else { "" };
            return Err(format!(
                "metadata: key '{}{cut}' is not 1 to {MAX_METADATA_KEY_CHARS} of a-z, 0-9, '_', '.', '-'",
                shown.escape_debug()
            ));
        }
        let Some(text) = value.as_str() else {
            return Err(format!("metadata.{key}: a string, not {value}"));
        };
        if text.len() > MAX_METADATA_VALUE_BYTES {
            return Err(format!(
                "metadata.{key}: {} bytes; at most {MAX_METADATA_VALUE_BYTES}",
                text.len()
            ));
        }
        if text.contains('\0') {
            return Err(format!(
                "metadata.{key}: holds a NUL character (\\u0000), which PostgreSQL cannot store; remove it"
            ));
        }
    }
    Ok((!fields.is_empty()).then(|| Value::Object(fields.clone())))
}

/// The longest dedupe key a submission may give, in characters.
pub const MAX_DEDUPE_KEY_CHARS: usize = 200;

/// A submission's `dedupeKey`, `dedupeMode` (default `singleton`) and
/// `dedupeWindowMs` (required by `debounce` and `throttle`, refused by `singleton`),
/// or the error naming the field. A debounced job starts the window after the last
/// submission, so it takes no `runAt` or `delayMs`.
pub fn dedupe_of(
    key: &str,
    mode: &str,
    window_ms: i64,
    start: Start,
) -> Result<Option<Dedupe>, String> {
    if key.is_empty() {
        if !mode.is_empty() || window_ms != 0 {
            return Err(
                "dedupeKey: required with dedupeMode or dedupeWindowMs (the key submissions deduplicate on)"
                    .into(),
            );
        }
        return Ok(None);
    }
    if key.chars().count() > MAX_DEDUPE_KEY_CHARS {
        return Err(format!(
            "dedupeKey: at most {MAX_DEDUPE_KEY_CHARS} characters"
        ));
    }
    if let Some(c) = workflow::compile::hidden_character(key) {
        return Err(format!(
            "dedupeKey: holds U+{:04X}, a control or invisible formatting character: remove it",
            u32::from(c)
        ));
    }
    let mode = match mode {
        "" => DedupeMode::Singleton,
        text => DedupeMode::parse(text).ok_or_else(|| {
            format!("dedupeMode: '{text}' is not singleton, debounce or throttle")
        })?,
    };
    let window = u64::try_from(window_ms)
        .ok()
        .filter(|ms| *ms <= MAX_START_DELAY.as_millis() as u64)
        .map(std::time::Duration::from_millis)
        .ok_or_else(|| {
            format!(
                "dedupeWindowMs: {window_ms} must be from 0 to {} (366 days)",
                MAX_START_DELAY.as_millis()
            )
        })?;
    match mode {
        DedupeMode::Singleton if !window.is_zero() => {
            return Err("dedupeWindowMs: a singleton has no window; leave it out".into());
        }
        DedupeMode::Debounce | DedupeMode::Throttle if window.is_zero() => {
            return Err(format!(
                "dedupeWindowMs: required by dedupeMode {}: the window in milliseconds",
                mode.as_str()
            ));
        }
        DedupeMode::Debounce if start != Start::Now => {
            return Err(
                "dedupeWindowMs: a debounced job starts dedupeWindowMs after the last submission; give no runAt or delayMs"
                    .into(),
            );
        }
        _ => {}
    }
    Ok(Some(Dedupe {
        key: key.to_owned(),
        mode,
        window,
    }))
}

/// When a submitted job becomes claimable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Start {
    /// At once.
    #[default]
    Now,
    /// At this instant (`runAt`); one in the past starts at once.
    At(std::time::SystemTime),
    /// This long after the submission (`delayMs`).
    After(std::time::Duration),
}

/// True when an RFC 3339 text ends with its UTC offset (`Z`, or `+hh:mm` / `-hh:mm`
/// after the time), so a local time written without one is refused, not taken as UTC.
fn has_utc_offset(text: &str) -> bool {
    let Some((_, time)) = text.split_once(['T', 't']) else {
        return false;
    };
    if time.ends_with(['Z', 'z']) {
        return true;
    }
    let bytes = time.as_bytes();
    bytes.len() >= 6 && {
        let offset = &bytes[bytes.len() - 6..];
        matches!(offset[0], b'+' | b'-')
            && offset[1..3].iter().all(u8::is_ascii_digit)
            && offset[3] == b':'
            && offset[4..6].iter().all(u8::is_ascii_digit)
    }
}

/// The latest `runAt` and the longest `delayMs` a submission may ask for: 366 days.
pub const MAX_START_DELAY: std::time::Duration = std::time::Duration::from_secs(366 * 86_400);

impl Start {
    /// The start of a submission's `runAt` (RFC 3339, empty: none) and `delayMs` (0:
    /// none), or the error naming the field; at most one of them, and at most
    /// [`MAX_START_DELAY`] ahead.
    pub fn parse(run_at: &str, delay_ms: i64) -> Result<Start, String> {
        match (run_at, delay_ms) {
            ("", 0) => Ok(Start::Now),
            ("", ms) => u64::try_from(ms)
                .ok()
                .map(std::time::Duration::from_millis)
                .filter(|delay| *delay <= MAX_START_DELAY)
                .map(Start::After)
                .ok_or_else(|| {
                    format!(
                        "delayMs: {ms} must be from 0 to {} (366 days)",
                        MAX_START_DELAY.as_millis()
                    )
                }),
            (_, ms) if ms != 0 => Err("runAt: give runAt or delayMs, not both".to_owned()),
            (text, _) => {
                let example = "for example 2026-12-24T18:00:00Z or 2026-12-24T19:00:00+01:00";
                if !has_utc_offset(text) {
                    return Err(format!(
                        "runAt: '{text}' needs a date, a time and a UTC offset (Z or +hh:mm); {example}"
                    ));
                }
                let at: prost_types::Timestamp = text.parse().map_err(|e| {
                    format!("runAt: '{text}' is not an RFC 3339 timestamp ({e}); {example}")
                })?;
                let at = std::time::SystemTime::try_from(at)
                    .map_err(|_| format!("runAt: '{text}' is out of range"))?;
                let now = std::time::SystemTime::now();
                if at > now + MAX_START_DELAY {
                    return Err(format!("runAt: '{text}' is more than 366 days ahead"));
                }
                // Far in the past is a mistake (and beyond what PostgreSQL stores); a
                // past start is stored as now, so it never jumps the queue.
                if at + MAX_START_DELAY < now {
                    return Err(format!("runAt: '{text}' is more than 366 days ago"));
                }
                Ok(Start::At(at))
            }
        }
    }

    /// When the job becomes claimable. A delay counts from the insert by the
    /// database's clock, not the node's: a node whose clock is off never starts a
    /// delayed job early (`tests/tests/clock_skew.rs` proves it).
    fn run_after(self) -> RunAfter {
        match self {
            Start::Now => RunAfter::Now,
            Start::At(at) => RunAfter::At(at),
            Start::After(delay) => RunAfter::Delay(delay),
        }
    }
}

/// An accepted submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Submitted {
    /// The job's id.
    pub job_id: Uuid,
    /// Its status now.
    pub status: JobStatus,
    /// False when the same submission was made before.
    pub created: bool,
    /// Another job of the submission's dedupe key stands for it (nothing was made).
    pub stands_for: Option<Uuid>,
    /// The submission's dedupe mode, when it gave a key.
    pub dedupe_mode: Option<&'static str>,
}

/// Why a submission was refused (nothing was written).
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The named workflow is not stored.
    #[error("no stored workflow named '{0}' (list-workflows shows them)")]
    UnknownWorkflow(String),
    /// The workflow does not compile.
    #[error(transparent)]
    Findings(#[from] Findings),
    /// The input does not fit the workflow's input type.
    #[error("{}", .0.located("input"))]
    Input(#[from] MessageError),
    /// A concurrency key could not be computed from the input (the entry, its
    /// expression, and why).
    #[error("{0}: the job's concurrency key cannot be computed from this input")]
    ConcurrencyKey(String),
    /// A value PostgreSQL cannot store (a NUL character) at this path.
    #[error("{0}: holds a NUL character (\\u0000), which PostgreSQL cannot store; remove it")]
    Unstorable(String),
    /// The store refused or failed (a conflicting resubmission, or a database error).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An envelope's compiled workflow, or why it has none.
type Compiling = Result<Compiled, Uncompiled>;

/// Why an envelope was not compiled: kept per envelope by `submit_many`, so a batch
/// sharing a broken one answers every item without compiling it again.
#[derive(Debug, Clone)]
enum Uncompiled {
    Findings(Findings),
    Unstorable(String),
}

impl From<Uncompiled> for SubmitError {
    fn from(refused: Uncompiled) -> Self {
        match refused {
            Uncompiled::Findings(findings) => SubmitError::Findings(findings),
            Uncompiled::Unstorable(path) => SubmitError::Unstorable(path),
        }
    }
}

/// The most single submissions one transaction carries.
pub const MAX_SUBMISSIONS_PER_COMMIT: usize = 256;

/// Turns submissions into job rows.
#[derive(Clone)]
pub struct Submitter {
    store: Store,
    workflows: Arc<dyn WorkflowRepository>,
    max_attempts_default: i32,
    compiled: Arc<CompiledCache>,
    /// Group commit of single submissions, once [`Submitter::with_group_commit`] set
    /// it up; each submission in its own transaction before.
    inserts: Option<BatchQueue<NewJob, Inserted>>,
    /// What a new job's steps may call; a workflow breaking it is refused.
    outbound: Arc<OutboundPolicy>,
    /// How deep child workflows may nest (`[jobs].max_child_depth`).
    max_child_depth: usize,
}

impl Submitter {
    /// A submitter writing to `store`, resolving names through `workflows`.
    pub fn new(
        store: Store,
        workflows: Arc<dyn WorkflowRepository>,
        max_attempts_default: i32,
    ) -> Self {
        Submitter {
            store,
            workflows,
            max_attempts_default,
            compiled: Arc::default(),
            inserts: None,
            outbound: Arc::new(OutboundPolicy::unrestricted()),
            max_child_depth: workflow::compile::MAX_CHILD_DEPTH,
        }
    }

    /// Refuses a workflow whose steps break `policy` (the node's `[workflow.outbound]`,
    /// shared with its engine), with a finding per step and rule.
    pub fn with_outbound(mut self, policy: Arc<OutboundPolicy>) -> Self {
        self.outbound = policy;
        self
    }

    /// The same submitter with its single submissions group-committed: concurrent
    /// submissions share one transaction (each still answered on its own, a refused
    /// one failing alone). Returns the loop that commits them, to run as the node's
    /// task; it commits what is queued when `shutdown` is cancelled and stops (later
    /// submissions, requests the server is still draining, commit each on its own).
    pub fn with_group_commit(
        mut self,
        shutdown: CancellationToken,
    ) -> (Submitter, impl Future<Output = ()> + Send + 'static) {
        let (queue, queued) = BatchQueue::new("submission queue", MAX_SUBMISSIONS_PER_COMMIT * 4);
        self.inserts = Some(queue);
        let store = self.store.clone();
        let committing = batch_loop(queued, MAX_SUBMISSIONS_PER_COMMIT, shutdown, move |jobs| {
            let store = store.clone();
            async move { store.insert_jobs(&jobs).await }
        });
        (self, committing)
    }

    /// The compiled workflows this submitter keeps; the node's worker shares them.
    pub fn compiled(&self) -> Arc<CompiledCache> {
        self.compiled.clone()
    }

    /// Resolves, compiles, verifies and validates, then inserts the job.
    pub async fn submit(&self, submission: Submission) -> Result<Submitted, SubmitError> {
        let (job, _) = self.prepare(submission).await?;
        let job_id = job.job_id;
        let dedupe_mode = job.dedupe.as_ref().map(|d| d.mode.as_str());
        let inserted = match &self.inserts {
            Some(queue) => match queue.commit_or_return(job).await {
                Ok(answer) => answer?,
                // The node is shutting down and its commit loop has stopped: a request
                // still in flight (the server drains them within the shutdown's grace)
                // is committed on its own.
                Err(job) => self.store.insert_job(&job).await?,
            },
            None => self.store.insert_job(&job).await?,
        };
        Ok(Submitted {
            job_id,
            status: inserted.status,
            created: inserted.created,
            stands_for: inserted.stands_for,
            dedupe_mode,
        })
    }

    /// Many submissions in one transaction: each is resolved, compiled (from the
    /// cache, for a workflow seen before) and validated on its own, then every good
    /// one is inserted together. Each answer is what [`Submitter::submit`] would have
    /// answered for it alone; one refused submission never sinks the others.
    ///
    /// Memory stays proportional to the call, not to its items: a definition the
    /// items share (the call's own, one stored name) is resolved, checked and compiled
    /// once and shared by reference, never copied per item.
    pub async fn submit_many(
        &self,
        submissions: Vec<Submission>,
    ) -> Vec<Result<Submitted, SubmitError>> {
        let mut stored: Vec<(String, Arc<Value>)> = Vec::new();
        let mut compiled: Vec<(Arc<Value>, Compiling)> = Vec::new();
        let mut resolved = Vec::with_capacity(submissions.len());
        for submission in submissions {
            let source = match &submission.source {
                DefinitionSource::Stored(name) => {
                    match stored.iter().find(|(known, _)| known == name) {
                        Some((_, envelope)) => Ok((envelope.clone(), true)),
                        None => self
                            .resolve(submission.source.clone())
                            .inspect(|(envelope, _)| {
                                stored.push((name.clone(), envelope.clone()));
                            }),
                    }
                }
                DefinitionSource::Inline(_) => self.resolve(submission.source.clone()),
            };
            let compiled_for = match source {
                Ok((envelope, by_name)) => {
                    let known = compiled
                        .iter()
                        .find(|(seen, _)| Arc::ptr_eq(seen, &envelope))
                        .map(|(_, done)| done.clone());
                    let done = match known {
                        Some(done) => done,
                        None => {
                            let done = self.compile(&envelope).await;
                            compiled.push((envelope.clone(), done.clone()));
                            done
                        }
                    };
                    done.map(|workflow| (envelope, by_name, workflow))
                        .map_err(SubmitError::from)
                }
                Err(e) => Err(e),
            };
            resolved.push((submission, compiled_for));
        }
        // Checking each input runs its rules off the async threads: a few at a time.
        let prepared: Vec<Result<NewJob, SubmitError>> = futures_util::stream::iter(resolved)
            .map(|(submission, compiled_for)| async move {
                let (envelope, by_name, workflow) = compiled_for?;
                self.job_for(submission, envelope, by_name, &workflow).await
            })
            .buffered(PREPARING_AT_ONCE)
            .collect()
            .await;
        let jobs: Vec<NewJob> = prepared
            .iter()
            .filter_map(|job| job.as_ref().ok().cloned())
            .collect();
        let mut inserted = self.store.insert_jobs(&jobs).await.into_iter();
        prepared
            .into_iter()
            .map(|job| {
                let job = job?;
                let inserted = inserted.next().unwrap_or_else(|| {
                    Err(StoreError::GroupCommit("the insert got no answer".into()))
                })?;
                Ok(Submitted {
                    job_id: job.job_id,
                    status: inserted.status,
                    created: inserted.created,
                    stands_for: inserted.stands_for,
                    dedupe_mode: job.dedupe.as_ref().map(|d| d.mode.as_str()),
                })
            })
            .collect()
    }

    /// Everything up to the insert: the row to write and the compiled workflow.
    /// Compiling (on a cache miss) and checking the input's rules run off the async
    /// threads, bounded.
    pub async fn prepare(
        &self,
        submission: Submission,
    ) -> Result<(NewJob, Arc<CompiledWorkflow>), SubmitError> {
        let (envelope, by_name) = self.resolve(submission.source.clone())?;
        let compiled = self.compile(&envelope).await.map_err(SubmitError::from)?;
        let job = self
            .job_for(submission, envelope, by_name, &compiled)
            .await?;
        Ok((job, compiled.workflow))
    }

    /// The envelope of a definition source, and whether it was named (a stored one).
    fn resolve(&self, source: DefinitionSource) -> Result<(Arc<Value>, bool), SubmitError> {
        let (envelope, by_name) = match source {
            DefinitionSource::Inline(envelope) => (envelope, false),
            DefinitionSource::Stored(name) => {
                let stored = self
                    .workflows
                    .resolve(&name)
                    .ok_or(SubmitError::UnknownWorkflow(name))?;
                (Arc::new(stored.envelope), true)
            }
        };
        if !workflow::resolve::has_child_steps(&envelope) {
            return Ok((envelope, by_name));
        }
        // The job snapshots its children as they are stored now.
        let names: Vec<String> = self.workflows.list().into_iter().map(|w| w.name).collect();
        let lookup = |name: &str| self.workflows.resolve(name).map(|w| w.envelope);
        let resolved =
            workflow::resolve::resolve_children(&envelope, &lookup, &names, self.max_child_depth)?;
        Ok((Arc::new(resolved), by_name))
    }

    /// The workflow stored under `name` as a submission would snapshot it now:
    /// resolved (its children's workflows included), compiled and held to a new job's
    /// checks. What a retry onto the current workflow moves a job to.
    pub async fn current_workflow(
        &self,
        name: &str,
    ) -> Result<(Arc<Value>, Compiled), SubmitError> {
        let (envelope, _) = self.resolve(DefinitionSource::Stored(name.to_owned()))?;
        let compiled = self.compile(&envelope).await?;
        Ok((envelope, compiled))
    }

    /// Bounds how deep child workflows may nest (`[jobs].max_child_depth`).
    pub fn with_max_child_depth(mut self, depth: usize) -> Self {
        self.max_child_depth = depth;
        self
    }

    /// The compiled workflow of a storable envelope.
    async fn compile(&self, envelope: &Value) -> Compiling {
        if let Some(path) = nul_path(envelope, "workflow") {
            return Err(Uncompiled::Unstorable(path));
        }
        let compiled = self
            .compiled
            .get_or_compile_off_thread(envelope)
            .await
            .map_err(Uncompiled::Findings)?;
        // A new job is held to the checks a job's snapshot is not (it compiles again
        // in every worker that claims it, whatever checks were added since).
        let mut strict = compiled.workflow.strict_findings();
        strict.extend(self.outbound.findings(&compiled.workflow));
        if strict.is_empty() {
            Ok(compiled)
        } else {
            Err(Uncompiled::Findings(Findings(strict)))
        }
    }

    /// The row a submission of `envelope` writes, once its input is checked.
    async fn job_for(
        &self,
        submission: Submission,
        envelope: Arc<Value>,
        by_name: bool,
        compiled: &Compiled,
    ) -> Result<NewJob, SubmitError> {
        // The input type's rules are the workflow author's CEL: checked off the async
        // threads, within a time limit.
        let input = compiled
            .workflow
            .parse_input_within(&submission.input, RULES_TIME_LIMIT)
            .await?;
        if let Some(path) = nul_path(&submission.input, "input") {
            return Err(SubmitError::Unstorable(path));
        }
        let concurrency = compiled
            .workflow
            .concurrency_keys_within(&input, RULES_TIME_LIMIT)
            .await
            .map_err(SubmitError::ConcurrencyKey)?;
        // The canonical proto3 JSON of the parsed input: what the worker will parse.
        let canonical = encode_json(&input).map_err(|e| MessageError::Unparsable {
            type_name: e.type_name.clone(),
            path: String::new(),
            reason: e.reason,
        })?;
        let name = &compiled.workflow.name;
        let dedupe = submission.dedupe.map(|dedupe| Dedupe {
            key: format!("{name}:{}", dedupe.key),
            ..dedupe
        });
        // A debounced job starts the window after its (last) submission.
        let run_after = match &dedupe {
            Some(Dedupe {
                mode: DedupeMode::Debounce,
                window,
                ..
            }) => Start::After(*window).run_after(),
            _ => submission.start.run_after(),
        };
        Ok(NewJob {
            job_id: submission.job_id.unwrap_or_else(Uuid::now_v7),
            workflow_name: compiled.workflow.name.clone(),
            definition: envelope,
            definition_digest: Some(compiled.digest.clone()),
            input: canonical,
            priority: submission.priority.unwrap_or(DEFAULT_PRIORITY),
            run_after,
            // The submitting request's trace (its verb span, or a request record's).
            trace_context: registry_stub::telemetry::current_traceparent(),
            by_name,
            max_attempts: submission
                .max_attempts
                .filter(|n| *n > 0)
                .unwrap_or(self.max_attempts_default),
            concurrency,
            dedupe,
            schedule: None,
            metadata: submission.metadata,
        })
    }

    /// The envelope stored under `name`, if any.
    pub fn stored_envelope(&self, name: &str) -> Option<Value> {
        self.workflows.resolve(name).map(|stored| stored.envelope)
    }

    /// What to say of a stored workflow name nothing answers to: "no stored workflow
    /// named 'x'", with the closest stored name when one is a likely typo ("; did you
    /// mean 'y'?").
    pub fn unknown_workflow(&self, name: &str) -> String {
        // A name no stored one can be near is answered without reading the names
        // (the suggester gives up past 128 characters too).
        let stored = if name.chars().count() <= 128 {
            self.workflows.names()
        } else {
            Vec::new()
        };
        let closest = workflow::suggest::did_you_mean(name, stored.iter().map(String::as_str));
        match closest {
            Some(meant) => format!("no stored workflow named '{name}'; did you mean '{meant}'?"),
            None => format!("no stored workflow named '{name}'"),
        }
    }

    /// The store behind this submitter.
    pub fn store(&self) -> &Store {
        &self.store
    }
}
