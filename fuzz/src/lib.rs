//! The fuzz targets' bodies: each takes arbitrary bytes and must neither panic, nor
//! hang, nor hold memory afterwards, whatever they are. The binaries in
//! `fuzz_targets/` hand them to libFuzzer (`./dev fuzz TARGET MINUTES`, nightly); the
//! stable test `tests/tests/fuzz_corpus.rs` includes this file and replays every saved
//! input in `corpus/` once, so a crash found here stays fixed.
//!
//! | target           | what it drives                                                     |
//! |------------------|--------------------------------------------------------------------|
//! | `envelope`       | the workflow compiler and verifier, strict checks, outbound policy |
//! | `rules`          | the step-rule parser and the CEL gate parser and analysis          |
//! | `checkpoints`    | checkpoint replay against a compiled workflow                      |
//! | `request_record` | the request-topic decoder, plain and Confluent framing, its rules  |
//! | `actions_body`   | the actions route's body parser and every verb's request decoding  |

use std::sync::OnceLock;

use base64::Engine as _;
use jobs_proto::WireMessage as _;
use registry_stub::action::{Action, ActionError, ActionRequest};
use serde_json::{Value, json};
use workflow::CompiledWorkflow;
use workflow::outbound::OutboundRules;

/// The workflow the checkpoint target replays against, and the envelope target's
/// template: two steps, a `when`-free tokenize then embed.
const EMBED_TEXT: &str = include_str!("../../workflows/embed-text.json");

/// Fuzz inputs are cut to this size: bigger bodies are refused by the route before
/// any of this code runs, and smaller inputs keep the fuzzer fast.
const MAX_INPUT: usize = 256 * 1024;

/// The workflow envelope: the first byte picks the form of the rest. Even: the rest
/// is a JSON envelope. Odd: the rest is a descriptor set, put into the template
/// envelope (so the fuzzer reaches the descriptor decoder and the type checks).
pub fn envelope(data: &[u8]) {
    on_a_small_stack(|| envelope_here(data));
}

fn envelope_here(data: &[u8]) {
    let Some((&form, rest)) = data.split_first() else {
        return;
    };
    let rest = &rest[..rest.len().min(MAX_INPUT)];
    let envelope = if form % 2 == 0 {
        match serde_json::from_slice::<Value>(rest) {
            Ok(envelope) => envelope,
            Err(_) => return,
        }
    } else {
        let mut envelope = template();
        envelope["schema"] = json!({
            "descriptorSetBase64": base64::engine::general_purpose::STANDARD.encode(rest)
        });
        envelope
    };
    if let Ok(compiled) = CompiledWorkflow::compile(&envelope) {
        let _ = compiled.strict_findings();
        let _ = policy().findings(&compiled);
        let _ = compiled.parse_input(&json!({ "text": "fuzz" }));
    }
}

/// A step rule and a `when` gate, from the same text.
pub fn rules(data: &[u8]) {
    on_a_small_stack(|| rules_here(data));
}

fn rules_here(data: &[u8]) {
    let text = String::from_utf8_lossy(&data[..data.len().min(4096)]);
    let _ = workflow::rules::parse_rule(&text);
    let _ = workflow::gate::Gate::compile(&text);
}

/// A job's stored checkpoints, replayed against the embed-text workflow.
pub fn checkpoints(data: &[u8]) {
    on_a_small_stack(|| checkpoints_here(data));
}

fn checkpoints_here(data: &[u8]) {
    let Ok(stored) = serde_json::from_slice::<Value>(&data[..data.len().min(MAX_INPUT)]) else {
        return;
    };
    let _ = workflow::replay_checkpoints(embed_text(), &stored);
}

/// A record's value on the requests topic, then the request's own rules.
pub fn request_record(data: &[u8]) {
    on_a_small_stack(|| request_record_here(data));
}

fn request_record_here(data: &[u8]) {
    if let Ok(record) = jobs_proto::wire::read_request_record(Some(data)) {
        let _ = record.request.validate();
    }
}

/// An actions-route body, then its decoding as each verb's request message.
pub fn actions_body(data: &[u8]) {
    on_a_small_stack(|| actions_body_here(data));
}

fn actions_body_here(data: &[u8]) {
    let Ok(body) = registry_stub::route::parse_body(&data[..data.len().min(MAX_INPUT)]) else {
        return;
    };
    for verb in verbs() {
        let _ = verb.parse(body.clone());
    }
}

/// The stack of the threads the node runs these on (tokio's workers and blocking
/// pool): libFuzzer's main thread has 8 MiB, which would hide an overflow at 2 MiB.
const PRODUCTION_STACK_BYTES: usize = 2 * 1024 * 1024;

/// Runs `body` on a thread with [`PRODUCTION_STACK_BYTES`]; a panic there is
/// re-raised here, so the fuzzer and the replay test see it.
fn on_a_small_stack(body: impl FnOnce() + Send) {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .stack_size(PRODUCTION_STACK_BYTES)
            .spawn_scoped(scope, body)
            .unwrap_or_else(|e| panic!("no thread for the target: {e}"));
        if let Err(panic) = thread.join() {
            std::panic::resume_unwind(panic);
        }
    });
}

fn template() -> Value {
    serde_json::from_str(EMBED_TEXT).unwrap_or(Value::Null)
}

fn embed_text() -> &'static CompiledWorkflow {
    static COMPILED: OnceLock<CompiledWorkflow> = OnceLock::new();
    COMPILED.get_or_init(|| {
        CompiledWorkflow::compile(&template())
            .unwrap_or_else(|findings| panic!("the embed-text fixture compiles: {findings}"))
    })
}

/// A node's default outbound policy (loopback targets only).
fn policy() -> &'static workflow::outbound::OutboundPolicy {
    static POLICY: OnceLock<workflow::outbound::OutboundPolicy> = OnceLock::new();
    POLICY.get_or_init(|| {
        OutboundRules::default()
            .compile()
            .unwrap_or_else(|e| panic!("the default policy compiles: {e}"))
    })
}

/// One action per request message of the jobs verbs and the registry verbs, with a
/// handler that is never called (only [`Action::parse`] runs).
fn verbs() -> &'static [Action] {
    static VERBS: OnceLock<Vec<Action>> = OnceLock::new();
    VERBS.get_or_init(|| {
        let mut verbs = Vec::new();
        for (file, source) in [
            (
                "jobs_verbs.proto",
                include_str!("../../jobs-role/proto/jobs_verbs.proto"),
            ),
            (
                "registry.proto",
                include_str!("../../registry-stub/proto/registry.proto"),
            ),
        ] {
            let set = workflow::schema::compile_proto_source(file, source)
                .unwrap_or_else(|e| panic!("{file} compiles: {e}"));
            let pool = prost_reflect::DescriptorPool::decode(set.as_slice())
                .unwrap_or_else(|e| panic!("{file} decodes: {e}"));
            for message in pool.all_messages() {
                if message.parent_file().name() != file || !message.name().ends_with("Request") {
                    continue;
                }
                let name = message.name().to_owned();
                verbs.push(Action::new(
                    &name,
                    "fuzzed",
                    "*",
                    message.clone(),
                    message,
                    |_request: ActionRequest| async {
                        Err::<Value, _>(ActionError::internal("never called"))
                    },
                ));
            }
        }
        verbs
    })
}
