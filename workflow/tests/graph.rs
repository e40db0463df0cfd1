//! Workflows as graphs: `after`, its findings, and segments that run independent
//! steps at once, against real gRPC servers on loopback.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use workflow::testkit::{
    FixtureOptions, FixtureServer, assert_finding, compile_new as compile, diamond_workflow,
    new_findings as findings, review_step, step, workflow,
};
use workflow::{
    Checkpoint, CheckpointSink, CompiledWorkflow, FailureKind, NoMetadata, Runner, SegmentError,
    SegmentOutcome, SinkError, WaitingStep, replay_checkpoints,
};

const TARGET: &str = "127.0.0.1:1";

struct Recorder(Vec<Checkpoint>);

impl CheckpointSink for Recorder {
    async fn record(&mut self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        self.0.push(checkpoint.clone());
        Ok(())
    }
}

fn names(checkpoints: &[Checkpoint]) -> Vec<&str> {
    checkpoints.iter().map(|c| c.name.as_str()).collect()
}

fn tokenize(name: &str, target: &str, after: &[&str]) -> Value {
    let mut step = step(
        name,
        target,
        "jobs.test.Tokenizer/Tokenize",
        &["text = input.text", "fail = input.fail"],
    );
    step["after"] = json!(after);
    step
}

#[test]
fn a_diamond_compiles_with_its_dependencies_and_ancestors() {
    let wf = compile(&diamond_workflow(TARGET));
    assert!(!wf.is_chain());
    let d = wf.step("d").unwrap();
    assert_eq!(d.after, vec![1, 2]);
    assert_eq!(d.ancestors, vec![0, 1, 2]);
    assert_eq!(wf.step("c").unwrap().ancestors, vec![0]);
    assert_eq!(wf.max_parallel, workflow::compile::DEFAULT_MAX_PARALLEL);
}

#[test]
fn a_cycle_is_a_finding_naming_its_steps() {
    let mut envelope = diamond_workflow(TARGET);
    envelope["steps"][0]["after"] = json!(["d"]);
    let all = findings(&envelope);
    let cycle = all
        .iter()
        .find(|f| f.message.contains("cycle"))
        .unwrap_or_else(|| panic!("no cycle finding: {all:?}"));
    for name in ["'", "a", "b", "d"] {
        assert!(cycle.message.contains(name), "{cycle}");
    }
    assert!(cycle.path.contains(".after"), "{cycle}");
}

#[test]
fn an_unknown_or_self_naming_after_is_a_finding() {
    let mut envelope = diamond_workflow(TARGET);
    envelope["steps"][3]["after"] = json!(["b", "cc"]);
    assert_finding(
        &findings(&envelope),
        Some("d"),
        "$.steps[3].after[1]",
        &["unknown step 'cc'", "did you mean 'c'?"],
    );
    let mut envelope = diamond_workflow(TARGET);
    envelope["steps"][1]["after"] = json!(["b"]);
    assert_finding(
        &findings(&envelope),
        Some("b"),
        "$.steps[1].after[0]",
        &["cannot run after itself"],
    );
    let mut envelope = diamond_workflow(TARGET);
    envelope["steps"][1]["after"] = json!("a");
    assert_finding(
        &findings(&envelope),
        Some("b"),
        "$.steps[1].after",
        &["must be an array of step names"],
    );
}

#[test]
fn a_rule_or_gate_reading_a_step_that_is_not_an_ancestor_is_a_finding() {
    // c runs beside b: it may not read it.
    let mut envelope = diamond_workflow(TARGET);
    envelope["steps"][2]["rules"] = json!(["ids = a.ids", "fail = b.values"]);
    assert_finding(
        &findings(&envelope),
        Some("c"),
        "$.steps[2].rules[1]",
        &["step 'c' reads step 'b'", "not one of its ancestors"],
    );
    let mut envelope = diamond_workflow(TARGET);
    envelope["steps"][2]["when"] = json!("size(b.values) > 0");
    assert_finding(
        &findings(&envelope),
        Some("c"),
        "$.steps[2].when",
        &["step 'c' reads step 'b'"],
    );
    // d runs after both: reading them, and a through them, is fine; so is the output
    // reading every step.
    let mut envelope = diamond_workflow(TARGET);
    envelope["steps"][3]["when"] = json!("size(b.values) > 0 && size(a.ids) > 0");
    compile(&envelope);
}

#[test]
fn max_parallel_is_bounded() {
    for bad in [json!(0), json!(257), json!("8"), json!(1.5)] {
        let mut envelope = diamond_workflow(TARGET);
        envelope["maxParallel"] = bad;
        assert_finding(
            &findings(&envelope),
            None,
            "$.maxParallel",
            &["from 1 to 256"],
        );
    }
    let mut envelope = diamond_workflow(TARGET);
    envelope["maxParallel"] = json!(256);
    assert_eq!(compile(&envelope).max_parallel, 256);
}

