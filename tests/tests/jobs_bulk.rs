//! `cancel-jobs` and `retry-jobs`: many jobs by id or by filter, each changed as the
//! one-job verb would, every other job answered with why; chunked, never deadlocked
//! with a draining fleet, never stuck behind a held row. Also `list-jobs` by priority.
//! Real PostgreSQL, real fixture servers.

use std::time::{Duration, Instant};

use http::StatusCode;
use jobs_proto::WireMessage;
use jobs_proto::v1::WorkflowRunEvent;
use jobs_role::JobStatus;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually, queue_jobs, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureOptions, FixtureServer, two_step_workflow};

const WAIT: Duration = Duration::from_secs(60);

/// Moves a job to a finished `status` with what that status requires; `claims` says
/// how often it ran (0: it failed at submission).
async fn finish(db: &TestDatabase, job_id: &str, status: &str, claims: i32) {
    db.connect()
        .await
        .execute(
            "UPDATE workflow_run
                SET status = $2, verdict = 'v', error = 'e', claims = $3,
                    attempt = LEAST($3, max_attempts), finished_at = now()
              WHERE job_id = $1::text::uuid",
            &[&job_id, &status, &claims],
        )
        .await
        .unwrap();
}

/// A node that runs no jobs, fixture servers, and `count` jobs of the two-step
/// workflow named `name` submitted through it, oldest first.
async fn submitted(
    node: &JobsNode,
    server: &FixtureServer,
    name: &str,
    count: usize,
) -> Vec<String> {
    let mut workflow = two_step_workflow(&server.target());
    workflow["name"] = json!(name);
    let mut ids = Vec::new();
    for i in 0..count {
        ids.push(
            node.submit(&workflow, json!({ "text": format!("{name} {i}") }))
                .await,
        );
    }
    ids
}

