//! A newcomer's first hour (issue 15), through the real node: every place a new user
//! got stuck or was misled, each asserted where it now explains itself.

use std::time::Duration;

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, two_step_workflow};

const WAIT: Duration = Duration::from_secs(30);

async fn row_count(db: &TestDatabase) -> i64 {
    db.connect()
        .await
        .query_one("SELECT count(*) FROM workflow_run", &[])
        .await
        .unwrap()
        .get(0)
}

/// The finding at `path`, or a panic naming every finding.
fn finding<'a>(answer: &'a Value, path: &str) -> &'a Value {
    answer["details"]
        .as_array()
        .and_then(|details| details.iter().find(|d| d["path"] == path))
        .unwrap_or_else(|| panic!("no finding at {path}: {answer:#}"))
}

#[tokio::test]
async fn a_gate_with_a_typo_or_a_non_boolean_result_is_refused_when_submitted() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "idle", 0)).await;

    for (gate, expected) in [
        (
            "size(tokenize.idz) > 3",
            "jobs.test.Tokens has no field 'idz'; did you mean 'ids'?",
        ),
        (
            "tokenize.ids",
            "`when` must be a boolean, but `tokenize.ids` is a list",
        ),
    ] {
        let mut workflow = two_step_workflow(&server.target());
        workflow["steps"][1]["when"] = json!(gate);
        let (status, answer) = node
            .call(
                "submit-workflow",
                json!({ "workflow": workflow, "input": { "text": "x" } }),
            )
            .await;
        assert_eq!(status, 400, "{gate}: {answer}");
        let found = finding(&answer, "$.steps[1].when");
        assert_eq!(found["step"], "embed", "{answer}");
        let message = found["message"].as_str().unwrap_or_default();
        assert!(message.contains(expected), "{gate}: {message}");
    }
    assert_eq!(row_count(&db).await, 0, "a refused workflow writes nothing");
    node.stop().await;
}

#[tokio::test]
async fn rule_breaks_read_as_sentences_and_names_are_suggested() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "idle", 0)).await;

    // A standard rule the validator reports without a message.
    let (status, answer) = node.call("get-job", json!({ "jobId": "nope" })).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("jobId must be a UUID"),
        "a sentence, not a rule id: {message}"
    );
    assert_eq!(answer["details"][0]["rule"], "string.uuid", "{answer}");

    // A type named without its package.
    let mut workflow = two_step_workflow(&server.target());
    workflow["inputType"] = json!("Text");
    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "workflow": workflow, "input": { "text": "x" } }),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    let message = finding(&answer, "$.inputType")["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("did you mean 'jobs.test.Text'?"),
        "{message}"
    );

    // A misspelled verb.
    let (status, answer) = node.call("get-jobb", json!({})).await;
    assert_eq!(status, 404);
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or_default()
            .contains("did you mean 'get-job'?"),
        "{answer}"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_get_on_a_verb_answers_405_naming_post() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let response = tower::ServiceExt::oneshot(
        node.router.clone(),
        http::Request::get("/v1/actions/list-jobs")
            .body(axum::body::Body::empty())
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "POST");
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["code"], "method_not_allowed", "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or_default()
            .contains("POST /v1/actions/list-jobs"),
        "{answer}"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_wrongly_typed_answer_names_its_field() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "w", 2)).await;
    let job_id = node
        .submit(
            &workflow::testkit::three_step_workflow(&server.target()),
            json!({ "text": "hello" }),
        )
        .await;
    node.wait_for_status(&job_id, "WAITING", WAIT).await;

    let (status, answer) = node
        .call(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "review", "response": { "score": "x" } }),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("response.score: expected ") && message.contains("got string \"x\""),
        "{message}"
    );
    assert!(message.contains("jobs.test.Review"), "{message}");
    let job = node.job(&job_id).await;
    assert_eq!(job["status"], "WAITING", "nothing written: {job}");
    node.stop().await;
}
