//! Deduplicated submissions (issue 34): singleton, debounce and throttle, each by
//! `submit-workflow`, `submit-workflows` and the request topic, the answer naming the
//! job that stands for the submission.

use std::time::Duration;

use jobs_proto::WireMessage;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually, test_config};
use protomolt_e2e::kafka::{produce, producer, with_lanes};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, leaf_workflow};

/// A node with the Kafka lanes on and `leaf` stored, running `workers` jobs at once.
struct Fleet {
    db: TestDatabase,
    node: JobsNode,
    requests: String,
    server: FixtureServer,
}

async fn fleet(workers: usize) -> Fleet {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let config = with_lanes(test_config(&db.url, "node-a", workers)).await;
    let requests = config.requests_topic.clone();
    let node = JobsNode::start(config).await;
    node.ok(
        "put-workflow",
        json!({ "workflow": leaf_workflow(&server.target()) }),
    )
    .await;
    Fleet {
        db,
        node,
        requests,
        server,
    }
}

/// `dedupeKey` and friends for `mode` (window in milliseconds, 0: none).
fn dedupe(key: &str, mode: &str, window_ms: u64) -> Value {
    let mut fields = json!({ "dedupeKey": key, "dedupeMode": mode });
    if window_ms > 0 {
        fields["dedupeWindowMs"] = json!(window_ms);
    }
    fields
}

fn with(mut body: Value, fields: &Value) -> Value {
    for (key, value) in fields.as_object().expect("fields") {
        body[key] = value.clone();
    }
    body
}

/// Submits `text` by `submit-workflow`; the answer.
async fn by_verb(fleet: &Fleet, text: &str, fields: &Value) -> Value {
    let body = json!({ "workflowName": "leaf", "input": { "text": text } });
    fleet.node.ok("submit-workflow", with(body, fields)).await
}

/// Submits `text` by `submit-workflows` (one item); its answer.
async fn by_many(fleet: &Fleet, text: &str, fields: &Value) -> Value {
    let item = with(json!({ "input": { "text": text } }), fields);
    let answer = fleet
        .node
        .ok(
            "submit-workflows",
            json!({ "workflowName": "leaf", "submissions": [item] }),
        )
        .await;
    answer["answers"][0].clone()
}

/// Produces a request for `text` with `fields` on the requests topic, then a plain
/// marker request, and waits until the marker's job exists (the topic has one
/// partition: the first was consumed by then). Answers the first request's job id.
async fn by_topic(fleet: &Fleet, text: &str, fields: &Value) -> String {
    let job_id = uuid::Uuid::now_v7().to_string();
    let request = jobs_proto::v1::WorkflowRunRequest {
        job_id: job_id.clone(),
        workflow_name: "leaf".into(),
        input: Some(prost_types::Struct {
            fields: [(
                "text".to_owned(),
                prost_types::Value {
                    kind: Some(prost_types::value::Kind::StringValue(text.into())),
                },
            )]
            .into(),
        }),
        dedupe_key: fields["dedupeKey"].as_str().unwrap_or_default().into(),
        dedupe_mode: fields["dedupeMode"].as_str().unwrap_or_default().into(),
        dedupe_window_ms: fields["dedupeWindowMs"].as_i64().unwrap_or(0),
        ..Default::default()
    };
    let producer = producer();
    let payload = request.encode_validated().expect("a valid request");
    produce(&producer, &fleet.requests, &job_id, &payload).await;
    let marker = uuid::Uuid::now_v7().to_string();
    let record = protomolt_e2e::kafka::request_record(&marker, "leaf", "marker");
    produce(&producer, &fleet.requests, &marker, &record).await;
    let db = &fleet.db;
    eventually(
        "the marker request to be consumed",
        Duration::from_secs(60),
        || async {
            let id = uuid::Uuid::parse_str(&marker).expect("a uuid");
            db.connect()
                .await
                .query_opt("SELECT 1 FROM workflow_run WHERE job_id = $1", &[&id])
                .await
                .expect("read")
                .is_some()
        },
    )
    .await;
    job_id
}