/// Each job not changed: its id, outcome and status (`-` when none is told).
fn not_changed(answer: &Value) -> Vec<(String, String, String)> {
    answer["notChanged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["jobId"].as_str().unwrap().to_owned(),
                n["outcome"].as_str().unwrap().to_owned(),
                n["status"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect()
}

fn changed_ids(answer: &Value) -> Vec<String> {
    let mut ids: Vec<String> = answer["changedJobIds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

fn sorted(ids: &[String]) -> Vec<String> {
    let mut ids = ids.to_vec();
    ids.sort();
    ids
}

/// The last event of a job, decoded.
async fn last_event(node: &JobsNode, job_id: &str) -> WorkflowRunEvent {
    let rows = node
        .store
        .job_events(uuid::Uuid::parse_str(job_id).unwrap())
        .await
        .unwrap();
    WorkflowRunEvent::decode_validated(&rows.last().unwrap().payload).unwrap()
}

fn detail(event: &WorkflowRunEvent, key: &str) -> String {
    match &event.detail.as_ref().unwrap().fields[key].kind {
        Some(prost_types::value::Kind::StringValue(text)) => text.clone(),
        other => panic!("detail.{key} is {other:?}"),
    }
}

#[tokio::test]
async fn cancel_jobs_by_id_cancels_the_live_ones_and_says_why_for_every_other() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "bulk", 4).await;
    finish(&db, &ids[2], "COMPLETED", 1).await;
    idle.ok("cancel-job", json!({ "jobId": ids[3], "reason": "first" }))
        .await;
    let unknown = uuid::Uuid::now_v7().to_string();

    let answer = idle
        .ok(
            "cancel-jobs",
            // ids[0] twice: counted once.
            json!({ "jobIds": [ids[0], ids[1], ids[2], ids[3], unknown, ids[0]], "reason": "a bad batch" }),
        )
        .await;
    assert_eq!(answer["ok"], true);
    assert_eq!(answer["changed"], 2, "{answer}");
    assert_eq!(changed_ids(&answer), sorted(&ids[..2]));
    assert_eq!(answer["more"], false);
    let mut expected = vec![
        (
            ids[2].clone(),
            "ALREADY_FINISHED".to_owned(),
            "COMPLETED".to_owned(),
        ),
        (
            ids[3].clone(),
            "ALREADY_CANCELLED".to_owned(),
            "CANCELLED".to_owned(),
        ),
        (unknown.clone(), "NOT_FOUND".to_owned(), "-".to_owned()),
    ];
    expected.sort();
    let mut told = not_changed(&answer);
    told.sort();
    assert_eq!(told, expected, "{answer}");
    for n in answer["notChanged"].as_array().unwrap() {
        assert!(
            !n["error"].as_str().unwrap().is_empty(),
            "every refusal says why: {n}"
        );
    }

    for id in &ids[..2] {
        let job = idle.job(id).await;
        assert_eq!(job["status"], "CANCELLED");
        assert_eq!(job["cancel_reason"], "a bad batch");
        let event = last_event(&idle, id).await;
        assert_eq!(
            event.r#type,
            jobs_proto::v1::workflow_run_event::Type::Cancelled as i32
        );
        assert_eq!(detail(&event, "reason"), "a bad batch");
    }
    assert_eq!(
        idle.job(&ids[3]).await["cancel_reason"],
        "first",
        "left as it was"
    );
    assert_eq!(idle.job(&ids[2]).await["status"], "COMPLETED");

    // Sent again: nothing changes, every job says so.
    let again = idle
        .ok(
            "cancel-jobs",
            json!({ "jobIds": [ids[0], ids[1]], "reason": "again" }),
        )
        .await;
    assert_eq!(again["changed"], 0);
    assert!(
        not_changed(&again)
            .iter()
            .all(|(_, outcome, _)| outcome == "ALREADY_CANCELLED")
    );
    idle.stop().await;
}

#[tokio::test]
async fn cancel_jobs_by_filter_takes_the_oldest_live_jobs_of_the_workflow_up_to_the_limit() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let runaway = submitted(&idle, &server, "runaway", 5).await;
    let other = submitted(&idle, &server, "other", 2).await;

    let filter = json!({ "workflowName": "runaway" });
    let first = idle
        .ok(
            "cancel-jobs",
            json!({ "filter": filter, "limit": 3, "reason": "runaway" }),
        )
        .await;
    assert_eq!(first["changed"], 3, "{first}");
    assert_eq!(
        changed_ids(&first),
        sorted(&runaway[..3]),
        "the oldest first"
    );
    assert_eq!(first["more"], true, "two more match");
    let rest = idle
        .ok(
            "cancel-jobs",
            json!({ "filter": filter, "limit": 3, "reason": "runaway" }),
        )
        .await;
    assert_eq!(changed_ids(&rest), sorted(&runaway[3..]));
    assert_eq!(rest["more"], false);
    assert_eq!(
        rest["notChanged"],
        json!([]),
        "cancelled jobs are not selected again"
    );
    for id in &other {
        assert_eq!(
            idle.job(id).await["status"],
            "QUEUED",
            "another workflow is untouched"
        );
    }

    // Narrowed by status and creation time: nothing QUEUED was created before the
    // first job.
    let created = idle.job(&other[0]).await["created_at"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = idle
        .ok(
            "cancel-jobs",
            json!({ "filter": { "status": "QUEUED", "createdBefore": created }, "limit": 10, "reason": "r" }),
        )
        .await;
    assert_eq!(answer["changed"], 0, "{answer}");
    let answer = idle
        .ok(
            "cancel-jobs",
            // The other spelling of the filter's fields is read too.
            json!({ "filter": { "status": "QUEUED", "created_after": created }, "limit": 10, "reason": "r" }),
        )
        .await;
    assert_eq!(changed_ids(&answer), vec![other[1].clone()]);

    // A status the verb does not take is refused, naming the field.
    let (status, refused) = idle
        .call(
            "cancel-jobs",
            json!({ "filter": { "status": "DEAD" }, "limit": 10, "reason": "r" }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .starts_with("filter.status: cancel-jobs takes QUEUED, WAITING, RUNNING jobs"),
        "{refused}"
    );
    idle.stop().await;
}

#[tokio::test]
async fn cancel_jobs_stops_running_jobs_through_their_workers() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_secs(60)),
        ..FixtureOptions::default()
    })
    .await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "slow", 3).await;
    let busy = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    eventually("two slow calls to start", WAIT, || async {
        server.stats.tokenize_calls() == 2
    })
    .await;

    let answer = idle
        .ok(
            "cancel-jobs",
            json!({ "filter": {}, "limit": 10, "reason": "stop them all" }),
        )
        .await;
    assert_eq!(answer["changed"], 3, "two RUNNING, one QUEUED: {answer}");
    for id in &ids {
        let job = idle
            .wait_for_status(id, "CANCELLED", Duration::from_secs(10))
            .await;
        assert_eq!(job["checkpoints"], json!([]));
        assert_eq!(job["cancel_reason"], "stop them all");
    }
    // RUNNING jobs asked to stop are not selected again while their workers settle.
    let again = idle
        .ok(
            "cancel-jobs",
            json!({ "filter": {}, "limit": 10, "reason": "again" }),
        )
        .await;
    assert_eq!(again["changed"], 0);
    assert_eq!(again["notChanged"], json!([]));
    busy.stop().await;
    idle.stop().await;
}

