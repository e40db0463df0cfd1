//! Retention: the pruner deletes exactly the finished jobs and published events past
//! their retention (never the dead-letter queue), one node at a time, and never holds
//! up a drain. Real PostgreSQL; rows back-dated with SQL.

use std::time::{Duration, Instant};

use jobs_role::JobStatus;
use jobs_role::store::EventsOut;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually, queue_jobs, test_config};
use serde_json::json;
use workflow::testkit::{FixtureServer, two_step_workflow};

const DAY_MS: i64 = 86_400_000;
/// The rule of a node without the Kafka lanes (nothing is ever published).
const NOT_DEAD_LETTERED: EventsOut = EventsOut::NotDeadLettered;
const WAIT: Duration = Duration::from_secs(60);

/// Moves a job to `status`, finished `days` ago, with what that status requires.
async fn finish(db: &TestDatabase, job_id: &str, status: &str, days: i64) {
    db.connect()
        .await
        .execute(
            "UPDATE workflow_run
                SET status = $2, verdict = 'v', error = 'e', cancel_reason = 'r',
                    finished_at = now() - $3::bigint * interval '1 millisecond'
              WHERE job_id = $1::text::uuid",
            &[&job_id, &status, &(days * DAY_MS)],
        )
        .await
        .unwrap();
}

/// Marks a job's outbox rows `status`, published `days` ago when PUBLISHED.
async fn mark_events(db: &TestDatabase, job_id: &str, status: &str, days: i64) {
    db.connect()
        .await
        .execute(
            "UPDATE workflow_run_events_outbox
                SET status = $2,
                    published_at = CASE WHEN $2 = 'PUBLISHED'
                                        THEN now() - $3::bigint * interval '1 millisecond' END
              WHERE job_id = $1::text::uuid",
            &[&job_id, &status, &(days * DAY_MS)],
        )
        .await
        .unwrap();
}

