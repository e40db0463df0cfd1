//! `GET /metrics`: the node's metrics in the Prometheus text format (OpenMetrics
//! 1.0, which Prometheus scrapes natively), scope `metrics:read` when `[auth]` is on
//! (Prometheus sends the token with `authorization.credentials`).
//!
//! Each node owns its registry (no process-wide recorder): roles register their
//! metrics while they mount ([`crate::MountContext::metrics`]), and the actions
//! route counts every call by verb and status with its latency
//! (`protomolt_http_requests_total`, `protomolt_http_request_duration_seconds`).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The label set every metric family here uses: name/value pairs.
pub type Labels = Vec<(&'static str, String)>;

/// A histogram family whose buckets are chosen by a plain function.
pub type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

/// Latency buckets from 1 ms to about 65 s, doubling.
pub fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// A family of latency histograms.
pub fn latency_family() -> HistogramFamily {
    Family::new_with_constructor(latency_histogram as fn() -> Histogram)
}

/// `value` made safe as a label value: the text format's escapes (`\\`, `"`, a
/// newline) and other control characters become `_`. prometheus-client writes label
/// values as given, so a name a caller chose (a workflow's) could otherwise break
/// the whole exposition.
pub fn label_value(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if c == '"' || c == '\\' || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// The seconds of `elapsed`, for a histogram.
pub fn seconds(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64()
}

/// The actions route's own metrics.
#[derive(Clone)]
pub struct HttpMetrics {
    requests: Family<Labels, Counter>,
    duration: HistogramFamily,
}

impl HttpMetrics {
    /// Registers the route's metrics in `registry`.
    pub fn register(registry: &mut Registry) -> HttpMetrics {
        let metrics = HttpMetrics {
            requests: Family::default(),
            duration: latency_family(),
        };
        registry.register(
            "protomolt_http_requests",
            "Calls of the actions route, by verb (unknown for a name no role serves) and HTTP status",
            metrics.requests.clone(),
        );
        registry.register(
            "protomolt_http_request_duration_seconds",
            "Latency of the actions route's calls, by verb",
            metrics.duration.clone(),
        );
        metrics
    }

    /// Counts one call of `verb` answered `status` after `elapsed`.
    pub fn observe(&self, verb: &str, status: StatusCode, elapsed: Duration) {
        let verb = vec![("verb", verb.to_owned())];
        self.duration.get_or_create(&verb).observe(seconds(elapsed));
        let mut labels = verb;
        labels.push(("status", status.as_u16().to_string()));
        self.requests.get_or_create(&labels).inc();
    }
}

/// The `/metrics` route over the node's finished registry.
pub fn metrics_router(registry: Arc<Registry>) -> Router {
    Router::new().route("/metrics", get(move || render(registry.clone())))
}

async fn render(registry: Arc<Registry>) -> Response {
    let mut text = String::new();
    match encode(&mut text, &registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(error) => {
            tracing::error!(%error, "encoding the metrics failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
