//! The schema: migrations apply twice as a no-op, constraints refuse what the state
//! machine forbids, the claim stays an index walk with 100k queued rows (a saturated
//! concurrency key's included), and the sweeps read only the rows they move.

use jobs_role::JobStatus;
use jobs_role::store::{migrate, migrate_to, sql};
use protomolt_e2e::TestDatabase;

const INSERT_JOB: &str = "\
INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, status,
                          lease_owner, lease_until, outstanding_step, verdict, error,
                          cancel_reason, finished_at)
VALUES (gen_random_uuid(), 'w', '{}', '{}', $1, $2, $3, $4, $5, $6,
        CASE WHEN $1::text = 'CANCELLED' THEN 'an operator' END,
        CASE WHEN $1::text = 'CANCELLED' THEN now() END)";

/// The first column of every row `query` answers.
async fn first_column<T: for<'a> tokio_postgres::types::FromSql<'a>>(
    client: &tokio_postgres::Client,
    query: &str,
) -> Vec<T> {
    client
        .query(query, &[])
        .await
        .unwrap_or_else(|e| panic!("{query}: {e}"))
        .iter()
        .map(|row| row.get(0))
        .collect()
}

async fn migrated() -> (TestDatabase, tokio_postgres::Client) {
    let db = TestDatabase::create().await;
    let mut client = db.connect().await;
    migrate(&mut client).await.expect("first migration");
    (db, client)
}

#[tokio::test]
async fn migrations_apply_twice_as_a_no_op() {
    let (_db, mut client) = migrated().await;
    migrate(&mut client)
        .await
        .expect("second migration is a no-op");

    let tables: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables
              WHERE table_schema = 'public' ORDER BY table_name",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for expected in [
        "refinery_schema_history",
        "workflow_run",
        "workflow_run_events_outbox",
        "workflow_run_request_rejects",
    ] {
        assert!(
            tables.iter().any(|t| t == expected),
            "{expected} missing from {tables:?}"
        );
    }
    let versions: i64 = client
        .query_one("SELECT count(*) FROM refinery_schema_history", &[])
        .await
        .unwrap()
        .get(0);
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations"))
        .unwrap()
        .count() as i64;
    assert_eq!(versions, files, "each migration recorded once");

    let comment: Option<String> = client
        .query_one(
            "SELECT obj_description('workflow_run'::regclass, 'pg_class')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(comment.unwrap_or_default().contains("entire runtime state"));
}

