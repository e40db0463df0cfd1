//! The outbox relay: the events lane.
//!
//! A background task of the jobs role drains `workflow_run_events_outbox` in batches
//! (oldest first, `FOR UPDATE SKIP LOCKED`, only each job's earliest PENDING row so a
//! job's events stay in order even with several relays), publishes each row to the
//! events topic keyed by `job_id` (one job's events stay in one partition), and marks
//! it PUBLISHED only after the broker acks (`acks=all`, idempotence on). A crash between
//! the ack and the mark republishes the row on restart with the same `event_id`:
//! delivery is at-least-once, consumers dedupe on `event_id`.
//!
//! Failures are told apart by what they say about the row:
//!
//! | the broker's answer                                                   | the row                          |
//! |-----------------------------------------------------------------------|----------------------------------|
//! | ack                                                                   | PUBLISHED                        |
//! | the record's own content is refused (too large, an invalid record or timestamp) | one attempt spent, backoff; FAILED at `relay_max_attempts` (10) |
//! | anything else: an outage (a timeout, no leader for the partition, not enough in-sync replicas, broker transport down, unknown topic, not authorised) or a fault of the producer or broker (UNKNOWN_SERVER_ERROR, UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER, CORRUPT_MESSAGE, a fatal producer) | PENDING, attempts untouched, deferred so other rows go first; the relay backs off when nothing got through |
//! | no answer to the metadata check for the topic                          | PENDING, attempts untouched; the relay backs off |
//! | the metadata answer says the topic does not exist                       | PENDING, attempts untouched; the relay backs off and says which topic to create |
//!
//! A producer librdkafka put in a **fatal** state (the idempotent producer after an
//! OUT_OF_ORDER_SEQUENCE_NUMBER, say, as a broker can answer after an unclean leader
//! election) never publishes again: the relay builds a new one at once (logged, and
//! counted in `protomolt_jobs_relay_producer_rebuilds_total{reason="fatal"}`). So it
//! does for a producer that has published nothing for 30 s while the broker answers
//! (a broker that no longer accepts its sequence numbers; `reason="stuck"`). While the lane's batches get nothing through,
//! `/readyz` reports the node not ready.
//!
//! A FAILED row is the dead-letter queue and is never picked again by the relay; the
//! job's later rows are **HELD** (never published past it, so consumers see no gap
//! and no reordering; kept out of the relay's scan, so stuck jobs cost the lane
//! nothing) until an operator redrives it (the `redrive-events` verb); the
//! relay logs the held count when it dead-letters a row and every minute while any
//! is held. Published rows are retained.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::JobsConfig;
use crate::store::{PendingEvent, PublishOutcome, Store};

/// Why a Kafka lane could not start.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// The Kafka client refused its configuration.
    #[error(
        "the Kafka client refused its configuration (jobs.kafka_bootstrap / jobs.kafka_options): {0}"
    )]
    Kafka(#[from] KafkaError),
    /// The schema registry did not register the contract.
    #[error("registering the event schema with jobs.schema_registry_url failed: {0}")]
    Registry(String),
}

/// Why nothing was published: what the metadata check for the events topic found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerUnreachable {
    /// The broker did not answer.
    Unanswered,
    /// The broker answered, and the topic does not exist there (a typo in
    /// `events_topic`, or a topic never created).
    MissingTopic,
}

/// What a metadata request for a topic found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicProbe {
    /// The broker answered and has the topic.
    Ready,
    /// The broker answered and does not have the topic.
    Missing,
    /// The broker did not answer in time.
    Unanswered,
}

/// What to do about a topic the broker does not have: the sentence the relay and the
/// start-up checks log, naming the topic, the broker and the commands that create it.
pub fn missing_topic_hint(topic: &str, bootstrap: &str, key: &str) -> String {
    format!(
        "topic '{topic}' does not exist on {bootstrap}: create it (`tansu topic create {topic} --broker tcp://{bootstrap}` with Tansu, `kafka-topics --bootstrap-server {bootstrap} --create --topic {topic}` with Kafka), or fix {key}"
    )
}

