//! Compiling a descriptor-first JSON envelope into a [`CompiledWorkflow`].
//!
//! ```json
//! { "name": "embed-text",
//!   "schema": { "descriptorSetBase64": "<FileDescriptorSet, imports included>" },
//!   "inputType": "jobs.test.Text",
//!   "deadlineMs": 30000,
//!   "steps": [ { "name": "tokenize", "target": "127.0.0.1:50051",
//!                "method": "jobs.test.Tokenizer/Tokenize", "rules": ["text = input.text"] } ],
//!   "output": { "type": "jobs.test.Embedding", "rules": ["source_text = input.text"] } }
//! ```
//!
//! Step keys: `name`, `target` (`host:port`; optional on external steps), `method`
//! (`package.Service/Method`), `rules`, `when` (CEL), `completion` (`"call"`, the
//! default, or `"external"`), `validate`, `deadlineMs`, `tls`, `maxResponseBytes`, and on
//! external steps `waitTimeoutMs` (how long a parked step may wait for its answer, 1 ms
//! to 366 days) and `onTimeout` (`"fail"`, the default, or `"dead"`).
//!
//! An external step is never called, so instead of a `method` it may declare just its
//! types: `outputType`, the message its answer must be, and optionally `requestType`,
//! the message its `rules` build when the job parks (the request the reviewer is
//! shown, stored as the job's `pendingRequest`).
//!
//! Compilation never stops at the first problem: every missing field, bad value,
//! unknown type or method and (through [`crate::verify`]) every rule that does not
//! type-check is a [`Finding`] naming its step and JSON path. Unknown keys are
//! findings too, so a typo (`"rule"` for `"rules"`) never passes silently.
//!
//! Limits, so a hostile envelope costs little: at most [`MAX_STEPS`] steps, each with
//! at most [`MAX_RULES`] rules; names at most 200 characters; deadlines from 1 ms to
//! one day. Without `output`, the workflow's output is the last step's response.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use prost_protovalidate::Validator;
use prost_reflect::{
    DescriptorPool, DynamicMessage, MessageDescriptor, MethodDescriptor, ReflectMessage,
};
use serde_json::{Map, Value};

use crate::failure::{Violation, violations_of};
pub use crate::finding::{Finding, Findings};
use crate::gate::Gate;
use crate::offload::{self, OffloadError};
use crate::rules::{Rule, parse_rule};
use crate::ruleset::{self, TypeRoot};
use crate::scope::INPUT;
pub use crate::spec::{Completion, OnTimeout};
use crate::spec::{OutputSpec, StepSpec};
use crate::verify;

/// Default bound of one segment of a run.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(30_000);
/// Most steps a workflow may declare.
pub const MAX_STEPS: usize = 200;
/// Most rules one step (or the output mapping) may declare.
pub const MAX_RULES: usize = 200;
/// Longest the runner waits for a response's `buf.validate` check (less when the
/// segment has less left).
pub const RULES_TIME_LIMIT: Duration = Duration::from_secs(1);
const MAX_NAME_CHARS: usize = 200;
/// The largest `maxResponseBytes` a step may declare.
pub const MAX_RESPONSE_BYTES_CEILING: u64 = 256 * 1024 * 1024;
const MAX_DEADLINE_MS: u64 = 86_400_000;
/// The longest an external step may wait for its answer: 366 days.
pub const MAX_WAIT_TIMEOUT_MS: u64 = 366 * 86_400_000;

/// A resolved, verified step.
#[derive(Debug, Clone)]
pub struct CompiledStep {
    /// Unique within the workflow; also the scope name of its response.
    pub name: String,
    /// Position in the workflow.
    pub index: usize,
    /// `host:port` of the gRPC server; `None` only on external steps.
    pub target: Option<String>,
    /// The resolved method; `None` only on an external step declared by its types
    /// (`outputType`, optionally `requestType`).
    pub method: Option<MethodDescriptor>,
    /// The message the rules build: the method's input, an external step's
    /// `requestType` (the request its reviewer is shown), or `None` for an external
    /// step that declares none.
    pub request_type: Option<MessageDescriptor>,
    /// The message the step answers with (what its checkpoint holds): the method's
    /// output or an external step's `outputType`.
    pub response_type: MessageDescriptor,
    /// Mapping rules building the request.
    pub rules: Vec<Rule>,
    /// Optional gate.
    pub when: Option<Gate>,
    /// Called, or completed externally.
    pub completion: Completion,
    /// Check the response against its type's `buf.validate` rules.
    pub validate: bool,
    /// The step's own call deadline.
    pub deadline: Option<Duration>,
    /// Use TLS to reach the target.
    pub tls: bool,
    /// The largest response this step accepts, overriding the runner's limit.
    pub max_response_bytes: Option<usize>,
    /// How long a job parked here waits for its answer (external steps; `None`: the
    /// node's default, if any).
    pub wait_timeout: Option<Duration>,
    /// How a job parked here ends when the wait times out.
    pub on_timeout: OnTimeout,
}

impl CompiledStep {
    /// The message type the step answers with (what its checkpoint holds).
    pub fn output_type(&self) -> MessageDescriptor {
        self.response_type.clone()
    }

    /// True for a `completion: "external"` step.
    pub fn is_external(&self) -> bool {
        self.completion == Completion::External
    }
}

/// How the workflow's output is built.
#[derive(Debug, Clone)]
pub struct OutputMapping {
    /// The output type.
    pub message: MessageDescriptor,
    /// Rules over the whole scope.
    pub rules: Vec<Rule>,
}

/// A workflow ready to run: every type resolved, every rule verified.
#[derive(Clone)]
pub struct CompiledWorkflow {
    /// The workflow's name.
    pub name: String,
    /// Every descriptor of the envelope's schema.
    pub pool: DescriptorPool,
    /// The type of the input.
    pub input_type: MessageDescriptor,
    /// Steps, in order.
    pub steps: Vec<CompiledStep>,
    /// Output mapping; `None` means the last step's response is the output.
    pub output: Option<OutputMapping>,
    /// Bound of one segment of a run.
    pub deadline: Duration,
    envelope: Arc<Value>,
    validator: Arc<Validator>,
}

