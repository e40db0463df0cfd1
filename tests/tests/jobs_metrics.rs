//! `GET /metrics`: the node's metrics parse as the Prometheus text format, and the
//! counters, histograms and gauges move as a scripted set of jobs runs: completions,
//! a retry, a DEAD job, a parked step, a rejected request record. Real PostgreSQL,
//! the real broker, real fixture servers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually, test_config};
use protomolt_e2e::kafka::{produce, producer, with_lanes};
use registry_stub::auth::{AuthConfig, TokenConfig};
use serde_json::json;
use tower::ServiceExt;
use workflow::testkit::{FixtureOptions, FixtureServer, three_step_workflow, two_step_workflow};

const WAIT: Duration = Duration::from_secs(60);

/// Scrapes `/metrics` (with `token`), parsed.
async fn scrape(
    router: &Router,
    token: Option<&str>,
) -> (StatusCode, Option<prometheus_parse::Scrape>) {
    let mut request = Request::get("/metrics");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    if status != StatusCode::OK {
        return (status, None);
    }
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let lines = text.lines().map(|line| Ok(line.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("the Prometheus text format");
    (status, Some(scrape))
}

/// The sum of the samples named `name` whose labels include every pair of `labels`
/// (a counter, a gauge, or a histogram's `_count`).
fn value(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(buckets) => {
                buckets.iter().map(|b| b.count).fold(0.0, f64::max)
            }
            other => panic!("{name} is {other:?}"),
        })
        .sum()
}

