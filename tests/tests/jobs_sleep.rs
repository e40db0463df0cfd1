//! Durable sleeps through the real node: a job parked on a sleep holds no worker,
//! survives a node restart, never wakes early and wakes within the poll interval of
//! its time; a sleep beside an external step; cancel during a sleep. Real
//! PostgreSQL, real fixture servers.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, review_step, sleep_step, tokenize_step, workflow};

const WAIT: Duration = Duration::from_secs(30);

/// The wake time the row holds for the sleep step, in milliseconds since the epoch.
fn wake_ms(job: &Value) -> i64 {
    job["waits"]
        .as_array()
        .and_then(|waits| waits.iter().find(|w| w["kind"] == "sleep"))
        .and_then(|w| w["untilMs"].as_i64())
        .unwrap_or_else(|| panic!("no sleep in the waits: {job:#}"))
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_two_second_sleep_survives_a_restart_and_wakes_on_time_not_before() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let config = test_config(&db.url, "sleeper", 2);
    let poll_ms = i64::try_from(config.poll_interval_ms).unwrap();
    let node = JobsNode::start(config.clone()).await;
    let envelope = workflow(
        "sleepy",
        vec![
            sleep_step(json!({ "forMs": 2000 })),
            tokenize_step(&server.target()),
        ],
        None,
    );
    let job_id = node.submit(&envelope, json!({ "text": "a b" })).await;
    // Parked: QUEUED until its wake time, holding no worker, the sleep shown.
    let parked = node.wait_for_status(&job_id, "QUEUED", WAIT).await;
    let mut parked = parked;
    let deadline = Instant::now() + WAIT;
    while parked["waits"].is_null() {
        assert!(Instant::now() < deadline, "never parked: {parked:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        parked = node.job(&job_id).await;
    }
    let wake = wake_ms(&parked);
    let seen = node.ok("get-job", json!({ "jobId": job_id })).await;
    assert!(seen["job"]["sleepingUntil"].is_string(), "{seen:#}");
    assert_eq!(server.stats.tokenize_calls(), 0);
    assert_eq!(parked["attempt"], 0, "a park spends no attempt");
    // The WAITING event says what the job waits on.
    let waiting = seen["job"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "WAITING")
        .unwrap_or_else(|| panic!("no WAITING event: {seen:#}"))
        .clone();
    let on = &waiting["detail"]["waitingOn"][0];
    assert_eq!(
        (&on["step"], &on["kind"], on["forMs"].as_f64()),
        (&json!("cool_off"), &json!("sleep"), Some(2000.0)),
        "{waiting:#}"
    );

    // The node goes away in the middle of the sleep; another comes up.
    node.stop().await;
    let (base_instant, base_ms) = (Instant::now(), now_ms());
    let node = JobsNode::start(config).await;
    let done = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    let called_at = server.stats.last_call_at().expect("tokenize was called");
    let called_ms = base_ms + i64::try_from((called_at - base_instant).as_millis()).unwrap();
    assert!(
        called_ms >= wake,
        "tokenize was called {} ms before the sleep ended",
        wake - called_ms
    );
    assert!(
        called_ms <= wake + poll_ms + 1000,
        "tokenize was called {} ms after the sleep ended (poll interval {poll_ms} ms)",
        called_ms - wake
    );
    assert_eq!(
        done["checkpoints"][0],
        json!({ "name": "cool_off", "skipped": false, "response": {} })
    );
    assert_eq!(done["attempt"], 1);
    node.stop().await;
}

#[tokio::test]
async fn a_sleep_until_a_past_time_does_not_park_and_one_in_the_future_can_be_cancelled() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "until", 2)).await;
    let mut envelope = workflow(
        "until",
        vec![
            sleep_step(json!({ "until": "input.send_at" })),
            tokenize_step(&server.target()),
        ],
        None,
    );
    envelope["inputType"] = json!("jobs.test.Appointment");
    let past = node
        .submit(
            &envelope,
            json!({ "text": "x", "sendAt": "2001-01-01T00:00:00Z" }),
        )
        .await;
    let done = node.wait_for_status(&past, "COMPLETED", WAIT).await;
    assert!(done["waits"].is_null(), "it never parked: {done:#}");

    let future = node
        .submit(
            &envelope,
            json!({ "text": "x", "sendAt": "2999-01-01T00:00:00Z" }),
        )
        .await;
    let deadline = Instant::now() + WAIT;
    loop {
        let job = node.job(&future).await;
        if job["status"] == "QUEUED" && !job["waits"].is_null() {
            assert_eq!(wake_ms(&job), 32_472_144_000_000, "{job:#}");
            break;
        }
        assert!(Instant::now() < deadline, "never parked: {job:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancelled = node
        .ok(
            "cancel-job",
            json!({ "jobId": future, "reason": "not needed" }),
        )
        .await;
    assert_eq!(cancelled["status"], "CANCELLED", "{cancelled}");
    let seen = node.ok("get-job", json!({ "jobId": future })).await;
    assert!(seen["job"]["sleepingUntil"].is_null(), "{seen:#}");
    assert_eq!(
        server.stats.tokenize_calls(),
        1,
        "only the past sleep's job went on"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_sleep_beside_an_external_step_wakes_and_the_review_keeps_its_deadline() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "beside", 2)).await;
    let mut review = review_step(&server.target());
    review["after"] = json!([]);
    review["waitTimeoutMs"] = json!(3_600_000);
    let mut sleep = sleep_step(json!({ "forMs": 300 }));
    sleep["after"] = json!([]);
    let mut last = tokenize_step(&server.target());
    last["after"] = json!(["review", "cool_off"]);
    let envelope = workflow("beside", vec![review, sleep, last], None);
    let job_id = node.submit(&envelope, json!({ "text": "a b" })).await;
    let first = node.wait_for_status(&job_id, "WAITING", WAIT).await;
    let review_until = |job: &Value| {
        job["waits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["step"] == "review")
            .and_then(|w| w["untilMs"].as_i64())
            .unwrap_or_else(|| panic!("no review wait: {job:#}"))
    };
    let deadline_before = review_until(&first);
    // The sweeper wakes the job when the sleep ends; it records the sleep and parks
    // on the review again, its deadline unmoved.
    let deadline = Instant::now() + WAIT;
    let again = loop {
        let job = node.job(&job_id).await;
        let slept = job["checkpoints"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["name"] == "cool_off"));
        if slept && job["status"] == "WAITING" {
            break job;
        }
        assert!(Instant::now() < deadline, "the sleep never ended: {job:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(review_until(&again), deadline_before);
    assert_eq!(again["outstanding_step"], "review");
    let answered = node
        .ok(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "review",
                    "response": { "score": 3, "notes": "fine" } }),
        )
        .await;
    assert_eq!(answered["ok"], true, "{answered}");
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    // complete-step never answers a sleep.
    let (status, refused) = node
        .call(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "cool_off", "response": {} }),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("is a sleep"),
        "{refused}"
    );
    node.stop().await;
}
