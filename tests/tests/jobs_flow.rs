//! Flow control across the fleet (issue 34): concurrency keys held by three nodes on
//! one database, fair turns among keys, the cancel strategies, pausing a workflow or
//! a key, and drain mode. The fixture's Tokenize records how many calls of each text
//! (each test's key) were in flight at once.

use std::time::{Duration, Instant};

use http::StatusCode;
use jobs_role::JobStatus;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{
    JobsNode, eventually, http_get, http_post, submit_texts, test_config, three_nodes,
};
use serde_json::{Value, json};
use workflow::testkit::{FixtureOptions, FixtureServer, leaf_workflow};

/// `leaf` (one Tokenize of `input.text`) keyed on its text with `limit` and
/// `strategy`.
fn keyed_leaf(target: &str, limit: u32, strategy: &str) -> Value {
    let mut workflow = leaf_workflow(target);
    workflow["concurrency"] =
        json!([{ "key": "input.text", "limit": limit, "strategy": strategy }]);
    workflow
}

async fn count(db: &TestDatabase, status: &str) -> i64 {
    db.connect()
        .await
        .query_one(
            "SELECT count(*) FROM workflow_run WHERE status = $1",
            &[&status],
        )
        .await
        .expect("count")
        .get(0)
}

#[tokio::test]
async fn a_key_limit_of_two_holds_across_three_nodes_and_a_killed_one() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_millis(40)),
        ..FixtureOptions::default()
    })
    .await;
    let workflow = keyed_leaf(&server.target(), 2, "queue");
    let mut nodes = three_nodes(&db.url, 8, |_| {}).await;
    let texts: Vec<String> = (0..300).map(|i| format!("key-{}", i % 10)).collect();
    submit_texts(&nodes[0], &workflow, &texts).await;

    // Mid-run, one node dies without its shutdown path: its claims stay RUNNING
    // (holding their slots) until their leases pass and the sweeper requeues them.
    eventually(
        "a third of the jobs to complete",
        Duration::from_secs(120),
        || async { count(&db, "COMPLETED").await >= 100 },
    )
    .await;
    let killed = nodes.remove(1);
    killed.node.abort();

    nodes[0]
        .wait_for_count(JobStatus::Completed, 300, Duration::from_secs(300))
        .await;
    let most = server.stats.max_in_flight_by_text();
    assert_eq!(most.len(), 10, "every key was called: {most:?}");
    for (key, at_once) in &most {
        assert!(
            *at_once <= 2,
            "key {key} had {at_once} calls in flight at once, over its limit of 2"
        );
    }
    assert!(
        most.values().any(|n| *n == 2),
        "the keys used their two slots: {most:?}"
    );
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test]
async fn one_job_of_a_second_key_starts_within_seconds_behind_ten_thousand_of_another() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_millis(20)),
        ..FixtureOptions::default()
    })
    .await;
    // Key A may use every slot of the fleet: only the turns among keys let B in.
    let workflow = keyed_leaf(&server.target(), 1000, "queue");
    let loader = JobsNode::start(test_config(&db.url, "loader", 0)).await;
    let many: Vec<String> = vec!["A".to_owned(); 10_000];
    submit_texts(&loader, &workflow, &many).await;
    let nodes = three_nodes(&db.url, 8, |_| {}).await;
    eventually("key A's jobs to run", Duration::from_secs(60), || async {
        count(&db, "COMPLETED").await > 0
    })
    .await;

    let submitted = Instant::now();
    let b = submit_texts(&loader, &workflow, &["B".to_owned()]).await;
    let job = nodes[0]
        .wait_for_status(&b[0], "COMPLETED", Duration::from_secs(30))
        .await;
    let took = submitted.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "B's one job took {took:?} to complete behind A's backlog: {}",
        job["status"]
    );
    assert!(
        count(&db, "QUEUED").await > 1000,
        "A's jobs were still queued when B's ran"
    );
    for node in nodes {
        node.stop().await;
    }
    loader.stop().await;
}

