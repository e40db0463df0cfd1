//! PROBE (temporary, reviewer's): defects of cancel-jobs / retry-jobs.

use std::time::{Duration, Instant};

use http::StatusCode;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, two_step_workflow};

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
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    ids
}

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

fn changed(answer: &Value) -> Vec<String> {
    answer["changedJobIds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// A `filter.status: QUEUED` cancel acts on a job that a claim turned RUNNING between
/// the selection and the act's row lock: the worker is asked to stop a running job the
/// operator's filter excluded.
#[tokio::test]
async fn probe_filter_status_queued_cancels_a_job_that_started_running() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "q", 2).await;

    // A claim in flight on ids[0]: its row is locked, the claim commits RUNNING.
    let claim = db.connect().await;
    claim
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM workflow_run WHERE job_id = '{}' FOR UPDATE",
            ids[0]
        ))
        .await
        .unwrap();
    let id0 = ids[0].clone();
    let committer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        claim
            .batch_execute(&format!(
                "UPDATE workflow_run SET status = 'RUNNING', lease_owner = 'w', \
                 lease_until = now() + interval '1 hour', claims = claims + 1, attempt = attempt + 1 \
                 WHERE job_id = '{id0}'; COMMIT"
            ))
            .await
            .unwrap();
    });
    let answer = idle
        .ok(
            "cancel-jobs",
            json!({ "filter": { "status": "QUEUED" }, "limit": 10, "reason": "only the queued ones" }),
        )
        .await;
    committer.await.unwrap();
    let row = idle.job(&ids[0]).await;
    eprintln!(
        "answer: {answer}\nrow status={} cancel_requested={}",
        row["status"], row["cancel_requested"]
    );
    assert!(
        !(row["status"] == "RUNNING" && row["cancel_requested"] == true),
        "a RUNNING job was asked to stop by a cancel filtered on QUEUED: {answer}"
    );
    idle.stop().await;
}

/// "send the same call again for the next ones": for retry-jobs the next call takes
/// the same oldest jobs again once they failed again, never reaching the next ones.
#[tokio::test]
async fn probe_retry_jobs_call_again_retries_the_same_job_not_the_next() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "r", 2).await;
    finish(&db, &ids[0], "FAILED", 1).await;
    finish(&db, &ids[1], "FAILED", 1).await;

    let first_call = database_now(&db).await;
    let filter = json!({ "finishedBefore": first_call });
    let first = idle
        .ok("retry-jobs", json!({ "filter": filter, "limit": 1 }))
        .await;
    assert_eq!(changed(&first), vec![ids[0].clone()]);
    assert_eq!(first["more"], true);
    // A worker runs ids[0] and it fails again (the target is still broken).
    finish(&db, &ids[0], "FAILED", 2).await;
    let second = idle
        .ok("retry-jobs", json!({ "filter": filter, "limit": 1 }))
        .await;
    eprintln!("second: {second}");
    assert_eq!(
        changed(&second),
        vec![ids[1].clone()],
        "the next job, as README says"
    );
    idle.stop().await;
}

/// A row re-locked continuously (a hot job whose writes are in every batch, or any
/// client looping short transactions) is never caught unlocked by the polling: the
/// single-job cancel that used to wait a few ms on the lock now answers 503.
#[tokio::test]
async fn probe_hot_row_starves_cancel_job() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "hot", 1).await;
    let hot = db.connect().await;
    let id = ids[0].clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = stop.clone();
    let looping = tokio::spawn(async move {
        let mut n = 0u32;
        while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
            hot.batch_execute(&format!(
                "BEGIN; UPDATE workflow_run SET updated_at = now() WHERE job_id = '{id}'; \
                 SELECT pg_sleep(0.04); COMMIT"
            ))
            .await
            .unwrap();
            n += 1;
        }
        n
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let (status, answer) = idle
        .call(
            "cancel-job",
            json!({ "jobId": ids[0], "reason": "stop it" }),
        )
        .await;
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let n = looping.await.unwrap();
    eprintln!("cancel-job answered {status} after {took:?} ({n} holder txs): {answer}");
    assert_eq!(
        status,
        StatusCode::OK,
        "each holder tx lasts 40 ms; a lock wait would have won: {answer}"
    );
    idle.stop().await;
}

