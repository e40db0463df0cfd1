//! The node against a database connection that breaks at the worst moments, through
//! the test kit's fault proxy: a `COMMIT` forwarded and its answer never returned
//! (the transaction landed, the node cannot know), and the database gone for a few
//! seconds while jobs run. Every write after a claim must land exactly once, and an
//! outage shorter than the lease must cost no job its attempt.

use std::collections::HashMap;
use std::time::Duration;

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, call, eventually, http_get_text, test_config};
use protomolt_e2e::proxy::{FaultProxy, Trigger};
use serde_json::{Value, json};
use tokio_postgres::Client;
use uuid::Uuid;
use workflow::testkit::{FixtureOptions, FixtureServer, three_step_workflow, two_step_workflow};

const WAIT: Duration = Duration::from_secs(240);

/// One job as the database holds it: status, attempt, checkpoint names, event types.
#[derive(Debug, Clone, PartialEq, Eq)]
struct JobStory {
    status: String,
    attempt: i32,
    steps: Vec<String>,
    events: Vec<String>,
}

/// Every job's story, read straight from the database (not through the proxy).
async fn stories(db: &Client) -> HashMap<Uuid, JobStory> {
    let rows = db
        .query(
            "SELECT w.job_id, w.status, w.attempt,
                    COALESCE((SELECT array_agg(c.entry->>'name' ORDER BY c.at)
                                FROM jsonb_array_elements(w.checkpoints) WITH ORDINALITY AS c(entry, at)),
                             '{}') AS steps,
                    COALESCE((SELECT array_agg(o.event_type ORDER BY o.seq)
                                FROM workflow_run_events_outbox o WHERE o.job_id = w.job_id),
                             '{}') AS events
               FROM workflow_run w",
            &[],
        )
        .await
        .expect("reading the jobs");
    rows.iter()
        .map(|row| {
            (
                row.get("job_id"),
                JobStory {
                    status: row.get("status"),
                    attempt: row.get("attempt"),
                    steps: row.get("steps"),
                    events: row.get("events"),
                },
            )
        })
        .collect()
}

/// Waits until `jobs` jobs are finished (COMPLETED, FAILED or DEAD).
async fn all_finished(db: &Client, jobs: usize) {
    eventually("every job to finish", WAIT, || async {
        let finished: i64 = db
            .query_one(
                "SELECT count(*) FROM workflow_run WHERE status IN ('COMPLETED', 'FAILED', 'DEAD')",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        finished == jobs as i64
    })
    .await;
}

async fn count_in(db: &Client, status: &str) -> i64 {
    db.query_one(
        "SELECT count(*) FROM workflow_run WHERE status = $1",
        &[&status],
    )
    .await
    .expect("counting")
    .get(0)
}

/// Calls a verb until it answers 200 (a call whose transaction's answer the proxy cut
/// answers 503; the verbs are idempotent, so calling again is what a client does).
async fn call_until_answered(node: &JobsNode, verb: &str, body: Value) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, answer) = call(&node.router, verb, body.clone()).await;
        if status == 200 {
            return answer;
        }
        assert!(
            status.is_server_error() && std::time::Instant::now() < deadline,
            "{verb} answered {status}: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Submits `count` jobs of `workflow` with their own ids, some at a time.
async fn submit_all(node: &JobsNode, workflow: &Value, count: usize, extra: Value) -> Vec<Uuid> {
    let ids: Vec<Uuid> = (0..count).map(|_| Uuid::new_v4()).collect();
    for chunk in ids.chunks(50) {
        let calls: Vec<_> = chunk
            .iter()
            .map(|id| {
                let mut body =
                    json!({ "jobId": id.to_string(), "workflow": workflow, "input": { "text": format!("job {id}") } });
                if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
                    body.extend(extra.clone());
                }
                call_until_answered(node, "submit-workflow", body)
            })
            .collect();
        for answer in futures_util::future::join_all(calls).await {
            assert_eq!(answer["ok"], true, "{answer}");
        }
    }
    ids
}

/// A node whose every connection to the database runs through `proxy`.
async fn node_behind(
    proxy: &FaultProxy,
    db: &TestDatabase,
    worker: &str,
    lease_ms: u64,
) -> JobsNode {
    let mut config = test_config(&proxy.database_url(&db.url), worker, 32);
    config.lease_ms = lease_ms;
    config.max_connections = 8;
    JobsNode::start(config).await
}