#[tokio::test]
async fn cancel_newest_ends_the_submission_over_the_limit_cancelled() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    // No workers: every job stays QUEUED, so the third is over the limit of two.
    let node = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let workflow = keyed_leaf(&server.target(), 2, "cancel-newest");
    let first = node.submit(&workflow, json!({ "text": "k" })).await;
    let second = node.submit(&workflow, json!({ "text": "k" })).await;
    let third = node
        .ok(
            "submit-workflow",
            json!({ "workflow": workflow, "input": { "text": "k" } }),
        )
        .await;
    assert_eq!(third["status"], "CANCELLED", "{third}");
    let id = third["jobId"].as_str().expect("an id");
    let job = node.ok("get-job", json!({ "jobId": id })).await["job"].clone();
    assert_eq!(job["status"], "CANCELLED");
    let reason = job["cancelReason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("cancel-newest") && reason.contains("leaf:input.text=k"),
        "the reason names the key and the strategy: {reason}"
    );
    for kept in [first, second] {
        assert_eq!(node.job(&kept).await["status"], "QUEUED");
    }
    // Another key is not affected.
    let other = node.submit(&workflow, json!({ "text": "other" })).await;
    assert_eq!(node.job(&other).await["status"], "QUEUED");
    node.stop().await;
}

#[tokio::test]
async fn cancel_oldest_cancels_the_oldest_job_of_the_key_to_make_room() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let workflow = keyed_leaf(&server.target(), 2, "cancel-oldest");
    let first = node.submit(&workflow, json!({ "text": "k" })).await;
    let second = node.submit(&workflow, json!({ "text": "k" })).await;
    let third = node.submit(&workflow, json!({ "text": "k" })).await;
    let oldest = node.ok("get-job", json!({ "jobId": first })).await["job"].clone();
    assert_eq!(oldest["status"], "CANCELLED", "the oldest made room");
    let reason = oldest["cancelReason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("cancel-oldest") && reason.contains("leaf:input.text=k"),
        "{reason}"
    );
    for kept in [second, third] {
        assert_eq!(node.job(&kept).await["status"], "QUEUED");
    }
    let events: Vec<String> = node.ok("get-job", json!({ "jobId": first })).await["job"]["events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(events, ["ACCEPTED", "CANCELLED"], "its events say so");
    node.stop().await;
}

#[tokio::test]
async fn a_queued_job_says_which_key_holds_it_back() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_secs(3)),
        ..FixtureOptions::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 4)).await;
    let workflow = keyed_leaf(&server.target(), 1, "queue");
    let running = node.submit(&workflow, json!({ "text": "k" })).await;
    node.wait_for_status(&running, "RUNNING", Duration::from_secs(20))
        .await;
    let held = node.submit(&workflow, json!({ "text": "k" })).await;
    let job = node.ok("get-job", json!({ "jobId": held })).await["job"].clone();
    assert_eq!(job["status"], "QUEUED");
    assert_eq!(job["concurrencyKeys"], json!(["leaf:input.text=k"]));
    let held_by = &job["heldBy"][0];
    assert_eq!(held_by["reason"], "KEY_AT_LIMIT", "{}", job["heldBy"]);
    assert_eq!(held_by["key"], "leaf:input.text=k");
    assert_eq!(held_by["running"], 1);
    assert_eq!(held_by["limit"], 1);
    // The fleet page lists the key.
    let fleet = node.ok("get-fleet", json!({})).await;
    assert!(
        fleet["keys"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|k| k["key"] == "leaf:input.text=k" && k["running"] == 1),
        "{}",
        fleet["keys"]
    );
    node.wait_for_status(&held, "COMPLETED", Duration::from_secs(30))
        .await;
    node.stop().await;
}

