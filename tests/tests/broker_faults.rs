//! The events lane against a broker that answers badly, through the test kit's fault
//! proxy (which rewrites Produce answers and keeps the client behind it by rewriting
//! the brokers' ports in Metadata answers).

use std::time::Duration;

use http::StatusCode;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually, http_get, http_get_text, test_config};
use protomolt_e2e::kafka::with_lanes;
use protomolt_e2e::proxy::FaultProxy;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);

/// Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER, as a broker can answer after an unclean
/// leader election.
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
/// Kafka's UNKNOWN_SERVER_ERROR.
const UNKNOWN_SERVER_ERROR: i16 = -1;

/// Outbox rows by status, with the attempts spent on them.
async fn outbox(db: &TestDatabase) -> Vec<(String, i32)> {
    db.connect()
        .await
        .query(
            "SELECT status, attempts FROM workflow_run_events_outbox ORDER BY seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

async fn all_published(db: &TestDatabase, rows: usize) -> bool {
    let now = outbox(db).await;
    now.len() == rows && now.iter().all(|(status, _)| status == "PUBLISHED")
}

/// The node's count of producers rebuilt for `reason` (fatal, stuck), from `/metrics`.
async fn rebuilds(node: &JobsNode, reason: &str) -> u64 {
    let (_, text) = http_get_text(&node.router, "/metrics").await;
    let line = format!("protomolt_jobs_relay_producer_rebuilds_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// A node with the lanes on, its producer behind `proxy`, running no jobs (each
/// submission writes one ACCEPTED event). Publishes time out after 5 s.
async fn lanes_behind(proxy: &FaultProxy, db: &TestDatabase) -> JobsNode {
    let mut config = with_lanes(test_config(&db.url, "relay", 0)).await;
    config.kafka_bootstrap = Some(proxy.addr().to_string());
    config
        .kafka_options
        .insert("message.timeout.ms".into(), "5000".into());
    JobsNode::start(config).await
}

/// One Produce answered OUT_OF_ORDER_SEQUENCE_NUMBER puts librdkafka's idempotent
/// producer in a fatal state. The relay builds a new producer and publishes again,
/// without a restart, spending no attempt. Before, every later batch failed as an
/// outage for as long as the node ran.
#[tokio::test]
async fn a_fatal_producer_error_is_rebuilt_and_the_lane_publishes_again() {
    let db = TestDatabase::create().await;
    let proxy = FaultProxy::kafka_for(&protomolt_e2e::kafka_bootstrap()).await;
    let node = lanes_behind(&proxy, &db).await;
    let workflow = workflow::testkit::two_step_workflow("127.0.0.1:1");
    node.submit(&workflow, json!({ "text": "before" })).await;
    eventually("the first event to be published", WAIT, || async {
        all_published(&db, 1).await
    })
    .await;

    proxy.rewrite_produce_errors(OUT_OF_ORDER_SEQUENCE_NUMBER, 1);
    for i in 0..8 {
        node.submit(&workflow, json!({ "text": format!("after {i}") }))
            .await;
    }
    eventually(
        "the lane to publish again within a minute",
        Duration::from_secs(60),
        || async { all_published(&db, 9).await },
    )
    .await;
    assert_eq!(proxy.stats().rewritten_answers, 1);
    assert!(
        rebuilds(&node, "fatal").await >= 1,
        "the fatal producer was rebuilt for being fatal (not later, as stuck)"
    );
    assert!(
        outbox(&db).await.iter().all(|(_, attempts)| *attempts == 0),
        "a producer fault spends no attempt: {:?}",
        outbox(&db).await
    );
    node.stop().await;
}

/// A broker answering UNKNOWN_SERVER_ERROR more often than a row's publish budget (10)
/// dead-letters nothing: it is not the record's fault. While the lane publishes
/// nothing `/readyz` says so, and once its producer is stuck (a broker that will not
/// take its retries: Tansu 0.6.0 refuses an idempotent retry of a batch it stored)
/// the relay starts a new one. Before, ten hiccups landed a healthy event FAILED
/// and held the job's later ones, while `/readyz` answered ready.
#[tokio::test]
async fn a_broker_that_hiccups_spends_no_attempt_and_readiness_says_so() {
    let db = TestDatabase::create().await;
    let proxy = FaultProxy::kafka_for(&protomolt_e2e::kafka_bootstrap()).await;
    let node = lanes_behind(&proxy, &db).await;
    eventually("the node to be ready", WAIT, || async {
        http_get(&node.router, "/readyz").await.0 == StatusCode::OK
    })
    .await;
    proxy.rewrite_produce_errors(UNKNOWN_SERVER_ERROR, 15);
    let workflow = workflow::testkit::two_step_workflow("127.0.0.1:1");
    node.submit(&workflow, json!({ "text": "hiccup" })).await;
    eventually("/readyz to say the lane cannot publish", WAIT, || async {
        let (status, ready) = http_get(&node.router, "/readyz").await;
        status == StatusCode::SERVICE_UNAVAILABLE
            && ready["checks"]["jobs/broker"]
                .as_str()
                .is_some_and(|why| why.contains("events lane"))
    })
    .await;
    eventually("the event to be published", WAIT, || async {
        all_published(&db, 1).await
    })
    .await;
    assert_eq!(outbox(&db).await, [("PUBLISHED".to_owned(), 0)]);
    eventually("/readyz to be ready again", WAIT, || async {
        http_get(&node.router, "/readyz").await.0 == StatusCode::OK
    })
    .await;
    node.stop().await;
}

/// The node's count of request-consumer recoveries of one `action`, from `/metrics`.
async fn recoveries(node: &JobsNode, action: &str) -> u64 {
    let (_, text) = http_get_text(&node.router, "/metrics").await;
    let line = format!("protomolt_jobs_request_consumer_recoveries_total{{action=\"{action}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// A request record keyed by its job id, naming the stored `embed-text`.
async fn request_embed_text(topic: &str, job_id: &str, text: &str) {
    let request = protomolt_e2e::kafka::request_record(job_id, "embed-text", text);
    let producer = protomolt_e2e::kafka::producer();
    protomolt_e2e::kafka::produce(&producer, topic, job_id, &request).await;
}

/// A request consumer that fetches nothing while the broker answers everything else
/// (its group's committed offset unmoved, records waiting) is noticed from the group's
/// side: it rejoins its group after 30 s and, still stuck 30 s later, replaces its
/// client, whose new connections fetch, and the waiting request runs. librdkafka alone
/// would have waited out its 300 s socket timeout on the withheld answer. Before, the
/// consumer looked only at the partitions it believed it held, and a 2,000-job chaos
/// run ended with 85 requests waiting behind one partition's offset, no rejoin logged.
#[tokio::test]
async fn a_request_consumer_that_fetches_nothing_rejoins_then_is_replaced() {
    let db = TestDatabase::create().await;
    let server = workflow::testkit::FixtureServer::start().await;
    let proxy = FaultProxy::kafka_for(&protomolt_e2e::kafka_bootstrap()).await;
    let mut config = with_lanes(test_config(&db.url, "consumer", 1)).await;
    let requests = config.requests_topic.clone();
    config.kafka_bootstrap = Some(proxy.addr().to_string());
    // librdkafka gives up on a withheld answer only after this (its largest value):
    // nothing but the consumer's own remedies can free it within the test.
    config
        .kafka_options
        .insert("socket.timeout.ms".into(), "300000".into());
    let node = JobsNode::start(config).await;
    node.ok(
        "put-workflow",
        json!({ "workflow": workflow::testkit::two_step_workflow(&server.target()) }),
    )
    .await;
    let first = uuid::Uuid::new_v4().to_string();
    request_embed_text(&requests, &first, "before").await;
    node.wait_for_status(&first, "COMPLETED", WAIT).await;

    proxy.withhold_fetches_on_open_connections();
    let second = uuid::Uuid::new_v4().to_string();
    request_embed_text(&requests, &second, "waiting").await;
    let id = uuid::Uuid::parse_str(&second).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    loop {
        let seen = node.store.get_job(id).await.unwrap().is_some();
        let (rejoins, rebuilds) = (
            recoveries(&node, "rejoin").await,
            recoveries(&node, "rebuild").await,
        );
        if seen {
            assert!(
                rejoins >= 1 && rebuilds >= 1,
                "the request was taken only once a new client fetched: {rejoins} rejoins, {rebuilds} rebuilds"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the stalled consumer was never replaced: {rejoins} rejoins, {rebuilds} rebuilds"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let job = node.wait_for_status(&second, "COMPLETED", WAIT).await;
    assert_eq!(job["result"]["sourceText"], "waiting");
    node.stop().await;
}

/// A group that starts at the end of its topic (`auto.offset.reset = latest`, records
/// already there) has nothing to take, though it has committed nothing below them: its
/// stall watch does not take the records before the end for waiting ones (it would
/// rebalance the group now and then for ever). The first record after the end is
/// taken, and committed.
#[tokio::test]
async fn a_group_that_starts_at_the_end_never_looks_stuck() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let db = TestDatabase::create().await;
    let server = workflow::testkit::FixtureServer::start().await;
    let mut config = with_lanes(test_config(&db.url, "latest", 1)).await;
    let (requests, group) = (config.requests_topic.clone(), config.consumer_group.clone());
    let mut old = Vec::new();
    for i in 0..3 {
        let job = uuid::Uuid::new_v4();
        request_embed_text(&requests, &job.to_string(), &format!("old {i}")).await;
        old.push(job);
    }
    config
        .kafka_options
        .insert("auto.offset.reset".into(), "latest".into());
    let node = JobsNode::start(config).await;
    node.ok(
        "put-workflow",
        json!({ "workflow": workflow::testkit::two_step_workflow(&server.target()) }),
    )
    .await;
    // Past the watch's 30 s (and a look): no condition to wait on for a remedy that
    // must not come.
    tokio::time::sleep(Duration::from_secs(45)).await;
    assert_eq!(recoveries(&node, "rejoin").await, 0, "the group rebalanced");
    let new = uuid::Uuid::new_v4().to_string();
    request_embed_text(&requests, &new, "new").await;
    node.wait_for_status(&new, "COMPLETED", WAIT).await;
    for job in old {
        assert!(
            node.store.get_job(job).await.unwrap().is_none(),
            "nothing before the end was taken"
        );
    }
    let reader: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", protomolt_e2e::kafka_bootstrap())
        .set("group.id", &group)
        .create()
        .unwrap();
    eventually(
        "the group to commit past the record it took",
        WAIT,
        || async {
            let mut partitions = rdkafka::TopicPartitionList::new();
            partitions.add_partition(&requests, 0);
            reader
                .committed_offsets(partitions, Duration::from_secs(5))
                .ok()
                .and_then(|c| c.elements().first().map(|e| e.offset()))
                == Some(rdkafka::Offset::Offset(4))
        },
    )
    .await;
    node.stop().await;
}
