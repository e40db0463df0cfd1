//! Sleep steps and event steps: what the compiler accepts and refuses, and how a
//! segment parks on them (a sleep's wake time, an event's key) or goes on past a
//! sleep the sink says is over. Real gRPC servers on loopback.

use std::time::Duration;

use serde_json::{Value, json};
use workflow::runner::{WaitKind, Wake};
use workflow::testkit::{
    FixtureServer, assert_finding, compile_new as compile, new_findings as findings, sleep_step,
    step, tokenize_step, workflow,
};
use workflow::{
    Checkpoint, CheckpointSink, CompiledStep, NoMetadata, RunError, Runner, SegmentOutcome,
    SinkError,
};

const TARGET: &str = "127.0.0.1:1";

fn event_step(key: &str) -> Value {
    json!({ "name": "paid", "completion": "event", "eventKey": key,
            "outputType": "jobs.test.Review" })
}

fn appointment(steps: Vec<Value>) -> Value {
    let mut envelope = workflow("appointment", steps, None);
    envelope["inputType"] = json!("jobs.test.Appointment");
    envelope
}

/// Records checkpoints; answers whether sleeps are over as told.
#[derive(Default)]
struct Sink {
    checkpoints: Vec<Checkpoint>,
    over: bool,
    asked: Vec<(String, Wake)>,
}

impl CheckpointSink for Sink {
    async fn record(&mut self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        self.checkpoints.push(checkpoint.clone());
        Ok(())
    }

    fn slept(&mut self, step: &CompiledStep, wake: Wake) -> bool {
        self.asked.push((step.name.clone(), wake));
        self.over
    }
}

#[test]
fn sleep_and_event_steps_compile_with_their_kinds() {
    let wf = compile(&workflow(
        "parks",
        vec![
            tokenize_step(TARGET),
            sleep_step(json!({ "forMs": 2000 })),
            event_step("'order-' + input.text"),
        ],
        None,
    ));
    assert!(wf.steps[1].sleep.is_some() && !wf.steps[1].is_called());
    assert_eq!(
        wf.steps[1].output_type().full_name(),
        "google.protobuf.Empty"
    );
    let event = wf.steps[2].event.as_ref().expect("an event step");
    assert_eq!(event.lookback, workflow::compile::DEFAULT_EVENT_LOOKBACK);
    assert_eq!(wf.steps[2].output_type().full_name(), "jobs.test.Review");
    assert_eq!(wf.output_type().full_name(), "jobs.test.Review");
}

#[test]
fn a_sleep_step_that_is_called_or_sleeps_badly_is_refused_naming_the_field() {
    let mut called = sleep_step(json!({ "forMs": 10 }));
    called["target"] = json!(TARGET);
    called["rules"] = json!(["text = input.text"]);
    let all = findings(&workflow("bad", vec![tokenize_step(TARGET), called], None));
    assert_finding(
        &all,
        Some("cool_off"),
        "$.steps[1].target",
        &["never called"],
    );
    assert_finding(
        &all,
        Some("cool_off"),
        "$.steps[1].rules",
        &["never called"],
    );

    for (sleep, path, needle) in [
        (json!({ "forMs": 0 }), "$.steps[1].sleep.forMs", "from 1 to"),
        (
            json!({ "forMs": -5 }),
            "$.steps[1].sleep.forMs",
            "from 1 to",
        ),
        (
            json!({ "forMs": "soon" }),
            "$.steps[1].sleep.forMs",
            "whole number",
        ),
        (json!({}), "$.steps[1].sleep", "exactly one of"),
        (
            json!({ "forMs": 5, "until": "input.text" }),
            "$.steps[1].sleep",
            "exactly one of",
        ),
        (json!({ "for": 5 }), "$.steps[1].sleep.for", "unknown field"),
        (json!("5s"), "$.steps[1].sleep", "must be an object"),
        (
            json!({ "until": "input.text" }),
            "$.steps[1].sleep.until",
            "not a google.protobuf.Timestamp",
        ),
        (
            json!({ "until": "nowhere.at" }),
            "$.steps[1].sleep.until",
            "unknown scope 'nowhere'",
        ),
        (
            json!({ "until": 5 }),
            "$.steps[1].sleep.until",
            "must be a path",
        ),
    ] {
        let all = findings(&workflow(
            "bad",
            vec![tokenize_step(TARGET), sleep_step(sleep.clone())],
            None,
        ));
        assert_finding(&all, Some("cool_off"), path, &[needle]);
    }
}

