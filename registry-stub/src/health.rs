//! Health checks for load balancers and orchestrators, unauthenticated:
//!
//! - `GET /healthz`: the process answers (`200 {"status": "ok"}`), nothing more.
//! - `GET /readyz`: every role's readiness checks (the jobs database answers with its
//!   migrations applied, the broker answers when the Kafka lanes are on), run
//!   together, each bounded by [`CHECK_TIMEOUT`]: `200 {"status": "ready", "checks":
//!   {name: "ok"}}`, or `503 {"status": "not ready", "checks": {name: why}}`. An
//!   answer is reused for [`ANSWER_KEPT`], and probes arriving together share one
//!   run, so a flood of probes costs the database and the broker one check a second.
//!
//! A check's failure says what is wrong in words safe to show anyone (the route has no
//! token): the detail that can name hosts or users stays in the node's log.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Map, Value, json};

/// The longest a readiness check may take before it counts as failed.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// One readiness check: `Ok` when ready, or why not.
pub type ReadinessCheck =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// How long a `/readyz` answer is reused: a burst of probes (the route has no
/// token) runs the checks once, not once each.
pub const ANSWER_KEPT: Duration = Duration::from_secs(1);

/// The checks, and the last answer with when it was made; the lock also makes
/// probes arriving together wait for one run instead of each starting their own.
struct Readiness {
    checks: Vec<(String, ReadinessCheck)>,
    last: tokio::sync::Mutex<Option<(Instant, StatusCode, Value)>>,
}

/// `/healthz` and `/readyz` over `checks` (name, check).
pub fn health_routes(checks: Vec<(String, ReadinessCheck)>) -> Router {
    let readiness = Arc::new(Readiness {
        checks,
        last: tokio::sync::Mutex::new(None),
    });
    Router::new()
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({ "status": "ok" })) }),
        )
        .route("/readyz", get(move || ready(readiness.clone())))
}

async fn ready(readiness: Arc<Readiness>) -> Response {
    let mut last = readiness.last.lock().await;
    if let Some((at, status, body)) = last.as_ref()
        && at.elapsed() < ANSWER_KEPT
    {
        return (*status, axum::Json(body.clone())).into_response();
    }
    let results = futures_util::future::join_all(readiness.checks.iter().map(|(name, check)| {
        // Each check runs in a task of its own: one that outlives its time is left
        // to finish there (a query it started is not cut off mid-way and its
        // connection handed back busy).
        let running = tokio::spawn(check());
        async move {
            let result = match tokio::time::timeout(CHECK_TIMEOUT, running).await {
                Ok(Ok(result)) => result,
                Ok(Err(_)) => Err("the check failed".to_owned()),
                Err(_) => Err(format!("no answer within {} s", CHECK_TIMEOUT.as_secs())),
            };
            (name.clone(), result)
        }
    }))
    .await;
    let is_ready = results.iter().all(|(_, result)| result.is_ok());
    let told: Map<String, Value> = results
        .into_iter()
        .map(|(name, result)| (name, json!(result.err().unwrap_or_else(|| "ok".to_owned()))))
        .collect();
    let (status, word) = if is_ready {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    };
    let body = json!({ "status": word, "checks": told });
    *last = Some((Instant::now(), status, body.clone()));
    (status, axum::Json(body)).into_response()
}