/// Request edge cases: what each answers and changes.
#[tokio::test]
async fn probe_request_edges() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "edge", 3).await;
    let cases = [
        json!({ "filter": null, "limit": 5, "reason": "r" }),
        json!({ "jobIds": ["", ""], "reason": "r" }),
        json!({ "jobIds": [""], "filter": {}, "limit": 1, "reason": "r" }),
        json!({ "jobIds": [], "filter": null, "reason": "r" }),
        json!({ "filter": { "created_before": "2000-01-01T00:00:00Z" }, "limit": 5, "reason": "r" }),
        json!({ "filter": { "createdBefore": "2000-01-01T05:30:00.5+05:30" }, "limit": 5, "reason": "r" }),
        json!({ "filter": { "createdBefore": "0001-01-01T00:00:00Z" }, "limit": 5, "reason": "r" }),
        json!({ "filter": { "createdBefore": "0001-01-01T00:00:00+01:00" }, "limit": 5, "reason": "r" }),
        json!({ "filter": { "createdAfter": "9999-12-31T23:59:59.999999999Z" }, "limit": 5, "reason": "r" }),
        json!({ "filter": { "createdAfter": "9999-12-31T23:59:59.999999999-23:59" }, "limit": 5, "reason": "r" }),
        json!({ "filter": { "workflow_name": "nope" }, "limit": "5", "reason": "r" }),
        json!({ "filter": { "status": "" , "workflowName": "nope"}, "limit": 5, "reason": "r" }),
        json!({ "job_ids": [ids[0].to_uppercase()], "reason": "by proto name, upper case" }),
        json!({ "jobIds": [format!("{{{}}}", ids[1])], "reason": "braced" }),
        json!({ "jobIds": [ids[1].replace('-', "")], "reason": "simple" }),
    ];
    for body in cases {
        let (status, answer) = idle.call("cancel-jobs", body.clone()).await;
        eprintln!("{body}\n  -> {status} {answer}\n");
    }
    for id in &ids {
        eprintln!("{id}: {}", idle.job(id).await["status"]);
    }
    let retry_cases = [
        (
            "cancel-jobs",
            json!({ "filter": { "finishedBefore": "2100-01-01T00:00:00Z" }, "limit": 5, "reason": "r" }),
        ),
        (
            "retry-jobs",
            json!({ "filter": { "finishedBefore": "0001-01-01T00:00:00+01:00" }, "limit": 5 }),
        ),
        (
            "retry-jobs",
            json!({ "filter": { "finishedBefore": "9999-12-31T23:59:59.999999999-23:59" }, "limit": 5 }),
        ),
        (
            "retry-jobs",
            json!({ "filter": { "finished_before": "2100-01-01T00:00:00Z", "status": "CANCELLED" }, "limit": 5 }),
        ),
        (
            "retry-jobs",
            json!({ "filter": { "finishedBefore": "yesterday" }, "limit": 5 }),
        ),
        (
            "retry-jobs",
            json!({ "jobIds": [ids[2]], "filter": { "finishedBefore": "2100-01-01T00:00:00Z" } }),
        ),
    ];
    for (verb, body) in retry_cases {
        let (status, answer) = idle.call(verb, body.clone()).await;
        eprintln!("{verb} {body}\n  -> {status} {answer}\n");
    }
    idle.stop().await;
}

/// The database goes away part way through a filter act of 1,500 jobs: what is told.
#[tokio::test]
async fn probe_database_gone_part_way() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    protomolt_e2e::jobs::queue_jobs(&idle.store, &two_step_workflow(&server.target()), 1_500).await;
    // Hold one row of the second chunk so the act waits there.
    let admin = protomolt_e2e::connect(&std::env::var("DATABASE_URL").unwrap()).await;
    let local = db.connect().await;
    let rows = local
        .query(
            "SELECT job_id::text FROM workflow_run ORDER BY job_id OFFSET 1200 LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let held: String = rows[0].get(0);
    let holder = db.connect().await;
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM workflow_run WHERE job_id = '{held}' FOR UPDATE"
        ))
        .await
        .unwrap();
    let holder_pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let name = db.name().to_owned();
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        admin
            .batch_execute(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"))
            .await
            .unwrap();
        admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                  WHERE datname = $1 AND pid <> pg_backend_pid() AND pid <> $2",
                &[&name, &holder_pid],
            )
            .await
            .unwrap();
        admin
    });
    let started = Instant::now();
    let (status, answer) = idle
        .call(
            "cancel-jobs",
            json!({ "filter": {}, "limit": 10_000, "reason": "r" }),
        )
        .await;
    eprintln!(
        "after {:?}: {status} changed={} notChanged={} message={}",
        started.elapsed(),
        answer["changed"],
        answer["notChanged"],
        answer["message"]
    );
    let admin = killer.await.unwrap();
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} ALLOW_CONNECTIONS true",
            db.name()
        ))
        .await
        .unwrap();
    let check = db.connect().await;
    let n: i64 = check
        .query_one(
            "SELECT count(*) FROM workflow_run WHERE status = 'CANCELLED'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    eprintln!("cancelled in the database: {n}");
    drop(holder);
    idle.stop().await;
}

