//! The signals lane: `SendEvent` records on `[jobs] signals_topic` resume the jobs
//! waiting on their key as `send-event` does, committed only after the database
//! write; poison records are dead-lettered and the partition flows on. Real broker,
//! real PostgreSQL, real fixture servers.

use std::time::Duration;

use prost::Message as _;
use protomolt_e2e::jobs::{JobsNode, test_config};
use protomolt_e2e::kafka::{produce, producer, with_lanes};
use protomolt_e2e::{TestDatabase, create_topic, unique_topic};
use serde_json::json;
use workflow::testkit::{FixtureServer, event_workflow};

const WAIT: Duration = Duration::from_secs(60);

/// A `SendEvent` whose payload is a `jobs.test.Review` with `notes`.
fn send_event(key: &str, event_id: &str, notes: &str) -> Vec<u8> {
    use prost_types::value::Kind;
    let field = |kind| prost_types::Value { kind: Some(kind) };
    let payload = prost_types::Struct {
        fields: [
            ("notes".to_owned(), field(Kind::StringValue(notes.into()))),
            ("score".to_owned(), field(Kind::NumberValue(4.0))),
        ]
        .into(),
    };
    jobs_proto::v1::SendEvent {
        key: key.into(),
        payload: Some(payload),
        event_id: event_id.into(),
    }
    .encode_to_vec()
}

#[tokio::test]
async fn a_send_event_record_resumes_the_job_and_poison_records_are_dead_lettered() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let mut config = with_lanes(test_config(&db.url, "signals", 1)).await;
    let signals = unique_topic("signals");
    create_topic(&signals, 1).await;
    config.signals_topic = Some(signals.clone());
    let node = JobsNode::start(config).await;
    let envelope = event_workflow(&server.target(), json!({}));
    let first = node.submit(&envelope, json!({ "text": "1" })).await;
    let second = node.submit(&envelope, json!({ "text": "2" })).await;
    node.wait_for_status(&first, "WAITING", WAIT).await;
    node.wait_for_status(&second, "WAITING", WAIT).await;

    let producer = producer();
    produce(&producer, &signals, "junk", &[0xde, 0xad, 0xbe, 0xef, 0xff]).await;
    produce(&producer, &signals, "json", br#"{"key": "order-1"}"#).await;
    // The message's key and the record key disagree: which one was meant?
    produce(
        &producer,
        &signals,
        "order-9",
        &send_event("order-1", "x", "mixed"),
    )
    .await;
    // The record key stands in for an empty key.
    produce(
        &producer,
        &signals,
        "order-1",
        &send_event("", "pay-1", "via kafka"),
    )
    .await;
    produce(
        &producer,
        &signals,
        "order-2",
        &send_event("order-2", "", "no id"),
    )
    .await;

    let done = node.wait_for_status(&first, "COMPLETED", WAIT).await;
    assert_eq!(done["result"], json!({ "notes": "via kafka", "score": 4 }));
    assert_eq!(done["checkpoints"][1]["eventId"], "pay-1");
    let done = node.wait_for_status(&second, "COMPLETED", WAIT).await;
    assert_eq!(
        done["checkpoints"][1]["eventId"],
        format!("{signals}/0/4"),
        "a record without an id is known by its place"
    );

    let rejects = db
        .connect()
        .await
        .query(
            "SELECT record_offset, error FROM workflow_run_request_rejects ORDER BY record_offset",
            &[],
        )
        .await
        .unwrap();
    let reasons: Vec<(i64, String)> = rejects.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons[0].1.starts_with("not a SendEvent"), "{reasons:?}");
    assert!(reasons[1].1.contains("is JSON"), "{reasons:?}");
    assert!(reasons[2].1.contains("differ"), "{reasons:?}");
    node.stop().await;
}