/// 1,000 jobs with a human step, every fifth COMMIT's answer lost: each job ends
/// COMPLETED with exactly one checkpoint per step and one event per transition, and
/// every answered review leads to COMPLETED. Before every write after a claim was
/// conditional, a lost answer had the batch re-sent write by write: checkpoints
/// appended twice, and jobs answered by a reviewer then FAILED as drifted.
#[tokio::test]
async fn commits_whose_answers_are_lost_land_every_write_exactly_once() {
    const JOBS: usize = 1_000;
    let db = TestDatabase::create().await;
    let direct = db.connect().await;
    let server = FixtureServer::start().await;
    let proxy = FaultProxy::postgres_for(&db.url).await;
    let node = node_behind(&proxy, &db, "cut-commits", 30_000).await;
    proxy.cut_after(Trigger::Commit, 5, None);

    let workflow = three_step_workflow(&server.target());
    let ids = submit_all(&node, &workflow, JOBS, json!({})).await;
    eventually("every job to park on its review", WAIT, || async {
        count_in(&direct, "WAITING").await == JOBS as i64
    })
    .await;
    for chunk in ids.chunks(50) {
        let answers: Vec<_> = chunk
            .iter()
            .map(|id| {
                let body = json!({ "jobId": id.to_string(), "stepName": "review", "response": { "notes": "ok" } });
                call_until_answered(&node, "complete-step", body)
            })
            .collect();
        for answer in futures_util::future::join_all(answers).await {
            // A first call whose COMMIT landed unheard is answered ALREADY_DONE again.
            assert!(
                answer["outcome"] == "COMPLETED" || answer["outcome"] == "ALREADY_DONE",
                "{answer}"
            );
        }
    }
    all_finished(&direct, JOBS).await;
    let cuts = proxy.stats().cut_after_trigger;
    proxy.pass();

    let stories = stories(&direct).await;
    assert_eq!(stories.len(), JOBS);
    let expected_steps = ["tokenize", "review", "embed"];
    let expected_events = [
        "ACCEPTED",
        "STEP_CHECKPOINT",
        "WAITING",
        "STEP_CHECKPOINT",
        "STEP_CHECKPOINT",
        "COMPLETED",
    ];
    let broken: Vec<_> = stories
        .iter()
        .filter(|(_, story)| {
            story.status != "COMPLETED"
                || story.steps != expected_steps
                || story.events != expected_events
        })
        .take(5)
        .collect();
    assert!(
        broken.is_empty(),
        "jobs whose story is not one checkpoint per step and one event per transition ({cuts} connections cut after a COMMIT): {broken:#?}"
    );
    assert!(
        cuts >= (JOBS / 10) as u64,
        "the proxy cut only {cuts} connections after a COMMIT"
    );
    node.stop().await;
}

/// A run of `jobs` jobs with a single attempt each (steps of `step_ms`) on a node
/// whose database connections go through a fault proxy.
struct SingleAttemptRun {
    direct: Client,
    proxy: FaultProxy,
    node: JobsNode,
    jobs: usize,
    // Held for the run: the database and the targets live as long as it.
    _db: TestDatabase,
    _server: FixtureServer,
}

async fn single_attempt_jobs_behind_a_proxy(
    jobs: usize,
    step_ms: u64,
    worker: &str,
    lease_ms: u64,
) -> SingleAttemptRun {
    let db = TestDatabase::create().await;
    let direct = db.connect().await;
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_millis(step_ms)),
        embed_delay: Some(Duration::from_millis(step_ms)),
        ..FixtureOptions::default()
    })
    .await;
    let proxy = FaultProxy::postgres_for(&db.url).await;
    let node = node_behind(&proxy, &db, worker, lease_ms).await;
    let workflow = two_step_workflow(&server.target());
    submit_all(&node, &workflow, jobs, json!({ "maxAttempts": 1 })).await;
    SingleAttemptRun {
        direct,
        proxy,
        node,
        jobs,
        _db: db,
        _server: server,
    }
}

impl SingleAttemptRun {
    /// Waits for every job to finish and asserts each COMPLETED (on its only attempt:
    /// one charged for `fault` would have left it DEAD).
    async fn every_job_completed(&self, fault: &str) {
        all_finished(&self.direct, self.jobs).await;
        let stories = stories(&self.direct).await;
        let charged: Vec<_> = stories
            .iter()
            .filter(|(_, story)| story.status != "COMPLETED")
            .collect();
        assert!(
            charged.is_empty(),
            "{} jobs did not complete (charged an attempt for {fault}): {:#?}",
            charged.len(),
            &charged[..charged.len().min(5)]
        );
    }
}

