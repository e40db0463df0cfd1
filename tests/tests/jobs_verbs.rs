//! The job verbs: unavailable without a store, strict submission, idempotency,
//! listing, and the request rules.

use std::time::Duration;

use jobs_role::{JobsConfig, JobsModule};
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, call, test_config};
use registry_stub::config::RegistryConfig;
use registry_stub::{Node, RegistryRole};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, two_step_workflow};

async fn row_count(db: &TestDatabase) -> i64 {
    db.connect()
        .await
        .query_one("SELECT count(*) FROM workflow_run", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn without_a_database_every_jobs_verb_answers_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new()
        .role(RegistryRole::new(RegistryConfig {
            workflows_dir: dir.path().to_owned(),
        }))
        .role(JobsModule::new(JobsConfig::default()))
        .mount()
        .await
        .expect("mounts without a database");
    let router = node.router();
    let id = uuid::Uuid::new_v4().to_string();
    for (verb, body) in [
        ("submit-workflow", json!({ "workflowName": "x" })),
        (
            "submit-workflows",
            json!({ "workflowName": "x", "submissions": [{ "input": {} }] }),
        ),
        ("get-job", json!({ "jobId": id })),
        ("list-jobs", json!({})),
        (
            "complete-step",
            json!({ "jobId": id, "stepName": "review", "response": {} }),
        ),
    ] {
        let (status, answer) = call(&router, verb, body).await;
        assert_eq!(status, 503, "{verb}: {answer}");
        assert_eq!(answer["code"], "unavailable");
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .contains("jobs are not configured"),
            "{answer}"
        );
    }
}

#[tokio::test]
async fn the_jobs_role_requires_the_registry() {
    let err = Node::new()
        .role(JobsModule::new(JobsConfig::default()))
        .mount()
        .await
        .err()
        .expect("refused");
    assert_eq!(
        err.to_string(),
        "role 'jobs' requires role 'registry', which is not mounted on this node: add \"registry\" to [node].roles"
    );
}

#[tokio::test]
async fn submission_is_idempotent_on_the_job_id_and_refuses_a_different_payload() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let job_id = uuid::Uuid::new_v4().to_string();
    let submission = json!({ "workflow": two_step_workflow(&server.target()), "input": { "text": "a" }, "jobId": job_id });

    let first = node.ok("submit-workflow", submission.clone()).await;
    assert_eq!(
        first,
        json!({ "ok": true, "jobId": job_id, "status": "QUEUED", "created": true })
    );
    let again = node.ok("submit-workflow", submission.clone()).await;
    assert_eq!(
        again,
        json!({ "ok": true, "jobId": job_id, "status": "QUEUED", "created": false })
    );

    let mut different = submission.clone();
    different["input"] = json!({ "text": "b" });
    let (status, answer) = node.call("submit-workflow", different).await;
    assert_eq!(status, 400);
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("already exists with a different workflow or input"),
        "{answer}"
    );
    assert_eq!(row_count(&db).await, 1);
    let id = uuid::Uuid::parse_str(&job_id).unwrap();
    assert_eq!(
        node.store.job_events(id).await.unwrap().len(),
        1,
        "one ACCEPTED event"
    );
    node.stop().await;
}

#[tokio::test]
async fn bad_submissions_answer_findings_and_write_no_row() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "idle", 0)).await;

    let mut broken = two_step_workflow(&server.target());
    broken["steps"][1]["rules"] = json!(["ids = typo.ids"]);
    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "workflow": broken, "input": { "text": "x" } }),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        answer["details"][0]["path"], "$.steps[1].rules[0]",
        "{answer}"
    );

    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "workflowName": "nope", "input": {} }),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .starts_with("workflowName: no stored workflow named 'nope'")
    );
    // A misspelled stored name: the closest stored one is offered.
    node.ok(
        "put-workflow",
        json!({ "workflow": two_step_workflow(&server.target()) }),
    )
    .await;
    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "workflowName": "embed-txt", "input": {} }),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("no stored workflow named 'embed-txt'; did you mean 'embed-text'?"),
        "{answer}"
    );

    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "workflow": two_step_workflow(&server.target()), "input": { "txt": 1 } }),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        answer["message"].as_str().unwrap().starts_with("input: "),
        "{answer}"
    );

    let hostile: Vec<(Value, &str)> = vec![
        (
            json!({ "workflowName": "x", "jobId": "1; DROP TABLE workflow_run" }),
            "jobId",
        ),
        (
            json!({ "workflowName": "x", "maxAttempts": 1000 }),
            "maxAttempts",
        ),
        (
            json!({ "workflowName": "x", "maxAttempts": -1 }),
            "maxAttempts",
        ),
        (json!({ "workflowName": "w".repeat(201) }), "workflowName"),
        (
            json!({ "workflow": two_step_workflow("h:1"), "workflowName": "embed-text" }),
            "",
        ),
        (json!({}), ""),
    ];
    for (body, field) in hostile {
        let (status, answer) = node.call("submit-workflow", body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["details"][0]["field"], field, "{answer}");
    }
    let (status, _) = node
        .call(
            "submit-workflow",
            json!({ "workflowName": "x", "extra": true }),
        )
        .await;
    assert_eq!(status, 400, "unknown fields are refused");
    assert_eq!(row_count(&db).await, 0, "nothing was written");

    // A stored workflow by name works, and its definition is snapshotted.
    node.ok(
        "put-workflow",
        json!({ "workflow": two_step_workflow(&server.target()) }),
    )
    .await;
    let answer = node
        .ok(
            "submit-workflow",
            json!({ "workflowName": "embed-text", "input": { "text": "s" } }),
        )
        .await;
    let job = node.job(answer["jobId"].as_str().unwrap()).await;
    assert_eq!(
        job["workflow_definition"],
        two_step_workflow(&server.target())
    );
    assert_eq!(job["max_attempts"], 3, "the configured default");
    node.stop().await;
}

