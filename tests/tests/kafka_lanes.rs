//! The Kafka lanes against the real broker: the outbox relay (events topic) and the
//! request consumer (requests topic), with librdkafka.

use std::collections::HashSet;
use std::time::Duration;

use jobs_proto::WireMessage;
use jobs_proto::v1::WorkflowRunEvent;
use jobs_proto::v1::workflow_run_event::Type;
use jobs_role::JobStatus;
use jobs_role::consumer::RequestHandler;
use jobs_role::store::NewJob;
use jobs_role::submit::Submitter;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually, test_config};
use protomolt_e2e::kafka::{hand_driven_lanes_node, produce, producer, read_until, with_lanes};
use serde_json::json;
use workflow::testkit::{FixtureServer, two_step_workflow};

const WAIT: Duration = Duration::from_secs(60);

fn events_of(records: &[protomolt_e2e::kafka::Record]) -> Vec<WorkflowRunEvent> {
    records
        .iter()
        .map(|r| {
            let (_, payload) = jobs_proto::wire::unframe(&r.payload).expect("unframes");
            WorkflowRunEvent::decode_validated(payload).expect("a valid event")
        })
        .collect()
}

async fn all_published(node: &JobsNode) -> bool {
    node.store.lane_counts().await.unwrap().pending_events == 0
}

#[tokio::test]
async fn a_jobs_lifecycle_arrives_in_order_keyed_by_job_id() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let config = with_lanes(test_config(&db.url, "node-a", 1)).await;
    let topic = config.events_topic.clone();
    let node = JobsNode::start(config).await;
    let job_id = node
        .submit(&two_step_workflow(&server.target()), json!({ "text": "k" }))
        .await;
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;

    let records = read_until(&topic, WAIT, |r| r.len() >= 4).await;
    assert_eq!(records.len(), 4);
    assert!(
        records
            .iter()
            .all(|r| r.key.as_deref() == Some(job_id.as_bytes())),
        "keyed by job_id"
    );
    assert!(
        records.iter().all(|r| r.partition == records[0].partition),
        "one partition per job"
    );
    let events = events_of(&records);
    let types: Vec<Type> = events.iter().map(|e| e.r#type()).collect();
    assert_eq!(
        types,
        [
            Type::Accepted,
            Type::StepCheckpoint,
            Type::StepCheckpoint,
            Type::Completed
        ]
    );
    assert_eq!(events[3].verdict, "2 steps, output jobs.test.Embedding");
    assert_eq!(events[1].step, "tokenize");

    let id = uuid::Uuid::parse_str(&job_id).unwrap();
    eventually("every outbox row to be PUBLISHED", WAIT, || {
        all_published(&node)
    })
    .await;
    let rows = node.store.job_events(id).await.unwrap();
    let row_ids: Vec<String> = rows.iter().map(|r| r.event_id.to_string()).collect();
    let event_ids: Vec<String> = events.iter().map(|e| e.event_id.clone()).collect();
    assert_eq!(
        event_ids, row_ids,
        "event_id is the outbox row id, in order"
    );
    assert!(rows.iter().all(|r| r.status == "PUBLISHED"));
    node.stop().await;
}