#[tokio::test]
async fn retry_jobs_requeues_dead_and_failed_jobs_cancelled_ones_only_when_named() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "flaky", 6).await;
    finish(&db, &ids[0], "DEAD", 3).await;
    finish(&db, &ids[1], "FAILED", 1).await;
    // Failed at submission: never claimed, never retried.
    finish(&db, &ids[2], "FAILED", 0).await;
    idle.ok(
        "cancel-job",
        json!({ "jobId": ids[3], "reason": "on purpose" }),
    )
    .await;
    finish(&db, &ids[4], "COMPLETED", 1).await;
    // ids[5] stays QUEUED.

    let answer = idle
        .ok(
            "retry-jobs",
            json!({ "filter": { "workflowName": "flaky" }, "limit": 10, "maxAttempts": 7, "reason": "target fixed" }),
        )
        .await;
    assert_eq!(changed_ids(&answer), sorted(&ids[..2]), "{answer}");
    assert_eq!(
        answer["notChanged"],
        json!([]),
        "only retryable jobs are selected"
    );
    for id in &ids[..2] {
        let job = idle.job(id).await;
        assert_eq!(job["status"], "QUEUED");
        assert_eq!(job["max_attempts"], 7);
        assert_eq!(job["attempt"], 0);
        let event = last_event(&idle, id).await;
        assert_eq!(
            event.r#type,
            jobs_proto::v1::workflow_run_event::Type::Retried as i32
        );
        assert_eq!(detail(&event, "reason"), "target fixed");
        assert_eq!(detail(&event, "status"), "QUEUED");
    }
    assert_eq!(detail(&last_event(&idle, &ids[0]).await, "from"), "DEAD");
    assert_eq!(detail(&last_event(&idle, &ids[1]).await, "from"), "FAILED");
    assert_eq!(
        idle.job(&ids[3]).await["status"],
        "CANCELLED",
        "not named: kept"
    );

    let cancelled = idle
        .ok(
            "retry-jobs",
            json!({ "filter": { "status": "CANCELLED" }, "limit": 10 }),
        )
        .await;
    assert_eq!(changed_ids(&cancelled), vec![ids[3].clone()]);

    // By id, every job not in a retryable state says why.
    let unknown = uuid::Uuid::now_v7().to_string();
    let by_id = idle
        .ok(
            "retry-jobs",
            json!({ "jobIds": [ids[2], ids[4], ids[5], unknown] }),
        )
        .await;
    assert_eq!(by_id["changed"], 0);
    let mut told = not_changed(&by_id);
    told.sort();
    let mut expected = vec![
        (
            ids[2].clone(),
            "WRONG_STATE".to_owned(),
            "FAILED".to_owned(),
        ),
        (
            ids[4].clone(),
            "WRONG_STATE".to_owned(),
            "COMPLETED".to_owned(),
        ),
        (
            ids[5].clone(),
            "WRONG_STATE".to_owned(),
            "QUEUED".to_owned(),
        ),
        (unknown, "NOT_FOUND".to_owned(), "-".to_owned()),
    ];
    expected.sort();
    assert_eq!(told, expected, "{by_id}");

    // The retried jobs run to the end.
    let busy = JobsNode::start(test_config(&db.url, "busy", 4)).await;
    for id in [&ids[0], &ids[1], &ids[3], &ids[5]] {
        busy.wait_for_status(id, "COMPLETED", WAIT).await;
    }
    busy.stop().await;
    idle.stop().await;
}

