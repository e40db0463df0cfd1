//! `retry-job` and `retry-jobs` with `workflow: "current"`: a job stranded by a
//! broken workflow moves onto the fixed one stored under its name, keeping its
//! checkpoints when they fit, refused with a finding per misfit when they do not.
//! Real PostgreSQL, real fixture servers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jobs_proto::WireMessage;
use jobs_proto::v1::WorkflowRunEvent;
use jobs_role::JobStatus;
use jobs_role::store::{ByJob, Retry, RetryOutcome, SnapshotMove, SnapshotMoves};
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, step, two_step_workflow, workflow};

const WAIT: Duration = Duration::from_secs(30);

/// Nothing listens there: a step calling it fails UNAVAILABLE.
const NOWHERE: &str = "127.0.0.1:1";

/// `embed-text` whose `embed` step calls `embed_at`, stored on the node.
async fn store_embed_text(node: &JobsNode, tokenize_at: &str, embed_at: &str) {
    let mut envelope = two_step_workflow(tokenize_at);
    envelope["steps"][1]["target"] = json!(embed_at);
    node.ok("put-workflow", json!({ "workflow": envelope }))
        .await;
}

/// A job of the stored `embed-text`, DEAD at `embed` (its one attempt failed) with
/// `tokenize` checkpointed.
async fn dead_at_embed(node: &JobsNode) -> String {
    let answer = node
        .ok(
            "submit-workflow",
            json!({ "workflowName": "embed-text", "input": { "text": "a b" }, "maxAttempts": 1 }),
        )
        .await;
    let job_id = answer["jobId"].as_str().unwrap().to_owned();
    let job = node.wait_for_status(&job_id, "DEAD", WAIT).await;
    assert_eq!(job["checkpoints"].as_array().unwrap().len(), 1, "{job}");
    job_id
}

/// The detail of the job's last RETRIED event.
async fn last_retried(node: &JobsNode, job_id: &str) -> Value {
    let rows = node
        .store
        .job_events(uuid::Uuid::parse_str(job_id).unwrap())
        .await
        .unwrap();
    let row = rows
        .iter()
        .rev()
        .find(|row| row.event_type == "RETRIED")
        .expect("a RETRIED event");
    protomolt_e2e::jobs::string_detail(&WorkflowRunEvent::decode_validated(&row.payload).unwrap())
}

/// Stores `workflow`, then asks to retry `job_id` on it (`workflow: "current"`).
async fn retried_onto(node: &JobsNode, job_id: &str, workflow: &Value) -> Value {
    node.ok("put-workflow", json!({ "workflow": workflow }))
        .await;
    node.ok(
        "retry-job",
        json!({ "jobId": job_id, "workflow": "current" }),
    )
    .await
}

/// A node whose stored `embed-text` calls nowhere at `embed`, and a job of it DEAD
/// there with `tokenize` checkpointed (the database and the target must outlive the
/// node).
async fn stranded(worker: &str) -> (TestDatabase, FixtureServer, JobsNode, String) {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, worker, 2)).await;
    store_embed_text(&node, &server.target(), NOWHERE).await;
    let job_id = dead_at_embed(&node).await;
    (db, server, node, job_id)
}

#[tokio::test]
async fn a_job_moved_onto_its_fixed_workflow_completes_without_recalling_its_checkpoints() {
    let (_db, server, node, job_id) = stranded("mover").await;
    let submitted = node.job(&job_id).await["definition_digest"]
        .as_str()
        .unwrap()
        .to_owned();

    // The fix is stored, but a plain retry runs the job's own snapshot, and says so.
    store_embed_text(&node, &server.target(), &server.target()).await;
    let plain = node
        .ok(
            "retry-job",
            json!({ "jobId": job_id, "workflow": "snapshot" }),
        )
        .await;
    assert_eq!(plain["outcome"], "RETRIED", "{plain}");
    assert_eq!(plain["snapshot"], json!(submitted));
    assert_eq!(plain.get("snapshotBefore"), None, "{plain}");
    let job = node.wait_for_status(&job_id, "DEAD", WAIT).await;
    assert!(
        job["error"].as_str().unwrap().contains("127.0.0.1:1"),
        "the old snapshot's target again: {job}"
    );
    assert_eq!(
        last_retried(&node, &job_id).await["snapshot"],
        json!(submitted)
    );

    let moved = node
        .ok(
            "retry-job",
            json!({ "jobId": job_id, "workflow": "current", "reason": "embedder fixed" }),
        )
        .await;
    assert_eq!(moved["outcome"], "RETRIED", "{moved}");
    assert_eq!(moved["checkpointsKept"], 1);
    assert_eq!(moved["snapshotBefore"], json!(submitted));
    let current = moved["snapshot"].as_str().unwrap().to_owned();
    assert_ne!(current, submitted);
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(job["definition_digest"], json!(current));
    assert_eq!(
        server.stats.tokenize_calls(),
        1,
        "the checkpoint was kept, not called again"
    );
    assert_eq!(server.stats.embed_calls(), 1);
    let detail = last_retried(&node, &job_id).await;
    assert_eq!(detail["snapshot"], json!(current), "{detail}");
    assert_eq!(detail["snapshotBefore"], json!(submitted), "{detail}");
    assert_eq!(detail["reason"], "embedder fixed");
    node.stop().await;
}