async fn exists(db: &TestDatabase, job_id: &str) -> bool {
    db.connect()
        .await
        .query_one(
            "SELECT count(*) FROM workflow_run WHERE job_id = $1::text::uuid",
            &[&job_id],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
        == 1
}

async fn events_of(db: &TestDatabase, job_id: &str) -> i64 {
    db.connect()
        .await
        .query_one(
            "SELECT count(*) FROM workflow_run_events_outbox WHERE job_id = $1::text::uuid",
            &[&job_id],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn the_pruner_deletes_exactly_what_is_past_retention_and_never_the_dead_letter_queue() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let workflow = two_step_workflow("127.0.0.1:1");
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(
            node.submit(&workflow, json!({ "text": format!("{i}") }))
                .await,
        );
    }
    let [
        old_done,
        young_done,
        old_failed,
        old_dead_dlq,
        old_cancelled,
        queued,
        old_dead,
    ] = <[String; 7]>::try_from(ids).unwrap();
    finish(&db, &old_done, "COMPLETED", 8).await;
    finish(&db, &young_done, "COMPLETED", 1).await;
    finish(&db, &old_failed, "FAILED", 31).await;
    finish(&db, &old_dead_dlq, "DEAD", 31).await;
    finish(&db, &old_dead, "DEAD", 31).await;
    finish(&db, &old_cancelled, "CANCELLED", 365).await;
    db.connect()
        .await
        .execute(
            "UPDATE workflow_run SET created_at = now() - interval '1 year' WHERE job_id = $1::text::uuid",
            &[&queued],
        )
        .await
        .unwrap();
    // The young job's event was published two days ago; the DLQ job's was refused.
    mark_events(&db, &young_done, "PUBLISHED", 2).await;
    mark_events(&db, &old_dead_dlq, "FAILED", 0).await;

    let retention = [
        (
            JobStatus::Completed,
            Duration::from_millis(7 * DAY_MS as u64),
        ),
        (JobStatus::Failed, Duration::from_millis(30 * DAY_MS as u64)),
        (JobStatus::Dead, Duration::from_millis(30 * DAY_MS as u64)),
    ];
    let published = Some(Duration::from_millis(DAY_MS as u64));
    // Batches of one: the round goes on until nothing is left.
    let pruned = node
        .store
        .prune(&retention, published, NOT_DEAD_LETTERED, 1)
        .await
        .unwrap();
    assert!(!pruned.skipped);
    assert_eq!(
        pruned.jobs,
        [
            (JobStatus::Completed, 1),
            (JobStatus::Failed, 1),
            (JobStatus::Dead, 1)
        ]
    );
    assert_eq!(pruned.published_events, 1);

    for gone in [&old_done, &old_failed, &old_dead] {
        assert!(!exists(&db, gone).await, "{gone} is past its retention");
        assert_eq!(
            events_of(&db, gone).await,
            0,
            "its outbox rows went with it"
        );
    }
    for kept in [&young_done, &old_dead_dlq, &old_cancelled, &queued] {
        assert!(exists(&db, kept).await, "{kept} stays");
    }
    assert_eq!(
        events_of(&db, &young_done).await,
        0,
        "its published event went"
    );
    assert_eq!(events_of(&db, &old_dead_dlq).await, 1, "the DLQ row stays");
    assert_eq!(events_of(&db, &queued).await, 1);

    // A second round finds nothing.
    let again = node
        .store
        .prune(&retention, published, NOT_DEAD_LETTERED, 1000)
        .await
        .unwrap();
    assert_eq!((again.job_count(), again.published_events), (0, 0));
    node.stop().await;
}

#[tokio::test]
async fn only_one_node_prunes_at_a_time() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let job = node
        .submit(&two_step_workflow("127.0.0.1:1"), json!({ "text": "a" }))
        .await;
    finish(&db, &job, "COMPLETED", 10).await;
    let retention = [(JobStatus::Completed, Duration::from_millis(1))];

    // Another node's round holds the lock.
    let mut other = db.connect().await;
    let holding = other.transaction().await.unwrap();
    holding
        .query_one(jobs_role::store::sql::TRY_LOCK_PRUNER, &[])
        .await
        .unwrap();
    let skipped = node
        .store
        .prune(&retention, None, NOT_DEAD_LETTERED, 100)
        .await
        .unwrap();
    assert!(skipped.skipped);
    assert!(exists(&db, &job).await);
    holding.rollback().await.unwrap();

    let pruned = node
        .store
        .prune(&retention, None, NOT_DEAD_LETTERED, 100)
        .await
        .unwrap();
    assert_eq!(pruned.job_count(), 1);
    node.stop().await;
}

#[tokio::test]
async fn the_pruner_running_during_a_drain_never_holds_it_up() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let mut config = test_config(&db.url, "busy", 8);
    config.retention.completed_ms = Some(1);
    config.retention.published_events_ms = Some(1);
    config.retention.interval_ms = 20;
    config.retention.batch = 7;
    // A fleet without the Kafka lanes for good: its events are never published.
    config.retention.prune_unpublished = true;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    queue_jobs(&idle.store, &two_step_workflow(&server.target()), 150).await;
    let busy = JobsNode::start(config).await;
    // Every job runs to the end and is then pruned, while claims go on beside it.
    eventually("every job to run and be pruned", WAIT, || async {
        let left: i64 = db
            .connect()
            .await
            .query_one("SELECT count(*) FROM workflow_run", &[])
            .await
            .unwrap()
            .get(0);
        left == 0
    })
    .await;
    assert_eq!(server.stats.tokenize_calls(), 150);
    assert_eq!(server.stats.embed_calls(), 150);
    busy.stop().await;
}

