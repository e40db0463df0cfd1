//! The request consumer: the second door in, for clients that never speak HTTP.
//!
//! Producing a `WorkflowRunRequest` (`job_id`, `workflow_name`, `input`) to the requests
//! topic is exactly submit-workflow with a stored name. A consumer in group
//! `protomolt-jobs-worker` reads it with auto-commit off and commits each offset only
//! after the row commits, so a crash replays the insert, which is idempotent on
//! `job_id`. What each record becomes:
//!
//! | the record                                                  | becomes                                  |
//! |-------------------------------------------------------------|------------------------------------------|
//! | a valid request naming a stored workflow, with a valid input | a QUEUED job (or the existing one)       |
//! | an unknown workflow name, an invalid input, a broken rule    | a FAILED row with its FAILED event       |
//! | not a `WorkflowRunRequest`, or no usable `job_id`            | a row in `workflow_run_request_rejects`  |
//! | a `job_id` already used for a different submission           | a row in `workflow_run_request_rejects`  |
//! | values PostgreSQL refuses (a NUL in the input, say)          | a row in `workflow_run_request_rejects`  |
//!
//! Every record is committed past once it is recorded somewhere; the consumer never
//! dies on one bad record. A database outage pauses consumption (nothing is
//! committed) and it resumes when the database is back. A data error (PostgreSQL
//! refusing a value) is never mistaken for an outage: the record is dead-lettered,
//! so one hostile record cannot stall its partition.
//!
//! Every few seconds the consumer looks at its group on every partition of the topic
//! (in the background, while it keeps taking records): a partition whose committed
//! offset stays put while records wait past it, for [`STALL_AFTER`] when this member
//! holds it or nobody does (longer when another member does), makes the consumer
//! rejoin its group, and, if that does not free it, replace its client with a new one,
//! each further remedy after a longer wait; logged at warn and counted in
//! `protomolt_jobs_request_consumer_recoveries_total` ([`stall`] says why).

use std::collections::HashMap;
use std::time::Duration;

use jobs_proto::WireMessage;
use jobs_proto::wire::{RequestRecord, read_request_record};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

mod disposition;
mod signals;
pub mod stall;

pub use stall::STALL_AFTER;
use stall::{Reading, Remedy, StallWatch};

use crate::config::JobsConfig;
use crate::relay::{LaneError, client_config};
use crate::store::{NewJob, Store, StoreError};
use crate::submit::{
    DefinitionSource, Start, Submission, SubmitError, Submitter, dedupe_of, metadata_of,
};
pub use disposition::Disposition;
use disposition::{dead_letter, log_disposition};
pub use signals::SignalHandler;

/// The name stored on a FAILED row whose request carried no usable workflow name.
pub const UNNAMED_WORKFLOW: &str = "(no valid workflow_name)";

/// Reads the requests topic and hands each record to a [`RequestHandler`].
pub struct RequestConsumer {
    /// The requests topic (subscribed again on a rejoin).
    topic: String,
    /// The consumer group (described when the consumer looks for stalls).
    group: String,
    consumer: std::sync::Arc<StreamConsumer>,
    /// What a new consumer is built from, when this one stalls for good.
    settings: ClientConfig,
    /// The client the stall watch asks the broker through (the same group, never
    /// subscribed), so a consumer whose own connections are wedged is not asked about
    /// itself.
    observer: std::sync::Arc<BaseConsumer>,
    /// Looks in a row the broker did not answer (the watching client is replaced after
    /// [`OBSERVER_PATIENCE`]).
    unanswered_looks: u32,
    handler: Handler,
    metrics: crate::metrics::JobsMetrics,
}

/// What a consumer does with its records: requests become jobs, events from the
/// signals topic answer the jobs waiting on their key.
enum Handler {
    /// Both boxed: one consumer holds one handler for its life.
    Requests(Box<RequestHandler>),
    Signals(Box<SignalHandler>),
}

impl Handler {
    async fn process(&self, record: &OwnedMessage) -> Result<Disposition, StoreError> {
        match self {
            Handler::Requests(requests) => requests.process(record).await,
            Handler::Signals(signals) => signals.process(record).await,
        }
    }
}