#[tokio::test]
async fn results_that_do_not_fit_the_stored_workflow_are_refused_with_a_finding_each() {
    let (_db, server, node, job_id) = stranded("misfit").await;
    let before = node.job(&job_id).await;

    // `tokenize` now gives a Review, not the Tokens the job keeps.
    let mut changed_type = two_step_workflow(&server.target());
    changed_type["steps"] = json!([step(
        "tokenize",
        &server.target(),
        "jobs.test.ReviewDesk/Review",
        &["text = input.text"]
    )]);
    changed_type.as_object_mut().unwrap().remove("output");
    let refused = retried_onto(&node, &job_id, &changed_type).await;
    assert_eq!(refused["ok"], false, "{refused}");
    assert_eq!(refused["outcome"], "INCOMPATIBLE");
    assert_eq!(refused["status"], "DEAD");
    assert_eq!(
        refused["findings"],
        json!([
            "step 'tokenize': the job keeps a jobs.test.Tokens, but the step as stored now gives a jobs.test.Review (retry from step 'tokenize' to run it again)"
        ])
    );

    // A new first step: the kept checkpoint would not replay in the chain.
    let mut new_first = two_step_workflow(&server.target());
    new_first["steps"].as_array_mut().unwrap().insert(
        0,
        step(
            "prep",
            &server.target(),
            "jobs.test.Tokenizer/Tokenize",
            &["text = input.text"],
        ),
    );
    let refused = retried_onto(&node, &job_id, &new_first).await;
    assert_eq!(
        refused["findings"],
        json!([
            "step 'prep': workflow 'embed-text' as stored now runs it before step 'tokenize', and the job has no result of it (retry from step 'prep')"
        ]),
        "{refused}"
    );

    // Another input type, and no `tokenize` at all: two findings.
    let mut other_input = workflow(
        "embed-text",
        vec![step(
            "embed",
            &server.target(),
            "jobs.test.Embedder/Embed",
            &["ids = input.ids"],
        )],
        None,
    );
    other_input["inputType"] = json!("jobs.test.Tokens");
    let refused = retried_onto(&node, &job_id, &other_input).await;
    let findings = refused["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 2, "{refused}");
    assert!(findings[0].as_str().unwrap().starts_with(
        "input: the job's input is a jobs.test.Text; workflow 'embed-text' as stored now takes a jobs.test.Tokens"
    ));
    assert!(findings[1].as_str().unwrap().starts_with(
        "step 'tokenize': the job keeps its result, but workflow 'embed-text' as stored now has no step 'tokenize'"
    ));

    // A fromStep the stored workflow lacks is the caller's mistake, named.
    let (status, unknown) = node
        .call(
            "retry-job",
            json!({ "jobId": job_id, "workflow": "current", "fromStep": "tokenize" }),
        )
        .await;
    assert_eq!(status, 400, "{unknown}");
    assert!(
        unknown["message"]
            .as_str()
            .unwrap()
            .starts_with("fromStep: workflow 'embed-text' as stored now has no step 'tokenize' (its steps: embed)"),
        "{unknown}"
    );
    let (_, bad) = node
        .call(
            "retry-job",
            json!({ "jobId": job_id, "workflow": "newest" }),
        )
        .await;
    assert!(
        bad["message"].as_str().unwrap().contains("workflow"),
        "{bad}"
    );

    // Nothing changed: the same row, no RETRIED event.
    let after = node.job(&job_id).await;
    assert_eq!(after["status"], "DEAD");
    assert_eq!(after["definition_digest"], before["definition_digest"]);
    assert_eq!(after["checkpoints"], before["checkpoints"]);
    assert_eq!(after["updated_at"], before["updated_at"]);
    node.stop().await;
}

#[tokio::test]
async fn a_moved_job_calls_every_step_that_runs_with_a_key_never_sent_before() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "reruns", 2)).await;
    store_embed_text(&node, &server.target(), &server.target()).await;
    let job_id = node
        .ok(
            "submit-workflow",
            json!({ "workflowName": "embed-text", "input": { "text": "a b" } }),
        )
        .await["jobId"]
        .as_str()
        .unwrap()
        .to_owned();
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    node.ok("retry-job", json!({ "jobId": job_id, "fromStep": "embed" }))
        .await;
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(job["step_reruns"], json!([0, 1]));

    // A new step between them: `embed` moves from position 2 to 3.
    let mut with_audit = two_step_workflow(&server.target());
    let audit = step(
        "audit",
        &server.target(),
        "jobs.test.Tokenizer/Tokenize",
        &["text = input.text"],
    );
    with_audit["steps"].as_array_mut().unwrap().insert(1, audit);
    node.ok("put-workflow", json!({ "workflow": with_audit }))
        .await;
    let moved = node
        .ok(
            "retry-job",
            json!({ "jobId": job_id, "workflow": "current", "fromStep": "audit" }),
        )
        .await;
    assert_eq!(moved["outcome"], "RETRIED", "{moved}");
    assert_eq!(moved["checkpointsKept"], 1, "tokenize's: {moved}");
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    // tokenize keeps its count (its result is kept); audit and embed will run, so each
    // gets a count no step of the job had (the job's reruns, 1, plus the move), and
    // embed, whose checkpoint the retry dropped, one more.
    assert_eq!(job["step_reruns"], json!([0, 2, 3]), "{job}");
    assert_eq!(job["reruns"], 3);
    let names: Vec<&str> = job["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tokenize", "audit", "embed"]);
    assert_eq!(
        server.stats.tokenize_calls(),
        2,
        "tokenize once, audit once"
    );
    assert_eq!(server.stats.embed_calls(), 3);
    let detail = last_retried(&node, &job_id).await;
    assert_eq!(detail["fromStep"], "audit");
    assert!(detail.get("snapshotBefore").is_some(), "{detail}");
    node.stop().await;
}

