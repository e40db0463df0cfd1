//! What group commit adds: many claims' writes in one transaction, each still fenced
//! on its own claim, and a step's checkpoint still durable before the next step runs;
//! and the lean claim, which answers the snapshot's digest instead of the snapshot.

use std::time::Duration;

use jobs_role::JobStatus;
use jobs_role::store::{ClaimWrite, ClaimedJob, Settlement, StepCheckpoint, Store};
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, bare_worker, eventually, one_queued_job, test_config};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use workflow::testkit::{FixtureOptions, FixtureServer, two_step_workflow};

const WAIT: Duration = Duration::from_secs(30);
const LEASE: Duration = Duration::from_secs(60);

fn tokenized(claimed: &ClaimedJob) -> ClaimWrite {
    ClaimWrite::checkpoint(
        &claimed.claim,
        StepCheckpoint {
            step: "tokenize".into(),
            position: 0,
            entry: json!({ "name": "tokenize", "skipped": false, "response": { "ids": [1] } }),
        },
    )
}

async fn events_of(store: &Store, job_id: Uuid) -> Vec<String> {
    store
        .job_events(job_id)
        .await
        .unwrap()
        .into_iter()
        .map(|event| event.event_type)
        .collect()
}

async fn row_of(node: &JobsNode, claimed: &ClaimedJob) -> serde_json::Value {
    node.job(&claimed.claim.job_id.to_string()).await
}

/// Gives `job` back and has `owner` claim it again (the only job queued), so the
/// claim `job` holds is stale: the new claim, with its newer token.
async fn claim_again(store: &Store, job: &ClaimedJob, owner: &str) -> ClaimedJob {
    store
        .release_claim(&job.claim, Duration::ZERO, 10, "a test")
        .await
        .unwrap();
    let again = store.claim_next_job(owner, LEASE).await.unwrap().unwrap();
    assert_eq!(again.claim.job_id, job.claim.job_id);
    again
}

/// Three queued two-step jobs on a node that runs none, claimed in one batch.
async fn three_claims(db: &TestDatabase) -> (JobsNode, Vec<ClaimedJob>) {
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let workflow = two_step_workflow("127.0.0.1:1");
    for text in ["a", "b", "c"] {
        node.submit(&workflow, json!({ "text": text })).await;
    }
    let claimed = node.store.claim_jobs("w", LEASE, 10).await.unwrap();
    assert_eq!(claimed.len(), 3, "one statement claims the whole batch");
    (node, claimed)
}

#[tokio::test]
async fn a_lost_claim_in_a_batched_flush_drops_only_that_jobs_write() {
    let db = TestDatabase::create().await;
    let (node, claimed) = three_claims(&db).await;
    let store = &node.store;
    let [first, stolen, last] = &claimed[..] else {
        unreachable!()
    };
    // The middle job is given back and claimed by another worker: its first claim is
    // now stale.
    claim_again(store, stolen, "thief").await;

    let completed = ClaimWrite::settle(
        &last.claim,
        Some(StepCheckpoint {
            step: "embed".into(),
            position: 0,
            entry: json!({ "name": "embed", "skipped": false, "response": { "values": [1.0] } }),
        }),
        Settlement::Completed {
            result: json!({ "values": [1.0] }),
            verdict: "2 steps, output jobs.test.EmbedResponse".into(),
        },
    )
    .unwrap();
    let answers = store
        .commit_claim_writes(&[tokenized(first), tokenized(stolen), completed])
        .await;
    assert!(answers[0].is_ok(), "{:?}", answers[0]);
    assert!(
        answers[1].as_ref().is_err_and(|e| e.is_lost_claim()),
        "{:?}",
        answers[1]
    );
    assert!(answers[2].is_ok(), "{:?}", answers[2]);

    let first_row = row_of(&node, first).await;
    assert_eq!(first_row["checkpoints"].as_array().unwrap().len(), 1);
    assert_eq!(
        events_of(store, first.claim.job_id).await,
        ["ACCEPTED", "STEP_CHECKPOINT"]
    );

    let stolen_row = row_of(&node, stolen).await;
    assert_eq!(stolen_row["status"], "RUNNING");
    assert_eq!(
        stolen_row["lease_owner"], "thief",
        "the new holder keeps it"
    );
    assert_eq!(
        stolen_row["checkpoints"],
        json!([]),
        "nothing of the stale write"
    );
    assert_eq!(events_of(store, stolen.claim.job_id).await, ["ACCEPTED"]);

    // The final checkpoint and the settlement committed together, in order.
    let last_row = row_of(&node, last).await;
    assert_eq!(last_row["status"], "COMPLETED");
    assert_eq!(last_row["checkpoints"].as_array().unwrap().len(), 1);
    assert_eq!(
        events_of(store, last.claim.job_id).await,
        ["ACCEPTED", "STEP_CHECKPOINT", "COMPLETED"]
    );
}