/// Turns records into jobs, FAILED rows or rejects.
#[derive(Clone)]
pub struct RequestHandler {
    submitter: Submitter,
    store: Store,
}

impl RequestHandler {
    /// A handler submitting through `submitter`.
    pub fn new(submitter: Submitter) -> Self {
        let store = submitter.store().clone();
        RequestHandler { submitter, store }
    }
}

impl RequestConsumer {
    /// A consumer in `config.consumer_group`, subscribed to `config.requests_topic`.
    pub fn new(
        config: &JobsConfig,
        bootstrap: &str,
        submitter: Submitter,
    ) -> Result<RequestConsumer, LaneError> {
        let handler = Handler::Requests(Box::new(RequestHandler::new(submitter)));
        let (topic, group) = (&config.requests_topic, &config.consumer_group);
        Self::reading(config, bootstrap, topic, group, handler)
    }

    /// A consumer of the signals topic `topic`, in group `<consumer_group>-signals`:
    /// each record's event answers the jobs waiting on its key (see [`signals`]).
    pub fn signals(
        config: &JobsConfig,
        bootstrap: &str,
        topic: &str,
        handler: SignalHandler,
    ) -> Result<RequestConsumer, LaneError> {
        let group = format!("{}-signals", config.consumer_group);
        Self::reading(
            config,
            bootstrap,
            topic,
            &group,
            Handler::Signals(Box::new(handler)),
        )
    }

    fn reading(
        config: &JobsConfig,
        bootstrap: &str,
        topic: &str,
        group: &str,
        handler: Handler,
    ) -> Result<RequestConsumer, LaneError> {
        let defaults = [
            ("auto.offset.reset", "earliest"),
            ("session.timeout.ms", "10000"),
        ];
        let mut settings = client_config(config, bootstrap, &defaults);
        settings
            .set("group.id", group)
            .set("enable.auto.commit", "false");
        let consumer = Self::subscribed(&settings, topic)?;
        let observer: BaseConsumer = settings.create()?;
        Ok(RequestConsumer {
            observer: std::sync::Arc::new(observer),
            unanswered_looks: 0,
            topic: topic.to_owned(),
            group: group.to_owned(),
            consumer: std::sync::Arc::new(consumer),
            settings,
            handler,
            metrics: crate::metrics::JobsMetrics::default(),
        })
    }

    /// librdkafka's `max.poll.interval.ms` as configured (its default otherwise).
    fn max_poll_interval(&self) -> Duration {
        self.settings
            .get("max.poll.interval.ms")
            .and_then(|ms| ms.parse().ok())
            .map(Duration::from_millis)
            .unwrap_or(stall::DEFAULT_MAX_POLL_INTERVAL)
    }

    /// A consumer built from `settings`, subscribed to `topic`.
    fn subscribed(settings: &ClientConfig, topic: &str) -> Result<StreamConsumer, LaneError> {
        let consumer: StreamConsumer = settings.create()?;
        consumer.subscribe(&[topic])?;
        Ok(consumer)
    }

    /// Sets the lag gauge of every partition this consumer has taken records from:
    /// its end (a metadata round trip each, off the async threads, in the background)
    /// less the next offset to take (`consumed`). Read after records now and then,
    /// and every [`LAG_READ_EVERY`] while idle or stuck, so the gauge never freezes.
    fn read_lag(&self, consumed: &HashMap<(String, i32), i64>) {
        if consumed.is_empty() {
            return;
        }
        let (consumer, metrics) = (self.consumer.clone(), self.metrics.clone());
        let consumed = consumed.clone();
        tokio::task::spawn_blocking(move || {
            for ((topic, partition), next) in consumed {
                if let Ok((_, high)) =
                    consumer.fetch_watermarks(&topic, partition, Duration::from_secs(2))
                {
                    metrics
                        .request_lag
                        .get_or_create(&vec![("partition", partition.to_string())])
                        .set(high.saturating_sub(next).max(0));
                }
            }
        });
    }