#[test]
fn an_event_step_needs_a_string_key_over_its_scope_and_an_output_type() {
    for (event, path, needle) in [
        (
            json!({ "eventKey": "input.fail" }),
            "$.steps[1].eventKey",
            "must be a string",
        ),
        (
            json!({ "eventKey": "later.text" }),
            "$.steps[1].eventKey",
            "unknown scope 'later'",
        ),
        (
            json!({ "eventKey": "input.text +" }),
            "$.steps[1].eventKey",
            "`eventKey`",
        ),
        (
            json!({ "eventKey": null }),
            "$.steps[1].eventKey",
            "is required",
        ),
        (
            json!({ "outputType": "jobs.test.Nope" }),
            "$.steps[1].outputType",
            "jobs.test.Nope",
        ),
        (
            json!({ "target": TARGET }),
            "$.steps[1].target",
            "never called",
        ),
        (
            json!({ "rules": ["text = input.text"] }),
            "$.steps[1].rules",
            "never called",
        ),
        (
            json!({ "eventLookbackMs": 604_800_001u64 }),
            "$.steps[1].eventLookbackMs",
            "7 days",
        ),
        (
            json!({ "forEach": "tokenize.ids" }),
            "$.steps[1].forEach",
            "never called",
        ),
    ] {
        let mut step = event_step("'order-' + input.text");
        for (key, value) in event.as_object().unwrap() {
            match value {
                Value::Null => {
                    step.as_object_mut().unwrap().remove(key);
                }
                value => step[key] = value.clone(),
            }
        }
        let all = findings(&workflow("bad", vec![tokenize_step(TARGET), step], None));
        assert_finding(&all, Some("paid"), path, &[needle]);
    }
    let mut stray = step("t", TARGET, "jobs.test.Tokenizer/Tokenize", &[]);
    stray["eventKey"] = json!("'k'");
    let all = findings(&workflow("bad", vec![stray], None));
    assert_finding(
        &all,
        Some("t"),
        "$.steps[0].eventKey",
        &["only an event step"],
    );
}

#[tokio::test]
async fn a_sleep_parks_with_its_duration_and_a_sleep_that_is_over_goes_on() {
    let server = FixtureServer::start().await;
    let wf = compile(&workflow(
        "sleepy",
        vec![
            sleep_step(json!({ "forMs": 2000 })),
            tokenize_step(&server.target()),
        ],
        None,
    ));
    let input = wf.parse_input(&json!({ "text": "a b" })).unwrap();
    let runner = Runner::new();
    let mut sink = Sink::default();
    let parked = runner
        .run_segment(&wf, &input, Vec::new(), &mut sink, &NoMetadata)
        .await
        .unwrap();
    let SegmentOutcome::Parked { step, kind, .. } = parked else {
        panic!("expected a park, got {parked:?}");
    };
    assert_eq!(step, "cool_off");
    assert_eq!(kind, WaitKind::Sleep(Wake::After(Duration::from_secs(2))));
    assert_eq!(
        server.stats.tokenize_calls(),
        0,
        "nothing ran past the sleep"
    );

    let mut sink = Sink {
        over: true,
        ..Sink::default()
    };
    let done = runner
        .run_segment(&wf, &input, Vec::new(), &mut sink, &NoMetadata)
        .await
        .unwrap();
    assert!(matches!(done, SegmentOutcome::Completed { .. }), "{done:?}");
    assert_eq!(sink.checkpoints[0].name, "cool_off");
    assert_eq!(sink.checkpoints[0].response, Some(json!({})));
    assert_eq!(server.stats.tokenize_calls(), 1);

    // A synchronous run cannot sleep.
    let refused = runner.run(&wf, &input).await.unwrap_err();
    assert!(matches!(refused, RunError::WouldPark), "{refused}");
}

#[tokio::test]
async fn a_sleep_until_reads_its_timestamp_and_an_unset_one_fails_the_step() {
    let wf = compile(&appointment(vec![sleep_step(
        json!({ "until": "input.send_at" }),
    )]));
    let runner = Runner::new();
    let input = wf
        .parse_input(&json!({ "text": "x", "sendAt": "2030-01-02T03:04:05.006001Z" }))
        .unwrap();
    let mut sink = Sink::default();
    let parked = runner
        .run_segment(&wf, &input, Vec::new(), &mut sink, &NoMetadata)
        .await
        .unwrap();
    let SegmentOutcome::Parked { kind, .. } = parked else {
        panic!("expected a park, got {parked:?}");
    };
    // 2030-01-02T03:04:05.006001Z, rounded up to the next millisecond.
    assert_eq!(kind, WaitKind::Sleep(Wake::At(1_893_553_445_007)));
    assert_eq!(
        sink.asked,
        vec![("cool_off".to_owned(), Wake::At(1_893_553_445_007))]
    );

    let unset = wf.parse_input(&json!({ "text": "x" })).unwrap();
    let failed = runner
        .run_segment(&wf, &unset, Vec::new(), &mut Sink::default(), &NoMetadata)
        .await
        .unwrap_err();
    assert!(failed.to_string().contains("input.send_at"), "{failed}");
}

#[tokio::test]
async fn an_event_step_parks_on_the_key_its_expression_computes() {
    let server = FixtureServer::start().await;
    let wf = compile(&workflow(
        "eventful",
        vec![
            tokenize_step(&server.target()),
            event_step("'order-' + input.text + '-' + string(size(tokenize.ids))"),
        ],
        None,
    ));
    let input = wf.parse_input(&json!({ "text": "a b" })).unwrap();
    let parked = Runner::new()
        .run_segment(&wf, &input, Vec::new(), &mut Sink::default(), &NoMetadata)
        .await
        .unwrap();
    let SegmentOutcome::Parked {
        step,
        kind,
        request,
        ..
    } = parked
    else {
        panic!("expected a park, got {parked:?}");
    };
    assert_eq!(step, "paid");
    assert_eq!(request, None);
    assert_eq!(
        kind,
        WaitKind::Event {
            key: "order-a b-3".into(),
            lookback: Duration::from_secs(24 * 3600),
        }
    );
}