#[tokio::test]
async fn a_bulk_cancel_of_thousands_during_a_drain_commits_in_chunks_and_leaves_no_job_behind() {
    let db = TestDatabase::create().await;
    // A short call per job, so the drain lasts long enough for most jobs to be
    // cancelled live, however fast the machine.
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_millis(50)),
        ..FixtureOptions::default()
    })
    .await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let total = 2_500;
    queue_jobs(&idle.store, &two_step_workflow(&server.target()), total).await;
    let busy = JobsNode::start(test_config(&db.url, "busy", 8)).await;
    eventually("the drain to start", WAIT, || async {
        busy.store.count_jobs(JobStatus::Completed).await.unwrap() > 0
    })
    .await;

    let answer = idle
        .ok(
            "cancel-jobs",
            json!({ "filter": {}, "limit": 10_000, "reason": "drain stopped" }),
        )
        .await;
    let changed = answer["changed"].as_i64().unwrap();
    assert!(
        changed > 1_000,
        "more than one chunk was cancelled: {changed}"
    );
    for n in answer["notChanged"].as_array().unwrap() {
        // Jobs that finished between the selection and their lock; nothing else. A
        // job the filter selected as live and found finished under its lock has left
        // the filter's statuses: NO_LONGER_MATCHES, with its finished status.
        let finished = n["outcome"] == "ALREADY_FINISHED"
            || (n["outcome"] == "NO_LONGER_MATCHES" && n["status"] == "COMPLETED");
        assert!(finished, "{n}");
    }
    let total = total as i64;
    eventually("every job to be COMPLETED or CANCELLED", WAIT, || async {
        let completed = busy.store.count_jobs(JobStatus::Completed).await.unwrap();
        let cancelled = busy.store.count_jobs(JobStatus::Cancelled).await.unwrap();
        completed + cancelled == total
    })
    .await;
    assert_eq!(
        busy.store.count_jobs(JobStatus::Cancelled).await.unwrap(),
        changed
    );
    busy.stop().await;
    idle.stop().await;
}

/// A connection holding `job_id`'s row lock in an open transaction (end it with
/// `ROLLBACK`).
async fn hold_row(db: &TestDatabase, job_id: &str) -> tokio_postgres::Client {
    let holder = db.connect().await;
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM workflow_run WHERE job_id = '{job_id}' FOR UPDATE"
        ))
        .await
        .unwrap();
    holder
}

#[tokio::test]
async fn a_row_held_by_another_transaction_is_waited_for_then_answered_busy() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "held", 3).await;

    // Held briefly (a worker's write): the act waits for it.
    let holder = hold_row(&db, &ids[0]).await;
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        holder.batch_execute("ROLLBACK").await.unwrap();
    });
    let answer = idle
        .ok(
            "cancel-jobs",
            json!({ "jobIds": [ids[0], ids[1]], "reason": "r" }),
        )
        .await;
    release.await.unwrap();
    assert_eq!(changed_ids(&answer), sorted(&ids[..2]), "{answer}");

    // Held past the act's wait (a stuck transaction): that job is answered BUSY and
    // left as it was; the others are not held up by it.
    let holder = hold_row(&db, &ids[2]).await;
    let started = Instant::now();
    let answer = idle
        .ok(
            "retry-jobs",
            json!({ "jobIds": [ids[0], ids[2]], "reason": "r" }),
        )
        .await;
    assert!(started.elapsed() >= jobs_role::store::LOCK_WAIT);
    assert_eq!(changed_ids(&answer), vec![ids[0].clone()], "{answer}");
    assert_eq!(
        not_changed(&answer),
        vec![(ids[2].clone(), "BUSY".to_owned(), "-".to_owned())]
    );
    let (status, single) = idle
        .call("cancel-job", json!({ "jobId": ids[2], "reason": "r" }))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{single}");
    assert!(
        single["message"]
            .as_str()
            .unwrap()
            .contains("held by another transaction")
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(
        idle.job(&ids[2]).await["status"],
        "QUEUED",
        "nothing changed"
    );
    idle.ok("cancel-job", json!({ "jobId": ids[2], "reason": "r" }))
        .await;
    assert_eq!(idle.job(&ids[2]).await["status"], "CANCELLED");
    idle.stop().await;
}