#[tokio::test]
async fn every_status_of_the_state_machine_is_storable_and_nothing_else() {
    let (_db, client) = migrated().await;
    let lease_until = std::time::SystemTime::now();
    for status in JobStatus::ALL {
        let running = status == JobStatus::Running;
        let owner = running.then_some("worker-1");
        let until = running.then_some(lease_until);
        let step = (status == JobStatus::Waiting).then_some("review");
        let verdict = (status == JobStatus::Completed).then_some("1 steps, output x");
        let error =
            matches!(status, JobStatus::Failed | JobStatus::Dead).then_some("GRPC: UNAVAILABLE");
        client
            .execute(
                INSERT_JOB,
                &[&status.as_str(), &owner, &until, &step, &verdict, &error],
            )
            .await
            .unwrap_or_else(|e| panic!("{status} should be storable: {e}"));
    }

    let refused = |e: tokio_postgres::Error| {
        e.as_db_error()
            .and_then(|d| d.constraint())
            .map(str::to_owned)
    };
    let none: Option<&str> = None;
    let no_time: Option<std::time::SystemTime> = None;

    let err = client
        .execute(
            INSERT_JOB,
            &[&"BOGUS", &none, &no_time, &none, &none, &none],
        )
        .await
        .expect_err("an unknown status is refused");
    assert_eq!(refused(err).as_deref(), Some("workflow_run_status_known"));

    let err = client
        .execute(
            INSERT_JOB,
            &[&"RUNNING", &none, &no_time, &none, &none, &none],
        )
        .await
        .expect_err("RUNNING without a lease is refused");
    assert_eq!(
        refused(err).as_deref(),
        Some("workflow_run_running_is_leased")
    );

    let err = client
        .execute(
            INSERT_JOB,
            &[
                &"QUEUED",
                &Some("w1"),
                &Some(lease_until),
                &none,
                &none,
                &none,
            ],
        )
        .await
        .expect_err("a lease outside RUNNING is refused");
    assert_eq!(
        refused(err).as_deref(),
        Some("workflow_run_lease_only_while_running")
    );

    for (status, constraint) in [
        ("WAITING", "workflow_run_waiting_names_its_step"),
        ("COMPLETED", "workflow_run_completed_has_verdict"),
        ("FAILED", "workflow_run_failure_has_error"),
        ("DEAD", "workflow_run_failure_has_error"),
    ] {
        let err = client
            .execute(INSERT_JOB, &[&status, &none, &no_time, &none, &none, &none])
            .await
            .expect_err("refused");
        assert_eq!(refused(err).as_deref(), Some(constraint), "{status}");
    }

    let err = client
        .execute(
            "UPDATE workflow_run SET attempt = max_attempts + 1 WHERE status = 'QUEUED'",
            &[],
        )
        .await
        .expect_err("attempts beyond the budget are refused");
    assert_eq!(
        refused(err).as_deref(),
        Some("workflow_run_attempts_within_budget")
    );

    let err = client
        .execute(
            "UPDATE workflow_run SET attempt = max_attempts WHERE status = 'QUEUED'",
            &[],
        )
        .await
        .expect_err("a QUEUED row without an attempt left would be stranded");
    assert_eq!(
        refused(err).as_deref(),
        Some("workflow_run_queued_has_an_attempt_left")
    );

    let err = client
        .execute(
            "INSERT INTO workflow_run_events_outbox (event_id, job_id, event_type, payload, status)
             SELECT gen_random_uuid(), job_id, 'ACCEPTED', '\\x00', 'SENT' FROM workflow_run LIMIT 1",
            &[],
        )
        .await
        .expect_err("an unknown outbox status is refused");
    assert_eq!(refused(err).as_deref(), Some("outbox_status_known"));

    let err = client
        .execute(
            "INSERT INTO workflow_run_events_outbox (event_id, job_id, event_type, payload)
             SELECT gen_random_uuid(), job_id, 'CLAIMED', '\\x00' FROM workflow_run LIMIT 1",
            &[],
        )
        .await
        .expect_err("claims are not events");
    assert_eq!(refused(err).as_deref(), Some("outbox_event_type_known"));
}

#[tokio::test]
async fn the_claim_walks_an_index_with_100k_queued_rows() {
    let (_db, mut client) = migrated().await;
    // 100k queued rows, oldest first; the 10 oldest are backing off into the future,
    // and a few thousand rows in other states sit beside them.
    client
        .batch_execute(
            "INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, created_at, run_after)
             SELECT gen_random_uuid(), 'w', '{}', '{}',
                    now() - make_interval(secs => 200000 - i),
                    CASE WHEN i <= 10 THEN now() + interval '1 hour' ELSE now() END
               FROM generate_series(1, 100000) AS i;
             INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, status, verdict)
             SELECT gen_random_uuid(), 'w', '{}', '{}', 'COMPLETED', 'done'
               FROM generate_series(1, 5000);
             ANALYZE workflow_run;",
        )
        .await
        .unwrap();

    let lease_ms: i64 = 300_000;
    let reads = claim_reads(&mut client, 1).await;
    assert_eq!(reads.claimed, 1);
    assert_eq!(reads.seq_scans, 0, "no sequential scan of workflow_run");
    assert!(
        reads.entries("workflow_run_eligible_unkeyed") >= 1,
        "the claim uses the partial index: {:?}",
        reads.by_index
    );
    assert!(
        reads.total() <= 20,
        "the claim reads a handful of index entries, not the queue: {:?}",
        reads.by_index
    );
    // The statement itself claims the oldest eligible row, skipping the ones backing off.
    let expected: String = client
        .query_one(
            "SELECT job_id::text FROM workflow_run WHERE status = 'QUEUED' AND run_after <= now()
              ORDER BY run_after, created_at LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let claimed = client
        .query_one(
            sql::CLAIM_JOBS,
            &[&"worker-1", &lease_ms, &1i32, &uuid::Uuid::new_v4()],
        )
        .await
        .unwrap();
    assert_eq!(claimed.get::<_, i32>("attempt"), 1);
    let row = client
        .query_one(
            "SELECT job_id::text, status, lease_owner, lease_until > now() + interval '4 minutes'
               FROM workflow_run WHERE status = 'RUNNING'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, String>(0),
        expected,
        "the oldest eligible row is claimed"
    );
    assert_eq!(row.get::<_, String>(2), "worker-1");
    assert!(
        row.get::<_, bool>(3),
        "the lease runs the requested five minutes"
    );
}

