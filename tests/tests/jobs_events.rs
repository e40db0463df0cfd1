//! Waiting for an event through the real node: `send-event` resumes every job
//! waiting on its key in one call, refuses a job whose step the payload does not fit
//! (with why) while the others resume, keeps the event for jobs that park on the key
//! later, and answers a second send of one `eventId` with nothing. Real PostgreSQL,
//! real fixture servers.

use std::time::Duration;

use jobs_role::JobStatus;
use jobs_role::store::sql;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, event_workflow, tokenize_step, workflow};

const WAIT: Duration = Duration::from_secs(60);

async fn kept_events(db: &TestDatabase) -> i64 {
    let client = db.connect().await;
    one_value(
        &client,
        "SELECT count(*) FROM workflow_events_received",
        &[],
    )
    .await
}

/// The one value `query` answers.
async fn one_value<T: for<'a> tokio_postgres::types::FromSql<'a>>(
    client: &tokio_postgres::Client,
    query: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> T {
    client
        .query_one(query, params)
        .await
        .unwrap_or_else(|e| panic!("{query}: {e}"))
        .get(0)
}

#[tokio::test]
async fn an_event_resumes_the_job_waiting_on_its_key_once_and_a_resend_resumes_nothing() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "events", 2)).await;
    let job_id = node
        .submit(
            &event_workflow(&server.target(), json!({})),
            json!({ "text": "42" }),
        )
        .await;
    let parked = node.wait_for_status(&job_id, "WAITING", WAIT).await;
    assert_eq!(parked["outstanding_step"], "paid");
    let seen = node.ok("get-job", json!({ "jobId": job_id })).await;
    let waiting = seen["job"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "WAITING")
        .cloned()
        .unwrap();
    assert_eq!(
        waiting["detail"]["waitingOn"][0]["key"], "order-42",
        "{waiting:#}"
    );

    // complete-step does not answer an event step.
    let (status, refused) = node
        .call(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "paid", "response": { "score": 0 } }),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("send-event"),
        "{refused}"
    );

    let sent = node
        .ok(
            "send-event",
            json!({ "key": "order-42", "eventId": "payment-1",
                    "payload": { "notes": "paid", "score": 7 } }),
        )
        .await;
    assert_eq!(sent["duplicate"], false, "{sent}");
    assert_eq!(
        sent["resumed"],
        json!([{ "jobId": job_id, "step": "paid", "status": "QUEUED" }]),
        "{sent}"
    );
    let done = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(done["result"], json!({ "notes": "paid", "score": 7 }));
    assert_eq!(done["checkpoints"][1]["eventId"], "payment-1");

    let again = node
        .ok(
            "send-event",
            json!({ "key": "order-42", "eventId": "payment-1",
                    "payload": { "notes": "paid", "score": 7 } }),
        )
        .await;
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["resumed"], json!([]));
    assert_eq!(kept_events(&db).await, 1);
    node.stop().await;
}

#[tokio::test]
async fn an_event_sent_before_the_job_parks_is_delivered_when_it_parks() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "early", 2)).await;
    let sent = node
        .ok(
            "send-event",
            json!({ "key": "order-7", "payload": { "notes": "early", "score": 1 } }),
        )
        .await;
    assert_eq!(sent["resumed"], json!([]), "nobody waits yet: {sent}");
    let event_id = sent["eventId"].as_str().expect("an id made up").to_owned();
    let job_id = node
        .submit(
            &event_workflow(&server.target(), json!({})),
            json!({ "text": "7" }),
        )
        .await;
    let done = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(done["checkpoints"][1]["eventId"], event_id.as_str());
    assert_eq!(done["result"], json!({ "notes": "early", "score": 1 }));

    // Past its step's lookback an event is not delivered.
    node.ok(
        "send-event",
        json!({ "key": "order-8", "payload": { "notes": "late", "score": 1 } }),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let short = node
        .submit(
            &event_workflow(&server.target(), json!({ "eventLookbackMs": 100 })),
            json!({ "text": "8" }),
        )
        .await;
    node.wait_for_status(&short, "WAITING", WAIT).await;
    // The next event answers it: the old one was never taken.
    node.ok(
        "send-event",
        json!({ "key": "order-8", "eventId": "fresh", "payload": { "notes": "new", "score": 1 } }),
    )
    .await;
    let done = node.wait_for_status(&short, "COMPLETED", WAIT).await;
    assert_eq!(done["checkpoints"][1]["eventId"], "fresh");
    node.stop().await;
}