/// The client settings both lanes share: the bootstrap servers, the lane's
/// `defaults`, then `kafka_options`, which override the defaults. The settings a lane
/// guarantees rest on (acks, idempotence, the consumer group, manual commits) are set
/// by the caller after this, so no option can weaken them.
pub fn client_config(
    config: &JobsConfig,
    bootstrap: &str,
    defaults: &[(&str, &str)],
) -> ClientConfig {
    let mut client = ClientConfig::new();
    client.set("bootstrap.servers", bootstrap);
    for (key, value) in defaults {
        client.set(*key, *value);
    }
    for (key, value) in &config.kafka_options {
        client.set(key, value);
    }
    client
}

/// How long a batch the broker took whole vouches for the broker: the next batch in
/// that time skips the metadata round trip that checks it is reachable.
const HEALTHY_FOR: Duration = Duration::from_secs(1);

/// Publishes outbox rows to the events topic.
pub struct Publisher {
    /// Replaced when librdkafka puts it in a fatal state.
    producer: std::sync::RwLock<FutureProducer>,
    /// What a new producer is built from.
    settings: ClientConfig,
    topic: String,
    schema_id: Option<u32>,
    /// When the broker last took a whole batch.
    last_healthy: std::sync::Mutex<Option<std::time::Instant>>,
    /// Since when the lane's batches got nothing through (None: it publishes).
    failing_since: std::sync::Mutex<Option<std::time::Instant>>,
    /// When the producer was last built.
    built_at: std::sync::Mutex<std::time::Instant>,
    /// Producers rebuilt so far: after a fatal error, and stuck ones.
    rebuilds: Rebuilds,
}

/// Producers rebuilt so far, by why.
#[derive(Debug, Default)]
struct Rebuilds {
    fatal: std::sync::atomic::AtomicU64,
    stuck: std::sync::atomic::AtomicU64,
}

/// How long a lane may publish nothing while the broker answers before its producer
/// is rebuilt: a producer whose idempotence state the broker no longer accepts (a
/// broker that lost or never kept its sequence numbers) fails every record for ever,
/// and a new producer id starts over. At most once per this long.
const STUCK_AFTER: Duration = Duration::from_secs(30);

impl Publisher {
    /// A producer with `acks=all` and idempotence on.
    pub fn new(config: &JobsConfig, bootstrap: &str) -> Result<Publisher, LaneError> {
        // message.timeout.ms bounds how long one publish may wait for the broker; a
        // timeout is an outage (no attempt spent). A producer's metadata requests may
        // create a missing topic on a broker that allows it, which would hide a typo in
        // a topic name: off, so a missing topic is reported instead. kafka_options may
        // change either.
        let mut settings = client_config(
            config,
            bootstrap,
            &[
                ("message.timeout.ms", "15000"),
                ("allow.auto.create.topics", "false"),
            ],
        );
        settings
            .set("acks", "all")
            .set("enable.idempotence", "true");
        let producer: FutureProducer = settings.create()?;
        Ok(Publisher {
            producer: std::sync::RwLock::new(producer),
            settings,
            topic: config.events_topic.clone(),
            schema_id: None,
            last_healthy: std::sync::Mutex::new(None),
            failing_since: std::sync::Mutex::new(None),
            built_at: std::sync::Mutex::new(std::time::Instant::now()),
            rebuilds: Rebuilds::default(),
        })
    }

