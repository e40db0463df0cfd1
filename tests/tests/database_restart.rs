//! A node rides out PostgreSQL restarts, fast and immediate (a crash: the server
//! replays its WAL), on a cluster the test starts for itself: submissions answer again
//! once the server is back, jobs queued before, across and after each restart
//! complete, and the invariants hold. The chaos run repeats this at random; here it
//! is one of each, in order.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use protomolt_e2e::cluster::{PgCluster, Shutdown};
use protomolt_e2e::invariants::check;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::json;
use workflow::testkit::{FixtureServer, two_step_workflow};

const WAIT: Duration = Duration::from_secs(60);

/// Submits under a client-minted id until the node answers 200 (the id makes the
/// retries one job).
async fn submit(node: &JobsNode, workflow: &serde_json::Value, text: &str) -> String {
    let job_id = uuid::Uuid::new_v4().to_string();
    let body = json!({ "jobId": job_id, "workflow": workflow, "input": { "text": text } });
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, answer) = node.call("submit-workflow", body.clone()).await;
        if status == StatusCode::OK {
            return job_id;
        }
        assert!(
            Instant::now() < deadline,
            "submit never answered 200: {status} {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every job is COMPLETED, tolerating the store's errors while the
/// server is away.
async fn wait_completed(node: &JobsNode, jobs: &[String]) {
    let deadline = Instant::now() + WAIT;
    for job in jobs {
        let id = uuid::Uuid::parse_str(job).unwrap();
        loop {
            if let Ok(Some(row)) = node.store.get_job(id).await
                && row["status"] == "COMPLETED"
            {
                break;
            }
            assert!(Instant::now() < deadline, "job {job} never completed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_rides_out_fast_and_immediate_database_restarts() {
    let cluster = tokio::task::spawn_blocking(|| PgCluster::start(None))
        .await
        .unwrap();
    let url = cluster.url("");
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&url, "node-a", 2)).await;
    let workflow = two_step_workflow(&server.target());

    let mut jobs = vec![submit(&node, &workflow, "before").await];
    for mode in [Shutdown::Immediate, Shutdown::Fast] {
        // Queued just before the restart: claimed before or after it.
        jobs.push(submit(&node, &workflow, "across").await);
        // pg_ctl blocks; the node's tasks go on on the other worker thread.
        tokio::task::block_in_place(|| cluster.restart(mode));
        jobs.push(submit(&node, &workflow, "after").await);
    }
    wait_completed(&node, &jobs).await;
    node.stop().await;

    let client = protomolt_e2e::connect(&url).await;
    let report = check(&client, false).await;
    assert!(report.breaches.is_empty(), "{report}");
    assert_eq!(
        report.jobs_by_status.get("COMPLETED"),
        Some(&(jobs.len() as i64)),
        "{report}"
    );
}