    /// Counts the records it handles in `metrics`.
    pub fn with_metrics(mut self, metrics: crate::metrics::JobsMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Starts a look at the group on every partition (blocking round trips, off the
    /// async threads).
    fn start_look(&self) -> tokio::task::JoinHandle<Reading> {
        let (observer, consumer, group, topic) = (
            self.observer.clone(),
            self.consumer.clone(),
            self.group.clone(),
            self.topic.clone(),
        );
        let starts_at_end = matches!(
            self.settings.get("auto.offset.reset"),
            Some("latest" | "largest" | "end")
        );
        tokio::task::spawn_blocking(move || {
            stall::read_positions(&observer, &consumer, &group, &topic, starts_at_end)
        })
    }

    /// Takes in a finished look: commits where this member has taken its idle
    /// partitions to, replaces a watching client that has not been answered for a
    /// while, and applies what the [`StallWatch`] says.
    async fn after_look(
        &mut self,
        reading: Reading,
        watch: &mut StallWatch,
        consumed: &HashMap<(String, i32), i64>,
        shutdown: &CancellationToken,
    ) {
        if let Reading::Positions { positions, .. } = &reading {
            self.unanswered_looks = 0;
            // Every record handed to this loop has been handled by now (a look is
            // taken in only between records), so everything below a position is done;
            // what lies between the last record's commit and the position is markers.
            let mut position = TopicPartitionList::new();
            for p in positions {
                let Some(to) = p.commit_to else { continue };
                let handled = consumed.get(&(self.topic.clone(), p.partition));
                if handled.is_some_and(|next| *next > to) {
                    continue;
                }
                // Refused only for an offset that is none, which `to` is not.
                let _ = position.add_partition_offset(&self.topic, p.partition, Offset::Offset(to));
            }
            if position.count() > 0
                && let Err(e) = self.consumer.commit(&position, CommitMode::Async)
            {
                tracing::warn!(error = %e, "committing the position of an idle partition failed; it is tried again at the next look");
            }
        }
        if let Reading::BrokerUnreachable(why) = &reading {
            self.unanswered_looks += 1;
            if self.unanswered_looks >= OBSERVER_PATIENCE {
                self.unanswered_looks = 0;
                match self.settings.create::<BaseConsumer>() {
                    Ok(fresh) => {
                        tracing::warn!(error = %why, "the request consumer's watching client has not been answered for a while; replacing it");
                        let old = std::mem::replace(&mut self.observer, std::sync::Arc::new(fresh));
                        tokio::task::spawn_blocking(move || drop(old));
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "building a new watching client failed; keeping the old one");
                    }
                }
            }
        }
        let remedy = watch.observe(reading, std::time::Instant::now());
        self.apply(remedy, shutdown).await;
    }

    fn count_recovery(&self, action: &str) {
        self.metrics
            .request_consumer_recoveries
            .get_or_create(&vec![("action", action.to_owned())])
            .inc();
    }

    /// Applies what the [`StallWatch`] said: a rejoin, or a new client in place of
    /// this one.
    async fn apply(&mut self, remedy: Remedy, shutdown: &CancellationToken) {
        match remedy {
            Remedy::Wait => {}
            Remedy::Rejoin { reason } => {
                tracing::warn!(topic = %self.topic, %reason, "the request consumer is stalled; rejoining its group");
                self.count_recovery("rejoin");
                self.consumer.unsubscribe();
                if let Err(e) = self.consumer.subscribe(&[&self.topic]) {
                    tracing::error!(error = %e, topic = %self.topic, "subscribing again failed; retrying at the next remedy");
                }
            }
            Remedy::Rebuild { reason } => {
                tracing::warn!(topic = %self.topic, %reason, "the request consumer is stalled; replacing it with a new client");
                self.count_recovery("rebuild");
                let fresh: StreamConsumer = match self.settings.create() {
                    Ok(fresh) => fresh,
                    Err(e) => {
                        tracing::error!(error = %e, topic = %self.topic, "building a new request consumer failed; keeping the old one until the next remedy");
                        return;
                    }
                };
                let old = std::mem::replace(&mut self.consumer, std::sync::Arc::new(fresh));
                // The old client leaves the group (closing is a blocking round trip)
                // before the new one joins: one rebalance, not two, and a configured
                // `group.instance.id` is not fenced by its own successor. It closes
                // when its last handle goes (a lag reading may hold one for a moment).
                // A close the broker does not answer is not waited out.
                let closed = async move {
                    let mut old = old;
                    loop {
                        match std::sync::Arc::try_unwrap(old) {
                            Ok(alone) => {
                                let _ = tokio::task::spawn_blocking(move || drop(alone)).await;
                                return;
                            }
                            Err(shared) => old = shared,
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                };
                tokio::select! {
                    _ = tokio::time::timeout(CLOSE_FOR, closed) => {}
                    () = shutdown.cancelled() => return,
                }
                if let Err(e) = self.consumer.subscribe(&[&self.topic]) {
                    tracing::error!(error = %e, topic = %self.topic, "subscribing the new client failed; retrying at the next remedy");
                }
            }
        }
    }

    /// Consumes until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut last_lag_read = std::time::Instant::now() - LAG_READ_EVERY;
        // The next offset to take, per partition taken from.
        let mut consumed: HashMap<(String, i32), i64> = HashMap::new();
        let mut watch = StallWatch::new(self.max_poll_interval());
        // A clock of its own, which neither records nor errors reset: a consumer busy
        // with some partitions, or failing every second, still looks for stuck ones.
        let mut looks = tokio::time::interval(LOOK_EVERY);
        looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The look under way: records keep being taken while it waits on the broker.
        let mut look: Option<tokio::task::JoinHandle<Reading>> = None;
        loop {
            let received = tokio::select! {
                received = self.consumer.recv() => received.map(|m| m.detach()),
                _ = looks.tick(), if look.is_none() => {
                    // The lag may have grown (or the last burst been taken).
                    last_lag_read = std::time::Instant::now();
                    self.read_lag(&consumed);
                    look = Some(self.start_look());
                    continue;
                }
                reading = async {
                    match look.as_mut() {
                        Some(under_way) => under_way.await,
                        None => std::future::pending().await,
                    }
                } => {
                    look = None;
                    // A look that panicked or was cancelled is no reading.
                    if let Ok(reading) = reading {
                        self.after_look(reading, &mut watch, &consumed, &shutdown).await;
                    }
                    continue;
                }
                () = shutdown.cancelled() => return,
            };
            let record = match received {
                Ok(record) => record,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the requests topic failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        () = shutdown.cancelled() => return,
                    }
                }
            };
            // Keep the record until it is recorded somewhere; a database outage pauses
            // here, without committing, and resumes when the database answers.
            let mut pause = Duration::from_millis(200);
            let mut paused = false;
            loop {
                // One span per record, the producer's trace context its parent, so
                // the job it submits joins that trace.
                let span = tracing::info_span!(
                    "request record",
                    otel.kind = "consumer",
                    partition = record.partition(),
                    offset = record.offset()
                );
                if let Some(traceparent) = record.headers().and_then(|headers| {
                    headers
                        .iter()
                        .find(|h| h.key == registry_stub::telemetry::TRACEPARENT)
                        .and_then(|h| h.value)
                        .and_then(|v| std::str::from_utf8(v).ok())
                }) {
                    registry_stub::telemetry::set_parent(&span, traceparent);
                }
                match self.handler.process(&record).instrument(span).await {
                    Ok(disposition) => {
                        log_disposition(&record, &disposition);
                        let outcome = disposition.outcome();
                        crate::metrics::JobsMetrics::count(
                            &self.metrics.request_records,
                            outcome,
                            1,
                        );
                        break;
                    }
                    // Even the dead-letter row was refused: retrying cannot help, and
                    // waiting would stall the partition. Say so loudly and move on.
                    Err(e) if e.is_data_error() => {
                        tracing::error!(error = %e, partition = record.partition(), offset = record.offset(), "the record could not be stored even as a reject; committing past it");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, offset = record.offset(), retry_in_ms = pause.as_millis() as u64, "the database is unavailable; request consumption pauses");
                        tokio::select! {
                            () = tokio::time::sleep(pause) => {}
                            () = shutdown.cancelled() => return,
                        }
                        // Stuck on the database: the lag grows, and says so.
                        if last_lag_read.elapsed() >= LAG_READ_EVERY {
                            last_lag_read = std::time::Instant::now();
                            self.read_lag(&consumed);
                        }
                        pause = (pause * 2).min(Duration::from_secs(10));
                        paused = true;
                    }
                }
            }
            // A pause on the database committed nothing, on purpose: not a stall.
            if paused {
                watch.restart_clocks(std::time::Instant::now());
            }
            consumed.insert(
                (record.topic().to_owned(), record.partition()),
                record.offset() + 1,
            );
            if last_lag_read.elapsed() >= LAG_READ_EVERY {
                last_lag_read = std::time::Instant::now();
                self.read_lag(&consumed);
            }
            let mut position = TopicPartitionList::new();
            let next = Offset::Offset(record.offset() + 1);
            if let Err(e) = position
                .add_partition_offset(record.topic(), record.partition(), next)
                .and_then(|()| self.consumer.commit(&position, CommitMode::Async))
            {
                // The row is committed; a lost offset commit only means a harmless
                // redelivery (the insert is idempotent on job_id).
                tracing::warn!(error = %e, offset = record.offset(), "committing the offset failed; the record may be redelivered");
            }
        }
    }
}