    /// The current producer (a handle: the same one until it is rebuilt).
    fn producer(&self) -> FutureProducer {
        // A poisoned lock only means a panic while swapping in a built producer.
        self.producer
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Producers rebuilt so far: (after a fatal error, stuck).
    pub fn rebuilds(&self) -> (u64, u64) {
        let load = |n: &std::sync::atomic::AtomicU64| n.load(std::sync::atomic::Ordering::SeqCst);
        (load(&self.rebuilds.fatal), load(&self.rebuilds.stuck))
    }

    /// Replaces the producer with a new one when it can publish nothing more: one
    /// librdkafka declared fatal (it refuses every record for ever), or one that has
    /// published nothing for [`STUCK_AFTER`] while the broker answers. Answers whether
    /// it did. Records the old one had in flight are answered as an outage and stay
    /// PENDING; one that had landed is published again (at-least-once: consumers
    /// dedupe on `event_id`).
    fn rebuild_if_needed(&self) -> bool {
        let (why, count) = match self.producer().client().fatal_error() {
            Some((code, reason)) => (
                format!("it hit a fatal error ({code:?}: {reason})"),
                &self.rebuilds.fatal,
            ),
            None => {
                let failing = *self
                    .failing_since
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let built = *self
                    .built_at
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                match failing {
                    Some(since)
                        if since.elapsed() >= STUCK_AFTER && built.elapsed() >= STUCK_AFTER =>
                    {
                        (
                            format!(
                                "it has published nothing for {} s while the broker answers",
                                since.elapsed().as_secs()
                            ),
                            &self.rebuilds.stuck,
                        )
                    }
                    _ => return false,
                }
            }
        };
        match self.settings.create::<FutureProducer>() {
            Ok(fresh) => {
                *self
                    .producer
                    .write()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = fresh;
                *self
                    .built_at
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = std::time::Instant::now();
                let n = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                tracing::warn!(
                    rebuilds = n,
                    "the events producer can publish nothing more ({why}); built a new one (its rows stay PENDING, no attempt spent)"
                );
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "the events producer can publish nothing more ({why}) and a new one could not be built; trying again at the next batch");
                false
            }
        }
    }

    /// Why the lane cannot publish now, if it cannot: its last batches got nothing
    /// through, or its producer is in a fatal state. For `/readyz`.
    pub fn lane_failure(&self) -> Option<String> {
        if self.producer().client().fatal_error().is_some() {
            return Some("the events producer is in a fatal state (being rebuilt)".into());
        }
        let since = *self
            .failing_since
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        since.map(|since| {
            format!(
                "the events lane has published nothing for {} s (the node's log says why)",
                since.elapsed().as_secs()
            )
        })
    }

    /// Records whether a batch got anything through. Only a batch that met nothing
    /// but outages counts as the lane failing: one whose records the broker refused
    /// for their content (dead-lettered in time) shows the lane works.
    fn batch_went(&self, outcomes: &[PublishOutcome]) {
        let mut since = self
            .failing_since
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let through = outcomes
            .iter()
            .any(|outcome| !matches!(outcome, PublishOutcome::Outage(_)));
        if through {
            *since = None;
        } else if !outcomes.is_empty() {
            since.get_or_insert_with(std::time::Instant::now);
        }
    }

    /// Whether the lane's last batches got nothing through.
    pub fn is_failing(&self) -> bool {
        self.failing_since
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_some()
    }

    /// No row waits for the lane any more (none PENDING): whatever failed before is
    /// no longer waiting, so the lane is not failing.
    pub fn nothing_pending(&self) {
        *self
            .failing_since
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }

    /// Registers the contract under `<topic>-value` with a Confluent-compatible schema
    /// registry; from then on records use the Confluent wire format.
    pub async fn register_schema(&mut self, registry_url: &str) -> Result<u32, LaneError> {
        let subject = format!("{}-value", self.topic);
        let url = format!(
            "{}/subjects/{subject}/versions",
            registry_url.trim_end_matches('/')
        );
        // The registry copy leaves out the buf.validate import (a registry resolves only
        // the imports it is given as references) and keeps the wire format whole.
        let body =
            json!({ "schemaType": "PROTOBUF", "schema": jobs_proto::wire::registry_schema() });
        let response = reqwest::Client::new()
            .post(&url)
            .header("content-type", "application/vnd.schemaregistry.v1+json")
            .json(&body)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| LaneError::Registry(format!("POST {url}: {e}")))?;
        let status = response.status();
        let answer: serde_json::Value = response
            .json()
            .await
            .map_err(|e| LaneError::Registry(format!("POST {url} answered {status}: {e}")))?;
        let id = answer["id"]
            .as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| {
                LaneError::Registry(format!(
                    "POST {url} answered {status} without an id: {answer}"
                ))
            })?;
        tracing::info!(%subject, schema_id = id, "registered the event schema");
        self.schema_id = Some(id);
        Ok(id)
    }

    /// The schema id records are framed with, when a registry is used.
    pub fn schema_id(&self) -> Option<u32> {
        self.schema_id
    }

    /// Asks the broker whether `topic` exists (either lane's: they share the broker),
    /// within 3 s and off the async threads (metadata requests block). A partition
    /// without a leader does not stop the lane: its records time out, count as an
    /// outage and are deferred, while the other partitions publish.
    pub async fn probe(&self, topic: &str) -> TopicProbe {
        let producer = self.producer();
        let topic = topic.to_owned();
        tokio::task::spawn_blocking(move || {
            let metadata = match producer
                .client()
                .fetch_metadata(Some(&topic), Duration::from_secs(3))
            {
                Ok(metadata) => metadata,
                Err(_) => return TopicProbe::Unanswered,
            };
            let found = metadata.topics().iter().find(|t| t.name() == topic);
            match found.map(|t| t.error().map(RDKafkaErrorCode::from)) {
                Some(None) => TopicProbe::Ready,
                None | Some(Some(RDKafkaErrorCode::UnknownTopicOrPartition)) => TopicProbe::Missing,
                // Answered, but the topic is unusable for another reason (not
                // authorised, no leader yet): an outage, not a missing topic.
                Some(Some(_)) => TopicProbe::Unanswered,
            }
        })
        .await
        .unwrap_or(TopicProbe::Unanswered)
    }

    /// The events topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Publishes `events` and waits for every ack; the outcomes are in order. The
    /// broker is checked first (one metadata round trip) unless it took a whole batch
    /// within the last second: a broker failing since then lands as an outage of this
    /// batch's records all the same.
    pub async fn publish(
        &self,
        events: Vec<PendingEvent>,
    ) -> Result<Vec<PublishOutcome>, BrokerUnreachable> {
        let vouched = self
            .healthy_since()
            .is_some_and(|since| since.elapsed() < HEALTHY_FOR);
        if !vouched {
            match self.probe(&self.topic).await {
                TopicProbe::Ready => {}
                TopicProbe::Missing => return Err(BrokerUnreachable::MissingTopic),
                TopicProbe::Unanswered => return Err(BrokerUnreachable::Unanswered),
            }
        }
        let outcomes = self.send_all(events).await;
        self.batch_went(&outcomes);
        self.rebuild_if_needed();
        let whole = outcomes
            .iter()
            .all(|outcome| matches!(outcome, PublishOutcome::Published));
        // A poisoned lock only means a panic while storing an Instant: still whole.
        let mut healthy = self
            .last_healthy
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *healthy = whole.then(std::time::Instant::now);
        Ok(outcomes)
    }

    fn healthy_since(&self) -> Option<std::time::Instant> {
        *self
            .last_healthy
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Publishes `events` without the reachability check and waits for every ack or
    /// failure, each classified ([`classify`]); the outcomes are in order. The relay
    /// calls it through [`Publisher::publish`]; a broker that fails between the check
    /// and the send lands here as an outage.
    pub async fn send_all(&self, events: Vec<PendingEvent>) -> Vec<PublishOutcome> {
        let producer = self.producer();
        let mut in_flight = Vec::with_capacity(events.len());
        for event in &events {
            let key = event.job_id.to_string();
            let payload = match self.schema_id {
                Some(id) => jobs_proto::wire::frame(id, &event.payload),
                None => event.payload.clone(),
            };
            let mut record = FutureRecord::to(&self.topic).key(&key).payload(&payload);
            // The job's trace context, so a consumer's span joins the job's trace.
            if let Some(traceparent) = &event.trace_context {
                record = record.headers(rdkafka::message::OwnedHeaders::new().insert(
                    rdkafka::message::Header {
                        key: registry_stub::telemetry::TRACEPARENT,
                        value: Some(traceparent.as_bytes()),
                    },
                ));
            }
            in_flight.push(producer.send_result(record).map_err(|(e, _)| e));
        }
        let mut outcomes = Vec::with_capacity(in_flight.len());
        // The records refused with a code known neither as an outage nor as a refusal.
        let mut unknown = Vec::new();
        for sent in in_flight {
            let failed = |e: &KafkaError, unknown: &mut Vec<usize>, at: usize| {
                if !is_known(e) {
                    unknown.push(at);
                }
                classify(e)
            };
            let at = outcomes.len();
            outcomes.push(match sent {
                Err(refused) => failed(&refused, &mut unknown, at),
                Ok(delivery) => match delivery.await {
                    Ok(Ok(_)) => PublishOutcome::Published,
                    Ok(Err((e, _))) => failed(&e, &mut unknown, at),
                    // The producer went away (shutdown): the row's fault it is not.
                    Err(_) => PublishOutcome::Outage("the producer dropped the delivery".into()),
                },
            });
        }
        // A code this relay does not know is taken for an outage, unless the broker
        // took other records of the same batch: then it is this record's, and it
        // spends an attempt (so a record refused for good is dead-lettered in time,
        // not left PENDING for ever holding its job's later events).
        if outcomes
            .iter()
            .any(|outcome| matches!(outcome, PublishOutcome::Published))
        {
            for at in unknown {
                if let PublishOutcome::Outage(error) = &outcomes[at] {
                    outcomes[at] = PublishOutcome::Failed(format!(
                        "{error} (while the broker took other records of the batch)"
                    ));
                }
            }
        }
        outcomes
    }
}