impl fmt::Debug for CompiledWorkflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledWorkflow")
            .field("name", &self.name)
            .field("input_type", &self.input_type.full_name())
            .field(
                "steps",
                &self.steps.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Why an input (or an externally supplied response) was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MessageError {
    /// The JSON is not proto3 JSON of the expected type.
    #[error("not a valid {type_name} (proto3 JSON): {}{reason}", if .path.is_empty() { String::new() } else { format!("{}: ", .path) })]
    Unparsable {
        /// Full name of the expected type.
        type_name: String,
        /// Where in the JSON (`score`, `items[2].name`); empty for the whole value.
        path: String,
        /// The decoder's complaint ("expected an integer, got string \"x\"").
        reason: String,
    },
    /// The message breaks its type's declared rules.
    #[error("{type_name} breaks its rules: {}", .violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid {
        /// Full name of the type.
        type_name: String,
        /// Every broken rule.
        violations: Vec<Violation>,
    },
    /// The type's rules could not be evaluated (a schema defect).
    #[error("the rules of {type_name} could not be evaluated: {reason}")]
    RulesUnusable {
        /// Full name of the type.
        type_name: String,
        /// The validator's complaint.
        reason: String,
    },
    /// Checking the type's rules took longer than the caller's limit
    /// ([`CompiledWorkflow::parse_message_within`]); the check was abandoned.
    #[error("the rules of {type_name} did not finish within {limit_ms} ms")]
    RulesTimedOut {
        /// Full name of the type.
        type_name: String,
        /// The limit, in milliseconds.
        limit_ms: u64,
    },
}

impl CompiledWorkflow {
    /// Compiles and verifies an envelope, returning every finding when it is not runnable.
    ///
    /// It runs on a thread of its own with [`COMPILE_STACK_BYTES`] of stack, whatever
    /// thread calls it: building the validator recurses over the workflow's types and,
    /// at the bottom of that, the CEL parser recurses once per parenthesis of a rule
    /// (parentheses add no AST depth, so the rule bounds let thousands through). On a
    /// 2 MiB async or blocking-pool thread a chain of 64 types, each with a rule of 10
    /// nested parentheses, overflowed the stack and aborted the node.
    pub fn compile(envelope: &Value) -> Result<CompiledWorkflow, Findings> {
        let compile_here = || {
            let mut findings = Vec::new();
            let compiled = compile_envelope(envelope, &mut findings);
            match compiled {
                Some(workflow) if findings.is_empty() => Ok(workflow),
                _ => Err(Findings(findings)),
            }
        };
        std::thread::scope(|scope| {
            let spawned = std::thread::Builder::new()
                .name("workflow-compile".into())
                .stack_size(COMPILE_STACK_BYTES)
                .spawn_scoped(scope, compile_here);
            match spawned {
                Ok(thread) => thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(error) => Err(Findings(vec![Finding {
                    step: None,
                    path: "$".into(),
                    message: format!(
                        "the workflow could not be compiled now: no thread to compile it on ({error}); try again"
                    ),
                }])),
            }
        })
    }

    /// Compiles a workflow that is new to the engine (submitted, stored, run): the
    /// checks of [`CompiledWorkflow::compile`] and then
    /// [`CompiledWorkflow::strict_findings`].
    pub fn compile_new(envelope: &Value) -> Result<CompiledWorkflow, Findings> {
        let compiled = CompiledWorkflow::compile(envelope)?;
        let strict = compiled.strict_findings();
        if strict.is_empty() {
            Ok(compiled)
        } else {
            Err(Findings(strict))
        }
    }

    /// The checks a new workflow must pass beyond what running it needs: every `when`
    /// gate type-checks against its roots ([`crate::typecheck`]: fields that exist, a
    /// boolean result), every target is `host:port`, and the workflow's name holds no
    /// invisible formatting character (a right-to-left override shows a name other
    /// than the one stored).
    ///
    /// They are kept apart from [`CompiledWorkflow::compile`] on purpose: a job's
    /// snapshot is compiled again by every worker that claims it, and a job accepted
    /// before a check existed must still run (a gate the checker doubts may well run
    /// fine), so only new workflows (submissions, stored workflows, synchronous runs)
    /// are held to them.
    pub fn strict_findings(&self) -> Vec<Finding> {
        let mut findings = Vec::new();
        if let Some(c) = self.name.chars().find(|c| is_invisible_format(*c)) {
            findings.push(Finding {
                step: None,
                path: "$.name".into(),
                message: format!(
                    "the workflow name holds the invisible formatting character U+{:04X}, which makes it display as another name: remove it",
                    u32::from(c)
                ),
            });
        }
        for (index, step) in self.steps.iter().enumerate() {
            let finding = |path: &str, message: String| Finding {
                step: Some(step.name.clone()),
                path: format!("$.steps[{index}].{path}"),
                message,
            };
            if let Some(Err(reason)) = step.target.as_deref().map(valid_target) {
                findings.push(finding("target", reason));
            }
            if let Some(gate) = &step.when {
                let root_type = |root: &str| {
                    if root == INPUT {
                        return Some(self.input_type.clone());
                    }
                    self.steps[..index]
                        .iter()
                        .find(|earlier| earlier.name == root)
                        .map(CompiledStep::output_type)
                };
                let problems = gate.check_types(&root_type);
                if !problems.is_empty() {
                    findings.push(finding("when", format!("`when` {}", problems.join("; "))));
                }
            }
        }
        findings
    }

    /// The envelope this workflow was compiled from (what a job snapshots).
    pub fn envelope(&self) -> &Value {
        &self.envelope
    }

    /// The step called `name`.
    pub fn step(&self, name: &str) -> Option<&CompiledStep> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// True when some step is completed externally (such a workflow can only run as a job).
    pub fn has_external_step(&self) -> bool {
        self.steps.iter().any(CompiledStep::is_external)
    }

    /// The type of the workflow's output.
    pub fn output_type(&self) -> MessageDescriptor {
        match &self.output {
            Some(mapping) => mapping.message.clone(),
            // compile() refuses a workflow with no steps, so there is a last step.
            None => self
                .steps
                .last()
                .map_or_else(|| self.input_type.clone(), CompiledStep::output_type),
        }
    }

