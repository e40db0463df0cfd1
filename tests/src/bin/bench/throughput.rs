//! `throughput`: a backlog drained by one node (one-step and three-step jobs), by two
//! nodes on one database, and by one node at several in-flight limits (the chart).

use std::time::Instant;

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::JobsNode;
use serde_json::json;
use workflow::testkit::FixtureServer;

use crate::Size;
use crate::report::{Report, Target, figure};
use crate::setup::{node_config, queue_with_sql, tokenize_chain, wait_completed};

/// The figures, and the (in-flight limit, jobs/s) points for the chart.
pub async fn run(size: Size) -> (Report, Vec<(usize, f64)>) {
    let (jobs, limits): (usize, &[usize]) = match size {
        Size::Tiny => (200, &[1, 8, 32]),
        Size::Full => (20_000, &[1, 4, 16, 32, 64, 128, 256]),
    };
    let server = FixtureServer::start().await;
    let target = server.target();
    // Enough segments in flight that each flush carries many jobs (the chart shows
    // the curve); the per-target cap is raised with it (setup::node_config).
    let in_flight = 256;
    let one_step = drain(&tokenize_chain(&target, 1), jobs, 1, in_flight).await;
    let three_step = drain(&tokenize_chain(&target, 3), jobs / 4, 1, in_flight).await;
    let two_nodes = drain(&tokenize_chain(&target, 1), jobs, 2, in_flight).await;
    let keyed = drain_keyed(&tokenize_chain(&target, 1), jobs, in_flight).await;
    let mut points = Vec::new();
    for &limit in limits {
        let sample = (jobs / 4).max(limit * 20);
        points.push((
            limit,
            drain(&tokenize_chain(&target, 1), sample, 1, limit).await,
        ));
    }
    let mut figures = vec![
        figure("one-step jobs, one node", one_step, "jobs/s").target(Target::AtLeast(2500.0)),
        figure("three-step jobs, one node", three_step, "jobs/s"),
        figure("one-step jobs, two nodes", two_nodes, "jobs/s"),
        figure(
            "one-step jobs with 1,000 concurrency keys, one node",
            keyed,
            "jobs/s",
        ),
        figure(
            "one-step jobs with 1,000 concurrency keys / without",
            keyed / one_step,
            "x",
        )
        .target(Target::AtLeast(0.8)),
    ];
    for (limit, rate) in &points {
        figures.push(figure(
            format!("one-step jobs, max_in_flight {limit}"),
            *rate,
            "jobs/s",
        ));
    }
    let report = Report {
        scenario: "throughput",
        params: json!({ "jobs": jobs, "max_in_flight": in_flight, "limits": limits }),
        figures,
    };
    (report, points)
}

/// Queues `jobs` jobs of `workflow` in a fresh database, starts `nodes` nodes with
/// `in_flight` each and times them until every job is COMPLETED: jobs/s.
pub async fn drain(
    workflow: &serde_json::Value,
    jobs: usize,
    nodes: usize,
    in_flight: usize,
) -> f64 {
    let db = TestDatabase::create().await;
    // A node without workers applies the migrations.
    let schema = JobsNode::start(node_config(&db, "schema", 0)).await;
    queue_with_sql(&db.connect().await, workflow, jobs).await;
    let started = Instant::now();
    let mut fleet = Vec::new();
    for n in 0..nodes {
        fleet.push(JobsNode::start(node_config(&db, &format!("bench-{n}"), in_flight)).await);
    }
    wait_completed(&schema, jobs).await;
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    for node in fleet {
        node.stop().await;
    }
    schema.stop().await;
    rate
}

/// [`drain`] of one node, each job holding one of 1,000 concurrency keys (limit 100
/// each, so the limit never binds: the figure is the keys' own cost).
pub async fn drain_keyed(workflow: &serde_json::Value, jobs: usize, in_flight: usize) -> f64 {
    let db = TestDatabase::create().await;
    let schema = JobsNode::start(node_config(&db, "schema", 0)).await;
    let client = db.connect().await;
    queue_with_sql(&client, workflow, jobs).await;
    let name = workflow["name"].as_str().unwrap_or("workflow");
    client
        .batch_execute(&format!(
            "INSERT INTO workflow_concurrency (key, workflow_name, max_running)
             SELECT '{name}:k=' || i, '{name}', 100 FROM generate_series(0, 999) AS i;
             UPDATE workflow_run SET concurrency_keys = ARRAY['{name}:k=' || (abs(hashtext(job_id::text)) % 1000)];"
        ))
        .await
        .expect("keying the backlog");
    client
        .batch_execute("VACUUM ANALYZE workflow_run")
        .await
        .expect("VACUUM");
    let started = Instant::now();
    let node = JobsNode::start(node_config(&db, "bench-keyed", in_flight)).await;
    wait_completed(&schema, jobs).await;
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    node.stop().await;
    schema.stop().await;
    rate
}
