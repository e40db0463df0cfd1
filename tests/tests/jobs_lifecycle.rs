//! Jobs end to end: submit, run, checkpoint, park, complete-step, settle, with the
//! outbox rows each commit point writes. Real PostgreSQL, real gRPC fixture servers.

use std::time::Duration;

use jobs_proto::WireMessage;
use jobs_proto::v1::WorkflowRunEvent;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, three_step_workflow, two_step_workflow};

const WAIT: Duration = Duration::from_secs(30);

async fn event_types(node: &JobsNode, job_id: &str) -> Vec<String> {
    let id = uuid::Uuid::parse_str(job_id).unwrap();
    node.store
        .job_events(id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

#[tokio::test]
async fn two_steps_complete_with_checkpoints_and_events_in_order() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 2)).await;

    let answer = node
        .ok("submit-workflow", json!({ "workflow": two_step_workflow(&server.target()), "input": { "text": "hello" } }))
        .await;
    assert_eq!(answer["ok"], true);
    assert_eq!(answer["created"], true);
    let job_id = answer["jobId"].as_str().unwrap().to_owned();
    assert_eq!(
        uuid::Uuid::parse_str(&job_id).unwrap().get_version_num(),
        7,
        "minted ids are uuid v7"
    );

    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(job["verdict"], "2 steps, output jobs.test.Embedding");
    assert_eq!(
        job["result"],
        json!({ "sourceText": "hello", "vector": [0.5, 1.0] })
    );
    assert_eq!(job["attempt"], 1);
    assert_eq!(job["lease_owner"], Value::Null);
    assert_eq!(
        job["checkpoints"],
        json!([
            { "name": "tokenize", "skipped": false, "response": { "ids": [104, 101, 108, 108, 111] } },
            { "name": "embed", "skipped": false, "response": { "values": [0.5, 1.0] } },
        ])
    );
    assert_eq!(
        event_types(&node, &job_id).await,
        [
            "ACCEPTED",
            "STEP_CHECKPOINT",
            "STEP_CHECKPOINT",
            "COMPLETED"
        ]
    );

    // Every payload is a valid contract event whose id is the outbox row's.
    let id = uuid::Uuid::parse_str(&job_id).unwrap();
    for row in node.store.job_events(id).await.unwrap() {
        let event = WorkflowRunEvent::decode_validated(&row.payload).expect("valid event");
        assert_eq!(event.event_id, row.event_id.to_string());
        assert_eq!(event.job_id, job_id);
        assert_eq!(row.status, "PENDING", "the relay has not run");
    }

    // get-job shows every column, camelCase; the workflow snapshot only when asked.
    let answer = node.ok("get-job", json!({ "jobId": job_id })).await;
    assert_eq!(answer["job"]["status"], "COMPLETED");
    assert_eq!(answer["job"]["workflowName"], "embed-text");
    assert!(
        answer["job"].get("workflowDefinition").is_none(),
        "the snapshot is left out by default"
    );
    let with_definition = node
        .ok(
            "get-job",
            json!({ "jobId": job_id, "include": ["definition"] }),
        )
        .await;
    assert!(with_definition["job"]["workflowDefinition"]["steps"].is_array());
    assert_eq!(answer["job"]["input"], json!({ "text": "hello" }));
    let events: Vec<&str> = answer["job"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        events,
        [
            "ACCEPTED",
            "STEP_CHECKPOINT",
            "STEP_CHECKPOINT",
            "COMPLETED"
        ],
        "get-job lists the outbox rows"
    );
    assert_eq!(answer["job"]["events"][0]["status"], "PENDING");
    // Each event says what happened: its step, attempt and time.
    let checkpoint = &answer["job"]["events"][1];
    assert_eq!(checkpoint["step"], "tokenize", "{checkpoint}");
    assert_eq!(checkpoint["attempt"], 1, "{checkpoint}");
    assert!(checkpoint["occurredAt"].is_string(), "{checkpoint}");
    assert_eq!(answer["job"]["events"][3]["detail"]["status"], "COMPLETED");
    for column in [
        "maxAttempts",
        "runAfter",
        "outstandingStep",
        "leaseUntil",
        "createdAt",
        "updatedAt",
        "finishedAt",
        "error",
    ] {
        assert!(answer["job"].get(column).is_some(), "{column} is shown");
    }
    node.stop().await;
}

