//! Exactly one job per tick across a fleet that is hurt while it fires (issue 35):
//! three real `protomolt-node` processes over one database fire an `@every 1s`
//! schedule for 60 s while one is killed with `kill -9` and another is frozen with
//! SIGSTOP for 5 s. Every tick makes exactly one job.

use std::time::{Duration, Instant};

use chrono::{DateTime, DurationRound, Utc};
use protomolt_e2e::TestDatabase;
use protomolt_e2e::process::{Node, fleet_node_config, free_port, node_binary_beside, post_verb};
use serde_json::json;
use workflow::testkit::{FixtureServer, leaf_workflow};

/// The schedule's span: 60 ticks of one second.
const TICKS: i64 = 60;

/// Its `[jobs]` settings beyond the fleet's defaults.
const JOBS_SETTINGS: &str = "lease_ms = 5000\nsweep_interval_ms = 500\npoll_interval_ms = 500\nbackoff_base_ms = 200\nschedule_poll_ms = 200\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_every_second_schedule_makes_one_job_per_tick_while_nodes_die_and_freeze() {
    let node_bin = node_binary_beside(std::path::Path::new(env!("CARGO_BIN_EXE_chaos")));
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let dir = tempfile::tempdir().expect("a directory");
    // The fleet shares its stored workflows (one directory, as a deployment ships
    // the same files to every node), written before the nodes start.
    let workflows = dir.path().join("workflows");
    std::fs::create_dir_all(&workflows).expect("workflows dir");
    std::fs::write(
        workflows.join("leaf.json"),
        serde_json::to_vec_pretty(&leaf_workflow(&server.target())).expect("json"),
    )
    .expect("the stored workflow");
    let nodes: Vec<Node> = ["n1", "n2", "n3"]
        .iter()
        .map(|name| {
            let port = free_port();
            let config = fleet_node_config(name, port, &workflows, &db.url, JOBS_SETTINGS);
            Node::new(name, port, &node_bin, dir.path(), &config)
        })
        .collect();
    for node in &nodes {
        node.up();
    }
    let http = reqwest::Client::new();

    // Sixty ticks, starting a few seconds from now on a whole second.
    let start: DateTime<Utc> = (Utc::now() + chrono::Duration::seconds(5))
        .duration_trunc(chrono::Duration::seconds(1))
        .expect("a whole second");
    let end = start + chrono::Duration::seconds(TICKS);
    post_verb(
        &http,
        &nodes[0],
        "put-schedule",
        json!({ "name": "every-second", "cron": "@every 1s", "workflowName": "leaf",
            "input": { "text": "tick" }, "overlap": "allow",
            "startAt": start.to_rfc3339(), "endAt": end.to_rfc3339() }),
    )
    .await;

    let wait_until = |at: DateTime<Utc>| async move {
        let left = (at - Utc::now()).to_std().unwrap_or_default();
        tokio::time::sleep(left).await;
    };
    // 15 s in, n1 dies mid-whatever (holding a schedule's lock, perhaps).
    wait_until(start + chrono::Duration::seconds(15)).await;
    nodes[0].kill();
    // 30 s in, n2 freezes for 5 s (its session may sit in a firing transaction).
    wait_until(start + chrono::Duration::seconds(30)).await;
    nodes[1].signal("STOP");
    tokio::time::sleep(Duration::from_secs(5)).await;
    nodes[1].signal("CONT");

    // Every tick is fired by the end (plus the grace a late tick has).
    let client = db.connect().await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let ticks: Vec<DateTime<Utc>> = loop {
        let ticks: Vec<DateTime<Utc>> = client
            .query(
                "SELECT scheduled_for FROM workflow_run WHERE schedule_name = 'every-second' ORDER BY scheduled_for",
                &[],
            )
            .await
            .expect("ticks")
            .iter()
            .map(|row| row.get(0))
            .collect();
        if ticks.len() as i64 >= TICKS || Instant::now() > deadline {
            break ticks;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let distinct: std::collections::BTreeSet<_> = ticks.iter().collect();
    assert_eq!(
        distinct.len(),
        ticks.len(),
        "no tick made two jobs: {ticks:?}"
    );
    let expected: Vec<DateTime<Utc>> = (0..TICKS)
        .map(|i| start + chrono::Duration::seconds(i))
        .collect();
    let missing: Vec<_> = expected.iter().filter(|t| !distinct.contains(t)).collect();
    assert!(
        missing.is_empty(),
        "every one of the {TICKS} ticks made its job; missing: {missing:?}"
    );
    assert!(
        ticks.iter().all(|t| *t >= start && *t < end),
        "no job outside the schedule's span: {ticks:?}"
    );
    let schedule = post_verb(
        &http,
        &nodes[2],
        "get-schedule",
        json!({ "name": "every-second" }),
    )
    .await;
    assert_eq!(
        schedule["schedule"]["nextFireAt"],
        serde_json::Value::Null,
        "past endAt no tick is left: {schedule}"
    );
    for node in &nodes {
        node.down();
    }
}
