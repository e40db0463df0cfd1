//! A broker outage: the relay keeps the events PENDING while the broker is down and
//! delivers every one of them once it is back; a publish the broker cannot take
//! spends no attempt. This test stops and restarts the
//! shared broker through the set-up script, so it lives alone in its own test binary
//! (cargo runs test binaries one after another).

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use jobs_proto::WireMessage;
use jobs_proto::v1::WorkflowRunEvent;
use jobs_role::JobStatus;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually, test_config};
use protomolt_e2e::kafka::{hand_driven_lanes_node, read_until, with_lanes};
use serde_json::json;
use workflow::testkit::{FixtureServer, two_step_workflow};

const JOBS: usize = 200;

fn broker(action: &str) {
    let dev = std::env::var("PROTOMOLT_DEV")
        .expect("PROTOMOLT_DEV is not set: this test stops and restarts the broker through ./dev; run it with ./dev test");
    let status = Command::new(&dev)
        .args(["broker", action])
        .status()
        .expect("./dev broker runs");
    assert!(status.success(), "./dev broker {action} failed");
}

/// Held by each test of this file for its whole run: each stops and restarts the one
/// broker, so run side by side one's outage would land in the middle of the other's
/// (and did: a warm-up or a recovery timed out, now and then).
static BROKER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Stops the broker; restarts it when ended, or when dropped (a failed assertion
/// must not leave the broker down for the tests after this one).
struct Outage {
    ended: bool,
}

impl Outage {
    async fn begin() -> Outage {
        tokio::task::spawn_blocking(|| broker("stop"))
            .await
            .unwrap();
        Outage { ended: false }
    }

    async fn end(mut self) {
        self.ended = true;
        tokio::task::spawn_blocking(|| broker("start"))
            .await
            .unwrap();
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        if !self.ended {
            broker("start");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_wait_out_a_broker_outage_and_all_arrive() {
    let _broker = BROKER.lock().await;
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let config = with_lanes(test_config(&db.url, "node-a", 4)).await;
    let topic = config.events_topic.clone();
    let node = JobsNode::start(config).await;

    // Warm up: one job's events published before the outage.
    let warm = node
        .submit(
            &two_step_workflow(&server.target()),
            json!({ "text": "warm" }),
        )
        .await;
    node.wait_for_status(&warm, "COMPLETED", Duration::from_secs(60))
        .await;
    eventually(
        "the warm-up events to publish",
        Duration::from_secs(60),
        || async { node.store.lane_counts().await.unwrap().pending_events == 0 },
    )
    .await;

    let outage = Outage::begin().await;
    for i in 0..JOBS {
        node.submit(
            &two_step_workflow(&server.target()),
            json!({ "text": format!("{i}") }),
        )
        .await;
    }
    node.wait_for_count(
        JobStatus::Completed,
        JOBS as i64 + 1,
        Duration::from_secs(300),
    )
    .await;
    let counts = node.store.lane_counts().await.unwrap();
    assert_eq!(
        counts.pending_events,
        4 * JOBS as i64,
        "every event of the outage waits PENDING"
    );
    assert_eq!(
        counts.failed_events, 0,
        "nothing was dead-lettered by the outage"
    );
    let attempted: i64 = db
        .connect()
        .await
        .query_one(
            "SELECT count(*) FROM workflow_run_events_outbox WHERE attempts > 0",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        attempted, 0,
        "no publish was attempted against a broker that does not answer"
    );
    outage.end().await;

    eventually(
        "every PENDING row to publish after the outage",
        Duration::from_secs(300),
        || async { node.store.lane_counts().await.unwrap().pending_events == 0 },
    )
    .await;
    let rows: Vec<String> = db
        .connect()
        .await
        .query("SELECT event_id::text FROM workflow_run_events_outbox", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(rows.len(), 4 * (JOBS + 1));
    let records = read_until(&topic, Duration::from_secs(120), |records| {
        // Plain decoding here (this runs per record read); every event is validated below.
        let distinct: HashSet<String> = records
            .iter()
            .filter_map(|r| <WorkflowRunEvent as prost::Message>::decode(r.payload.as_slice()).ok())
            .map(|e| e.event_id)
            .collect();
        distinct.len() >= rows.len()
    })
    .await;
    let distinct: HashSet<String> = records
        .iter()
        .map(|r| {
            WorkflowRunEvent::decode_validated(&r.payload)
                .unwrap()
                .event_id
        })
        .collect();
    assert_eq!(
        distinct,
        rows.into_iter().collect::<HashSet<_>>(),
        "none lost; duplicates only by event_id"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_publish_the_broker_cannot_take_is_an_outage_and_spends_no_attempt() {
    let _broker = BROKER.lock().await;
    use jobs_role::relay::Publisher;
    let db = TestDatabase::create().await;
    // No relay runs on this node: the test drives one by hand.
    let (node, config, job) = hand_driven_lanes_node(&db).await;
    let bootstrap = config.kafka_bootstrap.clone().unwrap();
    let mut impatient = config.clone();
    impatient
        .kafka_options
        .insert("message.timeout.ms".into(), "1500".into());
    let publisher = Publisher::new(&impatient, &bootstrap).unwrap();

    // The broker goes away after the relay's reachability check: every record of the
    // batch times out in the producer. One publish attempt allowed, none spent.
    let outage = Outage::begin().await;
    let report = node
        .store
        .drain_outbox(
            10,
            1,
            |_| Duration::ZERO,
            |events| async {
                Ok::<_, jobs_role::relay::BrokerUnreachable>(publisher.send_all(events).await)
            },
        )
        .await
        .unwrap()
        .unwrap();
    outage.end().await;
    assert_eq!((report.outage, report.published), (1, 0), "{report:?}");
    assert!(
        report.dead_lettered.is_empty(),
        "even with one attempt allowed"
    );
    assert!(
        report
            .outage_error
            .as_deref()
            .unwrap_or_default()
            .contains("timed out"),
        "{report:?}"
    );
    let row = &node.store.job_events(job.job_id).await.unwrap()[0];
    let (status, attempts, _) = node.store.outbox_row(row.event_id).await.unwrap().unwrap();
    assert_eq!((status.as_str(), attempts), ("PENDING", 0));

    let mut published = 0;
    eventually(
        "the row to publish once the broker is back",
        Duration::from_secs(60),
        || {
            let (store, publisher) = (&node.store, &publisher);
            async move {
                let report = store
                    .drain_outbox(
                        10,
                        1,
                        |_| Duration::ZERO,
                        |events| publisher.publish(events),
                    )
                    .await;
                if let Ok(Ok(report)) = report {
                    published += report.published;
                }
                published == 1
            }
        },
    )
    .await;
    node.stop().await;
}
