//! `bench`: throughput and pickup latency of a jobs node, against the real services.
//!
//! ```sh
//! ./dev up && source target/dev/env
//! cargo run --release -p protomolt-e2e --bin bench -- 5000 8
//! ```
//!
//! Arguments: jobs to run (default 2000) and claim loops (default 8). It queues the
//! jobs (two-step fixture workflow against loopback gRPC servers), starts one node and
//! reports completed jobs per second; then, on the idle node, it submits jobs one at a
//! time and reports how long each took to start (submit → first step call), which is
//! what LISTEN/NOTIFY buys. Speed targets live here, not in the tests.

use std::time::{Duration, Instant};

use jobs_role::JobStatus;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually, queue_jobs, test_config};
use serde_json::json;
use workflow::testkit::{FixtureServer, two_step_workflow};

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let jobs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let workers: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);

    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let workflow = two_step_workflow(&server.target());

    let loader = JobsNode::start(test_config(&db.url, "loader", 0)).await;
    let queued = Instant::now();
    queue_jobs(&loader.store, &workflow, jobs).await;
    let insert_rate = jobs as f64 / queued.elapsed().as_secs_f64();
    loader.stop().await;

    let mut config = test_config(&db.url, "bench", workers);
    config.max_connections = workers + 4;
    config.poll_interval_ms = 1_000;
    let node = JobsNode::start(config).await;
    let started = Instant::now();
    node.wait_for_count(JobStatus::Completed, jobs as i64, Duration::from_secs(3600))
        .await;
    let elapsed = started.elapsed();

    let mut pickups = Vec::new();
    for i in 0..20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let calls = server.stats.tokenize_calls();
        let submitted = Instant::now();
        node.ok(
            "submit-workflow",
            json!({ "workflow": workflow, "input": { "text": format!("idle {i}") } }),
        )
        .await;
        eventually("the job to start", Duration::from_secs(30), || async {
            server.stats.tokenize_calls() > calls
        })
        .await;
        pickups.push(submitted.elapsed());
    }
    pickups.sort();
    node.stop().await;

    println!("queued {jobs} jobs at {insert_rate:.0} inserts/s");
    println!(
        "ran {jobs} two-step jobs with {workers} claim loops in {:.2} s: {:.0} jobs/s ({:.0} step calls/s)",
        elapsed.as_secs_f64(),
        jobs as f64 / elapsed.as_secs_f64(),
        2.0 * jobs as f64 / elapsed.as_secs_f64()
    );
    println!(
        "idle pickup (submit -> first step call), 20 jobs: p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms (poll interval 1000 ms)",
        pickups[9].as_secs_f64() * 1000.0,
        pickups[18].as_secs_f64() * 1000.0,
        pickups[19].as_secs_f64() * 1000.0
    );
}
