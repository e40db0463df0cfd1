//! Mapping rules honour presence, refuse lossy literals and copy maps between types.
//! Each run goes through a real Tokenizer ([`FixtureServer`]) and the output mapping,
//! which builds the output with the same rules as a step's request. The schema is
//! built from proto text at run time; its Tokenizer is wire-compatible with the
//! fixture server's.

use base64::Engine as _;
use prost_reflect::{DynamicMessage, Value as Field};
use serde_json::{Value, json};
use workflow::testkit::FixtureServer;
use workflow::{CompiledWorkflow, Finding, Runner};

const SCHEMA: &str = r#"
syntax = "proto3";
package jobs.test;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message Text { string text = 1; bool fail = 2; }
message Tokens { repeated int64 ids = 1; bool fail = 2; }
service Tokenizer { rpc Tokenize(Text) returns (Tokens); }
message Meta { string id = 1; string notes = 2; }
message Record {
  string name = 1;
  oneof choice { string a = 2; int64 b = 3; }
  google.protobuf.Int32Value count = 4;
  google.protobuf.Timestamp at = 5;
  Meta meta = 6;
  optional int32 level = 7;
  map<string, int64> totals = 8;
  map<string, Meta> metas = 9;
  repeated int32 levels = 10;
  float ratio = 11;
  double score = 12;
}
message Summary {
  map<string, int64> counts = 1;
  map<string, Meta> by_id = 2;
  map<string, int32> narrow = 3;
}
"#;

fn schema_base64() -> String {
    let bytes = workflow::schema::compile_proto_source("rules.proto", SCHEMA)
        .unwrap_or_else(|e| panic!("{e}"));
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `jobs.test.Record` in, one tokenize step, the output built by `rules`.
fn envelope(target: &str, output_type: &str, rules: &[&str]) -> Value {
    json!({
        "name": "rules",
        "schema": { "descriptorSetBase64": schema_base64() },
        "inputType": "jobs.test.Record",
        "steps": [{
            "name": "tokenize", "target": target, "method": "jobs.test.Tokenizer/Tokenize",
            "rules": ["text = input.name"],
        }],
        "output": { "type": output_type, "rules": rules },
    })
}

/// Runs the workflow against a real Tokenizer and returns its output.
async fn output_of(output_type: &str, rules: &[&str], input: Value) -> DynamicMessage {
    let server = FixtureServer::start().await;
    let wf = CompiledWorkflow::compile(&envelope(&server.target(), output_type, rules))
        .unwrap_or_else(|findings| panic!("{findings}"));
    let input = wf.parse_input(&input).expect("valid input");
    let outcome = Runner::new()
        .run(&wf, &input)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(server.stats.tokenize_calls(), 1);
    outcome.output
}

async fn record_output(rules: &[&str], input: Value) -> DynamicMessage {
    output_of("jobs.test.Record", rules, input).await
}

fn json_of(message: &DynamicMessage) -> Value {
    workflow::compile::encode_json(message)
}

fn findings(envelope: &Value) -> Vec<Finding> {
    match CompiledWorkflow::compile(envelope) {
        Ok(_) => panic!("the envelope should not compile"),
        Err(findings) => findings.0,
    }
}

fn assert_finding(all: &[Finding], path: &str, needles: &[&str]) {
    assert!(
        all.iter()
            .any(|f| f.path == path && needles.iter().all(|n| f.message.contains(n))),
        "no finding at {path} mentioning {needles:?}; got:\n{}",
        all.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn lossy_number_literals_are_refused_at_compile_time() {
    let all = findings(&envelope(
        "127.0.0.1:1",
        "jobs.test.Record",
        &[
            "ratio = 1e39",
            "score = 9007199254740993",
            "ratio = 16777217",
            "ratio = 1e-50",
            "levels += 2.5",
        ],
    ));
    assert_finding(
        &all,
        "$.output.rules[0]",
        &["ratio = 1e39", "'ratio'", "float", "infinity"],
    );
    assert_finding(
        &all,
        "$.output.rules[1]",
        &["'score'", "double", "9007199254740993", "2^53"],
    );
    assert_finding(&all, "$.output.rules[2]", &["'ratio'", "16777217", "2^24"]);
    assert_finding(&all, "$.output.rules[3]", &["'ratio'", "would become 0"]);
    assert_finding(&all, "$.output.rules[4]", &["'levels'"]);
    assert_eq!(all.len(), 5, "{all:?}");
}

#[tokio::test]
async fn exact_number_literals_still_compile_and_run() {
    let out = record_output(
        &[
            "ratio = 16777216",
            "score = 9007199254740992",
            "a = \"x\"",
            "levels += 3",
        ],
        json!({ "name": "x" }),
    )
    .await;
    let ratio = out.get_field_by_name("ratio").map(|v| v.into_owned());
    assert_eq!(ratio, Some(Field::F32(16_777_216.0)));
    let score = out.get_field_by_name("score").map(|v| v.into_owned());
    assert_eq!(score, Some(Field::F64(9_007_199_254_740_992.0)));
    assert_eq!(json_of(&out)["levels"], json!([3]));
}