/// The database gone for 3 s while 1,000 jobs with a single attempt each run (a
/// lease of 6 s): every job completes and none is DEAD. Before, a settlement that
/// failed in the outage was left to the sweeper, which charged the attempt.
#[tokio::test]
async fn a_three_second_database_outage_kills_no_job_on_its_last_attempt() {
    let run = single_attempt_jobs_behind_a_proxy(1_000, 20, "outage", 6_000).await;
    // Mid-run: some jobs finished, many still queued or running.
    eventually("a tenth of the jobs to complete", WAIT, || async {
        count_in(&run.direct, "COMPLETED").await >= (run.jobs / 10) as i64
    })
    .await;
    run.proxy.outage(Duration::from_secs(3)).await;
    assert!(
        run.proxy.stats().refused > 0,
        "the node tried to reach the database during the outage"
    );
    run.every_job_completed("a 3 s outage").await;
    run.node.stop().await;
}

/// The database gone for 6 s, three times the lease, while 200 jobs with a single
/// attempt each are mid-step: the leases run out while no one can renew them, and
/// the sweeper, which saw the database refuse it, gives their attempts back. Every
/// job completes on its first attempt; before, each swept lease was charged and those
/// jobs were DEAD.
#[tokio::test]
async fn a_database_outage_longer_than_the_lease_costs_running_jobs_no_attempt() {
    let run = single_attempt_jobs_behind_a_proxy(200, 300, "long-outage", 2_000).await;
    eventually("jobs to be running and some completed", WAIT, || async {
        count_in(&run.direct, "RUNNING").await > 0 && count_in(&run.direct, "COMPLETED").await > 0
    })
    .await;
    run.proxy.outage(Duration::from_secs(6)).await;
    run.every_job_completed("an outage three leases long").await;
    let (_, metrics) = http_get_text(&run.node.router, "/metrics").await;
    let given_back = metrics
        .lines()
        .find_map(|l| l.strip_prefix("protomolt_jobs_sweeps_total{outcome=\"given_back\"} "))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or(0);
    assert!(
        given_back > 0,
        "no lease ran out in the outage, so nothing was proven (the sweeper gave back none)"
    );
    run.node.stop().await;
}

/// A batch of writes that finds no connection (the database gone from the network:
/// each new connection waits out its timeout) fails once, as a whole, and fast:
/// never write by write, which waited for a connection once per write (20 writes,
/// 200 s).
#[tokio::test]
async fn a_batch_with_no_connection_fails_whole_and_fast() {
    let db = TestDatabase::create().await;
    let direct = jobs_role::Store::connect(&db.url, 4).await.unwrap();
    protomolt_e2e::jobs::queue_jobs(&direct, &two_step_workflow("127.0.0.1:1"), 20).await;
    let claimed = direct
        .claim_jobs("w", Duration::from_secs(300), 20)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 20);
    let proxy = FaultProxy::postgres_for(&db.url).await;
    let behind = jobs_role::Store::connect(&proxy.database_url(&db.url), 4)
        .await
        .unwrap();
    proxy.black_hole();
    let writes: Vec<jobs_role::store::ClaimWrite> = claimed
        .iter()
        .map(|job| {
            jobs_role::store::ClaimWrite::checkpoint(
                &job.claim,
                jobs_role::store::StepCheckpoint {
                    step: "tokenize".into(),
                    position: 0,
                    entry: json!({ "name": "tokenize", "skipped": false, "response": {} }),
                },
            )
        })
        .collect();
    // First the pooled connection, cut: then a new one, which waits out its timeout.
    for round in ["a connection lost", "no connection to be had"] {
        let started = std::time::Instant::now();
        let answers = behind.commit_claim_writes(&writes).await;
        let took = started.elapsed();
        assert!(answers.iter().all(Result::is_err), "{round}: {answers:?}");
        assert!(
            took < jobs_role::store::POOL_WAIT * 3,
            "{round}: the batch took {took:?}: failed write by write"
        );
    }
    proxy.accept();
    // Nothing landed.
    let stories = stories(&db.connect().await).await;
    assert!(stories.values().all(|story| story.steps.is_empty()));
}

