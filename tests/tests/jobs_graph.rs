//! Workflow graphs through the real node: parallel branches (`after`), checkpoints
//! written in the order steps end and replayed by name, external steps waited for in
//! parallel branches, an operator's retry from a step of a graph, and rows parked
//! before V22 answered after it. Real PostgreSQL, real fixture servers.

use std::time::Duration;

use jobs_role::store::{migrate, migrate_to};
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};
use uuid::Uuid;
use workflow::testkit::{
    FixtureOptions, FixtureServer, diamond_workflow, review_step, step, three_step_workflow,
    workflow,
};

const WAIT: Duration = Duration::from_secs(30);

fn names(job: &Value) -> Vec<String> {
    job["checkpoints"]
        .as_array()
        .expect("checkpoints")
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect()
}

/// How long the job took by the row's own clock, from its creation to its end, in
/// seconds.
async fn run_seconds(db: &TestDatabase, job_id: &str) -> f64 {
    let client = db.connect().await;
    client
        .query_one(
            "SELECT extract(epoch FROM finished_at - created_at)::float8 FROM workflow_run WHERE job_id = $1",
            &[&Uuid::parse_str(job_id).unwrap()],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_diamond_whose_two_branches_take_a_second_each_completes_in_under_two() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_secs(1)),
        ..Default::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "diamond", 2)).await;
    let job_id = node
        .submit(&diamond_workflow(&server.target()), json!({ "text": "hi" }))
        .await;
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(server.stats.embed_calls(), 2);
    assert_eq!(server.stats.max_in_flight(), 2, "b and c overlapped");
    let took = run_seconds(&db, &job_id).await;
    assert!(
        took < 1.8,
        "the diamond took {took} s from submission to end"
    );
    let order = names(&job);
    assert_eq!(order.len(), 4);
    assert_eq!((order[0].as_str(), order[3].as_str()), ("a", "d"));
    assert_eq!(
        job["result"],
        json!({ "sourceText": "hi", "vector": [0.2, 1.0, 0.2, 1.0] })
    );
    // get-job draws the graph: each step with what it waits for, its state, and when
    // its call started and how long it took.
    let seen = node.ok("get-job", json!({ "jobId": job_id })).await;
    let steps = seen["job"]["steps"].as_array().expect("steps").clone();
    let by_name = |name: &str| steps.iter().find(|s| s["name"] == name).unwrap().clone();
    assert_eq!(by_name("d")["after"], json!(["b", "c"]));
    assert_eq!(by_name("b")["after"], json!(["a"]));
    for step in &steps {
        assert_eq!(step["state"], "done", "{step}");
        assert!(step["startedAt"].is_string(), "{step}");
    }
    let (b, c) = (by_name("b"), by_name("c"));
    assert!(b["tookMs"].as_f64().unwrap() >= 1000.0, "{b}");
    assert!(c["tookMs"].as_f64().unwrap() >= 1000.0, "{c}");
    node.stop().await;
}

#[tokio::test]
async fn a_retry_from_a_branch_reruns_it_and_what_follows_it_only() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "graph-retry", 2)).await;
    let job_id = node
        .submit(&diamond_workflow(&server.target()), json!({ "text": "hi" }))
        .await;
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    let answer = node
        .ok("retry-job", json!({ "jobId": job_id, "fromStep": "c" }))
        .await;
    assert_eq!(answer["checkpointsKept"], 2, "a and b stay: {answer}");
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(server.stats.embed_calls(), 3, "b once, c twice");
    assert_eq!(server.stats.tokenize_calls(), 3, "a once, d twice");
    let mut steps = names(&job);
    steps.sort();
    assert_eq!(steps, ["a", "b", "c", "d"]);
    // c and d were re-run once each (their calls get new idempotency keys); a and b
    // were not.
    assert_eq!(job["step_reruns"], json!([0, 0, 1, 1]));
    node.stop().await;
}

/// `a`, then two external steps after it (`review` waits for ever, `second` for an
/// hour), then `after_both` once both are answered.
fn two_reviews(target: &str) -> Value {
    let mut review = review_step(target);
    review["after"] = json!(["a"]);
    let mut second = review_step(target);
    second["name"] = json!("second");
    second["after"] = json!(["a"]);
    second["waitTimeoutMs"] = json!(3_600_000);
    let a = step(
        "a",
        target,
        "jobs.test.Tokenizer/Tokenize",
        &["text = input.text"],
    );
    let mut last = step(
        "after_both",
        target,
        "jobs.test.Tokenizer/Tokenize",
        &["text = review.notes"],
    );
    last["after"] = json!(["review", "second"]);
    workflow(
        "two-reviews",
        vec![a, review, second, last],
        Some(json!({
            "type": "jobs.test.Embedding",
            "rules": ["source_text = second.notes", "notes = review.notes"],
        })),
    )
}