#[tokio::test]
async fn a_refused_write_in_a_batched_flush_fails_alone() {
    let db = TestDatabase::create().await;
    let (node, claimed) = three_claims(&db).await;
    let store = &node.store;
    let unstorable = ClaimWrite::checkpoint(
        &claimed[1].claim,
        StepCheckpoint {
            step: "tokenize".into(),
            position: 0,
            entry: json!({ "name": "tokenize", "skipped": false, "response": { "text": "a\u{0}b" } }),
        },
    );
    let answers = store
        .commit_claim_writes(&[tokenized(&claimed[0]), unstorable, tokenized(&claimed[2])])
        .await;
    assert!(answers[0].is_ok(), "{:?}", answers[0]);
    assert!(
        answers[1].as_ref().is_err_and(|e| e.is_data_error()),
        "{:?}",
        answers[1]
    );
    assert!(answers[2].is_ok(), "{:?}", answers[2]);
    for (index, expected) in [(0, 1), (1, 0), (2, 1)] {
        let row = node.job(&claimed[index].claim.job_id.to_string()).await;
        assert_eq!(
            row["checkpoints"].as_array().unwrap().len(),
            expected,
            "job {index}: {row}"
        );
    }
    assert_eq!(
        events_of(store, claimed[1].claim.job_id).await,
        ["ACCEPTED"],
        "no event for the refused write"
    );
}

