//! `fanout`: one job whose map step (`forEach`, `maxParallel` 64) calls the in-process
//! fixture once per element of a list, beside the one-step drain of as many jobs on
//! the same machine: an element carries less than a job (no row, no claim, no event
//! of its own), so the target is elements/s ≥ jobs/s. And the bytes one element costs
//! PostgreSQL at two list lengths: written (WAL) and kept (the job row, its elements,
//! its events, with TOAST and indexes). A layout that rewrote the elements before the
//! k-th at every write would grow with the list; the target is the same cost per
//! element, within 2×, at both lengths. Beside them, the marginal cost (the long run's
//! less the short one's, per element added), which the job's fixed cost does not blur.

use std::time::{Duration, Instant};

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::JobsNode;
use serde_json::json;
use workflow::testkit::{FixtureServer, distinct_text, map_workflow};

use crate::Size;
use crate::report::{Figure, Report, Target, figure};
use crate::setup::{node_config, tokenize_chain};
use crate::throughput::drain;

/// The tables a map job writes, whose sizes are summed.
const TABLES: [&str; 3] = [
    "workflow_run",
    "workflow_run_items",
    "workflow_run_events_outbox",
];

/// What one map job cost.
struct MapRun {
    /// Elements per second, from the submission's answer to COMPLETED.
    rate: f64,
    /// WAL bytes written per element.
    wal: f64,
    /// Bytes kept per element.
    kept: f64,
}

pub async fn run(size: Size) -> Report {
    let (short, long) = match size {
        Size::Tiny => (100, 500),
        Size::Full => (1_000, 10_000),
    };
    let server = FixtureServer::start().await;
    let target = server.target();
    let jobs_rate = drain(&tokenize_chain(&target, 1), long, 1, 256).await;
    let long_run = one_map(&target, long).await;
    let short_run = one_map(&target, short).await;
    let mut figures = vec![
        figure(
            format!("map elements, {long} in one job"),
            long_run.rate,
            "elements/s",
        ),
        figure(
            format!("one-step jobs, {long} drained"),
            jobs_rate,
            "jobs/s",
        ),
        figure("elements/s over jobs/s", long_run.rate / jobs_rate, "ratio")
            .target(Target::AtLeast(1.0)),
    ];
    let lengths = (short, long);
    figures.extend(per_element("WAL", lengths, short_run.wal, long_run.wal));
    figures.extend(per_element("kept", lengths, short_run.kept, long_run.kept));
    Report {
        scenario: "fanout",
        params: json!({ "elements": [short, long], "max_parallel": 64, "jobs": long }),
        figures,
    }
}

/// A cost per element at the two list lengths (`short`, `long`), its spread (held to
/// 2×) and its marginal figure: the long run's less the short run's, per element added.
fn per_element(
    what: &str,
    (short, long): (usize, usize),
    at_short: f64,
    at_long: f64,
) -> [Figure; 4] {
    let spread = at_short.max(at_long) / at_short.min(at_long).max(f64::MIN_POSITIVE);
    let marginal = (at_long * long as f64 - at_short * short as f64) / (long - short) as f64;
    [
        figure(
            format!("{what} per element, {short} elements"),
            at_short,
            "bytes",
        ),
        figure(
            format!("{what} per element, {long} elements"),
            at_long,
            "bytes",
        ),
        figure(format!("{what} per element, spread"), spread, "ratio").target(Target::AtMost(2.0)),
        figure(
            format!("{what} per element added (marginal)"),
            marginal,
            "bytes",
        ),
    ]
}

/// One job mapping over `elements` ids in a fresh database.
async fn one_map(target: &str, elements: usize) -> MapRun {
    let db = TestDatabase::create().await;
    let mut config = node_config(&db, "fanout", 8);
    // The map's 64 calls at once, beside the segment's own permit.
    config.max_concurrent_per_target = 128;
    let node = JobsNode::start(config).await;
    let client = db.connect().await;
    let before = kept_bytes(&client).await;
    let wal_start: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .expect("the WAL position")
        .get(0);
    let text = distinct_text(elements);
    let started = Instant::now();
    let job_id = node
        .submit(&map_workflow(target, 64), json!({ "text": text }))
        .await;
    node.wait_for_status(&job_id, "COMPLETED", Duration::from_secs(600))
        .await;
    let rate = elements as f64 / started.elapsed().as_secs_f64();
    node.stop().await;
    let wal: f64 = client
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)::float8",
            &[&wal_start],
        )
        .await
        .expect("the WAL written")
        .get(0);
    let kept = kept_bytes(&client).await - before;
    MapRun {
        rate,
        wal: wal / elements as f64,
        kept: kept as f64 / elements as f64,
    }
}

/// The bytes of [`TABLES`] with their TOAST and indexes.
async fn kept_bytes(client: &tokio_postgres::Client) -> i64 {
    let mut total = 0;
    for table in TABLES {
        let bytes: i64 = client
            .query_one(
                "SELECT pg_total_relation_size($1::text::regclass)",
                &[&table],
            )
            .await
            .expect("a table's size")
            .get(0);
        total += bytes;
    }
    total
}
