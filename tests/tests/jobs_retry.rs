//! `retry-job`: an operator re-queues a DEAD, FAILED or CANCELLED job (a COMPLETED one
//! from a named step) with a fresh budget; checkpointed steps are not called again
//! unless `fromStep` drops them. Real PostgreSQL, real fixture servers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use jobs_proto::WireMessage;
use jobs_proto::v1::WorkflowRunEvent;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, one_queued_job, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureOptions, FixtureServer, two_step_workflow};

const WAIT: Duration = Duration::from_secs(30);

async fn retry(node: &JobsNode, body: Value) -> Value {
    node.ok("retry-job", body).await
}

/// The job's event types in order, and its RETRIED events decoded.
async fn events(node: &JobsNode, job_id: &str) -> (Vec<String>, Vec<WorkflowRunEvent>) {
    let rows = node
        .store
        .job_events(uuid::Uuid::parse_str(job_id).unwrap())
        .await
        .unwrap();
    let retried = rows
        .iter()
        .filter(|row| row.event_type == "RETRIED")
        .map(|row| WorkflowRunEvent::decode_validated(&row.payload).unwrap())
        .collect();
    (
        rows.into_iter().map(|row| row.event_type).collect(),
        retried,
    )
}

fn detail(event: &WorkflowRunEvent) -> Value {
    protomolt_e2e::jobs::string_detail(event)
}

