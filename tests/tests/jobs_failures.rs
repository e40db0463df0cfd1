//! Failure handling: retries with backoff then DEAD, verdicts, corrupted rows failing
//! loud, crash safety through the sweeper, fencing of stale workers, lease renewal.

use std::time::Duration;

use jobs_role::store::Settlement;
use jobs_role::worker::sweep_loop;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, bare_worker, eventually, one_queued_job, test_config};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use workflow::testkit::{FixtureOptions, FixtureServer, two_step_workflow};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn retryable_failures_back_off_then_land_dead_with_the_error_verbatim() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let mut config = test_config(&db.url, "node-a", 1);
    config.backoff_base_ms = 500;
    let node = JobsNode::start(config).await;
    let job_id = node
        .submit(
            &two_step_workflow(&server.target()),
            json!({ "text": "x", "fail": true }),
        )
        .await;

    // After attempt 1 the row waits in QUEUED with run_after pushed by the base
    // backoff (500 ms); after attempt 2 by twice that.
    for (attempt, backoff_ms) in [(1, 500), (2, 1000)] {
        let client = db.connect().await;
        eventually("the retry to be requeued", WAIT, || async {
            let job = node.job(&job_id).await;
            job["attempt"] == attempt && job["status"] == "QUEUED"
        })
        .await;
        let pushed_ms: f64 = client
            .query_one(
                "SELECT extract(epoch FROM run_after - updated_at)::float8 * 1000 FROM workflow_run WHERE job_id = $1::text::uuid",
                &[&job_id],
            )
            .await
            .unwrap()
            .get(0);
        assert!(
            pushed_ms >= f64::from(backoff_ms) - 1.0,
            "attempt {attempt}: run_after pushed {pushed_ms} ms"
        );
        let job = node.job(&job_id).await;
        assert_eq!(
            job["error"],
            "GRPC: step 'embed': UNAVAILABLE: model loading"
        );
    }

    let job = node.wait_for_status(&job_id, "DEAD", WAIT).await;
    assert_eq!(job["attempt"], 3);
    assert_eq!(
        job["error"], "GRPC: step 'embed': UNAVAILABLE: model loading",
        "the last error, verbatim"
    );
    assert_eq!(
        server.stats.tokenize_calls(),
        1,
        "the tokenize checkpoint is replayed, not re-run"
    );
    assert_eq!(server.stats.embed_calls(), 3);

    // Nothing re-enqueues a DEAD job: neither the sweeper nor a claim.
    let report = node
        .store
        .sweep_expired_leases(100, None, 10)
        .await
        .unwrap();
    assert_eq!(report.requeued + report.dead, 0);
    assert!(
        node.store
            .claim_next_job("probe", Duration::from_secs(1))
            .await
            .unwrap()
            .is_none()
    );
    let id = uuid::Uuid::parse_str(&job_id).unwrap();
    let events: Vec<String> = node
        .store
        .job_events(id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(
        events,
        ["ACCEPTED", "STEP_CHECKPOINT", "DEAD"],
        "retries are row changes, not events"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_validation_verdict_fails_on_the_first_attempt() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 1)).await;
    let mut workflow = two_step_workflow(&server.target());
    workflow["steps"][0]["validate"] = json!(true);
    let job_id = node
        .submit(&workflow, json!({ "text": "a".repeat(65) }))
        .await;
    let job = node.wait_for_status(&job_id, "FAILED", WAIT).await;
    assert_eq!(job["attempt"], 1, "a verdict is not retried");
    assert!(
        job["error"]
            .as_str()
            .unwrap()
            .starts_with("VALIDATION: step 'tokenize'"),
        "{job}"
    );
    assert!(
        job["verdict"].as_str().unwrap().starts_with("ids: "),
        "{job}"
    );
    // The FAILED event names the step, and its verdict the offending value.
    let events = node.ok("get-job", json!({ "jobId": job_id })).await["job"]["events"].clone();
    let failed = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "FAILED")
        .expect("a FAILED event")
        .clone();
    assert_eq!(failed["step"], "tokenize", "{failed}");
    assert!(
        failed["verdict"].as_str().unwrap().contains("(got "),
        "{failed}"
    );
    assert_eq!(server.stats.embed_calls(), 0);
    node.stop().await;
}