#[tokio::test]
async fn a_diamond_runs_its_two_branches_at_once() {
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_millis(700)),
        ..Default::default()
    })
    .await;
    let wf = compile(&diamond_workflow(&server.target()));
    let input = wf.parse_input(&json!({ "text": "hi" })).unwrap();
    let mut recorder = Recorder(Vec::new());
    let started = Instant::now();
    let outcome = Runner::new()
        .run_segment(&wf, &input, Vec::new(), &mut recorder, &NoMetadata)
        .await
        .expect("completes");
    let took = started.elapsed();
    assert_eq!(server.stats.max_in_flight(), 2, "b and c overlapped");
    assert!(
        took < Duration::from_millis(1400),
        "two 700 ms branches side by side took {took:?}"
    );
    let SegmentOutcome::Completed {
        output_json, steps, ..
    } = outcome
    else {
        panic!("expected completion")
    };
    assert_eq!(steps, recorder.0);
    let order = names(&steps);
    assert_eq!((order[0], order[3]), ("a", "d"), "{order:?}");
    assert_eq!(
        output_json,
        json!({ "sourceText": "hi", "vector": [0.2, 1.0, 0.2, 1.0] })
    );
    // The checkpoints replay in the order they were written, and a copy with the
    // branches the other way round replays too.
    let stored = Value::Array(steps.iter().map(Checkpoint::to_json).collect());
    assert_eq!(replay_checkpoints(&wf, &stored).unwrap().len(), 4);
    let swapped = json!([stored[0], stored[2], stored[1], stored[3]]);
    assert_eq!(replay_checkpoints(&wf, &swapped).unwrap().len(), 4);
}

#[tokio::test]
async fn a_resumed_diamond_calls_only_the_missing_steps() {
    let server = FixtureServer::start().await;
    let wf = compile(&diamond_workflow(&server.target()));
    let input = wf.parse_input(&json!({ "text": "hi" })).unwrap();
    // a and c are done; b and d are not.
    let stored = json!([
        { "name": "a", "skipped": false, "response": { "ids": [104, 105] } },
        { "name": "c", "skipped": false, "response": { "values": [0.2, 1.0] } },
    ]);
    let prior = replay_checkpoints(&wf, &stored).unwrap();
    let mut recorder = Recorder(Vec::new());
    Runner::new()
        .run_segment(&wf, &input, prior, &mut recorder, &NoMetadata)
        .await
        .expect("completes");
    assert_eq!(names(&recorder.0), ["b", "d"]);
    assert_eq!(server.stats.embed_calls(), 1);
    assert_eq!(server.stats.tokenize_calls(), 1);
}

#[test]
fn replay_refuses_a_graph_whose_checkpoints_do_not_fit() {
    let wf = compile(&diamond_workflow(TARGET));
    let a = json!({ "name": "a", "skipped": false, "response": { "ids": [1] } });
    let b = json!({ "name": "b", "skipped": false, "response": { "values": [1.0] } });
    let d = json!({ "name": "d", "skipped": false, "response": { "ids": [1] } });
    for (stored, needle) in [
        (json!([a, b, b]), "names step 'b' a second time"),
        (json!([a, b, d]), "comes before any checkpoint of step 'c'"),
        (json!([b]), "comes before any checkpoint of step 'a'"),
        (
            json!([a, { "name": "e", "skipped": true }]),
            "names step 'e', which the workflow does not have",
        ),
    ] {
        let failure = replay_checkpoints(&wf, &stored).expect_err("replay should refuse");
        assert_eq!(failure.kind, FailureKind::Workflow);
        assert!(failure.message.contains(needle), "{failure}");
    }
}

/// `a`; `slow` (tokenize after 600 ms) and `embed` (fails when the input says so)
/// both after `a`; `last` after both.
fn branch_failure_workflow(target: &str, embed_validates: bool) -> Value {
    let mut embed = step(
        "embed",
        target,
        "jobs.test.Embedder/Embed",
        &["ids = a.ids", "fail = a.fail"],
    );
    embed["after"] = json!(["a"]);
    let mut slow = tokenize("slow", target, &["a"]);
    slow["rules"] = json!(["text = input.text"]);
    if embed_validates {
        // The fixture's Tokenize answers one id per character, and Tokens holds at
        // most 64: a long input fails `validate` (a verdict, not retryable).
        embed = tokenize("embed", target, &["a"]);
        embed["rules"] = json!(["text = input.text"]);
        embed["validate"] = json!(true);
        slow = step("slow", target, "jobs.test.Embedder/Embed", &["ids = a.ids"]);
        slow["after"] = json!(["a"]);
    }
    let mut a = step(
        "a",
        target,
        "jobs.test.Tokenizer/Tokenize",
        &["text = \"x\"", "fail = input.fail"],
    );
    a["after"] = json!([]);
    workflow(
        "branches",
        vec![a, slow, embed, tokenize("last", target, &["slow", "embed"])],
        None,
    )
}

