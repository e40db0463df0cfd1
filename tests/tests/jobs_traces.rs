//! Traces: one trace follows a job from the submitting request through every segment
//! and step call to its events. An in-process OTLP collector (a tonic server of the
//! trace service) receives the spans the node exports; the fixture server receives
//! the step calls' `traceparent`; the events topic's records carry it too. One test
//! in this binary: it installs the process's tracing subscriber.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually, test_config};
use protomolt_e2e::kafka::{read_until, with_lanes};
use serde_json::json;
use tower::ServiceExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use workflow::testkit::{FixtureServer, two_step_workflow};

const WAIT: Duration = Duration::from_secs(60);

/// The collector: every span it was sent.
#[derive(Default, Clone)]
struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A span's string (or integer) attribute.
fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
        .map(|v| match v {
            AnyValue::StringValue(s) => s.clone(),
            AnyValue::IntValue(i) => i.to_string(),
            other => format!("{other:?}"),
        })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_follows_a_job_from_its_submission_through_every_step_to_its_events() {
    // The collector, on a loopback port.
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let serving = collector.clone();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(serving))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
    });
    let (provider, layer) =
        registry_stub::telemetry::otlp_layer(&format!("http://{address}"), "protomolt-test")
            .expect("the exporter");
    tracing_subscriber::registry().with(layer).init();

    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let config = with_lanes(test_config(&db.url, "busy", 2)).await;
    let events_topic = config.events_topic.clone();
    let node = JobsNode::start(config).await;

    // The caller's own trace: the verb's span, and everything after, join it.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let request = Request::post("/v1/actions/submit-workflow")
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{trace_id}-00f067aa0ba902b7-01"))
        .body(Body::from(
            json!({ "workflow": two_step_workflow(&server.target()), "input": { "text": "traced" } })
                .to_string(),
        ))
        .unwrap();
    let response = node.router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let job_id = answer["jobId"].as_str().unwrap().to_owned();
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    let job = node.job(&job_id).await;
    let stored = job["trace_context"]
        .as_str()
        .expect("the job keeps its trace context");
    assert!(stored.starts_with(&format!("00-{trace_id}-")), "{stored}");

    // The fixture server received the trace with every step call.
    let calls = server.stats.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    for call in &calls {
        let traceparent = call
            .metadata
            .iter()
            .find(|(k, _)| k == "traceparent")
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{} got no traceparent: {:?}", call.method, call.metadata));
        assert!(
            traceparent.starts_with(&format!("00-{trace_id}-")),
            "{traceparent}"
        );
    }

    // The events' records carry it.
    let records = read_until(&events_topic, WAIT, |records| records.len() >= 4).await;
    for record in &records {
        let header = record
            .headers
            .iter()
            .find(|(k, _)| k == "traceparent")
            .map(|(_, v)| v.as_str());
        assert_eq!(
            header,
            Some(stored),
            "every event record names the job's trace"
        );
    }

    // The collector holds one trace: the verb, a segment per claim, a step per call.
    let flushing = provider.clone();
    tokio::task::spawn_blocking(move || flushing.force_flush())
        .await
        .unwrap()
        .expect("the spans are sent");
    eventually("the spans to reach the collector", WAIT, || async {
        let spans = collector.spans.lock().unwrap();
        spans.iter().any(|s| s.name == "segment")
            && spans.iter().filter(|s| s.name == "step").count() >= 2
    })
    .await;
    let spans: Vec<Span> = collector
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|s| hex(&s.trace_id) == trace_id)
        .cloned()
        .collect();
    let named = |name: &str| {
        spans
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect::<Vec<_>>()
    };
    let verbs = named("POST /v1/actions/submit-workflow");
    assert_eq!(
        verbs.len(),
        1,
        "the submit span: {:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    assert_eq!(
        hex(&verbs[0].parent_span_id),
        "00f067aa0ba902b7",
        "the caller's span is its parent"
    );
    let segments = named("segment");
    assert_eq!(segments.len(), 1, "one claim, one segment");
    assert_eq!(
        attribute(&segments[0], "job_id").as_deref(),
        Some(job_id.as_str())
    );
    assert_eq!(
        attribute(&segments[0], "workflow"),
        job["workflow_name"].as_str().map(str::to_owned)
    );
    assert_eq!(attribute(&segments[0], "attempt").as_deref(), Some("1"));
    let steps = named("step");
    let mut step_names: Vec<String> = steps.iter().filter_map(|s| attribute(s, "step")).collect();
    step_names.sort();
    assert_eq!(step_names, ["embed", "tokenize"]);
    for step in &steps {
        assert_eq!(
            step.parent_span_id, segments[0].span_id,
            "each step call is a child of its segment"
        );
    }
    // The fixture's calls carried their own step span's id.
    for call in &calls {
        let traceparent = &call
            .metadata
            .iter()
            .find(|(k, _)| k == "traceparent")
            .unwrap()
            .1;
        let span_id = traceparent.split('-').nth(2).unwrap();
        assert!(
            steps.iter().any(|s| hex(&s.span_id) == span_id),
            "{traceparent}"
        );
    }
    node.stop().await;
    let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
}