#[tokio::test]
async fn a_claim_never_walks_the_rows_backing_off() {
    let (_db, mut client) = migrated().await;
    // 50,000 QUEUED rows backing off (a target outage), all older than the 10
    // eligible rows, and 5,000 WAITING rows beside them.
    client
        .batch_execute(
            "INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, created_at, run_after, attempt)
             SELECT gen_random_uuid(), 'w', '{}', '{}', now() - interval '2 hours' + i * interval '1 ms',
                    now() + interval '1 hour', 1
               FROM generate_series(1, 50000) AS i;
             INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, created_at, run_after)
             SELECT gen_random_uuid(), 'w', '{}', '{}', now() - interval '1 minute' + i * interval '1 ms',
                    now() - interval '1 minute'
               FROM generate_series(1, 10) AS i;
             INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, status, outstanding_step)
             SELECT gen_random_uuid(), 'w', '{}', '{}', 'WAITING', 'review' FROM generate_series(1, 5000);
             ANALYZE workflow_run;",
        )
        .await
        .unwrap();
    let reads = claim_reads(&mut client, 10).await;
    assert_eq!(reads.claimed, 10);
    assert_eq!(reads.seq_scans, 0, "no sequential scan of workflow_run");
    assert!(
        reads.entries("workflow_run_eligible_unkeyed") <= 10,
        "index entries read by the claim, none of the 50,000 backing off: {:?}",
        reads.by_index
    );
}

#[tokio::test]
async fn the_claim_by_priority_is_a_range_scan_per_priority_at_depth() {
    let (_db, mut client) = migrated().await;
    // 100,000 eligible rows across the ten priorities, and 50,000 rows of the top
    // priority backing off (older than all of them).
    client
        .batch_execute(
            "INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, created_at, run_after, priority)
             SELECT gen_random_uuid(), 'w', '{}', '{}', now() - interval '2 hours' + i * interval '1 ms',
                    now() + interval '1 hour', 9
               FROM generate_series(1, 50000) AS i;
             INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, created_at, run_after, priority)
             SELECT gen_random_uuid(), 'w', '{}', '{}', now() - interval '1 minute' + i * interval '1 ms',
                    now() - interval '1 minute', i % 10
               FROM generate_series(1, 100000) AS i;
             ANALYZE workflow_run;",
        )
        .await
        .unwrap();
    let reads = claim_reads(&mut client, 10).await;
    assert_eq!(reads.claimed, 10);
    assert_eq!(reads.seq_scans, 0, "no sequential scan of workflow_run");
    assert!(
        reads.entries("workflow_run_eligible_unkeyed") <= 10,
        "index entries read by the claim, none of the 50,000 backing off: {:?}",
        reads.by_index
    );
}

