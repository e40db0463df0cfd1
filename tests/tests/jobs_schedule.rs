//! Delayed and scheduled starts (`runAt`, `delayMs`) and priorities: a job is not
//! claimed before its start, and claims take the highest priority first, FIFO within
//! one priority. Real PostgreSQL, real fixture servers.

use std::time::{Duration, Instant};

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, two_step_workflow};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_thousand_jobs_at_mixed_priorities_are_claimed_highest_first_and_fifo_within_one() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let workflow = two_step_workflow("127.0.0.1:1");
    // Ten calls of a hundred, one after the other: FIFO is between calls (a call's
    // rows share one transaction, and so one created_at).
    for call in 0..10 {
        let items: Vec<Value> = (0..100)
            .map(|i| {
                let mut item = json!({ "input": { "text": format!("{call} {i}") } });
                // Priorities 0..=9 mixed; every tenth item leaves it out (5).
                if (call + i) % 10 != 3 {
                    item["priority"] = json!((call * 7 + i) % 10);
                }
                item
            })
            .collect();
        let answer = node
            .ok(
                "submit-workflows",
                json!({ "workflow": workflow, "submissions": items }),
            )
            .await;
        assert_eq!(answer["created"], 100, "{answer}");
    }

    let mut claimed: Vec<(i16, u32)> = Vec::new();
    let client = db.connect().await;
    loop {
        let jobs = node
            .store
            .claim_jobs("w", Duration::from_secs(300), 1)
            .await
            .unwrap();
        let Some(job) = jobs.first() else { break };
        let row = client
            .query_one(
                "SELECT priority FROM workflow_run WHERE job_id = $1",
                &[&job.claim.job_id],
            )
            .await
            .unwrap();
        let call: u32 = job.input["text"]
            .as_str()
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        claimed.push((row.get(0), call));
    }
    assert_eq!(claimed.len(), 1000);
    for pair in claimed.windows(2) {
        let ((p1, c1), (p2, c2)) = (pair[0], pair[1]);
        assert!(p1 >= p2, "priority {p1} before {p2}");
        if p1 == p2 {
            assert!(c1 <= c2, "FIFO within priority {p1}: call {c1} before {c2}");
        }
    }
    assert_eq!(claimed.first().unwrap().0, 9);
    assert_eq!(claimed.last().unwrap().0, 0);
    node.stop().await;
}

#[tokio::test]
async fn a_job_is_not_claimed_before_its_start() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "busy", 4)).await;
    let workflow = two_step_workflow(&server.target());
    let sent = Instant::now();
    let delayed = node
        .ok(
            "submit-workflow",
            json!({ "workflow": workflow, "input": { "text": "later" }, "delayMs": 1500 }),
        )
        .await;
    let delayed = delayed["jobId"].as_str().unwrap().to_owned();
    assert_eq!(node.job(&delayed).await["status"], "QUEUED");
    node.wait_for_status(&delayed, "COMPLETED", WAIT).await;
    let first_call = server.stats.calls().len();
    assert_eq!(first_call, 2);
    let called_after = server.stats.last_call_at().unwrap() - sent;
    assert!(
        called_after >= Duration::from_millis(1400),
        "never claimed before its start: called {called_after:?} after submission"
    );

    // runAt an hour ahead stays QUEUED while a job behind it runs; one in the past
    // runs at once.
    let hour = std::time::SystemTime::now() + Duration::from_secs(3600);
    let at = prost_types::Timestamp::from(hour).to_string();
    let scheduled = node
        .ok(
            "submit-workflow",
            json!({ "workflow": workflow, "input": { "text": "in an hour" }, "runAt": at }),
        )
        .await;
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    let hour_ago = prost_types::Timestamp::from(hour_ago).to_string();
    let past = node
        .ok(
            "submit-workflow",
            json!({ "workflow": workflow, "input": { "text": "past" }, "runAt": hour_ago, "priority": 0 }),
        )
        .await;
    // A past start is stored as the submission's time: it never jumps the queue.
    let stored = node.job(past["jobId"].as_str().unwrap()).await;
    assert!(
        stored["run_after"].as_str().unwrap() >= stored["created_at"].as_str().unwrap(),
        "{stored}"
    );
    node.wait_for_status(past["jobId"].as_str().unwrap(), "COMPLETED", WAIT)
        .await;
    let waiting = node.job(scheduled["jobId"].as_str().unwrap()).await;
    assert_eq!(waiting["status"], "QUEUED", "{waiting}");
    assert_eq!(waiting["priority"], 5);
    node.stop().await;
}

#[tokio::test]
async fn bad_starts_and_priorities_are_refused_naming_the_field_and_nothing_is_written() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let workflow = two_step_workflow("127.0.0.1:1");
    let base = |extra: Value| {
        let mut body = json!({ "workflow": workflow, "input": { "text": "a" } });
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        body
    };
    for (extra, field) in [
        (json!({ "priority": 10 }), "priority"),
        (json!({ "priority": -1 }), "priority"),
        (json!({ "delayMs": -5 }), "delayMs"),
        (json!({ "delayMs": 31_622_400_001i64 }), "delayMs"),
        (json!({ "runAt": "tomorrow" }), "runAt"),
        (json!({ "runAt": "2026-02-30T00:00:00Z" }), "runAt"),
        (json!({ "runAt": "9999-01-01T00:00:00Z" }), "runAt"),
        (json!({ "runAt": "1970-01-01T00:00:00Z" }), "runAt"),
        (json!({ "runAt": "-400000-01-01T00:00:00Z" }), "runAt"),
        (json!({ "runAt": "2026-12-24T18:00:00" }), "runAt"),
        (json!({ "runAt": "2026-12-24" }), "runAt"),
        (
            json!({ "runAt": "2030-01-01T00:00:00Z", "delayMs": 5 }),
            "runAt",
        ),
    ] {
        let (status, answer) = node.call("submit-workflow", base(extra.clone())).await;
        assert_eq!(status, 400, "{extra}: {answer}");
        assert!(
            answer.to_string().contains(field),
            "{extra}: the answer names {field}: {answer}"
        );
    }
    // The same rules item by item in a batch.
    let answer = node
        .ok(
            "submit-workflows",
            json!({ "workflow": workflow, "submissions": [
                { "input": { "text": "a" }, "priority": 12 },
                { "input": { "text": "b" }, "runAt": "soon" },
                { "input": { "text": "c" }, "delayMs": "250", "priority": 0 },
                { "input": { "text": "d" }, "delay_ms": 3_600_000, "priority": "9" },
            ] }),
        )
        .await;
    let answers = answer["answers"].as_array().unwrap();
    assert!(
        answers[0]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("submissions[0].priority"),
        "{answer}"
    );
    assert!(
        answers[1]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("submissions[1].runAt"),
        "{answer}"
    );
    assert_eq!(answers[2]["created"], true, "{answer}");
    let job = node.job(answers[2]["jobId"].as_str().unwrap()).await;
    assert_eq!(job["priority"], 0);
    // proto3 JSON's other spellings (field names, numbers as strings) are honoured.
    let later = node.job(answers[3]["jobId"].as_str().unwrap()).await;
    assert_eq!(later["priority"], 9, "{later}");
    assert!(
        later["run_after"].as_str().unwrap() > later["created_at"].as_str().unwrap(),
        "{later}"
    );
    let count: i64 = db
        .connect()
        .await
        .query_one("SELECT count(*) FROM workflow_run", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 2, "only the good items were written");
    node.stop().await;
}