#[tokio::test]
async fn with_the_kafka_lanes_on_a_job_is_pruned_only_once_every_event_is_published() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let workflow = two_step_workflow("127.0.0.1:1");
    let published = node.submit(&workflow, json!({ "text": "a" })).await;
    let pending = node.submit(&workflow, json!({ "text": "b" })).await;
    let redriven = node.submit(&workflow, json!({ "text": "c" })).await;
    for job in [&published, &pending, &redriven] {
        finish(&db, job, "COMPLETED", 10).await;
    }
    mark_events(&db, &published, "PUBLISHED", 0).await;
    // An operator's redrive put a dead-lettered row back to PENDING: not out yet.
    mark_events(&db, &redriven, "PENDING", 0).await;
    let retention = [(JobStatus::Completed, Duration::from_millis(DAY_MS as u64))];

    let lanes_on = node
        .store
        .prune(&retention, None, EventsOut::Published, 100)
        .await
        .unwrap();
    assert_eq!(lanes_on.job_count(), 1);
    assert!(!exists(&db, &published).await);
    assert!(exists(&db, &pending).await, "its event is not out yet");
    assert!(exists(&db, &redriven).await);
    node.stop().await;
}

#[tokio::test]
async fn a_job_whose_event_is_dead_lettered_while_the_pruner_waits_is_kept() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let job = node
        .submit(&two_step_workflow("127.0.0.1:1"), json!({ "text": "a" }))
        .await;
    finish(&db, &job, "COMPLETED", 10).await;
    // The relay has claimed the job's event and is publishing it.
    let mut relay = db.connect().await;
    let publishing = relay.transaction().await.unwrap();
    publishing
        .execute(
            "SELECT 1 FROM workflow_run_events_outbox WHERE job_id = $1::text::uuid FOR UPDATE",
            &[&job],
        )
        .await
        .unwrap();
    let store = node.store.clone();
    let retention = [(JobStatus::Completed, Duration::from_millis(DAY_MS as u64))];
    let pruning = tokio::spawn(async move {
        store
            .prune(&retention, None, NOT_DEAD_LETTERED, 100)
            .await
            .unwrap()
    });
    eventually("the pruner to wait on the relay's lock", WAIT, || async {
        let waiting: i64 = db
            .connect()
            .await
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database()
                    AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE%'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        waiting == 1
    })
    .await;
    // The broker refused it for the last time: the row is dead-lettered.
    publishing
        .execute(
            "UPDATE workflow_run_events_outbox SET status = 'FAILED' WHERE job_id = $1::text::uuid",
            &[&job],
        )
        .await
        .unwrap();
    publishing.commit().await.unwrap();
    let pruned = pruning.await.unwrap();
    assert_eq!(pruned.job_count(), 0, "{pruned:?}");
    assert!(
        exists(&db, &job).await,
        "the job of a dead-lettered event stays"
    );
    assert_eq!(events_of(&db, &job).await, 1, "and so does the DLQ row");
    node.stop().await;
}

/// A node without the Kafka lanes (verbs only) and with retention must not delete a
/// job whose events the fleet's relaying node has yet to publish: whether they are
/// out is read from the database, not from this node's own configuration. Before,
/// such a node deleted COMPLETED jobs with their PENDING events while the relaying
/// node's broker was down, and the topic never received them.
#[tokio::test]
async fn a_verbs_only_node_with_retention_never_deletes_an_unpublished_event() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let worker = JobsNode::start(test_config(&db.url, "worker", 4)).await;
    let workflow = two_step_workflow(&server.target());
    let mut jobs = Vec::new();
    for text in ["a", "b", "c", "d", "e"] {
        jobs.push(worker.submit(&workflow, json!({ "text": text })).await);
    }
    for job in &jobs {
        worker.wait_for_status(job, "COMPLETED", WAIT).await;
    }
    // The events are PENDING (no relay runs anywhere here: as when the relaying
    // node's broker is down). A verbs-only node prunes every 20 ms.
    let mut config = test_config(&db.url, "verbs-only", 0);
    config.retention.completed_ms = Some(1);
    config.retention.interval_ms = 20;
    let pruner = JobsNode::start(config).await;
    let client = db.connect().await;
    let rounds = Instant::now();
    while rounds.elapsed() < Duration::from_millis(1_500) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        for job in &jobs {
            assert!(
                exists(&db, job).await,
                "job {job} was pruned with unpublished events"
            );
        }
    }
    let pending: i64 = client
        .query_one(
            "SELECT count(*) FROM workflow_run_events_outbox WHERE status = 'PENDING'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(pending, 20, "every event of the five jobs is kept, PENDING");

    // Once published (the relay caught up), the same node prunes them.
    client
        .execute(
            "UPDATE workflow_run_events_outbox SET status = 'PUBLISHED', published_at = now()",
            &[],
        )
        .await
        .unwrap();
    eventually("the published jobs to be pruned", WAIT, || async {
        let mut left = 0;
        for job in &jobs {
            left += usize::from(exists(&db, job).await);
        }
        left == 0
    })
    .await;
    pruner.stop().await;
    worker.stop().await;
}

