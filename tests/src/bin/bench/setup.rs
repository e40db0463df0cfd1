//! What every scenario sets up: workflows over the fixture servers, a backlog queued
//! with SQL (fast enough for a million rows), a node configured for speed.

use std::time::Duration;

use jobs_role::JobStatus;
use jobs_role::JobsConfig;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::Value;
use tokio_postgres::Client;
use workflow::testkit::{step, workflow};

/// How long any one wait of a scenario may take before the bench gives up.
pub const PATIENCE: Duration = Duration::from_secs(3600);

/// `steps` Tokenize calls in a row (`t1`, `t2`, ...): the cheapest real gRPC work.
pub fn tokenize_chain(target: &str, count: usize) -> Value {
    let steps = (1..=count)
        .map(|i| {
            step(
                &format!("t{i}"),
                target,
                "jobs.test.Tokenizer/Tokenize",
                &["text = input.text"],
            )
        })
        .collect();
    workflow(&format!("tokenize-x{count}"), steps, None)
}

/// Queues `count` jobs of `workflow` with one statement (inputs `job 1`, ...). The
/// rows are what a submission writes, without the ACCEPTED events.
pub async fn queue_with_sql(client: &Client, workflow: &Value, count: usize) {
    let name = workflow["name"].as_str().unwrap_or("workflow");
    let digest = protomolt_e2e::jobs::file_snapshot(client, workflow).await;
    client
        .execute(
            "INSERT INTO workflow_run (job_id, workflow_name, definition_digest, input, max_attempts)
             SELECT gen_random_uuid(), $1, $2, jsonb_build_object('text', 'job ' || i), 3
               FROM generate_series(1, $3::bigint) AS i",
            &[&name, &digest, &(count as i64)],
        )
        .await
        .expect("queueing the backlog");
    client
        .batch_execute("ANALYZE workflow_run")
        .await
        .expect("ANALYZE");
}

/// A fresh database with the schema applied (a node without workers started and
/// stopped), for scenarios that write their rows with SQL.
pub async fn migrated_database() -> TestDatabase {
    let db = TestDatabase::create().await;
    JobsNode::start(node_config(&db, "schema", 0))
        .await
        .stop()
        .await;
    db
}

/// A node tuned to drain a backlog: `in_flight` segments at once, the per-target cap
/// out of the way, a connection pool sized for the flusher, the lease renewals and
/// the claims.
pub fn node_config(db: &TestDatabase, worker_id: &str, in_flight: usize) -> JobsConfig {
    JobsConfig {
        max_concurrent_per_target: in_flight.max(1),
        max_connections: 16,
        poll_interval_ms: 1_000,
        lease_ms: 300_000,
        ..test_config(&db.url, worker_id, in_flight)
    }
}

/// Waits until `count` jobs are COMPLETED, counting every 100 ms (a count is a scan:
/// counting more often would load the database the bench measures); panics after
/// [`PATIENCE`].
pub async fn wait_completed(node: &JobsNode, count: usize) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while node
        .store
        .count_jobs(JobStatus::Completed)
        .await
        .expect("count")
        < count as i64
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{count} jobs never completed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The resident set of this process now and at its peak, in MiB (`/proc/self/status`).
pub fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
