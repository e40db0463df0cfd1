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

/// The first entry of the array `value[list]` whose `key` is `wanted`, or a panic
/// showing `value`.
fn entry<'a>(value: &'a Value, list: &str, key: &str, wanted: &str) -> &'a Value {
    value[list]
        .as_array()
        .and_then(|entries| entries.iter().find(|e| e[key] == wanted))
        .unwrap_or_else(|| panic!("no {list} entry with {key} {wanted}: {value:#}"))
}

/// The finding at `path`.
fn finding<'a>(answer: &'a Value, path: &str) -> &'a Value {
    entry(answer, "details", "path", path)
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

/// tokenize → embed (a called step that can be made to fail) → review (external).
fn embed_then_review(target: &str) -> Value {
    use workflow::testkit::{step, workflow};
    let mut review = step(
        "review",
        target,
        "jobs.test.ReviewDesk/Review",
        &["text = input.text"],
    );
    review["completion"] = json!("external");
    workflow(
        "embed-then-review",
        vec![
            step(
                "tokenize",
                target,
                "jobs.test.Tokenizer/Tokenize",
                &["text = input.text"],
            ),
            step(
                "embed",
                target,
                "jobs.test.Embedder/Embed",
                &["ids = tokenize.ids"],
            ),
            review,
        ],
        None,
    )
}

#[tokio::test]
async fn a_waiting_job_shows_no_stale_error_and_an_answer_says_the_job_resumes() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let db = TestDatabase::create().await;
    let down = Arc::new(AtomicBool::new(true));
    let server = FixtureServer::start_with(workflow::testkit::FixtureOptions {
        embed_unavailable: Some(down.clone()),
        ..Default::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "w", 2)).await;
    let job_id = node
        .submit(
            &embed_then_review(&server.target()),
            json!({ "text": "hi" }),
        )
        .await;
    protomolt_e2e::jobs::eventually("the first attempt to fail", WAIT, || async {
        node.job(&job_id).await["error"]
            .as_str()
            .is_some_and(|e| e.contains("UNAVAILABLE"))
    })
    .await;
    down.store(false, Ordering::SeqCst);
    let waiting = node.wait_for_status(&job_id, "WAITING", WAIT).await;
    assert!(
        waiting["error"].is_null(),
        "the retried attempt's error is gone once the steps succeeded: {waiting}"
    );

    let answer = node
        .ok(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "review", "response": { "notes": "fine" } }),
        )
        .await;
    assert_eq!(answer["outcome"], "COMPLETED", "{answer}");
    assert_eq!(answer["resumes"], true, "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the job resumes after step 'review'") && message.contains("not a retry"),
        "{message}"
    );
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    node.stop().await;
}

/// tokenize → approve: an external step declared by its types alone, no service.
fn approval_by_types(target: &str) -> Value {
    use workflow::testkit::{step, workflow};
    workflow(
        "approve-tokens",
        vec![
            step(
                "tokenize",
                target,
                "jobs.test.Tokenizer/Tokenize",
                &["text = input.text"],
            ),
            json!({
                "name": "approve", "completion": "external",
                "requestType": "jobs.test.Tokens", "rules": ["ids = tokenize.ids"],
                "outputType": "jobs.test.Review",
            }),
        ],
        None,
    )
}

/// The job's event of `kind`, as get-job lists it.
fn event<'a>(job: &'a Value, kind: &str) -> &'a Value {
    entry(job, "events", "type", kind)
}

#[tokio::test]
async fn a_human_step_declared_by_its_types_shows_its_request_and_the_result_reaches_the_events() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "w", 2)).await;
    let job_id = node
        .submit(
            &approval_by_types(&server.target()),
            json!({ "text": "abc" }),
        )
        .await;
    let waiting = node.wait_for_status(&job_id, "WAITING", WAIT).await;
    // The fixture tokenizer answers the text's code points.
    let built = json!({ "ids": [97, 98, 99] });
    assert_eq!(waiting["pending_request"], built, "{waiting}");
    let job = node.ok("get-job", json!({ "jobId": job_id })).await["job"].clone();
    assert_eq!(job["pendingRequest"], built, "get-job shows it");
    // Numbers in an event's detail are a Struct's doubles.
    assert_eq!(
        event(&job, "WAITING")["detail"]["pendingRequest"],
        json!({ "ids": [97.0, 98.0, 99.0] }),
        "the WAITING event carries it"
    );
    assert_eq!(event(&job, "WAITING")["step"], "approve");

    let answer = node
        .ok(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "approve", "response": { "notes": "ok", "score": 7 } }),
        )
        .await;
    assert_eq!(answer["outcome"], "COMPLETED", "{answer}");
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    let job = node.ok("get-job", json!({ "jobId": job_id })).await["job"].clone();
    assert!(job["pendingRequest"].is_null(), "answered: {job}");
    let completed = event(&job, "COMPLETED");
    assert_eq!(
        completed["detail"]["result"],
        json!({ "notes": "ok", "score": 7.0 }),
        "the COMPLETED event carries the result: {completed}"
    );
    assert!(completed["detail"].get("resultCut").is_none());
    node.stop().await;
}

#[tokio::test]
async fn a_target_with_a_scheme_is_refused_and_a_closed_port_is_named_in_the_error() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "w", 1)).await;

    let mut workflow = two_step_workflow("http://127.0.0.1:50071");
    workflow["steps"][1]["target"] = json!("127.0.0.1:50071");
    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "workflow": workflow, "input": { "text": "x" } }),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    let message = finding(&answer, "$.steps[0].target")["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("has a scheme") && message.contains("write '127.0.0.1:50071'"),
        "{message}"
    );
    assert_eq!(row_count(&db).await, 0);

    // A port nobody listens on: the error names the address.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let job_id = node
        .submit(
            &two_step_workflow(&closed.to_string()),
            json!({ "text": "x" }),
        )
        .await;
    protomolt_e2e::jobs::eventually("the failed call's error", WAIT, || async {
        node.job(&job_id).await["error"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("(the connection to target {closed} failed)")))
    })
    .await;
    node.stop().await;
}

#[tokio::test]
async fn a_pending_request_is_cleared_when_the_job_stops_waiting_without_an_answer() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "w", 2)).await;
    let job_id = node
        .submit(
            &approval_by_types(&server.target()),
            json!({ "text": "abc" }),
        )
        .await;
    let waiting = node.wait_for_status(&job_id, "WAITING", WAIT).await;
    assert!(waiting["pending_request"].is_object(), "{waiting}");
    node.ok(
        "cancel-job",
        json!({ "jobId": job_id, "reason": "no longer needed" }),
    )
    .await;
    let cancelled = node.wait_for_status(&job_id, "CANCELLED", WAIT).await;
    assert!(cancelled["pending_request"].is_null(), "{cancelled}");
    node.stop().await;
}

#[tokio::test]
async fn a_job_accepted_before_the_gate_checks_still_runs() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "w", 2)).await;
    // The checker refuses this gate (`||` of a list), yet it runs: the left side is
    // true. A job stored before the check existed must still complete.
    let mut workflow = two_step_workflow(&server.target());
    workflow["steps"][1]["when"] = json!("true || tokenize.ids");
    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "workflow": workflow, "input": { "text": "x" } }),
        )
        .await;
    assert_eq!(
        status, 400,
        "a new submission is held to the check: {answer}"
    );
    protomolt_e2e::jobs::queue_jobs(&node.store, &workflow, 1).await;
    node.wait_for_count(jobs_role::JobStatus::Completed, 1, WAIT)
        .await;
    node.stop().await;
}