/// How often the consumer reads how far behind the requests topic it is.
const LAG_READ_EVERY: Duration = Duration::from_secs(5);

/// How often the consumer looks at its group for [stuck partitions](stall).
const LOOK_EVERY: Duration = Duration::from_secs(5);

/// How long a stalled client is given to leave its group before its successor joins.
const CLOSE_FOR: Duration = Duration::from_secs(15);

/// Looks in a row unanswered before the watching client is replaced (a minute).
const OBSERVER_PATIENCE: u32 = 12;

impl RequestHandler {
    /// Turns one record into a job, a FAILED row or a reject. `Err` only when the
    /// database could not record any of them (the caller retries, uncommitted).
    pub async fn process(&self, record: &OwnedMessage) -> Result<Disposition, StoreError> {
        match self.record_as_job(record).await {
            Err(StoreError::Pruned(job_id)) => Ok(Disposition::AlreadyPruned { job_id }),
            Err(StoreError::Conflict(id)) => {
                let error = format!(
                    "job {id} already exists with a different workflow or input (request at {}/{}/{})",
                    record.topic(),
                    record.partition(),
                    record.offset()
                );
                self.reject(record, error).await
            }
            Err(refused) if refused.is_data_error() => {
                let error = format!(
                    "the request holds a value PostgreSQL cannot store: {refused} (request at {}/{}/{})",
                    record.topic(),
                    record.partition(),
                    record.offset()
                );
                self.reject(record, error).await
            }
            recorded => recorded,
        }
    }