    /// Parses an input (proto3 JSON) and checks it against the input type's rules,
    /// **on the calling thread**: the rules are user-supplied CEL that cannot be
    /// interrupted, and a rule within every static bound can still take seconds on a
    /// large input. From async code use [`CompiledWorkflow::parse_input_within`].
    pub fn parse_input(&self, input: &Value) -> Result<DynamicMessage, MessageError> {
        self.parse_message(&self.input_type, input)
    }

    /// Parses proto3 JSON as `message_type` and checks the type's declared rules,
    /// **on the calling thread** (see [`CompiledWorkflow::parse_input`]). From async
    /// code use [`CompiledWorkflow::parse_message_within`].
    pub fn parse_message(
        &self,
        message_type: &MessageDescriptor,
        json: &Value,
    ) -> Result<DynamicMessage, MessageError> {
        let message = decode_json(message_type, json)?;
        let violations = self.violations(&message);
        judged(message, violations)
    }

    /// [`CompiledWorkflow::parse_input`] for async code: the input is decoded on the
    /// calling thread (linear in its size), then its type's rules are checked on a
    /// dedicated evaluation thread ([`crate::offload`]), waiting at most `limit`
    /// (the wait for a free evaluation thread included). Past it the check is
    /// abandoned (it finishes in the background without delaying shutdown) and the
    /// error is [`MessageError::RulesTimedOut`].
    pub async fn parse_input_within(
        &self,
        input: &Value,
        limit: Duration,
    ) -> Result<DynamicMessage, MessageError> {
        self.parse_message_within(&self.input_type, input, limit)
            .await
    }

    /// [`CompiledWorkflow::parse_message`] for async code, bounded by `limit` as
    /// [`CompiledWorkflow::parse_input_within`] is.
    pub async fn parse_message_within(
        &self,
        message_type: &MessageDescriptor,
        json: &Value,
        limit: Duration,
    ) -> Result<DynamicMessage, MessageError> {
        let message = decode_json(message_type, json)?;
        let type_name = message_type.full_name().to_owned();
        match self.check_within(&message, limit).await {
            Ok(violations) => judged(message, violations),
            Err(OffloadError::TimedOut { limit }) => Err(MessageError::RulesTimedOut {
                type_name,
                limit_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
            }),
            Err(e) => Err(MessageError::RulesUnusable {
                type_name,
                reason: format!("the rule check {e}"),
            }),
        }
    }

    /// Every `buf.validate` rule `message` breaks (CEL rules included), checked on the
    /// calling thread; from async code prefer [`CompiledWorkflow::violations_within`].
    pub fn violations(&self, message: &DynamicMessage) -> Result<Vec<Violation>, String> {
        violations_of(&message.descriptor(), self.validator.validate(message))
    }

    /// [`CompiledWorkflow::violations`] on a dedicated evaluation thread
    /// ([`crate::offload`]), waiting at most `limit` (the wait for a free evaluation
    /// thread included), so CEL rules never hold an async thread. On timeout the
    /// check is abandoned (the evaluator cannot be interrupted; the static rule
    /// bounds limit what it can still do, and it never delays the runtime's
    /// shutdown) and the error says so.
    pub async fn violations_within(
        &self,
        message: &DynamicMessage,
        limit: Duration,
    ) -> Result<Vec<Violation>, String> {
        let type_name = message.descriptor().full_name().to_owned();
        match self.check_within(message, limit).await {
            Ok(result) => result,
            Err(OffloadError::TimedOut { limit }) => Err(format!(
                "checking the rules of {type_name} did not finish within {} ms",
                limit.as_millis()
            )),
            Err(e) => Err(format!("checking the rules of {type_name} failed: it {e}")),
        }
    }

    /// Runs the validator over a copy of `message` on an evaluation thread.
    async fn check_within(
        &self,
        message: &DynamicMessage,
        limit: Duration,
    ) -> Result<Result<Vec<Violation>, String>, OffloadError> {
        let validator = self.validator.clone();
        let message = message.clone();
        offload::run_within(limit, move || {
            violations_of(&message.descriptor(), validator.validate(&message))
        })
        .await
    }
}

/// The verdict of a rule check on `message`: the message when it breaks no rule.
fn judged(
    message: DynamicMessage,
    violations: Result<Vec<Violation>, String>,
) -> Result<DynamicMessage, MessageError> {
    let type_name = || message.descriptor().full_name().to_owned();
    match violations {
        Ok(violations) if violations.is_empty() => Ok(message),
        Ok(violations) => Err(MessageError::Invalid {
            type_name: type_name(),
            violations,
        }),
        Err(reason) => Err(MessageError::RulesUnusable {
            type_name: type_name(),
            reason,
        }),
    }
}

impl MessageError {
    /// The error as a sentence about the value called `root` (`input`, `response`):
    /// a value that does not parse is named by its path ("response.score: expected
    /// an integer, got string \"x\" (the response must be a ux.Review in proto3
    /// JSON)"); other errors follow `root` after a colon.
    pub fn located(&self, root: &str) -> String {
        match self {
            MessageError::Unparsable {
                type_name,
                path,
                reason,
            } => {
                let at = if path.is_empty() {
                    root.to_owned()
                } else {
                    format!("{root}.{path}")
                };
                format!("{at}: {reason} (the {root} must be a {type_name} in proto3 JSON)")
            }
            other => format!("{root}: {other}"),
        }
    }
}

/// Parses proto3 JSON into a message of `message_type` (unknown fields refused). The
/// error names the field that did not parse.
pub fn decode_json(
    message_type: &MessageDescriptor,
    json: &Value,
) -> Result<DynamicMessage, MessageError> {
    let mut track = serde_path_to_error::Track::new();
    let at = serde_path_to_error::Deserializer::new(json, &mut track);
    DynamicMessage::deserialize(message_type.clone(), at).map_err(|e| {
        let path = track.path();
        let shown = path.to_string();
        MessageError::Unparsable {
            type_name: message_type.full_name().to_owned(),
            path: if shown == "." { String::new() } else { shown },
            reason: expected_got(&e.to_string(), value_at(json, &path)),
        }
    })
}

/// The value at a decoder's path, when the path leads to one.
fn value_at<'v>(json: &'v Value, path: &serde_path_to_error::Path) -> Option<&'v Value> {
    use serde_path_to_error::Segment;
    path.iter().try_fold(json, |value, segment| match segment {
        Segment::Seq { index } => value.get(index),
        Segment::Map { key } => value.get(key.as_str()),
        _ => None,
    })
}