#[tokio::test]
async fn list_jobs_filters_pages_newest_first_and_clamps() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let answer = node
            .ok("submit-workflow", json!({ "workflow": two_step_workflow(&server.target()), "input": { "text": format!("{i}") } }))
            .await;
        ids.push(answer["jobId"].as_str().unwrap().to_owned());
    }
    let mut other = two_step_workflow(&server.target());
    other["name"] = json!("other-flow");
    let answer = node
        .ok("submit-workflow", json!({ "workflow": other, "input": {} }))
        .await;
    let other_id = answer["jobId"].as_str().unwrap().to_owned();
    db.connect()
        .await
        .execute(
            "UPDATE workflow_run SET status = 'FAILED', error = 'x' WHERE job_id = $1::text::uuid",
            &[&other_id],
        )
        .await
        .unwrap();

    let all = node.ok("list-jobs", json!({})).await;
    assert_eq!(all["limit"], 50, "0 selects the default");
    let listed: Vec<&str> = all["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["jobId"].as_str().unwrap())
        .collect();
    let mut newest_first: Vec<&str> = ids.iter().map(String::as_str).collect();
    newest_first.push(&other_id);
    newest_first.reverse();
    assert_eq!(listed, newest_first);

    let page = node
        .ok("list-jobs", json!({ "limit": 2, "offset": 1 }))
        .await;
    let paged: Vec<&str> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["jobId"].as_str().unwrap())
        .collect();
    assert_eq!(paged, newest_first[1..3]);

    // Keyset paging: each full page says where the next starts; following `next`
    // walks the whole list once, in order, whatever its length.
    let mut walked: Vec<String> = Vec::new();
    let mut body = json!({ "limit": 2 });
    loop {
        let page = node.ok("list-jobs", body.clone()).await;
        walked.extend(
            page["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["jobId"].as_str().unwrap().to_owned()),
        );
        match page.get("next") {
            Some(next) => body = json!({ "limit": 2, "after": next }),
            None => break,
        }
    }
    assert_eq!(
        walked, newest_first,
        "keyset pages cover the list once, in order"
    );
    let oldest = node
        .ok("list-jobs", json!({ "limit": 2, "oldestFirst": true }))
        .await;
    let after_oldest = node
        .ok(
            "list-jobs",
            json!({ "limit": 2, "oldestFirst": true, "after": oldest["next"] }),
        )
        .await;
    assert_eq!(
        after_oldest["jobs"][0]["jobId"],
        newest_first[newest_first.len() - 3]
    );
    // Deep offsets are refused with the way out; offset and after do not mix.
    let (status, answer) = node.call("list-jobs", json!({ "offset": 10_001 })).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["message"].as_str().unwrap().contains("after"),
        "{answer}"
    );
    let (status, answer) = node
        .call("list-jobs", json!({ "offset": 2, "after": page["next"] }))
        .await;
    assert_eq!(status, 400, "{answer}");
    for bad in [
        json!({ "createdAt": "2020-01-01T00:00:00Z" }),
        json!({ "createdAt": "x", "jobId": ids[0] }),
        json!({ "jobId": ids[0] }),
    ] {
        let (status, answer) = node.call("list-jobs", json!({ "after": bad })).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains("after"),
            "{answer}"
        );
    }

    let by_name = node
        .ok("list-jobs", json!({ "workflowName": "other-flow" }))
        .await;
    assert_eq!(by_name["jobs"].as_array().unwrap().len(), 1);
    let failed = node.ok("list-jobs", json!({ "status": "FAILED" })).await;
    assert_eq!(failed["jobs"][0]["jobId"], other_id.as_str());
    assert_eq!(failed["jobs"][0]["status"], "FAILED");
    let queued = node
        .ok(
            "list-jobs",
            json!({ "status": "QUEUED", "workflowName": "embed-text" }),
        )
        .await;
    assert_eq!(queued["jobs"].as_array().unwrap().len(), 5);

    let clamped = node.ok("list-jobs", json!({ "limit": 1000 })).await;
    assert_eq!(clamped["limit"], 500, "clamped, not refused");

    // By creation time (RFC 3339) and by the step a job is parked on.
    let client = db.connect().await;
    client
        .execute(
            "UPDATE workflow_run SET created_at = '2020-01-01T00:00:00Z', status = 'WAITING',
                    outstanding_step = 'review'
              WHERE job_id = $1::text::uuid",
            &[&ids[0]],
        )
        .await
        .unwrap();
    let count = |answer: &Value| answer["jobs"].as_array().unwrap().len();
    let old = node
        .ok(
            "list-jobs",
            json!({ "createdBefore": "2021-01-01T00:00:00Z" }),
        )
        .await;
    assert_eq!(count(&old), 1, "{old}");
    assert_eq!(old["jobs"][0]["jobId"], ids[0].as_str());
    let recent = node
        .ok(
            "list-jobs",
            json!({ "createdAfter": "2021-01-01T00:00:00+01:00" }),
        )
        .await;
    assert_eq!(count(&recent), newest_first.len() - 1);
    let parked = node
        .ok("list-jobs", json!({ "outstandingStep": "review" }))
        .await;
    assert_eq!(count(&parked), 1);
    let none = node
        .ok(
            "list-jobs",
            json!({ "outstandingStep": "review", "createdAfter": "2021-01-01T00:00:00Z" }),
        )
        .await;
    assert_eq!(count(&none), 0);
    for bad in [json!("yesterday"), json!("2021-13-01T00:00:00Z"), json!(5)] {
        let (status, answer) = node
            .call("list-jobs", json!({ "createdBefore": bad }))
            .await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .contains("createdBefore"),
            "{answer}"
        );
    }

    let (status, answer) = node.call("list-jobs", json!({ "status": "BOGUS" })).await;
    assert_eq!(status, 400);
    assert_eq!(answer["details"][0]["field"], "status");
    let (status, _) = node.call("list-jobs", json!({ "offset": -1 })).await;
    assert_eq!(status, 400);

    let (status, answer) = node.call("get-job", json!({ "jobId": "not-a-uuid" })).await;
    assert_eq!(status, 400);
    assert_eq!(answer["details"][0]["field"], "jobId");
    let missing = uuid::Uuid::new_v4().to_string();
    let answer = node.ok("get-job", json!({ "jobId": missing })).await;
    assert_eq!(
        answer,
        json!({ "ok": false, "error": format!("no workflow run {missing}") })
    );
    node.stop().await;
}

