//! Abandoned CEL evaluations never hold up the runtime's shutdown: they run on
//! detached evaluation threads, not on tokio's blocking pool (whose threads a
//! runtime drop waits for). Its own test binary, so the evaluation it abandons does
//! not occupy an evaluation slot of other tests.

use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::json;
use workflow::CompiledWorkflow;
use workflow::gate::Gate;
use workflow::scope::Scope;

const SCHEMA: &str = r#"
syntax = "proto3";
package jobs.test;
message Text { string text = 1; }
message Tokens { repeated int64 ids = 1; }
service Tokenizer { rpc Tokenize(Text) returns (Tokens); }
message Numbers { repeated int64 values = 1; string name = 2; }
"#;

/// Within every bound, and about 10 s of work over 2,000 values in a debug build.
const SLOW_GATE: &str = "input.values.all(a, input.values.all(b, a + b > -1))";

#[test]
fn dropping_a_runtime_does_not_wait_for_an_abandoned_gate() {
    let bytes = workflow::schema::compile_proto_source("shutdown.proto", SCHEMA)
        .unwrap_or_else(|e| panic!("{e}"));
    let wf = CompiledWorkflow::compile(&json!({
        "name": "gated",
        "schema": { "descriptorSetBase64": base64::engine::general_purpose::STANDARD.encode(bytes) },
        "inputType": "jobs.test.Numbers",
        "steps": [{ "name": "tokenize", "target": "127.0.0.1:1",
                    "method": "jobs.test.Tokenizer/Tokenize", "rules": ["text = input.name"],
                    "when": SLOW_GATE }],
    }))
    .unwrap_or_else(|findings| panic!("{findings}"));
    let input = wf
        .parse_input(&json!({ "values": (0..2_000).collect::<Vec<i64>>() }))
        .expect("valid input");
    let scope = Scope::new(input);
    let gate = Gate::compile(SLOW_GATE).expect("within bounds");

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let answer = runtime.block_on(gate.evaluate_within(&scope, Duration::from_millis(100)));
    assert_eq!(
        answer,
        Err("the `when` gate did not finish within 100 ms".to_owned())
    );

    // A plain drop, as at the end of `#[tokio::main]` after SIGTERM: with the gate on
    // the blocking pool this waited for the whole evaluation.
    let started = Instant::now();
    drop(runtime);
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(1),
        "the runtime drop took {waited:?}"
    );
}
