//! Kafka helpers for the lane tests: a jobs config with its own topics and group,
//! a producer, and a reader that collects what a topic holds.

use std::time::{Duration, Instant};

use jobs_role::JobsConfig;
use jobs_role::store::NewJob;
use rdkafka::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::{create_topic, kafka_bootstrap, unique_topic};

/// A record as read back.
#[derive(Debug, Clone)]
pub struct Record {
    /// The key.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub payload: Vec<u8>,
    /// Partition and offset.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// The record's headers (name, value as text).
    pub headers: Vec<(String, String)>,
}

/// `config` with the Kafka lanes on: fresh events and requests topics, its own
/// consumer group, quick relay backoffs.
pub async fn with_lanes(mut config: JobsConfig) -> JobsConfig {
    config.kafka_bootstrap = Some(kafka_bootstrap());
    config.events_topic = unique_topic("events");
    config.requests_topic = unique_topic("requests");
    config.consumer_group = format!("group-{}", uuid::Uuid::new_v4().simple());
    config.relay_poll_interval_ms = 100;
    config.relay_backoff_base_ms = 50;
    config.relay_backoff_max_ms = 1_000;
    // The development broker (Tansu 0.6.0 storing in PostgreSQL 15) cannot answer the
    // latest offset under read_committed (its query needs PostgreSQL 16) and drops
    // the connection; nothing here produces transactionally, so read_uncommitted
    // reads the same records (docs/reliability.md, the broker's workarounds).
    config
        .kafka_options
        .insert("isolation.level".into(), "read_uncommitted".into());
    create_topic(&config.events_topic, 3).await;
    create_topic(&config.requests_topic, 1).await;
    config
}

/// A producer with acks=all.
pub fn producer() -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set("acks", "all")
        .create()
        .expect("producer")
}

/// A request record's value (`WorkflowRunRequest`, binary protobuf): run the stored
/// workflow `workflow_name` as `job_id` with input `{text}`.
pub fn request_record(job_id: &str, workflow_name: &str, text: &str) -> Vec<u8> {
    use prost::Message as _;
    let input = prost_types::Struct {
        fields: [(
            "text".to_owned(),
            prost_types::Value {
                kind: Some(prost_types::value::Kind::StringValue(text.into())),
            },
        )]
        .into(),
    };
    jobs_proto::v1::WorkflowRunRequest {
        job_id: job_id.into(),
        workflow_name: workflow_name.into(),
        input: Some(input),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Produces one record and waits for its ack.
pub async fn produce(producer: &FutureProducer, topic: &str, key: &str, payload: &[u8]) {
    producer
        .send(
            FutureRecord::to(topic).key(key).payload(payload),
            Duration::from_secs(15),
        )
        .await
        .unwrap_or_else(|(e, _)| panic!("produce to {topic}: {e}"));
}

/// Reads `topic` from the beginning until `done` holds for what was read, or panics
/// after `timeout`.
pub async fn read_until(
    topic: &str,
    timeout: Duration,
    done: impl Fn(&[Record]) -> bool,
) -> Vec<Record> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set(
            "group.id",
            format!("reader-{}", uuid::Uuid::new_v4().simple()),
        )
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let deadline = Instant::now() + timeout;
    let mut records = Vec::new();
    while !done(&records) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "timed out reading {topic}: {} records so far",
            records.len()
        );
        if let Ok(Ok(message)) =
            tokio::time::timeout(left.min(Duration::from_secs(1)), consumer.recv()).await
        {
            records.push(Record {
                key: message.key().map(<[u8]>::to_vec),
                payload: message.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                partition: message.partition(),
                offset: message.offset(),
                headers: message
                    .headers()
                    .map(|headers| {
                        headers
                            .iter()
                            .map(|h| {
                                let value =
                                    h.value.map(String::from_utf8_lossy).unwrap_or_default();
                                (h.key.to_owned(), value.into_owned())
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            });
        }
    }
    records
}

/// A node whose Kafka lanes are configured but not running (the test drives the relay
/// by hand), over `db`, with one job inserted (so one ACCEPTED outbox row). Returns the
/// node, the lanes config (fresh topics) and the job.
pub async fn hand_driven_lanes_node(
    db: &crate::TestDatabase,
) -> (crate::jobs::JobsNode, JobsConfig, NewJob) {
    let config = with_lanes(crate::jobs::test_config(&db.url, "idle", 0)).await;
    let mut quiet = config.clone();
    quiet.kafka_bootstrap = None;
    let node = crate::jobs::JobsNode::start(quiet).await;
    let job = NewJob {
        job_id: uuid::Uuid::now_v7(),
        workflow_name: "w".into(),
        definition: std::sync::Arc::new(serde_json::json!({})),
        definition_digest: None,
        priority: jobs_role::store::DEFAULT_PRIORITY,
        run_after: Default::default(),
        input: serde_json::json!({}),
        max_attempts: 3,
        trace_context: None,
        by_name: false,
        concurrency: Vec::new(),
        dedupe: None,
        schedule: None,
        metadata: None,
    };
    node.store.insert_job(&job).await.expect("insert");
    (node, config, job)
}
