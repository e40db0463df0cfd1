//! The shared actions route.
//!
//! - `GET /v1/actions`: the catalog: every verb's name, description, scope, and the
//!   JSON Schemas of its request and response.
//! - `POST /v1/actions/{verb}`: a JSON body (proto3 JSON, camelCase; an empty body
//!   is `{}`), answered with JSON. Any other method on a verb answers 405
//!   (`method_not_allowed`, `Allow: POST`); an unknown verb 404 with the closest name.
//!
//! Handlers stay thin: the route authenticates, finds the verb, checks the scope,
//! parses the body as the verb's request message and checks its rules, and maps every
//! error to `{"code", "message"}` with its HTTP status, in this one place.
//!
//! Every request but a public one passes the [`Gate`] first: the browser checks
//! (`Host`, `Origin`, a JSON `Content-Type`), the bearer token when `[auth]` is on,
//! and the token's budgets. Routes a role contributes get the same protection
//! ([`protected_routes`]) and the same body limit; [`scoped_routes`] also need the
//! token to grant a scope, as a verb does. Routes a role marks public
//! ([`public_routes`], for example a health check) get only the body limit.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::body::{Body, HttpBody};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Extension, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::action::{Action, ActionError, Code, error_response};
use crate::gate::{Caller, Gate, guard};
use crate::metrics::HttpMetrics;
use crate::schema::json_schema;
use tracing::Instrument;

pub use crate::limits::MAX_BODY_BYTES;

/// Every mounted verb, by name.
pub struct Catalog {
    actions: BTreeMap<String, Action>,
}

impl Catalog {
    /// A catalog of `actions` (names are unique: the node checked).
    pub fn new(actions: Vec<Action>) -> Self {
        Catalog {
            actions: actions.into_iter().map(|a| (a.name.clone(), a)).collect(),
        }
    }

    /// The verb called `name`.
    pub fn get(&self, name: &str) -> Option<&Action> {
        self.actions.get(name)
    }

    /// Every verb, by name.
    pub fn actions(&self) -> impl Iterator<Item = &Action> {
        self.actions.values()
    }

    /// The catalog as JSON.
    pub fn describe(&self) -> Value {
        let actions: Vec<Value> = self
            .actions
            .values()
            .map(|a| {
                let mut described = json!({
                    "name": a.name,
                    "description": a.description,
                    "scope": a.scope,
                    "request": json_schema(&a.request),
                    "response": json_schema(&a.response),
                });
                if !a.also_scopes.is_empty() {
                    described["alsoGrantedBy"] = json!(a.also_scopes);
                }
                described
            })
            .collect();
        json!({ "actions": actions })
    }
}

#[derive(Clone)]
struct RouteState {
    catalog: Arc<Catalog>,
    openapi: Arc<Value>,
    gate: Arc<Gate>,
    metrics: HttpMetrics,
}

/// The actions route over `catalog`, behind `gate` (each verb's scope is checked here,
/// once the verb is known), counting calls in `metrics`; beside it the catalog and
/// the node's OpenAPI document `openapi` (any accepted token reads them).
pub fn actions_router(
    catalog: Arc<Catalog>,
    openapi: Arc<Value>,
    gate: Arc<Gate>,
    metrics: HttpMetrics,
) -> Router {
    Router::new()
        .route("/v1/actions", get(list_actions))
        .route("/v1/openapi.json", get(openapi_document))
        .route(
            "/v1/actions/{verb}",
            post(call_action).fallback(verb_method_not_allowed),
        )
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // The last layer added runs first: the gate answers before the body is read.
        .layer(from_fn_with_state((gate.clone(), None), guard))
        .with_state(RouteState {
            catalog,
            openapi,
            gate,
            metrics,
        })
}

/// `routes` behind the body limit and the [`Gate`]: the browser checks, and when
/// `[auth]` is on any accepted token (contributed routes declare no scope) within its
/// budgets. Refusals use the route's error model.
pub fn protected_routes(routes: Router, gate: Arc<Gate>) -> Router {
    public_routes(routes).layer(from_fn_with_state((gate, None), guard))
}

/// As [`protected_routes`], and the token must grant `scope`.
pub fn scoped_routes(routes: Router, gate: Arc<Gate>, scope: &str) -> Router {
    let required = (gate, Some(Arc::<str>::from(scope)));
    public_routes(routes).layer(from_fn_with_state(required, guard))
}