/// The decoder's complaint, what was wanted first: serde's "invalid type: string
/// \"x\", expected an integer" reads "expected an integer, got string \"x\"", and
/// the bare number-parsing errors of a quoted number ("invalid digit found in
/// string") say what was expected and what was sent. Other messages are kept.
fn expected_got(reason: &str, sent: Option<&Value>) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = reason.strip_prefix(prefix)
            && let Some((got, expected)) = rest.rsplit_once(", expected ")
        {
            return format!("expected {expected}, got {got}");
        }
    }
    let expected = match reason {
        "invalid digit found in string" | "cannot parse integer from empty string" => {
            "an integer (a JSON number, or one in a string)"
        }
        "number too large to fit in target type" | "number too small to fit in target type" => {
            "an integer within the field's range"
        }
        "invalid float literal" => "a number (a JSON number, or one in a string)",
        _ => return reason.to_owned(),
    };
    match sent {
        Some(Value::String(text)) => {
            let shown: String = text.chars().take(40).collect();
            format!("expected {expected}, got string {shown:?}")
        }
        Some(other) if !other.is_object() && !other.is_array() => {
            format!("expected {expected}, got {other}")
        }
        _ => format!("expected {expected} ({reason})"),
    }
}

/// proto3 JSON of a message, as checkpoints and outputs store it: camelCase names,
/// defaults omitted, 64-bit integers as JSON numbers (readable at 2am; values above
/// 2^53 lose precision in JavaScript readers, not in this engine).
///
/// Encoding is fallible, and the failure is never papered over: a `Struct` holding
/// NaN or an infinity, an `Any` whose type is not in the descriptor set, a
/// `Timestamp` past year 9999 have no proto3 JSON form. The error names the type and
/// the serializer's reason.
pub fn encode_json(message: &DynamicMessage) -> Result<Value, EncodeError> {
    let options = prost_reflect::SerializeOptions::new().stringify_64_bit_integers(false);
    message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| EncodeError {
            type_name: message.descriptor().full_name().to_owned(),
            reason: e.to_string(),
        })
}

/// A message with no proto3 JSON form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a {type_name} that cannot be written as proto3 JSON: {reason}")]
pub struct EncodeError {
    /// Full name of the message type.
    pub type_name: String,
    /// The serializer's reason (the value or type it could not write).
    pub reason: String,
}

struct Draft<'a> {
    findings: &'a mut Vec<Finding>,
}

impl Draft<'_> {
    fn find(&mut self, step: Option<&str>, path: impl Into<String>, message: impl Into<String>) {
        self.findings.push(Finding {
            step: step.map(str::to_owned),
            path: path.into(),
            message: message.into(),
        });
    }

    fn unknown_keys(
        &mut self,
        object: &Map<String, Value>,
        allowed: &[&str],
        step: Option<&str>,
        path: &str,
    ) {
        for key in object.keys().filter(|k| !allowed.contains(&k.as_str())) {
            self.find(
                step,
                format!("{path}.{key}"),
                format!(
                    "unknown field '{key}'; expected one of: {}",
                    allowed.join(", ")
                ),
            );
        }
    }

    fn string(
        &mut self,
        object: &Map<String, Value>,
        key: &str,
        required: bool,
        step: Option<&str>,
        path: &str,
    ) -> Option<String> {
        match object.get(key) {
            None | Some(Value::Null) => {
                if required {
                    self.find(
                        step,
                        format!("{path}.{key}"),
                        format!("'{key}' is required"),
                    );
                }
                None
            }
            Some(Value::String(s)) if s.trim().is_empty() => {
                self.find(
                    step,
                    format!("{path}.{key}"),
                    format!("'{key}' must not be blank"),
                );
                None
            }
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.find(
                    step,
                    format!("{path}.{key}"),
                    format!("'{key}' must be a string, not {}", json_kind(other)),
                );
                None
            }
        }
    }

    fn boolean(
        &mut self,
        object: &Map<String, Value>,
        key: &str,
        step: Option<&str>,
        path: &str,
    ) -> bool {
        match object.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.find(
                    step,
                    format!("{path}.{key}"),
                    format!("'{key}' must be true or false, not {}", json_kind(other)),
                );
                false
            }
        }
    }

    fn deadline(
        &mut self,
        object: &Map<String, Value>,
        step: Option<&str>,
        path: &str,
    ) -> Option<Duration> {
        let value = object.get("deadlineMs")?;
        match value.as_u64() {
            Some(ms) if (1..=MAX_DEADLINE_MS).contains(&ms) => Some(Duration::from_millis(ms)),
            _ => {
                self.find(step, format!("{path}.deadlineMs"), format!("'deadlineMs' must be a whole number of milliseconds from 1 to {MAX_DEADLINE_MS}, not {value}"));
                None
            }
        }
    }

    /// `waitTimeoutMs` and `onTimeout`, which only an external step may have.
    fn parked_wait(
        &mut self,
        object: &Map<String, Value>,
        completion: Completion,
        step: Option<&str>,
        path: &str,
    ) -> (Option<Duration>, OnTimeout) {
        for key in ["waitTimeoutMs", "onTimeout"] {
            if completion != Completion::External && object.contains_key(key) {
                self.find(
                    step,
                    format!("{path}.{key}"),
                    format!("'{key}' applies to external steps only (\"completion\": \"external\"); remove it"),
                );
            }
        }
        let wait = object.get("waitTimeoutMs").and_then(|value| match value.as_u64() {
            Some(ms) if (1..=MAX_WAIT_TIMEOUT_MS).contains(&ms) => Some(Duration::from_millis(ms)),
            _ => {
                self.find(step, format!("{path}.waitTimeoutMs"), format!("'waitTimeoutMs' must be a whole number of milliseconds from 1 to {MAX_WAIT_TIMEOUT_MS}, not {value}"));
                None
            }
        });
        let on_timeout = match object.get("onTimeout") {
            None | Some(Value::Null) => OnTimeout::Fail,
            Some(Value::String(s)) if s == "fail" => OnTimeout::Fail,
            Some(Value::String(s)) if s == "dead" => OnTimeout::Dead,
            Some(other) => {
                self.find(
                    step,
                    format!("{path}.onTimeout"),
                    format!("'onTimeout' must be \"fail\" or \"dead\", not {other}"),
                );
                OnTimeout::Fail
            }
        };
        (wait, on_timeout)
    }

    fn max_response_bytes(
        &mut self,
        object: &Map<String, Value>,
        step: Option<&str>,
        path: &str,
    ) -> Option<usize> {
        let value = object.get("maxResponseBytes")?;
        match value.as_u64() {
            Some(bytes) if (1..=MAX_RESPONSE_BYTES_CEILING).contains(&bytes) => {
                usize::try_from(bytes).ok()
            }
            _ => {
                self.find(step, format!("{path}.maxResponseBytes"), format!("'maxResponseBytes' must be a whole number of bytes from 1 to {MAX_RESPONSE_BYTES_CEILING}, not {value}"));
                None
            }
        }
    }

    fn rules(
        &mut self,
        object: &Map<String, Value>,
        step: Option<&str>,
        path: &str,
    ) -> Vec<(Rule, String)> {
        let Some(value) = object.get("rules") else {
            return Vec::new();
        };
        let Some(items) = value.as_array() else {
            self.find(
                step,
                format!("{path}.rules"),
                format!(
                    "'rules' must be an array of strings, not {}",
                    json_kind(value)
                ),
            );
            return Vec::new();
        };
        if items.len() > MAX_RULES {
            self.find(
                step,
                format!("{path}.rules"),
                format!(
                    "{} rules is more than the limit of {MAX_RULES}",
                    items.len()
                ),
            );
            return Vec::new();
        }
        let mut rules = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let rule_path = format!("{path}.rules[{i}]");
            match item.as_str().map(parse_rule) {
                Some(Ok(rule)) => rules.push((rule, rule_path)),
                Some(Err(reason)) => self.find(step, rule_path, reason),
                None => self.find(
                    step,
                    rule_path,
                    format!("a rule must be a string, not {}", json_kind(item)),
                ),
            }
        }
        rules
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn valid_name(name: &str) -> Result<(), String> {
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(format!("is longer than {MAX_NAME_CHARS} characters"));
    }
    if name.chars().any(char::is_control) {
        return Err("contains control characters".into());
    }
    Ok(())
}