/// What a failed publish says about the row. Only a refusal of the record's own
/// content (too large, an invalid record or timestamp) spends an attempt: retrying
/// that record can never succeed. Everything else (an outage, a fault of the
/// producer or the broker, an error not known here) is nobody's fault of the row's,
/// and spending attempts on it would dead-letter healthy events and hold their job's
/// later ones: the row waits PENDING instead.
pub fn classify(error: &KafkaError) -> PublishOutcome {
    if is_refusal(error) {
        PublishOutcome::Failed(error.to_string())
    } else {
        PublishOutcome::Outage(error.to_string())
    }
}

/// A refusal of the record's own content.
fn is_refusal(error: &KafkaError) -> bool {
    use RDKafkaErrorCode::*;
    matches!(
        error.rdkafka_error_code(),
        Some(
            MessageSizeTooLarge
                | InvalidMessageSize
                | MessageBatchTooLarge
                | InvalidTimestamp
                | InvalidRecord
        )
    )
}

/// Whether the code is one this relay knows: a refusal, an outage, or a fault of the
/// producer or the broker.
fn is_known(error: &KafkaError) -> bool {
    use RDKafkaErrorCode::*;
    is_refusal(error)
        || matches!(
            error.rdkafka_error_code(),
            Some(
                MessageTimedOut
                    | RequestTimedOut
                    | OperationTimedOut
                    | TimedOutQueue
                    | QueueFull
                    | BrokerTransportFailure
                    | AllBrokersDown
                    | BrokerNotAvailable
                    | NetworkException
                    | LeaderNotAvailable
                    | NotLeaderForPartition
                    | PreferredLeaderNotAvailable
                    | EligibleLeadersNotAvailable
                    | FencedLeaderEpoch
                    | UnknownLeaderEpoch
                    | ReplicaNotAvailable
                    | NotEnoughReplicas
                    | NotEnoughReplicasAfterAppend
                    | KafkaStorageError
                    | UnknownTopic
                    | UnknownTopicOrPartition
                    | ThrottlingQuotaExceeded
                    | PurgeQueue
                    | BrokerDestroy
                    | TopicAuthorizationFailed
                    | ClusterAuthorizationFailed
                    | Fatal
                    | Unknown
                    | UnknownProducerId
                    | OutOfOrderSequenceNumber
                    | InvalidMessage
                    | DuplicateSequenceNumber
                    | InvalidProducerEpoch
                    | ProducerFenced
                    | InvalidProducerIdMapping
            )
        )
}