#[tokio::test]
async fn three_steps_park_and_complete_step_resumes_without_recalling_tokenize() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 2)).await;

    let job_id = node
        .submit(
            &three_step_workflow(&server.target()),
            json!({ "text": "hi" }),
        )
        .await;
    let job = node.wait_for_status(&job_id, "WAITING", WAIT).await;
    assert_eq!(job["outstanding_step"], "review");
    assert_eq!(job["checkpoints"].as_array().unwrap().len(), 1);
    assert_eq!(
        event_types(&node, &job_id).await,
        ["ACCEPTED", "STEP_CHECKPOINT", "WAITING"]
    );

    let review = json!({ "jobId": job_id, "stepName": "review", "response": { "notes": "fine", "score": 8 } });
    let answer = node.ok("complete-step", review.clone()).await;
    assert_eq!(
        (
            &answer["ok"],
            &answer["outcome"],
            &answer["status"],
            &answer["resumes"]
        ),
        (
            &json!(true),
            &json!("COMPLETED"),
            &json!("QUEUED"),
            &json!(true)
        ),
        "{answer}"
    );

    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(
        job["result"],
        json!({ "sourceText": "hi", "vector": [0.2, 1.0], "notes": "fine" })
    );
    assert_eq!(job["verdict"], "3 steps, output jobs.test.Embedding");
    assert_eq!(
        server.stats.tokenize_calls(),
        1,
        "tokenize is not called again"
    );
    assert_eq!(server.stats.embed_calls(), 1);
    assert_eq!(
        event_types(&node, &job_id).await,
        [
            "ACCEPTED",
            "STEP_CHECKPOINT",
            "WAITING",
            "STEP_CHECKPOINT",
            "STEP_CHECKPOINT",
            "COMPLETED"
        ]
    );

    // Redelivery: AlreadyDone, nothing appended.
    let answer = node.ok("complete-step", review).await;
    assert_eq!(
        answer,
        json!({ "ok": true, "outcome": "ALREADY_DONE", "status": "COMPLETED" })
    );
    assert_eq!(
        node.job(&job_id).await["checkpoints"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    node.stop().await;
}

#[tokio::test]
async fn complete_step_gates_state_step_and_response() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    // No claim loops: submitted jobs stay QUEUED.
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let queued = idle
        .submit(
            &three_step_workflow(&server.target()),
            json!({ "text": "hi" }),
        )
        .await;
    let answer = idle
        .ok(
            "complete-step",
            json!({ "jobId": queued, "stepName": "review", "response": { "notes": "x" } }),
        )
        .await;
    assert_eq!(answer["outcome"], "WRONG_STATE");
    assert_eq!(answer["status"], "QUEUED");
    assert_eq!(answer["ok"], false);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("not WAITING on step 'review'")
    );

    let (status, body) = idle
        .call(
            "complete-step",
            json!({ "jobId": queued, "stepName": "nope", "response": {} }),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("has no step 'nope' (its steps: tokenize, review, embed)")
    );

    let (status, body) = idle
        .call(
            "complete-step",
            json!({ "jobId": queued, "stepName": "tokenize", "response": {} }),
        )
        .await;
    assert_eq!(status, 400, "{body}");

    let missing = uuid::Uuid::new_v4().to_string();
    let answer = idle
        .ok(
            "complete-step",
            json!({ "jobId": missing, "stepName": "review", "response": {} }),
        )
        .await;
    assert_eq!(
        answer,
        json!({ "ok": false, "error": format!("no workflow run {missing}") })
    );
    idle.stop().await;

    // Parked: a response that does not parse is a 400 and changes nothing; one that
    // breaks the declared rules fails the job as a verdict.
    let node = JobsNode::start(test_config(&db.url, "node-a", 1)).await;
    node.wait_for_status(&queued, "WAITING", WAIT).await;
    let (status, body) = node
        .call(
            "complete-step",
            json!({ "jobId": queued, "stepName": "review", "response": { "score": "ten" } }),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("response.score: "),
        "{body}"
    );
    assert_eq!(node.job(&queued).await["status"], "WAITING");
    // A misspelled field is refused with the field it probably meant.
    let (status, body) = node
        .call(
            "complete-step",
            json!({ "jobId": queued, "stepName": "review", "response": { "notes": "x", "scroe": 5 } }),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("unrecognized field name 'scroe'; did you mean 'score'?"),
        "{body}"
    );
    assert_eq!(node.job(&queued).await["status"], "WAITING");

    let answer = node
        .ok(
            "complete-step",
            json!({ "jobId": queued, "stepName": "review", "response": { "score": 5 } }),
        )
        .await;
    assert_eq!(answer["ok"], false);
    assert_eq!(answer["outcome"], "REJECTED");
    assert_eq!(answer["status"], "FAILED");
    assert_eq!(answer["violations"][0]["rule"], "review.notes_when_scored");
    let job = node.job(&queued).await;
    assert_eq!(job["status"], "FAILED");
    assert!(
        job["error"]
            .as_str()
            .unwrap()
            .starts_with("VALIDATION: step 'review'"),
        "{job}"
    );
    assert!(
        job["verdict"]
            .as_str()
            .unwrap()
            .contains("a scored review needs notes")
    );
    assert_eq!(
        job["checkpoints"].as_array().unwrap().len(),
        1,
        "a rejected answer appends nothing"
    );
    node.stop().await;
}

#[tokio::test]
async fn fifty_concurrent_completions_yield_exactly_one() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 1)).await;
    let job_id = node
        .submit(
            &three_step_workflow(&server.target()),
            json!({ "text": "x" }),
        )
        .await;
    node.wait_for_status(&job_id, "WAITING", WAIT).await;

    // Every call spawned before any is awaited, so the fifty race for the row lock
    // (a lazy iterator would spawn each only once the one before had answered).
    let calls: Vec<_> = (0..50)
        .map(|i| {
            let router = node.router.clone();
            let body = json!({ "jobId": job_id, "stepName": "review", "response": { "notes": format!("answer {i}") } });
            tokio::spawn(
                async move { protomolt_e2e::jobs::call(&router, "complete-step", body).await },
            )
        })
        .collect();
    let mut outcomes = Vec::new();
    for call in calls {
        let (status, answer) = call.await.unwrap();
        assert_eq!(status, 200, "{answer}");
        outcomes.push(answer["outcome"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        outcomes.iter().filter(|o| *o == "COMPLETED").count(),
        1,
        "{outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .all(|o| o == "COMPLETED" || o == "ALREADY_DONE"),
        "{outcomes:?}"
    );

    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(
        job["attempt"], 1,
        "the park's attempt was given back once, so the resuming claim is attempt 1 again"
    );
    let reviews = job["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == "review")
        .count();
    assert_eq!(reviews, 1, "exactly one review checkpoint");
    node.stop().await;
}