#[tokio::test]
async fn a_dead_job_retried_after_its_target_recovers_completes_without_recalling_checkpointed_steps()
 {
    let db = TestDatabase::create().await;
    let down = Arc::new(AtomicBool::new(true));
    let server = FixtureServer::start_with(FixtureOptions {
        embed_unavailable: Some(down.clone()),
        ..FixtureOptions::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let answer = node
        .ok(
            "submit-workflow",
            json!({ "workflow": two_step_workflow(&server.target()), "input": { "text": "a" }, "maxAttempts": 2 }),
        )
        .await;
    let job_id = answer["jobId"].as_str().unwrap().to_owned();
    node.wait_for_status(&job_id, "DEAD", WAIT).await;
    assert_eq!(server.stats.tokenize_calls(), 1);
    assert_eq!(server.stats.embed_calls(), 2);

    down.store(false, Ordering::SeqCst);
    let answer = retry(
        &node,
        json!({ "jobId": job_id, "reason": "the embedder is back" }),
    )
    .await;
    // The job runs the snapshot it was submitted with, named by its digest.
    let snapshot = node.job(&job_id).await["definition_digest"].clone();
    assert_eq!(
        answer,
        json!({ "ok": true, "outcome": "RETRIED", "status": "QUEUED", "from": "DEAD", "checkpointsKept": 1, "snapshot": snapshot })
    );
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(
        server.stats.tokenize_calls(),
        1,
        "the checkpointed step was replayed"
    );
    assert_eq!(server.stats.embed_calls(), 3);
    assert_eq!(job["attempt"], 1, "a fresh budget: {job}");
    assert_eq!(job["error"], Value::Null);

    let (types, retried) = events(&node, &job_id).await;
    assert_eq!(
        types,
        [
            "ACCEPTED",
            "STEP_CHECKPOINT",
            "DEAD",
            "RETRIED",
            "STEP_CHECKPOINT",
            "COMPLETED"
        ]
    );
    assert_eq!(
        detail(&retried[0]),
        json!({ "status": "QUEUED", "from": "DEAD", "reason": "the embedder is back", "snapshot": snapshot })
    );
    node.stop().await;
}

#[tokio::test]
async fn from_step_reruns_exactly_the_steps_from_there_on() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let job_id = node
        .submit(&two_step_workflow(&server.target()), json!({ "text": "a" }))
        .await;
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;

    let refused = retry(&node, json!({ "jobId": job_id })).await;
    assert_eq!(refused["outcome"], "WRONG_STATE", "{refused}");
    assert_eq!(refused["status"], "COMPLETED");
    assert!(refused["error"].as_str().unwrap().contains("fromStep"));

    let (status, unknown) = node
        .call("retry-job", json!({ "jobId": job_id, "fromStep": "nope" }))
        .await;
    assert_eq!(status, 400, "{unknown}");
    assert!(
        unknown["message"].as_str().unwrap().starts_with(
            "fromStep: workflow 'embed-text' has no step 'nope' (its steps: tokenize, embed)"
        ),
        "{unknown}"
    );

    let answer = retry(&node, json!({ "jobId": job_id, "fromStep": "embed" })).await;
    assert_eq!(answer["from"], "COMPLETED", "{answer}");
    assert_eq!(answer["checkpointsKept"], 1, "{answer}");
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(
        (server.stats.tokenize_calls(), server.stats.embed_calls()),
        (1, 2),
        "only embed ran again"
    );
    assert_eq!(job["checkpoints"].as_array().unwrap().len(), 2);

    retry(&node, json!({ "jobId": job_id, "fromStep": "tokenize" })).await;
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    // The retry answered after its commit: the job was QUEUED, so COMPLETED is the rerun.
    assert_eq!(
        (server.stats.tokenize_calls(), server.stats.embed_calls()),
        (2, 3),
        "both steps ran again"
    );
    let (_, retried) = events(&node, &job_id).await;
    assert_eq!(detail(&retried[1])["fromStep"], "tokenize");
    // Each re-run is called with a key of its own, so a target's idempotency cache
    // cannot answer it with the first run's result.
    assert_eq!(
        keys_of(&server, "Embed"),
        [
            format!("{job_id}/embed"),
            format!("{job_id}/embed/rerun-1"),
            format!("{job_id}/embed/rerun-2")
        ]
    );
    node.stop().await;
}

/// The idempotency keys a fixture method was called with, in order.
fn keys_of(server: &FixtureServer, method: &str) -> Vec<String> {
    server
        .stats
        .calls()
        .iter()
        .filter(|call| call.method == method)
        .map(|call| {
            call.metadata
                .iter()
                .find(|(name, _)| name == "idempotency-key")
                .unwrap()
                .1
                .clone()
        })
        .collect()
}

/// After `tokenize` checkpointed and `embed` failed UNAVAILABLE (its effect may be
/// done), a retry `fromStep: embed` drops no checkpoint of `embed`'s: it only resumes
/// it, so `embed` keeps its key and a target that deduplicates by key does its effect
/// once. Only a step whose checkpoint a retry dropped is called with a new key.
/// Before, every step after such a retry was called with `.../rerun-1`.
#[tokio::test]
async fn a_step_a_retry_only_resumes_keeps_its_idempotency_key() {
    let db = TestDatabase::create().await;
    let down = Arc::new(AtomicBool::new(true));
    let server = FixtureServer::start_with(FixtureOptions {
        embed_unavailable: Some(down.clone()),
        ..FixtureOptions::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let answer = node
        .ok(
            "submit-workflow",
            json!({ "workflow": two_step_workflow(&server.target()), "input": { "text": "a" }, "maxAttempts": 1 }),
        )
        .await;
    let job_id = answer["jobId"].as_str().unwrap().to_owned();
    let dead = node.wait_for_status(&job_id, "DEAD", WAIT).await;
    assert_eq!(dead["checkpoints"].as_array().unwrap().len(), 1);
    down.store(false, Ordering::SeqCst);

    let answer = retry(&node, json!({ "jobId": job_id, "fromStep": "embed" })).await;
    assert_eq!(answer["checkpointsKept"], 1, "{answer}");
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(
        keys_of(&server, "Embed"),
        [format!("{job_id}/embed"), format!("{job_id}/embed")],
        "embed was only resumed: same key"
    );

    // Re-run from tokenize: both checkpoints dropped, both re-keyed once.
    retry(&node, json!({ "jobId": job_id, "fromStep": "tokenize" })).await;
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(
        keys_of(&server, "Tokenize"),
        [
            format!("{job_id}/tokenize"),
            format!("{job_id}/tokenize/rerun-1")
        ]
    );
    assert_eq!(
        keys_of(&server, "Embed").last().unwrap(),
        &format!("{job_id}/embed/rerun-1")
    );
    let row = node.job(&job_id).await;
    assert_eq!(row["step_reruns"], json!([1, 1]));

    // Both re-run again, and embed fails: the job holds one checkpoint but counts
    // re-runs for two steps. Resuming embed leaves its count (and key) alone.
    down.store(true, Ordering::SeqCst);
    retry(&node, json!({ "jobId": job_id, "fromStep": "tokenize" })).await;
    node.wait_for_status(&job_id, "DEAD", WAIT).await;
    down.store(false, Ordering::SeqCst);
    retry(&node, json!({ "jobId": job_id, "fromStep": "embed" })).await;
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    let embed = keys_of(&server, "Embed");
    assert_eq!(
        embed[embed.len() - 2..],
        [
            format!("{job_id}/embed/rerun-2"),
            format!("{job_id}/embed/rerun-2")
        ],
        "embed was only resumed: same key as the call that failed"
    );
    assert_eq!(node.job(&job_id).await["step_reruns"], json!([2, 2]));
    node.stop().await;
}

#[tokio::test]
async fn two_concurrent_retries_requeue_once_and_a_live_job_is_not_retried() {
    let db = TestDatabase::create().await;
    let (_server, idle, job_id) = one_queued_job(&db.url, FixtureOptions::default(), "a").await;
    let live = retry(&idle, json!({ "jobId": job_id })).await;
    assert_eq!(
        live["error"],
        "only DEAD, FAILED or CANCELLED jobs are retried; this one is QUEUED"
    );
    idle.ok("cancel-job", json!({ "jobId": job_id, "reason": "r" }))
        .await;

    let body = json!({ "jobId": job_id, "maxAttempts": 7 });
    let (a, b) = tokio::join!(retry(&idle, body.clone()), retry(&idle, body));
    let outcomes = [a["outcome"].clone(), b["outcome"].clone()];
    assert!(
        outcomes.contains(&json!("RETRIED")) && outcomes.contains(&json!("WRONG_STATE")),
        "{a} {b}"
    );
    let job = idle.job(&job_id).await;
    assert_eq!(
        (&job["status"], &job["max_attempts"], &job["attempt"]),
        (&json!("QUEUED"), &json!(7), &json!(0))
    );
    assert_eq!(job["cancel_requested"], false);
    assert_eq!(job["cancel_reason"], Value::Null);
    let (types, _) = events(&idle, &job_id).await;
    assert_eq!(types, ["ACCEPTED", "CANCELLED", "RETRIED"]);
}

#[tokio::test]
async fn a_retry_with_hostile_values_is_refused_and_changes_nothing() {
    let db = TestDatabase::create().await;
    let (_server, idle, job_id) = one_queued_job(&db.url, FixtureOptions::default(), "a").await;
    idle.ok("cancel-job", json!({ "jobId": job_id, "reason": "r" }))
        .await;
    for body in [
        json!({ "jobId": "not-a-uuid" }),
        json!({ "jobId": job_id, "maxAttempts": 101 }),
        json!({ "jobId": job_id, "maxAttempts": -1 }),
        json!({ "jobId": job_id, "fromStep": "s".repeat(201) }),
        json!({ "jobId": job_id, "reason": "r".repeat(501) }),
        json!({ "jobId": job_id, "fromStep": "'; DROP TABLE workflow_run; --" }),
    ] {
        let (status, answer) = idle.call("retry-job", body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
    }
    assert_eq!(idle.job(&job_id).await["status"], "CANCELLED");
    let unknown = uuid::Uuid::now_v7().to_string();
    let missing = retry(&idle, json!({ "jobId": unknown, "fromStep": "embed" })).await;
    assert_eq!(missing["error"], format!("no workflow run {unknown}"));

    // A job FAILED at submission never ran: retrying it would skip the checks that
    // refused it.
    let refused = jobs_role::store::NewJob {
        job_id: uuid::Uuid::now_v7(),
        workflow_name: "embed-text".into(),
        definition: Arc::new(json!({})),
        definition_digest: None,
        priority: jobs_role::store::DEFAULT_PRIORITY,
        run_after: Default::default(),
        input: json!({ "text": 5 }),
        max_attempts: 1,
        trace_context: None,
        by_name: true,
        concurrency: Vec::new(),
        dedupe: None,
        schedule: None,
        metadata: None,
    };
    idle.store
        .insert_failed_job(&refused, "INPUT: text: a string is expected")
        .await
        .unwrap();
    let answer = retry(&idle, json!({ "jobId": refused.job_id.to_string() })).await;
    assert_eq!(answer["outcome"], "WRONG_STATE", "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("submit it again")
    );
    assert_eq!(
        idle.job(&refused.job_id.to_string()).await["status"],
        "FAILED"
    );
}