#[tokio::test]
async fn two_external_steps_in_parallel_branches_are_answered_one_at_a_time() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "two-reviews", 2)).await;
    let job_id = node
        .submit(&two_reviews(&server.target()), json!({ "text": "hi" }))
        .await;
    let job = node.wait_for_status(&job_id, "WAITING", WAIT).await;
    let seen = node.ok("get-job", json!({ "jobId": job_id })).await;
    let states: Vec<(String, String)> = seen["job"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().into(),
                s["state"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("a".to_owned(), "done".to_owned()),
            ("review".into(), "waiting".into()),
            ("second".into(), "waiting".into()),
            ("after_both".into(), "pending".into()),
        ]
    );
    // The step whose wait ends first comes first (`review` waits for ever).
    assert_eq!(job["outstanding_steps"], json!(["second", "review"]));
    assert_eq!(job["outstanding_step"], "second");
    assert_eq!(job["wait_timeout_ms"], 3_600_000);
    assert_eq!(job["pending_request"], json!({ "text": "hi" }));
    assert_eq!(job["waits"][1]["step"], "review");
    assert_eq!(job["waits"][1]["request"], json!({ "text": "hi" }));

    let answer = node
        .ok(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "second", "response": { "notes": "two", "score": 2 } }),
        )
        .await;
    assert_eq!(answer["status"], "WAITING", "{answer}");
    assert_eq!(answer["resumes"], false);
    let job = node.job(&job_id).await;
    assert_eq!(job["status"], "WAITING");
    assert_eq!(job["outstanding_steps"], json!(["review"]));
    assert_eq!(job["outstanding_step"], "review");
    assert_eq!(job["wait_until"], Value::Null, "review waits for ever");
    assert_eq!(names(&job), ["a", "second"]);

    // Answered again: nothing more is appended.
    let again = node
        .ok(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "second", "response": { "notes": "two", "score": 2 } }),
        )
        .await;
    assert_eq!(again["outcome"], "ALREADY_DONE", "{again}");

    let answer = node
        .ok(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "review", "response": { "notes": "one", "score": 1 } }),
        )
        .await;
    assert_eq!(answer["status"], "QUEUED", "{answer}");
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(
        job["result"],
        json!({ "sourceText": "two", "notes": "one" })
    );
    assert_eq!(names(&job), ["a", "second", "review", "after_both"]);
    assert_eq!(job["outstanding_steps"], Value::Null);
    node.stop().await;
}

#[tokio::test]
async fn a_job_parked_before_v22_is_answered_and_completes_after_it() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let workflow = three_step_workflow(&server.target());
    let mut client = db.connect().await;
    migrate_to(&mut client, 21)
        .await
        .expect("migrations up to V21");
    // A row as a node of V21 parked it: its first step checkpointed in the array,
    // WAITING on `review` with only the single-step columns.
    let job = Uuid::now_v7();
    client
        .execute(
            "INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, checkpoints,
                                       status, attempt, claims, outstanding_step, pending_request)
             VALUES ($1, 'review-text', $2, $3, $4, 'WAITING', 1, 1, 'review', $5)",
            &[
                &job,
                &workflow,
                &json!({ "text": "old" }),
                &json!([{ "name": "tokenize", "skipped": false, "response": { "ids": [111, 108, 100] } }]),
                &json!({ "text": "old" }),
            ],
        )
        .await
        .unwrap();
    migrate(&mut client).await.expect("V22 over rows of V21");

    let node = JobsNode::start(test_config(&db.url, "after-v22", 2)).await;
    let job_id = job.to_string();
    let answer = node
        .ok(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "review", "response": { "notes": "fine", "score": 3 } }),
        )
        .await;
    assert_eq!(answer["status"], "QUEUED", "{answer}");
    let done = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(names(&done), ["tokenize", "review", "embed"]);
    assert_eq!(
        server.stats.tokenize_calls(),
        0,
        "tokenize was checkpointed"
    );
    assert_eq!(server.stats.embed_calls(), 1);
    node.stop().await;
}

#[tokio::test]
async fn a_wait_keeps_its_deadline_while_an_answer_lets_another_branch_run() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let target = server.target();
    // a; r1 and r2 (external, an hour each) after a; x after r1; last after x and r2.
    let external = |name: &str| {
        let mut step = review_step(&target);
        step["name"] = json!(name);
        step["after"] = json!(["a"]);
        step["waitTimeoutMs"] = json!(3_600_000);
        step
    };
    let mut x = step(
        "x",
        &target,
        "jobs.test.Tokenizer/Tokenize",
        &["text = r1.notes"],
    );
    x["after"] = json!(["r1"]);
    let mut last = step(
        "last",
        &target,
        "jobs.test.Tokenizer/Tokenize",
        &["text = r2.notes"],
    );
    last["after"] = json!(["x", "r2"]);
    let a = step(
        "a",
        &target,
        "jobs.test.Tokenizer/Tokenize",
        &["text = input.text"],
    );
    let envelope = workflow(
        "branch-while-waiting",
        vec![a, external("r1"), external("r2"), x, last],
        None,
    );
    let node = JobsNode::start(test_config(&db.url, "deadlines", 1)).await;
    let job_id = node.submit(&envelope, json!({ "text": "hi" })).await;
    let parked = node.wait_for_status(&job_id, "WAITING", WAIT).await;
    assert_eq!(parked["outstanding_steps"], json!(["r1", "r2"]));
    let r2_until = parked["waits"][1]["untilMs"].clone();
    assert!(r2_until.is_u64(), "{parked}");

    // Answering r1 lets x run: the job resumes, runs x, and parks again on r2 alone,
    // whose wait still ends when it did.
    let answer = node
        .ok(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "r1", "response": { "notes": "one" } }),
        )
        .await;
    assert_eq!(answer["status"], "QUEUED", "{answer}");
    eventually_parked_on_r2(&node, &job_id).await;
    let again = node.job(&job_id).await;
    assert_eq!(again["outstanding_steps"], json!(["r2"]));
    assert_eq!(again["waits"][0]["untilMs"], r2_until, "{again}");
    assert_eq!(
        again["wait_until"], parked["wait_until"],
        "r1 and r2 parked together with the same wait: r2's ends when r1's would have"
    );
    let done = node
        .ok(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "r2", "response": { "notes": "two" } }),
        )
        .await;
    assert_eq!(done["status"], "QUEUED", "{done}");
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    node.stop().await;
}

async fn eventually_parked_on_r2(node: &JobsNode, job_id: &str) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let job = node.job(job_id).await;
        if job["status"] == "WAITING" && job["outstanding_steps"] == json!(["r2"]) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never parked on r2: {job}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
