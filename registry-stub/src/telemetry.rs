//! Traces: `tracing` spans exported as OpenTelemetry spans over OTLP (gRPC) when a
//! node sets `[telemetry].otlp_endpoint`, and the W3C trace context (`traceparent`)
//! carried across process boundaries: from a caller's request into the verb's span,
//! from a submission into the job's row, from the row into every segment, step call
//! and event record. Without an exporter every helper here is a cheap no-op.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C trace context header (HTTP, gRPC metadata, Kafka record headers).
pub const TRACEPARENT: &str = "traceparent";

/// The longest `traceparent` kept (the W3C format is 55 characters; later versions
/// may add fields).
pub const MAX_TRACEPARENT_LEN: usize = 512;

/// The `traceparent` of the current span, when traces are on and it is valid.
pub fn current_traceparent() -> Option<String> {
    let context = tracing::Span::current().context();
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Makes `traceparent` (a caller's, or one stored with a job) the parent of `span`;
/// a malformed or over-long one is ignored (the span starts a trace of its own).
pub fn set_parent(span: &tracing::Span, traceparent: &str) {
    if traceparent.len() > MAX_TRACEPARENT_LEN {
        return;
    }
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    // Fails only when no OpenTelemetry layer is installed: nothing to parent then.
    let _ = span.set_parent(context);
}

/// The OTLP exporter to `endpoint` (`http://collector:4317`) for spans of the
/// service `service`: a provider (keep it; [`SdkTracerProvider::shutdown`] flushes)
/// and the `tracing` layer to install in the subscriber. Spans are batched and sent
/// from a task on the Tokio runtime, so call this from inside one.
pub fn otlp_layer<S>(
    endpoint: &str,
    service: &str,
) -> Result<
    (
        SdkTracerProvider,
        tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>,
    ),
    String,
>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    if !endpoint.starts_with("http://") {
        return Err(format!(
            "telemetry.otlp_endpoint {endpoint}: give an http:// address (this build sends OTLP without TLS; put a local collector or sidecar in front of a TLS one)"
        ));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| format!("telemetry.otlp_endpoint {endpoint}: {e}"))?;
    let batches =
        opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
            exporter,
            opentelemetry_sdk::runtime::Tokio,
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(batches)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(service.to_owned())
                .build(),
        )
        .build();
    let tracer = provider.tracer("protomolt");
    Ok((provider, tracing_opentelemetry::layer().with_tracer(tracer)))
}
