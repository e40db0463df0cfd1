//! A valid WorkflowRunEvent travels through the real broker with librdkafka: produced
//! with acks=all keyed by job_id, consumed by a group with manual commits, decoded and
//! validated, equal field for field; a second member of the group after the commit
//! gets nothing already committed.

use std::time::Duration;

use jobs_proto::WireMessage;
use jobs_proto::v1::WorkflowRunEvent;
use jobs_proto::v1::workflow_run_event::Type;
use prost_types::value::Kind;
use protomolt_e2e::{create_topic, kafka_bootstrap, unique_topic};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

fn event(job_id: &str, step: &str) -> WorkflowRunEvent {
    let status = prost_types::Value {
        kind: Some(Kind::StringValue("QUEUED".into())),
    };
    WorkflowRunEvent {
        event_id: uuid::Uuid::new_v4().to_string(),
        job_id: job_id.to_owned(),
        workflow_name: "embed-text".into(),
        r#type: Type::StepCheckpoint as i32,
        step: step.to_owned(),
        attempt: 2,
        verdict: String::new(),
        error: String::new(),
        detail: Some(prost_types::Struct {
            fields: [("status".to_owned(), status)].into(),
        }),
        occurred_at: Some(prost_types::Timestamp {
            seconds: 1_790_000_000,
            nanos: 123_000_000,
        }),
    }
}

fn consumer(group: &str, topic: &str) -> StreamConsumer {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    consumer
}

async fn produce(producer: &FutureProducer, topic: &str, event: &WorkflowRunEvent) {
    let payload = event.encode_validated().expect("a valid event encodes");
    producer
        .send(
            FutureRecord::to(topic).key(&event.job_id).payload(&payload),
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|(e, _)| panic!("produce: {e}"));
}

#[tokio::test]
async fn event_round_trips_through_a_consumer_group_with_manual_commit() {
    let topic = unique_topic("roundtrip");
    create_topic(&topic, 1).await;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");

    let job_id = uuid::Uuid::new_v4().to_string();
    let first = event(&job_id, "tokenize");
    produce(&producer, &topic, &first).await;

    let group = format!("group-{}", uuid::Uuid::new_v4().simple());
    let member = consumer(&group, &topic);
    let record = tokio::time::timeout(Duration::from_secs(60), member.recv())
        .await
        .expect("the event arrives within a minute")
        .expect("a record");
    assert_eq!(record.key(), Some(job_id.as_bytes()), "keyed by job_id");
    let decoded = WorkflowRunEvent::decode_validated(record.payload().expect("payload"))
        .expect("decodes and validates");
    assert_eq!(decoded, first, "field for field");

    let mut committed = TopicPartitionList::new();
    committed
        .add_partition_offset(
            &topic,
            record.partition(),
            Offset::Offset(record.offset() + 1),
        )
        .expect("offset");
    member
        .commit(&committed, CommitMode::Async)
        .expect("commit request");
    // The async commit is acknowledged when the group's committed offset shows it.
    wait_until_committed(&member, &topic, record.offset() + 1).await;
    drop(record);
    drop(member);

    // A second member of the same group resumes after the commit: it sees only what
    // was produced after, never the committed record.
    let second = event(&job_id, "embed");
    produce(&producer, &topic, &second).await;
    let next_member = consumer(&group, &topic);
    let record = tokio::time::timeout(Duration::from_secs(60), next_member.recv())
        .await
        .expect("the second event arrives")
        .expect("a record");
    let decoded =
        WorkflowRunEvent::decode_validated(record.payload().expect("payload")).expect("valid");
    assert_eq!(decoded, second, "the committed record is not redelivered");
}

async fn wait_until_committed(consumer: &StreamConsumer, topic: &str, offset: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut wanted = TopicPartitionList::new();
        wanted.add_partition(topic, 0);
        let committed = consumer
            .committed_offsets(wanted, Duration::from_secs(5))
            .expect("committed offsets");
        if committed.find_partition(topic, 0).map(|p| p.offset()) == Some(Offset::Offset(offset)) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the commit of offset {offset} never landed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