#[tokio::test]
async fn the_metrics_move_as_jobs_complete_retry_die_park_and_requests_are_rejected() {
    let db = TestDatabase::create().await;
    let down = Arc::new(AtomicBool::new(false));
    let server = FixtureServer::start_with(FixtureOptions {
        embed_unavailable: Some(down.clone()),
        ..FixtureOptions::default()
    })
    .await;
    let mut config = with_lanes(test_config(&db.url, "busy", 4)).await;
    config.metrics_interval_ms = 100;
    let requests = config.requests_topic.clone();
    let token = "metrics-token-0123456789";
    let auth = AuthConfig {
        tokens: vec![
            TokenConfig {
                name: "prometheus".into(),
                token: token.into(),
                token_sha256: None,
                scopes: vec!["metrics:read".into()],
                requests_per_minute: None,
                max_body_bytes: None,
            },
            TokenConfig {
                name: "operator".into(),
                token: "operator-token-0123456789".into(),
                token_sha256: None,
                scopes: vec!["*".into()],
                requests_per_minute: None,
                max_body_bytes: None,
            },
        ],
    };
    let node = JobsNode::start_with_auth(config, Some(auth)).await;
    let call = |verb: &'static str, body: serde_json::Value| {
        let router = node.router.clone();
        async move {
            let request = Request::post(format!("/v1/actions/{verb}"))
                .header("authorization", "Bearer operator-token-0123456789")
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .unwrap();
            let response = router.oneshot(request).await.unwrap();
            let status = response.status();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            let answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(status, StatusCode::OK, "{verb}: {answer}");
            answer["jobId"].as_str().unwrap_or_default().to_owned()
        }
    };

    // Without a token, or with one lacking metrics:read: refused.
    assert_eq!(scrape(&node.router, None).await.0, StatusCode::UNAUTHORIZED);

    // Three completions.
    let two_step = two_step_workflow(&server.target());
    let mut completed = Vec::new();
    for i in 0..3 {
        completed.push(
            call(
                "submit-workflow",
                json!({ "workflow": two_step, "input": { "text": format!("c{i}") } }),
            )
            .await,
        );
    }
    for id in &completed {
        node.wait_for_status(id, "COMPLETED", WAIT).await;
    }
    // A retry and a DEAD: Embed answers UNAVAILABLE while `down` holds.
    down.store(true, Ordering::SeqCst);
    let dead = call(
        "submit-workflow",
        json!({ "workflow": two_step, "input": { "text": "dies" }, "maxAttempts": 1 }),
    )
    .await;
    node.wait_for_status(&dead, "DEAD", WAIT).await;
    let retried = call(
        "submit-workflow",
        json!({ "workflow": two_step, "input": { "text": "retries" }, "maxAttempts": 5 }),
    )
    .await;
    eventually("a retry", WAIT, || async {
        node.job(&retried).await["attempt"].as_i64().unwrap_or(0) >= 1
            && node.job(&retried).await["status"] != "RUNNING"
    })
    .await;
    down.store(false, Ordering::SeqCst);
    node.wait_for_status(&retried, "COMPLETED", WAIT).await;
    // A parked step.
    let parked = call(
        "submit-workflow",
        json!({ "workflow": three_step_workflow(&server.target()), "input": { "text": "p" } }),
    )
    .await;
    node.wait_for_status(&parked, "WAITING", WAIT).await;
    // A rejected request record.
    produce(&producer(), &requests, "junk", &[0xde, 0xad, 0xbe, 0xef]).await;

    let deadline = std::time::Instant::now() + WAIT;
    let scraped = loop {
        let (status, scraped) = scrape(&node.router, Some(token)).await;
        assert_eq!(status, StatusCode::OK);
        let scraped = scraped.unwrap();
        let settled = |outcome: &str| {
            value(
                &scraped,
                "protomolt_jobs_settlements_total",
                &[("outcome", outcome)],
            )
        };
        let ready = settled("completed") >= 4.0
            && settled("retried") >= 1.0
            && settled("dead") >= 1.0
            && settled("waiting") >= 1.0
            && value(
                &scraped,
                "protomolt_jobs_request_records_total",
                &[("outcome", "rejected")],
            ) >= 1.0
            && value(&scraped, "protomolt_jobs_waiting", &[("step", "review")]) == 1.0
            && value(&scraped, "protomolt_jobs_parked", &[("kind", "external")]) == 1.0
            && value(
                &scraped,
                "protomolt_jobs_relay_events_total",
                &[("outcome", "published")],
            ) >= 1.0;
        if ready {
            break scraped;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the metrics never showed every scripted event: {:#?}",
            scraped
                .samples
                .iter()
                .filter(|s| s.metric.starts_with("protomolt_jobs"))
                .map(|s| (&s.metric, &s.labels, &s.value))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(value(&scraped, "protomolt_jobs_claims_total", &[]) >= 6.0);
    assert_eq!(
        value(
            &scraped,
            "protomolt_jobs_request_lag",
            &[("partition", "0")]
        ),
        0.0,
        "the one record was consumed"
    );
    assert!(
        value(
            &scraped,
            "protomolt_jobs_step_errors_total",
            &[("code", "UNAVAILABLE"), ("step", "embed")]
        ) >= 2.0,
        "the DEAD job's and the retried job's failed calls"
    );
    assert!(
        value(
            &scraped,
            "protomolt_jobs_step_duration_seconds",
            &[("step", "tokenize")]
        ) >= 4.0,
        "a latency observation per step call"
    );
    assert!(value(&scraped, "protomolt_jobs_segment_duration_seconds", &[]) >= 6.0);
    assert!(
        value(
            &scraped,
            "protomolt_jobs_relay_publish_duration_seconds",
            &[]
        ) >= 1.0
    );
    assert_eq!(
        value(&scraped, "protomolt_jobs_jobs", &[("status", "WAITING")]),
        1.0
    );
    assert!(
        value(
            &scraped,
            "protomolt_jobs_pool_connections",
            &[("state", "idle")]
        ) >= 0.0
    );
    assert!(
        value(
            &scraped,
            "protomolt_http_requests_total",
            &[("verb", "submit-workflow"), ("status", "200")]
        ) >= 6.0
    );
    assert!(
        value(
            &scraped,
            "protomolt_http_request_duration_seconds",
            &[("verb", "submit-workflow")]
        ) >= 6.0
    );

    // A burst of records, then quiet: the lag comes back to 0 (read while idle too,
    // never frozen at a value from mid-burst).
    let junk = producer();
    for _ in 0..30 {
        produce(&junk, &requests, "junk", &[0xde, 0xad]).await;
    }
    eventually("the burst to be consumed and the lag to read 0", WAIT, || async {
        let scraped = scrape(&node.router, Some(token)).await.1.unwrap();
        value(&scraped, "protomolt_jobs_request_records_total", &[("outcome", "rejected")]) >= 31.0
            && scraped.samples.iter().any(|s| {
                s.metric == "protomolt_jobs_request_lag"
                    && matches!(s.value, prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) if v == 0.0)
            })
    })
    .await;

    // Invented verbs never become labels.
    for i in 0..5 {
        let request = Request::post(format!("/v1/actions/made-up-{i}"))
            .header("content-type", "application/json")
            .header("authorization", "Bearer operator-token-0123456789")
            .body(Body::from("{}"))
            .unwrap();
        let _ = node.router.clone().oneshot(request).await.unwrap();
    }
    let scraped = scrape(&node.router, Some(token)).await.1.unwrap();
    assert_eq!(
        value(
            &scraped,
            "protomolt_http_requests_total",
            &[("verb", "unknown"), ("status", "404")]
        ),
        5.0
    );
    assert!(!scraped.samples.iter().any(|s| {
        s.labels
            .get("verb")
            .is_some_and(|v| v.starts_with("made-up"))
    }));

    // The parked job answered: its gauges read 0, and their series stay (an alert on
    // them keeps something to watch); every parked kind is shown, 0 or not.
    call(
        "complete-step",
        json!({ "jobId": parked, "stepName": "review", "response": { "notes": "ok", "score": 2 } }),
    )
    .await;
    node.wait_for_status(&parked, "COMPLETED", WAIT).await;
    let shown_at_zero =
        |scraped: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]| {
            let series: Vec<f64> = scraped
                .samples
                .iter()
                .filter(|s| s.metric == name)
                .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
                .map(|s| match s.value {
                    prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => v,
                    _ => f64::NAN,
                })
                .collect();
            !series.is_empty() && series.iter().all(|v| *v == 0.0)
        };
    eventually("the emptied gauges to read 0", WAIT, || async {
        let scraped = scrape(&node.router, Some(token)).await.1.unwrap();
        shown_at_zero(&scraped, "protomolt_jobs_waiting", &[("step", "review")])
            && shown_at_zero(&scraped, "protomolt_jobs_jobs", &[("status", "WAITING")])
            && ["external", "event", "sleep", "child"]
                .iter()
                .all(|kind| shown_at_zero(&scraped, "protomolt_jobs_parked", &[("kind", kind)]))
    })
    .await;
    node.stop().await;
}
