//! Child workflows through the real node: a parent mapping over a list starts one
//! child job per element (at most `maxParallel` alive at once), parks holding no
//! worker, and resumes with the children's outputs in element order; a child that
//! fails fails the parent's step naming the child; a child that does not exist or
//! does not verify, and a workflow that would start itself, are refused when stored
//! or submitted. Real PostgreSQL, real fixture servers.

use std::time::Duration;

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};
use workflow::testkit::{
    FixtureOptions, FixtureServer, distinct_text, embed_all_workflow, embed_one_workflow,
    leaf_workflow, map_element_id, workflow,
};

const WAIT: Duration = Duration::from_secs(90);

async fn children(db: &TestDatabase, parent: &str) -> Vec<(String, String, i32)> {
    db.connect()
        .await
        .query(
            "SELECT job_id::text, status, parent_item FROM workflow_run WHERE parent_job_id = $1::text::uuid ORDER BY parent_item",
            &[&parent],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

#[tokio::test]
async fn a_parent_maps_a_hundred_children_and_gets_their_outputs_in_order() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_echo_ids: true,
        ..Default::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "parent", 4)).await;
    node.ok(
        "put-workflow",
        json!({ "workflow": embed_one_workflow(&server.target()) }),
    )
    .await;
    node.ok(
        "put-workflow",
        json!({ "workflow": embed_all_workflow(&server.target(), 16) }),
    )
    .await;
    let answer = node
        .ok(
            "submit-workflow",
            json!({ "workflowName": "embed-all", "input": { "text": distinct_text(100) },
                    "priority": 7, "maxAttempts": 5, "metadata": { "tenant": "acme" } }),
        )
        .await;
    let parent = answer["jobId"].as_str().unwrap().to_owned();
    let done = node.wait_for_status(&parent, "COMPLETED", WAIT).await;
    let vectors = done["result"]["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 100);
    for (i, vector) in vectors.iter().enumerate() {
        assert_eq!(
            vector["values"][0].as_f64(),
            Some(map_element_id(i)),
            "element {i}"
        );
    }
    let started = children(&db, &parent).await;
    assert_eq!(started.len(), 100, "one child per element");
    assert!(started.iter().all(|(_, status, _)| status == "COMPLETED"));
    assert_eq!(
        started.iter().map(|(_, _, item)| *item).collect::<Vec<_>>(),
        (0..100).collect::<Vec<i32>>()
    );
    // get-job lists the children; list-jobs pages them.
    let seen = node.ok("get-job", json!({ "jobId": parent })).await;
    assert_eq!(seen["job"]["childCount"], 100);
    assert_eq!(seen["job"]["children"][3]["item"], 3);
    assert_eq!(seen["job"]["children"][3]["status"], "COMPLETED");
    let page = node
        .ok(
            "list-jobs",
            json!({ "parentJobId": parent, "limit": 30, "offset": 90 }),
        )
        .await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 10);
    let (status, refused) = node
        .call("list-jobs", json!({ "parentJobId": "not-a-job" }))
        .await;
    assert_eq!(status, 400, "{refused}");
    // Each child names its parent and the root of its tree.
    let child = node.job(&started[0].0).await;
    assert_eq!(child["parent_job_id"], parent.as_str());
    assert_eq!(child["root_job_id"], parent.as_str());
    assert_eq!(child["parent_step"], "each");
    // A child runs with its parent's priority and retry budget.
    assert_eq!(
        (&child["priority"], &child["max_attempts"]),
        (&json!(7), &json!(5))
    );
    // And its metadata, so a search by it finds the whole tree.
    assert_eq!(child["metadata"], json!({ "tenant": "acme" }));
    let tree = node
        .ok(
            "list-jobs",
            json!({ "metadata": { "tenant": "acme" }, "limit": 500 }),
        )
        .await;
    assert_eq!(tree["jobs"].as_array().unwrap().len(), 101);
    node.stop().await;
}