#[tokio::test]
async fn corrupted_rows_fail_loud_naming_the_cause() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let target = server.target();
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let mut unknown_method = two_step_workflow(&target);
    unknown_method["steps"][1]["method"] = json!("jobs.test.Embedder/Gone");
    let tokenize = json!({ "name": "tokenize", "skipped": false, "response": { "ids": [1] } });
    let corruptions: Vec<(&str, &str, Value, &str)> = vec![
        (
            "unreadable definition",
            "workflow_definition",
            json!("%%garbage%%"),
            "WORKFLOW: the stored definition no longer compiles: the workflow does not compile: $: a workflow must be a JSON object, not a string",
        ),
        (
            "non-object definition",
            "workflow_definition",
            json!([1, 2]),
            "a workflow must be a JSON object, not an array",
        ),
        (
            "definition that no longer parses",
            "workflow_definition",
            unknown_method,
            "has no method 'Gone'",
        ),
        (
            "input that no longer parses",
            "input",
            json!({ "txt": 1 }),
            "WORKFLOW: the stored input no longer parses",
        ),
        (
            "checkpoints not an array",
            "checkpoints",
            json!({ "tokenize": {} }),
            "stored checkpoints are not an array",
        ),
        (
            "too many checkpoints",
            "checkpoints",
            json!([tokenize, tokenize, tokenize]),
            "3 checkpoints are stored but the workflow has only 2 steps",
        ),
        (
            "wrong step name",
            "checkpoints",
            json!([{ "name": "embed", "skipped": false, "response": {} }]),
            "checkpoint 1 names step 'embed' but step 1 is 'tokenize'",
        ),
        (
            "undecodable response",
            "checkpoints",
            json!([{ "name": "tokenize", "skipped": false, "response": { "ids": "many" } }]),
            "checkpoint 1 (step 'tokenize') does not decode",
        ),
    ];
    let client = db.connect().await;
    let mut jobs = Vec::new();
    for (what, column, value, _) in &corruptions {
        let job_id = idle
            .submit(&two_step_workflow(&target), json!({ "text": "x" }))
            .await;
        let statement =
            format!("UPDATE workflow_run SET {column} = $1 WHERE job_id = $2::text::uuid");
        client
            .execute(&statement, &[value, &job_id])
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        jobs.push(job_id);
    }
    idle.stop().await;

    let node = JobsNode::start(test_config(&db.url, "node-a", 2)).await;
    for ((what, _, _, cause), job_id) in corruptions.iter().zip(&jobs) {
        let job = node.wait_for_status(job_id, "FAILED", WAIT).await;
        let error = job["error"].as_str().unwrap();
        assert!(error.starts_with("WORKFLOW: "), "{what}: {error}");
        assert!(
            error.contains(cause),
            "{what}: '{error}' should name '{cause}'"
        );
        assert_eq!(job["attempt"], 1, "{what}: failing loud is not retried");
    }
    assert_eq!(
        server.stats.tokenize_calls() + server.stats.embed_calls(),
        0,
        "nothing ran against drifted state"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_crashed_worker_is_swept_and_another_resumes_at_the_first_missing_checkpoint() {
    let db = TestDatabase::create().await;
    let options = FixtureOptions {
        embed_delay: Some(Duration::from_millis(2500)),
        ..Default::default()
    };
    let (server, idle, job_id) = one_queued_job(&db.url, options, "crash").await;
    let store = idle.store.clone();
    let mut config = test_config(&db.url, "crashy", 1);
    config.lease_ms = 1200;

    // Worker A claims, checkpoints tokenize, calls embed, and dies mid-call.
    let a_shutdown = CancellationToken::new();
    let a = tokio::spawn(bare_worker(&store, &config).run(a_shutdown.clone()));
    eventually("embed to be called", WAIT, || async {
        server.stats.embed_calls() == 1
    })
    .await;
    a.abort();
    let _ = a.await;
    let job = idle.job(&job_id).await;
    assert_eq!(job["status"], "RUNNING", "a dead worker settles nothing");
    assert_eq!(job["checkpoints"].as_array().unwrap().len(), 1);
    let stale = jobs_role::store::Claim {
        job_id: uuid::Uuid::parse_str(&job_id).unwrap(),
        owner: job["lease_owner"].as_str().unwrap().to_owned(),
        token: 1,
        attempt: 1,
        workflow_name: "embed-text".into(),
        metadata: None,
    };

    // The sweeper requeues it once the lease passes; worker B resumes at embed.
    let shutdown = CancellationToken::new();
    let sweeper = tokio::spawn(sweep_loop(
        store.clone(),
        Duration::from_millis(50),
        config.lease(),
        10,
        jobs_role::metrics::JobsMetrics::default(),
        shutdown.clone(),
    ));
    let mut b_config = config.clone();
    b_config.worker_id = "survivor".into();
    let b = tokio::spawn(bare_worker(&store, &b_config).run(shutdown.clone()));
    let job = idle.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(
        job["attempt"], 2,
        "the sweep kept attempt 1 and the new claim is attempt 2"
    );
    assert_eq!(
        server.stats.tokenize_calls(),
        1,
        "tokenize is not called again"
    );
    assert_eq!(job["checkpoints"].as_array().unwrap().len(), 2);

    // The stale worker's writes are refused and commit nothing.
    let events_before = store.job_events(stale.job_id).await.unwrap().len();
    let checkpoint = json!({ "name": "embed", "skipped": false, "response": { "values": [9.0] } });
    let err = store
        .append_checkpoint(&stale, 1, "embed", &checkpoint)
        .await
        .expect_err("fenced");
    assert!(err.is_lost_claim(), "{err}");
    let err = store
        .settle(
            &stale,
            Settlement::Failed {
                error: "WORKFLOW: stale".into(),
                verdict: None,
                step: None,
            },
        )
        .await
        .expect_err("fenced");
    assert!(err.is_lost_claim(), "{err}");
    let job = idle.job(&job_id).await;
    assert_eq!(job["status"], "COMPLETED");
    assert_eq!(job["checkpoints"].as_array().unwrap().len(), 2);
    assert_eq!(
        store.job_events(stale.job_id).await.unwrap().len(),
        events_before,
        "no outbox row either"
    );

    shutdown.cancel();
    let _ = tokio::join!(sweeper, b);
    a_shutdown.cancel();
    idle.stop().await;
}

#[tokio::test]
async fn a_step_longer_than_the_lease_completes_under_one_worker() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_millis(3000)),
        ..Default::default()
    })
    .await;
    let mut config = test_config(&db.url, "node-a", 2);
    config.lease_ms = 1000;
    config.sweep_interval_ms = 50;
    let node = JobsNode::start(config).await;
    let job_id = node
        .submit(
            &two_step_workflow(&server.target()),
            json!({ "text": "slow" }),
        )
        .await;
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(job["attempt"], 1, "renewal kept the lease: never swept");
    assert_eq!(server.stats.embed_calls(), 1, "no second execution");
    node.stop().await;
}