#[tokio::test]
async fn malformed_bulk_requests_are_refused_naming_the_field_and_change_nothing() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "kept", 1).await;
    let many: Vec<String> = (0..1_001)
        .map(|_| uuid::Uuid::now_v7().to_string())
        .collect();
    let cases = [
        ("cancel-jobs", json!({ "jobIds": [ids[0]] }), "reason"),
        ("cancel-jobs", json!({ "reason": "r" }), "give jobIds"),
        (
            "cancel-jobs",
            json!({ "jobIds": [ids[0]], "filter": {}, "limit": 1, "reason": "r" }),
            "not both",
        ),
        (
            "cancel-jobs",
            json!({ "filter": {}, "reason": "r" }),
            "a filter needs a limit",
        ),
        (
            "cancel-jobs",
            json!({ "jobIds": [ids[0]], "limit": 5, "reason": "r" }),
            "jobIds take none",
        ),
        (
            "cancel-jobs",
            json!({ "filter": {}, "limit": 10_001, "reason": "r" }),
            "limit",
        ),
        (
            "cancel-jobs",
            json!({ "filter": {}, "limit": -1, "reason": "r" }),
            "limit",
        ),
        (
            "cancel-jobs",
            json!({ "jobIds": many, "reason": "r" }),
            "jobIds",
        ),
        (
            "cancel-jobs",
            json!({ "jobIds": [ids[0], "not-a-uuid"], "reason": "r" }),
            "jobIds[1]",
        ),
        (
            "cancel-jobs",
            json!({ "jobIds": ids[0], "reason": "r" }),
            "jobIds",
        ),
        (
            "cancel-jobs",
            json!({ "filter": { "status": "LIMBO" }, "limit": 1, "reason": "r" }),
            "filter.status",
        ),
        (
            "cancel-jobs",
            json!({ "filter": { "createdBefore": "yesterday" }, "limit": 1, "reason": "r" }),
            "filter.createdBefore",
        ),
        (
            "cancel-jobs",
            json!({ "filter": { "color": "red" }, "limit": 1, "reason": "r" }),
            "color",
        ),
        (
            "cancel-jobs",
            json!({ "filter": {}, "limit": 1, "reason": "x".repeat(501) }),
            "reason",
        ),
        (
            "retry-jobs",
            json!({ "filter": { "status": "QUEUED" }, "limit": 1 }),
            "filter.status: retry-jobs takes DEAD, FAILED, CANCELLED jobs",
        ),
        (
            "retry-jobs",
            json!({ "filter": {}, "limit": 1, "fromStep": "embed" }),
            "fromStep",
        ),
        (
            "retry-jobs",
            json!({ "filter": {}, "limit": 1, "maxAttempts": 101 }),
            "maxAttempts",
        ),
        ("retry-jobs", json!([]), "JSON object"),
    ];
    for (verb, body, names) in cases {
        let (status, answer) = idle.call(verb, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{verb} {body}: {answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(
            message.contains(names),
            "{verb} {body}: '{message}' should name {names}"
        );
    }
    assert_eq!(
        idle.job(&ids[0]).await["status"],
        "QUEUED",
        "nothing was written"
    );
    assert_eq!(
        idle.store
            .job_events(uuid::Uuid::parse_str(&ids[0]).unwrap())
            .await
            .unwrap()
            .len(),
        1
    );
    idle.stop().await;
}

#[tokio::test]
async fn list_jobs_filters_by_priority_and_shows_it() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let workflow = two_step_workflow(&server.target());
    let mut by_priority = Vec::new();
    for priority in [0, 5, 9] {
        let answer = idle
            .ok(
                "submit-workflow",
                json!({ "workflow": workflow, "input": { "text": "p" }, "priority": priority }),
            )
            .await;
        by_priority.push(answer["jobId"].as_str().unwrap().to_owned());
    }
    for (i, priority) in [0, 5, 9].into_iter().enumerate() {
        let listed = idle.ok("list-jobs", json!({ "priority": priority })).await;
        let jobs = listed["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 1, "priority {priority}: {listed}");
        assert_eq!(jobs[0]["jobId"], by_priority[i]);
        assert_eq!(jobs[0]["priority"], priority);
        assert_eq!(jobs[0]["cancelRequested"], false);
    }
    assert_eq!(
        idle.ok("list-jobs", json!({})).await["jobs"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let (status, answer) = idle.call("list-jobs", json!({ "priority": 10 })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("priority"));
    idle.stop().await;
}

/// Now, as PostgreSQL tells it, in RFC 3339.
async fn database_now(db: &TestDatabase) -> String {
    db.connect()
        .await
        .query_one(
            "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_job_that_left_the_filters_statuses_before_its_turn_is_left_as_it_is() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "claimed", 2).await;

    // A claim in flight: the row is locked and RUNNING once the claim commits.
    let claim = db.connect().await;
    claim
        .batch_execute(&format!(
            "BEGIN; UPDATE workflow_run
                       SET status = 'RUNNING', lease_owner = 'elsewhere',
                           lease_until = now() + interval '1 minute', claims = claims + 1, attempt = attempt + 1
                     WHERE job_id = '{}'",
            ids[0]
        ))
        .await
        .unwrap();
    let commit = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        claim.batch_execute("COMMIT").await.unwrap();
    });
    let answer = idle
        .ok(
            "cancel-jobs",
            json!({ "filter": { "status": "QUEUED" }, "limit": 10, "reason": "only the queued ones" }),
        )
        .await;
    commit.await.unwrap();
    assert_eq!(changed_ids(&answer), vec![ids[1].clone()], "{answer}");
    assert_eq!(
        not_changed(&answer),
        vec![(
            ids[0].clone(),
            "NO_LONGER_MATCHES".to_owned(),
            "RUNNING".to_owned()
        )]
    );
    let job = idle.job(&ids[0]).await;
    assert_eq!(job["status"], "RUNNING");
    assert_eq!(
        job["cancel_requested"], false,
        "a QUEUED-only cancel never stops a running job"
    );
    idle.stop().await;
}

#[tokio::test]
async fn retry_jobs_with_finished_before_works_through_a_backlog_once() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "backlog", 2).await;
    finish(&db, &ids[0], "FAILED", 1).await;
    finish(&db, &ids[1], "FAILED", 1).await;
    let first_call = database_now(&db).await;

    let filter = json!({ "status": "FAILED", "finishedBefore": first_call });
    let first = idle
        .ok("retry-jobs", json!({ "filter": filter, "limit": 1 }))
        .await;
    assert_eq!(changed_ids(&first), vec![ids[0].clone()], "{first}");
    assert_eq!(first["more"], true);
    // The retried job fails again before the next call.
    finish(&db, &ids[0], "FAILED", 2).await;
    let second = idle
        .ok("retry-jobs", json!({ "filter": filter, "limit": 1 }))
        .await;
    assert_eq!(
        changed_ids(&second),
        vec![ids[1].clone()],
        "the next one, not the same again: {second}"
    );
    assert_eq!(second["more"], false);
    let third = idle
        .ok("retry-jobs", json!({ "filter": filter, "limit": 1 }))
        .await;
    assert_eq!(third["changed"], 0, "{third}");
    idle.stop().await;
}

