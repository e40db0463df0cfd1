//! `submit-workflows`: many submissions in one call and one transaction, each
//! answered on its own, exactly the good ones written.

use std::time::Duration;

use jobs_role::JobStatus;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, two_step_workflow};

const WAIT: Duration = Duration::from_secs(30);

async fn count(db: &TestDatabase, table: &str) -> i64 {
    db.connect()
        .await
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// A fresh database, the fixture workflow (its target is never called) and a node
/// that only takes submissions.
async fn quiet_node() -> (TestDatabase, Value, JobsNode) {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    (db, two_step_workflow("127.0.0.1:1"), node)
}

fn error_message(answer: &Value) -> &str {
    answer["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_mix_of_good_duplicate_conflicting_and_invalid_items_is_answered_item_by_item() {
    let (db, workflow, node) = quiet_node().await;
    let existing = uuid::Uuid::now_v7().to_string();
    node.ok(
        "submit-workflow",
        json!({ "workflow": workflow, "input": { "text": "a" }, "jobId": existing }),
    )
    .await;
    let fresh = uuid::Uuid::now_v7().to_string();

    let answer = node
        .ok(
            "submit-workflows",
            json!({
                "workflow": workflow,
                "submissions": [
                    { "input": { "text": "b" }, "jobId": fresh },
                    { "input": { "text": "a" }, "jobId": existing },
                    { "input": { "text": "changed" }, "jobId": existing },
                    { "input": { "text": 5, "nope": true } },
                    { "input": { "text": "c" }, "jobId": "not-a-uuid" },
                    { "workflowName": "missing", "input": {} },
                    { "input": { "text": "nul \u{0} here" } },
                    { "input": { "text": "b" }, "jobId": fresh },
                    { "input": { "text": "d" }, "maxAttempts": 7 },
                    { "input": { "text": "e" }, "maxAttempts": 1000 },
                ],
            }),
        )
        .await;
    let answers = answer["answers"].as_array().unwrap();
    assert_eq!(answers.len(), 10, "{answer}");
    for (index, item) in answers.iter().enumerate() {
        assert_eq!(item["index"], index, "{item}");
    }
    // New, then seen before (a client's retry), twice.
    assert_eq!(answers[0]["ok"], true, "{}", answers[0]);
    assert_eq!(answers[0]["jobId"], fresh.as_str());
    assert_eq!(answers[0]["created"], true);
    assert_eq!(answers[0]["status"], "QUEUED");
    assert_eq!(answers[1]["ok"], true, "{}", answers[1]);
    assert_eq!(answers[1]["created"], false);
    assert_eq!(answers[7]["ok"], true, "{}", answers[7]);
    assert_eq!(
        answers[7]["created"], false,
        "the same job twice in one call"
    );
    assert_eq!(answers[8]["ok"], true, "{}", answers[8]);
    assert_eq!(answers[8]["created"], true);
    // Each refusal names its item and field, as submit-workflow would.
    for (index, field) in [
        (2, "jobId"),
        (3, "input"),
        (4, "jobId"),
        (5, "workflowName"),
        (6, "input.text"),
        (9, "maxAttempts"),
    ] {
        let item = &answers[index];
        assert_eq!(item["ok"], false, "{item}");
        assert_eq!(item["error"]["code"], "invalid_argument", "{item}");
        assert!(
            error_message(item).starts_with(&format!("submissions[{index}].{field}")),
            "{item}"
        );
    }
    assert!(error_message(&answers[2]).contains("already exists"));
    assert_eq!(answer["created"], 2);
    assert_eq!(answer["refused"], 6);

    // Exactly the good ones are written: the earlier job and the two new ones, each
    // with its one ACCEPTED event.
    assert_eq!(count(&db, "workflow_run").await, 3);
    assert_eq!(count(&db, "workflow_run_events_outbox").await, 3);
    let minted = answers[8]["jobId"].as_str().unwrap();
    assert_eq!(node.job(minted).await["max_attempts"], 7);
    assert_eq!(node.job(&existing).await["input"], json!({ "text": "a" }));
}

#[tokio::test]
async fn an_empty_an_oversized_or_an_ambiguous_call_is_refused_whole_and_writes_nothing() {
    let (db, workflow, node) = quiet_node().await;
    let item = json!({ "input": { "text": "x" } });
    for body in [
        json!({ "workflow": workflow, "submissions": [] }),
        json!({ "workflow": workflow, "submissions": vec![item.clone(); 1001] }),
        json!({ "workflow": workflow, "workflowName": "also", "submissions": [item] }),
        json!({ "workflow": workflow, "submissions": "many" }),
    ] {
        let (status, answer) = node.call("submit-workflows", body).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["code"], "invalid_argument", "{answer}");
    }
    assert_eq!(count(&db, "workflow_run").await, 0);
    // Without a definition anywhere, every item says so; nothing is written.
    let answer = node
        .ok(
            "submit-workflows",
            json!({ "submissions": [{ "input": {} }] }),
        )
        .await;
    assert!(
        error_message(&answer["answers"][0]).starts_with("submissions[0].workflow: no definition"),
        "{answer}"
    );
    assert_eq!(count(&db, "workflow_run").await, 0);
}

#[tokio::test]
async fn jobs_submitted_in_a_batch_run_to_completion() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "busy", 8)).await;
    let items: Vec<Value> = (0..50)
        .map(|i| json!({ "input": { "text": format!("job {i}") } }))
        .collect();
    let answer = node
        .ok(
            "submit-workflows",
            json!({ "workflow": two_step_workflow(&server.target()), "submissions": items }),
        )
        .await;
    assert_eq!(answer["created"], 50, "{answer}");
    node.wait_for_count(JobStatus::Completed, 50, WAIT).await;
    assert_eq!(server.stats.tokenize_calls(), 50);
    node.stop().await;
}