    async fn reject(
        &self,
        record: &OwnedMessage,
        error: String,
    ) -> Result<Disposition, StoreError> {
        dead_letter(&self.store, record, error).await
    }

    /// A job or a FAILED row; conflicts and data errors are the caller's to dead-letter.
    async fn record_as_job(&self, record: &OwnedMessage) -> Result<Disposition, StoreError> {
        let RequestRecord {
            job_id,
            request,
            input,
        } = match read_request_record(record.payload()) {
            Ok(read) => read,
            Err(refusal) => return self.reject(record, refusal.to_string()).await,
        };
        let where_from = format!(
            "request at {}/{}/{}",
            record.topic(),
            record.partition(),
            record.offset()
        );

        if let Err(e) = request.validate() {
            let error = format!("VALIDATION: the {where_from} breaks its rules: {e}");
            return self
                .failed_row(job_id, &request.workflow_name, Value::Null, input, error)
                .await;
        }
        let dedupe = match dedupe_of(
            &request.dedupe_key,
            &request.dedupe_mode,
            request.dedupe_window_ms,
            Start::Now,
        ) {
            Ok(dedupe) => dedupe,
            Err(why) => {
                let error = format!("VALIDATION: {why} ({where_from})");
                return self
                    .failed_row(job_id, &request.workflow_name, Value::Null, input, error)
                    .await;
            }
        };
        let given: serde_json::Map<String, Value> = request
            .metadata
            .iter()
            .map(|(key, value)| (key.clone(), Value::String(value.clone())))
            .collect();
        let metadata = match metadata_of(Some(&Value::Object(given))) {
            Ok(metadata) => metadata,
            Err(why) => {
                let error = format!("VALIDATION: {why} ({where_from})");
                return self
                    .failed_row(job_id, &request.workflow_name, Value::Null, input, error)
                    .await;
            }
        };
        // A job that fails from here on keeps the request's metadata (an operator
        // filtering by it finds the failures too).
        let kept = metadata.clone();
        let submission = Submission {
            source: DefinitionSource::Stored(request.workflow_name.clone()),
            input: input.clone(),
            job_id: Some(job_id),
            max_attempts: None,
            start: Start::Now,
            priority: None,
            dedupe,
            metadata,
        };
        match self.submitter.submit(submission).await {
            Ok(submitted) => Ok(Disposition::Submitted {
                // Another job of its dedupe key may stand for the request.
                job_id: submitted.stands_for.unwrap_or(job_id),
                created: submitted.created,
            }),
            Err(SubmitError::UnknownWorkflow(name)) => {
                let error = format!(
                    "WORKFLOW: {} ({where_from})",
                    self.submitter.unknown_workflow(&name)
                );
                self.failed_row_with(job_id, &name, Value::Null, input, error, kept)
                    .await
            }
            Err(SubmitError::Findings(findings)) => {
                let error = format!(
                    "WORKFLOW: the stored workflow '{}' does not compile ({where_from}): {findings}",
                    request.workflow_name
                );
                self.failed_row_with(
                    job_id,
                    &request.workflow_name,
                    Value::Null,
                    input,
                    error,
                    kept,
                )
                .await
            }
            // An input the workflow refuses, or keys it cannot make of it: FAILED
            // with the stored definition the request named.
            Err(refused @ (SubmitError::Input(_) | SubmitError::ConcurrencyKey(_))) => {
                let definition = self
                    .submitter
                    .stored_envelope(&request.workflow_name)
                    .unwrap_or(Value::Null);
                let why = match &refused {
                    SubmitError::Input(e) => e.located("input"),
                    other => other.to_string(),
                };
                let error = format!("VALIDATION: {why} ({where_from})");
                self.failed_row_with(
                    job_id,
                    &request.workflow_name,
                    definition,
                    input,
                    error,
                    kept,
                )
                .await
            }
            Err(SubmitError::Unstorable(path)) => {
                let error = format!(
                    "{path}: holds a NUL character (\\u0000), which PostgreSQL cannot store ({where_from})"
                );
                self.reject(record, error).await
            }
            Err(SubmitError::Store(e)) => Err(e),
        }
    }

