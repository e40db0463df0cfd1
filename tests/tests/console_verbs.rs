//! The verbs the console reads with: `get-form` (a step's output type or a stored
//! workflow's input type, described for a form), `get-fleet`, and list-jobs' id
//! prefix and oldest-first order. Bad requests are refused naming the field.

use std::time::Duration;

use base64::Engine as _;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, three_step_workflow, two_step_workflow};

async fn node() -> (JobsNode, TestDatabase) {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "console-verbs", 2)).await;
    (node, db)
}

/// A job of the three-step fixture workflow parked on its `review` step, and the
/// fixture server it calls (keep it alive).
async fn parked_review(node: &JobsNode) -> (String, FixtureServer) {
    let server = FixtureServer::start().await;
    let job_id = node
        .submit(
            &three_step_workflow(&server.target()),
            json!({ "text": "hello" }),
        )
        .await;
    node.wait_for_status(&job_id, "WAITING", Duration::from_secs(30))
        .await;
    (job_id, server)
}

fn field<'a>(form: &'a Value, name: &str) -> &'a Value {
    form["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no field {name} in {form}"))
}

#[tokio::test]
async fn get_form_describes_a_parked_steps_output_type_from_the_jobs_own_snapshot() {
    let (node, _db) = node().await;
    let (job_id, _server) = parked_review(&node).await;

    let form = node
        .ok("get-form", json!({ "jobId": job_id, "stepName": "review" }))
        .await;
    assert_eq!(form["ok"], true);
    assert_eq!(form["messageType"], "jobs.test.Review");
    assert_eq!(form["validates"], true, "the review step validates");
    assert_eq!(
        form["messageRules"][0]["message"],
        "a scored review needs notes"
    );
    let score = field(&form, "score");
    assert_eq!(score["kind"], "int32");
    let ids: Vec<&str> = score["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["int32.gte", "int32.lte"]);
    assert_eq!(field(&form, "notes")["rules"][0]["id"], "string.max_len");

    // A step the engine calls can be described too (its output type).
    let tokens = node
        .ok(
            "get-form",
            json!({ "jobId": job_id, "stepName": "tokenize" }),
        )
        .await;
    assert_eq!(tokens["messageType"], "jobs.test.Tokens");
    assert_eq!(tokens["validates"], false);
    node.stop().await;
}

#[tokio::test]
async fn get_form_describes_a_stored_workflows_input_type() {
    let (node, _db) = node().await;
    let server = FixtureServer::start().await;
    node.ok(
        "put-workflow",
        json!({ "workflow": two_step_workflow(&server.target()) }),
    )
    .await;
    let form = node
        .ok("get-form", json!({ "workflowName": "embed-text" }))
        .await;
    assert_eq!(form["messageType"], "jobs.test.Text");
    assert_eq!(
        form["validates"], true,
        "submission checks the input's rules"
    );
    assert_eq!(field(&form, "fail")["kind"], "bool");
    node.stop().await;
}

#[tokio::test]
async fn get_form_refuses_what_it_cannot_describe_naming_the_field() {
    let (node, _db) = node().await;
    let (job_id, _server) = parked_review(&node).await;

    let cases = [
        (json!({}), "get_form.one_subject"),
        (
            json!({ "jobId": job_id, "stepName": "review", "workflowName": "embed-text" }),
            "get_form.one_subject",
        ),
        (json!({ "jobId": job_id }), "get_form.one_subject"),
        (json!({ "jobId": "not-a-uuid", "stepName": "x" }), "jobId"),
        (
            json!({ "jobId": job_id, "stepName": "nope" }),
            "stepName: workflow 'review-text' has no step 'nope'",
        ),
        (
            json!({ "workflowName": "never-stored" }),
            "workflowName: no stored workflow named 'never-stored'",
        ),
        (json!({ "workflowName": "x".repeat(201) }), "workflowName"),
    ];
    for (body, named) in cases {
        let (status, answer) = node.call("get-form", body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer.to_string().contains(named), "{body}: {answer}");
    }
    let unknown = uuid::Uuid::new_v4();
    let answer = node
        .ok(
            "get-form",
            json!({ "jobId": unknown.to_string(), "stepName": "review" }),
        )
        .await;
    assert_eq!(answer["ok"], false);
    assert_eq!(answer["error"], format!("no workflow run {unknown}"));
    node.stop().await;
}

#[tokio::test]
async fn get_form_of_a_hostile_schema_stays_bounded() {
    let (node, _db) = node().await;
    // A message that nests itself, and one with more fields than a form describes.
    let mut wide = String::from("message Wide {");
    for i in 1..=1_500 {
        wide.push_str(&format!(" string f{i} = {i};"));
    }
    wide.push('}');
    let source = format!(
        "syntax = \"proto3\"; package hostile; message Tree {{ string name = 1; repeated Tree children = 2; Wide wide = 3; }} {wide} service S {{ rpc Call(Tree) returns (Tree); }}"
    );
    let set = workflow::schema::compile_proto_source("hostile.proto", &source).unwrap();
    let workflow = json!({
        "name": "hostile-form",
        "schema": { "descriptorSetBase64": base64::engine::general_purpose::STANDARD.encode(set) },
        "inputType": "hostile.Tree",
        "steps": [{ "name": "human", "target": "127.0.0.1:9", "method": "hostile.S/Call",
                    "rules": ["name = input.name"], "completion": "external" }],
    });
    let job_id = node.submit(&workflow, json!({ "name": "root" })).await;
    let form = node
        .ok("get-form", json!({ "jobId": job_id, "stepName": "human" }))
        .await;
    assert_eq!(form["truncated"], true);
    let text = form.to_string();
    assert!(text.len() < 2_000_000, "{} bytes", text.len());
    // The recursion ends as a free-JSON field.
    let mut level = field(&form, "children");
    while level["kind"] == "message" {
        level = level["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "children")
            .unwrap();
    }
    assert_eq!(level["kind"], "json");
    node.stop().await;
}

#[tokio::test]
async fn list_jobs_finds_jobs_by_the_beginning_of_their_id_and_reads_oldest_first() {
    let (node, _db) = node().await;
    let server = FixtureServer::start().await;
    let workflow = two_step_workflow(&server.target());
    let ids = [
        "0192f0c4-0000-7000-8000-000000000001",
        "0192f0c4-0000-7000-8000-000000000002",
        "0192f0c5-0000-7000-8000-000000000003",
    ];
    for id in ids {
        node.ok(
            "submit-workflow",
            json!({ "workflow": workflow, "input": { "text": "x" }, "jobId": id, "delayMs": 3_600_000 }),
        )
        .await;
    }
    let listed = |answer: Value| -> Vec<String> {
        answer["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["jobId"].as_str().unwrap().to_owned())
            .collect()
    };
    let newest = listed(
        node.ok("list-jobs", json!({ "jobIdPrefix": "0192f0c4" }))
            .await,
    );
    assert_eq!(newest, [ids[1], ids[0]]);
    let oldest = listed(
        node.ok(
            "list-jobs",
            json!({ "jobIdPrefix": "0192F0C4-0000", "oldestFirst": true }),
        )
        .await,
    );
    assert_eq!(oldest, [ids[0], ids[1]]);
    let exact = listed(node.ok("list-jobs", json!({ "jobIdPrefix": ids[2] })).await);
    assert_eq!(exact, [ids[2]]);
    let none = listed(node.ok("list-jobs", json!({ "jobIdPrefix": "ffff" })).await);
    assert!(none.is_empty());

    for bad in [
        "xyz",
        "0192f0c4-0000-7000-8000-0000000000011",
        "%",
        "' OR 1=1 --",
    ] {
        let (status, answer) = node.call("list-jobs", json!({ "jobIdPrefix": bad })).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert!(answer.to_string().contains("jobIdPrefix"), "{answer}");
    }
    node.stop().await;
}

#[tokio::test]
async fn get_fleet_counts_live_and_recently_finished_jobs_and_the_outbox() {
    let (node, _db) = node().await;
    let server = FixtureServer::start().await;
    let workflow = two_step_workflow(&server.target());
    // One read answers every caller for a moment (the console's tabs poll it).
    let asked = std::time::Instant::now();
    let fleet = node.ok("get-fleet", json!({})).await;
    let again = node.ok("get-fleet", json!({})).await;
    assert!(
        again["readAt"] == fleet["readAt"]
            || asked.elapsed() >= jobs_role::actions::get_fleet::FLEET_FRESH_FOR,
        "one read shared: {fleet} / {again}"
    );
    assert_eq!(
        fleet["live"],
        json!({ "QUEUED": 0, "RUNNING": 0, "WAITING": 0 })
    );
    assert_eq!(
        fleet["lastHour"],
        json!({ "CANCELLED": 0, "COMPLETED": 0, "DEAD": 0, "FAILED": 0 })
    );

    let done = node.submit(&workflow, json!({ "text": "done" })).await;
    node.wait_for_status(&done, "COMPLETED", Duration::from_secs(30))
        .await;
    node.ok(
        "submit-workflow",
        json!({ "workflow": workflow, "input": { "text": "later" }, "delayMs": 3_600_000 }),
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let fleet = loop {
        let fleet = node.ok("get-fleet", json!({})).await;
        if fleet["live"]["QUEUED"] == 1 && fleet["lastHour"]["COMPLETED"] == 1 {
            break fleet;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never counted: {fleet}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    // Not claimable before its time: it does not age the queue.
    assert_eq!(fleet["oldestQueuedSeconds"], 0.0);
    // Kafka lanes off: the events wait in the outbox.
    assert!(fleet["outbox"]["pending"].as_i64().unwrap() >= 3, "{fleet}");
    assert!(fleet["readAt"].as_str().unwrap().ends_with('Z'), "{fleet}");
    node.stop().await;
}

#[tokio::test]
async fn complete_step_dry_run_checks_an_answer_and_writes_nothing() {
    let (node, _db) = node().await;
    let (job_id, _server) = parked_review(&node).await;
    let events_before = node
        .store
        .job_events(uuid::Uuid::parse_str(&job_id).unwrap())
        .await
        .unwrap()
        .len();

    // A scored review without notes breaks the message's rule; a score of 11 its field's.
    let invalid = node
        .ok(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "review", "response": { "score": 11 }, "dryRun": true }),
        )
        .await;
    assert_eq!(invalid["outcome"], "INVALID", "{invalid}");
    assert_eq!(invalid["ok"], false);
    let fields: Vec<&str> = invalid["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["field"].as_str().unwrap_or_default())
        .collect();
    assert!(fields.contains(&"score"), "{invalid}");

    let valid = node
        .ok(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "review", "response": { "score": 7, "notes": "fine" }, "dryRun": true }),
        )
        .await;
    assert_eq!(
        valid,
        json!({ "ok": true, "outcome": "VALID", "status": "WAITING", "violations": [] })
    );

    // A wrong shape is the same 400 as the real call's.
    let (status, answer) = node
        .call(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "review", "response": { "score": "x" }, "dryRun": true }),
        )
        .await;
    assert_eq!(status, 400, "{answer}");

    // Nothing was written: still WAITING, no checkpoint, no event.
    let row = node.job(&job_id).await;
    assert_eq!(row["status"], "WAITING");
    assert_eq!(row["checkpoints"].as_array().unwrap().len(), 1);
    let events_after = node
        .store
        .job_events(uuid::Uuid::parse_str(&job_id).unwrap())
        .await
        .unwrap()
        .len();
    assert_eq!(events_after, events_before);

    // Past the step, a dry run answers as the real call would.
    node.ok(
        "complete-step",
        json!({ "jobId": job_id, "stepName": "review", "response": { "score": 7, "notes": "fine" } }),
    )
    .await;
    let late = node
        .ok(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "review", "response": {}, "dryRun": true }),
        )
        .await;
    assert_eq!(late["outcome"], "ALREADY_DONE", "{late}");
    node.stop().await;
}

