//! Map steps (`forEach`) through the real node: one call per element at most
//! `maxParallel` at once, each element stored as its call ends (V23's items table), a
//! worker killed mid-map resumed by another that calls only the missing elements,
//! `onItemFailure`, and the synchronous `run-workflow`. Real PostgreSQL, real fixture
//! servers.

use std::time::Duration;

use jobs_role::worker::sweep_loop;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{
    JobsNode, bare_worker, eventually, queued_map_job, stored_elements, test_config,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use workflow::testkit::{
    FixtureOptions, FixtureServer, diamond_workflow, distinct_text, map_element_id, map_workflow,
};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_over_a_thousand_elements_survives_its_worker_dying_halfway() {
    let db = TestDatabase::create().await;
    let (server, idle, job_id) = queued_map_job(&db.url, 1000, 16).await;
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
    let stored = stored_elements(&db.connect().await, Some(&job_id)).await;
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
        config.lease(),
        10,
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
        assert_eq!(
            vector["values"],
            json!([map_element_id(i)]),
            "element {i} in order"
        );
    }
    assert_eq!(
        stored_elements(&db.connect().await, Some(&job_id)).await,
        1000
    );
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
            json!({ "text": distinct_text(200) }),
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
        embed_rejects_id: Some(map_element_id(5) as i64),
        embed_echo_ids: true,
        ..Default::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "failing", 2)).await;
    let failing = node
        .submit(
            &map_workflow(&server.target(), 4),
            json!({ "text": distinct_text(12) }),
        )
        .await;
    let job = node.wait_for_status(&failing, "FAILED", WAIT).await;
    let seen = node.ok("get-job", json!({ "jobId": failing })).await;
    let each = &seen["job"]["steps"][1];
    assert_eq!(each["state"], "failed", "{each}");
    assert_eq!(each["map"]["total"], 12, "{each}");
    assert_eq!(each["map"]["inFlight"], 0, "{each}");
    let error = job["error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "GRPC: step 'each': element 5 of 12 failed (1 failed in all): INVALID_ARGUMENT"
        ),
        "{error}"
    );

    let mut collecting = map_workflow(&server.target(), 4);
    collecting["steps"][1]["onItemFailure"] = json!("collect");
    let collected = node
        .submit(&collecting, json!({ "text": distinct_text(12) }))
        .await;
    let job = node.wait_for_status(&collected, "COMPLETED", WAIT).await;
    let vectors = job["result"]["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 11, "element 5 left out");
    assert_eq!(vectors[5]["values"], json!([map_element_id(6)]));
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

    // get-job counts the map step's elements; get-job-items pages through them.
    let seen = node.ok("get-job", json!({ "jobId": collected })).await;
    let each = &seen["job"]["steps"][1];
    assert_eq!(each["state"], "done");
    assert_eq!(
        each["map"],
        json!({ "done": 11, "failed": 1, "inFlight": 0, "total": 12 })
    );
    let page = node
        .ok(
            "get-job-items",
            json!({ "jobId": collected, "stepName": "each", "limit": 5 }),
        )
        .await;
    assert_eq!(page["done"], 11, "{page}");
    assert_eq!(page["failed"], 1);
    assert_eq!(page["nextOffset"], 5);
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 5);
    assert_eq!(
        items[0],
        json!({ "index": 0, "response": { "values": [map_element_id(0)] } })
    );
    assert!(items[4]["response"].is_object());
    let page = node
        .ok(
            "get-job-items",
            json!({ "jobId": collected, "stepName": "each", "offset": 5, "limit": 5 }),
        )
        .await;
    assert_eq!(page["items"][0]["index"], 5);
    assert!(
        page["items"][0]["error"]
            .as_str()
            .unwrap()
            .contains("INVALID_ARGUMENT"),
        "{page}"
    );
    let last = node
        .ok(
            "get-job-items",
            json!({ "jobId": collected, "stepName": "each", "offset": 10 }),
        )
        .await;
    assert_eq!(last["items"].as_array().unwrap().len(), 2);
    assert_eq!(last["nextOffset"], -1);
    // A step that is not a map step, or not the workflow's, is a clear 400.
    let (status, answer) = node
        .call(
            "get-job-items",
            json!({ "jobId": collected, "stepName": "a" }),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("not a map step"), "{answer}");
    let (status, answer) = node
        .call(
            "get-job-items",
            json!({ "jobId": collected, "stepName": "nope" }),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.to_string().contains("has no step 'nope'"),
        "{answer}"
    );
    let (status, answer) = node
        .call(
            "get-job-items",
            json!({ "jobId": collected, "stepName": "each", "limit": 501 }),
        )
        .await;
    assert_eq!(status, 400, "{answer}");

    // An operator's retry of the failed job from the map step calls every element
    // again (its stored elements dropped), and the target now refuses nothing new.
    let answer = node
        .ok("retry-job", json!({ "jobId": failing, "fromStep": "each" }))
        .await;
    assert_eq!(answer["checkpointsKept"], 1, "{answer}");
    node.wait_for_status(&failing, "FAILED", WAIT).await;
    // The step had stored elements but no checkpoint: its re-run still counts, so
    // its elements are called under new idempotency keys.
    let rerun_keys = server
        .stats
        .calls()
        .into_iter()
        .filter(|call| call.method == "Embed")
        .filter_map(|call| {
            call.metadata
                .into_iter()
                .find(|(key, _)| key == "idempotency-key")
                .map(|(_, value)| value)
        })
        .filter(|key| key.starts_with(&format!("{failing}/each/rerun-1/")))
        .count();
    assert!(rerun_keys > 0, "the re-run's elements carry rerun-1 keys");
    node.stop().await;
}

#[tokio::test]
async fn a_map_longer_than_one_segment_advances_without_spending_attempts() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_millis(10)),
        embed_echo_ids: true,
        ..Default::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "long-map", 1)).await;
    // 200 elements, 2 at a time, 10 ms each: a second of calls, in segments of
    // 300 ms, on a budget of one attempt.
    let mut workflow = map_workflow(&server.target(), 2);
    workflow["deadlineMs"] = json!(300);
    let answer = node
        .ok(
            "submit-workflow",
            json!({ "workflow": workflow, "input": { "text": distinct_text(200) }, "maxAttempts": 1 }),
        )
        .await;
    let job_id = answer["jobId"].as_str().unwrap().to_owned();
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert!(
        job["claims"].as_i64().unwrap() >= 3,
        "several segments: {job}"
    );
    assert_eq!(job["result"]["vectors"].as_array().unwrap().len(), 200);
    let calls = server.stats.embed_calls();
    assert!(
        calls <= 200 + 2 * job["claims"].as_u64().unwrap() as usize,
        "{calls} calls: each segment's deadline cut at most maxParallel short"
    );
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
            json!({ "workflow": map_workflow(&server.target(), 4), "input": { "text": distinct_text(5) } }),
        )
        .await;
    assert_eq!(ran["ok"], true, "{ran}");
    let output: &Value = &ran["output"];
    assert_eq!(output["vectors"].as_array().unwrap().len(), 5, "{ran}");
    assert_eq!(output["vectors"][4]["values"], json!([map_element_id(4)]));
    node.stop().await;
}