/// How often the relay reports rows held behind dead-lettered ones.
const HELD_REPORT_EVERY: Duration = Duration::from_secs(60);

/// Drains the outbox until `shutdown`, woken early by outbox NOTIFYs.
pub async fn relay_loop(
    store: Store,
    publisher: Arc<Publisher>,
    config: JobsConfig,
    wake: Arc<Notify>,
    metrics: crate::metrics::JobsMetrics,
    shutdown: CancellationToken,
) {
    let poll = Duration::from_millis(config.relay_poll_interval_ms);
    let mut unreachable_for = 0;
    // Held rows wait for an operator: say so now and then, not only when a row is
    // dead-lettered (events of a stuck job keep arriving HELD).
    let mut next_held_report = tokio::time::Instant::now();
    let mut rebuilds_counted = publisher.rebuilds();
    while !shutdown.is_cancelled() {
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let started = std::time::Instant::now();
        let drained = store
            .drain_outbox(
                config.relay_batch_size,
                config.relay_max_attempts,
                |attempts| config.relay_backoff(attempts),
                |events| publisher.publish(events),
            )
            .await;
        let rebuilds = publisher.rebuilds();
        for (reason, now, before) in [
            ("fatal", rebuilds.0, rebuilds_counted.0),
            ("stuck", rebuilds.1, rebuilds_counted.1),
        ] {
            if now > before {
                metrics
                    .relay_producer_rebuilds
                    .get_or_create(&vec![("reason", reason.to_owned())])
                    .inc_by(now - before);
            }
        }
        rebuilds_counted = rebuilds;
        let wait = match drained {
            Ok(Ok(report)) if report.outage > 0 && report.handled() == 0 => {
                unreachable_for += 1;
                let backoff = config.relay_backoff(unreachable_for);
                tracing::warn!(topic = %config.events_topic, rows = report.outage, error = report.outage_error.as_deref().unwrap_or_default(), retry_in_ms = backoff.as_millis() as u64, "the broker could not take the batch (an outage, no attempts spent); outbox rows wait PENDING");
                backoff
            }
            Ok(Ok(report)) => {
                unreachable_for = 0;
                for event_id in &report.dead_lettered {
                    tracing::warn!(%event_id, attempts = config.relay_max_attempts, "an outbox row spent its publish attempts and landed FAILED (dead-lettered); the job's later events are held until it is redriven");
                    log_held(&store).await;
                }
                if tokio::time::Instant::now() >= next_held_report {
                    next_held_report = tokio::time::Instant::now() + HELD_REPORT_EVERY;
                    log_held(&store).await;
                }
                // Nothing due: if nothing waits at all (deferred rows still wait), a
                // lane that failed before is not failing now.
                if report.handled() == 0
                    && report.outage == 0
                    && publisher.is_failing()
                    && store
                        .lane_counts()
                        .await
                        .is_ok_and(|counts| counts.pending_events == 0)
                {
                    publisher.nothing_pending();
                }
                if report.handled() > 0 {
                    let count = crate::metrics::JobsMetrics::count;
                    count(&metrics.relay_events, "published", report.published as u64);
                    count(&metrics.relay_events, "retrying", report.retrying as u64);
                    count(
                        &metrics.relay_events,
                        "dead_lettered",
                        report.dead_lettered.len() as u64,
                    );
                    metrics
                        .relay_publish_seconds
                        .get_or_create(&Vec::new())
                        .observe(started.elapsed().as_secs_f64());
                    tracing::debug!(
                        published = report.published,
                        retrying = report.retrying,
                        dead = report.dead_lettered.len(),
                        "relay batch"
                    );
                    continue;
                }
                poll
            }
            Ok(Err(BrokerUnreachable::Unanswered)) => {
                unreachable_for += 1;
                let backoff = config.relay_backoff(unreachable_for);
                tracing::warn!(topic = %config.events_topic, retry_in_ms = backoff.as_millis() as u64, "the broker does not answer; outbox rows wait PENDING");
                backoff
            }
            Ok(Err(BrokerUnreachable::MissingTopic)) => {
                unreachable_for += 1;
                let backoff = config.relay_backoff(unreachable_for);
                let bootstrap = config.kafka_bootstrap.as_deref().unwrap_or_default();
                tracing::warn!(
                    retry_in_ms = backoff.as_millis() as u64,
                    "{}; outbox rows wait PENDING",
                    missing_topic_hint(&config.events_topic, bootstrap, "jobs.events_topic")
                );
                backoff
            }
            Err(e) => {
                tracing::warn!(error = %e, "the relay could not read the outbox; retrying");
                poll
            }
        };
        tokio::select! {
            () = &mut woken, if unreachable_for == 0 => {}
            () = tokio::time::sleep(wait) => {}
            () = shutdown.cancelled() => {}
        }
    }
    // Give queued deliveries a moment to complete before the producer is dropped.
    let producer = publisher.producer();
    let _ = tokio::task::spawn_blocking(move || producer.flush(Duration::from_secs(5))).await;
}

