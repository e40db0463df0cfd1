//! `storage`: the bytes a finished one-step job leaves in PostgreSQL, with the
//! fixture's envelope (its descriptors make it about 100 KB): the job rows with
//! their TOAST and indexes, and the snapshots they name, divided by the jobs, after a
//! node drained them. The outbox (the job's events, deleted once published and
//! retained) is reported beside it.

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::JobsNode;
use serde_json::json;
use workflow::testkit::FixtureServer;

use crate::Size;
use crate::report::{Report, Target, figure};
use crate::setup::{node_config, queue_with_sql, tokenize_chain, wait_completed};

/// The bytes of a table with its TOAST and indexes.
const TOTAL_SIZE: &str = "SELECT pg_total_relation_size($1::text::regclass)";

pub async fn run(size: Size) -> Report {
    let jobs = match size {
        Size::Tiny => 1_000,
        Size::Full => 100_000,
    };
    let server = FixtureServer::start().await;
    let workflow = tokenize_chain(&server.target(), 1);
    let db = TestDatabase::create().await;
    let schema = JobsNode::start(node_config(&db, "schema", 0)).await;
    let client = db.connect().await;
    let empty = sizes(&client).await;
    queue_with_sql(&client, &workflow, jobs).await;
    let node = JobsNode::start(node_config(&db, "bench", 256)).await;
    wait_completed(&schema, jobs).await;
    node.stop().await;
    schema.stop().await;
    let drained = sizes(&client).await;
    let per_job = |table: usize| (drained[table] - empty[table]) as f64 / jobs as f64;
    Report {
        scenario: "storage",
        params: json!({ "jobs": jobs, "envelope_bytes": workflow.to_string().len() }),
        figures: vec![
            figure(
                "bytes per finished one-step job (rows, TOAST, indexes, snapshots)",
                per_job(0) + per_job(1),
                "bytes",
            )
            .target(Target::AtMost(2_048.0)),
            figure("of which workflow_snapshot", per_job(1), "bytes"),
            figure(
                "outbox bytes per job (its events, until published)",
                per_job(2),
                "bytes",
            ),
        ],
    }
}

/// The total bytes of the job rows, the snapshots and the outbox, in that order.
async fn sizes(client: &tokio_postgres::Client) -> [i64; 3] {
    let mut bytes = [0; 3];
    for (at, table) in [
        "workflow_run",
        "workflow_snapshot",
        "workflow_run_events_outbox",
    ]
    .into_iter()
    .enumerate()
    {
        bytes[at] = client
            .query_one(TOTAL_SIZE, &[&table])
            .await
            .expect("a table's size")
            .get(0);
    }
    bytes
}