/// Unicode's invisible formatting characters (general category Cf): bidirectional
/// overrides and isolates, zero-width characters, the byte-order mark, tags.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{AD}' | '\u{600}'..='\u{605}' | '\u{61C}' | '\u{6DD}' | '\u{70F}' | '\u{890}'..='\u{891}'
        | '\u{8E2}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}'
        | '\u{110BD}' | '\u{110CD}' | '\u{13430}'..='\u{1343F}' | '\u{1BCA0}'..='\u{1BCA3}'
        | '\u{1D173}'..='\u{1D17A}' | '\u{E0001}' | '\u{E0020}'..='\u{E007F}')
}

/// Stack for [`CompiledWorkflow::compile`]'s thread: as much as the CEL parser's own
/// thread has ([`crate::gate`]), since the validator parses the same rules. Reserved,
/// not used, unless a workflow is that deep.
pub const COMPILE_STACK_BYTES: usize = 256 * 1024 * 1024;

/// The forms a step's `target` takes, for findings.
const TARGET_FORMS: &str = "a target is host:port, e.g. '127.0.0.1:50051', 'tokenizer.internal:443' or '[::1]:50051' (\"tls\": true for TLS)";

/// A step's `target` is `host:port`: a hostname, an IPv4 address or a bracketed IPv6
/// address, and a port from 1 to 65535; no scheme, no path.
fn valid_target(target: &str) -> Result<(), String> {
    if let Some((scheme, rest)) = target.split_once("://") {
        return Err(format!(
            "'{target}' has a scheme ('{scheme}://'): {TARGET_FORMS}, so write '{}'",
            rest.trim_end_matches('/')
        ));
    }
    if target.contains('/') {
        return Err(format!("'{target}' has a path: {TARGET_FORMS}"));
    }
    let Some((host, port)) = target.rsplit_once(':') else {
        return Err(format!("'{target}' has no port: {TARGET_FORMS}"));
    };
    let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    match port.parse::<u16>() {
        Ok(1..) if digits => {}
        _ => {
            return Err(format!(
                "'{target}': the port '{port}' is not a number from 1 to 65535: {TARGET_FORMS}"
            ));
        }
    }
    let host_ok = match host.strip_prefix('[') {
        // An IPv6 address, with a zone (`%25eth0`, percent-encoded as in a URI) or not.
        Some(bracketed) => bracketed
            .strip_suffix(']')
            .and_then(ipv6_with_zone)
            .is_some(),
        None if host.parse::<std::net::IpAddr>().is_err() && ends_in_a_number(host) => {
            return Err(format!(
                "'{target}': '{host}' is neither a name nor an IP address as written (a host ending in a number is read as an IPv4 address in some other form, 10.6488325 or 0xA630005): write the address as four decimal numbers (10.99.1.5), or a name: {TARGET_FORMS}"
            ));
        }
        None => {
            // A fully-qualified name may end with a dot (`svc.cluster.local.`).
            let name = host.strip_suffix('.').unwrap_or(host);
            !name.is_empty()
                && name.split('.').all(|label| {
                    !label.is_empty()
                        && label
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                })
        }
    };
    if host_ok {
        Ok(())
    } else {
        Err(format!(
            "'{target}': '{host}' is not a hostname or an IP address: {TARGET_FORMS}"
        ))
    }
}

/// Whether a host that is not an IP address as Rust reads it ends in a number (its
/// last label all digits, or `0x` and hex digits): the C resolver reads such a host
/// as an IPv4 address in another form (`10.6488325`, `0xA630005`, `012.0.0.1` as
/// 10.0.0.1), so it is no name, and an address the outbound policy would check by
/// name patterns only. Refused, as the WHATWG URL standard refuses it.
pub(crate) fn ends_in_a_number(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    let last = host.rsplit('.').next().unwrap_or(host);
    let hex = last
        .strip_prefix("0x")
        .or_else(|| last.strip_prefix("0X"))
        .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_hexdigit()));
    !last.is_empty() && (last.bytes().all(|b| b.is_ascii_digit()) || hex)
}