#[tokio::test]
async fn a_saturated_keys_100k_queued_jobs_cost_the_claim_nothing() {
    let (_db, mut client) = migrated().await;
    // Key A: limit 1, one job RUNNING, 100,000 QUEUED. 100 other keys with one
    // QUEUED job each, all younger.
    client
        .batch_execute(
            "INSERT INTO workflow_concurrency (key, workflow_name, max_running)
             SELECT 'w:k=' || i, 'w', 1 FROM generate_series(0, 100) AS i;
             INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, status, lease_owner,
                                       lease_until, attempt, claims, concurrency_keys)
             VALUES (gen_random_uuid(), 'w', '{}', '{}', 'RUNNING', 'n', now() + interval '1 hour', 1, 1,
                     ARRAY['w:k=0']);
             INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, created_at, concurrency_keys)
             SELECT gen_random_uuid(), 'w', '{}', '{}', now() - interval '2 hours' + i * interval '1 ms', ARRAY['w:k=0']
               FROM generate_series(1, 100000) AS i;
             INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, concurrency_keys)
             SELECT gen_random_uuid(), 'w', '{}', '{}', ARRAY['w:k=' || i] FROM generate_series(1, 100) AS i;
             ANALYZE workflow_run;",
        )
        .await
        .unwrap();
    let reads = claim_reads(&mut client, 10).await;
    assert_eq!(reads.claimed, 10, "ten of the other keys' jobs");
    assert_eq!(reads.seq_scans, 0, "no sequential scan of workflow_run");
    assert!(
        reads.total() <= 200,
        "a few index entries per key probed, none of key A's queue: {:?}",
        reads.by_index
    );
}

/// What one claim of `limit` rows read, in a transaction rolled back afterwards.
struct ClaimReads {
    claimed: usize,
    /// Index entries read, by index of `workflow_run`.
    by_index: std::collections::BTreeMap<String, i64>,
    /// Sequential scans of `workflow_run`.
    seq_scans: i64,
}

impl ClaimReads {
    fn entries(&self, index: &str) -> i64 {
        self.by_index.get(index).copied().unwrap_or(0)
    }

    fn total(&self) -> i64 {
        self.by_index.values().sum()
    }
}