#[tokio::test]
async fn an_unpublishable_row_lands_failed_after_ten_attempts_and_others_flow() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let mut config = with_lanes(test_config(&db.url, "node-a", 1)).await;
    // Records above 2000 bytes are refused by the producer itself.
    config
        .kafka_options
        .insert("message.max.bytes".into(), "2000".into());
    config.relay_backoff_base_ms = 10;
    config.relay_backoff_max_ms = 40;
    let topic = config.events_topic.clone();
    let node = JobsNode::start(config).await;

    // A job whose second outbox row is too large to publish.
    let job = NewJob {
        job_id: uuid::Uuid::now_v7(),
        workflow_name: "big".into(),
        definition: std::sync::Arc::new(json!({})),
        definition_digest: None,
        priority: jobs_role::store::DEFAULT_PRIORITY,
        run_after: Default::default(),
        input: json!({}),
        max_attempts: 1,
        trace_context: None,
        by_name: false,
        concurrency: Vec::new(),
        dedupe: None,
        schedule: None,
        metadata: None,
    };
    let client = db.connect().await;
    client
        .execute(
            "INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, status, error)
             VALUES ($1::text::uuid, 'big', '{}', '{}', 'FAILED', 'x')",
            &[&job.job_id.to_string()],
        )
        .await
        .unwrap();
    let big_event = uuid::Uuid::now_v7();
    client
        .execute(
            "INSERT INTO workflow_run_events_outbox (event_id, job_id, event_type, payload)
             VALUES ($1::text::uuid, $2::text::uuid, 'FAILED', $3)",
            &[
                &big_event.to_string(),
                &job.job_id.to_string(),
                &vec![7u8; 5000],
            ],
        )
        .await
        .unwrap();

    let job_id = node
        .submit(
            &two_step_workflow(&server.target()),
            json!({ "text": "ok" }),
        )
        .await;
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    let records = read_until(&topic, WAIT, |r| r.len() >= 4).await;
    assert_eq!(events_of(&records).len(), 4, "the good job's events flow");

    eventually("the big row to land FAILED", WAIT, || async {
        node.store
            .outbox_row(big_event)
            .await
            .unwrap()
            .is_some_and(|(status, _, _)| status == "FAILED")
    })
    .await;
    let (status, attempts, error) = node.store.outbox_row(big_event).await.unwrap().unwrap();
    assert_eq!((status.as_str(), attempts), ("FAILED", 10));
    assert!(
        error.unwrap_or_default().to_lowercase().contains("size"),
        "the last error is recorded"
    );
    // Never picked again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        node.store.outbox_row(big_event).await.unwrap().unwrap().1,
        10
    );
    assert_eq!(node.store.lane_counts().await.unwrap().failed_events, 1);
    // A record refused for its content is not the lane failing: the node is ready.
    eventually("/readyz to say ready", WAIT, || async {
        protomolt_e2e::jobs::http_get(&node.router, "/readyz")
            .await
            .0
            == 200
    })
    .await;
    node.stop().await;
}

#[tokio::test]
async fn two_relays_publish_every_row_exactly_once() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let config = with_lanes(test_config(&db.url, "node-a", 2)).await;
    let topic = config.events_topic.clone();
    let mut config_b = config.clone();
    config_b.worker_id = "node-b".into();
    let a = JobsNode::start(config).await;
    let b = JobsNode::start(config_b).await;
    for i in 0..40 {
        let node = if i % 2 == 0 { &a } else { &b };
        node.submit(
            &two_step_workflow(&server.target()),
            json!({ "text": format!("{i}") }),
        )
        .await;
    }
    eventually(
        "every job to complete and every row to publish",
        WAIT,
        || async {
            let counts = a.store.lane_counts().await.unwrap();
            let done = a.store.count_jobs(JobStatus::Completed).await.unwrap();
            done == 40 && counts.pending_events == 0
        },
    )
    .await;
    let records = read_until(&topic, WAIT, |r| r.len() >= 160).await;
    // Give a duplicate, if any, the time to show up.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let records = read_until(&topic, WAIT, |r| r.len() >= records.len()).await;
    let events = events_of(&records);
    let distinct: HashSet<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(events.len(), 160, "no row published twice");
    assert_eq!(distinct.len(), 160);
    a.stop().await;
    b.stop().await;
}

/// A node with the Kafka lanes on and the two-step workflow stored as `embed-text`.
struct Stored {
    db: TestDatabase,
    server: FixtureServer,
    node: JobsNode,
    requests: String,
    events: String,
}

async fn stored_workflow_node() -> Stored {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let config = with_lanes(test_config(&db.url, "node-a", 1)).await;
    let (requests, events) = (config.requests_topic.clone(), config.events_topic.clone());
    let node = JobsNode::start(config).await;
    node.ok(
        "put-workflow",
        json!({ "workflow": two_step_workflow(&server.target()) }),
    )
    .await;
    Stored {
        db,
        server,
        node,
        requests,
        events,
    }
}

/// Produces a `WorkflowRunRequest` keyed by its job id.
async fn send_request(
    producer: &rdkafka::producer::FutureProducer,
    topic: &str,
    job_id: &str,
    workflow_name: &str,
    text: &str,
) {
    produce(
        producer,
        topic,
        job_id,
        &protomolt_e2e::kafka::request_record(job_id, workflow_name, text),
    )
    .await;
}