#[tokio::test]
async fn a_failing_child_fails_the_parents_step_naming_the_child() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_rejects_id: Some(map_element_id(2) as i64),
        ..Default::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "failing", 2)).await;
    node.ok(
        "put-workflow",
        json!({ "workflow": embed_one_workflow(&server.target()) }),
    )
    .await;
    let parent = node
        .submit(
            &embed_all_workflow(&server.target(), 2),
            json!({ "text": distinct_text(4) }),
        )
        .await;
    let failed = node.wait_for_status(&parent, "FAILED", WAIT).await;
    let started = children(&db, &parent).await;
    let (bad, status, _) = started
        .iter()
        .find(|(_, _, item)| *item == 2)
        .expect("element 2's child");
    assert_eq!(status, "FAILED");
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.starts_with("CHILD: step 'each': workflow 'embed-one' job ")
            && error.contains(bad.as_str())
            && error.contains("ended FAILED"),
        "{error}"
    );
    // Retrying the parent re-runs only the failed child: the others stay done, no
    // new child is made, and the one call made is the failed child's.
    let calls_before = server.stats.embed_calls();
    let retried = node
        .ok(
            "retry-job",
            json!({ "jobId": parent, "reason": "try the failed one again" }),
        )
        .await;
    assert_eq!(retried["outcome"], "RETRIED", "{retried}");
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let job = node.job(&parent).await;
        let again = node.job(bad).await;
        if job["status"] == "FAILED" && again["claims"].as_i64() == Some(2) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the retry never ended: {job:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(server.stats.embed_calls(), calls_before + 1);
    let after = children(&db, &parent).await;
    assert_eq!(after.len(), started.len(), "no child made twice");
    for (id, status, item) in &after {
        let expected = if *item == 2 { "FAILED" } else { "COMPLETED" };
        assert_eq!(status, expected, "child {id} (element {item})");
    }
    node.stop().await;
}

