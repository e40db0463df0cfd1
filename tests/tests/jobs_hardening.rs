//! Regression tests of the hardening pass: each was a way to strand a job, deadlock
//! the pool, loop a job or leak internals, reproduced against the real database and
//! real gRPC servers.

use std::time::Duration;

use base64::Engine as _;
use http::StatusCode;
use jobs_role::JobStatus;
use jobs_role::store::Store;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::hostile::{HostileAnswer, HostileDesk};
use protomolt_e2e::jobs::{JobsNode, eventually, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureOptions, FixtureServer, step, two_step_workflow, workflow};

const WAIT: Duration = Duration::from_secs(30);

/// tokenize, then three external review steps; the output is the last review.
fn three_reviews(target: &str) -> Value {
    let mut steps = vec![step(
        "tokenize",
        target,
        "jobs.test.Tokenizer/Tokenize",
        &["text = input.text"],
    )];
    for name in ["review1", "review2", "review3"] {
        let mut review = step(
            name,
            target,
            "jobs.test.ReviewDesk/Review",
            &["text = input.text"],
        );
        review["completion"] = json!("external");
        steps.push(review);
    }
    workflow("three-reviews", steps, None)
}

async fn answer(node: &JobsNode, job_id: &str, step: &str) -> Value {
    node.ok(
        "complete-step",
        json!({ "jobId": job_id, "stepName": step, "response": { "notes": "fine", "score": 1 } }),
    )
    .await
}

#[tokio::test]
async fn a_job_with_one_attempt_and_three_external_steps_completes_after_three_answers() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 2)).await;
    let answer_body = node
        .ok(
            "submit-workflow",
            json!({ "workflow": three_reviews(&server.target()), "input": { "text": "hi" }, "maxAttempts": 1 }),
        )
        .await;
    let job_id = answer_body["jobId"].as_str().unwrap().to_owned();

    for (i, step) in ["review1", "review2", "review3"].into_iter().enumerate() {
        let job = node.wait_for_status(&job_id, "WAITING", WAIT).await;
        assert_eq!(job["outstanding_step"], step);
        assert_eq!(job["attempt"], 1, "a park is not a failed attempt");
        assert_eq!(job["claims"], i + 1, "one claim per segment");
        let answered = answer(&node, &job_id, step).await;
        assert_eq!(answered["outcome"], "COMPLETED", "{answered}");
    }
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(job["attempt"], 1);
    assert_eq!(job["claims"], 4, "the fencing token only grew");
    assert_eq!(job["result"]["notes"], "fine");
    assert_eq!(server.stats.tokenize_calls(), 1);
    node.stop().await;
}

#[tokio::test]
async fn a_released_claim_never_writes_again_even_when_its_owner_claims_the_job_back() {
    let db = TestDatabase::create().await;
    // A verbs-only node: the test is the only worker.
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let server = FixtureServer::start().await;
    node.submit(&two_step_workflow(&server.target()), json!({ "text": "x" }))
        .await;
    let store: &Store = &node.store;
    let lease = Duration::from_secs(60);
    let first = store
        .claim_next_job("worker/loop-0", lease)
        .await
        .unwrap()
        .expect("claimable");
    let released = store
        .release_claim(&first.claim, Duration::ZERO, 10, "a test")
        .await
        .unwrap();
    assert_eq!(released, JobStatus::Queued);
    let second = store
        .claim_next_job("worker/loop-0", lease)
        .await
        .unwrap()
        .expect("claimable again");
    assert_eq!(second.claim.owner, first.claim.owner);
    assert_eq!(
        second.claim.attempt, first.claim.attempt,
        "the release gave the attempt back"
    );
    assert!(second.claim.token > first.claim.token, "a new token");
    let stale = store.renew_lease(&first.claim, lease).await;
    assert!(
        stale.as_ref().is_err_and(|e| e.is_lost_claim()),
        "the released claim is fenced out: {stale:?}"
    );
    store.renew_lease(&second.claim, lease).await.unwrap();
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resubmission_storm_on_a_pool_of_four_answers_and_the_node_keeps_working() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let mut config = test_config(&db.url, "node-a", 2);
    config.max_connections = 4;
    let node = JobsNode::start(config).await;
    let workflow = two_step_workflow(&server.target());
    let job_id = uuid::Uuid::new_v4().to_string();
    let body = json!({ "workflow": workflow, "input": { "text": "storm" }, "jobId": job_id });
    node.ok("submit-workflow", body.clone()).await;

    let storm = (0..256).map(|_| {
        let router = node.router.clone();
        let body = body.clone();
        tokio::spawn(
            async move { protomolt_e2e::jobs::call(&router, "submit-workflow", body).await },
        )
    });
    let answers = tokio::time::timeout(Duration::from_secs(120), futures_join_all(storm))
        .await
        .expect("every resubmission answers: the pool did not deadlock");
    for (status, answer) in answers {
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["created"], false, "{answer}");
        assert_eq!(answer["jobId"], job_id.as_str());
    }
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    let fresh = node.submit(&workflow, json!({ "text": "after" })).await;
    node.wait_for_status(&fresh, "COMPLETED", WAIT).await;
    node.stop().await;
}