/// However many callers read (verbs, watchers, the relay, the pruner), they hold at
/// most the pool less the connections reserved for the worker's own writes, and a
/// running job's lease renewal and checkpoint get a connection in the middle of the
/// storm. Before, 1,500 waiting `get-job` calls held every connection and the
/// workers' writes answered 503.
#[tokio::test]
async fn readers_never_hold_the_connections_reserved_for_the_worker() {
    let db = TestDatabase::create().await;
    let store = jobs_role::Store::connect(&db.url, 8).await.unwrap();
    let shared = 8 - jobs_role::store::reserved_for_the_worker(8);
    assert_eq!(shared, 6);
    protomolt_e2e::jobs::queue_jobs(&store, &two_step_workflow("127.0.0.1:1"), 3).await;
    let claimed = store
        .claim_next_job("w", Duration::from_secs(300))
        .await
        .unwrap()
        .unwrap();
    let job_id = claimed.claim.job_id;

    let stop = tokio_util::sync::CancellationToken::new();
    let readers: Vec<_> = (0..100)
        .map(|_| {
            let (store, stop) = (store.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.is_cancelled() {
                    let _ = store.get_job(job_id).await;
                }
            })
        })
        .collect();
    let mut peak = 0;
    let mut writes = Vec::new();
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        let pool = store.pool_status();
        peak = peak.max(pool.size - pool.available);
        if writes.len() < 5 && started.elapsed() > Duration::from_millis(500) * writes.len() as u32
        {
            let began = std::time::Instant::now();
            store
                .renew_lease(&claimed.claim, Duration::from_secs(300))
                .await
                .expect("a renewal during the storm");
            writes.push(began.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
    for reader in readers {
        reader.await.unwrap();
    }
    assert!(
        peak >= 4,
        "the storm never filled the readers' share (peak {peak})"
    );
    assert!(
        writes.iter().all(|took| *took < Duration::from_secs(2)),
        "renewals waited behind the readers: {writes:?}"
    );
    // Readers alone: at most their share (the renewals above took one of the others).
    let readers_alone = {
        let stop = tokio_util::sync::CancellationToken::new();
        let readers: Vec<_> = (0..100)
            .map(|_| {
                let (store, stop) = (store.clone(), stop.clone());
                tokio::spawn(async move {
                    while !stop.is_cancelled() {
                        let _ = store.get_job(job_id).await;
                    }
                })
            })
            .collect();
        let mut peak = 0;
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(2) {
            let pool = store.pool_status();
            peak = peak.max(pool.size - pool.available);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        stop.cancel();
        for reader in readers {
            reader.await.unwrap();
        }
        peak
    };
    assert!(
        readers_alone <= shared,
        "readers held {readers_alone} connections, more than their {shared}"
    );
}

/// The database connection goes silent for 20 s (the peer gone without a word: no
/// error, no close, TCP still acknowledging): a batch waits at most
/// `COMMIT_DEADLINE` (15 s) for its answer, then is read back; a renewal waits at most
/// a third of the lease; the silent connections are closed, never handed to the next
/// caller. When the database answers again every job completes, each step
/// checkpointed once, none DEAD on its single attempt. Before, a silent connection
/// held the flusher's every write until the kernel gave up (about 15 minutes).
#[tokio::test]
async fn a_connection_gone_silent_holds_no_write_past_its_deadline() {
    const JOBS: usize = 60;
    let db = TestDatabase::create().await;
    let direct = db.connect().await;
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_millis(300)),
        embed_delay: Some(Duration::from_millis(300)),
        ..FixtureOptions::default()
    })
    .await;
    let proxy = FaultProxy::postgres_for(&db.url).await;
    let node = node_behind(&proxy, &db, "silent", 60_000).await;
    submit_all(
        &node,
        &two_step_workflow(&server.target()),
        JOBS,
        json!({ "maxAttempts": 1 }),
    )
    .await;
    eventually("some jobs to complete", WAIT, || async {
        count_in(&direct, "COMPLETED").await >= 5
    })
    .await;
    proxy.stall();
    tokio::time::sleep(Duration::from_secs(20)).await;
    proxy.pass();
    all_finished(&direct, JOBS).await;
    let stories = stories(&direct).await;
    let broken: Vec<_> = stories
        .iter()
        .filter(|(_, story)| story.status != "COMPLETED" || story.steps != ["tokenize", "embed"])
        .take(5)
        .collect();
    assert!(broken.is_empty(), "{broken:#?}");
    node.stop().await;
}