#[tokio::test]
async fn a_row_written_again_and_again_is_still_caught_in_its_turn() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "hot", 1).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, client, id) = (stop.clone(), db.connect().await, ids[0].clone());
        tokio::spawn(async move {
            // Short transactions holding the row most of the time, back to back.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                client
                    .batch_execute(&format!(
                        "BEGIN; UPDATE workflow_run SET updated_at = now() WHERE job_id = '{id}';
                         SELECT pg_sleep(0.04); COMMIT"
                    ))
                    .await
                    .unwrap();
            }
        })
    };
    let answer = idle
        .ok("cancel-job", json!({ "jobId": ids[0], "reason": "hot" }))
        .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();
    assert_eq!(answer["outcome"], "CANCELLED", "{answer}");
    assert_eq!(idle.job(&ids[0]).await["status"], "CANCELLED");
    idle.stop().await;
}

#[tokio::test]
async fn one_call_waits_for_held_rows_once_however_many_chunks_and_rows_are_held() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    queue_jobs(&idle.store, &two_step_workflow(&server.target()), 1_500).await;
    let ids: Vec<String> = db
        .connect()
        .await
        .query("SELECT job_id::text FROM workflow_run ORDER BY job_id", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    // Every row but two held by one long transaction, in both chunks of the call.
    let free = [ids[700].clone(), ids[1_200].clone()];
    let holder = db.connect().await;
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM workflow_run WHERE job_id NOT IN ('{}', '{}') FOR UPDATE",
            free[0], free[1]
        ))
        .await
        .unwrap();

    let started = Instant::now();
    let answer = idle
        .ok(
            "cancel-jobs",
            json!({ "filter": {}, "limit": 10_000, "reason": "r" }),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(changed_ids(&answer), sorted(&free), "{}", answer["changed"]);
    let busy = not_changed(&answer);
    assert_eq!(busy.len(), 1_498);
    assert!(busy.iter().all(|(_, outcome, _)| outcome == "BUSY"));
    // One wait for the whole call, however many rows and chunks are held: the wait,
    // then one last look at the rest.
    assert!(
        took < jobs_role::store::LOCK_WAIT + Duration::from_secs(2),
        "one wait per call, not one per chunk or per row: {took:?}"
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    idle.stop().await;
}

#[tokio::test]
async fn a_retried_job_that_finished_again_after_finished_before_is_not_retried_twice() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "again", 1).await;
    finish(&db, &ids[0], "FAILED", 1).await;
    let first_call = database_now(&db).await;
    // Between the selection and the lock, the job fails again (it was retried by
    // another call, ran and failed): it finished after finishedBefore.
    let other = db.connect().await;
    other
        .batch_execute(&format!(
            "BEGIN; UPDATE workflow_run SET finished_at = now() + interval '1 second' WHERE job_id = '{}'",
            ids[0]
        ))
        .await
        .unwrap();
    let commit = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        other.batch_execute("COMMIT").await.unwrap();
    });
    let answer = idle
        .ok(
            "retry-jobs",
            json!({ "filter": { "status": "FAILED", "finishedBefore": first_call }, "limit": 10 }),
        )
        .await;
    commit.await.unwrap();
    assert_eq!(answer["changed"], 0, "{answer}");
    assert_eq!(
        not_changed(&answer),
        vec![(
            ids[0].clone(),
            "NO_LONGER_MATCHES".to_owned(),
            "FAILED".to_owned()
        )]
    );
    assert_eq!(idle.job(&ids[0]).await["status"], "FAILED");
    idle.stop().await;
}

