//! `claim-depth`: the claim statement's latency as the table grows: QUEUED rows all
//! eligible, and a few eligible rows behind many backing off or WAITING. Each claim
//! runs inside `BEGIN ... ROLLBACK`, so the table stays as generated.

use std::time::{Duration, Instant};

use jobs_role::store::sql;
use serde_json::json;

use crate::Size;
use crate::report::{Figure, Report, Target, figure, percentile_ms};

/// How the rows the claim must not be slowed by are made.
const FILLERS: [(&str, &str); 3] = [
    ("eligible", "'QUEUED', now() - interval '1 hour', NULL"),
    ("backing off", "'QUEUED', now() + interval '1 hour', NULL"),
    ("WAITING", "'WAITING', now() - interval '1 hour', 'review'"),
];

pub async fn run(size: Size) -> Report {
    let (depths, claims): (&[i64], usize) = match size {
        Size::Tiny => (&[1_000, 10_000], 20),
        Size::Full => (&[1_000, 100_000, 1_000_000], 200),
    };
    let db = crate::setup::migrated_database().await;
    let mut client = db.connect().await;
    // Every row names one snapshot, filed once (hex: safe inside the SQL below).
    let digest = protomolt_e2e::jobs::file_snapshot(&client, &json!({})).await;
    let mut figures: Vec<Figure> = Vec::new();
    let mut first_p50 = None;
    // The plain claim's p50 at the largest depth of eligible rows.
    let mut plain_at_depth = None;
    for (kind, columns) in FILLERS {
        for &depth in depths {
            if kind != "eligible" && depth != *depths.last().unwrap_or(&depth) {
                continue;
            }
            client
                .batch_execute("TRUNCATE workflow_run CASCADE")
                .await
                .expect("TRUNCATE");
            // `depth` rows of this kind, then 1,000 eligible rows newer than all of them.
            client
                .batch_execute(&format!(
                    "INSERT INTO workflow_run (job_id, workflow_name, definition_digest, input,
                                               created_at, status, run_after, outstanding_step)
                     SELECT gen_random_uuid(), 'w', '{digest}', '{{}}', now() - interval '2 hours' + i * interval '1 us',
                            {columns}
                       FROM generate_series(1, {depth}) AS i;
                     INSERT INTO workflow_run (job_id, workflow_name, definition_digest, input)
                     SELECT gen_random_uuid(), 'w', '{digest}', '{{}}' FROM generate_series(1, 1000);"
                ))
                .await
                .expect("generating the rows");
            client
                .batch_execute("VACUUM ANALYZE workflow_run")
                .await
                .expect("VACUUM");
            let (p50, p99) = measure(&mut client, claims).await;
            if kind == "eligible" {
                plain_at_depth = Some((depth, p50));
            }
            let label = format!("{depth} {kind} rows");
            let base = *first_p50.get_or_insert(p50);
            let ratio = figure(
                format!("claim p50 at {label} / at {} eligible", depths[0]),
                p50 / base,
                "x",
            );
            figures.push(figure(format!("claim p50 at {label}"), p50, "ms"));
            figures.push(figure(format!("claim p99 at {label}"), p99, "ms"));
            figures.push(ratio.target(Target::AtMost(2.0)));
        }
    }
    if let Some((depth, plain)) = plain_at_depth {
        figures.extend(saturated_key(&mut client, &digest, depth, claims, plain).await);
    }
    Report {
        scenario: "claim-depth",
        params: json!({ "depths": depths, "claims_per_depth": claims }),
        figures,
    }
}

/// Claims one row `claims` times, each inside `BEGIN ... ROLLBACK`: the p50 and p99
/// in milliseconds.
async fn measure(client: &mut tokio_postgres::Client, claims: usize) -> (f64, f64) {
    let claim = client.prepare(sql::CLAIM_JOBS).await.expect("PREPARE");
    let mut samples: Vec<Duration> = Vec::with_capacity(claims);
    for _ in 0..claims {
        let tx = client.transaction().await.expect("BEGIN");
        let started = Instant::now();
        let claimed = tx
            .query(
                &claim,
                &[&"bench", &300_000i64, &1i32, &uuid::Uuid::new_v4()],
            )
            .await
            .expect("the claim");
        samples.push(started.elapsed());
        assert_eq!(claimed.len(), 1, "a row is always eligible");
        tx.rollback().await.expect("ROLLBACK");
    }
    (
        percentile_ms(&mut samples, 50.0),
        percentile_ms(&mut samples, 99.0),
    )
}

/// The keyed claim behind a saturated key: `depth` QUEUED jobs of key A (limit 1, one
/// RUNNING), older than 1,000 eligible jobs of 1,000 other keys; its p50 against the
/// plain claim's at the same depth (`plain`, ms), held to at most 2×.
async fn saturated_key(
    client: &mut tokio_postgres::Client,
    digest: &str,
    depth: i64,
    claims: usize,
    plain: f64,
) -> Vec<Figure> {
    client
        .batch_execute(&format!(
            "TRUNCATE workflow_run CASCADE;
             TRUNCATE workflow_concurrency;
             INSERT INTO workflow_concurrency (key, workflow_name, max_running)
             SELECT 'w:k=' || i, 'w', 1 FROM generate_series(0, 1000) AS i;
             INSERT INTO workflow_run (job_id, workflow_name, definition_digest, input, status, lease_owner,
                                       lease_until, attempt, claims, concurrency_keys)
             VALUES (gen_random_uuid(), 'w', '{digest}', '{{}}', 'RUNNING', 'bench', now() + interval '1 hour',
                     1, 1, ARRAY['w:k=0']);
             INSERT INTO workflow_run (job_id, workflow_name, definition_digest, input, created_at, concurrency_keys)
             SELECT gen_random_uuid(), 'w', '{digest}', '{{}}', now() - interval '2 hours' + i * interval '1 us',
                    ARRAY['w:k=0']
               FROM generate_series(1, {depth}) AS i;
             INSERT INTO workflow_run (job_id, workflow_name, definition_digest, input, concurrency_keys)
             SELECT gen_random_uuid(), 'w', '{digest}', '{{}}', ARRAY['w:k=' || i] FROM generate_series(1, 1000) AS i;"
        ))
        .await
        .expect("generating the keyed rows");
    for table in ["workflow_run", "workflow_concurrency"] {
        client
            .batch_execute(&format!("VACUUM ANALYZE {table}"))
            .await
            .expect("VACUUM");
    }
    let (p50, p99) = measure(client, claims).await;
    let label = format!("{depth} queued jobs of a saturated key");
    vec![
        figure(format!("keyed claim p50 behind {label}"), p50, "ms"),
        figure(format!("keyed claim p99 behind {label}"), p99, "ms"),
        figure(
            format!("keyed claim p50 behind {label} / plain claim p50 at {depth} eligible"),
            p50 / plain,
            "x",
        )
        .target(Target::AtMost(2.0)),
    ]
}