#[tokio::test]
async fn retry_jobs_moves_the_jobs_that_fit_and_names_why_the_others_did_not() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "bulk-mover", 2)).await;
    store_embed_text(&node, &server.target(), NOWHERE).await;
    let stored = dead_at_embed(&node).await;
    // An inline workflow stored under no name: nothing to move onto.
    let mut inline = two_step_workflow(&server.target());
    inline["name"] = json!("inline-only");
    inline["steps"][1]["target"] = json!(NOWHERE);
    let answer = node
        .ok(
            "submit-workflow",
            json!({ "workflow": inline, "input": { "text": "a" }, "maxAttempts": 1 }),
        )
        .await;
    let unstored = answer["jobId"].as_str().unwrap().to_owned();
    node.wait_for_status(&unstored, "DEAD", WAIT).await;

    store_embed_text(&node, &server.target(), &server.target()).await;
    let answer = node
        .ok(
            "retry-jobs",
            json!({ "jobIds": [stored, unstored], "workflow": "current" }),
        )
        .await;
    assert_eq!(answer["changed"], 1, "{answer}");
    assert_eq!(answer["changedJobIds"], json!([stored]));
    let not_changed = &answer["notChanged"][0];
    assert_eq!(not_changed["jobId"], json!(unstored));
    assert_eq!(not_changed["outcome"], "INCOMPATIBLE");
    assert_eq!(not_changed["status"], "DEAD");
    assert!(
        not_changed["error"]
            .as_str()
            .unwrap()
            .contains("the job was not submitted by the stored workflow's name (an inline workflow named 'inline-only')"),
        "{not_changed}"
    );
    node.wait_for_status(&stored, "COMPLETED", WAIT).await;
    assert_eq!(node.job(&unstored).await["status"], "DEAD");
    node.stop().await;
}

/// A plain retry moving the job as `moves` says.
fn retry_onto(moves: &SnapshotMoves) -> Retry<'_> {
    Retry {
        from_step: None,
        max_attempts: None,
        reason: None,
        moves: Some(moves),
    }
}

#[tokio::test]
async fn a_job_that_ran_again_after_its_check_is_not_moved() {
    let (_db, server, node, job_id) = stranded("stale").await;
    let job = node.job(&job_id).await;
    let id = uuid::Uuid::parse_str(&job_id).unwrap();
    let digest = job["definition_digest"].as_str().unwrap().to_owned();
    let claims = i32::try_from(job["claims"].as_i64().unwrap()).unwrap();
    let fixed = two_step_workflow(&server.target());
    let (new_digest, _) = jobs_role::compiled::snapshot_digest(&fixed);
    let moves = |checked_digest: &str, checked_claims: i32| SnapshotMoves {
        targets: vec![(new_digest.clone(), Arc::new(fixed.clone()))],
        jobs: HashMap::from([(
            id,
            SnapshotMove {
                target: 0,
                checked_digest: checked_digest.to_owned(),
                checked_claims,
                reruns_from: Arc::new(vec![1, 2]),
            },
        )]),
    };
    // Checked before a claim it has since had; checked against another snapshot.
    for stale in [
        moves(&digest, claims - 1),
        moves("sha256-compact:0", claims),
    ] {
        let outcome = node.store.retry_job(id, &retry_onto(&stale)).await;
        assert_eq!(
            outcome.unwrap(),
            ByJob::Decided(RetryOutcome::ChangedWhileChecked {
                status: JobStatus::Dead
            })
        );
        assert_eq!(node.job(&job_id).await["definition_digest"], json!(digest));
    }
    // Checked as it is: moved, the new snapshot filed under the node's digest.
    let current = moves(&digest, claims);
    match node.store.retry_job(id, &retry_onto(&current)).await {
        Ok(ByJob::Decided(RetryOutcome::Retried {
            snapshot,
            snapshot_before,
            ..
        })) => {
            assert_eq!(snapshot, new_digest.to_string());
            assert_eq!(snapshot_before, Some(digest));
        }
        other => panic!("not retried: {other:?}"),
    }
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    node.stop().await;
}