/// What a `jobs:read` token without `registry:read` sees of workflow definitions,
/// decided and kept: a job's own snapshot (`get-job include: ["definition"]`), since it
/// is part of the job's record (steps, targets and descriptor set included), and a
/// stored workflow's input form (`get-form {workflowName}`: the input type's fields and
/// rules, never its steps or targets); the stored workflow itself (`get-workflow`,
/// `list-workflows`) stays `registry:read`'s.
#[tokio::test]
async fn a_jobs_reader_sees_a_jobs_snapshot_and_an_input_form_not_the_registry() {
    use registry_stub::auth::{AuthConfig, TokenConfig};
    let db = TestDatabase::create().await;
    let token = |name: &str, scopes: &[&str]| TokenConfig {
        name: name.into(),
        token: format!("{name}-token-0123456789"),
        token_sha256: None,
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        requests_per_minute: None,
        max_body_bytes: None,
    };
    let auth = AuthConfig {
        tokens: vec![token("admin", &["*"]), token("reader", &["jobs:read"])],
    };
    let node = JobsNode::start_with_auth(test_config(&db.url, "idle", 0), Some(auth)).await;
    let (admin, reader) = (
        Some("admin-token-0123456789"),
        Some("reader-token-0123456789"),
    );
    let call = |token, verb: &'static str, body: Value| {
        let router = node.router.clone();
        async move { protomolt_e2e::jobs::call_as(&router, token, verb, body).await }
    };
    let workflow = two_step_workflow("127.0.0.1:50071");
    assert_eq!(
        call(admin, "put-workflow", json!({ "workflow": workflow }))
            .await
            .0,
        200
    );
    let (_, submitted) = call(
        admin,
        "submit-workflow",
        json!({ "workflowName": "embed-text", "input": { "text": "a" } }),
    )
    .await;
    let job_id = submitted["jobId"].as_str().unwrap().to_owned();

    let (status, job) = call(
        reader,
        "get-job",
        json!({ "jobId": job_id, "include": ["definition"] }),
    )
    .await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(
        job["job"]["workflowDefinition"]["steps"][0]["target"], "127.0.0.1:50071",
        "the job's own snapshot, targets included"
    );
    let (status, form) = call(reader, "get-form", json!({ "workflowName": "embed-text" })).await;
    assert_eq!(status, 200, "{form}");
    let text = form.to_string();
    assert!(
        !text.contains("\"steps\"") && !text.contains("50071") && !text.contains("descriptorSet"),
        "the form holds the input type only: {form}"
    );
    for verb in ["get-workflow", "list-workflows"] {
        let (status, _) = call(reader, verb, json!({ "name": "embed-text" })).await;
        assert_eq!(status, 403, "{verb} is registry:read's");
    }
    node.stop().await;
}