#[tokio::test]
async fn one_event_resumes_five_hundred_jobs_and_refuses_the_one_it_does_not_fit() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "many", 4)).await;
    let submissions: Vec<Value> = (0..500)
        .map(|_| json!({ "input": { "text": "batch" } }))
        .collect();
    let answer = node
        .ok(
            "submit-workflows",
            json!({ "workflow": event_workflow(&server.target(), json!({})),
                    "submissions": submissions }),
        )
        .await;
    assert_eq!(answer["created"], 500, "refused: {}", answer["refused"]);
    // One job whose step waits for another type on the same key, one whose step
    // checks the payload's rules, which this payload breaks.
    let mut other = event_workflow(
        &server.target(),
        json!({ "outputType": "jobs.test.Tokens" }),
    );
    other["name"] = json!("other");
    let other_id = node.submit(&other, json!({ "text": "batch" })).await;
    let mut strict = event_workflow(&server.target(), json!({ "validate": true }));
    strict["name"] = json!("strict");
    let strict_id = node.submit(&strict, json!({ "text": "batch" })).await;
    node.wait_for_count(JobStatus::Waiting, 502, WAIT).await;

    let sent = node
        .ok(
            "send-event",
            json!({ "key": "order-batch", "payload": { "notes": "", "score": 3 } }),
        )
        .await;
    let resumed = sent["resumed"].as_array().unwrap();
    assert_eq!(resumed.len(), 500, "{}", sent["refused"]);
    let refused = sent["refused"].as_array().unwrap();
    let reason = |id: &str| {
        refused
            .iter()
            .find(|r| r["jobId"] == id)
            .unwrap_or_else(|| panic!("{id} not refused: {sent}"))["reason"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        reason(&other_id).contains("is not a jobs.test.Tokens"),
        "{sent}"
    );
    assert!(
        reason(&strict_id).contains("a scored review needs notes"),
        "{sent}"
    );
    assert_eq!(refused.len(), 2);
    node.wait_for_count(JobStatus::Completed, 500, WAIT).await;
    // The refused ones keep waiting. (The sweeper may requeue one for a while, as a
    // parked job that has not taken an event kept for its key; it is refused again
    // and parks again.)
    for refused in [&other_id, &strict_id] {
        node.wait_for_status(refused, "WAITING", WAIT).await;
    }
    node.stop().await;
}

#[tokio::test]
async fn hostile_sends_are_refused_naming_the_field_and_nothing_is_kept() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "hostile", 1)).await;
    for (body, field) in [
        (json!({ "key": "", "payload": {} }), "key"),
        (json!({ "key": "k".repeat(1001), "payload": {} }), "key"),
        (json!({ "key": "k\u{0}", "payload": {} }), "key"),
        (json!({ "key": "k" }), "payload"),
        (json!({ "key": "k", "payload": [1, 2] }), "payload"),
        (
            json!({ "key": "k", "payload": { "notes": "a\u{0}b" } }),
            "payload",
        ),
        (
            json!({ "key": "k", "payload": {}, "eventId": "e".repeat(201) }),
            "eventId",
        ),
    ] {
        let (status, answer) = node.call("send-event", body.clone()).await;
        assert_eq!(status, 400, "{body} answered {answer}");
        let message = answer["message"]
            .as_str()
            .unwrap_or_default()
            .to_lowercase();
        assert!(
            message.contains(&field.to_lowercase())
                || message.contains(&field.replace("Id", "_id")),
            "{body}: {answer}"
        );
    }
    assert_eq!(kept_events(&db).await, 0);
    node.stop().await;
}

#[tokio::test]
async fn an_event_step_may_bound_its_wait() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "timeout", 1)).await;
    let job_id = node
        .submit(
            &event_workflow(&server.target(), json!({ "waitTimeoutMs": 200 })),
            json!({ "text": "slow" }),
        )
        .await;
    let failed = node.wait_for_status(&job_id, "FAILED", WAIT).await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .starts_with("TIMEOUT: step 'paid' was not answered within 200 ms"),
        "{failed:#}"
    );
    node.stop().await;
}

