//! Map steps (`forEach`) through the real node: one call per element at most
//! `maxParallel` at once, each element stored as its call ends (V23's items table), a
//! worker killed mid-map resumed by another that calls only the missing elements,
//! `onItemFailure`, and the synchronous `run-workflow`. Real PostgreSQL, real fixture
//! servers.

use std::time::Duration;

use jobs_role::worker::sweep_loop;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, bare_worker, eventually, test_config};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use workflow::testkit::{FixtureOptions, FixtureServer, diamond_workflow, map_workflow};

const WAIT: Duration = Duration::from_secs(60);

/// A text of `n` characters: code points 0x100.. (one id each, all distinct).
fn text(n: usize) -> String {
    (0..n)
        .map(|i| char::from_u32(0x100 + i as u32).unwrap())
        .collect()
}

fn id(i: usize) -> f64 {
    (0x100 + i) as f64
}

async fn stored_items(db: &TestDatabase, job_id: &str) -> i64 {
    db.connect()
        .await
        .query_one(
            "SELECT count(*) FROM workflow_run_items WHERE job_id = $1::text::uuid",
            &[&job_id],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_over_a_thousand_elements_survives_its_worker_dying_halfway() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_millis(5)),
        embed_echo_ids: true,
        ..Default::default()
    })
    .await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let job_id = idle
        .submit(
            &map_workflow(&server.target(), 16),
            json!({ "text": text(1000) }),
        )
        .await;
    let store = idle.store.clone();
    let mut config = test_config(&db.url, "crashy", 1);
    config.lease_ms = 1500;
    config.max_concurrent_per_target = 32;

    // Worker A maps about half the list, and dies without a word.
    let a = tokio::spawn(bare_worker(&store, &config).run(CancellationToken::new()));
    eventually("half the elements to be called", WAIT, || async {
        server.stats.embed_calls() >= 500
    })
    .await;
    a.abort();
    let _ = a.await;
    let stored = stored_items(&db, &job_id).await;
    let called_by_a = server.stats.embed_calls();
    assert!(
        stored >= 400,
        "{stored} elements stored as their calls ended"
    );
    assert!(
        (called_by_a as i64) - stored <= 16,
        "at most maxParallel elements called and not stored ({called_by_a} called, {stored} stored)"
    );

    // The sweeper requeues it once the lease passes; worker B calls only the rest.
    let shutdown = CancellationToken::new();
    let sweeper = tokio::spawn(sweep_loop(
        store.clone(),
        Duration::from_millis(50),
        jobs_role::metrics::JobsMetrics::default(),
        shutdown.clone(),
    ));
    let mut b_config = config.clone();
    b_config.worker_id = "survivor".into();
    let b = tokio::spawn(bare_worker(&store, &b_config).run(shutdown.clone()));
    let job = idle.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    shutdown.cancel();
    let _ = tokio::join!(sweeper, b);

    let calls = server.stats.embed_calls();
    eprintln!("worker A called {called_by_a} and stored {stored}; {calls} calls in all");
    assert!(
        (1000..=1016).contains(&calls),
        "{calls} calls: each element once, at most maxParallel twice"
    );
    assert!(
        server.stats.max_in_flight() <= 16,
        "never more than maxParallel at once"
    );
    let vectors = job["result"]["vectors"].as_array().expect("the list");
    assert_eq!(vectors.len(), 1000);
    for (i, vector) in vectors.iter().enumerate() {
        assert_eq!(vector["values"], json!([id(i)]), "element {i} in order");
    }
    assert_eq!(stored_items(&db, &job_id).await, 1000);
    let each = &job["checkpoints"][1];
    assert_eq!(each["name"], "each");
    assert_eq!(each["response"]["items"].as_array().unwrap().len(), 1000);
    idle.stop().await;
}

#[tokio::test]
async fn a_map_runs_at_most_max_parallel_calls_at_once_through_the_node() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_millis(20)),
        ..Default::default()
    })
    .await;
    let mut config = test_config(&db.url, "mapper", 2);
    config.max_concurrent_per_target = 64;
    let node = JobsNode::start(config).await;
    let job_id = node
        .submit(
            &map_workflow(&server.target(), 16),
            json!({ "text": text(200) }),
        )
        .await;
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(server.stats.embed_calls(), 200);
    let most = server.stats.max_in_flight();
    assert!((2..=16).contains(&most), "{most} calls at once");
    node.stop().await;
}

#[tokio::test]
async fn a_failed_element_fails_the_job_naming_it_or_is_collected() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_rejects_id: Some(id(5) as i64),
        embed_echo_ids: true,
        ..Default::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "failing", 2)).await;
    let failing = node
        .submit(
            &map_workflow(&server.target(), 4),
            json!({ "text": text(12) }),
        )
        .await;
    let job = node.wait_for_status(&failing, "FAILED", WAIT).await;
    let error = job["error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "GRPC: step 'each': element 5 of 12 failed (1 failed in all): INVALID_ARGUMENT"
        ),
        "{error}"
    );

    let mut collecting = map_workflow(&server.target(), 4);
    collecting["steps"][1]["onItemFailure"] = json!("collect");
    let collected = node.submit(&collecting, json!({ "text": text(12) })).await;
    let job = node.wait_for_status(&collected, "COMPLETED", WAIT).await;
    let vectors = job["result"]["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 11, "element 5 left out");
    assert_eq!(vectors[5]["values"], json!([id(6)]));
    let each = &job["checkpoints"][1]["response"];
    assert_eq!(each["failed"][0]["index"], 5);
    let failed: i64 = db
        .connect()
        .await
        .query_one(
            "SELECT count(*) FROM workflow_run_items WHERE job_id = $1::text::uuid AND error IS NOT NULL",
            &[&collected],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(failed, 1, "the collected failure is stored");

    // An operator's retry of the failed job from the map step calls every element
    // again (its stored elements dropped), and the target now refuses nothing new.
    let answer = node
        .ok("retry-job", json!({ "jobId": failing, "fromStep": "each" }))
        .await;
    assert_eq!(answer["checkpointsKept"], 1, "{answer}");
    node.wait_for_status(&failing, "FAILED", WAIT).await;
    node.stop().await;
}

#[tokio::test]
async fn run_workflow_runs_a_diamond_and_a_map_synchronously() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_echo_ids: true,
        ..Default::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "sync", 1)).await;
    let ran = node
        .ok(
            "run-workflow",
            json!({ "workflow": diamond_workflow(&server.target()), "input": { "text": "hi" } }),
        )
        .await;
    assert_eq!(ran["ok"], true, "{ran}");
    assert_eq!(ran["steps"].as_array().unwrap().len(), 4);
    let ran = node
        .ok(
            "run-workflow",
            json!({ "workflow": map_workflow(&server.target(), 4), "input": { "text": text(5) } }),
        )
        .await;
    assert_eq!(ran["ok"], true, "{ran}");
    let output: &Value = &ran["output"];
    assert_eq!(output["vectors"].as_array().unwrap().len(), 5, "{ran}");
    assert_eq!(output["vectors"][4]["values"], json!([id(4)]));
    node.stop().await;
}