#[tokio::test]
async fn every_step_call_carries_the_job_metadata() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 1)).await;
    let job_id = node
        .submit(&two_step_workflow(&server.target()), json!({ "text": "m" }))
        .await;
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    let calls = server.stats.calls();
    assert_eq!(calls.len(), 2);
    for (call, step) in calls.iter().zip(["tokenize", "embed"]) {
        assert_eq!(
            call.metadata,
            [
                ("idempotency-key".to_owned(), format!("{job_id}/{step}")),
                ("x-protomolt-attempt".to_owned(), job["attempt"].to_string()),
                ("x-protomolt-job-id".to_owned(), job_id.clone()),
                ("x-protomolt-step".to_owned(), step.to_owned()),
            ]
        );
    }
    node.stop().await;
}

/// A target that answers plain HTTP (a web server on the port) fails the step with a
/// hint saying so, beside tonic's own words.
#[tokio::test]
async fn a_target_that_answers_plain_http_is_named_as_such() {
    let db = TestDatabase::create().await;
    let web = protomolt_e2e::browser::serve(axum::Router::new()).await;
    let target = web.trim_start_matches("http://").to_owned();
    let node = JobsNode::start(test_config(&db.url, "plain-http", 1)).await;
    let answer = node
        .ok(
            "submit-workflow",
            json!({ "workflow": two_step_workflow(&target), "input": { "text": "x" }, "maxAttempts": 1 }),
        )
        .await;
    let job_id = answer["jobId"].as_str().expect("an id").to_owned();
    eventually("the job to end", WAIT, || async {
        matches!(
            node.job(&job_id).await["status"].as_str(),
            Some("FAILED" | "DEAD")
        )
    })
    .await;
    let error = node.job(&job_id).await["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        error.contains("answered HTTP, not gRPC"),
        "the error says what the target is: {error}"
    );
    node.stop().await;
}
