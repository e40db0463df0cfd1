//! The fleet: two nodes on one database share the work without ever doubling it, the
//! per-target cap holds, an idle node wakes on NOTIFY, and shutdown hands work back.

use std::time::{Duration, Instant};

use jobs_role::JobStatus;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually, queue_jobs, test_config};
use serde_json::json;
use workflow::CompiledWorkflow;
use workflow::testkit::{FixtureOptions, FixtureServer, two_step_workflow};

#[tokio::test]
async fn two_nodes_of_eight_workers_process_2000_jobs_each_exactly_once() {
    const JOBS: usize = 2000;
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let workflow = two_step_workflow(&server.target());
    CompiledWorkflow::compile(&workflow).expect("compiles");

    // Queue everything first, then let the fleet loose on it.
    let idle = JobsNode::start(test_config(&db.url, "loader", 0)).await;
    queue_jobs(&idle.store, &workflow, JOBS).await;
    idle.stop().await;

    let mut config_a = test_config(&db.url, "node-a", 8);
    config_a.max_connections = 10;
    let mut config_b = test_config(&db.url, "node-b", 8);
    config_b.max_connections = 10;
    let a = JobsNode::start(config_a).await;
    let b = JobsNode::start(config_b).await;

    a.wait_for_count(JobStatus::Completed, JOBS as i64, Duration::from_secs(600))
        .await;
    let client = db.connect().await;

    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE attempt = 1) FROM workflow_run",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, i64>(0),
        JOBS as i64,
        "every job was claimed exactly once"
    );
    assert_eq!(
        server.stats.tokenize_calls(),
        JOBS,
        "each step ran exactly once per job"
    );
    assert_eq!(server.stats.embed_calls(), JOBS);
    let events: i64 = client
        .query_one("SELECT count(*) FROM workflow_run_events_outbox", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        events,
        4 * JOBS as i64,
        "ACCEPTED, two checkpoints and COMPLETED per job"
    );

    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn the_per_target_cap_bounds_calls_in_flight() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_millis(150)),
        ..Default::default()
    })
    .await;
    let mut config = test_config(&db.url, "node-a", 8);
    config.max_concurrent_per_target = 2;
    config.max_connections = 12;
    let node = JobsNode::start(config).await;
    let mut ids = Vec::new();
    for i in 0..16 {
        let workflow = two_step_workflow(&server.target());
        ids.push(
            node.submit(&workflow, json!({ "text": format!("{i}") }))
                .await,
        );
    }
    for id in &ids {
        node.wait_for_status(id, "COMPLETED", Duration::from_secs(60))
            .await;
    }
    assert_eq!(
        server.stats.max_in_flight(),
        2,
        "never more than 2 calls in flight to the target, and the cap was reached"
    );
    node.stop().await;
}

#[tokio::test]
async fn an_idle_node_starts_a_submitted_job_before_the_poll_could_fire() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let mut config = test_config(&db.url, "node-a", 2);
    config.poll_interval_ms = 5_000;
    let node = JobsNode::start(config).await;
    // Let the claim loops find nothing and go idle (waiting on NOTIFY or the 5 s poll).
    tokio::time::sleep(Duration::from_millis(500)).await;

    let submitted = Instant::now();
    let job_id = node
        .submit(
            &two_step_workflow(&server.target()),
            json!({ "text": "now" }),
        )
        .await;
    eventually("the job to start", Duration::from_secs(10), || async {
        server.stats.tokenize_calls() == 1
    })
    .await;
    let pickup = submitted.elapsed();
    assert!(
        pickup < Duration::from_secs(4),
        "picked up after {pickup:?}: the NOTIFY wake-up did not work"
    );
    node.wait_for_status(&job_id, "COMPLETED", Duration::from_secs(10))
        .await;
    node.stop().await;
}

#[tokio::test]
async fn shutdown_releases_running_jobs_without_burning_an_attempt() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_secs(20)),
        ..Default::default()
    })
    .await;
    let mut config = test_config(&db.url, "node-a", 1);
    config.shutdown_grace_ms = 200;
    let node = JobsNode::start(config).await;
    let job_id = node
        .submit(
            &two_step_workflow(&server.target()),
            json!({ "text": "bye" }),
        )
        .await;
    eventually("embed to be called", Duration::from_secs(10), || async {
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
    assert_eq!(job["status"], "QUEUED", "released for another node: {job}");
    assert_eq!(job["attempt"], 0, "the attempt was not burned");
    assert_eq!(job["lease_owner"], serde_json::Value::Null);
    assert_eq!(
        job["checkpoints"].as_array().unwrap().len(),
        1,
        "tokenize's checkpoint is kept"
    );
}
