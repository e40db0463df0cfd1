//! Job metadata (issue 36): a submission's own attributes, stored with the job, shown
//! by `get-job`, found by `list-jobs` and the bulk acts on one key or several, refused when a
//! key or value breaks the bounds (a 400 naming the key, nothing written), and a
//! filter that stays an index scan on 100,000 jobs; and carried in every event of the
//! job, whichever path writes it.

use http::StatusCode;
use protomolt_e2e::TestDatabase;
use std::time::Duration;

use jobs_proto::WireMessage;
use jobs_proto::v1::WorkflowRunEvent;
use protomolt_e2e::jobs::{JobsNode, file_snapshot, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, leaf_workflow, three_step_workflow, two_step_workflow};

const WAIT: Duration = Duration::from_secs(60);

/// Each event of `job_id` as (type, its detail's `metadata` as JSON, or null).
async fn event_metadata(node: &JobsNode, job_id: &str) -> Vec<(String, Value)> {
    let rows = node
        .store
        .job_events(uuid::Uuid::parse_str(job_id).expect("an id"))
        .await
        .expect("the job's events");
    rows.iter()
        .map(|row| {
            let event = WorkflowRunEvent::decode_validated(&row.payload).expect("an event");
            let metadata = event
                .detail
                .as_ref()
                .and_then(|detail| detail.fields.get("metadata"))
                .map(|value| match &value.kind {
                    Some(prost_types::value::Kind::StructValue(fields)) => Value::Object(
                        fields
                            .fields
                            .iter()
                            .map(|(key, value)| match &value.kind {
                                Some(prost_types::value::Kind::StringValue(text)) => {
                                    (key.clone(), json!(text))
                                }
                                other => panic!("metadata.{key} is {other:?}"),
                            })
                            .collect(),
                    ),
                    other => panic!("detail.metadata is {other:?}"),
                })
                .unwrap_or(Value::Null);
            (row.event_type.clone(), metadata)
        })
        .collect()
}

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

/// Every event a job has carries its metadata under `detail.metadata`: accepted,
/// checkpoints, a park, an answer, a cancel, an operator's retry, a rejection, a
/// settlement DEAD; a job without metadata has no such entry.
#[tokio::test]
async fn metadata_rides_in_every_event_of_its_job() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "metadata-events", 2)).await;
    let tags = json!({ "customer": "acme", "order.id": "o-17" });
    let submit = |workflow: Value, input: Value, extra: Value| {
        let mut body = json!({ "workflow": workflow, "input": input, "metadata": tags });
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        let node = &node;
        async move {
            node.ok("submit-workflow", body).await["jobId"]
                .as_str()
                .expect("an id")
                .to_owned()
        }
    };
    let reviewed = three_step_workflow(&server.target());

    // Parked, answered, completed.
    let answered = submit(reviewed.clone(), json!({ "text": "hi" }), json!({})).await;
    node.wait_for_status(&answered, "WAITING", WAIT).await;
    node.ok(
        "complete-step",
        json!({ "jobId": answered, "stepName": "review", "response": { "notes": "fine", "score": 8 } }),
    )
    .await;
    node.wait_for_status(&answered, "COMPLETED", WAIT).await;

    // Parked, cancelled, retried by an operator, parked again, rejected.
    let rejected = submit(reviewed.clone(), json!({ "text": "hi" }), json!({})).await;
    node.wait_for_status(&rejected, "WAITING", WAIT).await;
    node.ok(
        "cancel-job",
        json!({ "jobId": rejected, "reason": "wrong customer" }),
    )
    .await;
    node.ok("retry-job", json!({ "jobId": rejected })).await;
    eventually_parked_again(&node, &rejected).await;
    node.ok(
        "reject-step",
        json!({ "jobId": rejected, "stepName": "review", "reason": "not this one" }),
    )
    .await;
    node.wait_for_status(&rejected, "FAILED", WAIT).await;

    // Out of attempts: DEAD.
    let dead = submit(
        two_step_workflow(&server.target()),
        json!({ "text": "x", "fail": true }),
        json!({ "maxAttempts": 1 }),
    )
    .await;
    node.wait_for_status(&dead, "DEAD", WAIT).await;

    let mut seen = std::collections::BTreeSet::new();
    for job in [&answered, &rejected, &dead] {
        for (kind, metadata) in event_metadata(&node, job).await {
            assert_eq!(metadata, tags, "{kind} of {job}");
            seen.insert(kind);
        }
    }
    let kinds: Vec<&str> = seen.iter().map(String::as_str).collect();
    assert_eq!(
        kinds,
        [
            "ACCEPTED",
            "CANCELLED",
            "COMPLETED",
            "DEAD",
            "FAILED",
            "RETRIED",
            "STEP_CHECKPOINT",
            "WAITING"
        ]
    );

    // A job without metadata: no entry at all.
    let plain = node
        .submit(&leaf_workflow(&server.target()), json!({ "text": "plain" }))
        .await;
    node.wait_for_status(&plain, "COMPLETED", WAIT).await;
    for (kind, metadata) in event_metadata(&node, &plain).await {
        assert_eq!(metadata, Value::Null, "{kind}");
    }
}

/// Waits until a retried job is parked on its review again (its first WAITING after
/// the RETRIED event).
async fn eventually_parked_again(node: &JobsNode, job_id: &str) {
    protomolt_e2e::jobs::eventually("the retried job to park again", WAIT, || async {
        let kinds: Vec<String> = event_metadata(node, job_id)
            .await
            .into_iter()
            .map(|(kind, _)| kind)
            .collect();
        let retried = kinds.iter().position(|k| k == "RETRIED");
        retried.is_some_and(|at| kinds[at..].iter().any(|k| k == "WAITING"))
    })
    .await;
}