async fn futures_join_all<T>(handles: impl Iterator<Item = tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut answers = Vec::new();
    for handle in handles.collect::<Vec<_>>() {
        answers.push(handle.await.expect("the caller task"));
    }
    answers
}

#[tokio::test]
async fn a_nul_in_a_submission_is_refused_naming_the_field_and_nothing_is_written() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 1)).await;
    let workflow = two_step_workflow(&server.target());
    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "workflow": workflow, "input": { "text": "a\u{0}b" } }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(
        message.starts_with("input.text: holds a NUL character"),
        "{message}"
    );

    let mut hostile = workflow.clone();
    hostile["steps"][0]["target"] = json!(format!("{}\u{0}", server.target()));
    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "workflow": hostile, "input": { "text": "ok" } }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .starts_with("workflow.steps[0].target: holds a NUL"),
        "{answer}"
    );
    for status in JobStatus::ALL {
        assert_eq!(node.store.count_jobs(status).await.unwrap(), 0);
    }
    node.stop().await;
}

/// tokenize, then a called review on `desk`; the output is the review.
fn called_review(fixtures: &FixtureServer, desk: &HostileDesk) -> Value {
    workflow(
        "hostile-review",
        vec![
            step(
                "tokenize",
                &fixtures.target(),
                "jobs.test.Tokenizer/Tokenize",
                &["text = input.text"],
            ),
            step(
                "review",
                &desk.target(),
                "jobs.test.ReviewDesk/Review",
                &["text = input.text"],
            ),
        ],
        None,
    )
}

#[tokio::test]
async fn a_step_response_postgresql_cannot_store_fails_the_job_loud_after_one_call() {
    let db = TestDatabase::create().await;
    let fixtures = FixtureServer::start().await;
    let desk = HostileDesk::start(HostileAnswer::Notes("bad\u{0}notes".into())).await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 1)).await;
    let job_id = node
        .submit(&called_review(&fixtures, &desk), json!({ "text": "x" }))
        .await;
    let job = node.wait_for_status(&job_id, "FAILED", WAIT).await;
    let error = job["error"].as_str().unwrap();
    assert!(
        error.starts_with("WORKFLOW: step 'review': its response cannot be stored:"),
        "{error}"
    );
    assert_eq!(desk.calls(), 1, "the step was not called again");
    assert_eq!(job["checkpoints"].as_array().unwrap().len(), 1);
    node.stop().await;
}

