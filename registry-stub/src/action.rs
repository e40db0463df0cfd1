//! Actions: the verbs of the shared catalog, and the error model of the route.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::http::StatusCode;
use prost_protovalidate::Validator;
use prost_reflect::{DynamicMessage, MessageDescriptor, ReflectMessage};
use serde_json::{Value, json};

/// Transport-level answer codes. Verb answers that are *results* (`{"ok": false,
/// "error": ...}`) are not errors and travel as 200.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// 400: the request is malformed or breaks its rules.
    InvalidArgument,
    /// 401: no valid bearer token.
    Unauthenticated,
    /// 403: the token lacks the verb's scope.
    PermissionDenied,
    /// 404: no such verb.
    NotFound,
    /// 405: a verb is called with a method other than `POST`.
    MethodNotAllowed,
    /// 415: a body that is not declared `application/json`.
    UnsupportedMediaType,
    /// 429: the token is over one of its budgets (`Retry-After` says when to retry
    /// when it is the request rate).
    ResourceExhausted,
    /// 503: the verb is mounted but cannot serve (for example, not configured).
    Unavailable,
    /// 500: something broke; the message never carries internals.
    Internal,
}

impl Code {
    /// The wire name (`invalid_argument`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidArgument => "invalid_argument",
            Code::Unauthenticated => "unauthenticated",
            Code::PermissionDenied => "permission_denied",
            Code::NotFound => "not_found",
            Code::MethodNotAllowed => "method_not_allowed",
            Code::UnsupportedMediaType => "unsupported_media_type",
            Code::ResourceExhausted => "resource_exhausted",
            Code::Unavailable => "unavailable",
            Code::Internal => "internal",
        }
    }

    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        match self {
            Code::InvalidArgument => StatusCode::BAD_REQUEST,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Code::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// A transport error: a code, a message for the caller, and optional details (for
/// example one entry per violated rule or per workflow finding).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct ActionError {
    /// What kind of error.
    pub code: Code,
    /// What happened and how to fix it.
    pub message: String,
    /// Structured details, when there are several problems.
    pub details: Vec<Value>,
}

impl ActionError {
    /// An error with no details.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ActionError {
            code,
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// 400 naming what is wrong.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    /// 503.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(Code::Unavailable, message)
    }

    /// 500. The detail is logged, never sent.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(%detail, "internal error answering a verb");
        Self::new(
            Code::Internal,
            "internal error; the node's log has the details",
        )
    }

    /// Adds structured details.
    pub fn with_details(mut self, details: Vec<Value>) -> Self {
        self.details = details;
        self
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        let mut body = json!({ "code": self.code.as_str(), "message": self.message });
        if !self.details.is_empty() {
            body["details"] = Value::Array(self.details.clone());
        }
        body
    }
}

/// A validated request, as the handler receives it.
///
/// The route parses bodies as proto3 JSON, which accepts each field under its JSON
/// name (`jobId`) or its proto name (`job_id`), and numbers as JSON numbers or
/// decimal strings (`5` or `"5"`). Handlers never see those spellings: [`Self::json`]
/// is the canonical form, keyed by JSON name, scalars as the parser read them
/// (numbers as numbers, enums by name). Message-typed fields (a `Struct` workflow or
/// input) are passed as sent, so the integers in them keep every digit.
#[derive(Debug, Clone)]
pub struct ActionRequest {
    /// The body in canonical form (camelCase keys, scalars as parsed), already known
    /// to match the request message and its rules.
    pub json: Value,
    /// The body parsed as the request message.
    pub message: DynamicMessage,
    /// Who called (the token the gate admitted), for limits kept per caller.
    pub caller: Caller,
    /// The scope that admitted the call: the verb's own, or one of those that also
    /// grant it (see [`Action::also_granted_by`]); `None` when no token was asked for
    /// (a node without `[auth]`, or a call from inside the node). A verb that answers
    /// some scopes less (a reviewer's trimmed view) reads it.
    pub granted: Option<String>,
}

/// Who the gate let through: the token's position in `[auth]`, or `None` when the node
/// has no `[auth]` (or the call did not come through the route). Handlers behind the
/// gate find it in the request's extensions, and verbs in [`ActionRequest::caller`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caller(pub Option<usize>);