/// Says how many rows wait behind dead-lettered ones, so an operator knows to redrive;
/// first releases rows nothing holds back any more (written HELD while a redrive of
/// their job committed).
async fn log_held(store: &Store) {
    if let Err(e) = store.release_unblocked_held().await {
        tracing::debug!(error = %e, "releasing unblocked HELD rows failed");
    }
    match store.lane_counts().await {
        Ok(counts) if counts.held_events > 0 || counts.failed_events > 0 => tracing::warn!(
            failed = counts.failed_events,
            held = counts.held_events,
            "outbox rows are dead-lettered (FAILED), and the rows of their jobs after them held: fix the cause, then redrive them (`protomolt redrive --all`, the redrive-events verb, or the job page's button) to publish them in order"
        ),
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %e, "counting held outbox rows failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outages_spend_no_attempt_and_refusals_do() {
        use RDKafkaErrorCode::*;
        for outage in [
            MessageTimedOut,
            RequestTimedOut,
            LeaderNotAvailable,
            NotLeaderForPartition,
            NotEnoughReplicas,
            NotEnoughReplicasAfterAppend,
            AllBrokersDown,
            BrokerTransportFailure,
            UnknownTopicOrPartition,
            TopicAuthorizationFailed,
            Fatal,
            // Faults of the producer or the broker, not of the record.
            Unknown,
            UnknownProducerId,
            OutOfOrderSequenceNumber,
            InvalidMessage,
            DuplicateSequenceNumber,
            InvalidProducerEpoch,
        ] {
            let error = KafkaError::MessageProduction(outage);
            assert!(
                matches!(classify(&error), PublishOutcome::Outage(_)),
                "{outage:?} is an outage"
            );
        }
        for refusal in [
            MessageSizeTooLarge,
            InvalidRecord,
            InvalidMessageSize,
            MessageBatchTooLarge,
            InvalidTimestamp,
        ] {
            let error = KafkaError::MessageProduction(refusal);
            assert!(
                matches!(classify(&error), PublishOutcome::Failed(_)),
                "{refusal:?} is the record's fault"
            );
        }
    }
}
