//! `relay`: a backlog of PENDING outbox rows drained to the broker (events/s), the
//! lag of events (committed → acknowledged) while a node drains a job backlog, and
//! whether the relay keeps up with a drain: the one-step drain with the Kafka lanes on
//! (timed until every event is published) against the same drain without them.

use std::time::{Duration, Instant};

use jobs_role::JobsConfig;
use protomolt_e2e::jobs::{JobsNode, eventually};
use protomolt_e2e::{TestDatabase, create_topic, kafka_bootstrap, unique_topic};
use serde_json::json;
use workflow::testkit::FixtureServer;

use crate::Size;
use crate::report::{Report, Target, figure};
use crate::setup::{PATIENCE, node_config, queue_with_sql, tokenize_chain, wait_completed};

pub async fn run(size: Size) -> Report {
    let (rows, jobs, drained_jobs) = match size {
        Size::Tiny => (1_000, 100, 200),
        Size::Full => (100_000, 5_000, 20_000),
    };
    let drained = drain_backlog(rows).await;
    let lag = lag_under_load(jobs).await;
    let server = FixtureServer::start().await;
    let workflow = tokenize_chain(&server.target(), 1);
    let lanes_on = drain_with_lanes(&workflow, drained_jobs).await;
    let lanes_off = crate::throughput::drain(&workflow, drained_jobs, 1, IN_FLIGHT).await;
    Report {
        scenario: "relay",
        params: json!({ "outbox_rows": rows, "jobs_under_load": jobs, "drained_jobs": drained_jobs }),
        figures: vec![
            figure(
                "one-step jobs, one node, lanes on (until every event is published)",
                lanes_on,
                "jobs/s",
            ),
            figure("one-step jobs, one node, lanes off", lanes_off, "jobs/s"),
            figure("drain with lanes on / without", lanes_on / lanes_off, "x")
                .target(Target::AtLeast(0.8)),
            figure("outbox backlog drained to the broker", drained, "events/s")
                .target(Target::AtLeast(10_000.0)),
            figure("event lag p99 (commit -> broker ack) under load", lag, "ms")
                .target(Target::AtMost(1_000.0)),
        ],
    }
}

/// The in-flight limit of the drains (as `throughput`'s one-step figure).
const IN_FLIGHT: usize = 256;

/// A node with the Kafka lanes on fresh topics, `in_flight` segments at once.
async fn kafka_config(db: &TestDatabase, in_flight: usize) -> JobsConfig {
    let events = unique_topic("bench-events");
    let requests = unique_topic("bench-requests");
    create_topic(&events, 4).await;
    create_topic(&requests, 1).await;
    JobsConfig {
        kafka_bootstrap: Some(kafka_bootstrap()),
        events_topic: events,
        requests_topic: requests,
        relay_poll_interval_ms: 200,
        ..node_config(db, "relay", in_flight)
    }
}

async fn pending(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM workflow_run_events_outbox WHERE status = 'PENDING'",
            &[],
        )
        .await
        .expect("counting PENDING rows")
        .get(0)
}

/// `rows` PENDING rows (one per job, 200-byte payloads) published by one relay:
/// events/s.
async fn drain_backlog(rows: usize) -> f64 {
    let db = crate::setup::migrated_database().await;
    let client = db.connect().await;
    let digest = protomolt_e2e::jobs::file_snapshot(&client, &serde_json::json!({})).await;
    client
        .execute(
            "WITH jobs AS (
                 INSERT INTO workflow_run (job_id, workflow_name, definition_digest, input)
                 SELECT gen_random_uuid(), 'w', $2, '{}' FROM generate_series(1, $1::bigint)
                 RETURNING job_id)
             INSERT INTO workflow_run_events_outbox (event_id, job_id, event_type, payload)
             SELECT gen_random_uuid(), job_id, 'ACCEPTED', decode(repeat('ab', 200), 'hex') FROM jobs",
            &[&(rows as i64), &digest],
        )
        .await
        .expect("generating the outbox rows");
    client
        .batch_execute("VACUUM ANALYZE")
        .await
        .expect("ANALYZE");
    let started = Instant::now();
    let node = JobsNode::start(kafka_config(&db, 0).await).await;
    eventually("the outbox to drain", PATIENCE, || async {
        pending(&client).await == 0
    })
    .await;
    let rate = rows as f64 / started.elapsed().as_secs_f64();
    node.stop().await;
    rate
}

/// `jobs` jobs of `workflow` queued, then drained by a node with the Kafka lanes on,
/// timed until every job is COMPLETED and every event it wrote is published: jobs/s.
async fn drain_with_lanes(workflow: &serde_json::Value, jobs: usize) -> f64 {
    let db = TestDatabase::create().await;
    let schema = JobsNode::start(node_config(&db, "schema", 0)).await;
    let client = db.connect().await;
    queue_with_sql(&client, workflow, jobs).await;
    let config = kafka_config(&db, IN_FLIGHT).await;
    let started = Instant::now();
    let node = JobsNode::start(config).await;
    wait_completed(&schema, jobs).await;
    eventually("the outbox to drain", PATIENCE, || async {
        pending(&client).await == 0
    })
    .await;
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    node.stop().await;
    schema.stop().await;
    rate
}

/// `jobs` one-step jobs drained by a node with the Kafka lanes on; the p99 of
/// `published_at - created_at` over every event they wrote, in milliseconds.
async fn lag_under_load(jobs: usize) -> f64 {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let workflow = tokenize_chain(&server.target(), 1);
    let node = JobsNode::start(kafka_config(&db, 64).await).await;
    let client = db.connect().await;
    queue_with_sql(&client, &workflow, jobs).await;
    client
        .batch_execute("SELECT pg_notify('protomolt_jobs_queued', '')")
        .await
        .expect("waking the node");
    wait_completed(&node, jobs).await;
    eventually("the outbox to drain", PATIENCE, || async {
        pending(&client).await == 0
    })
    .await;
    node.stop().await;
    let lag: f64 = client
        .query_one(
            "SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at)::float8)
               FROM workflow_run_events_outbox",
            &[],
        )
        .await
        .expect("the lag")
        .get(0);
    Duration::from_secs_f64(lag.max(0.0)).as_secs_f64() * 1000.0
}