#[tokio::test]
async fn a_produced_request_runs_once_and_its_events_reach_the_topic() {
    let Stored {
        db,
        server: _server,
        node,
        requests,
        events,
    } = stored_workflow_node().await;

    let job_id = uuid::Uuid::new_v4().to_string();
    let producer = producer();
    send_request(&producer, &requests, &job_id, "embed-text", "via kafka").await;
    send_request(&producer, &requests, &job_id, "embed-text", "via kafka").await;
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(job["result"]["sourceText"], "via kafka");

    let records = read_until(&events, WAIT, |r| r.len() >= 4).await;
    assert!(events_of(&records).iter().all(|e| e.job_id == job_id));
    eventually("the duplicate request to be consumed", WAIT, || async {
        // The duplicate yields no second job and no second ACCEPTED event.
        let id = uuid::Uuid::parse_str(&job_id).unwrap();
        node.store
            .job_events(id)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.event_type == "ACCEPTED")
            .count()
            == 1
    })
    .await;
    let rows: i64 = db
        .connect()
        .await
        .query_one("SELECT count(*) FROM workflow_run", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
    node.stop().await;
}

#[tokio::test]
async fn poison_records_are_dead_lettered_and_unknown_names_fail_loud() {
    let Stored {
        db,
        server: _server,
        node,
        requests,
        events,
    } = stored_workflow_node().await;
    let producer = producer();

    let unknown = uuid::Uuid::new_v4().to_string();
    send_request(&producer, &requests, &unknown, "embed-txet", "x").await;
    produce(
        &producer,
        &requests,
        "junk",
        &[0xde, 0xad, 0xbe, 0xef, 0xff, 0x13, 0x37],
    )
    .await;
    produce(
        &producer,
        &requests,
        "no-id",
        &protomolt_e2e::kafka::request_record("not-a-uuid", "embed-text", "x"),
    )
    .await;
    // A newcomer's first try: the request as JSON.
    produce(
        &producer,
        &requests,
        "json",
        br#"{"jobId": "0190b6a4-0000-7000-8000-000000000001", "workflowName": "embed-text"}"#,
    )
    .await;
    let good = uuid::Uuid::new_v4().to_string();
    send_request(&producer, &requests, &good, "embed-text", "after the junk").await;

    let job = node.wait_for_status(&unknown, "FAILED", WAIT).await;
    assert!(
        job["error"]
            .as_str()
            .unwrap()
            .contains("no stored workflow named 'embed-txet'; did you mean 'embed-text'?"),
        "{job}"
    );
    node.wait_for_status(&good, "COMPLETED", WAIT).await;

    let client = db.connect().await;
    let rejects = client
        .query(
            "SELECT record_offset, error FROM workflow_run_request_rejects ORDER BY record_offset",
            &[],
        )
        .await
        .unwrap();
    let offsets: Vec<i64> = rejects.iter().map(|r| r.get(0)).collect();
    assert_eq!(
        offsets,
        [1, 2, 3],
        "the junk, the id-less and the JSON records, with their offsets"
    );
    let json_reason: String = rejects[2].get(1);
    assert!(
        json_reason.starts_with("the record's value is JSON")
            && json_reason.contains("binary protobuf encoding of jobs.v1.WorkflowRunRequest")
            && json_reason.contains("SerializeToString()"),
        "{json_reason}"
    );
    assert!(
        rejects[0]
            .get::<_, String>(1)
            .starts_with("not a WorkflowRunRequest")
    );
    assert!(
        rejects[1]
            .get::<_, String>(1)
            .starts_with("no usable job_id")
    );
    assert_eq!(node.store.lane_counts().await.unwrap().rejected_requests, 3);

    let records = read_until(&events, WAIT, |r| {
        events_of(r)
            .iter()
            .any(|e| e.job_id == unknown && e.r#type() == Type::Failed)
    })
    .await;
    let failed = events_of(&records)
        .into_iter()
        .find(|e| e.job_id == unknown)
        .unwrap();
    assert!(
        failed.error.contains("embed-txet"),
        "the FAILED event names the name: {}",
        failed.error
    );
    node.stop().await;
}

#[tokio::test]
async fn a_consumer_killed_between_row_and_offset_commit_yields_one_job() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let config = with_lanes(test_config(&db.url, "node-a", 1)).await;
    let requests = config.requests_topic.clone();

    // A first consumer of the group reads the record and commits the row, then dies
    // before committing the offset.
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    idle.ok(
        "put-workflow",
        json!({ "workflow": two_step_workflow(&server.target()) }),
    )
    .await;
    let job_id = uuid::Uuid::new_v4().to_string();
    send_request(&producer(), &requests, &job_id, "embed-text", "twice").await;
    let record = {
        use rdkafka::consumer::{Consumer, StreamConsumer};
        let consumer: StreamConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", protomolt_e2e::kafka_bootstrap())
            .set("group.id", &config.consumer_group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap();
        consumer.subscribe(&[&requests]).unwrap();
        let message = tokio::time::timeout(WAIT, consumer.recv())
            .await
            .unwrap()
            .unwrap();
        message.detach()
    };
    let workflows = idle
        .node
        .get::<std::sync::Arc<dyn registry_stub::WorkflowRepository>>()
        .unwrap();
    let handler = RequestHandler::new(Submitter::new(idle.store.clone(), workflows.clone(), 3));
    let first = handler.process(&record).await.unwrap();
    assert!(
        matches!(
            first,
            jobs_role::consumer::Disposition::Submitted { created: true, .. }
        ),
        "{first:?}"
    );
    idle.stop().await;

    // The node's consumer gets the record again: the insert is idempotent.
    let node = JobsNode::start(config).await;
    node.ok(
        "put-workflow",
        json!({ "workflow": two_step_workflow(&server.target()) }),
    )
    .await;
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    eventually("the redelivered record to be consumed", WAIT, || async {
        db.connect()
            .await
            .query_one(
                "SELECT count(*) FROM workflow_run_events_outbox WHERE event_type = 'ACCEPTED'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 1
    })
    .await;
    let rows: i64 = db
        .connect()
        .await
        .query_one("SELECT count(*) FROM workflow_run", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1, "one job");
    node.stop().await;
}

#[tokio::test]
async fn a_database_outage_pauses_request_consumption_until_it_is_back() {
    let Stored {
        db,
        server: _server,
        node,
        requests,
        ..
    } = stored_workflow_node().await;

    // The outage: this database refuses connections and its sessions are cut.
    db.refuse_connections().await;

    let job_id = uuid::Uuid::new_v4().to_string();
    send_request(&producer(), &requests, &job_id, "embed-text", "patience").await;
    // Let the consumer meet the outage (it keeps the record, uncommitted, and retries).
    tokio::time::sleep(Duration::from_secs(2)).await;

    db.allow_connections().await;
    let job = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(
        job["result"]["sourceText"], "patience",
        "consumption resumed with the same record"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_crash_between_ack_and_mark_republishes_with_the_same_event_id() {
    use jobs_role::relay::{BrokerUnreachable, Publisher};
    let db = TestDatabase::create().await;
    // No relay runs on this node: the test drives one by hand.
    let (node, config, job) = hand_driven_lanes_node(&db).await;
    let topic = config.events_topic.clone();
    let publisher = Publisher::new(&config, config.kafka_bootstrap.as_deref().unwrap()).unwrap();

    // Published and acked, then "crashed" before the mark: the batch is rolled back.
    let crashed = node
        .store
        .drain_outbox(
            10,
            10,
            |_| Duration::ZERO,
            |events| async {
                publisher.publish(events).await?;
                Err::<Vec<jobs_role::store::PublishOutcome>, _>(BrokerUnreachable::Unanswered)
            },
        )
        .await
        .unwrap();
    assert!(crashed.is_err());
    assert_eq!(
        node.store.job_events(job.job_id).await.unwrap()[0].status,
        "PENDING"
    );

    // The next relay round publishes it again and marks it.
    let report = node
        .store
        .drain_outbox(
            10,
            10,
            |_| Duration::ZERO,
            |events| publisher.publish(events),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.published, 1);
    let row = &node.store.job_events(job.job_id).await.unwrap()[0];
    assert_eq!(row.status, "PUBLISHED");

    let records = read_until(&topic, WAIT, |r| r.len() >= 2).await;
    let events = events_of(&records);
    assert_eq!(
        events.len(),
        2,
        "at-least-once: the row was delivered twice"
    );
    assert_eq!(
        events[0].event_id, events[1].event_id,
        "with the same event_id, for consumers to dedupe"
    );
    assert_eq!(events[0].event_id, row.event_id.to_string());
    node.stop().await;
}

#[tokio::test]
async fn hostile_request_records_are_dead_lettered_and_their_partition_flows_on() {
    let Stored {
        db,
        server: _server,
        node,
        requests,
        events: _events,
    } = stored_workflow_node().await;
    let producer = producer();

    let nul_id = format!("\u{0}{}", uuid::Uuid::new_v4());
    produce(
        &producer,
        &requests,
        "nul-id",
        &protomolt_e2e::kafka::request_record(&nul_id, "embed-text", "x"),
    )
    .await;
    let nul_input = uuid::Uuid::new_v4().to_string();
    send_request(&producer, &requests, &nul_input, "embed-text", "a\u{0}b").await;
    let taken = uuid::Uuid::new_v4().to_string();
    send_request(&producer, &requests, &taken, "embed-text", "first").await;
    // The same id again, naming a workflow that does not exist: not a redelivery.
    send_request(&producer, &requests, &taken, "no-such-flow", "first").await;
    let good = uuid::Uuid::new_v4().to_string();
    send_request(&producer, &requests, &good, "embed-text", "after them").await;

    node.wait_for_status(&good, "COMPLETED", WAIT).await;
    let job = node.wait_for_status(&taken, "COMPLETED", WAIT).await;
    assert_eq!(
        job["workflow_name"], "embed-text",
        "the first request holds the id"
    );
    let client = db.connect().await;
    let rejects: Vec<(i64, String)> = client
        .query(
            "SELECT record_offset, error FROM workflow_run_request_rejects ORDER BY record_offset",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(rejects.len(), 3, "{rejects:?}");
    assert_eq!(rejects[0].0, 0);
    assert!(
        rejects[0].1.starts_with("no usable job_id ('\\u0000"),
        "{rejects:?}"
    );
    assert_eq!(rejects[1].0, 1);
    assert!(
        rejects[1]
            .1
            .starts_with("input.text: holds a NUL character"),
        "{rejects:?}"
    );
    assert_eq!(rejects[2].0, 3);
    assert!(
        rejects[2]
            .1
            .starts_with(&format!("job {taken} already exists with a different")),
        "{rejects:?}"
    );
    let id = uuid::Uuid::parse_str(&nul_input).unwrap();
    assert!(node.store.get_job(id).await.unwrap().is_none(), "no row");
    node.stop().await;
}

#[tokio::test]
async fn a_jobs_later_events_are_held_behind_its_failed_row_until_redriven() {
    use jobs_role::relay::Publisher;
    let db = TestDatabase::create().await;
    // No relay runs on this node: the test drives one by hand.
    let (node, config, job) = hand_driven_lanes_node(&db).await;
    let topic = config.events_topic.clone();
    // Two more rows of the same job: one too large to publish, one after it.
    let client = db.connect().await;
    let (big, after) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    for (event_id, payload) in [(big, vec![7u8; 5000]), (after, b"row3".to_vec())] {
        client
            .execute(
                "INSERT INTO workflow_run_events_outbox (event_id, job_id, event_type, payload)
                 VALUES ($1::text::uuid, $2::text::uuid, 'STEP_CHECKPOINT', $3)",
                &[&event_id.to_string(), &job.job_id.to_string(), &payload],
            )
            .await
            .unwrap();
    }
    let bootstrap = config.kafka_bootstrap.clone().unwrap();
    let mut strict = config.clone();
    strict
        .kafka_options
        .insert("message.max.bytes".into(), "2000".into());
    let strict = Publisher::new(&strict, &bootstrap).unwrap();
    assert_eq!(
        drain_once(&node.store, &strict).await.published,
        1,
        "ACCEPTED"
    );
    assert_eq!(
        drain_once(&node.store, &strict).await.dead_lettered,
        [big],
        "one attempt allowed"
    );
    let held = drain_once(&node.store, &strict).await;
    assert_eq!(
        held.handled(),
        0,
        "the row after the FAILED one is held: {held:?}"
    );
    let counts = node.store.lane_counts().await.unwrap();
    assert_eq!((counts.failed_events, counts.held_events), (1, 1));
    let statuses = |rows: Vec<jobs_role::store::OutboxRow>| -> Vec<String> {
        rows.into_iter().map(|r| r.status).collect()
    };
    assert_eq!(
        statuses(node.store.job_events(job.job_id).await.unwrap()),
        ["PUBLISHED", "FAILED", "HELD"],
        "the row behind the FAILED one is HELD, out of the relay's scan"
    );

    // The job goes on: its new event is written HELD too, never ahead of the others.
    let claimed = node
        .store
        .claim_next_job("w/loop-0", Duration::from_secs(60))
        .await
        .unwrap()
        .expect("the job is claimable");
    let checkpoint = json!({ "name": "tokenize", "skipped": false, "response": {} });
    node.store
        .append_checkpoint(&claimed.claim, 0, "tokenize", &checkpoint)
        .await
        .unwrap();
    assert_eq!(
        statuses(node.store.job_events(job.job_id).await.unwrap()),
        ["PUBLISHED", "FAILED", "HELD", "HELD"]
    );
    assert_eq!(drain_once(&node.store, &strict).await.handled(), 0);

    // The operator fixes the cause and redrives: the rows follow, in order.
    client
        .execute(
            "UPDATE workflow_run_events_outbox SET payload = 'row2' WHERE event_id = $1::text::uuid",
            &[&big.to_string()],
        )
        .await
        .unwrap();
    let redriven = node
        .ok(
            "redrive-events",
            json!({ "jobIds": [job.job_id.to_string()] }),
        )
        .await;
    assert_eq!(
        (&redriven["jobs"], &redriven["events"]),
        (&json!(1), &json!(1)),
        "{redriven}"
    );
    // The FAILED row starts over; the rows behind it stay HELD until it publishes.
    assert_eq!(
        statuses(node.store.job_events(job.job_id).await.unwrap()),
        ["PUBLISHED", "PENDING", "HELD", "HELD"]
    );
    let again = node
        .ok("redrive-events", json!({ "all": true, "limit": 10 }))
        .await;
    assert_eq!(
        again["jobs"], 0,
        "nothing FAILED is left to redrive: {again}"
    );
    for _ in 0..3 {
        assert_eq!(drain_once(&node.store, &strict).await.published, 1);
    }
    let records = read_until(&topic, WAIT, |r| r.len() >= 4).await;
    let payloads: Vec<&[u8]> = records.iter().map(|r| r.payload.as_slice()).collect();
    assert_eq!(&payloads[1..3], [b"row2".as_slice(), b"row3".as_slice()]);
    let last = WorkflowRunEvent::decode_validated(&records[3].payload).unwrap();
    assert_eq!(last.step, "tokenize", "the checkpoint event came last");
    assert_eq!(node.store.lane_counts().await.unwrap().held_events, 0);
    node.stop().await;
}

/// One relay batch by hand, one publish attempt allowed per row.
async fn drain_once(
    store: &jobs_role::store::Store,
    publisher: &jobs_role::relay::Publisher,
) -> jobs_role::store::DrainReport {
    store
        .drain_outbox(
            10,
            1,
            |_| Duration::ZERO,
            |events| publisher.publish(events),
        )
        .await
        .expect("the outbox is readable")
        .expect("the broker answers")
}

/// The relay never takes a job's PENDING row while an earlier row of that job is
/// FAILED (a row written PENDING by a transaction racing the one that dead-lettered
/// its job's earlier row) or still PENDING (not yet due): a job's events reach the
/// topic in order or not at all. Dropping either half of the relay's guard fails this
/// test.
#[tokio::test]
async fn the_relay_never_takes_a_row_behind_an_earlier_failed_or_pending_one() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let workflow = two_step_workflow("127.0.0.1:1");
    let behind_failed = node.submit(&workflow, json!({ "text": "a" })).await;
    let behind_pending = node.submit(&workflow, json!({ "text": "b" })).await;
    let client = db.connect().await;
    // Each job: its ACCEPTED row first, then a later PENDING row (a copy of it).
    for job in [&behind_failed, &behind_pending] {
        client
            .execute(
                "INSERT INTO workflow_run_events_outbox (event_id, job_id, event_type, payload, status)
                 SELECT gen_random_uuid(), job_id, 'STEP_CHECKPOINT', payload, 'PENDING'
                   FROM workflow_run_events_outbox WHERE job_id = $1::text::uuid",
                &[job],
            )
            .await
            .unwrap();
    }
    // The first job's earlier row is dead-lettered; the second's is not due yet.
    client
        .execute(
            "UPDATE workflow_run_events_outbox SET status = 'FAILED'
              WHERE job_id = $1::text::uuid AND event_type = 'ACCEPTED'",
            &[&behind_failed],
        )
        .await
        .unwrap();
    client
        .execute(
            "UPDATE workflow_run_events_outbox SET next_attempt_at = now() + interval '1 hour'
              WHERE job_id = $1::text::uuid AND event_type = 'ACCEPTED'",
            &[&behind_pending],
        )
        .await
        .unwrap();
    let taken = std::sync::Mutex::new(Vec::new());
    let report = node
        .store
        .drain_outbox(
            100,
            10,
            |_| Duration::from_millis(10),
            |events: Vec<jobs_role::store::PendingEvent>| async {
                let outcomes = events
                    .iter()
                    .map(|_| jobs_role::store::PublishOutcome::Published)
                    .collect();
                taken
                    .lock()
                    .unwrap()
                    .extend(events.into_iter().map(|e| e.job_id));
                Ok::<_, ()>(outcomes)
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.published, 0, "{report:?}");
    assert!(
        taken.lock().unwrap().is_empty(),
        "taken: {:?}",
        taken.lock().unwrap()
    );
    node.stop().await;
}

/// A requests topic read again from its start (its group's offsets expired, or a new
/// group) never runs again a job retention already deleted: the pruner remembers the
/// ids it deletes (`jobs.retention.pruned_ids_ms`), and the request is answered as a
/// replay; the verb refuses the id too. Before, the job was created and run again.
#[tokio::test]
async fn a_replayed_request_whose_job_was_pruned_is_not_run_again() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let mut config = with_lanes(test_config(&db.url, "node-a", 1)).await;
    config.retention.completed_ms = Some(1);
    config.retention.interval_ms = 20;
    let requests = config.requests_topic.clone();
    let node = JobsNode::start(config.clone()).await;
    let workflow = json!({ "workflow": two_step_workflow(&server.target()) });
    node.ok("put-workflow", workflow.clone()).await;
    let job_id = uuid::Uuid::new_v4().to_string();
    send_request(&producer(), &requests, &job_id, "embed-text", "once").await;
    let client = db.connect().await;
    eventually("the job to run, publish and be pruned", WAIT, || async {
        client
            .query_one(
                "SELECT count(*) FROM workflow_run_pruned WHERE job_id = $1::text::uuid",
                &[&job_id],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 1
    })
    .await;
    assert_eq!(server.stats.tokenize_calls(), 1);
    node.stop().await;

    // A node of a new group reads the requests topic from its start.
    let mut replay = config.clone();
    replay.worker_id = "node-b".into();
    replay.consumer_group = format!("replay-{}", uuid::Uuid::new_v4().simple());
    let node_b = JobsNode::start(replay).await;
    node_b.ok("put-workflow", workflow).await;
    eventually("the replayed request to be consumed", WAIT, || async {
        let (_, metrics) = protomolt_e2e::jobs::http_get_text(&node_b.router, "/metrics").await;
        metrics.lines().any(|l| {
            l.starts_with("protomolt_jobs_request_records_total{outcome=\"already_pruned\"} 1")
        })
    })
    .await;
    let rows: i64 = client
        .query_one("SELECT count(*) FROM workflow_run", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "the replay created no job");
    assert_eq!(server.stats.tokenize_calls(), 1, "and ran nothing again");
    let (status, answer) = node_b
        .call(
            "submit-workflow",
            json!({ "jobId": job_id, "workflowName": "embed-text", "input": { "text": "once" } }),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("already ran and retention deleted it"),
        "{answer}"
    );
    node_b.stop().await;
}

/// `redrive-events {all: true}` picks the jobs with a dead-lettered event, oldest
/// first, narrowed by `workflowName`, and says `more` past its limit; hostile and
/// ambiguous selections are refused naming the fix, and nothing changes.
#[tokio::test]
async fn redrive_events_selects_by_workflow_and_limit_and_refuses_ambiguity() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let mut jobs = Vec::new();
    for (i, name) in ["alpha", "alpha", "beta"].iter().enumerate() {
        let mut workflow = two_step_workflow("127.0.0.1:1");
        workflow["name"] = json!(name);
        jobs.push(
            node.submit(&workflow, json!({ "text": format!("{i}") }))
                .await,
        );
    }
    let client = db.connect().await;
    client
        .execute(
            "UPDATE workflow_run_events_outbox SET status = 'FAILED', attempts = 10",
            &[],
        )
        .await
        .unwrap();
    let failed = || async {
        client
            .query_one(
                "SELECT count(*) FROM workflow_run_events_outbox WHERE status = 'FAILED'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    for (body, needle) in [
        (json!({}), "give jobIds (1 to 1,000) or all: true"),
        (json!({ "all": true }), "needs a limit"),
        (
            json!({ "all": true, "limit": 5, "jobIds": [jobs[0]] }),
            "not both",
        ),
        (
            json!({ "jobIds": [jobs[0]], "workflowName": "alpha" }),
            "workflowName narrows all",
        ),
        (json!({ "jobIds": ["not-a-uuid"] }), "jobIds"),
        (json!({ "all": true, "limit": 10_001 }), "limit"),
    ] {
        let (status, answer) = node.call("redrive-events", body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(needle),
            "{body}: {answer}"
        );
    }
    assert_eq!(failed().await, 3, "nothing changed");

    let alpha = node
        .ok(
            "redrive-events",
            json!({ "all": true, "workflowName": "alpha", "limit": 1 }),
        )
        .await;
    assert_eq!(
        alpha["jobIds"],
        json!([jobs[0]]),
        "the oldest first: {alpha}"
    );
    assert_eq!(alpha["more"], true, "{alpha}");
    let rest = node
        .ok("redrive-events", json!({ "all": true, "limit": 10 }))
        .await;
    assert_eq!(rest["jobs"], 2, "{rest}");
    assert_eq!(rest["more"], false, "{rest}");
    assert_eq!(failed().await, 0);
    node.stop().await;
}

#[tokio::test]
async fn a_requests_metadata_is_stored_and_a_bad_key_fails_its_job_saying_which() {
    use prost::Message as _;
    let Stored {
        db: _db,
        server: _server,
        node,
        requests,
        events: _,
    } = stored_workflow_node().await;
    let producer = producer();
    let record = |job_id: &str, metadata: &[(&str, &str)]| {
        jobs_proto::v1::WorkflowRunRequest {
            job_id: job_id.into(),
            workflow_name: "embed-text".into(),
            input: Some(prost_types::Struct {
                fields: [(
                    "text".to_owned(),
                    prost_types::Value {
                        kind: Some(prost_types::value::Kind::StringValue("meta".into())),
                    },
                )]
                .into(),
            }),
            metadata: metadata
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        }
        .encode_to_vec()
    };
    let good = uuid::Uuid::new_v4().to_string();
    produce(
        &producer,
        &requests,
        &good,
        &record(&good, &[("customer", "acme")]),
    )
    .await;
    let job = node.wait_for_status(&good, "COMPLETED", WAIT).await;
    assert_eq!(job["metadata"], json!({ "customer": "acme" }));

    // A job failed after its metadata was checked keeps it.
    let unknown = uuid::Uuid::new_v4().to_string();
    let mut request = jobs_proto::v1::WorkflowRunRequest::decode(
        record(&unknown, &[("customer", "acme")]).as_slice(),
    )
    .expect("decodes");
    request.workflow_name = "no-such-workflow".into();
    produce(&producer, &requests, &unknown, &request.encode_to_vec()).await;
    let job = node.wait_for_status(&unknown, "FAILED", WAIT).await;
    assert_eq!(job["metadata"], json!({ "customer": "acme" }), "{job}");

    let bad = uuid::Uuid::new_v4().to_string();
    produce(
        &producer,
        &requests,
        &bad,
        &record(&bad, &[("Customer", "acme")]),
    )
    .await;
    let job = node.wait_for_status(&bad, "FAILED", WAIT).await;
    let error = job["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("VALIDATION: metadata: key 'Customer'"),
        "{error}"
    );
}