#[tokio::test]
async fn two_steps_waiting_on_one_key_both_take_one_send_and_a_kept_event() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "twins", 2)).await;
    let wait = |name: &str| {
        json!({ "name": name, "after": [], "completion": "event",
                "eventKey": "'twin-' + input.text", "outputType": "jobs.test.Review" })
    };
    let mut last = tokenize_step(&server.target());
    last["after"] = json!(["left", "right"]);
    let envelope = workflow("twins", vec![wait("left"), wait("right"), last], None);
    // Sent while both wait.
    let live = node.submit(&envelope, json!({ "text": "a" })).await;
    node.wait_for_status(&live, "WAITING", WAIT).await;
    let sent = node
        .ok(
            "send-event",
            json!({ "key": "twin-a", "payload": { "notes": "both", "score": 1 } }),
        )
        .await;
    assert_eq!(sent["resumed"].as_array().unwrap().len(), 2, "{sent}");
    node.wait_for_status(&live, "COMPLETED", WAIT).await;
    // Sent before either parks: both take it when the job parks.
    node.ok(
        "send-event",
        json!({ "key": "twin-b", "payload": { "notes": "early", "score": 1 } }),
    )
    .await;
    let early = node.submit(&envelope, json!({ "text": "b" })).await;
    let done = node.wait_for_status(&early, "COMPLETED", WAIT).await;
    let names: Vec<&str> = done["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["eventId"].is_string())
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{done:#}");
    node.stop().await;
}

#[tokio::test]
async fn an_event_id_is_idempotent_per_key_a_key_no_sender_can_name_fails_and_payloads_are_bounded()
{
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "bounds", 1)).await;
    for key in ["k1", "k2"] {
        let sent = node
            .ok(
                "send-event",
                json!({ "key": key, "eventId": "same", "payload": { "score": 0 } }),
            )
            .await;
        assert_eq!(sent["duplicate"], false, "{key}: {sent}");
    }
    assert_eq!(kept_events(&db).await, 2);
    let (status, refused) = node
        .call(
            "send-event",
            json!({ "key": "k3", "payload": { "notes": "x".repeat(1_100_000) } }),
        )
        .await;
    assert_eq!(status, 400, "payload too large");
    assert!(refused["message"].as_str().unwrap().contains("payload:"));
    // An input that makes the key empty fails the step when it parks.
    let mut empty_key = event_workflow(&server.target(), json!({}));
    empty_key["steps"][1]["eventKey"] = json!("input.text");
    let job = node.submit(&empty_key, json!({ "text": "" })).await;
    let failed = node.wait_for_status(&job, "FAILED", WAIT).await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("a key is 1 to 1000 characters"),
        "{failed:#}"
    );
    node.stop().await;
}

/// A node with one job of `event_workflow` parked on key `order-<text>`; then, when
/// `kept_event_ago` is given, an event `lost` kept for that key that long ago (as if
/// sent before the park), and only then the park moved a minute back with its
/// catch-up set to `caught_up` (SQL: `NULL`, never), so the sweeper never looks at
/// the job before the event is there.
async fn parked_a_minute_ago(
    text: &str,
    kept_event_ago: Option<&str>,
    caught_up: &str,
) -> (TestDatabase, FixtureServer, JobsNode, String) {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, &format!("parked-{text}"), 1)).await;
    let job_id = node
        .submit(
            &event_workflow(&server.target(), json!({})),
            json!({ "text": text }),
        )
        .await;
    node.wait_for_status(&job_id, "WAITING", WAIT).await;
    let client = db.connect().await;
    if let Some(ago) = kept_event_ago {
        client
            .execute(
                "INSERT INTO workflow_events_received (event_id, event_key, payload, received_at)
                 VALUES ('lost', 'order-' || $1::text, '{\"notes\": \"late\", \"score\": 2}',
                         now() - $2::text::interval)",
                &[&text, &ago],
            )
            .await
            .unwrap();
    }
    let moved = format!(
        "UPDATE workflow_run SET updated_at = now() - interval '1 minute', events_caught_up_at = {caught_up}
          WHERE job_id = $1::text::uuid"
    );
    client.execute(&moved, &[&job_id]).await.unwrap();
    (db, server, node, job_id)
}

