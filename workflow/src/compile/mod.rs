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
//! `concurrency` (optional) bounds how many of the workflow's jobs run at once across
//! the fleet, per key computed from the input: see [`flow`].
//!
//! Steps form a graph ([`graph`]): `after` lists the steps a step waits for; without
//! it a step waits for the one declared before it (so a list of steps is a chain),
//! and `"after": []` starts with the job. Steps whose dependencies are done run at
//! the same time, at most the workflow's `maxParallel` (default
//! [`DEFAULT_MAX_PARALLEL`], at most [`MAX_PARALLEL_CEILING`]). A step's rules and
//! gate read `input` and its ancestors only; the output reads every step.
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
//!
//! | module     | concept                                                              |
//! |------------|----------------------------------------------------------------------|
//! | this one   | the compiled types, and compiling an envelope into them              |
//! | `limits`   | the bounds of an envelope                                            |
//! | `draft`    | reading one field, or a finding naming its step and path             |
//! | `names`    | workflow and step names, `host:port` targets                         |
//! | `pool`     | the descriptor set, and the types and methods it names               |
//! | `steps`    | steps and output as written, before verification                     |
//! | `graph`    | `after`: each step's dependencies and ancestors; unknown names, cycles |
//! | `map`      | map steps: `forEach`, their `maxParallel` and `onItemFailure`         |
//! | `parking`  | sleep steps (`sleep`) and event steps (`eventKey`, `eventLookbackMs`)  |
//! | `child`    | child steps (`workflow`): the child's snapshot and its types           |
//! | `flow`     | `concurrency`: the keys bounding how many jobs run at once, fleet-wide |
//! | `rate`     | a called step's `rateLimit`: a fleet-wide token bucket per key          |
//! | `declared` | the `buf.validate` rules of the types read: bounded, runnable         |
//! | `messages` | proto3 JSON in and out, and why a message is refused                 |

mod child;
mod declared;
#[cfg(test)]
mod documented;
mod draft;
mod flow;
pub(crate) mod graph;
mod limits;
mod map;
mod messages;
mod names;
mod parking;
mod pool;
mod rate;
mod review;
mod steps;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use prost_protovalidate::Validator;
use prost_reflect::{
    DescriptorPool, DynamicMessage, MessageDescriptor, MethodDescriptor, ReflectMessage,
};
use serde_json::Value;

use crate::compile::draft::{Draft, json_kind};
use crate::failure::{Violation, violations_of};
pub use crate::finding::{Finding, Findings};
use crate::gate::Gate;
use crate::offload::{self, OffloadError};
pub use crate::review::{REVIEWER_SEES, ReviewerSees};
use crate::rules::Rule;
use crate::scope::INPUT;
pub use crate::spec::{Completion, OnItemFailure, OnTimeout};
use crate::spec::{SleepSpec, StepSpec};
use crate::typecheck::Ty;
use crate::verify;
pub use child::MAX_CHILD_DEPTH;
use declared::check_declared_rules;
pub use flow::{
    ConcurrencyKey, ConcurrencyRule, ConcurrencyStrategy, MAX_CONCURRENCY_KEYS,
    MAX_KEY_VALUE_CHARS, hidden_character, key_value_problem,
};
pub use graph::{DEFAULT_MAX_PARALLEL, MAX_PARALLEL_CEILING};
use graph::{StepGraph, read_max_parallel};
pub use limits::{
    COMPILE_STACK_BYTES, DEFAULT_DEADLINE, MAX_EVENT_LOOKBACK_MS, MAX_RESPONSE_BYTES_CEILING,
    MAX_RULES, MAX_STEPS, MAX_WAIT_TIMEOUT_MS, RULES_TIME_LIMIT,
};
use messages::judged;
pub use messages::{EncodeError, MessageError, decode_json, encode_json};
pub(crate) use names::is_invisible_format;
pub(crate) use names::{ends_in_a_number, ipv6_with_zone};
use names::{valid_name, valid_target};
pub use parking::{DEFAULT_EVENT_LOOKBACK, EventStep, SleepStep, empty_type};
use pool::{resolve_message, schema_pool};
pub use rate::{MAX_BURST, Rate, RateLimitRule};
use steps::{output_spec, step_specs};

