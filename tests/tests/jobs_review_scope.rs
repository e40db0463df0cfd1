//! The `jobs:review` scope and a step's `reviewerSees`: a reviewer's token answers and
//! rejects parked steps and reads the inbox, and sees of a parked job only the step's
//! request, its form and what `reviewerSees` lists; never the input or the other
//! steps' responses when the step says so. An operator's token (`jobs:read`) reads
//! the whole job. Real PostgreSQL, real fixture servers, two tokens.

use std::time::Duration;

use http::StatusCode;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, call_as, test_config};
use registry_stub::auth::{AuthConfig, TokenConfig};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, two_step_workflow};

const WAIT: Duration = Duration::from_secs(30);
const OPERATOR: &str = "operator-token-0123456789";
const REVIEWER: &str = "reviewer-token-0123456789";
/// What the reviewer must never be shown.
const SECRET: &str = "SECRET-ada@example.com";

fn token(name: &str, token: &str, scopes: &[&str]) -> TokenConfig {
    TokenConfig {
        name: name.into(),
        token: token.into(),
        token_sha256: None,
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        requests_per_minute: None,
        max_body_bytes: None,
    }
}

/// A database, the fixture targets and a node with both tokens.
async fn started() -> (TestDatabase, FixtureServer, JobsNode) {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = node(&db).await;
    (db, server, node)
}

async fn node(db: &TestDatabase) -> JobsNode {
    let auth = AuthConfig {
        tokens: vec![
            token("operator", OPERATOR, &["*"]),
            token("reviewer", REVIEWER, &["jobs:review"]),
        ],
    };
    JobsNode::start_with_auth(test_config(&db.url, "review-scope", 2), Some(auth)).await
}

/// tokenize → embed → review, the review shown the embedding's values only (never
/// the text); with `sees` as the review step's `reviewerSees` (none: the node's
/// default).
fn redacting_workflow(target: &str, name: &str, sees: Option<&[&str]>) -> Value {
    let mut workflow = two_step_workflow(target);
    workflow["name"] = json!(name);
    workflow.as_object_mut().unwrap().remove("output");
    let mut review = json!({
        "name": "review", "completion": "external", "requestType": "jobs.test.Vector",
        "rules": ["values = embed.values"], "outputType": "jobs.test.Review", "validate": true,
    });
    if let Some(sees) = sees {
        review["reviewerSees"] = json!(sees);
    }
    workflow["steps"].as_array_mut().unwrap().push(review);
    workflow
}

async fn ok_as(node: &JobsNode, token: &str, verb: &str, body: Value) -> Value {
    let (status, answer) = call_as(&node.router, Some(token), verb, body).await;
    assert_eq!(status, StatusCode::OK, "{verb}: {answer}");
    answer
}

async fn parked_job(node: &JobsNode, workflow: &Value) -> String {
    let answer = ok_as(
        node,
        OPERATOR,
        "submit-workflow",
        json!({ "workflow": workflow, "input": { "text": format!("{SECRET} wrote a b c") },
                "metadata": { "customer": "acme" } }),
    )
    .await;
    let job_id = answer["jobId"].as_str().unwrap().to_owned();
    node.wait_for_status(&job_id, "WAITING", WAIT).await;
    job_id
}

