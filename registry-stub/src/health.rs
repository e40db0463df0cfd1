//! Health checks for load balancers and orchestrators, unauthenticated:
//!
//! - `GET /healthz`: the process answers (`200 {"status": "ok"}`), nothing more.
//! - `GET /readyz`: every role's readiness checks (the jobs database answers with its
//!   migrations applied, the broker answers when the Kafka lanes are on), run
//!   together, each bounded by [`CHECK_TIMEOUT`]: `200 {"status": "ready", "checks":
//!   {name: "ok"}}`, or `503 {"status": "not ready", "checks": {name: why}}`.
//!
//! A check's failure says what is wrong in words safe to show anyone (the route has no
//! token): the detail that can name hosts or users stays in the node's log.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

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

/// `/healthz` and `/readyz` over `checks` (name, check).
pub fn health_routes(checks: Vec<(String, ReadinessCheck)>) -> Router {
    let checks = Arc::new(checks);
    Router::new()
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({ "status": "ok" })) }),
        )
        .route("/readyz", get(move || ready(checks.clone())))
}

async fn ready(checks: Arc<Vec<(String, ReadinessCheck)>>) -> Response {
    let results = futures_util::future::join_all(checks.iter().map(|(name, check)| async move {
        let result = match tokio::time::timeout(CHECK_TIMEOUT, check()).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {} s", CHECK_TIMEOUT.as_secs())),
        };
        (name.clone(), result)
    }))
    .await;
    let ready = results.iter().all(|(_, result)| result.is_ok());
    let told: Map<String, Value> = results
        .into_iter()
        .map(|(name, result)| (name, json!(result.err().unwrap_or_else(|| "ok".to_owned()))))
        .collect();
    let (status, word) = if ready {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    };
    (
        status,
        axum::Json(json!({ "status": word, "checks": told })),
    )
        .into_response()
}