/// A resolved, verified step.
#[derive(Debug, Clone)]
pub struct CompiledStep {
    /// Unique within the workflow; also the scope name of its response.
    pub name: String,
    /// Position in the workflow.
    pub index: usize,
    /// The indices of the steps it waits for (its `after`, or the step before it),
    /// ascending.
    pub after: Vec<usize>,
    /// The indices of every step that always ends before it starts (its `after`, and
    /// theirs), ascending: the steps its rules and gate may read.
    pub ancestors: Vec<usize>,
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
    /// output or an external step's `outputType`. A map step answers a list of them.
    pub response_type: MessageDescriptor,
    /// `Some` on a map step (`forEach`).
    pub map: Option<MapStep>,
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
    /// When a sleep step wakes (`Some` on sleep steps only).
    pub sleep: Option<SleepStep>,
    /// What an event step waits for (`Some` on event steps only).
    pub event: Option<EventStep>,
    /// The workflow a child step starts (`Some` on child steps only).
    pub child: Option<ChildStep>,
    /// `rateLimit`: the fleet-wide bucket each call takes from (called steps only).
    pub rate_limit: Option<RateLimitRule>,
    /// `reviewerSees`: what a reviewer of a job parked here is shown (external steps
    /// only; `None`: the node's default).
    pub reviewer_sees: Option<ReviewerSees>,
}

/// The workflow a child step starts, compiled from the snapshot filed into the step.
#[derive(Debug, Clone)]
pub struct ChildStep {
    /// The stored workflow's name.
    pub workflow: String,
    /// The child, compiled from `workflowSnapshot` (its envelope is what a child job
    /// runs).
    pub compiled: Arc<CompiledWorkflow>,
}

impl CompiledStep {
    /// The message type the step answers with (what its checkpoint holds).
    pub fn output_type(&self) -> MessageDescriptor {
        self.response_type.clone()
    }

    /// How a gate reads the step's response: its message, or a map step's list of
    /// them.
    pub fn scope_type(&self) -> Ty {
        let single = Ty::of_root(&self.response_type);
        match self.map {
            Some(_) => Ty::List(Box::new(single)),
            None => single,
        }
    }

    /// True for a `completion: "external"` step.
    pub fn is_external(&self) -> bool {
        self.completion == Completion::External
    }

    /// True for a step the runner calls; the others (external, event and sleep
    /// steps) park the job.
    pub fn is_called(&self) -> bool {
        self.completion == Completion::Call
    }
}