#[tokio::test]
async fn a_reviewer_sees_the_request_and_the_form_and_never_the_input() {
    let (_db, server, node) = started().await;
    let workflow = redacting_workflow(&server.target(), "redact", Some(&["request"]));
    let job_id = parked_job(&node, &workflow).await;

    // The operator reads everything.
    let full = ok_as(&node, OPERATOR, "get-job", json!({ "jobId": job_id })).await;
    assert!(full.to_string().contains(SECRET), "{full}");

    // The reviewer: the request, what the view holds, nothing else.
    let mut seen = Vec::new();
    let job = ok_as(
        &node,
        REVIEWER,
        "get-job",
        json!({ "jobId": job_id, "include": ["definition"] }),
    )
    .await;
    let view = &job["job"];
    assert_eq!(view["status"], "WAITING");
    assert_eq!(view["outstandingStep"], "review");
    // The fixture embedder answers [ids / 10, 1.0]; the tokenizer one id per character.
    let tokens = format!("{SECRET} wrote a b c").chars().count() as f64;
    assert_eq!(
        view["pendingRequest"],
        json!({ "values": [tokens / 10.0, 1.0] }),
        "{view}"
    );
    assert_eq!(view["reviewerSees"], json!(["request"]));
    assert_eq!(view["reviewer"], true);
    for hidden in [
        "input",
        "checkpoints",
        "metadata",
        "events",
        "steps",
        "workflowDefinition",
        "result",
        "error",
    ] {
        assert!(
            view.get(hidden).is_none(),
            "a reviewer was shown {hidden}: {view}"
        );
    }
    seen.push(job);
    let waited = ok_as(
        &node,
        REVIEWER,
        "get-job",
        json!({ "jobId": job_id, "waitMs": 100 }),
    )
    .await;
    seen.push(waited);
    // The inbox: WAITING jobs, trimmed.
    let listed = ok_as(&node, REVIEWER, "list-jobs", json!({})).await;
    assert_eq!(listed["jobs"][0]["jobId"], json!(job_id));
    assert_eq!(listed["jobs"][0]["outstandingStep"], "review");
    seen.push(listed);
    seen.push(
        ok_as(
            &node,
            REVIEWER,
            "list-jobs",
            json!({ "status": "WAITING", "oldestFirst": true }),
        )
        .await,
    );
    // The form of the answer, and the answer checked, then given.
    seen.push(
        ok_as(
            &node,
            REVIEWER,
            "get-form",
            json!({ "jobId": job_id, "stepName": "review" }),
        )
        .await,
    );
    let answer = json!({ "notes": "fine", "score": 7 });
    let checked = ok_as(
        &node,
        REVIEWER,
        "complete-step",
        json!({ "jobId": job_id, "stepName": "review", "response": answer, "dryRun": true }),
    )
    .await;
    assert_eq!(checked["outcome"], "VALID", "{checked}");
    seen.push(checked);
    let done = ok_as(
        &node,
        REVIEWER,
        "complete-step",
        json!({ "jobId": job_id, "stepName": "review", "response": answer }),
    )
    .await;
    assert_eq!(done["outcome"], "COMPLETED", "{done}");
    seen.push(done);
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    // A job no longer parked: its status only.
    let finished = ok_as(&node, REVIEWER, "get-job", json!({ "jobId": job_id })).await;
    assert_eq!(
        finished["job"],
        json!({ "jobId": job_id, "workflowName": "redact", "status": "COMPLETED", "reviewer": true })
    );
    seen.push(finished);
    for answer in &seen {
        assert!(
            !answer.to_string().contains(SECRET),
            "a reviewer was shown the input: {answer}"
        );
    }

    // What the scope does not reach: other statuses, metadata filters, the fleet,
    // the event stream, submitting, operator acts.
    for (verb, body) in [
        ("list-jobs", json!({ "status": "COMPLETED" })),
        ("list-jobs", json!({ "metadata": { "customer": "acme" } })),
        ("list-jobs", json!({ "parentJobId": job_id })),
        ("list-jobs", json!({ "priority": 5 })),
        ("get-form", json!({ "workflowName": "redact" })),
        ("get-fleet", json!({})),
        (
            "get-job-items",
            json!({ "jobId": job_id, "stepName": "review" }),
        ),
        (
            "submit-workflow",
            json!({ "workflow": workflow, "input": { "text": "x" } }),
        ),
        (
            "retry-job",
            json!({ "jobId": job_id, "fromStep": "review" }),
        ),
        ("cancel-job", json!({ "jobId": job_id, "reason": "no" })),
    ] {
        let (status, refused) = call_as(&node.router, Some(REVIEWER), verb, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{verb}: {refused}");
        assert!(!refused.to_string().contains(SECRET));
    }
    let (status, _) = protomolt_e2e::jobs::http_get_as(
        &node.router,
        &format!("/v1/jobs/{job_id}/events"),
        REVIEWER,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    node.stop().await;
}

#[tokio::test]
async fn what_a_reviewer_sees_follows_the_step_and_a_step_without_the_key_shows_everything() {
    let (_db, server, node) = started().await;
    // As before the key existed: everything.
    let open = parked_job(&node, &redacting_workflow(&server.target(), "open", None)).await;
    let view = &ok_as(&node, REVIEWER, "get-job", json!({ "jobId": open })).await["job"];
    assert!(
        view["input"]["text"].as_str().unwrap().contains(SECRET),
        "{view}"
    );
    assert_eq!(view["checkpoints"][0]["name"], "tokenize");
    assert_eq!(view["metadata"], json!({ "customer": "acme" }));
    assert_eq!(
        view["reviewerSees"],
        json!(["request", "input", "responses", "metadata"])
    );
    // The input, not the other steps' responses or the metadata.
    let some = parked_job(
        &node,
        &redacting_workflow(&server.target(), "some", Some(&["request", "input"])),
    )
    .await;
    let view = &ok_as(&node, REVIEWER, "get-job", json!({ "jobId": some })).await["job"];
    assert!(
        view.get("input").is_some()
            && view.get("checkpoints").is_none()
            && view.get("metadata").is_none(),
        "{view}"
    );
    // A reviewer rejects too.
    let rejected = ok_as(
        &node,
        REVIEWER,
        "reject-step",
        json!({ "jobId": some, "stepName": "review", "reason": "unclear" }),
    )
    .await;
    assert_eq!(rejected["outcome"], "REJECTED", "{rejected}");
    node.stop().await;
}

#[tokio::test]
async fn reviewer_sees_is_checked_where_the_workflow_is_accepted() {
    let (_db, server, node) = started().await;
    let mut on_a_call = redacting_workflow(&server.target(), "wrong", Some(&["request"]));
    on_a_call["steps"][0]["reviewerSees"] = json!(["input"]);
    let misspelled = redacting_workflow(&server.target(), "typo", Some(&["inputs"]));
    let not_a_list = {
        let mut w = redacting_workflow(&server.target(), "scalar", None);
        w["steps"][2]["reviewerSees"] = json!("request");
        w
    };
    for (workflow, expected) in [
        (
            on_a_call,
            "$.steps[0].reviewerSees (step 'tokenize'): only an external step",
        ),
        (misspelled, "did you mean 'input'?"),
        (not_a_list, "'reviewerSees' must be a list"),
    ] {
        let (status, refused) = call_as(
            &node.router,
            Some(OPERATOR),
            "put-workflow",
            json!({ "workflow": workflow }),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert!(
            refused["message"].as_str().unwrap().contains(expected),
            "{refused}"
        );
    }
    node.stop().await;
}

#[test]
fn the_nodes_default_is_checked_at_start_up() {
    let mut config = test_config("postgres://localhost/x", "w", 1);
    config.reviewer_sees = vec!["request".into(), "inputs".into()];
    let error = config.check().unwrap_err();
    assert!(
        error.starts_with("jobs.reviewer_sees: 'inputs' is not something a reviewer can be shown: did you mean 'input'?"),
        "{error}"
    );
    config.reviewer_sees = vec!["request".into()];
    assert_eq!(
        config.reviewer_sees().unwrap(),
        workflow::ReviewerSees::REQUEST_ONLY
    );
}
