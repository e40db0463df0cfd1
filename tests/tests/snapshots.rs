//! Workflow snapshots filed once (migration V21): rows written before it still run,
//! resume and show their definition; one snapshot serves every job that shares it;
//! the pruner never deletes one a job names, even racing a submission; a node sends
//! a snapshot it saw filed by its digest alone.

use std::time::Duration;

use jobs_role::JobStatus;
use jobs_role::store::{migrate, migrate_to, sql};
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually, test_config};
use serde_json::{Value, json};
use uuid::Uuid;
use workflow::testkit::{FixtureServer, two_step_workflow};

const WAIT: Duration = Duration::from_secs(60);

/// The number of rows of `table` (a name from this file, never from input).
async fn count(client: &tokio_postgres::Client, table: &str) -> i64 {
    client
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// The text column every row of `query` answers, in order.
async fn texts(client: &tokio_postgres::Client, query: &str) -> Vec<String> {
    client
        .query(query, &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// The digest PostgreSQL gives `definition` when no node names it (V6's rule: the
/// SHA-256 of its jsonb text).
async fn own_digest(client: &tokio_postgres::Client, definition: &Value) -> String {
    client
        .query_one(
            "SELECT encode(sha256(convert_to($1::jsonb::text, 'UTF8')), 'hex')",
            &[definition],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_written_before_snapshots_were_filed_still_run_resume_and_show_their_definition() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let workflow = two_step_workflow(&server.target());
    let (digest, _) = jobs_role::compiled::snapshot_digest(&workflow);
    let mut client = db.connect().await;
    migrate_to(&mut client, 20)
        .await
        .expect("migrations up to V20");

    // Rows as a node of V20 wrote them: the snapshot in the row, under the node's
    // digest; one fresh, one with its first step checkpointed (to resume), and one
    // as a node before V6 left it, with no digest at all.
    let (fresh, resumed, undigested) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let tx = client.transaction().await.unwrap();
    tx.batch_execute("SET LOCAL protomolt.digest_from_node = 'on'")
        .await
        .unwrap();
    let insert = "INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, definition_digest, checkpoints)
                  VALUES ($1, 'embed-text', $2, $3, $4, $5)";
    let tokenized =
        json!([{ "name": "tokenize", "skipped": false, "response": { "ids": [7, 8] } }]);
    for (job, text, checkpoints) in [
        (fresh, "fresh", json!([])),
        (resumed, "resumed", tokenized),
        (undigested, "undigested", json!([])),
    ] {
        tx.execute(
            insert,
            &[
                &job,
                &workflow,
                &json!({ "text": text }),
                &&*digest,
                &checkpoints,
            ],
        )
        .await
        .unwrap();
    }
    tx.execute(
        "UPDATE workflow_run SET definition_digest = NULL WHERE job_id = $1",
        &[&undigested],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    migrate(&mut client).await.expect("V21 over rows of V20");
    let inline: i64 = client
        .query_one(
            "SELECT count(*) FROM workflow_run WHERE workflow_definition IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(inline, 3, "the migration moves no row itself");

    let node = JobsNode::start(test_config(&db.url, "after-v21", 2)).await;
    node.wait_for_count(JobStatus::Completed, 3, WAIT).await;
    eventually("the snapshot key to be validated", WAIT, || async {
        node.store.snapshot_key_validated().await.expect("asked")
    })
    .await;
    assert!(!node.store.any_inline_snapshot().await.unwrap());
    assert_eq!(
        server.stats.tokenize_calls(),
        2,
        "the resumed job does not call its checkpointed step again"
    );
    assert_eq!(server.stats.embed_calls(), 3);
    for job in [fresh, resumed, undigested] {
        let answer = node
            .ok(
                "get-job",
                json!({ "jobId": job.to_string(), "include": ["definition"] }),
            )
            .await;
        assert_eq!(answer["job"]["workflowDefinition"], workflow, "{job}");
    }
    // Each row is filed under the digest of its own content (V6's rule), whatever
    // digest it claimed, or none: one workflow, one snapshot, stored once.
    let digests = texts(
        &client,
        "SELECT DISTINCT definition_digest FROM workflow_run ORDER BY 1",
    )
    .await;
    assert_eq!(digests, [own_digest(&client, &workflow).await]);
    assert_eq!(count(&client, "workflow_snapshot").await, 1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_shared_by_ten_thousand_jobs_is_stored_once() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let workflow = two_step_workflow("127.0.0.1:9");
    let snapshot_bytes = workflow.to_string().len();
    for batch in 0..10 {
        let jobs: Vec<Value> = (0..1_000)
            .map(|i| json!({ "input": { "text": format!("job {batch}-{i}") } }))
            .collect();
        let answer = node
            .ok(
                "submit-workflows",
                json!({ "workflow": workflow, "submissions": jobs }),
            )
            .await;
        assert_eq!(answer["created"], 1_000, "{answer}");
    }
    let client = db.connect().await;
    assert_eq!(count(&client, "workflow_run").await, 10_000);
    assert_eq!(count(&client, "workflow_snapshot").await, 1, "filed once");
    let (snapshots, rows_toast): (i64, i64) = {
        let row = client
            .query_one(
                "SELECT pg_total_relation_size('workflow_snapshot'),
                        pg_total_relation_size(reltoastrelid) FROM pg_class WHERE relname = 'workflow_run'",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    // The one snapshot, its index and its table's pages: nothing per job.
    assert!(
        snapshots < 64 * 1024 + 2 * snapshot_bytes as i64,
        "workflow_snapshot holds {snapshots} bytes for one snapshot of {snapshot_bytes}"
    );
    // No job row holds a copy: the rows' TOAST stays empty (inputs are small).
    assert!(
        rows_toast < 64 * 1024,
        "the job rows' TOAST holds {rows_toast} bytes"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pruner_never_deletes_a_snapshot_a_job_names_even_one_racing_a_submission() {
    let db = TestDatabase::create().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let store = idle.store.clone();
    let kept = two_step_workflow("127.0.0.1:9");
    let mut orphan = kept.clone();
    orphan["name"] = json!("orphaned");
    let mut racing = kept.clone();
    racing["name"] = json!("racing");
    idle.submit(&kept, json!({ "text": "a retained job" }))
        .await;
    let client = db.connect().await;
    let file = "INSERT INTO workflow_snapshot (digest, definition)
                VALUES ($1, $2) ON CONFLICT (digest) DO NOTHING";
    // Two snapshots no job names (their jobs pruned, say), filed as a node files them.
    let (racing_digest, _) = jobs_role::compiled::snapshot_digest(&racing);
    for definition in [&orphan, &racing] {
        let (digest, _) = jobs_role::compiled::snapshot_digest(definition);
        client
            .batch_execute("BEGIN; SET LOCAL protomolt.digest_from_node = 'on'")
            .await
            .unwrap();
        client
            .execute(file, &[&&*digest, definition])
            .await
            .unwrap();
        client.batch_execute("COMMIT").await.unwrap();
    }
    assert_eq!(count(&client, "workflow_snapshot").await, 3);

    // A submission of the racing workflow finds its snapshot filed, and has not yet
    // written its job row, when the pruner comes.
    let mut submitter = db.connect().await;
    let tx = submitter.transaction().await.unwrap();
    tx.batch_execute(sql::SUBMISSION_SETTINGS).await.unwrap();
    let filed_now = tx
        .execute(file, &[&&*racing_digest, &racing])
        .await
        .unwrap();
    assert_eq!(filed_now, 0, "already filed");
    // The pruner never waits for the snapshot lock (it would hold up every
    // submission queued behind it): it finds it busy and deletes nothing.
    let busy = store.prune_snapshots(None, 100).await.expect("tried");
    assert_eq!(busy, None, "busy while a submission holds the lock");
    assert_eq!(count(&client, "workflow_snapshot").await, 3);
    let job = Uuid::now_v7();
    tx.execute(
        sql::SUBMIT_JOB,
        &[
            &job,
            &"racing",
            &racing,
            &json!({ "text": "raced" }),
            &3i32,
            &&*racing_digest,
            &5i16,
            &None::<std::time::SystemTime>,
            &None::<String>,
            &Uuid::now_v7(),
            &"ACCEPTED",
            &Vec::<u8>::new(),
            &None::<serde_json::Value>,
            &false,
            &0i64,
        ],
    )
    .await
    .expect("the job names its snapshot: nothing deleted it meanwhile");
    tx.commit().await.unwrap();
    let pruned = store
        .prune_snapshots(None, 100)
        .await
        .expect("pruned")
        .expect("the locks are free");
    assert_eq!(pruned.deleted, 1, "only the orphan");
    let left = texts(
        &client,
        "SELECT definition->>'name' FROM workflow_snapshot ORDER BY 1",
    )
    .await;
    assert_eq!(left, ["embed-text", "racing"], "the named ones stay");
    idle.stop().await;
}

/// Counts, in `snapshot_sends`, every snapshot a statement sent to be filed (a
/// trigger that fires before the insert, so also for one found filed already).
async fn count_snapshot_sends(client: &tokio_postgres::Client) {
    client
        .batch_execute(
            "CREATE TABLE snapshot_sends (digest text);
             CREATE FUNCTION count_snapshot_send() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO snapshot_sends VALUES (NEW.digest); RETURN NEW; END $$;
             CREATE TRIGGER count_snapshot_send BEFORE INSERT ON workflow_snapshot
                FOR EACH ROW EXECUTE FUNCTION count_snapshot_send();",
        )
        .await
        .unwrap();
}

/// Deletes every job, as retention would once they are old, and prunes the snapshots
/// they named.
async fn prune_everything(client: &tokio_postgres::Client, store: &jobs_role::store::Store) {
    client
        .batch_execute("DELETE FROM workflow_run")
        .await
        .unwrap();
    let pruned = store
        .prune_snapshots(None, 100)
        .await
        .expect("pruned")
        .expect("the locks are free");
    assert!(pruned.deleted >= 1, "{pruned:?}");
    assert_eq!(count(client, "workflow_snapshot").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_sends_a_snapshot_it_saw_filed_by_digest_alone_and_again_once_pruned() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let client = db.connect().await;
    count_snapshot_sends(&client).await;
    let workflow = two_step_workflow("127.0.0.1:9");

    for i in 0..5 {
        node.submit(&workflow, json!({ "text": format!("single {i}") }))
            .await;
    }
    let batch: Vec<Value> = (0..3)
        .map(|i| json!({ "input": { "text": format!("batched {i}") } }))
        .collect();
    let answer = node
        .ok(
            "submit-workflows",
            json!({ "workflow": workflow, "submissions": batch }),
        )
        .await;
    assert_eq!(answer["created"], 3, "{answer}");
    assert_eq!(count(&client, "workflow_run").await, 8);
    assert_eq!(
        count(&client, "snapshot_sends").await,
        1,
        "only the first submission sent the snapshot"
    );

    // Retention deletes the jobs and the pruner their snapshot: the node's memory is
    // stale, and its next submission is refused by the foreign key, then sent whole.
    for submit_batched in [false, true] {
        prune_everything(&client, &node.store).await;
        let sent_before = count(&client, "snapshot_sends").await;
        if submit_batched {
            let answer = node
                .ok(
                    "submit-workflows",
                    json!({ "workflow": workflow, "submissions": [{ "input": { "text": "again" } }] }),
                )
                .await;
            assert_eq!(answer["created"], 1, "{answer}");
        } else {
            node.submit(&workflow, json!({ "text": "again" })).await;
        }
        assert_eq!(count(&client, "snapshot_sends").await, sent_before + 1);
        assert_eq!(count(&client, "workflow_snapshot").await, 1, "filed again");
        let names = texts(
            &client,
            "SELECT s.definition->>'name' FROM workflow_run w
               JOIN workflow_snapshot s ON s.digest = w.definition_digest",
        )
        .await;
        assert_eq!(names, ["embed-text"], "the job names its snapshot");
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_filed_under_a_digest_it_does_not_match_is_never_run_nor_taken() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let workflow = two_step_workflow(&server.target());
    let (digest, _) = jobs_role::compiled::snapshot_digest(&workflow);
    let mut client = db.connect().await;
    migrate_to(&mut client, 20).await.unwrap();
    let old = Uuid::now_v7();
    client
        .execute(
            "INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input)
             VALUES ($1, 'embed-text', $2, '{\"text\": \"old\"}')",
            &[&old, &workflow],
        )
        .await
        .unwrap();
    migrate(&mut client).await.unwrap();

    // Someone claiming to be the node files another workflow under the node's digest
    // of this one, and under the digest of the old row's own content.
    let mut forged = workflow.clone();
    forged["steps"][0]["target"] = json!("127.0.0.1:9");
    let own = own_digest(&client, &workflow).await;
    client
        .batch_execute("BEGIN; SET LOCAL protomolt.digest_from_node = 'on'")
        .await
        .unwrap();
    for key in [&*digest, own.as_str()] {
        client
            .execute(
                "INSERT INTO workflow_snapshot (digest, definition) VALUES ($1, $2)",
                &[&key, &forged],
            )
            .await
            .unwrap();
    }
    client.batch_execute("COMMIT").await.unwrap();

    // The mover refuses to take the forged one for the old row, which keeps its copy.
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    // (The node's own mover tries too, and may hold the row for a moment.)
    let deadline = std::time::Instant::now() + WAIT;
    let refused = loop {
        match idle.store.move_inline_snapshots(None, 200).await {
            Err(refused) => break refused,
            Ok(moved) => {
                assert_eq!(
                    moved.moved, 0,
                    "the row is never moved onto the forged snapshot"
                );
                assert!(
                    std::time::Instant::now() < deadline,
                    "the mover never refused"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert!(refused.is_data_error(), "{refused}");
    assert!(
        refused.to_string().contains("is not this job's definition"),
        "{refused}"
    );
    assert!(idle.store.any_inline_snapshot().await.unwrap());

    // The old row runs its own copy, never the snapshot forged under its digest.
    let first = JobsNode::start(test_config(&db.url, "first", 2)).await;
    first
        .wait_for_status(&old.to_string(), "COMPLETED", WAIT)
        .await;
    first.stop().await;
    // A submission whose digest names the forged snapshot, claimed by a node that has
    // not compiled the workflow (so it reads the snapshot filed under the digest),
    // fails loud, never running the forged workflow.
    let job = idle.submit(&workflow, json!({ "text": "new" })).await;
    let busy = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let failed = busy.wait_for_status(&job, "FAILED", WAIT).await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("is not the snapshot that digest names"),
        "{failed}"
    );
    assert_eq!(
        server.stats.tokenize_calls(),
        1,
        "only the old row's job ran"
    );
    busy.stop().await;
    idle.stop().await;
}

#[tokio::test]
async fn a_row_cannot_lose_its_snapshot_nor_be_repaired_the_old_way_in_silence() {
    let db = TestDatabase::create().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let workflow = two_step_workflow("127.0.0.1:9");
    let job = idle.submit(&workflow, json!({ "text": "a" })).await;
    let client = db.connect().await;
    // The repair recipe of before V21 reads a NULL copy: refused, saying what to do.
    let refused = client
        .execute(
            "UPDATE workflow_run SET workflow_definition = jsonb_set(workflow_definition, '{name}', '\"x\"')
              WHERE job_id = $1::text::uuid",
            &[&job],
        )
        .await
        .unwrap_err();
    assert!(
        format!("{refused:?}").contains("not kept in the row since migration V21"),
        "{refused:?}"
    );
    // A row with neither a snapshot nor a digest is refused.
    for statement in [
        "UPDATE workflow_run SET definition_digest = NULL WHERE job_id = $1::text::uuid",
        "INSERT INTO workflow_run (job_id, workflow_name, input)
         SELECT gen_random_uuid(), 'w', '{}' WHERE $1::text IS NOT NULL",
    ] {
        let refused = client.execute(statement, &[&job]).await.unwrap_err();
        assert!(
            format!("{refused:?}").contains("workflow_run_has_a_snapshot"),
            "{statement}: {refused:?}"
        );
    }
    idle.stop().await;
}
