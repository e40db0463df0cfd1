//! Mapping rules honour presence, refuse lossy literals and copy maps between types.
//! Each run goes through a real Tokenizer ([`FixtureServer`]) and the output mapping,
//! which builds the output with the same rules as a step's request. The schema is
//! built from proto text at run time; its Tokenizer is wire-compatible with the
//! fixture server's.

use base64::Engine as _;
use prost_reflect::{DynamicMessage, ReflectMessage, Value as Field};
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

fn has(message: &DynamicMessage, name: &str) -> bool {
    let field = message
        .descriptor()
        .get_field_by_name(name)
        .unwrap_or_else(|| panic!("no field {name}"));
    message.has_field(&field)
}

fn json_of(message: &DynamicMessage) -> Value {
    workflow::compile::encode_json(message).expect("a JSON form")
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

#[tokio::test]
async fn an_unset_wrapper_stays_unset_and_a_set_zero_stays_set() {
    let rules = ["count = input.count"];
    let unset = record_output(&rules, json!({ "name": "x" })).await;
    assert!(!has(&unset, "count"), "absent must not become 0");
    let zero = record_output(&rules, json!({ "name": "x", "count": 0 })).await;
    assert!(has(&zero, "count"), "a set 0 is present");
    assert_eq!(json_of(&zero)["count"], json!(0));
}

#[tokio::test]
async fn an_unset_timestamp_stays_unset() {
    let rules = ["at = input.at"];
    let unset = record_output(&rules, json!({ "name": "x" })).await;
    assert!(!has(&unset, "at"), "absent must not become the epoch");
    let set = record_output(&rules, json!({ "name": "x", "at": "2026-12-02T21:00:00Z" })).await;
    assert_eq!(json_of(&set)["at"], json!("2026-12-02T21:00:00Z"));
}

#[tokio::test]
async fn an_unset_sub_message_stays_unset_even_through_a_nested_path() {
    let rules = ["meta = input.meta", "meta.notes = input.meta.notes"];
    let unset = record_output(&rules, json!({ "name": "x" })).await;
    assert!(
        !has(&unset, "meta"),
        "neither the copy nor the nested read may create meta: {}",
        json_of(&unset)
    );
    let empty = record_output(&rules, json!({ "name": "x", "meta": {} })).await;
    assert!(has(&empty, "meta"), "a set empty message is present");
    // A nested read alone through a set message still copies.
    let nested = record_output(
        &["meta.notes = input.meta.notes"],
        json!({ "name": "x", "meta": { "notes": "n" } }),
    )
    .await;
    assert_eq!(json_of(&nested)["meta"], json!({ "notes": "n" }));
}

#[tokio::test]
async fn an_unset_optional_scalar_stays_unset() {
    let rules = ["level = input.level"];
    let unset = record_output(&rules, json!({ "name": "x" })).await;
    assert!(!has(&unset, "level"), "absent must not become 0");
    let zero = record_output(&rules, json!({ "name": "x", "level": 0 })).await;
    assert!(has(&zero, "level"), "a set 0 is present");
}

#[tokio::test]
async fn one_rule_per_oneof_member_keeps_the_member_the_input_set() {
    let rules = ["a = input.a", "b = input.b"];
    let first = record_output(&rules, json!({ "name": "x", "a": "kept" })).await;
    assert!(has(&first, "a") && !has(&first, "b"), "{}", json_of(&first));
    assert_eq!(json_of(&first)["a"], json!("kept"));
    let second = record_output(&rules, json!({ "name": "x", "b": 7 })).await;
    assert!(
        has(&second, "b") && !has(&second, "a"),
        "{}",
        json_of(&second)
    );
    let neither = record_output(&rules, json!({ "name": "x" })).await;
    assert!(!has(&neither, "a") && !has(&neither, "b"));
}

#[tokio::test]
async fn a_clear_rule_does_not_create_the_parent() {
    let alone = record_output(&["-meta.notes"], json!({ "name": "x" })).await;
    assert!(!has(&alone, "meta"), "{}", json_of(&alone));
    // It still clears inside a parent an earlier rule wrote.
    let copied = record_output(
        &["meta = input.meta", "-meta.notes"],
        json!({ "name": "x", "meta": { "id": "m1", "notes": "secret" } }),
    )
    .await;
    assert_eq!(json_of(&copied)["meta"], json!({ "id": "m1" }));
}

#[tokio::test]
async fn appending_an_absent_value_appends_nothing() {
    let rules = ["levels += input.level"];
    let unset = record_output(&rules, json!({ "name": "x" })).await;
    assert_eq!(json_of(&unset).get("levels"), None, "{}", json_of(&unset));
    let set = record_output(&rules, json!({ "name": "x", "level": 0 })).await;
    assert_eq!(json_of(&set)["levels"], json!([0]));
}

#[tokio::test]
async fn implicit_presence_scalars_still_copy_their_default() {
    // `name` has no presence: reading it yields '' and writing it is harmless.
    let out = record_output(&["a = input.name"], json!({})).await;
    assert!(
        has(&out, "a"),
        "a oneof member written from a plain scalar is set"
    );
    assert_eq!(json_of(&out)["a"], json!(""));
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

#[tokio::test]
async fn a_map_copies_into_a_map_of_another_message_with_the_same_types() {
    let out = output_of(
        "jobs.test.Summary",
        &["counts = input.totals", "by_id = input.metas"],
        json!({
            "name": "x",
            "totals": { "a": 1, "b": "9007199254740993" },
            "metas": { "m1": { "id": "m1", "notes": "n" } },
        }),
    )
    .await;
    assert_eq!(
        json_of(&out),
        json!({
            "counts": { "a": 1, "b": 9_007_199_254_740_993_i64 },
            "byId": { "m1": { "id": "m1", "notes": "n" } },
        })
    );
}

#[test]
fn a_map_with_other_value_types_is_still_refused() {
    let all = findings(&envelope(
        "127.0.0.1:1",
        "jobs.test.Summary",
        &["narrow = input.totals", "by_id = input.totals"],
    ));
    assert_finding(&all, "$.output.rules[0]", &["cannot assign", "'narrow'"]);
    assert_finding(&all, "$.output.rules[1]", &["cannot assign", "'by_id'"]);
}

#[tokio::test]
async fn copying_a_skipped_steps_whole_response_copies_nothing() {
    let source = r#"
        syntax = "proto3";
        package jobs.test;
        message Text { string text = 1; bool fail = 2; }
        message Tokens { repeated int64 ids = 1; bool fail = 2; }
        service Tokenizer { rpc Tokenize(Text) returns (Tokens); }
        message Out { Tokens tok = 1; string text = 2; }
    "#;
    let bytes = workflow::schema::compile_proto_source("skipped.proto", source).unwrap();
    let server = FixtureServer::start().await;
    let envelope = json!({
        "name": "skipped",
        "schema": { "descriptorSetBase64": base64::engine::general_purpose::STANDARD.encode(bytes) },
        "inputType": "jobs.test.Text",
        "steps": [{
            "name": "tokenize", "target": server.target(), "method": "jobs.test.Tokenizer/Tokenize",
            "rules": ["text = input.text"], "when": "input.text == 'go'",
        }],
        "output": { "type": "jobs.test.Out", "rules": ["tok = tokenize", "text = input.text"] },
    });
    let wf = CompiledWorkflow::compile(&envelope).unwrap_or_else(|f| panic!("{f}"));
    for (text, present) in [("stop", false), ("go", true)] {
        let input = wf.parse_input(&json!({ "text": text })).unwrap();
        let output = Runner::new().run(&wf, &input).await.unwrap().output;
        assert_eq!(has(&output, "tok"), present, "{text}: {}", json_of(&output));
    }
}