#[tokio::test]
async fn a_retryable_failure_lets_the_siblings_in_flight_finish_and_keeps_them() {
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_millis(300)),
        ..Default::default()
    })
    .await;
    let wf = compile(&branch_failure_workflow(&server.target(), false));
    let input = wf
        .parse_input(&json!({ "text": "hi", "fail": true }))
        .unwrap();
    let mut recorder = Recorder(Vec::new());
    let failed = Runner::new()
        .run_segment(&wf, &input, Vec::new(), &mut recorder, &NoMetadata)
        .await
        .expect_err("embed fails");
    let SegmentError::Failed(failure) = failed else {
        panic!("expected a step failure, got {failed:?}")
    };
    assert!(failure.is_retryable(), "{failure}");
    assert_eq!(failure.step.as_deref(), Some("embed"));
    assert_eq!(
        names(&recorder.0),
        ["a", "slow"],
        "the slow sibling finished and was recorded; nothing after the failure started"
    );
}

#[tokio::test]
async fn a_permanent_failure_abandons_the_siblings_in_flight() {
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_secs(5)),
        ..Default::default()
    })
    .await;
    let wf = compile(&branch_failure_workflow(&server.target(), true));
    let long = "x".repeat(100);
    let input = wf.parse_input(&json!({ "text": long })).unwrap();
    let mut recorder = Recorder(Vec::new());
    let started = Instant::now();
    let failed = Runner::new()
        .run_segment(&wf, &input, Vec::new(), &mut recorder, &NoMetadata)
        .await
        .expect_err("embed breaks its rules");
    let SegmentError::Failed(failure) = failed else {
        panic!("expected a step failure, got {failed:?}")
    };
    assert!(
        matches!(failure.kind, FailureKind::Validation { .. }),
        "{failure}"
    );
    assert_eq!(failure.step.as_deref(), Some("embed"));
    assert_eq!(
        names(&recorder.0),
        ["a"],
        "no checkpoint of the abandoned call"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the 5 s sibling was not waited for"
    );
}

#[tokio::test]
async fn max_parallel_bounds_the_calls_in_flight() {
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_millis(100)),
        ..Default::default()
    })
    .await;
    let target = server.target();
    let steps = (0..6)
        .map(|i| tokenize(&format!("t{i}"), &target, &[]))
        .collect();
    let mut envelope = workflow("wide", steps, None);
    envelope["maxParallel"] = json!(2);
    let wf = compile(&envelope);
    let input = wf.parse_input(&json!({ "text": "hi" })).unwrap();
    let mut recorder = Recorder(Vec::new());
    Runner::new()
        .run_segment(&wf, &input, Vec::new(), &mut recorder, &NoMetadata)
        .await
        .expect("completes");
    assert_eq!(server.stats.tokenize_calls(), 6);
    assert_eq!(server.stats.max_in_flight(), 2);
    assert_eq!(recorder.0.len(), 6);
}

#[tokio::test]
async fn two_external_steps_in_parallel_branches_both_wait() {
    let server = FixtureServer::start().await;
    let target = server.target();
    let mut first = review_step(&target);
    first["after"] = json!(["a"]);
    let mut second = review_step(&target);
    second["name"] = json!("second");
    second["after"] = json!(["a"]);
    let envelope = workflow(
        "two-reviews",
        vec![tokenize("a", &target, &[]), first, second],
        Some(
            json!({ "type": "jobs.test.Embedding", "rules": ["notes = review.notes", "source_text = second.notes"] }),
        ),
    );
    let wf = CompiledWorkflow::compile(&envelope).unwrap_or_else(|f| panic!("{f}"));
    let input = wf.parse_input(&json!({ "text": "hi" })).unwrap();
    let mut recorder = Recorder(Vec::new());
    let outcome = Runner::new()
        .run_segment(&wf, &input, Vec::new(), &mut recorder, &NoMetadata)
        .await
        .expect("parks");
    let SegmentOutcome::Parked {
        step, also_waiting, ..
    } = outcome
    else {
        panic!("expected to park")
    };
    assert_eq!(step, "review");
    assert_eq!(
        also_waiting,
        [WaitingStep {
            step: "second".into(),
            request: Some(json!({ "text": "hi" })),
            kind: workflow::runner::WaitKind::External,
        }]
    );
    assert_eq!(names(&recorder.0), ["a"]);
}

#[tokio::test]
async fn the_synchronous_run_runs_a_diamond() {
    let server = FixtureServer::start().await;
    let wf = compile(&diamond_workflow(&server.target()));
    let input = wf.parse_input(&json!({ "text": "hey" })).unwrap();
    let outcome = Runner::new().run(&wf, &input).await.expect("runs");
    assert_eq!(outcome.steps.len(), 4);
    assert_eq!(
        outcome.output_json,
        json!({ "sourceText": "hey", "vector": [0.3, 1.0, 0.3, 1.0] })
    );
}
