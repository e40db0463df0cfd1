//! The jobs role's HTTP routes beside the verbs.
//!
//! `GET /v1/jobs/{jobId}/events` (scope `jobs:read`): the job's events as
//! Server-Sent Events, from the outbox as they commit (the Kafka lanes may be off):
//! first those already written, then each as it lands, ending after a terminal event
//! (COMPLETED, FAILED, DEAD, CANCELLED) that is still the job's latest, or whose
//! place cannot be read for 5 s (the database away: a client resumes with
//! `Last-Event-ID`)
//! (a retried job's stream goes on); a job not submitted yet is waited for, up to
//! [`UNKNOWN_JOB_WAIT`] (watch, then submit with your own `jobId`). A stream with
//! nothing left to send (a finished job resumed after its last event) answers 204,
//! which tells a browser's `EventSource` to stop reconnecting. The streams end when
//! the node shuts down. Each SSE event carries the event's id as
//! `id`, its type as `event`, and the `WorkflowRunEvent` in proto3 JSON as `data`. A
//! client reconnecting with `Last-Event-ID` gets only what follows that event; when
//! retention has pruned that event, it gets a first `resumed` event (no `id`) and then
//! every event of the job still kept (they all follow it). A
//! comment line every 15 s keeps idle proxies from closing the stream. Every stream
//! is served by the node's [`crate::watch::Watchers`] hub: one LISTEN connection and
//! one read per wake-up for all of them, at most `[jobs].max_watchers` at once
//! (503 past it), and at most `max_watchers_per_token` to one token (429 past it).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::stream;
use registry_stub::{ActionError, Caller, Code};
use uuid::Uuid;

use crate::actions::{JobsState, store_error};
pub use crate::event_json::event_json;
use crate::status::JobStatus;
use crate::store::{Store, WatchedEvent};
use crate::watch::{NotWatching, Watching};

/// The routes, over the node's jobs state.
pub fn router(state: Arc<JobsState>) -> Router {
    Router::new()
        .route("/v1/jobs/{job_id}/events", get(job_events))
        .with_state(state)
}

/// The route as the node's OpenAPI document describes it.
pub fn openapi_item() -> serde_json::Value {
    serde_json::json!({ "get": {
        "operationId": "watchJobEvents",
        "summary": "A job's events as Server-Sent Events, as they commit, ending after a terminal event that is still the job's latest.",
        "description": "Each SSE event carries the event's id as `id`, its type as `event`, and the WorkflowRunEvent in proto3 JSON as `data`. Reconnect with Last-Event-ID to get only what follows; a first `resumed` event (no id) says retention pruned that event. A job not submitted yet is waited for up to 60 s. 204: nothing left to send.",
        "tags": ["jobs"],
        "security": [{ "bearer": ["jobs:read"] }],
        "x-protomolt-scope": "jobs:read",
        "parameters": [
            { "name": "job_id", "in": "path", "required": true, "schema": { "type": "string", "format": "uuid" } },
            { "name": "Last-Event-ID", "in": "header", "required": false, "schema": { "type": "string" } },
        ],
        "responses": {
            "200": { "description": "The event stream.", "content": { "text/event-stream": { "schema": { "type": "string" } } } },
            "204": { "description": "Nothing left to send: the job finished before the event named by Last-Event-ID." },
            "400": { "$ref": "#/components/responses/invalid_argument" },
            "401": { "$ref": "#/components/responses/unauthenticated" },
            "403": { "$ref": "#/components/responses/permission_denied" },
            "429": { "$ref": "#/components/responses/resource_exhausted" },
            "503": { "$ref": "#/components/responses/unavailable" },
        },
    }})
}

/// The event types after which a job's stream ends.
const TERMINAL: [&str; 4] = ["COMPLETED", "FAILED", "DEAD", "CANCELLED"];

/// How often an idle stream sends a comment line.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How long a stream waits for a job that does not exist (yet) before it ends.
pub const UNKNOWN_JOB_WAIT: Duration = Duration::from_secs(60);

async fn job_events(
    State(state): State<Arc<JobsState>>,
    Path(job_id): Path<String>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
) -> Response {
    let caller = caller.map_or(Caller::default(), |Extension(caller)| caller);
    match open_stream(&state, &job_id, &headers, caller).await {
        Ok(Some(stream)) => Sse::new(stream::unfold(Some(stream), next_event))
            .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
            .into_response(),
        // Nothing follows (a finished job, resumed after its last event): 204 tells
        // a browser's EventSource to stop reconnecting, where an empty 200 would not.
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => (error.code.status(), axum::Json(error.body())).into_response(),
    }
}

/// An open stream: the watch, and what deciding its end needs.
struct JobStream {
    watching: Watching,
    store: Store,
    job_id: Uuid,
    /// For a job that does not exist yet: when to stop waiting for it.
    give_up_at: Option<tokio::time::Instant>,
    /// The pruned `Last-Event-ID` the stream resumed after: told first.
    resumed_after_pruned: Option<Uuid>,
}

