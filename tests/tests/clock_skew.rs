//! Nodes whose clocks are off (issue 38): two real `protomolt-node` processes, one 30 s
//! ahead of the machine and one 30 s behind (libfaketime), share a database. A delayed
//! start counts from the database's clock, events are stamped by it, and no lease is
//! judged by a node's own clock: every job is claimed once and each step called once.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use protomolt_e2e::TestDatabase;
use protomolt_e2e::process::{
    FakeClock, Node, fleet_node_config, free_port, node_binary_beside, post_verb,
};
use serde_json::json;
use workflow::testkit::{FixtureOptions, FixtureServer, two_step_workflow};

/// How far each node's clock is off.
const SKEW_S: i64 = 30;

/// Its `[jobs]` settings beyond the fleet's defaults.
const JOBS_SETTINGS: &str = "lease_ms = 3000\nsweep_interval_ms = 300\npoll_interval_ms = 300\n";

fn parse(at: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(at)
        .unwrap_or_else(|e| panic!("{at}: {e}"))
        .with_timezone(&Utc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_with_clocks_off_delay_stamp_and_lease_by_the_databases_clock() {
    let node_bin = node_binary_beside(std::path::Path::new(env!("CARGO_BIN_EXE_chaos")));
    let db = TestDatabase::create().await;
    // Steps slower than a lease renewal, so leases are judged while jobs run.
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_millis(1_500)),
        ..FixtureOptions::default()
    })
    .await;
    let dir = tempfile::tempdir().expect("a directory");
    let workflows = dir.path().join("workflows");
    std::fs::create_dir_all(&workflows).expect("workflows dir");
    let mut workflow = two_step_workflow(&server.target());
    workflow["name"] = json!("skewed");
    std::fs::write(workflows.join("skewed.json"), workflow.to_string()).expect("the workflow");
    let nodes: Vec<Node> = [("ahead", SKEW_S), ("behind", -SKEW_S)]
        .iter()
        .map(|(name, skew)| {
            let port = free_port();
            let config = fleet_node_config(name, port, &workflows, &db.url, JOBS_SETTINGS);
            let clock = FakeClock::new(&dir.path().join(format!("{name}.clock")))
                .expect("libfaketime (./dev up installs it: apt-get install libfaketime)");
            clock.set(*skew);
            Node::new(name, port, &node_bin, dir.path(), &config).with_clock(clock)
        })
        .collect();
    for node in &nodes {
        node.up();
    }
    let http = reqwest::Client::new();
    let client = db.connect().await;

    // The skew is real: each node reads its own clock 30 s off.
    for (node, skew) in nodes.iter().zip([SKEW_S, -SKEW_S]) {
        let fleet = post_verb(&http, node, "get-fleet", json!({})).await;
        let read_at = parse(fleet["readAt"].as_str().expect("readAt"));
        let off = (read_at - Utc::now()).num_seconds();
        assert!(
            (off - skew).abs() <= 3,
            "{}'s clock is {off} s off, not {skew} s: libfaketime did not take",
            node.name
        );
    }

    // A delay counts from the database's clock, on either node.
    for node in &nodes {
        let answer = post_verb(
            &http,
            node,
            "submit-workflow",
            json!({ "workflowName": "skewed", "input": { "text": "later" }, "delayMs": 60_000 }),
        )
        .await;
        let id: uuid::Uuid = answer["jobId"]
            .as_str()
            .expect("jobId")
            .parse()
            .expect("a uuid");
        let ahead: f64 = client
            .query_one(
                "SELECT extract(epoch FROM run_after - now())::float8 FROM workflow_run WHERE job_id = $1",
                &[&id],
            )
            .await
            .expect("the delayed job")
            .get(0);
        assert!(
            (55.0..=61.0).contains(&ahead),
            "a 60 s delay submitted on {} starts in {ahead:.1} s",
            node.name
        );
    }

    // Jobs run across both nodes: each claimed once, each step called once, and
    // every event stamped within a few seconds of the database's clock.
    let mut jobs = Vec::new();
    for i in 0..12 {
        let node = &nodes[i % 2];
        let answer = post_verb(
            &http,
            node,
            "submit-workflow",
            json!({ "workflowName": "skewed", "input": { "text": format!("job {i}") } }),
        )
        .await;
        jobs.push(answer["jobId"].as_str().expect("jobId").to_owned());
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    for job in &jobs {
        loop {
            let answer = post_verb(&http, &nodes[0], "get-job", json!({ "jobId": job })).await;
            let answer = &answer["job"];
            if answer["status"] == "COMPLETED" {
                // Between the row's creation and its end, by the database's clock.
                let created = parse(answer["createdAt"].as_str().expect("createdAt"));
                let finished = parse(answer["finishedAt"].as_str().expect("finishedAt"));
                let slack = chrono::Duration::seconds(2);
                for event in answer["events"].as_array().expect("events") {
                    let at = parse(event["occurredAt"].as_str().expect("occurredAt"));
                    assert!(
                        at >= created - slack && at <= finished + slack,
                        "job {job}'s {} event is stamped {at}, outside {created} to {finished}: a node's own clock",
                        event["type"]
                    );
                }
                break;
            }
            assert!(
                Instant::now() < deadline,
                "job {job} never completed: {answer}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let claimed_more_than_once: i64 = client
        .query_one(
            "SELECT count(*) FROM workflow_run WHERE job_id::text = ANY($1) AND claims <> 1",
            &[&jobs],
        )
        .await
        .expect("claims")
        .get(0);
    assert_eq!(
        claimed_more_than_once, 0,
        "a job was claimed again: a lease was judged by a node's clock"
    );
    assert_eq!(
        server.stats.tokenize_calls(),
        jobs.len(),
        "a step ran twice"
    );
    for node in &nodes {
        node.down();
    }
}