impl ActionRequest {
    /// A string field of the body (camelCase name), empty when absent.
    pub fn str(&self, json_name: &str) -> &str {
        self.json
            .get(json_name)
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// A field of the body (camelCase name), if present and not null.
    pub fn get(&self, json_name: &str) -> Option<&Value> {
        self.json.get(json_name).filter(|v| !v.is_null())
    }

    /// A message-typed field (camelCase name) in canonical form, if set: its fields
    /// under their JSON names whichever spelling the caller used, timestamps in RFC
    /// 3339, defaults left out. For fields that are request structure (a filter);
    /// a caller's free-form `Struct` is read as sent, with [`Self::get`].
    pub fn message_json(&self, json_name: &str) -> Option<Value> {
        let descriptor = self.message.descriptor();
        let field = descriptor.fields().find(|f| f.json_name() == json_name)?;
        if !self.message.has_field(&field) {
            return None;
        }
        let options = prost_reflect::SerializeOptions::new()
            .stringify_64_bit_integers(false)
            .skip_default_fields(true);
        match &*self.message.get_field(&field) {
            prost_reflect::Value::Message(inner) => inner
                .serialize_with_options(serde_json::value::Serializer, &options)
                .ok(),
            _ => None,
        }
    }
}

/// What a handler returns: the JSON answer (200), or a transport error.
pub type ActionResult = Result<Value, ActionError>;

type Handler =
    Arc<dyn Fn(ActionRequest) -> Pin<Box<dyn Future<Output = ActionResult> + Send>> + Send + Sync>;

/// One verb of the shared catalog.
#[derive(Clone)]
pub struct Action {
    /// The verb, as in `POST /v1/actions/{verb}`.
    pub name: String,
    /// One sentence for the catalog.
    pub description: String,
    /// The scope a token needs to call it.
    pub scope: String,
    /// Further scopes that grant it too, each for a narrower use the handler tells
    /// apart by [`ActionRequest::granted`].
    pub also_scopes: Vec<String>,
    /// The request message: bodies are parsed as it and checked against its rules.
    pub request: MessageDescriptor,
    /// The response message, documented in the catalog.
    pub response: MessageDescriptor,
    validator: Arc<Validator>,
    handler: Handler,
}

impl std::fmt::Debug for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Action")
            .field("name", &self.name)
            .field("scope", &self.scope)
            .finish()
    }
}