#[tokio::test]
async fn a_step_error_holding_a_nul_is_stored_written_out() {
    let db = TestDatabase::create().await;
    let fixtures = FixtureServer::start().await;
    let desk = HostileDesk::start(HostileAnswer::Error("broken\u{0}desk".into())).await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 1)).await;
    let job_id = node
        .submit(&called_review(&fixtures, &desk), json!({ "text": "x" }))
        .await;
    let job = node.wait_for_status(&job_id, "FAILED", WAIT).await;
    let error = job["error"].as_str().unwrap();
    assert!(error.contains("INTERNAL: broken\\u0000desk"), "{error}");
    assert_eq!(desk.calls(), 1);
    node.stop().await;
}

#[tokio::test]
async fn a_nul_in_a_complete_step_answer_is_refused_naming_the_field() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 1)).await;
    let job_id = node
        .submit(&three_reviews(&server.target()), json!({ "text": "x" }))
        .await;
    node.wait_for_status(&job_id, "WAITING", WAIT).await;
    let (status, answer) = node
        .call(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "review1", "response": { "notes": "no\u{0}" } }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .starts_with("response.notes: holds a NUL character"),
        "{answer}"
    );
    let job = node.job(&job_id).await;
    assert_eq!(job["status"], "WAITING", "nothing was written");
    assert_eq!(job["checkpoints"].as_array().unwrap().len(), 1);
    node.stop().await;
}

#[tokio::test]
async fn a_job_released_max_releases_times_in_a_row_lands_dead_with_the_reason() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_secs(20)),
        ..Default::default()
    })
    .await;
    let mut config = test_config(&db.url, "node-a", 1);
    config.shutdown_grace_ms = 100;
    config.max_releases = 1;
    let node = JobsNode::start(config).await;
    let job_id = node
        .submit(&two_step_workflow(&server.target()), json!({ "text": "x" }))
        .await;
    eventually("embed to be called", WAIT, || async {
        server.stats.embed_calls() == 1
    })
    .await;
    let store = node.store.clone();
    node.stop().await;
    let job = store
        .get_job(uuid::Uuid::parse_str(&job_id).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job["status"], "DEAD", "{job}");
    let error = job["error"].as_str().unwrap();
    assert!(
        error.starts_with("RELEASED: the claim was given back 1 times in a row without progress"),
        "{error}"
    );
    assert!(error.contains("the node shut down"), "{error}");
}

#[tokio::test]
async fn a_claim_waiting_for_its_per_target_permit_keeps_its_lease() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_millis(1_500)),
        ..Default::default()
    })
    .await;
    let mut config = test_config(&db.url, "node-a", 3);
    // Three claims, one permit, each segment longer than the lease: the two waiting
    // claims must renew while they wait, or the sweeper takes their jobs.
    config.max_concurrent_per_target = 1;
    config.lease_ms = 600;
    config.sweep_interval_ms = 50;
    let node = JobsNode::start(config).await;
    let workflow = two_step_workflow(&server.target());
    let mut jobs = Vec::new();
    for i in 0..3 {
        jobs.push(
            node.submit(&workflow, json!({ "text": format!("j{i}") }))
                .await,
        );
    }
    for job_id in &jobs {
        let job = node.wait_for_status(job_id, "COMPLETED", WAIT).await;
        assert_eq!(job["claims"], 1, "never swept and re-claimed: {job}");
        assert_eq!(job["attempt"], 1);
    }
    assert_eq!(server.stats.embed_calls(), 3, "each step ran once");
    assert_eq!(server.stats.max_in_flight(), 1, "the cap held");
    node.stop().await;
}

#[tokio::test]
async fn an_unavailable_database_is_answered_without_its_internals() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 0)).await;
    db.refuse_connections().await;

    let (status, answer) = node
        .call(
            "get-job",
            json!({ "jobId": uuid::Uuid::new_v4().to_string() }),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(
        message.starts_with("the jobs database is unavailable; try again shortly (reference "),
        "{message}"
    );
    for internal in ["db error", "postgres", db.name(), "connection"] {
        assert!(!message.contains(internal), "leaks '{internal}': {message}");
    }
    db.allow_connections().await;
    node.stop().await;
}