/// 10,000 RUNNING jobs cancelled by filter: time taken and notifications heard.
#[tokio::test]
async fn probe_ten_thousand_running() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    protomolt_e2e::jobs::queue_jobs(&idle.store, &two_step_workflow(&server.target()), 10_000)
        .await;
    let admin = db.connect().await;
    admin
        .batch_execute(
            "UPDATE workflow_run SET status = 'RUNNING', lease_owner = 'ghost', \
             lease_until = now() + interval '1 hour', claims = 1, attempt = 1",
        )
        .await
        .unwrap();
    let (listener, mut connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        use futures_util::StreamExt;
        while let Some(Ok(message)) = stream.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                let _ = tx.send(n.payload().to_owned());
            }
        }
    });
    listener
        .batch_execute("LISTEN protomolt_jobs_cancel")
        .await
        .unwrap();
    let started = Instant::now();
    let answer = idle
        .ok(
            "cancel-jobs",
            json!({ "filter": { "status": "RUNNING" }, "limit": 10_000, "reason": "r" }),
        )
        .await;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut heard = 0;
    while rx.try_recv().is_ok() {
        heard += 1;
    }
    let body = answer.to_string();
    eprintln!(
        "changed {} in {took:?}, answer {} bytes, notifications heard {heard}",
        answer["changed"],
        body.len()
    );
    idle.stop().await;
}

/// LOCK_WAIT is per chunk: one held row in each of three chunks makes one call wait
/// three times 5 s.
#[tokio::test]
async fn probe_lock_wait_is_per_chunk() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    protomolt_e2e::jobs::queue_jobs(&idle.store, &two_step_workflow(&server.target()), 2_500).await;
    let holder = db.connect().await;
    holder
        .batch_execute(
            "BEGIN; SELECT 1 FROM workflow_run WHERE job_id IN \
             (SELECT job_id FROM (SELECT job_id, row_number() OVER (ORDER BY job_id) AS n FROM workflow_run) r \
               WHERE n IN (11, 1011, 2011)) FOR UPDATE",
        )
        .await
        .unwrap();
    let started = Instant::now();
    let answer = idle
        .ok(
            "cancel-jobs",
            json!({ "filter": {}, "limit": 10_000, "reason": "r" }),
        )
        .await;
    assert!(
        started.elapsed() < jobs_role::store::LOCK_WAIT * 2,
        "per chunk: {:?}",
        started.elapsed()
    );
    eprintln!(
        "took {:?}; changed {}; busy {}",
        started.elapsed(),
        answer["changed"],
        answer["notChanged"].as_array().unwrap().len()
    );
    idle.stop().await;
}

async fn hold_rows(db: &TestDatabase, where_: &str) -> tokio_postgres::Client {
    let holder = db.connect().await;
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM workflow_run WHERE {where_} FOR UPDATE"
        ))
        .await
        .unwrap();
    holder
}

/// A long transaction holds many rows: after the 8 s deadline each still-held row
/// costs one transaction with a 1 ms lock wait, one after the other.
#[tokio::test]
async fn probe_many_held_rows_after_the_deadline() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    protomolt_e2e::jobs::queue_jobs(&idle.store, &two_step_workflow(&server.target()), 3_000).await;
    let holder = hold_rows(
        &db,
        "job_id IN (SELECT job_id FROM workflow_run ORDER BY job_id LIMIT 2000)",
    )
    .await;
    let started = Instant::now();
    let answer = idle
        .ok(
            "cancel-jobs",
            json!({ "filter": {}, "limit": 10_000, "reason": "r" }),
        )
        .await;
    let took = started.elapsed();
    eprintln!(
        "2,000 held rows: took {took:?}; changed {}; notChanged {}",
        answer["changed"],
        answer["notChanged"].as_array().unwrap().len()
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    idle.stop().await;
    assert!(
        took < jobs_role::store::LOCK_WAIT * 2,
        "one 8 s deadline per call: {took:?}"
    );
}