#[tokio::test]
async fn a_crash_between_a_steps_call_and_its_batched_flush_reruns_only_that_step() {
    let db = TestDatabase::create().await;
    let options = FixtureOptions {
        tokenize_delay: Some(Duration::from_millis(500)),
        ..Default::default()
    };
    let (server, idle, job_id) = one_queued_job(&db.url, options, "x").await;
    let store = idle.store.clone();
    let mut config = test_config(&db.url, "crashy", 4);
    config.lease_ms = 1500;
    let worker = |config: &jobs_role::JobsConfig| bare_worker(&store, config);

    // The worker claims and calls tokenize; meanwhile the test locks the row, so the
    // flush that carries tokenize's checkpoint waits on the lock.
    let crashy = tokio::spawn(worker(&config).run(CancellationToken::new()));
    idle.wait_for_status(&job_id, "RUNNING", WAIT).await;
    let mut blocker = db.connect().await;
    let lock = blocker.transaction().await.unwrap();
    lock.execute(
        "SELECT 1 FROM workflow_run WHERE job_id = $1 FOR UPDATE",
        &[&Uuid::parse_str(&job_id).unwrap()],
    )
    .await
    .unwrap();
    eventually("tokenize to be called", WAIT, || async {
        server.stats.tokenize_calls() == 1
    })
    .await;
    let watcher = db.connect().await;
    let waiting_on_the_lock = || async {
        watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND wait_event_type = 'Lock'
                    AND query LIKE '%checkpoints = checkpoints ||%'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    eventually(
        "the checkpoint's flush to wait on the lock",
        WAIT,
        || async { waiting_on_the_lock().await == 1 },
    )
    .await;

    // The node dies with the flush in flight; its transaction never commits.
    crashy.abort();
    let _ = crashy.await;
    lock.rollback().await.unwrap();
    eventually("the dead node's statement to end", WAIT, || async {
        waiting_on_the_lock().await == 0
    })
    .await;
    let job = idle.job(&job_id).await;
    assert_eq!(
        job["checkpoints"],
        json!([]),
        "the flush never committed: {job}"
    );

    // Once the lease passes, another node resumes: tokenize runs again, embed once.
    let shutdown = CancellationToken::new();
    let sweeper = tokio::spawn(jobs_role::worker::sweep_loop(
        store.clone(),
        Duration::from_millis(50),
        config.lease(),
        10,
        jobs_role::metrics::JobsMetrics::default(),
        shutdown.clone(),
    ));
    let mut survivor = config.clone();
    survivor.worker_id = "survivor".into();
    let resumed = tokio::spawn(worker(&survivor).run(shutdown.clone()));
    let job = idle.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(
        server.stats.tokenize_calls(),
        2,
        "only the unflushed step re-ran"
    );
    assert_eq!(server.stats.embed_calls(), 1);
    assert_eq!(job["checkpoints"].as_array().unwrap().len(), 2);
    assert_eq!(
        events_of(&store, Uuid::parse_str(&job_id).unwrap()).await,
        [
            "ACCEPTED",
            "STEP_CHECKPOINT",
            "STEP_CHECKPOINT",
            "COMPLETED"
        ]
    );
    shutdown.cancel();
    sweeper.await.unwrap();
    resumed.await.unwrap();
}

#[tokio::test]
async fn a_busy_node_commits_many_jobs_per_flush_and_every_job_completes_in_order() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let quiet = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    protomolt_e2e::jobs::queue_jobs(&quiet.store, &two_step_workflow(&server.target()), 200).await;
    let node = JobsNode::start(test_config(&db.url, "busy", 32)).await;
    node.wait_for_count(JobStatus::Completed, 200, WAIT).await;
    let client = db.connect().await;
    // Every job's events are in commit order: accepted, two checkpoints, completed.
    let rows = client
        .query(
            "SELECT job_id, string_agg(event_type, ',' ORDER BY seq)
               FROM workflow_run_events_outbox GROUP BY job_id",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 200);
    for row in rows {
        let order: String = row.get(1);
        assert_eq!(order, "ACCEPTED,STEP_CHECKPOINT,STEP_CHECKPOINT,COMPLETED");
    }
    assert_eq!(server.stats.tokenize_calls(), 200);
    assert_eq!(server.stats.embed_calls(), 200);
    node.stop().await;
}

#[tokio::test]
async fn the_claim_answers_the_snapshot_digest_and_rows_written_the_old_way_still_run() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let quiet = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let workflow = two_step_workflow(&server.target());
    let submitted = quiet.submit(&workflow, json!({ "text": "new" })).await;
    // A row written the old way, its snapshot in the row and no digest (an operator's
    // INSERT): migration V21's trigger files the snapshot under the digest of its
    // jsonb text, and the row keeps only that digest.
    let client = db.connect().await;
    let old: uuid::Uuid = client
        .query_one(
            "INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input)
             VALUES (gen_random_uuid(), 'embed-text', $1, '{\"text\": \"old\"}')
             RETURNING job_id",
            &[&workflow],
        )
        .await
        .unwrap()
        .get(0);
    let digest_of_the_snapshot = "encode(sha256(convert_to(s.definition::text, 'UTF8')), 'hex')";
    let digest_matches = format!(
        "SELECT w.workflow_definition IS NULL AND w.definition_digest = {digest_of_the_snapshot}
           FROM workflow_run w JOIN workflow_snapshot s ON s.digest = w.definition_digest
          WHERE w.job_id = $1::text::uuid"
    );
    let filed: bool = client
        .query_one(&digest_matches, &[&old.to_string()])
        .await
        .unwrap()
        .get(0);
    assert!(
        filed,
        "the old way's snapshot is filed under its own digest"
    );
    let stored: String = client
        .query_one(
            "SELECT definition_digest FROM workflow_run WHERE job_id = $1::text::uuid",
            &[&submitted],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        stored,
        &*jobs_role::compiled::snapshot_digest(&workflow).0,
        "the submitter stores the digest it computed"
    );

    let claimed = quiet.store.claim_jobs("w", LEASE, 10).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let old_claim = claimed.iter().find(|job| job.claim.job_id == old).unwrap();
    let filed_digest: String = client
        .query_one(
            "SELECT definition_digest FROM workflow_run WHERE job_id = $1",
            &[&old],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        old_claim.definition_digest, filed_digest,
        "the claim answers the digest the row names"
    );
    for job in &claimed {
        quiet
            .store
            .release_claim(&job.claim, Duration::ZERO, 10, "a test")
            .await
            .unwrap();
    }
    let node = JobsNode::start(test_config(&db.url, "busy", 4)).await;
    node.wait_for_count(JobStatus::Completed, 2, WAIT).await;

    // A snapshot changed for one job (an operator's repair writes the row's definition)
    // is filed as a snapshot of its own, so a node that compiled the old one never
    // runs it for this job, and the jobs sharing the old one keep it.
    let repaired = quiet.submit(&workflow, json!({ "text": "repaired" })).await;
    client
        .execute(
            "UPDATE workflow_run w SET workflow_definition = jsonb_set(s.definition, '{name}', '\"renamed\"')
               FROM workflow_snapshot s
              WHERE s.digest = w.definition_digest AND w.job_id = $1::text::uuid",
            &[&repaired],
        )
        .await
        .unwrap();
    let fresh: bool = client
        .query_one(&digest_matches, &[&repaired])
        .await
        .unwrap()
        .get(0);
    assert!(fresh, "the digest follows the snapshot");
    let (renamed, kept): (String, String) = {
        let row = client
            .query_one(
                "SELECT (SELECT s.definition->>'name' FROM workflow_run w
                           JOIN workflow_snapshot s ON s.digest = w.definition_digest
                          WHERE w.job_id = $1::text::uuid),
                        (SELECT s.definition->>'name' FROM workflow_run w
                           JOIN workflow_snapshot s ON s.digest = w.definition_digest
                          WHERE w.job_id = $2::text::uuid)",
                &[&repaired, &submitted],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(renamed, "renamed");
    assert_eq!(
        kept,
        workflow["name"].as_str().unwrap(),
        "the shared snapshot is untouched"
    );

    // A row copied with its digest and an edited snapshot (an operator's INSERT ...
    // SELECT) gets its own snapshot's digest: only a submitter's digest is kept.
    let copied: uuid::Uuid = client
        .query_one(
            "INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, definition_digest)
             SELECT gen_random_uuid(), w.workflow_name,
                    jsonb_set(s.definition, '{name}', '\"copied\"'), w.input, w.definition_digest
               FROM workflow_run w JOIN workflow_snapshot s ON s.digest = w.definition_digest
              WHERE w.job_id = $1::text::uuid
             RETURNING job_id",
            &[&submitted],
        )
        .await
        .unwrap()
        .get(0);
    let fresh: bool = client
        .query_one(&digest_matches, &[&copied.to_string()])
        .await
        .unwrap()
        .get(0);
    assert!(fresh, "a copied digest is recomputed");

    // A filed snapshot never changes, and no one files one under a digest that does
    // not describe it.
    let changed = client
        .execute(
            "UPDATE workflow_snapshot SET definition = '{}' WHERE digest = $1",
            &[&stored],
        )
        .await
        .unwrap_err();
    assert!(
        changed.to_string().contains("never changes")
            || format!("{changed:?}").contains("never changes"),
        "{changed:?}"
    );
    let forged: String = client
        .query_one(
            "INSERT INTO workflow_snapshot (digest, definition) VALUES ('sha256-compact:forged', '{}')
             RETURNING digest",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_ne!(
        forged, "sha256-compact:forged",
        "a digest not from the node is computed"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_write_stuck_on_a_row_lock_fails_alone_and_the_rest_of_its_batch_commits() {
    let db = TestDatabase::create().await;
    let (node, claimed) = three_claims(&db).await;
    // An operator's transaction holds the second job's row.
    let mut operator = db.connect().await;
    let lock = operator.transaction().await.unwrap();
    lock.execute(
        "SELECT 1 FROM workflow_run WHERE job_id = $1 FOR UPDATE",
        &[&claimed[1].claim.job_id],
    )
    .await
    .unwrap();
    let answers = node
        .store
        .commit_claim_writes(&[
            tokenized(&claimed[0]),
            tokenized(&claimed[1]),
            tokenized(&claimed[2]),
        ])
        .await;
    lock.rollback().await.unwrap();
    assert!(answers[0].is_ok(), "{:?}", answers[0]);
    assert!(answers[2].is_ok(), "{:?}", answers[2]);
    let stuck = answers[1].as_ref().expect_err("the locked row's write");
    assert!(
        !stuck.is_lost_claim() && !stuck.is_data_error(),
        "a failure that may pass: {stuck}"
    );
    for (index, expected) in [(0, 1), (1, 0), (2, 1)] {
        let row = row_of(&node, &claimed[index]).await;
        assert_eq!(
            row["checkpoints"].as_array().unwrap().len(),
            expected,
            "job {index}"
        );
    }
}

/// Writes are fenced by the claim's token, not by its owner alone: an older claim of
/// the same owner (released, then claimed again by that owner) cannot write while the
/// job runs under the newer one, neither alone nor in a batched flush, and nothing of
/// it lands (no row change, no event). Writing `claims >= $3` for `claims = $3` in a
/// fenced statement fails this test.
#[tokio::test]
async fn an_older_claim_of_the_same_owner_writes_nothing_alone_or_batched() {
    let db = TestDatabase::create().await;
    let (node, claimed) = three_claims(&db).await;
    let store = &node.store;
    let stale = &claimed[0];
    let current = claim_again(store, stale, "w").await;
    assert_eq!(current.claim.owner, stale.claim.owner, "the same owner");
    assert!(current.claim.token > stale.claim.token);
    let before = row_of(&node, stale).await;

    let refused =
        |answer: &Result<(), jobs_role::StoreError>| matches!(answer, Err(e) if e.is_lost_claim());
    let alone = store
        .append_checkpoint(
            &stale.claim,
            0,
            "tokenize",
            &json!({ "name": "tokenize", "skipped": false, "response": { "ids": [1] } }),
        )
        .await;
    assert!(refused(&alone), "{alone:?}");
    for settlement in [
        Settlement::Completed {
            result: json!({}),
            verdict: "2 steps".into(),
        },
        Settlement::Retry {
            delay: Duration::ZERO,
            error: "x".into(),
        },
    ] {
        let settled = store.settle(&stale.claim, settlement).await;
        assert!(refused(&settled), "{settled:?}");
    }
    let batched = store
        .commit_claim_writes(&[
            tokenized(stale),
            ClaimWrite::settle(
                &stale.claim,
                Some(StepCheckpoint {
                    step: "tokenize".into(),
                    position: 0,
                    entry: json!({ "name": "tokenize", "skipped": false, "response": {} }),
                }),
                Settlement::Failed {
                    error: "x".into(),
                    verdict: None,
                    step: None,
                },
            )
            .unwrap(),
            tokenized(&claimed[1]),
        ])
        .await;
    assert!(refused(&batched[0]), "{:?}", batched[0]);
    assert!(refused(&batched[1]), "{:?}", batched[1]);
    assert!(batched[2].is_ok(), "another job's write commits");

    let after = row_of(&node, stale).await;
    assert_eq!(after, before, "nothing of the older claim landed");
    assert_eq!(after["claims"], current.claim.token);
    assert_eq!(events_of(store, stale.claim.job_id).await, ["ACCEPTED"]);
}

/// A checkpoint append sent twice (its first COMMIT landed, its answer lost) lands
/// once, with one event: the append is conditional on its position, the event keyed
/// by what it marks, and the second sending is answered as having landed.
#[tokio::test]
async fn a_checkpoint_sent_twice_lands_once() {
    let db = TestDatabase::create().await;
    let (node, claimed) = three_claims(&db).await;
    let store = &node.store;
    let job = &claimed[0];
    for _ in 0..2 {
        let answers = store.commit_claim_writes(&[tokenized(job)]).await;
        assert!(answers[0].is_ok(), "{:?}", answers[0]);
    }
    let row = row_of(&node, job).await;
    assert_eq!(row["checkpoints"].as_array().unwrap().len(), 1);
    assert_eq!(
        events_of(store, job.claim.job_id).await,
        ["ACCEPTED", "STEP_CHECKPOINT"]
    );
    // A settlement sent twice: the second answers as the first did.
    let settle = || {
        ClaimWrite::settle(
            &job.claim,
            Some(StepCheckpoint {
                step: "embed".into(),
                position: 1,
                entry: json!({ "name": "embed", "skipped": false, "response": { "values": [1.0] } }),
            }),
            Settlement::Completed {
                result: json!({ "values": [1.0] }),
                verdict: "2 steps, output jobs.test.EmbedResponse".into(),
            },
        )
        .unwrap()
    };
    for _ in 0..2 {
        let answers = store.commit_claim_writes(&[settle()]).await;
        assert!(answers[0].is_ok(), "{:?}", answers[0]);
    }
    let row = row_of(&node, job).await;
    assert_eq!(row["status"], "COMPLETED");
    assert_eq!(row["checkpoints"].as_array().unwrap().len(), 2);
    assert_eq!(
        events_of(store, job.claim.job_id).await,
        [
            "ACCEPTED",
            "STEP_CHECKPOINT",
            "STEP_CHECKPOINT",
            "COMPLETED"
        ]
    );
}

/// The completions of a batch (a final checkpoint with a COMPLETED settlement, a
/// one-step job's whole write) settle in one statement: each still fenced on its own
/// claim (owner, token, not cancel-requested, checkpoint position), a refused one
/// fails alone, and the batch sent again lands nothing twice.
#[tokio::test]
async fn completions_settled_in_one_statement_keep_each_fence_and_land_once() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let store = &node.store;
    let workflow = two_step_workflow("127.0.0.1:1");
    for text in ["a", "b", "c", "d", "e", "f"] {
        node.submit(&workflow, json!({ "text": text })).await;
    }
    let claimed = store.claim_jobs("w", LEASE, 10).await.unwrap();
    let [done, stolen, stale, cancelled, refused, also_done] = &claimed[..] else {
        panic!("six claims: {}", claimed.len())
    };
    // Another worker holds `stolen`; this worker claimed `stale` again (a newer token).
    claim_again(store, stolen, "thief").await;
    let current = claim_again(store, stale, "w").await;
    node.ok(
        "cancel-job",
        json!({ "jobId": cancelled.claim.job_id.to_string(), "reason": "a test" }),
    )
    .await;

    let complete = |claimed: &ClaimedJob, result: serde_json::Value| {
        ClaimWrite::settle(
            &claimed.claim,
            Some(StepCheckpoint {
                step: "embed".into(),
                position: 0,
                entry: json!({ "name": "embed", "skipped": false, "response": result }),
            }),
            Settlement::Completed {
                result,
                verdict: "2 steps, output jobs.test.EmbedResponse".into(),
            },
        )
        .unwrap()
    };
    let fine = json!({ "values": [1.0] });
    let writes = [
        complete(done, fine.clone()),
        complete(stolen, fine.clone()),
        complete(stale, fine.clone()),
        complete(cancelled, fine.clone()),
        complete(also_done, fine.clone()),
    ];
    let answers = store.commit_claim_writes(&writes).await;
    assert!(answers[0].is_ok(), "{:?}", answers[0]);
    for lost in [1, 2, 3] {
        assert!(
            answers[lost].as_ref().is_err_and(|e| e.is_lost_claim()),
            "write {lost}: {:?}",
            answers[lost]
        );
    }
    assert!(answers[4].is_ok(), "{:?}", answers[4]);
    // A refused value fails the batched statement; the batch is then committed write
    // by write, and only the refused one fails (the other was already landed).
    let answers = store
        .commit_claim_writes(&[
            complete(refused, json!({ "text": "a\u{0}b" })),
            complete(done, fine.clone()),
        ])
        .await;
    assert!(
        answers[0].as_ref().is_err_and(|e| e.is_data_error()),
        "{:?}",
        answers[0]
    );
    assert!(answers[1].is_ok(), "{:?}", answers[1]);

    for (job, status, events) in [
        (
            done,
            "COMPLETED",
            &["ACCEPTED", "STEP_CHECKPOINT", "COMPLETED"][..],
        ),
        (stolen, "RUNNING", &["ACCEPTED"][..]),
        (stale, "RUNNING", &["ACCEPTED"][..]),
        (cancelled, "RUNNING", &["ACCEPTED"][..]),
        (refused, "RUNNING", &["ACCEPTED"][..]),
        (
            also_done,
            "COMPLETED",
            &["ACCEPTED", "STEP_CHECKPOINT", "COMPLETED"][..],
        ),
    ] {
        let row = row_of(&node, job).await;
        let id = &row["job_id"];
        assert_eq!(row["status"], status, "{id}");
        let landed = usize::from(status == "COMPLETED");
        assert_eq!(row["checkpoints"].as_array().unwrap().len(), landed, "{id}");
        assert_eq!(events_of(store, job.claim.job_id).await, events, "{id}");
    }
    assert_eq!(row_of(&node, stolen).await["lease_owner"], "thief");
    assert_eq!(row_of(&node, stale).await["claims"], current.claim.token);

    // Sent again (a COMMIT whose answer was lost): answered as landed, nothing twice.
    let again = store
        .commit_claim_writes(&[complete(done, fine.clone()), complete(also_done, fine)])
        .await;
    assert!(again.iter().all(Result::is_ok), "{again:?}");
    for job in [done, also_done] {
        assert_eq!(
            events_of(store, job.claim.job_id).await,
            ["ACCEPTED", "STEP_CHECKPOINT", "COMPLETED"]
        );
        assert_eq!(
            row_of(&node, job).await["checkpoints"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }
}

/// Large completions (a result of megabytes) keep their own statements, and their
/// events are split across statements of bounded size: every one lands, in order.
#[tokio::test]
async fn large_completions_and_their_events_land_in_bounded_statements() {
    let db = TestDatabase::create().await;
    let (node, claimed) = three_claims(&db).await;
    let store = &node.store;
    let large = json!({ "text": "x".repeat(3 * 1024 * 1024) });
    let writes: Vec<ClaimWrite> = claimed
        .iter()
        .map(|job| {
            ClaimWrite::settle(
                &job.claim,
                Some(StepCheckpoint {
                    step: "embed".into(),
                    position: 0,
                    entry: json!({ "name": "embed", "skipped": false, "response": large }),
                }),
                Settlement::Completed {
                    result: large.clone(),
                    verdict: "2 steps".into(),
                },
            )
            .unwrap()
        })
        .collect();
    let answers = store.commit_claim_writes(&writes).await;
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    for job in &claimed {
        let row = row_of(&node, job).await;
        assert_eq!(row["status"], "COMPLETED");
        assert_eq!(
            events_of(store, job.claim.job_id).await,
            ["ACCEPTED", "STEP_CHECKPOINT", "COMPLETED"]
        );
    }
}
