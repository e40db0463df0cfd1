//! Fleet-wide limits on calls (issue 34): a target's rate and cap held by three nodes
//! on one database, a step's `rateLimit` per key with units from CEL, and throttled
//! jobs given back without spending an attempt.

use std::time::{Duration, Instant};

use jobs_role::JobStatus;
use jobs_role::config::TargetLimitConfig;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, submit_texts, test_config, three_nodes};
use serde_json::{Value, json};
use workflow::testkit::{FixtureOptions, FixtureServer, leaf_workflow};

/// Three nodes of 8 slots on `db`, each with `limits`.
async fn limited_nodes(db: &TestDatabase, limits: &[TargetLimitConfig]) -> Vec<JobsNode> {
    three_nodes(&db.url, 8, |config| config.target_limits = limits.to_vec()).await
}

/// When each Tokenize call reached `server`, in arrival order.
fn arrival_times(server: &FixtureServer) -> Vec<Instant> {
    server
        .stats
        .tokenize_arrivals()
        .into_iter()
        .map(|(_, at)| at)
        .collect()
}

/// The most calls that arrived within any `window` (sliding over the arrivals).
fn most_within(arrivals: &[Instant], window: Duration) -> usize {
    let mut sorted = arrivals.to_vec();
    sorted.sort();
    let mut most = 0;
    let mut start = 0;
    for end in 0..sorted.len() {
        while sorted[end] - sorted[start] >= window {
            start += 1;
        }
        most = most.max(end - start + 1);
    }
    most
}

async fn attempts(db: &TestDatabase) -> Vec<i32> {
    db.connect()
        .await
        .query("SELECT attempt FROM workflow_run", &[])
        .await
        .expect("attempts")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn a_target_rate_holds_across_three_nodes_and_throttled_jobs_spend_no_attempt() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    // 300/min is 5 a second, with a burst of 2.
    let limits = [TargetLimitConfig {
        targets: server.target(),
        max_concurrent: None,
        rate: Some("300/min".into()),
        burst: Some(2),
    }];
    let nodes = limited_nodes(&db, &limits).await;
    let texts: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    submit_texts(&nodes[0], &leaf_workflow(&server.target()), &texts).await;
    nodes[0]
        .wait_for_count(JobStatus::Completed, 40, Duration::from_secs(120))
        .await;
    let arrivals = arrival_times(&server);
    assert_eq!(arrivals.len(), 40, "each job called once");
    for seconds in [1u64, 2, 4] {
        let most = most_within(&arrivals, Duration::from_secs(seconds));
        let allowed = 5 * seconds as usize + 2;
        assert!(
            most <= allowed,
            "{most} calls within {seconds} s, over the rate's {allowed} (5/s and a burst of 2)"
        );
    }
    let span = arrivals
        .iter()
        .max()
        .unwrap()
        .duration_since(*arrivals.iter().min().unwrap());
    assert!(
        span >= Duration::from_secs(7),
        "40 calls at 5/s after a burst of 2 take at least 7.6 s, took {span:?}"
    );
    assert!(
        attempts(&db).await.iter().all(|a| *a == 1),
        "a throttle spends no attempt: {:?}",
        attempts(&db).await
    );
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test]
async fn a_target_cap_holds_calls_in_flight_across_three_nodes() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_millis(100)),
        ..FixtureOptions::default()
    })
    .await;
    let limits = [TargetLimitConfig {
        targets: "127.0.0.1:*".into(),
        max_concurrent: Some(2),
        rate: None,
        burst: None,
    }];
    let nodes = limited_nodes(&db, &limits).await;
    let texts: Vec<String> = (0..30).map(|i| format!("t{i}")).collect();
    submit_texts(&nodes[1], &leaf_workflow(&server.target()), &texts).await;
    nodes[0]
        .wait_for_count(JobStatus::Completed, 30, Duration::from_secs(120))
        .await;
    assert!(
        server.stats.max_in_flight() <= 2,
        "{} calls in flight at once, over the cap of 2",
        server.stats.max_in_flight()
    );
    assert!(attempts(&db).await.iter().all(|a| *a == 1));
    for node in nodes {
        node.stop().await;
    }
}

/// `leaf` with a `rateLimit` on its tokenize step.
fn limited_leaf(target: &str, limit: Value) -> Value {
    let mut workflow = leaf_workflow(target);
    workflow["steps"][0]["rateLimit"] = limit;
    workflow
}

#[tokio::test]
async fn a_steps_rate_limit_keeps_a_bucket_per_key_and_says_why_a_job_waits() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 4)).await;
    let workflow = limited_leaf(
        &server.target(),
        json!({ "key": "input.text", "rate": "1/hour" }),
    );
    let a1 = node.submit(&workflow, json!({ "text": "a" })).await;
    node.wait_for_status(&a1, "COMPLETED", Duration::from_secs(30))
        .await;
    // Another key has a bucket of its own.
    let b1 = node.submit(&workflow, json!({ "text": "b" })).await;
    node.wait_for_status(&b1, "COMPLETED", Duration::from_secs(30))
        .await;
    // The same key waits for its next token, an hour out: given back, not failed.
    let a2 = node.submit(&workflow, json!({ "text": "a" })).await;
    let job = loop {
        let job = node.ok("get-job", json!({ "jobId": a2 })).await["job"].clone();
        if job["throttled"].is_string() {
            break job;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(job["status"], "QUEUED");
    assert_eq!(job["attempt"], 0, "the attempt was given back");
    let why = job["throttled"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("THROTTLED: step 'tokenize': rateLimit 'leaf.tokenize=a' (1/hour)"),
        "{why}"
    );
    assert_eq!(job["heldBy"][0]["reason"], "THROTTLED", "{}", job["heldBy"]);
    assert_eq!(job["heldBy"][1]["reason"], "RUN_AFTER", "{}", job["heldBy"]);
    assert_eq!(
        server.stats.tokenize_calls(),
        2,
        "the throttled call was not made"
    );
    node.ok("cancel-job", json!({ "jobId": a2, "reason": "a test" }))
        .await;
    node.stop().await;
}

#[tokio::test]
async fn a_rate_limits_units_take_what_the_expression_computes() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 8)).await;
    // 20 units a second, a burst of 20; each call costs its text's length (10).
    let workflow = limited_leaf(
        &server.target(),
        json!({ "rate": "20/s", "burst": 20, "units": "size(input.text)" }),
    );
    let texts: Vec<String> = (0..12).map(|i| format!("text-{i:05}")).collect();
    assert!(texts.iter().all(|t| t.len() == 10));
    submit_texts(&node, &workflow, &texts).await;
    node.wait_for_count(JobStatus::Completed, 12, Duration::from_secs(60))
        .await;
    let arrivals = arrival_times(&server);
    // Two calls a second after a burst of two: 12 calls take at least 5 s.
    let span = arrivals
        .iter()
        .max()
        .unwrap()
        .duration_since(*arrivals.iter().min().unwrap());
    assert!(span >= Duration::from_millis(4500), "took {span:?}");
    assert!(
        most_within(&arrivals, Duration::from_secs(2)) <= 2 * 2 + 2,
        "at most 2 calls a second and a burst of 2"
    );
    assert!(attempts(&db).await.iter().all(|a| *a == 1));
    // A call costing more than the bucket holds could never go: its step fails.
    let costly = node
        .submit(&workflow, json!({ "text": "x".repeat(21) }))
        .await;
    let failed = node
        .wait_for_status(&costly, "FAILED", Duration::from_secs(30))
        .await;
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("rateLimit `units` computed 21, more than the bucket's burst of 20"),
        "{error}"
    );
    node.stop().await;
}