/// `routes` behind the body limit only: no token is asked for.
pub fn public_routes(routes: Router) -> Router {
    routes
        .layer(from_fn(limit_body))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

/// Refuses a body declared larger than [`MAX_BODY_BYTES`] before reading it, and caps
/// the rest, so a handler that reads the raw body stream is bounded too (reading past
/// the cap fails, and axum's extractors answer 413).
async fn limit_body(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        .max(request.body().size_hint().lower());
    if declared > MAX_BODY_BYTES as u64 {
        return error_response(&ActionError::invalid(format!(
            "the body is {declared} bytes; bodies are limited to {} MiB",
            MAX_BODY_BYTES / (1024 * 1024)
        )));
    }
    let (parts, body) = request.into_parts();
    let body = Body::new(http_body_util::Limited::new(body, MAX_BODY_BYTES));
    next.run(Request::from_parts(parts, body)).await
}

async fn list_actions(State(state): State<RouteState>) -> Response {
    (StatusCode::OK, axum::Json(state.catalog.describe())).into_response()
}

async fn openapi_document(State(state): State<RouteState>) -> Response {
    (StatusCode::OK, axum::Json(state.openapi.as_ref().clone())).into_response()
}

async fn call_action(
    State(state): State<RouteState>,
    Path(verb): Path<String>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = std::time::Instant::now();
    // One span per call, named by the catalog (never by what a caller invents), the
    // caller's trace context its parent.
    let known = if state.catalog.get(&verb).is_some() {
        verb.as_str()
    } else {
        "unknown"
    };
    let span = tracing::info_span!("verb", otel.name = %format!("POST /v1/actions/{known}"), otel.kind = "server", verb = %known);
    if let Some(traceparent) = headers
        .get(crate::telemetry::TRACEPARENT)
        .and_then(|v| v.to_str().ok())
    {
        crate::telemetry::set_parent(&span, traceparent);
    }
    let answer = match body {
        Ok(body) => {
            let caller = caller.map_or(Caller(None), |Extension(caller)| caller);
            dispatch(&state, &verb, caller, &body)
                .instrument(span)
                .await
        }
        // Too large (or unreadable): answer in the route's own error model.
        Err(rejection) => Err(ActionError::invalid(format!(
            "the body could not be read ({}); bodies are limited to {} MiB",
            rejection.body_text(),
            MAX_BODY_BYTES / (1024 * 1024)
        ))),
    };
    let status = match &answer {
        Ok(_) => StatusCode::OK,
        Err(e) => e.code.status(),
    };
    tracing::debug!(%verb, status = status.as_u16(), elapsed_ms = started.elapsed().as_millis() as u64, "action");
    // Only the catalog's names become labels: a caller inventing verbs cannot grow
    // the metrics without bound.
    state.metrics.observe(known, status, started.elapsed());
    match answer {
        Ok(value) => (StatusCode::OK, axum::Json(value)).into_response(),
        Err(error) => error_response(&error),
    }
}

/// Any method but `POST` on a verb: 405 in the route's error model, with `Allow`.
async fn verb_method_not_allowed(method: axum::http::Method, Path(verb): Path<String>) -> Response {
    let error = ActionError::new(
        Code::MethodNotAllowed,
        format!(
            "{method} is not allowed on a verb: call it with POST /v1/actions/{verb} and a JSON body (`{{}}` when it needs nothing)"
        ),
    );
    let mut response = error_response(&error);
    response
        .headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
    response
}

async fn dispatch(
    state: &RouteState,
    verb: &str,
    caller: Caller,
    body: &[u8],
) -> Result<Value, ActionError> {
    let action = state.catalog.get(verb).ok_or_else(|| {
        let guess =
            workflow::suggest::did_you_mean(verb, state.catalog.actions.keys().map(String::as_str))
                .map(|g| format!("did you mean '{g}'? "))
                .unwrap_or_default();
        ActionError::new(
            Code::NotFound,
            format!("unknown verb '{verb}': {guess}GET /v1/actions lists the verbs"),
        )
    })?;
    let granted = match state.gate.token(caller) {
        Some(token) => Some(
            token
                .authorize_any(&action.scopes(), verb)
                .inspect_err(|error| state.gate.log_refusal(caller, verb, error))?
                .to_owned(),
        ),
        None => None,
    };
    let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        parse_body(body)?
    };
    action.call_as(body, caller, granted).await
}

/// The body as JSON; a body that does not parse is refused naming where (the path of
/// the field, shortened, as well as the line and column), so that a value nested past
/// the parser's depth limit names the field that holds it.
pub fn parse_body(body: &[u8]) -> Result<Value, ActionError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value: Value = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let mut shown: String = path.chars().take(60).collect();
        if shown.len() < path.len() {
            shown.push('…');
        }
        let inner = e.into_inner();
        if shown.is_empty() || shown == "." {
            ActionError::invalid(format!("the body is not valid JSON: {inner}"))
        } else {
            ActionError::invalid(format!("the body is not valid JSON at {shown}: {inner}"))
        }
    })?;
    deserializer
        .end()
        .map_err(|e| ActionError::invalid(format!("the body is not valid JSON: {e}")))?;
    Ok(value)
}