#[tokio::test]
async fn waiting_acts_never_starve_the_pool_even_when_their_callers_hang_up() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    // A pool of 6: at most one connection waits in a lock queue for the acts.
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "held", 6).await;
    let holder = db.connect().await;
    holder
        .batch_execute("BEGIN; SELECT 1 FROM workflow_run FOR UPDATE")
        .await
        .unwrap();
    // Six cancels wait on held rows; three of their callers hang up.
    let acts_started = Instant::now();
    let mut calls = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let router = idle.router.clone();
        let body = json!({ "jobId": id, "reason": "r" });
        calls.push(tokio::spawn(async move {
            let call = protomolt_e2e::jobs::call(&router, "cancel-job", body);
            if i % 2 == 0 {
                tokio::time::timeout(Duration::from_millis(300), call)
                    .await
                    .ok()
            } else {
                Some(call.await)
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Meanwhile the node's other work still gets connections at once.
    for _ in 0..12 {
        let started = Instant::now();
        idle.ok("list-jobs", json!({ "limit": 1 })).await;
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "a verb waited {:?} for a connection",
            started.elapsed()
        );
    }
    for call in calls {
        if let Some((status, answer)) = call.await.unwrap() {
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
            assert!(
                answer["message"]
                    .as_str()
                    .unwrap()
                    .contains("held by another transaction")
            );
        }
    }
    // A hung-up caller's act runs to its own end (its wait bounded by LOCK_WAIT from
    // its start, then one last look skipping held rows), which no caller observes:
    // the holder lets go only once every act's time is over and none waits for a
    // lock, so "nothing changed" does not depend on which act finished first.
    let acts_over = acts_started + jobs_role::store::LOCK_WAIT + Duration::from_secs(2);
    eventually(
        "every act's time to be over, none waiting for a lock",
        WAIT,
        || async {
            let waiting: i64 = holder
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            Instant::now() > acts_over && waiting == 0
        },
    )
    .await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    for id in &ids {
        assert_eq!(idle.job(id).await["status"], "QUEUED", "nothing changed");
    }
    idle.stop().await;
}

#[tokio::test]
async fn a_database_statement_timeout_shorter_than_the_wait_reads_as_busy_not_as_an_outage() {
    let db = TestDatabase::create().await;
    db.connect()
        .await
        .batch_execute(&format!(
            "ALTER DATABASE {} SET statement_timeout = '1s'",
            db.name()
        ))
        .await
        .unwrap();
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "held", 1).await;
    let holder = hold_row(&db, &ids[0]).await;
    let (status, answer) = idle
        .call("cancel-job", json!({ "jobId": ids[0], "reason": "r" }))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("held by another transaction"),
        "{answer}"
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    idle.stop().await;
}