async fn open_stream(
    state: &JobsState,
    job_id: &str,
    headers: &HeaderMap,
    caller: Caller,
) -> Result<Option<JobStream>, ActionError> {
    let job_id =
        Uuid::parse_str(job_id).map_err(|e| ActionError::invalid(format!("jobId: {e}")))?;
    let last_event = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| Uuid::parse_str(v.trim()).ok())
                .ok_or_else(|| {
                    ActionError::invalid(
                        "Last-Event-ID: give the id of an event of this job (a UUID)",
                    )
                })?,
        ),
    };
    // The slot first: a node at its bound (or a token at its share) answers before
    // reading anything; the position is set once it is known.
    let watching = state
        .watchers
        .watch(job_id, i64::MAX, caller.0)
        .map_err(|e| match e {
            NotWatching::TokenShare(_) => ActionError::new(Code::ResourceExhausted, e.to_string()),
            _ => ActionError::unavailable(e.to_string()),
        })?;
    // A Last-Event-ID not among the job's events kept (retention pruned it,
    // `published_events_ms`) is not the client's mistake: the job's story resumes
    // with the events still kept, which all follow a pruned one (a job's events are
    // published, and so pruned, in order), after a first `resumed` event that says so.
    let mut resumed_after_pruned = None;
    let after = match last_event {
        None => 0,
        Some(event_id) => match state
            .store
            .event_position(job_id, event_id)
            .await
            .map_err(store_error)?
        {
            Some(position) => position,
            None if state
                .store
                .get_job(job_id)
                .await
                .map_err(store_error)?
                .is_some() =>
            {
                resumed_after_pruned = Some(event_id);
                0
            }
            None => {
                return Err(ActionError::invalid(format!(
                    "Last-Event-ID: job {job_id} does not exist (or retention deleted it), so it has no event {event_id}"
                )));
            }
        },
    };
    watching.start_after(after);
    // A job not submitted yet is waited for (a client may watch before it submits
    // with its own jobId), for a while.
    let job = state.store.get_job(job_id).await.map_err(store_error)?;
    let give_up_at = job
        .is_none()
        .then(|| tokio::time::Instant::now() + UNKNOWN_JOB_WAIT);
    let finished = job
        .as_ref()
        .and_then(|job| job["status"].as_str())
        .and_then(|s| s.parse::<JobStatus>().ok())
        .is_some_and(JobStatus::is_terminal);
    if finished
        && state
            .store
            .latest_event_position(job_id)
            .await
            .map_err(store_error)?
            <= after
    {
        return Ok(None);
    }
    Ok(Some(JobStream {
        watching,
        store: state.store.clone(),
        job_id,
        give_up_at,
        resumed_after_pruned,
    }))
}

/// The first event of a stream whose `Last-Event-ID` retention pruned: named
/// `resumed`, without an `id` (a client's last id stays the pruned one until a real
/// event follows), its data saying what happened.
fn resumed_event(pruned: Uuid) -> Event {
    let data = serde_json::json!({
        "resumedAfter": pruned.to_string(),
        "note": "that event is not among the job's events kept (retention, jobs.retention.published_events_ms, deletes published events): the job's events still kept follow",
    });
    Event::default().event("resumed").data(data.to_string())
}

/// The next SSE event of a stream. It ends after a terminal event that is still the
/// job's latest (a retried job's stream goes on past its DEAD or FAILED), when the
/// node shuts down, or when a job that does not exist has not appeared in time.
async fn next_event(
    stream: Option<JobStream>,
) -> Option<(Result<Event, Infallible>, Option<JobStream>)> {
    let mut stream = stream?;
    if let Some(pruned) = stream.resumed_after_pruned.take() {
        return Some((Ok(resumed_event(pruned)), Some(stream)));
    }
    let event = match stream.give_up_at {
        Some(at) => match tokio::time::timeout_at(at, stream.watching.next()).await {
            Ok(event) => event?,
            Err(_) => return None,
        },
        None => stream.watching.next().await?,
    };
    stream.give_up_at = None;
    let ends = TERMINAL.contains(&event.event_type.as_str())
        && still_the_latest(&stream.store, stream.job_id, event.seq).await;
    let sse = sse_event(&event);
    Some((Ok(sse), (!ends).then_some(stream)))
}

/// Whether the event at `seq` is still the job's latest. While the database does not
/// answer it is asked again, a second apart, for up to [`UNSURE_FOR`] (an outage of a
/// few seconds decides nothing); past that it is taken as the latest and the stream
/// ends: one held open on a guess would hold its watcher slot for as long as
/// keep-alives flow, and resuming with `Last-Event-ID` is exact (what followed, or
/// 204).
async fn still_the_latest(store: &Store, job_id: Uuid, seq: i64) -> bool {
    let deadline = tokio::time::Instant::now() + UNSURE_FOR;
    loop {
        match store.latest_event_position(job_id).await {
            Ok(latest) => return latest <= seq,
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(_) => return true,
        }
    }
}

/// How long a stream asks again whether its terminal event is the latest.
const UNSURE_FOR: Duration = Duration::from_secs(5);

/// An outbox row as an SSE event: `id`, `event` (its type) and `data` (proto3 JSON).
fn sse_event(event: &WatchedEvent) -> Event {
    let data = event_json(&event.payload).unwrap_or_else(|error| {
        // A payload the contract cannot decode was never written by this engine.
        tracing::error!(event_id = %event.event_id, %error, "an outbox payload does not decode");
        serde_json::json!({ "eventId": event.event_id.to_string(), "undecodable": error })
    });
    Event::default()
        .id(event.event_id.to_string())
        .event(event.event_type.as_str())
        .data(data.to_string())
}