/// A parked job whose catch-up on kept events never completed (its node died after
/// the park, or the catch-up failed: a full disk, a database gone) and an event kept
/// for its key `received_ago` before: the sweeper requeues it and the next park takes
/// the event.
async fn a_missed_catch_up_is_made_good(received_ago: &str) {
    let (_db, _server, node, job_id) = parked_a_minute_ago("m", Some(received_ago), "NULL").await;
    let done = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(done["checkpoints"][1]["eventId"], "lost");
    node.stop().await;
}

#[tokio::test]
async fn the_sweeper_requeues_a_parked_job_that_missed_a_kept_event() {
    a_missed_catch_up_is_made_good("1 second").await;
}

/// The chaos run's defect (issue 38): an event sent half an hour before the park, its
/// catch-up failed on a full disk, was never delivered (the sweeper looked only at
/// events of the last two minutes).
#[tokio::test]
async fn the_sweeper_requeues_a_parked_job_that_missed_an_event_sent_long_before_it_parked() {
    a_missed_catch_up_is_made_good("30 minutes").await;
}

/// A job that caught up (and found nothing) is not requeued: its park stands.
#[tokio::test]
async fn a_parked_job_that_caught_up_is_left_parked() {
    // Parked a minute ago, caught up since: nothing is owed.
    let (_db, _server, node, _job_id) = parked_a_minute_ago("n", None, "now()").await;
    let requeued = node
        .store
        .requeue_missed_signals(100)
        .await
        .expect("a sweep");
    assert_eq!(requeued, 0, "a job that caught up was requeued");
    node.stop().await;
}

/// Whether the job's catch-up on kept events is stamped as done (migration V33).
async fn caught_up(client: &tokio_postgres::Client, job_id: &str) -> bool {
    one_value(
        client,
        "SELECT events_caught_up_at IS NOT NULL FROM workflow_run WHERE job_id = $1::text::uuid",
        &[&job_id],
    )
    .await
}

/// A job that parks a second time is owed a new catch-up: the park clears the stamp
/// its first catch-up left (else a second catch-up that failed would never be made
/// good), and the catch-up, once it has the key's lock, takes the event kept for it.
#[tokio::test]
async fn a_second_park_owes_a_new_catch_up_on_kept_events() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "reparked", 1)).await;
    let wait = |name: &str| {
        json!({ "name": name, "completion": "event", "eventKey": format!("'{name}-' + input.text"),
                "outputType": "jobs.test.Review" })
    };
    let envelope = workflow(
        "twice",
        vec![
            tokenize_step(&server.target()),
            wait("first"),
            wait("second"),
        ],
        None,
    );
    let job_id = node.submit(&envelope, json!({ "text": "x" })).await;
    node.wait_for_status(&job_id, "WAITING", WAIT).await;
    let client = db.connect().await;
    eventually("the first park's catch-up", WAIT, || {
        caught_up(&client, &job_id)
    })
    .await;

    // The second key's lock held, as a send holds it, with an event kept under it:
    // the second park's catch-up waits for both.
    let mut holder = db.connect().await;
    let send = holder.transaction().await.unwrap();
    send.execute(sql::LOCK_EVENT_KEYS, &[&vec!["second-x".to_owned()]])
        .await
        .unwrap();
    send.execute(
        "INSERT INTO workflow_events_received (event_id, event_key, payload)
         VALUES ('kept', 'second-x', '{\"notes\": \"kept\", \"score\": 3}')",
        &[],
    )
    .await
    .unwrap();
    node.ok(
        "send-event",
        json!({ "key": "first-x", "payload": { "notes": "first", "score": 1 } }),
    )
    .await;
    eventually("the second park", WAIT, || async {
        let row = node.job(&job_id).await;
        row["status"] == "WAITING" && row["outstanding_step"] == "second"
    })
    .await;
    assert!(
        !caught_up(&client, &job_id).await,
        "the second park still carries the first catch-up's stamp"
    );
    send.commit().await.unwrap();
    let done = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(done["checkpoints"][2]["eventId"], "kept", "{done:#}");
    assert!(caught_up(&client, &job_id).await);
    node.stop().await;
}
