//! A map step survives `kill -9` of the node running it: a `protomolt-node` process
//! maps half of a 1,000-element list and is killed with SIGKILL; a second process
//! resumes the job and calls only the elements the first one did not store (at most
//! `maxParallel` of them twice). Real PostgreSQL, the fixture targets in this process.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{queued_map_job, stored_elements};
use serde_json::json;
use workflow::testkit::map_element_id;

const WAIT: Duration = Duration::from_secs(90);

/// A node process running jobs from `database_url` as `worker_id`, its log in `dir`.
fn node_process(dir: &std::path::Path, database_url: &str, worker_id: &str) -> Child {
    let config = dir.join(format!("{worker_id}.toml"));
    std::fs::write(
        &config,
        format!(
            r#"[node]
bind = "127.0.0.1:0"
roles = ["registry", "jobs"]

[jobs]
database_url = "{database_url}"
worker_id = "{worker_id}"
max_in_flight = 2
lease_ms = 1500
sweep_interval_ms = 100
poll_interval_ms = 200
max_concurrent_per_target = 32
"#
        ),
    )
    .expect("the node's config");
    let log = std::fs::File::create(dir.join(format!("{worker_id}.log"))).expect("a log file");
    Command::new(env!("CARGO_BIN_EXE_protomolt-node"))
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .env_remove("KAFKA_BOOTSTRAP")
        .args(["--config"])
        .arg(&config)
        .arg("run")
        .stdout(log.try_clone().expect("the log"))
        .stderr(log)
        .spawn()
        .expect("the node starts")
}

/// Kills the process when dropped (a failed assertion leaves no node behind).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_resumes_after_kill_9_calling_only_the_missing_elements() {
    let db = TestDatabase::create().await;
    // A node in this process that runs nothing: it migrates, submits and watches.
    let (server, idle, job_id) = queued_map_job(&db.url, 1000, 16).await;
    let client = db.connect().await;
    let dir = tempfile::tempdir().expect("a directory");

    let first = Running(node_process(dir.path(), &db.url, "first"));
    let deadline = Instant::now() + WAIT;
    while stored_elements(&client, None).await < 500 {
        assert!(
            Instant::now() < deadline,
            "the first node never stored half the list: {}",
            std::fs::read_to_string(dir.path().join("first.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // SIGKILL: no shutdown, no settlement, no release.
    drop(first);
    let stored = stored_elements(&client, None).await;
    let called = server.stats.embed_calls();
    assert!(
        called as i64 - stored <= 16,
        "{called} calls, {stored} stored: at most maxParallel elements called and not stored"
    );

    let _second = Running(node_process(dir.path(), &db.url, "second"));
    let job = idle.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    let calls = server.stats.embed_calls();
    assert!(
        (1000..=1016).contains(&calls),
        "{calls} calls for 1,000 elements: each once, at most maxParallel twice"
    );
    assert!(server.stats.max_in_flight() <= 16);
    let vectors = job["result"]["vectors"].as_array().expect("the list");
    assert_eq!(vectors.len(), 1000);
    for (i, vector) in vectors.iter().enumerate() {
        assert_eq!(vector["values"], json!([map_element_id(i)]), "{i}");
    }
    idle.stop().await;
}

/// Children started by a parent survive `kill -9` of the node starting them: a
/// `protomolt-node` process starts some of a 100-element map's children (16 alive at
/// once) and is killed with SIGKILL; a second process finishes the parent, and
/// exactly one child exists per element.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_started_across_a_kill_9_exist_once_per_element() {
    let db = TestDatabase::create().await;
    let server = workflow::testkit::FixtureServer::start_with(workflow::testkit::FixtureOptions {
        embed_echo_ids: true,
        embed_delay: Some(Duration::from_millis(20)),
        ..Default::default()
    })
    .await;
    // A node in this process that runs nothing: it migrates, stores, submits, watches.
    let idle =
        protomolt_e2e::jobs::JobsNode::start(protomolt_e2e::jobs::test_config(&db.url, "idle", 0))
            .await;
    let child = workflow::testkit::embed_one_workflow(&server.target());
    idle.ok("put-workflow", json!({ "workflow": child })).await;
    let parent = workflow::testkit::embed_all_workflow(&server.target(), 16);
    let job_id = idle
        .submit(
            &parent,
            json!({ "text": workflow::testkit::distinct_text(100) }),
        )
        .await;
    let client = db.connect().await;
    let children = async || -> i64 {
        client
            .query_one(
                "SELECT count(*) FROM workflow_run WHERE parent_job_id = $1::text::uuid",
                &[&job_id],
            )
            .await
            .unwrap()
            .get(0)
    };
    let dir = tempfile::tempdir().expect("a directory");
    let first = Running(node_process(dir.path(), &db.url, "first"));
    let deadline = Instant::now() + WAIT;
    while children().await < 40 {
        assert!(
            Instant::now() < deadline,
            "the first node never started 40 children: {}",
            std::fs::read_to_string(dir.path().join("first.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(first);
    let _second = Running(node_process(dir.path(), &db.url, "second"));
    let job = idle.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(children().await, 100, "exactly one child per element");
    let slots: i64 = client
        .query_one(
            "SELECT count(DISTINCT parent_item) FROM workflow_run WHERE parent_job_id = $1::text::uuid",
            &[&job_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 100);
    let vectors = job["result"]["vectors"].as_array().expect("the list");
    assert_eq!(vectors.len(), 100);
    for (i, vector) in vectors.iter().enumerate() {
        assert_eq!(vector["values"], json!([map_element_id(i)]), "{i}");
    }
    idle.stop().await;
}