/// A map step's fan-out: the list it is called for, once per element.
#[derive(Debug, Clone)]
pub struct MapStep {
    /// The list's root: `input` or an ancestor step.
    pub root: String,
    /// The fields below the root down to the repeated field (empty: the root is a
    /// map step's list).
    pub fields: Vec<String>,
    /// The kind of the elements (what `item` is in the step's rules).
    pub element: prost_reflect::Kind,
    /// At most this many of its calls at once.
    pub max_parallel: usize,
    /// What a failed element does.
    pub on_item_failure: OnItemFailure,
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
    /// Steps, in declaration order.
    pub steps: Vec<CompiledStep>,
    /// The most steps one segment runs at once (`maxParallel`).
    pub max_parallel: usize,
    /// Output mapping; `None` means the last step's response is the output.
    pub output: Option<OutputMapping>,
    /// Bound of one segment of a run.
    pub deadline: Duration,
    /// `concurrency`: the keys its jobs hold while they run (see [`flow`]).
    pub concurrency: Vec<ConcurrencyRule>,
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
            let compiled = compile_envelope(envelope, &mut findings, 0);
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
        findings.extend(self.concurrency_findings());
        findings.extend(self.rate_limit_findings());
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
                let root_type = |root: &str| self.root_type_from(step, root);
                let problems = gate.check_types(&root_type);
                if !problems.is_empty() {
                    findings.push(finding("when", format!("`when` {}", problems.join("; "))));
                }
            }
            if let Some(event) = &step.event {
                let root_type = |root: &str| self.root_type_from(step, root);
                let problems = event.key.check_string_type(&root_type);
                if !problems.is_empty() {
                    findings.push(finding(
                        "eventKey",
                        format!("`eventKey` {}", problems.join("; ")),
                    ));
                }
            }
        }
        findings
    }

    /// The type of scope root `root` as `step`'s gate or key reads it: `input`, or an
    /// ancestor's response (`None` for anything else).
    fn root_type_from(&self, step: &CompiledStep, root: &str) -> Option<Ty> {
        if root == INPUT {
            return Some(Ty::of_root(&self.input_type));
        }
        step.ancestors
            .iter()
            .map(|&a| &self.steps[a])
            .find(|ancestor| ancestor.name == root)
            .map(CompiledStep::scope_type)
    }

    /// The envelope this workflow was compiled from (what a job snapshots).
    pub fn envelope(&self) -> &Value {
        &self.envelope
    }

    /// The step called `name`.
    pub fn step(&self, name: &str) -> Option<&CompiledStep> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// True when every step waits for exactly the step declared before it (what a
    /// workflow without `after` is): its steps run one at a time, in order.
    pub fn is_chain(&self) -> bool {
        self.steps
            .iter()
            .all(|s| s.after.iter().copied().eq(s.index.checked_sub(1)))
    }

    /// The steps that can start once the steps `done` says are done (called or
    /// skipped) are: not done themselves, every step they wait for done. In
    /// declaration order.
    pub fn ready_steps<'a>(
        &'a self,
        done: &'a dyn Fn(&str) -> bool,
    ) -> impl Iterator<Item = &'a CompiledStep> + 'a {
        self.steps.iter().filter(move |step| {
            !done(&step.name) && step.after.iter().all(|&d| done(&self.steps[d].name))
        })
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

const ROOT_KEYS: &[&str] = &[
    "name",
    "schema",
    "inputType",
    "deadlineMs",
    "maxParallel",
    "concurrency",
    "steps",
    "output",
];

/// Compiles `envelope`, a child `depth` levels down (0: the workflow itself).
fn compile_envelope(
    envelope: &Value,
    findings: &mut Vec<Finding>,
    depth: usize,
) -> Option<CompiledWorkflow> {
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
    let max_parallel = read_max_parallel(&mut draft, root, None, "$");
    let concurrency = flow::read_concurrency(&mut draft, root);
    let pool = schema_pool(&mut draft, root);
    let input_type_name = draft.string(root, "inputType", true, None, "$");
    let input_type = match (&pool, &input_type_name) {
        (Some(pool), Some(name)) => resolve_message(&mut draft, pool, name, None, "$.inputType"),
        _ => None,
    };

    let mut steps = step_specs(&mut draft, root, pool.as_ref());
    let children = compile_children(&mut draft, &mut steps, pool.as_ref(), depth);
    let graph = {
        let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
        let after: Vec<_> = steps.iter().map(|s| s.after.as_ref()).collect();
        StepGraph::build(&mut draft, &names, &after)
    };
    let output = root
        .get("output")
        .and_then(|value| output_spec(&mut draft, value, pool.as_ref()));

    // Verification needs the types; it still runs on whatever resolved, so one bad
    // method does not hide the rule problems of the other steps.
    let elements = verify::verify(
        draft.findings,
        input_type.as_ref(),
        &steps,
        &graph,
        output.as_ref(),
    );
    // One validator per workflow: it caches compiled rules by message name, and two
    // workflows may declare the same name with different rules. Checking the rules
    // here compiles them once, for the run as well.
    let validator = Validator::new();
    check_declared_rules(draft.findings, &validator, input_type.as_ref(), &steps);

    let (name, pool, input_type) = (name?, pool?, input_type?);
    let mut compiled_steps = Vec::with_capacity(steps.len());
    for ((index, spec), element) in steps.into_iter().enumerate().zip(elements) {
        let map = match spec.map {
            Some(map) => Some(MapStep {
                root: map.root,
                fields: map.fields,
                element: element?,
                max_parallel: map.max_parallel,
                on_item_failure: map.on_item_failure,
            }),
            None => None,
        };
        compiled_steps.push(CompiledStep {
            map,
            name: spec.name,
            index,
            after: graph.deps[index].clone(),
            ancestors: graph.ancestors_of(index),
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
            sleep: spec.sleep.map(|sleep| match sleep {
                SleepSpec::For(duration) => SleepStep::For(duration),
                SleepSpec::Until { root, fields, .. } => SleepStep::Until { root, fields },
            }),
            child: match (spec.child, children[index].clone()) {
                (Some(child), Some(compiled)) => Some(ChildStep {
                    workflow: child.workflow,
                    compiled,
                }),
                (Some(_), None) => return None,
                (None, _) => None,
            },
            rate_limit: spec.rate_limit,
            reviewer_sees: spec.reviewer_sees,
            event: match spec.event {
                Some(event) => Some(EventStep {
                    key: Gate::compile_as(&event.key.0, "`eventKey`").ok()?,
                    lookback: event.lookback,
                }),
                None => None,
            },
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
        max_parallel,
        output,
        deadline,
        concurrency,
        envelope: Arc::new(envelope.clone()),
        validator: Arc::new(validator),
    })
}

/// Compiles the snapshot of every child step (`depth` levels down: at most
/// [`MAX_CHILD_DEPTH`]) and gives the step the child's input and output types, as
/// this workflow's schema defines them (they must be the same types). Answers the
/// compiled children by step (`None` for other steps, or a child that did not
/// compile: reported).
fn compile_children(
    draft: &mut Draft<'_>,
    steps: &mut [StepSpec],
    pool: Option<&DescriptorPool>,
    depth: usize,
) -> Vec<Option<Arc<CompiledWorkflow>>> {
    let mut compiled = Vec::with_capacity(steps.len());
    for spec in steps.iter_mut() {
        let Some(child) = &spec.child else {
            compiled.push(None);
            continue;
        };
        let step = Some(spec.name.as_str());
        let Some(snapshot) = &child.snapshot else {
            draft.find(
                step,
                &child.path,
                format!(
                    "child workflow '{}' is not resolved: the node files its stored envelope into the step when this workflow is stored or submitted as a job (a synchronous run-workflow cannot start child workflows)",
                    child.workflow
                ),
            );
            compiled.push(None);
            continue;
        };
        if depth + 1 > MAX_CHILD_DEPTH {
            draft.find(
                step,
                &child.path,
                format!("child workflows nest more than {MAX_CHILD_DEPTH} deep"),
            );
            compiled.push(None);
            continue;
        }
        let mut inner = Vec::new();
        let built = compile_envelope(snapshot, &mut inner, depth + 1);
        for finding in &inner {
            draft.find(
                step,
                &child.path,
                format!("child workflow '{}': {finding}", child.workflow),
            );
        }
        let Some(built) = built.filter(|_| inner.is_empty()) else {
            compiled.push(None);
            continue;
        };
        if built.name != child.workflow {
            draft.find(
                step,
                &child.path,
                format!(
                    "the snapshot filed for child workflow '{}' is workflow '{}'",
                    child.workflow, built.name
                ),
            );
        }
        let Some(pool) = pool else {
            compiled.push(None);
            continue;
        };
        let mut own = |theirs: &MessageDescriptor, role: &str| {
            let Some(here) = pool.get_message_by_name(theirs.full_name()) else {
                draft.find(
                    step,
                    &child.path,
                    format!(
                        "child workflow '{}' takes its {role} as {}, which this workflow's schema does not define: add the child's .proto to this workflow's descriptor set",
                        child.workflow,
                        theirs.full_name()
                    ),
                );
                return None;
            };
            match child::same_type(&here, theirs) {
                Ok(()) => Some(here),
                Err(reason) => {
                    draft.find(
                        step,
                        &child.path,
                        format!("child workflow '{}': its {role} {reason}", child.workflow),
                    );
                    None
                }
            }
        };
        spec.request_type = own(&built.input_type, "input");
        spec.response_type = own(&built.output_type(), "output");
        let ok = spec.request_type.is_some() && spec.response_type.is_some();
        compiled.push(ok.then(|| Arc::new(built)));
    }
    compiled
}
