//! Hardening: recursive and wide types, bounded CEL (gates and `buf.validate` rules),
//! evaluation off the async threads. Schemas are built from proto text at run time;
//! the Tokenizer they declare is wire-compatible with the fixture server's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, assert_finding, findings};
use workflow::{
    Checkpoint, CheckpointSink, CompiledWorkflow, FailureKind, NoMetadata, RunError, Runner,
    SegmentOutcome, SinkError, StepFailure, replay_checkpoints,
};

const HEADER: &str = r#"
syntax = "proto3";
package jobs.test;
import "buf/validate/validate.proto";
message Text { string text = 1; bool fail = 2; }
message Tokens { repeated int64 ids = 1; bool fail = 2; }
service Tokenizer { rpc Tokenize(Text) returns (Tokens); }
message Node { Node next = 1; string name = 2; }
message A { B b = 1; string name = 2; }
message B { A a = 1; string name = 2; }
message Numbers { repeated int64 values = 1; string name = 2; }
service Desk { rpc Ask(Text) returns (Node); }
"#;

fn schema_base64(extra: &str) -> String {
    let source = format!("{HEADER}\n{extra}");
    let bytes = workflow::schema::compile_proto_source("bounds.proto", &source)
        .unwrap_or_else(|e| panic!("{e}"));
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `input_type` → one gated tokenize step reading `text = input.name`.
fn gated(extra: &str, input_type: &str, when: &str, target: &str) -> Value {
    json!({
        "name": "gated",
        "schema": { "descriptorSetBase64": schema_base64(extra) },
        "inputType": input_type,
        "steps": [{
            "name": "tokenize", "target": target, "method": "jobs.test.Tokenizer/Tokenize",
            "rules": ["text = input.name"], "when": when,
        }],
    })
}

fn compile(envelope: &Value) -> CompiledWorkflow {
    CompiledWorkflow::compile(envelope).unwrap_or_else(|findings| panic!("{findings}"))
}

/// Runs the workflow on `input`; `Ok(true)` when tokenize was called (gate open).
async fn run_gate(
    server: &FixtureServer,
    wf: &CompiledWorkflow,
    input: &Value,
) -> Result<bool, StepFailure> {
    let before = server.stats.tokenize_calls();
    let input = wf.parse_input(input).expect("valid input");
    match Runner::new().run(wf, &input).await {
        Ok(outcome) => {
            let called = server.stats.tokenize_calls() > before;
            assert_eq!(outcome.steps[0].skipped, !called);
            Ok(called)
        }
        Err(RunError::Failed(failure)) => Err(failure),
        Err(other) => panic!("{other}"),
    }
}

/// `{"name": "n0", "next": {"name": "n1", "next": ...}}`, `depth` messages deep.
fn chain(depth: usize) -> Value {
    let mut node = json!({ "name": format!("n{}", depth - 1) });
    for i in (0..depth - 1).rev() {
        node = json!({ "name": format!("n{i}"), "next": node });
    }
    node
}

#[tokio::test]
async fn a_recursive_input_type_gates_by_presence_without_crashing() {
    let server = FixtureServer::start().await;
    let wf = compile(&gated(
        "",
        "jobs.test.Node",
        "has(input.next) && input.next.name == 'x'",
        &server.target(),
    ));
    let open = json!({ "name": "a", "next": { "name": "x" } });
    assert_eq!(run_gate(&server, &wf, &open).await, Ok(true));
    let unset = json!({ "name": "a" });
    assert_eq!(
        run_gate(&server, &wf, &unset).await,
        Ok(false),
        "an unset message is absent"
    );
    let other = json!({ "name": "a", "next": { "name": "y", "next": { "name": "x" } } });
    assert_eq!(run_gate(&server, &wf, &other).await, Ok(false));
    // Still alive and still calling.
    assert_eq!(server.stats.tokenize_calls(), 1);
}

#[tokio::test]
async fn mutually_recursive_input_types_gate_correctly() {
    let server = FixtureServer::start().await;
    let wf = compile(&gated(
        "",
        "jobs.test.A",
        "has(input.b) && has(input.b.a) && input.b.a.name == 'x'",
        &server.target(),
    ));
    let open = json!({ "name": "a", "b": { "a": { "name": "x" } } });
    assert_eq!(run_gate(&server, &wf, &open).await, Ok(true));
    let shallow = json!({ "name": "a", "b": { "name": "b" } });
    assert_eq!(run_gate(&server, &wf, &shallow).await, Ok(false));
    assert_eq!(run_gate(&server, &wf, &json!({})).await, Ok(false));
}

#[tokio::test]
async fn a_very_wide_input_type_gates_correctly() {
    let fields: Vec<String> = (1..2_000)
        .map(|i| format!("  string f{i} = {};", i + 2))
        .collect();
    let wide = format!(
        "message Wide {{\n  string name = 1;\n  Wide inner = 2;\n{}\n}}",
        fields.join("\n")
    );
    let server = FixtureServer::start().await;
    let wf = compile(&gated(
        &wide,
        "jobs.test.Wide",
        "input.f1999 == 'x' && !has(input.inner)",
        &server.target(),
    ));
    assert_eq!(
        run_gate(&server, &wf, &json!({ "name": "w", "f1999": "x" })).await,
        Ok(true)
    );
    assert_eq!(
        run_gate(&server, &wf, &json!({ "name": "w", "f1": "x" })).await,
        Ok(false)
    );
}

#[tokio::test]
async fn a_chain_deeper_than_the_depth_limit_is_a_gate_failure_naming_the_limit() {
    let server = FixtureServer::start().await;
    let wf = compile(&gated(
        "",
        "jobs.test.Node",
        "has(input.next)",
        &server.target(),
    ));
    assert_eq!(run_gate(&server, &wf, &chain(64)).await, Ok(true));
    let failure = run_gate(&server, &wf, &chain(80))
        .await
        .expect_err("too deep");
    assert_eq!(failure.kind, FailureKind::Gate, "{failure}");
    assert!(!failure.is_retryable());
    let text = failure.to_string();
    assert!(text.starts_with("GATE: step 'tokenize': "), "{text}");
    assert!(
        text.contains("`when` gate") && text.contains("64"),
        "{text}"
    );
}

struct Sink;

impl CheckpointSink for Sink {
    async fn record(&mut self, _checkpoint: &Checkpoint) -> Result<(), SinkError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_gate_can_read_an_earlier_step_with_a_recursive_response_type() {
    let server = FixtureServer::start().await;
    let envelope = json!({
        "name": "asked",
        "schema": { "descriptorSetBase64": schema_base64("") },
        "inputType": "jobs.test.Text",
        "steps": [
            { "name": "ask", "method": "jobs.test.Desk/Ask", "completion": "external",
              "rules": ["text = input.text"] },
            { "name": "tokenize", "target": server.target(), "method": "jobs.test.Tokenizer/Tokenize",
              "rules": ["text = ask.name"], "when": "has(ask.next) && ask.next.name == 'x'" },
        ],
    });
    let wf = compile(&envelope);
    let input = wf.parse_input(&json!({ "text": "t" })).unwrap();
    for (answer, open) in [
        (
            json!({ "name": "ab", "next": { "name": "x", "next": { "name": "z" } } }),
            true,
        ),
        (json!({ "name": "ab" }), false),
    ] {
        let stored = json!([{ "name": "ask", "skipped": false, "response": answer }]);
        let prior = replay_checkpoints(&wf, &stored).expect("replays");
        let outcome = Runner::new()
            .run_segment(&wf, &input, prior, &mut Sink, &NoMetadata)
            .await
            .expect("completes");
        let SegmentOutcome::Completed { steps, .. } = outcome else {
            panic!("expected completion")
        };
        assert_eq!(steps[1].skipped, !open, "{answer}");
    }
    assert_eq!(server.stats.tokenize_calls(), 1);
}

#[test]
fn a_nested_literal_comprehension_is_refused_at_compile_time() {
    let list = format!(
        "[{}]",
        (1..=50)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let when = format!("{list}.all(a, {list}.all(b, {list}.all(c, a + b + c > 0)))");
    let all = findings(&gated("", "jobs.test.Node", &when, "127.0.0.1:1"));
    assert_finding(
        &all,
        Some("tokenize"),
        "$.steps[0].when",
        &["nests 3 comprehensions", "limit of 2"],
    );
}

#[test]
fn oversized_gates_are_refused_at_compile_time() {
    let long = format!("input.name == '{}'", "x".repeat(5_000));
    assert_finding(
        &findings(&gated("", "jobs.test.Node", &long, "127.0.0.1:1")),
        Some("tokenize"),
        "$.steps[0].when",
        &["limit of 4096"],
    );
    let many = vec!["input.name == ''"; 130].join(" || ");
    assert_finding(
        &findings(&gated("", "jobs.test.Node", &many, "127.0.0.1:1")),
        Some("tokenize"),
        "$.steps[0].when",
        &["more than 512 AST nodes"],
    );
}

#[test]
fn struct_expressions_are_refused_at_compile_time() {
    for when in ["jobs.test.Node{name: 'x'} == input", "Foo{}.a == 1"] {
        assert_finding(
            &findings(&gated("", "jobs.test.Node", when, "127.0.0.1:1")),
            Some("tokenize"),
            "$.steps[0].when",
            &["constructs a message"],
        );
    }
}

/// A Numbers input with `n` values.
fn numbers(n: i64) -> Value {
    json!({ "name": "n", "values": (0..n).collect::<Vec<_>>() })
}

#[tokio::test]
async fn a_gate_too_costly_for_its_data_fails_fast_naming_the_cost_bound() {
    let server = FixtureServer::start().await;
    let wf = compile(&gated(
        "",
        "jobs.test.Numbers",
        "input.values.all(a, input.values.all(b, a + b > -1))",
        &server.target(),
    ));
    // Small data: the same gate is cheap and runs.
    assert_eq!(run_gate(&server, &wf, &numbers(20)).await, Ok(true));
    let started = Instant::now();
    let failure = run_gate(&server, &wf, &numbers(100_000))
        .await
        .expect_err("too costly");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(failure.kind, FailureKind::Gate);
    let text = failure.to_string();
    assert!(
        text.contains("step 'tokenize'") && text.contains("more than the limit of 1000000000"),
        "{text}"
    );
}

/// A gate over `n` values whose work grows as n²/2, within the cost bound.
const SLOW_GATE: &str = "input.values.all(a, input.values.exists(b, b == a))";
const SLOW_VALUES: i64 = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_slow_gate_does_not_pin_the_async_worker() {
    let server = FixtureServer::start().await;
    let mut envelope = gated("", "jobs.test.Numbers", SLOW_GATE, &server.target());
    // Generous, so the gate's own bound (1 s) is the one that could fire.
    envelope["deadlineMs"] = json!(60_000);
    let wf = compile(&envelope);
    let input = numbers(SLOW_VALUES);

    let ticks = Arc::new(AtomicUsize::new(0));
    let ticker = tokio::spawn({
        let ticks = ticks.clone();
        async move {
            let mut interval = tokio::time::interval(Duration::from_millis(5));
            // Missed ticks are skipped, not fired in a burst later: a pinned worker
            // would show as missing ticks.
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                interval.tick().await;
                ticks.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let started = Instant::now();
    let before = ticks.load(Ordering::SeqCst);
    // The run is a task too, so it shares the one worker with the ticker (the test
    // body itself runs on its own thread).
    let run = tokio::spawn(async move {
        let result = run_gate(&server, &wf, &input).await;
        (result, Instant::now())
    });
    let (result, finished) = run.await.expect("the run task");
    let elapsed = finished - started;
    let during = ticks.load(Ordering::SeqCst) - before;
    ticker.abort();
    eprintln!("slow gate: {result:?} in {elapsed:?}, {during} ticks");

    // Either outcome shows the point: the gate ran (or was abandoned) while the
    // single async worker kept serving the ticker.
    match &result {
        Ok(open) => assert!(*open),
        Err(failure) => assert!(
            failure
                .to_string()
                .contains("did not finish within 1000 ms"),
            "{failure}"
        ),
    }
    assert!(
        elapsed >= Duration::from_millis(50),
        "the gate should be slow enough to matter: {elapsed:?}"
    );
    let expected = elapsed.as_millis() as usize / 5;
    assert!(
        during * 3 >= expected,
        "{during} ticks in {elapsed:?} (about {expected} expected): the async worker was pinned"
    );
}

#[tokio::test]
async fn a_gate_outliving_the_segment_deadline_is_a_retryable_deadline() {
    let server = FixtureServer::start().await;
    let mut envelope = gated("", "jobs.test.Numbers", SLOW_GATE, &server.target());
    envelope["deadlineMs"] = json!(20);
    let wf = compile(&envelope);
    let started = Instant::now();
    let failure = run_gate(&server, &wf, &numbers(SLOW_VALUES))
        .await
        .expect_err("times out");
    assert!(started.elapsed() < Duration::from_millis(900));
    // The segment ran out, not the gate's own limit: a retry resumes with a fresh
    // segment, so this is a deadline, retried.
    assert_eq!(failure.kind, FailureKind::Deadline, "{failure}");
    assert!(failure.is_retryable());
    let text = failure.to_string();
    assert!(
        text.starts_with(
            "DEADLINE: step 'tokenize': the segment deadline of 20 ms passed while the `when` gate ran"
        ),
        "{text}"
    );
    assert_eq!(server.stats.tokenize_calls(), 0);
}

/// One external, validated step answering `jobs.test.<output>`.
fn validated(extra: &str, input_type: &str, output: &str) -> Value {
    json!({
        "name": "judged",
        "schema": { "descriptorSetBase64": schema_base64(extra) },
        "inputType": input_type,
        "steps": [{ "name": "judge", "method": format!("jobs.test.Judge/{output}"),
                    "completion": "external", "validate": true, "rules": ["text = input.text"] }],
    })
}

fn judged_message(name: &str, expression: &str) -> String {
    format!(
        r#"
        message {name} {{
          option (buf.validate.message).cel = {{ id: "{name}.rule" expression: "{expression}" }};
          int32 score = 1;
          repeated int32 marks = 2;
        }}
        service Judge {{ rpc {name}(Text) returns ({name}); }}
        "#
    )
}

#[test]
fn a_message_cel_rule_beyond_the_bounds_is_a_finding() {
    let deep = judged_message(
        "Deep",
        "this.marks.all(a, this.marks.all(b, this.marks.all(c, a + b + c > 0)))",
    );
    assert_finding(
        &findings(&validated(&deep, "jobs.test.Text", "Deep")),
        Some("judge"),
        "$.steps[0].method",
        &["jobs.test.Deep", "'Deep.rule'", "limit of 2"],
    );
    let built = judged_message("Built", "jobs.test.Text{} == this");
    assert_finding(
        &findings(&validated(&built, "jobs.test.Text", "Built")),
        Some("judge"),
        "$.steps[0].method",
        &["jobs.test.Built", "constructs a message"],
    );
}

#[test]
fn a_validate_step_whose_rules_do_not_compile_is_a_finding() {
    let broken = judged_message("Broken", "this.score ==");
    assert_finding(
        &findings(&validated(&broken, "jobs.test.Text", "Broken")),
        Some("judge"),
        "$.steps[0].method",
        &["jobs.test.Broken", "cannot be used"],
    );
    // A rule reading a field the type does not have fails the same way.
    let missing = judged_message("Missing", "this.nope > 0");
    assert_finding(
        &findings(&validated(&missing, "jobs.test.Text", "Missing")),
        Some("judge"),
        "$.steps[0].method",
        &["jobs.test.Missing", "cannot be used"],
    );
}

#[test]
fn an_input_type_whose_rules_do_not_compile_is_a_finding() {
    let broken = format!(
        "{}\nmessage In {{ option (buf.validate.message).cel = {{ id: \"in\" expression: \"this.text ==\" }}; string text = 1; }}",
        judged_message("Fine", "this.score >= 0")
    );
    assert_finding(
        &findings(&validated(&broken, "jobs.test.In", "Fine")),
        None,
        "$.inputType",
        &["jobs.test.In", "cannot be used"],
    );
    // The same schema with a usable input type compiles.
    compile(&validated(&broken, "jobs.test.Text", "Fine"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_slow_rule_check_is_bounded_in_time() {
    let slow = judged_message("Slow", "this.marks.all(a, this.marks.exists(b, b == a))");
    let wf = compile(&validated(&slow, "jobs.test.Text", "Slow"));
    let marks: Vec<i64> = (0..600).collect();
    let response = workflow::compile::decode_json(
        &wf.step("judge").unwrap().output_type(),
        &json!({ "marks": marks }),
    )
    .unwrap();
    let started = Instant::now();
    let err = wf
        .violations_within(&response, Duration::from_millis(20))
        .await
        .expect_err("too slow for 20 ms");
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(
        err,
        "checking the rules of jobs.test.Slow did not finish within 20 ms"
    );
    // A small response checks in time.
    let small = workflow::compile::decode_json(
        &wf.step("judge").unwrap().output_type(),
        &json!({ "marks": [1, 2] }),
    )
    .unwrap();
    assert_eq!(
        wf.violations_within(&small, Duration::from_secs(5)).await,
        Ok(Vec::new())
    );
}

#[test]
fn a_deeply_nested_rule_is_a_finding_not_a_crash() {
    let parens = format!("{}this.score{} >= 0", "(".repeat(1500), ")".repeat(1500));
    let deep = judged_message("Nested", &parens);
    assert_finding(
        &findings(&validated(&deep, "jobs.test.Text", "Nested")),
        Some("judge"),
        "$.steps[0].method",
        &["jobs.test.Nested", "cannot be used", "Recursion limit"],
    );
}

/// A workflow whose input type `jobs.test.Pairs` carries `rule` as a message rule.
fn input_ruled(rule: &str) -> CompiledWorkflow {
    let extra = format!(
        r#"
        message Pairs {{
          option (buf.validate.message).cel = {{ id: "pairs" expression: "{rule}" }};
          repeated int64 values = 1;
          string name = 2;
        }}
        "#
    );
    compile(&json!({
        "name": "ruled",
        "schema": { "descriptorSetBase64": schema_base64(&extra) },
        "inputType": "jobs.test.Pairs",
        "steps": [{ "name": "tokenize", "target": "127.0.0.1:1",
                    "method": "jobs.test.Tokenizer/Tokenize", "rules": ["text = input.name"] }],
    }))
}

/// Within every static bound, and seconds of work over 1,000 values (~12 s over 2,000).
const QUADRATIC_RULE: &str = "this.values.all(a, this.values.all(b, a + b > -1))";

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn slow_input_rules_are_checked_off_the_async_thread_within_the_limit() {
    let wf = input_ruled(QUADRATIC_RULE);
    let input = json!({ "name": "n", "values": (0..1_000).collect::<Vec<i64>>() });

    let ticks = Arc::new(AtomicUsize::new(0));
    let ticker = tokio::spawn({
        let ticks = ticks.clone();
        async move {
            let mut interval = tokio::time::interval(Duration::from_millis(5));
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                interval.tick().await;
                ticks.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let started = Instant::now();
    let check = tokio::spawn(async move {
        wf.parse_input_within(&input, Duration::from_millis(300))
            .await
    });
    let err = check.await.expect("the check task").expect_err("too slow");
    let elapsed = started.elapsed();
    let during = ticks.load(Ordering::SeqCst);
    ticker.abort();

    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    assert_eq!(
        err,
        workflow::compile::MessageError::RulesTimedOut {
            type_name: "jobs.test.Pairs".into(),
            limit_ms: 300,
        }
    );
    assert_eq!(
        err.to_string(),
        "the rules of jobs.test.Pairs did not finish within 300 ms"
    );
    // The one async worker kept serving the ticker while the rules ran.
    assert!(
        during >= 20,
        "{during} ticks in {elapsed:?}: the async worker was pinned"
    );
}

#[tokio::test]
async fn bounded_input_parsing_keeps_the_sync_verdicts() {
    use prost_reflect::ReflectMessage as _;

    let wf = input_ruled("this.values.all(v, v >= 0)");
    let limit = Duration::from_secs(5);
    let good = wf
        .parse_input_within(&json!({ "values": [1, 2] }), limit)
        .await
        .expect("valid");
    assert_eq!(
        good,
        wf.parse_input(&json!({ "values": [1, 2] })).expect("valid")
    );

    let broken = json!({ "values": [1, -2] });
    let err = wf
        .parse_input_within(&broken, limit)
        .await
        .expect_err("breaks");
    assert_eq!(Err(err.clone()), wf.parse_input(&broken));
    assert!(
        matches!(&err, workflow::compile::MessageError::Invalid { type_name, violations }
            if type_name == "jobs.test.Pairs" && violations.len() == 1),
        "{err}"
    );

    let unparsable = json!({ "values": "nope" });
    let err = wf
        .parse_input_within(&unparsable, limit)
        .await
        .expect_err("not JSON of the type");
    assert!(
        matches!(err, workflow::compile::MessageError::Unparsable { .. }),
        "{err}"
    );

    // Any type of the schema, not only the input's.
    let text = wf.pool.get_message_by_name("jobs.test.Text").expect("Text");
    let message = wf
        .parse_message_within(&text, &json!({ "text": "hi" }), limit)
        .await
        .expect("valid Text");
    assert_eq!(message.descriptor().full_name(), "jobs.test.Text");
}

#[tokio::test]
async fn a_map_too_costly_for_its_data_fails_fast_naming_the_cost_bound() {
    let server = FixtureServer::start().await;
    // Linear in the old estimate (20,000 × 7 nodes), quadratic in the evaluator
    // (minutes in a debug build): `map` counts twice in the exponent now.
    let wf = compile(&gated(
        "",
        "jobs.test.Numbers",
        "size(input.values.map(x, x)) > 0",
        &server.target(),
    ));
    assert_eq!(run_gate(&server, &wf, &numbers(100)).await, Ok(true));
    let started = Instant::now();
    let failure = run_gate(&server, &wf, &numbers(20_000))
        .await
        .expect_err("too costly");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(failure.kind, FailureKind::Gate);
    let text = failure.to_string();
    assert!(
        text.contains("cost exponent 2") && text.contains("more than the limit of 1000000000"),
        "{text}"
    );
}

/// `size((input.name + input.name) + ...)`: a balanced tree of `leaves` reads.
fn concatenations(leaves: usize) -> String {
    fn tree(leaves: usize) -> String {
        if leaves == 1 {
            return "input.name".to_owned();
        }
        format!("({} + {})", tree(leaves / 2), tree(leaves / 2))
    }
    format!("size({}) > 0", tree(leaves))
}

#[tokio::test]
async fn concatenation_that_could_build_too_much_memory_fails_fast_naming_the_bound() {
    let server = FixtureServer::start().await;
    // 128 reads of a 2 MiB string: ~256 MiB in the result, and more on the way.
    let wf = compile(&gated(
        "",
        "jobs.test.Numbers",
        &concatenations(128),
        &server.target(),
    ));
    // A short name concatenates fine.
    let small = json!({ "name": "ab", "values": [] });
    assert_eq!(run_gate(&server, &wf, &small).await, Ok(true));
    let big = json!({ "name": "x".repeat(2 * 1024 * 1024), "values": [] });
    let started = Instant::now();
    let failure = run_gate(&server, &wf, &big)
        .await
        .expect_err("too much memory");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(failure.kind, FailureKind::Gate);
    assert!(!failure.is_retryable());
    let text = failure.to_string();
    assert!(
        text.contains("127 `+` operators") && text.contains("gate::MAX_EVALUATION_BYTES"),
        "{text}"
    );
}

#[test]
fn a_rule_nesting_maps_over_a_long_literal_is_a_finding_where_all_is_not() {
    let list = format!("[{}]", vec!["1"; 100].join(","));
    // Two nested maps: (100 + marks...) ^ 4 × nodes, past the bound on the literal alone.
    let maps = judged_message(
        "Maps",
        &format!("size(this.marks.map(a, {list}.map(b, b))) >= 0"),
    );
    assert_finding(
        &findings(&validated(&maps, "jobs.test.Text", "Maps")),
        Some("judge"),
        "$.steps[0].method",
        &["jobs.test.Maps", "'Maps.rule'", "cost exponent 4"],
    );
    // The same nesting with `all` is (literal) ^ 2 × nodes: within the bound.
    let alls = judged_message("Alls", &format!("this.marks.all(a, {list}.all(b, b > 0))"));
    compile(&validated(&alls, "jobs.test.Text", "Alls"));
}

/// `count` message types, each holding the next: `Chain0 { Chain1 next = 1; } …`.
fn type_chain(count: usize) -> String {
    (0..count)
        .map(|i| {
            if i + 1 < count {
                format!(
                    "message Chain{i} {{ Chain{} next = 1; string name = 2; }}\n",
                    i + 1
                )
            } else {
                format!("message Chain{i} {{ string name = 2; }}\n")
            }
        })
        .collect()
}

#[test]
fn types_nested_thousands_deep_are_a_finding_not_a_stack_overflow() {
    // The validator recurses over field types: 5,000 levels overflowed a 2 MiB stack
    // before the nesting was bounded.
    let deep = gated(
        &type_chain(5_000),
        "jobs.test.Chain0",
        "true",
        "127.0.0.1:1",
    );
    let found = findings(&deep);
    assert!(
        found.iter().any(|f| f.path == "$.inputType"
            && f.message
                .contains("jobs.test.Chain0 nests message types 5000 deep")
            && f.message.contains("at most 64 levels")),
        "{found:?}"
    );
    // At the bound, and through recursive types (whose chains end where they repeat),
    // a workflow compiles.
    compile(&gated(
        &type_chain(workflow::ruleset::MAX_TYPE_NESTING),
        "jobs.test.Chain0",
        "true",
        "127.0.0.1:1",
    ));
    compile(&gated("", "jobs.test.A", "true", "127.0.0.1:1"));
}

/// `pairs` pairs of types that hold each other, chained: `Hub { Ring1 first; }`,
/// `Ring{i} { Ring{i+1}' next; Back{i} back; }`, `Back{i} { Ring{i} ring; }`. A chain
/// counted as ending where a type repeats looks 3 deep from the hub, but the
/// validator, entering each pair at its ring type, walks 2 × `pairs` + 1 levels.
fn paired_rings(pairs: usize) -> String {
    let mut proto = String::from("message Hub { Ring1 first = 1; string name = 2; }\n");
    for i in 1..=pairs {
        let next = if i < pairs {
            format!("Back{} next = 1; ", i + 1)
        } else {
            String::new()
        };
        proto.push_str(&format!(
            "message Ring{i} {{ {next}Back{i} back = 2; }}\nmessage Back{i} {{ Ring{i} ring = 1; }}\n"
        ));
    }
    proto
}

/// `size` types in one ring, each holding the next and the last the first.
fn one_ring(size: usize) -> String {
    let mut proto = String::from("message Hub { Link0 first = 1; string name = 2; }\n");
    for i in 0..size {
        proto.push_str(&format!(
            "message Link{i} {{ Link{} next = 1; }}\n",
            (i + 1) % size
        ));
    }
    proto
}

#[test]
fn types_that_hold_each_other_count_every_member_toward_the_nesting_bound() {
    // Found in review: bounding by "a chain ends where a type repeats" saw 3 levels
    // here, while the validator's recursion went 2 × 2,000 deep and overflowed.
    let found = findings(&gated(
        &paired_rings(2_000),
        "jobs.test.Hub",
        "true",
        "127.0.0.1:1",
    ));
    assert!(
        found.iter().any(|f| f.path == "$.inputType"
            && f.message
                .contains("jobs.test.Hub nests message types 4001 deep")),
        "{found:?}"
    );
    // A ring of 63 types under the hub is at the bound; one more is past it.
    compile(&gated(
        &one_ring(63),
        "jobs.test.Hub",
        "true",
        "127.0.0.1:1",
    ));
    let found = findings(&gated(
        &one_ring(64),
        "jobs.test.Hub",
        "true",
        "127.0.0.1:1",
    ));
    assert!(
        found.iter().any(|f| f
            .message
            .contains("jobs.test.Hub nests message types 65 deep")),
        "{found:?}"
    );
}

/// Runs `f` on a thread with the 2 MiB stack of tokio's worker and blocking threads,
/// where the engine compiles; a stack overflow there aborts the test binary.
fn on_a_2_mib_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn_scoped(scope, f)
            .unwrap()
            .join()
            .unwrap()
    })
}

/// `Outer { Nested inner; }`, `Nested` with a message rule of `depth` nested
/// parentheses around `true`, and the Judge returning `Outer`.
fn held_rule_in_parentheses(depth: usize) -> String {
    let expression = format!("{}true{}", "(".repeat(depth), ")".repeat(depth));
    format!(
        r#"
        message Nested {{
          option (buf.validate.message).cel = {{ id: "Nested.rule" expression: "{expression}" }};
          int32 score = 1;
        }}
        message Outer {{ Nested inner = 1; }}
        service Judge {{ rpc Outer(Text) returns (Outer); }}
        "#
    )
}

#[test]
fn a_deep_rule_in_a_held_type_is_a_finding_not_a_stack_overflow() {
    // Found in review: the held type's rule was skipped, but validating the type
    // holding it built the held type's evaluator too, parsing the rule on the
    // calling thread: 2,000 parentheses (unparsable) and 100,000 (out of bounds) both
    // aborted the process.
    for depth in [2_000, 100_000] {
        let envelope = validated(&held_rule_in_parentheses(depth), "jobs.test.Text", "Outer");
        let found = on_a_2_mib_thread(|| findings(&envelope));
        assert!(
            found
                .iter()
                .any(|f| f.step.as_deref() == Some("judge")
                    && f.message.contains("jobs.test.Nested")),
            "{depth}: {found:?}"
        );
    }
}

#[test]
fn rules_within_bounds_on_types_nested_to_the_bound_compile_on_a_small_thread() {
    // Found in review: parentheses add no AST depth, so a rule of 90 of them (the
    // parser's own limit is 96) is within bounds; at the bottom of 64 nested types,
    // building the validator on a 2 MiB thread overflowed (20 were enough in a debug
    // build). Compiling runs on a thread of its own.
    let depth = workflow::ruleset::MAX_TYPE_NESTING;
    let expression = format!("{}true{}", "(".repeat(90), ")".repeat(90));
    let chain: String = (0..depth)
        .map(|i| {
            let next = if i + 1 < depth {
                format!("Chain{} next = 1; ", i + 1)
            } else {
                String::new()
            };
            format!(
                "message Chain{i} {{ option (buf.validate.message).cel = {{ id: \"Chain{i}.rule\" expression: \"{expression}\" }}; {next}string name = 2; }}\n"
            )
        })
        .collect();
    let envelope = gated(&chain, "jobs.test.Chain0", "true", "127.0.0.1:1");
    let compiled = on_a_2_mib_thread(|| CompiledWorkflow::compile(&envelope).map(|_| ()));
    assert!(
        compiled.is_ok(),
        "{:?}",
        compiled.err().map(|f| f.to_string())
    );
}
