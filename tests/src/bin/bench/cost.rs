//! `cost`: what one one-step job costs PostgreSQL while a node drains a backlog of
//! them: transactions, statements (when `pg_stat_statements` is loaded), rows
//! written per table and how many of the updates were HOT (wrote no index entry),
//! outbox events, WAL records and bytes, each divided by the jobs. The WAL figures
//! are the cluster's: run it on a quiet PostgreSQL.
//!
//! The statements a job runs, most frequent first, go to stderr when
//! `pg_stat_statements` is loaded (`shared_preload_libraries`).

use std::collections::BTreeMap;
use std::time::Duration;

use protomolt_e2e::jobs::JobsNode;
use serde_json::json;
use tokio_postgres::Client;
use workflow::testkit::FixtureServer;

use crate::Size;
use crate::report::{Figure, Report, figure};
use crate::setup::{node_config, queue_with_sql, tokenize_chain, wait_completed};

/// The tables a job writes.
const TABLES: [&str; 2] = ["workflow_run", "workflow_run_events_outbox"];

/// The counters read before and after the drain.
#[derive(Debug, Default)]
struct Counters {
    commits: i64,
    wal_records: i64,
    wal_bytes: f64,
    wal_full_pages: i64,
    /// Per table: inserted, updated, of which HOT, deleted.
    tables: BTreeMap<&'static str, [i64; 4]>,
    /// Per statement text: calls (empty without `pg_stat_statements`).
    statements: BTreeMap<String, i64>,
}

pub async fn run(size: Size) -> Report {
    let jobs = match size {
        Size::Tiny => 500,
        Size::Full => 20_000,
    };
    let server = FixtureServer::start().await;
    let workflow = tokenize_chain(&server.target(), 1);
    let db = crate::setup::migrated_database().await;
    let client = db.connect().await;
    let statements = client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await
        .is_ok()
        && client
            .batch_execute("SELECT pg_stat_statements_reset()")
            .await
            .is_ok();
    queue_with_sql(&client, &workflow, jobs).await;
    // The counters of the statements above reach the shared statistics first.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let before = counters(&client, statements).await;
    let started = std::time::Instant::now();
    let node = JobsNode::start(node_config(&db, "bench", 256)).await;
    wait_completed(&node, jobs).await;
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    node.stop().await;
    // A backend sends its counters at most once a second, and when it exits.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let after = counters(&client, statements).await;

    let per_job = |n: f64| n / jobs as f64;
    let mut figures = vec![
        figure("one-step jobs drained, one node", rate, "jobs/s"),
        figure(
            "transactions committed per job",
            per_job((after.commits - before.commits) as f64),
            "xacts",
        ),
        figure(
            "WAL bytes per job",
            per_job(after.wal_bytes - before.wal_bytes),
            "bytes",
        ),
        figure(
            "WAL records per job",
            per_job((after.wal_records - before.wal_records) as f64),
            "records",
        ),
        figure(
            "WAL full-page images per job",
            per_job((after.wal_full_pages - before.wal_full_pages) as f64),
            "pages",
        ),
    ];
    for table in TABLES {
        let (then, now) = (
            before.tables.get(table).copied().unwrap_or_default(),
            after.tables.get(table).copied().unwrap_or_default(),
        );
        let delta = |i: usize| per_job((now[i] - then[i]) as f64);
        figures.push(figure(
            format!("{table}: rows inserted per job"),
            delta(0),
            "rows",
        ));
        figures.push(figure(
            format!("{table}: rows updated per job"),
            delta(1),
            "rows",
        ));
        figures.push(figure(
            format!("{table}: updates per job that wrote index entries (not HOT)"),
            delta(1) - delta(2),
            "rows",
        ));
        figures.push(figure(
            format!("{table}: rows deleted per job"),
            delta(3),
            "rows",
        ));
    }
    if statements {
        figures.extend(statement_figures(&before, &after, jobs));
    }
    Report {
        scenario: "cost",
        params: json!({ "jobs": jobs, "pg_stat_statements": statements }),
        figures,
    }
}

/// Statements per job in all, and each statement's calls per job to stderr.
fn statement_figures(before: &Counters, after: &Counters, jobs: usize) -> Vec<Figure> {
    let mut calls: Vec<(i64, &str)> = after
        .statements
        .iter()
        .map(|(text, &n)| {
            (
                n - before.statements.get(text).copied().unwrap_or(0),
                text.as_str(),
            )
        })
        .filter(|&(n, _)| n > 0)
        .collect();
    calls.sort_by(|a, b| b.cmp(a));
    let total: i64 = calls.iter().map(|&(n, _)| n).sum();
    eprintln!("statements during the drain, calls per job:");
    for (n, text) in &calls {
        let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let shown: String = text.chars().take(110).collect();
        eprintln!("{:>8.3}  {shown}", *n as f64 / jobs as f64);
    }
    vec![figure(
        "statements per job (pg_stat_statements)",
        total as f64 / jobs as f64,
        "statements",
    )]
}

async fn counters(client: &Client, statements: bool) -> Counters {
    let _ = client
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .await;
    let row = client
        .query_one(
            "SELECT d.xact_commit, w.wal_records, w.wal_bytes::float8, w.wal_fpi
               FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = current_database()",
            &[],
        )
        .await
        .expect("the database's counters");
    let mut counters = Counters {
        commits: row.get(0),
        wal_records: row.get(1),
        wal_bytes: row.get(2),
        wal_full_pages: row.get(3),
        ..Counters::default()
    };
    for table in TABLES {
        let row = client
            .query_one(
                "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
                   FROM pg_stat_user_tables WHERE relname = $1",
                &[&table],
            )
            .await
            .expect("a table's counters");
        counters
            .tables
            .insert(table, [row.get(0), row.get(1), row.get(2), row.get(3)]);
    }
    if statements {
        for row in client
            .query(
                "SELECT query, calls FROM pg_stat_statements
                  WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[],
            )
            .await
            .expect("the statements' counters")
        {
            *counters.statements.entry(row.get(0)).or_default() += row.get::<_, i64>(1);
        }
    }
    counters
}
