//! `memory`: the bench process's resident set with many segments in flight against a
//! slow target (each job's second step waits a minute). The process holds the node
//! and the fixture servers, so the figure is an upper bound for the node alone; run
//! it first (as a run of every scenario does) so no earlier scenario's heap counts.

use std::time::Duration;

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually};
use serde_json::json;
use workflow::testkit::{FixtureOptions, FixtureServer, two_step_workflow};

use crate::Size;
use crate::report::{Report, Target, figure};
use crate::setup::{PATIENCE, node_config, queue_with_sql, rss_mib};

pub async fn run(size: Size) -> Report {
    let segments = match size {
        Size::Tiny => 20,
        Size::Full => 1_000,
    };
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_secs(60)),
        ..Default::default()
    })
    .await;
    let (before, _) = rss_mib();
    let schema = JobsNode::start(node_config(&db, "schema", 0)).await;
    queue_with_sql(
        &db.connect().await,
        &two_step_workflow(&server.target()),
        segments,
    )
    .await;
    let node = JobsNode::start(node_config(&db, "memory", segments)).await;
    eventually("every segment to be in flight", PATIENCE, || async {
        server.stats.max_in_flight() >= segments
    })
    .await;
    let (in_flight, peak) = rss_mib();
    node.stop().await;
    schema.stop().await;
    Report {
        scenario: "memory",
        params: json!({ "segments_in_flight": segments }),
        figures: vec![
            figure(
                format!("RSS with {segments} segments in flight"),
                in_flight,
                "MiB",
            )
            .target(Target::AtMost(150.0)),
            figure(
                "growth from before the node started",
                in_flight - before,
                "MiB",
            ),
            figure("peak RSS of the bench process", peak, "MiB"),
        ],
    }
}