/// Runs [`sql::CLAIM_JOBS`] for `limit` rows inside a transaction and reads the
/// transaction's own statistics (`pg_stat_get_xact_*`): what the claim function, its
/// index scans included, read of `workflow_run`.
async fn claim_reads(client: &mut tokio_postgres::Client, limit: i32) -> ClaimReads {
    let tx = client.transaction().await.unwrap();
    let claimed = tx
        .query(
            sql::CLAIM_JOBS,
            &[&"worker-1", &300_000i64, &limit, &uuid::Uuid::new_v4()],
        )
        .await
        .unwrap()
        .len();
    let by_index = tx
        .query(
            "SELECT c.relname::text, pg_stat_get_xact_tuples_returned(c.oid)
               FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
              WHERE i.indrelid = 'workflow_run'::regclass
                AND pg_stat_get_xact_tuples_returned(c.oid) > 0",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let seq_scans = tx
        .query_one(
            "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'workflow_run'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    tx.rollback().await.unwrap();
    ClaimReads {
        claimed,
        by_index,
        seq_scans,
    }
}

#[tokio::test]
async fn held_rows_stay_out_of_the_relays_scan() {
    let (_db, client) = migrated().await;
    // 500 stuck jobs (a FAILED row and 20 HELD rows each, all older), then 10 healthy
    // jobs with one PENDING row each.
    client
        .batch_execute(
            "
        INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, status, error, finished_at)
        SELECT gen_random_uuid(), 'w', '{}', '{}', 'FAILED', 'e', now() FROM generate_series(1, 510);
        WITH stuck AS (SELECT job_id, row_number() OVER () AS n FROM workflow_run)
        INSERT INTO workflow_run_events_outbox (event_id, job_id, event_type, payload, status, created_at)
        SELECT gen_random_uuid(), job_id, 'STEP_CHECKPOINT', '\\x00',
               CASE WHEN k = 0 THEN 'FAILED' ELSE 'HELD' END,
               now() - interval '1 hour' + k * interval '1 ms'
          FROM stuck, generate_series(0, 20) AS k WHERE n <= 500;
        WITH healthy AS (SELECT job_id, row_number() OVER () AS n FROM workflow_run)
        INSERT INTO workflow_run_events_outbox (event_id, job_id, event_type, payload)
        SELECT gen_random_uuid(), job_id, 'ACCEPTED', '\\x00' FROM healthy WHERE n > 500;
        ANALYZE workflow_run_events_outbox;",
        )
        .await
        .unwrap();
    let explain = format!("EXPLAIN (ANALYZE, FORMAT JSON) {}", sql::CLAIM_OUTBOX_BATCH);
    let plan: serde_json::Value = client.query_one(&explain, &[&100i64]).await.unwrap().get(0);
    let text = plan.to_string();
    assert!(text.contains("outbox_pending"), "the PENDING index: {text}");
    let batch = client
        .query(sql::CLAIM_OUTBOX_BATCH, &[&100i64])
        .await
        .unwrap();
    assert_eq!(batch.len(), 10, "the healthy rows, none of the held ones");
    // The scan reads the PENDING rows only: the 10,000 held rows are not in it.
    let mut scanned = Vec::new();
    collect_scans(&plan, "workflow_run_events_outbox", &mut scanned);
    assert!(
        scanned.iter().all(|rows| *rows <= 10.0),
        "rows read by the scans: {scanned:?}"
    );
    let counts = client.query_one(sql::LANE_COUNTS, &[]).await.unwrap();
    assert_eq!(counts.get::<_, i64>("held"), 10_000);
    assert_eq!(counts.get::<_, i64>("failed"), 500);
}

/// The sweep for parked jobs owed a catch-up on kept events (a park whose catch-up
/// never completed) reads those rows only, through migration V33's partial index:
/// not the 100k jobs parked on review steps, nor the 10k parked on events that caught
/// up.
#[tokio::test]
async fn the_missed_events_sweep_reads_only_the_jobs_owed_a_catch_up() {
    let (_db, mut client) = migrated().await;
    client
        .batch_execute(
            r#"
        INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, status,
                                  outstanding_step, waits, updated_at, events_caught_up_at, attempt)
        SELECT gen_random_uuid(), 'w', '{}', '{}', 'WAITING', 'decide',
               '[{"kind": "external", "step": "decide"}]', now() - interval '1 hour', NULL, 1
          FROM generate_series(1, 100000);
        INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, status,
                                  outstanding_step, waits, updated_at, events_caught_up_at, attempt)
        SELECT gen_random_uuid(), 'w', '{}', '{}', 'WAITING', 'paid',
               '[{"kind": "event", "step": "paid", "key": "k"}]', now() - interval '1 hour',
               CASE WHEN i <= 3 THEN NULL ELSE now() END, 1
          FROM generate_series(1, 10000) AS i;
        ANALYZE workflow_run;"#,
        )
        .await
        .unwrap();
    let tx = client.transaction().await.unwrap();
    let explain = format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {}",
        sql::REQUEUE_MISSED_SIGNALS
    );
    let plan: serde_json::Value = tx
        .query_one(&explain, &[&500i64, &5_000i64])
        .await
        .unwrap()
        .get(0);
    tx.rollback().await.unwrap();
    let text = plan.to_string();
    assert!(
        text.contains("workflow_run_events_owed"),
        "the index: {text}"
    );
    let mut scanned = Vec::new();
    collect_scans(&plan, "workflow_run", &mut scanned);
    assert!(
        scanned.iter().all(|rows| *rows <= 3.0),
        "rows read by the scans: {scanned:?}"
    );
    let requeued = client
        .query(sql::REQUEUE_MISSED_SIGNALS, &[&500i64, &5_000i64])
        .await
        .unwrap();
    assert_eq!(requeued.len(), 3, "the three jobs owed a catch-up");
}