impl Action {
    /// A verb answered by `handler`.
    pub fn new<F, Fut>(
        name: &str,
        description: &str,
        scope: &str,
        request: MessageDescriptor,
        response: MessageDescriptor,
        handler: F,
    ) -> Action
    where
        F: Fn(ActionRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ActionResult> + Send + 'static,
    {
        Action {
            name: name.to_owned(),
            description: description.to_owned(),
            scope: scope.to_owned(),
            also_scopes: Vec::new(),
            request,
            response,
            validator: Arc::new(Validator::new()),
            handler: Arc::new(move |request| Box::pin(handler(request))),
        }
    }

    /// The same verb, granted by `scope` too (a narrower use: the handler tells it
    /// apart by [`ActionRequest::granted`]).
    pub fn also_granted_by(mut self, scope: &str) -> Action {
        self.also_scopes.push(scope.to_owned());
        self
    }

    /// Every scope that grants the verb, its own first.
    pub fn scopes(&self) -> Vec<&str> {
        std::iter::once(self.scope.as_str())
            .chain(self.also_scopes.iter().map(String::as_str))
            .collect()
    }

    /// Parses and validates a body, then runs the handler.
    pub async fn call(&self, body: Value) -> ActionResult {
        self.call_as(body, Caller::default(), None).await
    }

    /// [`Self::call`] on behalf of `caller`, admitted by the scope `granted`.
    pub async fn call_as(
        &self,
        body: Value,
        caller: Caller,
        granted: Option<String>,
    ) -> ActionResult {
        let mut request = self.parse(body)?;
        request.caller = caller;
        request.granted = granted;
        (self.handler)(request).await
    }

    /// Parses a body as the request message and checks its rules; every problem
    /// answers 400 naming the field.
    pub fn parse(&self, body: Value) -> Result<ActionRequest, ActionError> {
        if !body.is_object() {
            return Err(ActionError::invalid(format!(
                "the body of {} must be a JSON object ({})",
                self.name,
                self.request.full_name()
            )));
        }
        let mut track = serde_path_to_error::Track::new();
        let at = serde_path_to_error::Deserializer::new(&body, &mut track);
        let message = DynamicMessage::deserialize(self.request.clone(), at).map_err(|e| {
            let path = track.path().to_string();
            let request = self.request.full_name();
            ActionError::invalid(match path.as_str() {
                // The body as a whole (an unknown field names itself in the message).
                "" | "." => format!("the body does not match {request}: {e}"),
                field => format!("{field}: {e} (the body does not match {request})"),
            })
        })?;
        if let Some(error) = list_over_its_limit(&message, "", 0) {
            return Err(error);
        }
        let violations =
            workflow::failure::violations_of(&self.request, self.validator.validate(&message))
                .map_err(|e| {
                    ActionError::internal(format!(
                        "the rules of {} could not be evaluated: {e}",
                        self.name
                    ))
                })?;
        if violations.is_empty() {
            return Ok(ActionRequest {
                json: canonical_body(&message, &body),
                message,
                caller: Caller::default(),
                granted: None,
            });
        }
        let details: Vec<Value> = violations
            .iter()
            .take(MAX_LISTED_VIOLATIONS)
            .map(|v| json!({ "field": json_path(&self.request, &v.field_path), "rule": v.rule_id, "message": v.message }))
            .collect();
        let listed: Vec<String> = details
            .iter()
            .map(|d| {
                workflow::failure::sentence(
                    d["field"].as_str().unwrap_or_default(),
                    d["message"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        let more = match violations.len().saturating_sub(MAX_LISTED_VIOLATIONS) {
            0 => String::new(),
            n => format!("; and {n} more"),
        };
        Err(ActionError::invalid(format!(
            "invalid {} request: {}{more}",
            self.name,
            listed.join("; ")
        ))
        .with_details(details))
    }
}

/// The most violations one answer lists (the count of the rest is given).
const MAX_LISTED_VIOLATIONS: usize = 50;

/// A list longer than its field's `max_items`, in the request or the messages it
/// holds: the validator checks every item of a list before, or besides, its length,
/// so a million ids would each be checked and each listed. The length is checked
/// first, in time proportional to the number of fields.
fn list_over_its_limit(
    message: &DynamicMessage,
    prefix: &str,
    depth: usize,
) -> Option<ActionError> {
    use prost_protovalidate_types::{FieldConstraintsExt, field_rules};
    use prost_reflect::Value as Field;
    // Request messages are shallow; what lies deeper (Structs) declares no rules.
    if depth > 4
        || message
            .descriptor()
            .full_name()
            .starts_with("google.protobuf.")
    {
        return None;
    }
    for (field, value) in message.fields() {
        let path = format!("{prefix}{}", field.json_name());
        if let Field::List(items) = value {
            let limit = match field.field_constraints() {
                Ok(Some(rules)) => match rules.r#type {
                    Some(field_rules::Type::Repeated(repeated)) => repeated.max_items,
                    _ => None,
                },
                _ => None,
            };
            if let Some(limit) = limit
                && items.len() as u64 > limit
            {
                return Some(ActionError::invalid(format!(
                    "{path}: at most {limit} items, not {}",
                    items.len()
                )));
            }
            for (i, item) in items.iter().enumerate() {
                if let Field::Message(inner) = item
                    && let Some(error) =
                        list_over_its_limit(inner, &format!("{path}[{i}]."), depth + 1)
                {
                    return Some(error);
                }
            }
        } else if let Field::Message(inner) = value
            && let Some(error) = list_over_its_limit(inner, &format!("{path}."), depth + 1)
        {
            return Some(error);
        }
    }
    None
}

/// The canonical form of a parsed body: every set field under its JSON name; scalar
/// and repeated-scalar fields as the parser read them; message fields as the caller
/// sent them (under whichever name they used).
fn canonical_body(message: &DynamicMessage, body: &Value) -> Value {
    let options = prost_reflect::SerializeOptions::new()
        .stringify_64_bit_integers(false)
        .skip_default_fields(true);
    let mut canonical = serde_json::Map::new();
    for field in message.descriptor().fields() {
        let json_name = field.json_name();
        let sent = body
            .get(json_name)
            .or_else(|| body.get(field.name()))
            .filter(|v| !v.is_null());
        let value = match field.kind() {
            prost_reflect::Kind::Message(_) if !field.is_map() => sent.cloned(),
            _ if message.has_field(&field) => {
                let mut only = DynamicMessage::new(message.descriptor());
                only.set_field(&field, message.get_field(&field).into_owned());
                only.serialize_with_options(serde_json::value::Serializer, &options)
                    .ok()
                    .and_then(|mut one| one.get_mut(json_name).map(Value::take))
            }
            _ => None,
        };
        if let Some(value) = value {
            canonical.insert(json_name.to_owned(), value);
        }
    }
    Value::Object(canonical)
}

/// Rewrites a proto field path (`workflow_name`, `items[2].step_name`) with the JSON
/// names callers use (`workflowName`, `items[2].stepName`).
pub fn json_path(message: &MessageDescriptor, proto_path: &str) -> String {
    let mut current = Some(message.clone());
    proto_path
        .split('.')
        .filter(|s| !s.is_empty())
        .map(|segment| {
            let (name, index) = match segment.find('[') {
                Some(i) => segment.split_at(i),
                None => (segment, ""),
            };
            let field = current.as_ref().and_then(|m| m.get_field_by_name(name));
            current = field.as_ref().and_then(|f| f.kind().as_message().cloned());
            format!(
                "{}{index}",
                field.map_or_else(|| name.to_owned(), |f| f.json_name().to_owned())
            )
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// An error in the route's model: its status and `{"code", "message", "details"}`.
pub(crate) fn error_response(error: &ActionError) -> axum::response::Response {
    use axum::response::IntoResponse;
    (error.code.status(), axum::Json(error.body())).into_response()
}