/// The jobs of dedupe key `leaf:<key>`: (id, status, input text), oldest first.
async fn jobs_of(db: &TestDatabase, key: &str) -> Vec<(String, String, String)> {
    db.connect()
        .await
        .query(
            "SELECT job_id::text, status, input ->> 'text' FROM workflow_run
              WHERE dedupe_key = $1 ORDER BY created_at, job_id",
            &[&format!("leaf:{key}")],
        )
        .await
        .expect("read")
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

#[tokio::test]
async fn a_singleton_answers_its_live_job_by_both_verbs_and_the_request_topic() {
    let fleet = fleet(0).await;
    let fields = dedupe("nightly", "singleton", 0);
    let first = by_verb(&fleet, "one", &fields).await;
    assert_eq!(first["created"], true);
    assert!(first.get("deduplicated").is_none(), "{first}");
    let job = first["jobId"].as_str().expect("an id").to_owned();

    let again = by_verb(&fleet, "two", &fields).await;
    assert_eq!(again["jobId"], job.as_str(), "{again}");
    assert_eq!(again["created"], false);
    assert_eq!(again["deduplicated"], "singleton");
    let item = by_many(&fleet, "three", &fields).await;
    assert_eq!(item["jobId"], job.as_str(), "{item}");
    assert_eq!(item["deduplicated"], "singleton");
    let requested = by_topic(&fleet, "four", &fields).await;
    let jobs = jobs_of(&fleet.db, "nightly").await;
    assert_eq!(jobs.len(), 1, "one job stands for all four: {jobs:?}");
    assert_eq!(jobs[0].0, job);
    assert_ne!(requested, job, "the request's own id made no job");
    // Another key is its own singleton; an ended job frees the key.
    let other = by_verb(&fleet, "one", &dedupe("weekly", "singleton", 0)).await;
    assert_eq!(other["created"], true);
    fleet
        .node
        .ok("cancel-job", json!({ "jobId": job, "reason": "a test" }))
        .await;
    let next = by_verb(&fleet, "five", &fields).await;
    assert_eq!(next["created"], true);
    assert_ne!(next["jobId"], job.as_str());
    fleet.node.stop().await;
}

#[tokio::test]
async fn a_debounce_keeps_one_job_whose_last_input_wins() {
    let fleet = fleet(0).await;
    let fields = dedupe("search", "debounce", 3_000);
    let first = by_verb(&fleet, "one", &fields).await;
    assert_eq!(first["created"], true);
    let job = first["jobId"].as_str().expect("an id").to_owned();
    let second = by_many(&fleet, "two", &fields).await;
    assert_eq!(second["jobId"], job.as_str());
    assert_eq!(second["deduplicated"], "debounce");
    by_topic(&fleet, "three", &fields).await;
    let jobs = jobs_of(&fleet.db, "search").await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].2, "three", "the last input won");
    let row = fleet.node.job(&job).await;
    assert_eq!(row["status"], "QUEUED");
    // A worker runs it once, with the last input, after the window.
    let worker = JobsNode::start(test_config(&fleet.db.url, "worker", 2)).await;
    worker
        .wait_for_status(&job, "COMPLETED", Duration::from_secs(30))
        .await;
    let texts: Vec<String> = fleet
        .server
        .stats
        .tokenize_arrivals()
        .into_iter()
        .map(|(text, _)| text)
        .filter(|text| text != "marker")
        .collect();
    assert_eq!(texts, ["three"], "one call, of the last input");
    // A refused combination: a debounced job has no start of its own.
    let (status, refused) = fleet
        .node
        .call(
            "submit-workflow",
            with(
                json!({ "workflowName": "leaf", "input": { "text": "x" }, "delayMs": 5 }),
                &fields,
            ),
        )
        .await;
    assert_eq!(status, http::StatusCode::BAD_REQUEST, "{refused}");
    assert!(refused.to_string().contains("dedupeWindowMs"), "{refused}");
    worker.stop().await;
    fleet.node.stop().await;
}

#[tokio::test]
async fn a_throttle_answers_the_first_job_of_its_window() {
    let fleet = fleet(2).await;
    let fields = dedupe("digest", "throttle", 4_000);
    let first = by_verb(&fleet, "one", &fields).await;
    assert_eq!(first["created"], true);
    let job = first["jobId"].as_str().expect("an id").to_owned();
    fleet
        .node
        .wait_for_status(&job, "COMPLETED", Duration::from_secs(30))
        .await;
    // Finished, but still within the window: it stands for these.
    let second = by_many(&fleet, "two", &fields).await;
    assert_eq!(second["jobId"], job.as_str(), "{second}");
    assert_eq!(second["deduplicated"], "throttle");
    assert_eq!(second["status"], "COMPLETED");
    by_topic(&fleet, "three", &fields).await;
    assert_eq!(jobs_of(&fleet.db, "digest").await.len(), 1);
    // After the window, a new job.
    let created_at = fleet.node.job(&job).await["created_at"].clone();
    assert!(created_at.is_string());
    tokio::time::sleep(Duration::from_millis(4_200)).await;
    let later = by_verb(&fleet, "four", &fields).await;
    assert_eq!(later["created"], true, "{later}");
    assert_eq!(jobs_of(&fleet.db, "digest").await.len(), 2);
    fleet.node.stop().await;
}

#[tokio::test]
async fn bad_dedupe_fields_are_refused_naming_the_field() {
    let fleet = fleet(0).await;
    for (fields, field) in [
        (json!({ "dedupeMode": "singleton" }), "dedupeKey"),
        (
            json!({ "dedupeKey": "k", "dedupeMode": "often" }),
            "dedupeMode",
        ),
        (
            json!({ "dedupeKey": "k", "dedupeMode": "throttle" }),
            "dedupeWindowMs",
        ),
        (
            json!({ "dedupeKey": "k", "dedupeMode": "singleton", "dedupeWindowMs": 5 }),
            "dedupeWindowMs",
        ),
        (json!({ "dedupeKey": "a\u{202e}b" }), "dedupeKey"),
    ] {
        let body = with(
            json!({ "workflowName": "leaf", "input": { "text": "t" } }),
            &fields,
        );
        let (status, answer) = fleet.node.call("submit-workflow", body).await;
        assert_eq!(status, http::StatusCode::BAD_REQUEST, "{answer}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap_or_default()
                .starts_with(field),
            "{answer}"
        );
    }
    let count: i64 = fleet
        .db
        .connect()
        .await
        .query_one("SELECT count(*) FROM workflow_run", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(count, 0, "nothing was written");
    fleet.node.stop().await;
}
