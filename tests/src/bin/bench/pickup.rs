//! `pickup`: an idle node, jobs submitted one at a time with gaps; the time from
//! sending the submission to the first step call arriving at the target (the target
//! figure), and from the submission's answer (its commit) to that call (the engine's
//! own share: the wake-up, the claim and the start of the segment).

use std::time::{Duration, Instant};

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually};
use serde_json::json;
use workflow::testkit::FixtureServer;

use crate::Size;
use crate::report::{Report, Target, figure, percentile_ms};
use crate::setup::{node_config, tokenize_chain};

pub async fn run(size: Size) -> Report {
    let (jobs, gap) = match size {
        Size::Tiny => (10, Duration::from_millis(20)),
        Size::Full => (500, Duration::from_millis(20)),
    };
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let workflow = tokenize_chain(&server.target(), 1);
    let node = JobsNode::start(node_config(&db, "pickup", 32)).await;
    // The first job compiles the workflow; the rest find it cached.
    node.submit(&workflow, json!({ "text": "warm-up" })).await;
    eventually(
        "the warm-up job to start",
        Duration::from_secs(30),
        || async { server.stats.tokenize_calls() == 1 },
    )
    .await;
    let mut samples = Vec::with_capacity(jobs);
    let mut after_commit = Vec::with_capacity(jobs);
    for i in 0..jobs {
        tokio::time::sleep(gap).await;
        let calls = server.stats.tokenize_calls();
        let sent = Instant::now();
        node.submit(&workflow, json!({ "text": format!("idle {i}") }))
            .await;
        let answered = Instant::now();
        while server.stats.tokenize_calls() == calls {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let called = server.stats.last_call_at().unwrap_or_else(Instant::now);
        samples.push(called.saturating_duration_since(sent));
        after_commit.push(called.saturating_duration_since(answered));
    }
    node.stop().await;
    Report {
        scenario: "pickup",
        params: json!({ "jobs": jobs, "gap_ms": gap.as_millis() as u64 }),
        figures: vec![
            figure(
                "submit -> first step call p50",
                percentile_ms(&mut samples, 50.0),
                "ms",
            )
            .target(Target::AtMost(5.0)),
            figure(
                "submit -> first step call p95",
                percentile_ms(&mut samples, 95.0),
                "ms",
            ),
            figure(
                "submit -> first step call p99",
                percentile_ms(&mut samples, 99.0),
                "ms",
            )
            .target(Target::AtMost(20.0)),
            figure(
                "submit answered -> first step call p50",
                percentile_ms(&mut after_commit, 50.0),
                "ms",
            ),
            figure(
                "submit answered -> first step call p99",
                percentile_ms(&mut after_commit, 99.0),
                "ms",
            ),
        ],
    }
}
