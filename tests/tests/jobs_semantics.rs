//! Engine semantics through the real node: what a job and `run-workflow` do when a
//! gate closes over a human step, and when a response has no JSON form.

use std::time::Duration;

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::json;
use workflow::testkit::{
    FixtureServer, UNENCODABLE_TEXT, three_step_workflow, unencodable_response_workflow,
};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn an_external_step_whose_gate_is_closed_is_skipped_and_the_job_completes() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 1)).await;
    let mut workflow = three_step_workflow(&server.target());
    workflow["steps"][1]["when"] = json!("size(tokenize.ids) > 3");

    let skipped = node.submit(&workflow, json!({ "text": "hi" })).await;
    let job = node.wait_for_status(&skipped, "COMPLETED", WAIT).await;
    let checkpoints: Vec<(String, bool)> = job["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_owned(), c["skipped"] == true))
        .collect();
    assert_eq!(
        checkpoints,
        [
            ("tokenize".to_owned(), false),
            ("review".to_owned(), true),
            ("embed".to_owned(), false)
        ]
    );
    // Its checkpoint event says it was skipped; the others do not.
    let events = node.ok("get-job", json!({ "jobId": skipped })).await["job"]["events"].clone();
    let checkpointed: Vec<(String, bool)> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "STEP_CHECKPOINT")
        .map(|e| {
            (
                e["step"].as_str().unwrap().to_owned(),
                e["detail"]["skipped"] == true,
            )
        })
        .collect();
    assert_eq!(
        checkpointed,
        [
            ("tokenize".to_owned(), false),
            ("review".to_owned(), true),
            ("embed".to_owned(), false)
        ]
    );

    let parked = node
        .submit(&workflow, json!({ "text": "long enough" }))
        .await;
    let job = node.wait_for_status(&parked, "WAITING", WAIT).await;
    assert_eq!(job["outstanding_step"], "review", "an open gate parks");

    // The synchronous verb runs the gated-off workflow too.
    let ran = node
        .ok(
            "run-workflow",
            json!({ "workflow": workflow, "input": { "text": "hi" } }),
        )
        .await;
    assert_eq!(ran["ok"], true, "{ran}");
    node.stop().await;
}

#[tokio::test]
async fn a_response_with_no_json_form_fails_the_job_loud_and_run_workflow_says_so() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 1)).await;
    let workflow = unencodable_response_workflow(&server.target());
    let input = json!({ "text": UNENCODABLE_TEXT });

    let ran = node
        .ok(
            "run-workflow",
            json!({ "workflow": workflow, "input": input }),
        )
        .await;
    assert_eq!(ran["ok"], false, "{ran}");
    assert!(
        ran["error"]
            .as_str()
            .unwrap()
            .starts_with("WORKFLOW: step 'tokenize': its response cannot be stored"),
        "{ran}"
    );

    let job_id = node.submit(&workflow, input).await;
    let job = node.wait_for_status(&job_id, "FAILED", WAIT).await;
    assert!(
        job["error"]
            .as_str()
            .unwrap()
            .starts_with("WORKFLOW: step 'tokenize': its response cannot be stored"),
        "{job}"
    );
    assert_eq!(job["checkpoints"], json!([]), "no null checkpoint");
    assert_eq!(job["attempt"], 1, "not retried");
    assert_eq!(server.stats.tokenize_calls(), 2, "once per run");
    node.stop().await;
}