/// V33 keeps owed what V32 owed: a row caught up before its latest park loses its
/// stamp, a row caught up after it keeps it.
#[tokio::test]
async fn migrating_to_v33_keeps_a_job_owed_a_catch_up_owed() {
    let db = TestDatabase::create().await;
    let mut client = db.connect().await;
    migrate_to(&mut client, 32)
        .await
        .expect("migrations to V32");
    client
        .batch_execute(
            r#"
        INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, status,
                                  outstanding_step, waits, updated_at, events_caught_up_at, attempt)
        VALUES ('00000000-0000-0000-0000-000000000001', 'w', '{}', '{}', 'WAITING', 'paid',
                '[{"kind": "event", "step": "paid", "key": "k"}]', now(), now() - interval '1 hour', 1),
               ('00000000-0000-0000-0000-000000000002', 'w', '{}', '{}', 'WAITING', 'paid',
                '[{"kind": "event", "step": "paid", "key": "k"}]', now() - interval '1 hour', now(), 1);"#,
        )
        .await
        .unwrap();
    migrate(&mut client).await.expect("the rest");
    let stamped: Vec<bool> = first_column(
        &client,
        "SELECT events_caught_up_at IS NOT NULL FROM workflow_run ORDER BY job_id",
    )
    .await;
    assert_eq!(stamped, [false, true], "owed, then caught up");
}

/// The rows every scan of `relation` read (returned plus removed by a filter) in a
/// JSON plan, sub-plans aside.
fn collect_scans(node: &serde_json::Value, relation: &str, rows: &mut Vec<f64>) {
    match node {
        serde_json::Value::Object(fields) => {
            let outbox = fields.get("Relation Name").and_then(|r| r.as_str()) == Some(relation);
            let subplan =
                fields.get("Parent Relationship").and_then(|p| p.as_str()) == Some("SubPlan");
            if let (true, false, Some(actual)) = (
                outbox,
                subplan,
                fields.get("Actual Rows").and_then(|a| a.as_f64()),
            ) {
                let removed = fields
                    .get("Rows Removed by Filter")
                    .and_then(|a| a.as_f64())
                    .unwrap_or(0.0);
                rows.push(actual + removed);
            }
            fields
                .values()
                .for_each(|v| collect_scans(v, relation, rows));
        }
        serde_json::Value::Array(items) => {
            items.iter().for_each(|v| collect_scans(v, relation, rows))
        }
        _ => {}
    }
}

#[tokio::test]
async fn the_kafka_page_names_the_reject_tables_real_columns_and_its_query_runs() {
    let (_db, client) = migrated().await;
    let readme = include_str!("../../docs/kafka.md");
    let start = readme
        .find("kept in the table `workflow_run_request_rejects` (columns `")
        .expect("docs/kafka.md describes the reject table");
    let listed = &readme[start..];
    let listed = &listed[listed.find("(columns `").unwrap() + "(columns `".len()..];
    let listed = &listed[..listed.find('`').unwrap()];
    let columns: Vec<String> = client
        .query(
            "SELECT column_name::text FROM information_schema.columns
              WHERE table_name = 'workflow_run_request_rejects'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for column in listed
        .split(',')
        .map(|c| c.split_whitespace().collect::<String>())
    {
        assert!(
            columns.contains(&column),
            "docs/kafka.md names `{column}`, the table has {columns:?}"
        );
    }
    // The query the page gives runs as written.
    let query = &readme[readme.find("`SELECT topic, partition").unwrap() + 1..];
    let query = &query[..query.find('`').unwrap()];
    let query: String = query.split_whitespace().collect::<Vec<_>>().join(" ");
    client
        .query(query.as_str(), &[])
        .await
        .expect("docs/kafka.md's query runs");
}

#[test]
fn the_development_page_says_why_for_every_pinned_dependency() {
    let manifest = include_str!("../../Cargo.toml");
    let pinned = &manifest[manifest.find("[workspace.dependencies]").unwrap()..];
    let readme = include_str!("../../docs/development.md");
    let start = readme.find("## Dependencies and why").expect("the section");
    let section = &readme[start..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 3)];
    for line in pinned.lines().skip(1) {
        let Some((name, _)) = line.split_once('=') else {
            continue;
        };
        let name = name.trim();
        if name.is_empty() || name.starts_with('#') || name.starts_with('[') {
            continue;
        }
        assert!(
            section.contains(&format!("`{name}`")),
            "docs/development.md's 'Dependencies and why' does not name `{name}`"
        );
    }
}

