//! Parked steps that end: a wait that runs out (the step's `waitTimeoutMs`, or the
//! node's default) settles the job per `onTimeout`, and `reject-step` fails it as a
//! verdict. Real PostgreSQL, real fixture servers.

use std::time::Duration;

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, three_step_workflow};

const WAIT: Duration = Duration::from_secs(30);

/// The review workflow with `review`'s wait set as given.
fn review_waiting(server: &FixtureServer, wait: Option<u64>, on_timeout: Option<&str>) -> Value {
    let mut workflow = three_step_workflow(&server.target());
    if let Some(ms) = wait {
        workflow["steps"][1]["waitTimeoutMs"] = json!(ms);
    }
    if let Some(on_timeout) = on_timeout {
        workflow["steps"][1]["onTimeout"] = json!(on_timeout);
    }
    workflow
}

async fn event_types(node: &JobsNode, job_id: &str) -> Vec<String> {
    node.store
        .job_events(uuid::Uuid::parse_str(job_id).unwrap())
        .await
        .unwrap()
        .into_iter()
        .map(|row| row.event_type)
        .collect()
}

fn answer_review(job_id: &str) -> Value {
    json!({ "jobId": job_id, "stepName": "review", "response": { "notes": "ok", "score": 2 } })
}

#[tokio::test]
async fn a_parked_step_whose_wait_runs_out_lands_failed_with_the_timeout_sentence() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let job_id = node
        .submit(
            &review_waiting(&server, Some(1000), None),
            json!({ "text": "a" }),
        )
        .await;
    let parked = node.wait_for_status(&job_id, "WAITING", WAIT).await;
    assert_eq!(parked["wait_timeout_ms"], 1000, "{parked}");
    assert_eq!(parked["on_timeout"], "fail");
    assert!(parked["wait_until"].is_string());

    let job = node.wait_for_status(&job_id, "FAILED", WAIT).await;
    assert_eq!(
        job["error"],
        "TIMEOUT: step 'review' was not answered within 1000 ms"
    );
    assert_eq!(
        (&job["outstanding_step"], &job["wait_until"]),
        (&Value::Null, &Value::Null)
    );
    assert_eq!(
        event_types(&node, &job_id).await,
        ["ACCEPTED", "STEP_CHECKPOINT", "WAITING", "FAILED"]
    );
    let rows = node
        .store
        .job_events(uuid::Uuid::parse_str(&job_id).unwrap())
        .await
        .unwrap();
    use jobs_proto::WireMessage;
    let failed =
        jobs_proto::v1::WorkflowRunEvent::decode_validated(&rows.last().unwrap().payload).unwrap();
    assert_eq!(
        failed.step, "review",
        "the event names the step whose wait ran out"
    );
    let late = node.ok("complete-step", answer_review(&job_id)).await;
    assert_eq!(late["outcome"], "WRONG_STATE", "{late}");
    assert_eq!(server.stats.embed_calls(), 0);
    node.stop().await;
}

#[tokio::test]
async fn the_node_default_wait_applies_to_steps_without_their_own_and_dead_means_dead() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let mut config = test_config(&db.url, "busy", 2);
    config.wait_timeout_ms = Some(500);
    let node = JobsNode::start(config).await;
    let job_id = node
        .submit(
            &review_waiting(&server, None, Some("dead")),
            json!({ "text": "a" }),
        )
        .await;
    let job = node.wait_for_status(&job_id, "DEAD", WAIT).await;
    assert_eq!(
        job["error"],
        "TIMEOUT: step 'review' was not answered within 500 ms"
    );
    assert_eq!(event_types(&node, &job_id).await.last().unwrap(), "DEAD");
    node.stop().await;
}

#[tokio::test]
async fn a_parked_step_without_a_wait_waits_for_its_answer() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let job_id = node
        .submit(&review_waiting(&server, None, None), json!({ "text": "a" }))
        .await;
    let parked = node.wait_for_status(&job_id, "WAITING", WAIT).await;
    assert_eq!(parked["wait_until"], Value::Null, "{parked}");
    // Its answer still lands after a sweep or two.
    let swept = node.store.time_out_parked_steps(100).await.unwrap();
    assert_eq!((swept.failed, swept.dead), (0, 0));
    let answered = node.ok("complete-step", answer_review(&job_id)).await;
    assert_eq!(answered["outcome"], "COMPLETED", "{answered}");
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(job["wait_until"], Value::Null);
    node.stop().await;
}

#[tokio::test]
async fn reject_step_fails_a_parked_job_as_a_verdict_behind_the_same_gate() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let job_id = node
        .submit(
            &review_waiting(&server, Some(3_600_000), None),
            json!({ "text": "a" }),
        )
        .await;
    node.wait_for_status(&job_id, "WAITING", WAIT).await;

    // The gate: a step that is not external, a step that does not exist, no reason.
    for (body, needle) in [
        (
            json!({ "jobId": job_id, "stepName": "tokenize", "reason": "x" }),
            "called by the engine",
        ),
        (
            json!({ "jobId": job_id, "stepName": "nope", "reason": "x" }),
            "has no step 'nope'",
        ),
        (json!({ "jobId": job_id, "stepName": "review" }), "reason"),
        (
            json!({ "jobId": job_id, "stepName": "review", "reason": "r".repeat(501) }),
            "reason",
        ),
        (
            json!({ "jobId": "not-a-uuid", "stepName": "review", "reason": "x" }),
            "jobId",
        ),
    ] {
        let (status, answer) = node.call("reject-step", body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer.to_string().contains(needle), "{body}: {answer}");
    }
    assert_eq!(node.job(&job_id).await["status"], "WAITING");

    let rejected = node
        .ok(
            "reject-step",
            json!({ "jobId": job_id, "stepName": "review", "reason": "not good enough" }),
        )
        .await;
    assert_eq!(
        rejected,
        json!({
            "ok": true, "outcome": "REJECTED", "status": "FAILED",
            "error": "REJECTED: step 'review': not good enough",
        })
    );
    let job = node.job(&job_id).await;
    assert_eq!(job["verdict"], "not good enough");
    assert_eq!(job["wait_until"], Value::Null);
    assert_eq!(event_types(&node, &job_id).await.last().unwrap(), "FAILED");
    // A resend of the rejection is recognised; an answer after it is not taken.
    let resent = node
        .ok(
            "reject-step",
            json!({ "jobId": job_id, "stepName": "review", "reason": "again" }),
        )
        .await;
    assert_eq!(
        resent,
        json!({ "ok": true, "outcome": "ALREADY_REJECTED", "status": "FAILED" })
    );
    let late = node.ok("complete-step", answer_review(&job_id)).await;
    assert_eq!(late["outcome"], "WRONG_STATE", "{late}");
    assert_eq!(late["status"], "FAILED");

    // A rejection that comes after the step was answered rejects nothing.
    let answered = node
        .submit(&review_waiting(&server, None, None), json!({ "text": "b" }))
        .await;
    node.wait_for_status(&answered, "WAITING", WAIT).await;
    node.ok("complete-step", answer_review(&answered)).await;
    let too_late = node
        .ok(
            "reject-step",
            json!({ "jobId": answered, "stepName": "review", "reason": "late" }),
        )
        .await;
    assert_eq!(too_late["ok"], false, "{too_late}");
    assert_eq!(too_late["outcome"], "ALREADY_DONE", "{too_late}");
    node.wait_for_status(&answered, "COMPLETED", WAIT).await;
    node.stop().await;
}