/// A node running the Kafka lanes and retention prunes a job only once every one
/// of its events is on the topic.
#[tokio::test]
async fn a_node_with_the_lanes_on_prunes_a_job_once_its_events_are_published() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let mut config = protomolt_e2e::kafka::with_lanes(test_config(&db.url, "lanes", 4)).await;
    config.retention.completed_ms = Some(1);
    config.retention.interval_ms = 20;
    let topic = config.events_topic.clone();
    let node = JobsNode::start(config).await;
    let job = node
        .submit(&two_step_workflow(&server.target()), json!({ "text": "x" }))
        .await;
    eventually("the job to be pruned", WAIT, || async {
        !exists(&db, &job).await
    })
    .await;
    // Pruned after publishing: its four events are on the topic.
    let key = Some(job.clone().into_bytes());
    let of_job =
        |records: &[protomolt_e2e::kafka::Record]| records.iter().filter(|r| r.key == key).count();
    let records =
        protomolt_e2e::kafka::read_until(&topic, WAIT, |records| of_job(records) >= 4).await;
    assert_eq!(of_job(&records), 4);
    node.stop().await;
}

/// A dead-lettered request record is its place and its bytes: a redelivery is kept
/// once, a new record at a reused offset (the topic recreated) is kept too (before, it
/// was taken for the old one and dropped silently), and `rejects_ms` prunes them,
/// while `pruned_ids_ms` forgets the ids of pruned jobs.
#[tokio::test]
async fn rejected_records_are_keyed_by_their_bytes_and_pruned_with_retention() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let record = |payload: &'static [u8]| jobs_role::store::RejectedRecord {
        topic: "requests",
        partition: 0,
        offset: 7,
        key: Some(b"k"),
        payload: Some(payload),
        error: "not a WorkflowRunRequest",
    };
    node.store.reject_request(&record(b"old")).await.unwrap();
    node.store.reject_request(&record(b"old")).await.unwrap();
    node.store.reject_request(&record(b"new")).await.unwrap();
    let client = db.connect().await;
    let count = |table: &'static str| {
        let client = &client;
        async move {
            client
                .query_one(&format!("SELECT count(*) FROM {table}"), &[])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    assert_eq!(
        count("workflow_run_request_rejects").await,
        2,
        "a redelivery once, a new record too"
    );

    client
        .batch_execute(
            "UPDATE workflow_run_request_rejects SET received_at = now() - interval '2 days';
             INSERT INTO workflow_run_pruned (job_id, pruned_at) VALUES
                 (gen_random_uuid(), now() - interval '40 days'), (gen_random_uuid(), now())",
        )
        .await
        .unwrap();
    node.store.reject_request(&record(b"fresh")).await.unwrap();
    let pruned = node
        .store
        .prune_records(
            Duration::from_millis(30 * DAY_MS as u64),
            Some(Duration::from_millis(DAY_MS as u64)),
            100,
        )
        .await
        .unwrap();
    assert_eq!((pruned.pruned_ids, pruned.rejects), (1, 2), "{pruned:?}");
    assert_eq!(count("workflow_run_request_rejects").await, 1);
    assert_eq!(count("workflow_run_pruned").await, 1);
    node.stop().await;
}