/// The address of a bracketed IPv6 host (without its brackets), which may carry a
/// zone, percent-encoded as in a URI (`fe80::1%25eth0`). A zone is an interface name
/// or number: letters, digits, `.`, `_` and `-` only, at most 64. Anything else
/// (`%25@10.0.0.1`, a `]` or `/`) is refused, since the HTTP stack would read it as
/// something other than a zone (userinfo and another host) and connect elsewhere than
/// the outbound policy checked.
pub(crate) fn ipv6_with_zone(bracketed: &str) -> Option<std::net::Ipv6Addr> {
    let (address, zone) = match bracketed.split_once("%25") {
        Some((address, zone)) => (address, Some(zone)),
        None => (bracketed, None),
    };
    let zone_ok = zone.is_none_or(|zone| {
        !zone.is_empty()
            && zone.len() <= 64
            && zone
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    });
    if !zone_ok {
        return None;
    }
    address.parse().ok()
}

fn valid_step_name(name: &str) -> Result<(), String> {
    valid_name(name)?;
    let mut chars = name.chars();
    let identifier = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !identifier {
        return Err(format!(
            "'{name}' is not an identifier (letters, digits, '_'; not starting with a digit): rules and gates refer to steps by name"
        ));
    }
    if name == INPUT {
        return Err("'input' is reserved for the workflow input".into());
    }
    Ok(())
}

const ROOT_KEYS: &[&str] = &[
    "name",
    "schema",
    "inputType",
    "deadlineMs",
    "steps",
    "output",
];
const STEP_KEYS: &[&str] = &[
    "name",
    "target",
    "method",
    "rules",
    "when",
    "completion",
    "validate",
    "deadlineMs",
    "tls",
    "maxResponseBytes",
    "waitTimeoutMs",
    "onTimeout",
    "outputType",
    "requestType",
];

fn compile_envelope(envelope: &Value, findings: &mut Vec<Finding>) -> Option<CompiledWorkflow> {
    let mut draft = Draft { findings };
    let Some(root) = envelope.as_object() else {
        draft.find(
            None,
            "$",
            format!(
                "a workflow must be a JSON object, not {}",
                json_kind(envelope)
            ),
        );
        return None;
    };
    draft.unknown_keys(root, ROOT_KEYS, None, "$");
    let name = draft.string(root, "name", true, None, "$");
    if let Some(Err(reason)) = name.as_deref().map(valid_name) {
        draft.find(None, "$.name", format!("the workflow name {reason}"));
    }
    let deadline = draft.deadline(root, None, "$").unwrap_or(DEFAULT_DEADLINE);
    let pool = schema_pool(&mut draft, root);
    let input_type_name = draft.string(root, "inputType", true, None, "$");
    let input_type = match (&pool, &input_type_name) {
        (Some(pool), Some(name)) => resolve_message(&mut draft, pool, name, None, "$.inputType"),
        _ => None,
    };

    let steps = step_specs(&mut draft, root, pool.as_ref());
    let output = root
        .get("output")
        .and_then(|value| output_spec(&mut draft, value, pool.as_ref()));

    // Verification needs the types; it still runs on whatever resolved, so one bad
    // method does not hide the rule problems of the other steps.
    verify::verify(draft.findings, input_type.as_ref(), &steps, output.as_ref());
    // One validator per workflow: it caches compiled rules by message name, and two
    // workflows may declare the same name with different rules. Checking the rules
    // here compiles them once, for the run as well.
    let validator = Validator::new();
    check_declared_rules(draft.findings, &validator, input_type.as_ref(), &steps);

    let (name, pool, input_type) = (name?, pool?, input_type?);
    let mut compiled_steps = Vec::with_capacity(steps.len());
    for (index, spec) in steps.into_iter().enumerate() {
        compiled_steps.push(CompiledStep {
            name: spec.name,
            index,
            target: spec.target,
            method: spec.method,
            request_type: spec.request_type,
            response_type: spec.response_type?,
            rules: spec.rules.into_iter().map(|(rule, _)| rule).collect(),
            when: match spec.when {
                Some((source, _)) => Some(Gate::compile(&source).ok()?),
                None => None,
            },
            completion: spec.completion,
            validate: spec.validate,
            deadline: spec.deadline,
            tls: spec.tls,
            max_response_bytes: spec.max_response_bytes,
            wait_timeout: spec.wait_timeout,
            on_timeout: spec.on_timeout,
        });
    }
    let output = match output {
        Some(spec) => Some(OutputMapping {
            message: spec.message?,
            rules: spec.rules.into_iter().map(|(r, _)| r).collect(),
        }),
        None => None,
    };
    Some(CompiledWorkflow {
        name,
        pool,
        input_type,
        steps: compiled_steps,
        output,
        deadline,
        envelope: Arc::new(envelope.clone()),
        validator: Arc::new(validator),
    })
}

/// The `buf.validate` rules of every type the workflow reads stay within the CEL
/// bounds, and those the engine runs (the input's, and the responses of `validate`
/// steps) can run at all (see [`crate::ruleset`]).
fn check_declared_rules(
    findings: &mut Vec<Finding>,
    validator: &Validator,
    input_type: Option<&MessageDescriptor>,
    steps: &[StepSpec],
) {
    let mut read = Vec::new();
    let mut validated = Vec::new();
    if let Some(input_type) = input_type {
        let root = || TypeRoot {
            message: input_type.clone(),
            step: None,
            path: "$.inputType".into(),
        };
        read.push(root());
        validated.push(root());
    }
    for (i, spec) in steps.iter().enumerate() {
        let Some(response_type) = &spec.response_type else {
            continue;
        };
        let path = if spec.method.is_some() {
            format!("$.steps[{i}].method")
        } else {
            format!("$.steps[{i}].outputType")
        };
        let root = |message: MessageDescriptor| TypeRoot {
            message,
            step: Some(spec.name.clone()),
            path: path.clone(),
        };
        read.push(root(response_type.clone()));
        if let Some(request_type) = &spec.request_type {
            read.push(root(request_type.clone()));
        }
        if spec.validate {
            validated.push(root(response_type.clone()));
        }
    }
    // The validator recurses over the types: a chain too deep for it is refused
    // before it is built.
    if !ruleset::check_nesting(findings, &read) {
        return;
    }
    let unrunnable = ruleset::check_bounds(findings, &read);
    ruleset::check_usable(findings, validator, &validated, &unrunnable);
}