#[tokio::test]
async fn a_paused_workflow_is_claimed_by_no_node_until_resumed() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_millis(800)),
        ..FixtureOptions::default()
    })
    .await;
    let workflow = leaf_workflow(&server.target());
    let nodes = three_nodes(&db.url, 4, |_| {}).await;
    nodes[0]
        .ok("put-workflow", json!({ "workflow": workflow }))
        .await;
    // One job running when the pause lands: it finishes.
    let running = nodes[0].submit(&workflow, json!({ "text": "first" })).await;
    nodes[0]
        .wait_for_status(&running, "RUNNING", Duration::from_secs(20))
        .await;
    let paused = nodes[1]
        .ok(
            "pause-workflow",
            json!({ "workflowName": "leaf", "reason": "the target is down" }),
        )
        .await;
    assert_eq!(paused["changed"], true);
    let again = nodes[1]
        .ok("pause-workflow", json!({ "workflowName": "leaf" }))
        .await;
    assert_eq!(again["changed"], false, "pausing twice changes nothing");
    let texts: Vec<String> = (0..12).map(|i| format!("t{i}")).collect();
    let queued = submit_texts(&nodes[2], &workflow, &texts).await;
    nodes[0]
        .wait_for_status(&running, "COMPLETED", Duration::from_secs(20))
        .await;
    // A second and more: no node claims them.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        count(&db, "QUEUED").await,
        12,
        "nothing was claimed while paused"
    );
    let job = nodes[0].ok("get-job", json!({ "jobId": queued[0] })).await["job"].clone();
    assert_eq!(
        job["heldBy"][0]["reason"], "WORKFLOW_PAUSED",
        "{}",
        job["heldBy"]
    );
    let fleet = nodes[0].ok("get-fleet", json!({})).await;
    assert_eq!(fleet["pausedWorkflows"][0]["workflowName"], "leaf");
    assert_eq!(fleet["pausedWorkflows"][0]["reason"], "the target is down");
    // (Each test node stores workflows in a directory of its own.)
    let listed = nodes[0].ok("list-workflows", json!({})).await;
    assert_eq!(listed["workflows"][0]["paused"], true, "{listed}");
    assert_eq!(listed["workflows"][0]["pausedReason"], "the target is down");

    let resumed = nodes[2]
        .ok("resume-workflow", json!({ "workflowName": "leaf" }))
        .await;
    assert_eq!(resumed["changed"], true);
    nodes[0]
        .wait_for_count(JobStatus::Completed, 13, Duration::from_secs(60))
        .await;
    let listed = nodes[0].ok("list-workflows", json!({})).await;
    assert!(listed["workflows"][0].get("paused").is_none(), "{listed}");
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test]
async fn a_paused_key_waits_while_the_other_keys_run() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let workflow = keyed_leaf(&server.target(), 5, "queue");
    let stuck = node.submit(&workflow, json!({ "text": "stuck" })).await;
    let (status, refused) = node
        .call(
            "pause-workflow",
            json!({ "concurrencyKey": "leaf:input.text=nobody" }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    node.ok(
        "pause-workflow",
        json!({ "concurrencyKey": "leaf:input.text=stuck" }),
    )
    .await;
    let worker = JobsNode::start(test_config(&db.url, "node-a", 4)).await;
    let free = worker.submit(&workflow, json!({ "text": "free" })).await;
    worker
        .wait_for_status(&free, "COMPLETED", Duration::from_secs(30))
        .await;
    let job = worker.ok("get-job", json!({ "jobId": stuck })).await["job"].clone();
    assert_eq!(job["status"], "QUEUED");
    assert_eq!(
        job["heldBy"][0]["reason"], "KEY_PAUSED",
        "{}",
        job["heldBy"]
    );
    worker
        .ok(
            "resume-workflow",
            json!({ "concurrencyKey": "leaf:input.text=stuck" }),
        )
        .await;
    worker
        .wait_for_status(&stuck, "COMPLETED", Duration::from_secs(30))
        .await;
    worker.stop().await;
    node.stop().await;
}

/// `POST /admin/drain` with `body`, or `GET` without one: the answer (200).
async fn admin_drain(node: &JobsNode, body: Option<Value>) -> Value {
    let (status, answer) = match body {
        Some(body) => http_post(&node.router, "/admin/drain", &body).await,
        None => http_get(&node.router, "/admin/drain").await,
    };
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

#[tokio::test]
async fn a_draining_node_finishes_its_job_and_hands_the_queue_to_the_others() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_millis(1000)),
        ..FixtureOptions::default()
    })
    .await;
    let workflow = leaf_workflow(&server.target());
    let a = JobsNode::start(test_config(&db.url, "node-a", 4)).await;
    let running = a.submit(&workflow, json!({ "text": "on-a" })).await;
    a.wait_for_status(&running, "RUNNING", Duration::from_secs(20))
        .await;
    let state = admin_drain(&a, Some(json!({ "drain": true }))).await;
    assert_eq!(state["draining"], true);
    let texts: Vec<String> = (0..6).map(|i| format!("t{i}")).collect();
    submit_texts(&a, &workflow, &texts).await;
    a.wait_for_status(&running, "COMPLETED", Duration::from_secs(20))
        .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        count(&db, "QUEUED").await,
        6,
        "the draining node claimed nothing new"
    );
    eventually(
        "the drained node to run nothing",
        Duration::from_secs(10),
        || async { admin_drain(&a, None).await["running"] == 0 },
    )
    .await;
    let b = JobsNode::start(test_config(&db.url, "node-b", 4)).await;
    b.wait_for_count(JobStatus::Completed, 7, Duration::from_secs(60))
        .await;
    let off = admin_drain(&a, Some(json!({ "drain": false }))).await;
    assert_eq!(off["draining"], false);
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn a_key_that_cannot_be_computed_refuses_the_submission_naming_the_expression() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let workflow = keyed_leaf(&server.target(), 2, "queue");
    for (text, why) in [
        ("", "0 characters"),
        ("a\u{202e}b", "U+202E"),
        (&"x".repeat(300) as &str, "300 characters"),
    ] {
        let (status, answer) = node
            .call(
                "submit-workflow",
                json!({ "workflow": workflow, "input": { "text": text } }),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        let message = answer.to_string();
        assert!(
            message.contains("concurrency[0].key `input.text`") && message.contains(why),
            "{message}"
        );
    }
    assert_eq!(count(&db, "QUEUED").await, 0, "nothing was written");
    // A key that does not type-check as a string is a finding of the workflow.
    let mut bad = keyed_leaf(&server.target(), 2, "queue");
    bad["concurrency"][0]["key"] = json!("input.fail");
    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "workflow": bad, "input": { "text": "t" } }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer.to_string().contains("$.concurrency[0].key"),
        "{answer}"
    );
    node.stop().await;
}

#[tokio::test]
async fn an_inline_envelope_borrowing_a_stored_name_cannot_change_its_keys_limit() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let stored = keyed_leaf(&server.target(), 2, "queue");
    node.ok("put-workflow", json!({ "workflow": stored })).await;
    node.ok(
        "submit-workflow",
        json!({ "workflowName": "leaf", "input": { "text": "k" } }),
    )
    .await;
    // The same name and key expression, inline, asking for a far higher limit.
    let borrowed = keyed_leaf(&server.target(), 50_000, "queue");
    node.submit(&borrowed, json!({ "text": "k" })).await;
    let limit: i32 = db
        .connect()
        .await
        .query_one(
            "SELECT max_running FROM workflow_concurrency WHERE key = 'leaf:input.text=k'",
            &[],
        )
        .await
        .expect("the key")
        .get(0);
    assert_eq!(limit, 2, "the stored workflow's limit stands");
    node.stop().await;
}