#[tokio::test]
async fn every_row_of_a_batch_holds_its_whole_snapshot_and_one_id_given_twice_is_written_once() {
    let (db, workflow, node) = quiet_node().await;
    let mut other = workflow.clone();
    other["deadlineMs"] = json!(123_456);
    let twice = uuid::Uuid::now_v7().to_string();
    let answer = node
        .ok(
            "submit-workflows",
            json!({
                "submissions": [
                    { "workflow": workflow, "input": { "text": "a" } },
                    { "workflow": other, "input": { "text": "b" } },
                    { "workflow": workflow, "input": { "text": "first" }, "jobId": twice },
                    { "workflow": workflow, "input": { "text": "second" }, "jobId": twice },
                    { "workflow": other, "input": { "text": "c" } },
                ],
            }),
        )
        .await;
    let answers = answer["answers"].as_array().unwrap();
    assert_eq!(answers[2]["created"], true, "{answer}");
    assert_eq!(answers[3]["ok"], false, "the same id with another input");
    assert!(
        error_message(&answers[3]).contains("already exists"),
        "{answer}"
    );
    assert_eq!(answer["created"], 4, "{answer}");
    assert_eq!(node.job(&twice).await["input"], json!({ "text": "first" }));

    // The snapshot is sent once per distinct workflow and filed once; each row names
    // the one it was submitted with by its digest.
    let client = db.connect().await;
    let filed: i64 = client
        .query_one("SELECT count(*) FROM workflow_snapshot", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(filed, 2, "one snapshot per distinct workflow");
    let rows = client
        .query(
            "SELECT w.input->>'text', s.definition, w.definition_digest
               FROM workflow_run w JOIN workflow_snapshot s ON s.digest = w.definition_digest",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 4);
    for row in rows {
        let text: String = row.get(0);
        let (definition, digest): (Value, String) = (row.get(1), row.get(2));
        let expected = if text == "b" || text == "c" {
            &other
        } else {
            &workflow
        };
        assert_eq!(&definition, expected, "job {text}");
        assert_eq!(
            digest,
            &*jobs_role::compiled::snapshot_digest(expected).0,
            "job {text}"
        );
    }
}

#[tokio::test]
async fn batches_holding_the_same_ids_in_opposite_orders_never_deadlock() {
    let (db, workflow, node) = quiet_node().await;
    let ids: Vec<String> = (0..40).map(|_| uuid::Uuid::now_v7().to_string()).collect();
    let batch = |ids: Vec<&String>| {
        let items: Vec<Value> = ids
            .into_iter()
            .map(|id| json!({ "input": { "text": id }, "jobId": id }))
            .collect();
        json!({ "workflow": workflow, "submissions": items })
    };
    let forward = batch(ids.iter().collect());
    let backward = batch(ids.iter().rev().collect());
    let (a, b) = tokio::join!(
        node.ok("submit-workflows", forward),
        node.ok("submit-workflows", backward)
    );
    for answer in [&a, &b] {
        assert_eq!(answer["refused"], 0, "{answer}");
    }
    assert_eq!(
        a["created"].as_i64().unwrap() + b["created"].as_i64().unwrap(),
        40,
        "each job created once, seen once"
    );
    assert_eq!(count(&db, "workflow_run").await, 40);
}

#[tokio::test]
async fn concurrent_single_submissions_share_commits_and_are_answered_alone() {
    let (db, workflow, node) = quiet_node().await;
    let repeated = uuid::Uuid::now_v7().to_string();
    let mut bodies: Vec<Value> = (0..20)
        .map(|i| json!({ "workflow": workflow, "input": { "text": format!("new {i}") } }))
        .collect();
    bodies.extend(
        (0..10).map(
            |_| json!({ "workflow": workflow, "input": { "text": "same" }, "jobId": repeated }),
        ),
    );
    bodies.push(json!({ "workflow": workflow, "input": { "text": "nul \u{0}" } }));
    let answers = futures_util::future::join_all(
        bodies
            .into_iter()
            .map(|body| node.call("submit-workflow", body)),
    )
    .await;
    let created = answers
        .iter()
        .filter(|(status, answer)| *status == 200 && answer["created"] == true)
        .count();
    let seen_before = answers
        .iter()
        .filter(|(status, answer)| *status == 200 && answer["created"] == false)
        .count();
    let refused: Vec<&Value> = answers
        .iter()
        .filter(|(status, _)| *status == 400)
        .map(|(_, answer)| answer)
        .collect();
    assert_eq!(
        created, 21,
        "20 new jobs and the repeated one once: {answers:?}"
    );
    assert_eq!(seen_before, 9, "the repeats of the one job");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("input.text")
    );
    assert_eq!(count(&db, "workflow_run").await, 21);
    assert_eq!(count(&db, "workflow_run_events_outbox").await, 21);
}

#[tokio::test]
async fn an_id_locked_by_another_insert_fails_alone_after_the_lock_timeout() {
    let (db, workflow, node) = quiet_node().await;
    // Another transaction is inserting this id and neither commits nor rolls back
    // (a stuck client of another node).
    let stuck_id = uuid::Uuid::now_v7();
    let mut other = db.connect().await;
    let stuck = other.transaction().await.unwrap();
    stuck
        .execute(
            "INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input)
             VALUES ($1, 'embed-text', $2, '{}')",
            &[&stuck_id, &workflow],
        )
        .await
        .unwrap();

    let answer = node
        .ok(
            "submit-workflows",
            json!({
                "workflow": workflow,
                "submissions": [
                    { "input": { "text": "waits" }, "jobId": stuck_id.to_string() },
                    { "input": { "text": "free" } },
                ],
            }),
        )
        .await;
    let answers = answer["answers"].as_array().unwrap();
    assert_eq!(answers[1]["created"], true, "{answer}");
    assert_eq!(answers[0]["ok"], false, "{answer}");
    assert_eq!(answers[0]["error"]["code"], "unavailable", "{answer}");
    stuck.rollback().await.unwrap();
    assert_eq!(count(&db, "workflow_run").await, 1);
}

#[tokio::test]
async fn a_submission_still_in_flight_when_the_commit_loop_stops_is_committed_alone() {
    let db = TestDatabase::create().await;
    let store = jobs_role::store::Store::connect(&db.url, 4).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workflows = registry_stub::repository::FileWorkflowRepository::open(dir.path())
        .await
        .unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (submitter, committing) =
        jobs_role::submit::Submitter::new(store, std::sync::Arc::new(workflows), 3)
            .with_group_commit(shutdown.clone());
    let committing = tokio::spawn(committing);
    shutdown.cancel();
    committing.await.unwrap();

    let submitted = submitter
        .submit(jobs_role::submit::Submission {
            source: jobs_role::submit::DefinitionSource::Inline(std::sync::Arc::new(
                two_step_workflow("127.0.0.1:1"),
            )),
            input: json!({ "text": "late" }),
            job_id: None,
            max_attempts: None,
            start: jobs_role::submit::Start::Now,
            priority: None,
            dedupe: None,
            metadata: None,
        })
        .await
        .expect("committed on its own");
    assert!(submitted.created);
    assert_eq!(count(&db, "workflow_run").await, 1);
    assert_eq!(count(&db, "workflow_run_events_outbox").await, 1);
}

/// The same `jobId` and input with an edited inline workflow is a conflict, through
/// both submit verbs: the definition is part of "the same submission" for an inline
/// workflow (a stored one may change under a client's retry; an inline one is the
/// client's own). Removing the definition from the comparison fails this test.
#[tokio::test]
async fn an_edited_inline_workflow_under_the_same_id_and_input_is_a_conflict() {
    let (db, workflow, node) = quiet_node().await;
    let job_id = uuid::Uuid::new_v4().to_string();
    let input = json!({ "text": "same" });
    node.ok(
        "submit-workflow",
        json!({ "jobId": job_id, "workflow": workflow, "input": input }),
    )
    .await;
    let mut edited = workflow.clone();
    edited["steps"][1]["rules"] = json!(["ids = tokenize.ids"]);
    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "jobId": job_id, "workflow": edited, "input": input }),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("already exists with a different workflow or input"),
        "{answer}"
    );
    let batch = node
        .ok(
            "submit-workflows",
            json!({ "submissions": [{ "jobId": job_id, "workflow": edited, "input": input }] }),
        )
        .await;
    assert_eq!(batch["answers"][0]["ok"], false, "{batch}");
    assert!(
        error_message(&batch["answers"][0]).contains("already exists with a different workflow"),
        "{batch}"
    );
    // The unedited one is still the same submission.
    let again = node
        .ok(
            "submit-workflows",
            json!({ "submissions": [{ "jobId": job_id, "workflow": workflow, "input": input }] }),
        )
        .await;
    assert_eq!(again["answers"][0]["created"], false, "{again}");
    assert_eq!(count(&db, "workflow_run").await, 1);
    assert_eq!(count(&db, "workflow_run_events_outbox").await, 1);
}