fn schema_pool(draft: &mut Draft<'_>, root: &Map<String, Value>) -> Option<DescriptorPool> {
    let Some(schema) = root.get("schema") else {
        draft.find(None, "$.schema", "'schema' is required: {\"descriptorSetBase64\": \"<FileDescriptorSet, imports included>\"}");
        return None;
    };
    let Some(schema) = schema.as_object() else {
        draft.find(
            None,
            "$.schema",
            format!("'schema' must be an object, not {}", json_kind(schema)),
        );
        return None;
    };
    draft.unknown_keys(schema, &["descriptorSetBase64"], None, "$.schema");
    let encoded = draft.string(schema, "descriptorSetBase64", true, None, "$.schema")?;
    let bytes = match base64::engine::general_purpose::STANDARD.decode(encoded.trim()) {
        Ok(bytes) => bytes,
        Err(e) => {
            draft.find(
                None,
                "$.schema.descriptorSetBase64",
                format!("not valid base64 (standard alphabet, padded): {e}"),
            );
            return None;
        }
    };
    match DescriptorPool::decode(bytes.as_slice()) {
        Ok(pool) => match import_cycle(&pool) {
            None => Some(pool),
            Some(cycle) => {
                draft.find(
                    None,
                    "$.schema.descriptorSetBase64",
                    format!("its files import each other in a cycle ({}), which protoc refuses: build the set from .proto files that compile", cycle.join(" → ")),
                );
                None
            }
        },
        Err(e) => {
            draft.find(
                None,
                "$.schema.descriptorSetBase64",
                format!("not a usable FileDescriptorSet: {e} (build it with every import included, e.g. protoc --include_imports)"),
            );
            None
        }
    }
}

/// A cycle of imports among the pool's files, as the chain of file names, found
/// without recursion (the set is user input).
fn import_cycle(pool: &DescriptorPool) -> Option<Vec<String>> {
    let imports: std::collections::HashMap<String, Vec<String>> = pool
        .files()
        .map(|file| {
            let names = file.dependencies().map(|d| d.name().to_owned()).collect();
            (file.name().to_owned(), names)
        })
        .collect();
    // 0: unseen, 1: on the current chain, 2: done.
    let mut state: std::collections::HashMap<&str, u8> = std::collections::HashMap::new();
    // In name order, so the cycle reported is the same every time.
    let mut starts: Vec<&String> = imports.keys().collect();
    starts.sort();
    for start in starts {
        if state.get(start.as_str()).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut chain: Vec<(&str, usize)> = vec![(start.as_str(), 0)];
        state.insert(start.as_str(), 1);
        while let Some((file, next)) = chain.last().copied() {
            let deps = imports.get(file).map(Vec::as_slice).unwrap_or_default();
            match deps.get(next) {
                Some(dep) => {
                    if let Some(top) = chain.last_mut() {
                        top.1 += 1;
                    }
                    match state.get(dep.as_str()).copied().unwrap_or(0) {
                        1 => {
                            let from = chain.iter().position(|(f, _)| *f == dep).unwrap_or(0);
                            let mut cycle: Vec<String> =
                                chain[from..].iter().map(|(f, _)| (*f).to_owned()).collect();
                            cycle.push(dep.clone());
                            return Some(cycle);
                        }
                        0 if imports.contains_key(dep) => {
                            state.insert(dep.as_str(), 1);
                            chain.push((dep.as_str(), 0));
                        }
                        _ => {}
                    }
                }
                None => {
                    state.insert(file, 2);
                    chain.pop();
                }
            }
        }
    }
    None
}

fn resolve_message(
    draft: &mut Draft<'_>,
    pool: &DescriptorPool,
    name: &str,
    step: Option<&str>,
    path: &str,
) -> Option<MessageDescriptor> {
    let name = name.trim_start_matches('.');
    let found = pool.get_message_by_name(name);
    if found.is_none() {
        let names: Vec<String> = pool
            .all_messages()
            .map(|m| m.full_name().to_owned())
            .collect();
        draft.find(
            step,
            path,
            format!(
                "unknown message type '{name}': it is not in the schema's descriptor set{}",
                suggest_full_name(name, &names)
            ),
        );
    }
    found
}

/// "; did you mean 'pkg.Name'?" for a type or service named without its package
/// (the one full name ending in `.name`) or misspelled, or nothing.
fn suggest_full_name(name: &str, full_names: &[String]) -> String {
    let suffix = format!(".{name}");
    let mut by_suffix = full_names.iter().filter(|full| full.ends_with(&suffix));
    let guess = match (by_suffix.next(), by_suffix.next()) {
        (Some(only), None) => Some(only.as_str()),
        _ => crate::suggest::did_you_mean(name, full_names.iter().map(String::as_str)),
    };
    match guess {
        Some(guess) => format!(
            "; did you mean '{guess}'? (types and services are named in full, with their package)"
        ),
        None => String::new(),
    }
}

fn resolve_method(
    draft: &mut Draft<'_>,
    pool: &DescriptorPool,
    name: &str,
    step: &str,
    path: &str,
) -> Option<MethodDescriptor> {
    let Some((service_name, method_name)) = name.trim_start_matches('/').split_once('/') else {
        draft.find(
            Some(step),
            path,
            format!("method '{name}' must look like 'package.Service/Method'"),
        );
        return None;
    };
    let Some(service) = pool.get_service_by_name(service_name) else {
        let names: Vec<String> = pool.services().map(|s| s.full_name().to_owned()).collect();
        draft.find(
            Some(step),
            path,
            format!(
                "unknown service '{service_name}': it is not in the schema's descriptor set{}",
                suggest_full_name(service_name, &names)
            ),
        );
        return None;
    };
    let method = service.methods().find(|m| m.name() == method_name);
    if method.is_none() {
        let known: Vec<String> = service.methods().map(|m| m.name().to_owned()).collect();
        draft.find(
            Some(step),
            path,
            format!(
                "service '{service_name}' has no method '{method_name}' (its methods: {})",
                known.join(", ")
            ),
        );
    }
    if let Some(m) = &method
        && (m.is_client_streaming() || m.is_server_streaming())
    {
        draft.find(
            Some(step),
            path,
            format!("method '{name}' streams; only unary methods can be steps"),
        );
        return None;
    }
    method
}