    async fn failed_row(
        &self,
        job_id: Uuid,
        workflow_name: &str,
        definition: Value,
        input: Value,
        error: String,
    ) -> Result<Disposition, StoreError> {
        self.failed_row_with(job_id, workflow_name, definition, input, error, None)
            .await
    }

    /// [`Self::failed_row`] keeping the request's (checked) metadata.
    async fn failed_row_with(
        &self,
        job_id: Uuid,
        workflow_name: &str,
        definition: Value,
        input: Value,
        error: String,
        metadata: Option<Value>,
    ) -> Result<Disposition, StoreError> {
        let name_fits = (1..=200).contains(&workflow_name.chars().count());
        let job = NewJob {
            job_id,
            workflow_name: if name_fits {
                workflow_name.to_owned()
            } else {
                UNNAMED_WORKFLOW.to_owned()
            },
            definition: std::sync::Arc::new(definition),
            definition_digest: None,
            priority: crate::store::DEFAULT_PRIORITY,
            run_after: Default::default(),
            input,
            max_attempts: 1,
            trace_context: registry_stub::telemetry::current_traceparent(),
            by_name: true,
            concurrency: Vec::new(),
            dedupe: None,
            schedule: None,
            metadata,
        };
        self.store.insert_failed_job(&job, &error).await?;
        Ok(Disposition::FailedRow { job_id, error })
    }
}