#[tokio::test]
async fn every_verb_reads_both_json_spellings_and_numbers_as_strings() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 1)).await;
    let mut workflow = workflow::testkit::three_step_workflow(&server.target());
    workflow["name"] = json!("spelled");
    node.ok("put-workflow", json!({ "workflow": workflow }))
        .await;

    // submit-workflow: proto names, and a number as a string.
    let job_id = uuid::Uuid::new_v4().to_string();
    let body = json!({ "workflow_name": "spelled", "input": { "text": "hi" }, "job_id": job_id, "max_attempts": "1" });
    let first = node.ok("submit-workflow", body.clone()).await;
    assert_eq!(
        first["jobId"],
        job_id.as_str(),
        "the id sent as job_id is the job's id"
    );
    assert_eq!(first["created"], true);
    let again = node.ok("submit-workflow", body).await;
    assert_eq!(
        (again["jobId"].as_str(), again["created"].as_bool()),
        (Some(job_id.as_str()), Some(false)),
        "idempotent on job_id"
    );
    let camel = node
        .ok(
            "submit-workflow",
            json!({ "workflowName": "spelled", "input": { "text": "yo" }, "maxAttempts": "2" }),
        )
        .await;
    let other = camel["jobId"].as_str().unwrap().to_owned();
    assert_eq!(node.job(&job_id).await["max_attempts"], 1);
    assert_eq!(node.job(&other).await["max_attempts"], 2);
    assert_eq!(row_count(&db).await, 2);

    // get-job by job_id.
    let got = node.ok("get-job", json!({ "job_id": job_id })).await;
    assert_eq!(got["job"]["jobId"], job_id.as_str());

    // list-jobs: workflow_name filters, "1" limits.
    let other_flow = two_step_workflow(&server.target());
    node.submit(&other_flow, json!({ "text": "elsewhere" }))
        .await;
    let listed = node
        .ok(
            "list-jobs",
            json!({ "workflow_name": "spelled", "limit": "1", "offset": "1" }),
        )
        .await;
    let jobs = listed["jobs"].as_array().unwrap();
    assert_eq!(
        (listed["limit"].as_i64(), listed["offset"].as_i64()),
        (Some(1), Some(1))
    );
    assert_eq!(jobs.len(), 1, "{listed}");
    assert_eq!(jobs[0]["workflowName"], "spelled");

    // complete-step: job_id and step_name.
    node.wait_for_status(&job_id, "WAITING", Duration::from_secs(30))
        .await;
    let answered = node
        .ok(
            "complete-step",
            json!({ "job_id": job_id, "step_name": "review", "response": { "notes": "ok", "score": 2 } }),
        )
        .await;
    assert_eq!(answered["outcome"], "COMPLETED", "{answered}");
    node.wait_for_status(&job_id, "COMPLETED", Duration::from_secs(30))
        .await;
    node.stop().await;
}