fn step_specs(
    draft: &mut Draft<'_>,
    root: &Map<String, Value>,
    pool: Option<&DescriptorPool>,
) -> Vec<StepSpec> {
    let Some(value) = root.get("steps") else {
        draft.find(
            None,
            "$.steps",
            "'steps' is required: a non-empty array of steps",
        );
        return Vec::new();
    };
    let Some(items) = value.as_array() else {
        draft.find(
            None,
            "$.steps",
            format!("'steps' must be an array, not {}", json_kind(value)),
        );
        return Vec::new();
    };
    if items.is_empty() {
        draft.find(None, "$.steps", "a workflow needs at least one step");
    }
    if items.len() > MAX_STEPS {
        draft.find(
            None,
            "$.steps",
            format!(
                "{} steps is more than the limit of {MAX_STEPS}",
                items.len()
            ),
        );
        return Vec::new();
    }
    let mut seen = HashSet::new();
    let mut specs = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("$.steps[{i}]");
        let Some(object) = item.as_object() else {
            draft.find(
                None,
                &path,
                format!("a step must be an object, not {}", json_kind(item)),
            );
            continue;
        };
        let name = draft.string(object, "name", true, None, &path);
        let label = name.clone().unwrap_or_else(|| format!("#{i}"));
        let step = Some(label.as_str());
        draft.unknown_keys(object, STEP_KEYS, step, &path);
        if let Some(name) = &name {
            if let Err(reason) = valid_step_name(name) {
                draft.find(step, format!("{path}.name"), format!("step name {reason}"));
            } else if !seen.insert(name.clone()) {
                draft.find(
                    step,
                    format!("{path}.name"),
                    format!("duplicate step name '{name}': step names must be unique"),
                );
            }
        }
        let completion = match object.get("completion") {
            None | Some(Value::Null) => Completion::Call,
            Some(Value::String(s)) if s == "external" => Completion::External,
            Some(Value::String(s)) if s == "call" => Completion::Call,
            Some(other) => {
                draft.find(
                    step,
                    format!("{path}.completion"),
                    format!("'completion' must be \"external\" or \"call\", not {other}"),
                );
                Completion::Call
            }
        };
        let target = draft.string(
            object,
            "target",
            completion == Completion::Call,
            step,
            &path,
        );
        let (method, request_type, response_type) =
            step_types(draft, object, pool, completion, &label, &path);
        let rules = draft.rules(object, step, &path);
        if !rules.is_empty()
            && method.is_none()
            && !object.contains_key("requestType")
            && object.contains_key("outputType")
            && completion == Completion::External
        {
            draft.find(
                step,
                format!("{path}.rules"),
                "rules build the request the reviewer is shown: declare its type as 'requestType' too, or drop the rules",
            );
        }
        let when = draft
            .string(object, "when", false, step, &path)
            .map(|w| (w, format!("{path}.when")));
        let validate = draft.boolean(object, "validate", step, &path);
        let tls = draft.boolean(object, "tls", step, &path);
        let deadline = draft.deadline(object, step, &path);
        let max_response_bytes = draft.max_response_bytes(object, step, &path);
        let (wait_timeout, on_timeout) = draft.parked_wait(object, completion, step, &path);
        specs.push(StepSpec {
            name: label,
            target,
            method,
            request_type,
            response_type,
            rules,
            when,
            completion,
            validate,
            deadline,
            tls,
            max_response_bytes,
            wait_timeout,
            on_timeout,
        });
    }
    specs
}

/// A step's method, request type and response type. A called step names a `method`;
/// an external step either names one (never called: its types are used) or declares
/// `outputType`, the type of its answer, and optionally `requestType`, what its rules
/// build for the reviewer to see.
fn step_types(
    draft: &mut Draft<'_>,
    object: &Map<String, Value>,
    pool: Option<&DescriptorPool>,
    completion: Completion,
    label: &str,
    path: &str,
) -> (
    Option<MethodDescriptor>,
    Option<MessageDescriptor>,
    Option<MessageDescriptor>,
) {
    let step = Some(label);
    let declares_types = object.contains_key("outputType") || object.contains_key("requestType");
    if completion == Completion::Call || !declares_types {
        if declares_types {
            for key in ["outputType", "requestType"]
                .into_iter()
                .filter(|k| object.contains_key(*k))
            {
                draft.find(
                    step,
                    format!("{path}.{key}"),
                    format!("only an external step declares '{key}': a called step's types are its method's"),
                );
            }
        }
        let method_name = if completion == Completion::Call || object.contains_key("method") {
            draft.string(object, "method", true, step, path)
        } else {
            draft.find(
                step,
                format!("{path}.outputType"),
                "an external step needs 'outputType', the type of the answer (with 'requestType' and 'rules' for what the reviewer is shown), or a 'method' whose types it uses",
            );
            None
        };
        let method = match (pool, &method_name) {
            (Some(pool), Some(m)) => {
                resolve_method(draft, pool, m, label, &format!("{path}.method"))
            }
            _ => None,
        };
        let request = method.as_ref().map(MethodDescriptor::input);
        let response = method.as_ref().map(MethodDescriptor::output);
        return (method, request, response);
    }
    if object.contains_key("method") {
        draft.find(
            step,
            format!("{path}.method"),
            "declare either 'method' or 'outputType'/'requestType' on an external step, not both",
        );
    }
    let mut resolve = |key: &str, required: bool| {
        let name = draft.string(object, key, required, step, path)?;
        let pool = pool?;
        resolve_message(draft, pool, &name, step, &format!("{path}.{key}"))
    };
    let response = resolve("outputType", true);
    let request = resolve("requestType", false);
    (None, request, response)
}

fn output_spec(
    draft: &mut Draft<'_>,
    value: &Value,
    pool: Option<&DescriptorPool>,
) -> Option<OutputSpec> {
    let Some(object) = value.as_object() else {
        draft.find(
            None,
            "$.output",
            format!("'output' must be an object, not {}", json_kind(value)),
        );
        return None;
    };
    draft.unknown_keys(object, &["type", "rules"], None, "$.output");
    let type_name = draft.string(object, "type", true, None, "$.output");
    let message = match (pool, &type_name) {
        (Some(pool), Some(name)) => resolve_message(draft, pool, name, None, "$.output.type"),
        _ => None,
    };
    let rules = draft.rules(object, None, "$.output");
    Some(OutputSpec { message, rules })
}