/// A caller that goes away (client timeout, ^C) while the act waits for a row lock:
/// the dropped transaction's connection returns to the pool with its FOR UPDATE still
/// waiting in PostgreSQL; the next borrower queues behind it.
#[tokio::test]
async fn probe_dropped_call_leaves_a_waiting_connection_in_the_pool() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "drop", 2).await;
    let holder = hold_rows(&db, &format!("job_id = '{}'", ids[0])).await;
    let gave_up = tokio::time::timeout(
        Duration::from_millis(500),
        idle.call(
            "cancel-job",
            json!({ "jobId": ids[0], "reason": "impatient" }),
        ),
    )
    .await;
    assert!(gave_up.is_err(), "the call was still waiting");
    let check = db.connect().await;
    let waiting: Vec<(String, Option<String>, String)> = check
        .query(
            "SELECT state, wait_event_type, left(query, 60) FROM pg_stat_activity \
              WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    eprintln!("backends after the drop: {waiting:#?}");
    let mut worst = Duration::ZERO;
    for i in 0..12 {
        let started = Instant::now();
        let (status, _) = idle.call("list-jobs", json!({ "limit": 5 })).await;
        let took = started.elapsed();
        eprintln!("list-jobs {i}: {status} in {took:?}");
        worst = worst.max(took);
    }
    holder.batch_execute("ROLLBACK").await.unwrap();
    idle.stop().await;
    assert!(
        worst < Duration::from_secs(1),
        "a later call waited {worst:?} behind the dropped one"
    );
}

/// `finishedBefore` is not checked again under the lock: a job selected, retried by
/// someone else, run and failed again before this call locks it, is retried twice.
#[tokio::test]
async fn probe_finished_before_is_not_rechecked_under_the_lock() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "aba", 2).await;
    finish(&db, &ids[0], "FAILED", 1).await;
    finish(&db, &ids[1], "FAILED", 1).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let first_call = database_now(&db).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Someone else's retry of ids[0] in flight: it runs and fails again at once.
    let other = hold_rows(&db, &format!("job_id = '{}'", ids[0])).await;
    let id0 = ids[0].clone();
    let again = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        other
            .batch_execute(&format!(
                "UPDATE workflow_run SET claims = claims + 1, finished_at = now() \
                  WHERE job_id = '{id0}'; COMMIT"
            ))
            .await
            .unwrap();
    });
    let answer = idle
        .ok(
            "retry-jobs",
            json!({ "filter": { "finishedBefore": first_call }, "limit": 10 }),
        )
        .await;
    again.await.unwrap();
    eprintln!("answer: {answer}");
    idle.stop().await;
    assert!(
        !changed(&answer).contains(&ids[0]),
        "ids[0] finished after finishedBefore when the act locked it, and was retried: {answer}"
    );
}

/// Every pooled connection waiting on a held row: any other use of the pool waits.
#[tokio::test]
async fn probe_waiting_acts_take_the_whole_pool() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "pool", 8).await;
    let holder = hold_rows(&db, "true").await;
    let router = idle.router.clone();
    let mut calls = Vec::new();
    for id in ids.iter().take(6) {
        let (router, id) = (router.clone(), id.clone());
        calls.push(tokio::spawn(async move {
            protomolt_e2e::jobs::call(&router, "cancel-job", json!({ "jobId": id, "reason": "r" }))
                .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let started = Instant::now();
    let (status, answer) = idle.call("list-jobs", json!({ "limit": 5 })).await;
    let took = started.elapsed();
    eprintln!(
        "list-jobs while 6 cancel-job wait: {status} after {took:?} {}",
        answer.to_string().chars().take(200).collect::<String>()
    );
    for call in calls {
        let (status, answer) = call.await.unwrap();
        eprintln!("cancel-job: {status} {answer}");
    }
    holder.batch_execute("ROLLBACK").await.unwrap();
    idle.stop().await;
    assert!(
        took < Duration::from_secs(1),
        "list-jobs waited {took:?} for a pool connection"
    );
}

/// A row waited for that its holder deletes (the retention purge): NOT_FOUND.
#[tokio::test]
async fn probe_row_deleted_while_waited_for() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let ids = submitted(&idle, &server, "gone", 3).await;
    for id in &ids {
        finish(&db, id, "DEAD", 1).await;
    }
    let holder = hold_rows(&db, &format!("job_id IN ('{}', '{}')", ids[0], ids[1])).await;
    let (id0, id1) = (ids[0].clone(), ids[1].clone());
    let purge = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        holder
            .batch_execute(&format!(
                "DELETE FROM workflow_run WHERE job_id IN ('{id0}', '{id1}'); COMMIT"
            ))
            .await
            .unwrap();
    });
    let answer = idle
        .ok("retry-jobs", json!({ "filter": {}, "limit": 10 }))
        .await;
    purge.await.unwrap();
    eprintln!("bulk: {answer}");
    let (status, single) = idle.call("retry-job", json!({ "jobId": ids[0] })).await;
    eprintln!("retry-job after: {status} {single}");
    idle.stop().await;
}