#[tokio::test]
async fn cancelling_a_parent_cancels_its_live_descendants_grandchildren_included() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "cascade", 2)).await;
    let server = FixtureServer::start().await;
    // leaf sleeps an hour: the tree stays live until the cancel.
    let mut leaf = workflow(
        "leaf",
        vec![json!({ "name": "nap", "sleep": { "forMs": 3_600_000 } })],
        None,
    );
    leaf["output"] = json!({ "type": "jobs.test.Tokens" });
    let _ = server;
    node.ok("put-workflow", json!({ "workflow": leaf })).await;
    node.ok(
        "put-workflow",
        json!({ "workflow": relay("relay-a", "leaf") }),
    )
    .await;
    let root = node
        .submit(&relay("relay-b", "relay-a"), json!({ "text": "x" }))
        .await;
    let grandchild = async || -> Option<String> {
        let client = db.connect().await;
        client
            .query_opt(
                "SELECT job_id::text FROM workflow_run WHERE root_job_id = $1::text::uuid AND parent_job_id <> root_job_id AND waits IS NOT NULL",
                &[&root],
            )
            .await
            .unwrap()
            .map(|row| row.get(0))
    };
    let deadline = std::time::Instant::now() + WAIT;
    let sleeper = loop {
        if let Some(id) = grandchild().await {
            break id;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the grandchild never slept"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let cancelled = node
        .ok(
            "cancel-job",
            json!({ "jobId": root, "reason": "not needed" }),
        )
        .await;
    assert_eq!(cancelled["outcome"], "CANCELLED", "{cancelled}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let statuses: Vec<String> = db
            .connect()
            .await
            .query(
                "SELECT status FROM workflow_run WHERE root_job_id = $1::text::uuid",
                &[&root],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        if statuses.len() == 2 && statuses.iter().all(|s| s == "CANCELLED") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "descendants still live 5 s after the cancel: {statuses:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reason = node.job(&sleeper).await["cancel_reason"].clone();
    assert!(reason.as_str().unwrap().contains("not needed"), "{reason}");
    node.stop().await;
}

/// `name`: one child step starting `child` with the input's text (no `forEach`).
fn relay(name: &str, child: &str) -> Value {
    workflow(
        name,
        vec![json!({ "name": "sub", "workflow": child, "rules": ["text = input.text"] })],
        None,
    )
}

#[tokio::test]
async fn missing_unverifiable_and_self_starting_children_are_refused() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "refusals", 1)).await;
    let refused = async |verb: &str, body: Value, needle: &str| {
        let (status, answer) = node.call(verb, body).await;
        assert_eq!(status, 400, "{verb}: {answer}");
        assert!(answer.to_string().contains(needle), "{verb}: {answer}");
    };

    // No such child, at submission and when stored.
    let parent = embed_all_workflow(&server.target(), 2);
    refused(
        "submit-workflow",
        json!({ "workflow": parent.clone(), "input": { "text": "ab" } }),
        "no stored workflow named 'embed-one'",
    )
    .await;
    refused(
        "put-workflow",
        json!({ "workflow": parent.clone() }),
        "no stored workflow named 'embed-one'",
    )
    .await;

    // A child whose input type the parent's schema defines differently.
    node.ok(
        "put-workflow",
        json!({ "workflow": embed_one_workflow(&server.target()) }),
    )
    .await;
    let other_schema = workflow::schema::compile_proto_source(
        "other.proto",
        "syntax = \"proto3\"; package jobs.test;
         message Text { string text = 1; }
         message Tokens { repeated int64 ids = 1; string extra = 9; }
         message Vector { repeated double values = 1; }
         message Vectors { repeated Vector vectors = 1; string source_text = 2; }
         service Tokenizer { rpc Tokenize(Text) returns (Tokens); }",
    )
    .unwrap();
    let mut foreign = parent.clone();
    foreign["schema"]["descriptorSetBase64"] = json!(base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        other_schema
    ));
    refused(
        "submit-workflow",
        json!({ "workflow": foreign, "input": { "text": "ab" } }),
        "jobs.test.Tokens is defined differently",
    )
    .await;

    // A workflow that starts itself: inline, stored, and through another.
    let leaf = leaf_workflow(&server.target());
    node.ok("put-workflow", json!({ "workflow": leaf })).await;
    refused(
        "submit-workflow",
        json!({ "workflow": relay("selfish", "selfish"), "input": { "text": "x" } }),
        "would start itself",
    )
    .await;
    refused(
        "put-workflow",
        json!({ "workflow": relay("selfish", "selfish") }),
        "would start itself",
    )
    .await;
    node.ok(
        "put-workflow",
        json!({ "workflow": relay("relay-a", "leaf") }),
    )
    .await;
    node.ok(
        "put-workflow",
        json!({ "workflow": relay("relay-b", "relay-a") }),
    )
    .await;
    refused(
        "put-workflow",
        json!({ "workflow": relay("relay-a", "relay-b") }),
        "relay-a -> relay-b -> relay-a",
    )
    .await;
    // The good ones run: relay-b starts relay-a, which starts leaf.
    let job = node
        .ok(
            "submit-workflow",
            json!({ "workflowName": "relay-b", "input": { "text": "ab" } }),
        )
        .await;
    let job_id = job["jobId"].as_str().unwrap().to_owned();
    let done = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(done["result"], json!({ "ids": [97, 98] }));
    let grandchild: i64 = db
        .connect()
        .await
        .query_one(
            "SELECT count(*) FROM workflow_run WHERE root_job_id = $1::text::uuid AND parent_job_id <> root_job_id",
            &[&job_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(grandchild, 1, "relay-a's own child, leaf");
    node.stop().await;
}

#[tokio::test]
async fn a_retry_from_a_child_step_starts_new_children_and_detaches_the_old() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_echo_ids: true,
        ..Default::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "rerun", 2)).await;
    node.ok(
        "put-workflow",
        json!({ "workflow": embed_one_workflow(&server.target()) }),
    )
    .await;
    let parent = node
        .submit(
            &embed_all_workflow(&server.target(), 4),
            json!({ "text": distinct_text(3) }),
        )
        .await;
    node.wait_for_status(&parent, "COMPLETED", WAIT).await;
    let first: Vec<String> = children(&db, &parent)
        .await
        .into_iter()
        .map(|c| c.0)
        .collect();
    assert_eq!(first.len(), 3);
    let retried = node
        .ok(
            "retry-job",
            json!({ "jobId": parent, "fromStep": "each", "reason": "again" }),
        )
        .await;
    assert_eq!(retried["outcome"], "RETRIED", "{retried}");
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let job = node.job(&parent).await;
        if job["status"] == "COMPLETED" && children(&db, &parent).await.len() == 3 {
            let now: Vec<String> = children(&db, &parent)
                .await
                .into_iter()
                .map(|c| c.0)
                .collect();
            if now.iter().all(|id| !first.contains(id)) {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the re-run never ended: {job:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The old children are detached: they answer nothing any more.
    let detached: i64 = db
        .connect()
        .await
        .query_one(
            "SELECT count(*) FROM workflow_run WHERE root_job_id = $1::text::uuid AND parent_job_id IS NULL",
            &[&parent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(detached, 3);
    node.stop().await;
}

#[tokio::test]
async fn a_parent_that_fails_cancels_its_children_still_running() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_rejects_id: Some(map_element_id(1) as i64),
        ..Default::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "orphans", 2)).await;
    // Embeds, then sleeps an hour: element 0's child stays live, element 1's fails.
    let mut child = embed_one_workflow(&server.target());
    child["steps"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "name": "nap", "sleep": { "forMs": 3_600_000 } }));
    child["output"] = json!({ "type": "jobs.test.Vector", "rules": ["values = embed.values"] });
    node.ok("put-workflow", json!({ "workflow": child })).await;
    let parent = node
        .submit(
            &embed_all_workflow(&server.target(), 2),
            json!({ "text": distinct_text(2) }),
        )
        .await;
    node.wait_for_status(&parent, "FAILED", WAIT).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let statuses: Vec<(i32, String)> = children(&db, &parent)
            .await
            .into_iter()
            .map(|(_, status, item)| (item, status))
            .collect();
        if statuses == [(0, "CANCELLED".to_owned()), (1, "FAILED".to_owned())] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the live child was never cancelled: {statuses:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.stop().await;
}
