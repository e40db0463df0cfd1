//! Job metadata (issue 36): a submission's own attributes, stored with the job, shown
//! by `get-job`, found by `list-jobs` and the bulk acts on one key or several, refused when a
//! key or value breaks the bounds (a 400 naming the key, nothing written), and a
//! filter that stays an index scan on 100,000 jobs.

use http::StatusCode;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, file_snapshot, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, leaf_workflow};

async fn jobs_listed(node: &JobsNode, metadata: Value) -> Vec<String> {
    let answer = node.ok("list-jobs", json!({ "metadata": metadata })).await;
    let mut ids: Vec<String> = answer["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|job| job["jobId"].as_str().expect("an id").to_owned())
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn metadata_is_stored_shown_and_found_by_one_key_or_two() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "metadata", 0)).await;
    let workflow = leaf_workflow(&server.target());
    let submit = |metadata: Value| {
        let body = json!({ "workflow": workflow, "input": { "text": "x" }, "metadata": metadata });
        let node = &node;
        async move {
            node.ok("submit-workflow", body).await["jobId"]
                .as_str()
                .expect("an id")
                .to_owned()
        }
    };
    let acme_eu = submit(json!({ "customer": "acme", "region": "eu" })).await;
    let acme_us = submit(json!({ "customer": "acme", "region": "us" })).await;
    let other = submit(json!({ "customer": "globex", "region": "eu" })).await;
    let batch = node
        .ok(
            "submit-workflows",
            json!({ "workflow": workflow, "submissions": [
                { "input": { "text": "y" }, "metadata": { "customer": "acme", "batch.id": "b-1" } },
                { "input": { "text": "z" } },
            ]}),
        )
        .await;
    let batched = batch["answers"][0]["jobId"]
        .as_str()
        .expect("an id")
        .to_owned();

    let job = node.ok("get-job", json!({ "jobId": acme_eu })).await;
    assert_eq!(
        job["job"]["metadata"],
        json!({ "customer": "acme", "region": "eu" })
    );

    let mut acme = vec![acme_eu.clone(), acme_us.clone(), batched.clone()];
    acme.sort();
    assert_eq!(
        jobs_listed(&node, json!({ "customer": "acme" })).await,
        acme
    );
    assert_eq!(
        jobs_listed(&node, json!({ "customer": "acme", "region": "eu" })).await,
        vec![acme_eu.clone()]
    );
    assert_eq!(
        jobs_listed(&node, json!({ "region": "eu", "customer": "globex" })).await,
        vec![other]
    );
    assert!(
        jobs_listed(&node, json!({ "customer": "initech" }))
            .await
            .is_empty()
    );
    let summary = node
        .ok("list-jobs", json!({ "metadata": { "batch.id": "b-1" } }))
        .await;
    assert_eq!(
        summary["jobs"][0]["metadata"]["customer"], "acme",
        "{summary}"
    );

    // The bulk acts select by metadata too: acme's jobs cancelled, then retried.
    let cancelled = node
        .ok(
            "cancel-jobs",
            json!({ "filter": { "metadata": { "customer": "acme" } }, "limit": 100,
                "reason": "acme asked" }),
        )
        .await;
    let mut changed: Vec<String> = cancelled["changedJobIds"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|id| id.as_str().expect("an id").to_owned())
        .collect();
    changed.sort();
    assert_eq!(changed, acme, "{cancelled}");
    let retried = node
        .ok(
            "retry-jobs",
            json!({ "filter": { "status": "CANCELLED",
                "metadata": { "customer": "acme", "region": "us" } }, "limit": 100 }),
        )
        .await;
    assert_eq!(retried["changedJobIds"], json!([acme_us]), "{retried}");
    let (status, answer) = node
        .call(
            "cancel-jobs",
            json!({ "filter": { "metadata": { "Customer": "acme" } }, "limit": 1, "reason": "x" }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("filter.metadata"),
        "{answer}"
    );

    // Bad keys and values: a 400 naming the key, and no job is written.
    let before: i64 = db
        .connect()
        .await
        .query_one("SELECT count(*) FROM workflow_run", &[])
        .await
        .expect("count")
        .get(0);
    let many: serde_json::Map<String, Value> =
        (0..33).map(|i| (format!("k{i}"), json!("v"))).collect();
    for (metadata, named) in [
        (json!({ "Customer": "acme" }), "Customer"),
        (json!({ "": "acme" }), "metadata"),
        (json!({ "k".repeat(65): "v" }), "metadata"),
        (json!({ "customer": "x".repeat(513) }), "metadata.customer"),
        (json!({ "customer": "a\u{0}b" }), "metadata.customer"),
        (Value::Object(many), "metadata"),
    ] {
        let (status, answer) = node
            .call(
                "submit-workflow",
                json!({ "workflow": workflow, "input": { "text": "x" }, "metadata": metadata }),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(
            answer.to_string().contains(named),
            "names {named}: {answer}"
        );
    }
    let (status, answer) = node
        .call("list-jobs", json!({ "metadata": { "Bad": "x" } }))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let after: i64 = db
        .connect()
        .await
        .query_one("SELECT count(*) FROM workflow_run", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(before, after, "no refused submission was written");
}

#[tokio::test]
async fn a_metadata_filter_on_a_hundred_thousand_jobs_is_an_index_scan() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "plan", 0)).await;
    let client = db.connect().await;
    let digest = file_snapshot(&client, &leaf_workflow("127.0.0.1:9")).await;
    client
        .execute(
            "INSERT INTO workflow_run (job_id, workflow_name, definition_digest, input, metadata)
             SELECT gen_random_uuid(), 'leaf', $1, '{}',
                    jsonb_build_object('customer', 'c-' || (i % 5000), 'region', 'r-' || (i % 7))
               FROM generate_series(1, 100000) AS i",
            &[&digest],
        )
        .await
        .expect("a hundred thousand jobs");
    client
        .batch_execute("ANALYZE workflow_run")
        .await
        .expect("analyze");
    let filter = json!({ "customer": "c-42", "region": "r-0" });
    let plan: Vec<String> = client
        .query(
            &format!("EXPLAIN {}", jobs_role::store::sql::LIST_JOBS_NEWEST),
            &[
                &None::<String>,
                &None::<String>,
                &50_i64,
                &0_i64,
                &None::<String>,
                &None::<String>,
                &None::<String>,
                &None::<i16>,
                &None::<uuid::Uuid>,
                &None::<uuid::Uuid>,
                &None::<String>,
                &None::<uuid::Uuid>,
                &None::<uuid::Uuid>,
                &None::<String>,
                &Some(filter.clone()),
            ],
        )
        .await
        .expect("explain")
        .iter()
        .map(|row| row.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(
        plan.contains("workflow_run_metadata"),
        "the filter reads the GIN index, not the table:\n{plan}"
    );
    // And the verb answers from it.
    let answer = node.ok("list-jobs", json!({ "metadata": filter })).await;
    let found = answer["jobs"].as_array().expect("jobs").len();
    assert!(found > 0 && found <= 50, "{found}");
}