/// A schema with a recursive input type; its Tokenizer is wire-compatible with the
/// fixture server's.
fn recursive_workflow(target: &str, when: &str) -> Value {
    let source = r#"
        syntax = "proto3";
        package jobs.test;
        message Text { string text = 1; bool fail = 2; }
        message Tokens { repeated int64 ids = 1; bool fail = 2; }
        service Tokenizer { rpc Tokenize(Text) returns (Tokens); }
        message Node { Node next = 1; string name = 2; }
    "#;
    let bytes = workflow::schema::compile_proto_source("recursive.proto", source).unwrap();
    json!({
        "name": "recursive",
        "schema": { "descriptorSetBase64": base64::engine::general_purpose::STANDARD.encode(bytes) },
        "inputType": "jobs.test.Node",
        "steps": [{
            "name": "tokenize", "target": target, "method": "jobs.test.Tokenizer/Tokenize",
            "rules": ["text = input.name"], "when": when,
        }],
    })
}

#[tokio::test]
async fn a_recursive_input_type_with_a_gate_runs_as_a_job_and_synchronously_and_the_node_lives() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 1)).await;
    let gate = "has(input.next) && input.next.name == 'b' && !has(input.next.next)";
    let workflow = recursive_workflow(&server.target(), gate);
    let chain = json!({ "name": "a", "next": { "name": "b" } });

    let ran = node
        .ok(
            "run-workflow",
            json!({ "workflow": workflow, "input": chain }),
        )
        .await;
    assert_eq!(ran["ok"], true, "{ran}");
    assert_eq!(ran["steps"][0]["skipped"], false, "the gate opened: {ran}");

    let opened = node.submit(&workflow, chain.clone()).await;
    let closed = node
        .submit(&workflow, json!({ "name": "a", "next": { "name": "c" } }))
        .await;
    let opened = node.wait_for_status(&opened, "COMPLETED", WAIT).await;
    let closed = node.wait_for_status(&closed, "COMPLETED", WAIT).await;
    assert_eq!(opened["checkpoints"][0]["skipped"], false);
    assert_eq!(closed["checkpoints"][0]["skipped"], true);
    assert_eq!(
        server.stats.tokenize_calls(),
        2,
        "run-workflow once, the open job once"
    );

    // A chain nested deeper than a request may carry is refused at the route, with
    // nothing written; the node lives on.
    let mut deep = json!({ "name": "leaf" });
    for _ in 0..100 {
        deep = json!({ "name": "n", "next": deep });
    }
    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "workflow": workflow, "input": deep }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("recursion limit"),
        "{answer}"
    );
    let after = node.submit(&workflow, chain).await;
    node.wait_for_status(&after, "COMPLETED", WAIT).await;
    node.stop().await;
}

#[tokio::test]
async fn a_claim_that_made_progress_is_not_counted_as_a_release_without_progress() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let server = FixtureServer::start().await;
    let job_id = node
        .submit(&two_step_workflow(&server.target()), json!({ "text": "x" }))
        .await;
    let store: &Store = &node.store;
    let lease = Duration::from_secs(60);
    // One release without progress already.
    let first = store
        .claim_next_job("w/loop-0", lease)
        .await
        .unwrap()
        .unwrap();
    store
        .release_claim(&first.claim, Duration::ZERO, 2, "a shutdown")
        .await
        .unwrap();
    assert_eq!(node.job(&job_id).await["releases"], 1);

    // This claim checkpoints a step, then is given back: progress, so not DEAD.
    let second = store
        .claim_next_job("w/loop-0", lease)
        .await
        .unwrap()
        .unwrap();
    let checkpoint = json!({ "name": "tokenize", "skipped": false, "response": { "ids": [120] } });
    store
        .append_checkpoint(&second.claim, 0, "tokenize", &checkpoint)
        .await
        .unwrap();
    let after = store
        .release_claim(&second.claim, Duration::ZERO, 2, "a shutdown")
        .await
        .unwrap();
    assert_eq!(after, JobStatus::Queued, "the checkpoint was progress");
    assert_eq!(node.job(&job_id).await["releases"], 1);

    // A claim that makes none, given back again: the second in a row is DEAD.
    let third = store
        .claim_next_job("w/loop-0", lease)
        .await
        .unwrap()
        .unwrap();
    let last = store
        .release_claim(&third.claim, Duration::ZERO, 2, "a shutdown")
        .await
        .unwrap();
    assert_eq!(last, JobStatus::Dead);
    let job = node.job(&job_id).await;
    assert!(
        job["error"]
            .as_str()
            .unwrap()
            .starts_with("RELEASED: the claim was given back 2 times in a row without progress"),
        "{job}"
    );
    let events = store
        .job_events(uuid::Uuid::parse_str(&job_id).unwrap())
        .await
        .unwrap();
    assert_eq!(events.last().unwrap().event_type, "DEAD");
    node.stop().await;
}