#[tokio::test]
async fn a_database_that_cannot_be_reached_is_named_with_its_cause_never_its_password() {
    let db = TestDatabase::create().await;
    let missing = db.url.replace(db.name(), "protomolt_no_such_database");
    let error = jobs_role::Store::connect(&missing, 2)
        .await
        .err()
        .expect("no such database")
        .to_string();
    assert!(
        error.contains("protomolt_no_such_database") && error.contains("does not exist"),
        "{error}"
    );

    let closed = "postgres://operator:s3cret-passw0rd@127.0.0.1:1/jobs";
    let error = jobs_role::Store::connect(closed, 2)
        .await
        .err()
        .expect("nothing listens on port 1")
        .to_string();
    assert!(
        error.contains("127.0.0.1:1/jobs as operator") && error.to_lowercase().contains("refused"),
        "{error}"
    );
    assert!(!error.contains("s3cret"), "the password leaked: {error}");
}

#[tokio::test]
async fn the_live_counts_are_an_index_only_scan_of_the_live_statuses() {
    let (_db, client) = migrated().await;
    // Many finished rows and a few live ones: the counts must not walk the history.
    client
        .batch_execute(
            "INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, status, verdict)
             SELECT gen_random_uuid(), 'w' || (i % 7), '{}', '{}', 'COMPLETED', 'done'
               FROM generate_series(1, 50000) AS i;
             INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input)
             SELECT gen_random_uuid(), 'w' || (i % 3), '{}', '{}'
               FROM generate_series(1, 300) AS i;",
        )
        .await
        .unwrap();
    // Alone: VACUUM cannot run in a multi-statement string. It sets the visibility map
    // an index-only scan relies on.
    client
        .batch_execute("VACUUM ANALYZE workflow_run")
        .await
        .unwrap();
    let plan = first_column::<String>(&client, &format!("EXPLAIN {}", sql::LIVE_JOBS))
        .await
        .join("\n");
    assert!(
        plan.contains("Index Only Scan using workflow_run_by_status"),
        "the live counts read workflow_run_by_status alone:\n{plan}"
    );
    let counts: i64 = client
        .query(sql::LIVE_JOBS, &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<_, i64>(2))
        .sum();
    assert_eq!(counts, 300);
    let indexes: Vec<String> = first_column(
        &client,
        "SELECT indexname FROM pg_indexes WHERE tablename = 'workflow_run' ORDER BY 1",
    )
    .await;
    assert!(
        !indexes.contains(&"workflow_run_live_by_workflow".to_owned()),
        "V17 dropped the index every live status change paid for: {indexes:?}"
    );
}

/// A database error names PostgreSQL's message and SQLSTATE wherever it is logged (the
/// pruner's failed round said only `database error: db error`).
#[tokio::test]
async fn a_database_error_names_postgresqls_message_and_sqlstate() {
    let db = TestDatabase::create().await;
    let client = db.connect().await;
    let error = client
        .query("SELECT * FROM no_such_table", &[])
        .await
        .expect_err("no such table");
    let shown = jobs_role::StoreError::from(error).to_string();
    assert!(shown.contains("42P01"), "{shown}");
    assert!(shown.contains("no_such_table"), "{shown}");
    assert!(shown.starts_with("database error: "), "{shown}");
}