#[tokio::test]
async fn a_retried_stored_name_submission_after_the_workflow_was_edited_is_not_a_conflict() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let mut stored = two_step_workflow(&server.target());
    node.ok("put-workflow", json!({ "workflow": stored })).await;
    let job_id = uuid::Uuid::new_v4().to_string();
    let body = json!({ "workflowName": "embed-text", "input": { "text": "x" }, "jobId": job_id });
    assert_eq!(
        node.ok("submit-workflow", body.clone()).await["created"],
        true
    );

    // The stored workflow is edited; the client's retry of the same request is the
    // same submission (it sent a name and an input, not a definition).
    stored["deadlineMs"] = json!(12_345);
    node.ok("put-workflow", json!({ "workflow": stored })).await;
    let again = node.ok("submit-workflow", body).await;
    assert_eq!(again["created"], false, "{again}");

    // A different input under the same id is still a conflict.
    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "workflowName": "embed-text", "input": { "text": "y" }, "jobId": job_id }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    node.stop().await;
}

/// An input type whose rule is quadratic in the data yet within every static bound.
fn quadratic_rule_workflow(target: &str) -> Value {
    let source = r#"
        syntax = "proto3";
        package jobs.test;
        import "buf/validate/validate.proto";
        message Text { string text = 1; bool fail = 2; }
        message Tokens { repeated int64 ids = 1; bool fail = 2; }
        service Tokenizer { rpc Tokenize(Text) returns (Tokens); }
        message Numbers {
          option (buf.validate.message).cel = {
            id: "numbers.pairwise"
            message: "every pair sums above -1"
            expression: "this.values.all(a, this.values.all(b, a + b > -1))"
          };
          repeated int64 values = 1;
          string name = 2;
        }
    "#;
    let bytes = workflow::schema::compile_proto_source("numbers.proto", source).unwrap();
    json!({
        "name": "numbers",
        "schema": { "descriptorSetBase64": base64::engine::general_purpose::STANDARD.encode(bytes) },
        "inputType": "jobs.test.Numbers",
        "steps": [{
            "name": "tokenize", "target": target, "method": "jobs.test.Tokenizer/Tokenize",
            "rules": ["text = input.name"],
        }],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_rules_too_slow_for_their_data_are_refused_in_bounded_time() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 1)).await;
    let workflow = quadratic_rule_workflow(&server.target());

    // Small data: the rule runs and the job completes.
    let small = json!({ "name": "n", "values": (0..10).collect::<Vec<i64>>() });
    let job_id = node.submit(&workflow, small.clone()).await;
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;

    // 2,000 values: about 12 s of rule evaluation in a debug build. The submission is
    // refused once the rules' time limit passes, the async threads never held.
    let large = json!({ "name": "n", "values": (0..2_000).collect::<Vec<i64>>() });
    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "workflow": workflow, "input": large }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("the rules of jobs.test.Numbers did not finish within 1000 ms"),
        "{answer}"
    );
    let ran = node
        .ok(
            "run-workflow",
            json!({ "workflow": workflow, "input": small }),
        )
        .await;
    assert_eq!(ran["ok"], true, "the node works on: {ran}");
    node.stop().await;
}
