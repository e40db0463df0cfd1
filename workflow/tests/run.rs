//! Running workflows against real gRPC servers on loopback.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use prost_reflect::{DynamicMessage, ReflectMessage};
use serde_json::{Value, json};
use workflow::testkit::{
    FixtureOptions, FixtureServer, step, three_step_workflow, two_step_workflow, workflow,
};
use workflow::{
    Checkpoint, CheckpointSink, CompiledWorkflow, FailureKind, NoMetadata, RunError, Runner,
    SYNC_REFUSAL, SegmentError, SegmentOutcome, SinkError, replay_checkpoints,
};

/// Records checkpoints and bumps a probe the embed server reads when called.
struct Recorder {
    probe: Arc<AtomicUsize>,
    checkpoints: Vec<Checkpoint>,
}

impl Recorder {
    fn new(probe: Arc<AtomicUsize>) -> Self {
        Recorder {
            probe,
            checkpoints: Vec::new(),
        }
    }
}

impl CheckpointSink for Recorder {
    async fn record(&mut self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        self.checkpoints.push(checkpoint.clone());
        self.probe.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Runs a segment that must complete; returns the output and every checkpoint.
async fn completed(
    runner: &Runner,
    wf: &CompiledWorkflow,
    input: &DynamicMessage,
    prior: Vec<workflow::ReplayedCheckpoint>,
    sink: &mut Recorder,
    metadata: &dyn workflow::CallMetadata,
) -> (DynamicMessage, Vec<Checkpoint>) {
    match runner.run_segment(wf, input, prior, sink, metadata).await {
        Ok(SegmentOutcome::Completed { output, steps, .. }) => (output, steps),
        other => panic!("expected completion, got {other:?}"),
    }
}

fn compile(envelope: &Value) -> CompiledWorkflow {
    CompiledWorkflow::compile(envelope).unwrap_or_else(|findings| panic!("{findings}"))
}

fn input(workflow: &CompiledWorkflow, text: &str, fail: bool) -> DynamicMessage {
    workflow
        .parse_input(&json!({ "text": text, "fail": fail }))
        .expect("valid input")
}

fn output_json(message: &DynamicMessage) -> Value {
    workflow::compile::encode_json(message).expect("the output has a JSON form")
}

#[tokio::test]
async fn two_steps_complete_with_checkpoints_recorded_before_the_next_call() {
    let probe = Arc::new(AtomicUsize::new(0));
    let server = FixtureServer::start_with(FixtureOptions {
        probe: Some(probe.clone()),
        ..Default::default()
    })
    .await;
    let wf = compile(&two_step_workflow(&server.target()));
    let mut recorder = Recorder::new(probe);

    let (output, steps) = completed(
        &Runner::new(),
        &wf,
        &input(&wf, "hello", false),
        Vec::new(),
        &mut recorder,
        &NoMetadata,
    )
    .await;
    assert_eq!(output.descriptor().full_name(), "jobs.test.Embedding");
    assert_eq!(
        output_json(&output),
        json!({ "sourceText": "hello", "vector": [0.5, 1.0] })
    );
    assert_eq!(steps, recorder.checkpoints);
    assert_eq!(
        steps.iter().map(Checkpoint::to_json).collect::<Vec<_>>(),
        [
            json!({ "name": "tokenize", "skipped": false, "response": { "ids": [104, 101, 108, 108, 111] } }),
            json!({ "name": "embed", "skipped": false, "response": { "values": [0.5, 1.0] } }),
        ]
    );
    // When embed was called, exactly one checkpoint (tokenize's) had been recorded.
    assert_eq!(server.stats.probe_at_embed(), [1]);
}

#[tokio::test]
async fn three_steps_park_at_review_and_resume_without_recalling_tokenize() {
    let server = FixtureServer::start().await;
    let wf = compile(&three_step_workflow(&server.target()));
    let input = input(&wf, "hi", false);
    let runner = Runner::new();
    let mut recorder = Recorder::new(Arc::default());

    let outcome = runner
        .run_segment(&wf, &input, Vec::new(), &mut recorder, &NoMetadata)
        .await
        .expect("parks");
    let SegmentOutcome::Parked {
        step,
        steps,
        request,
        ..
    } = outcome
    else {
        panic!("expected to park")
    };
    assert_eq!(step, "review");
    assert_eq!(
        request,
        Some(json!({ "text": "hi" })),
        "the review's rules built the request it shows"
    );
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].name, "tokenize");
    assert_eq!(server.stats.tokenize_calls(), 1);

    // Someone answers the review; the caller stores the checkpoint and resumes.
    let mut stored: Vec<Value> = steps.iter().map(Checkpoint::to_json).collect();
    stored.push(json!({ "name": "review", "skipped": false, "response": { "notes": "looks right", "score": 7 } }));
    let prior = replay_checkpoints(&wf, &Value::Array(stored)).expect("replays");
    let (output, steps) = completed(&runner, &wf, &input, prior, &mut recorder, &NoMetadata).await;
    assert_eq!(
        output_json(&output),
        json!({ "sourceText": "hi", "vector": [0.2, 1.0], "notes": "looks right" })
    );
    assert_eq!(
        steps.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["tokenize", "review", "embed"]
    );
    assert_eq!(
        server.stats.tokenize_calls(),
        1,
        "tokenize is not called again"
    );
    assert_eq!(server.stats.embed_calls(), 1);
}

#[tokio::test]
async fn a_false_gate_skips_the_step_and_the_workflow_completes() {
    let server = FixtureServer::start().await;
    let target = server.target();
    let mut embed = step(
        "embed",
        &target,
        "jobs.test.Embedder/Embed",
        &["ids = tokenize.ids"],
    );
    embed["when"] = json!("size(tokenize.ids) > 0");
    let wf = compile(&workflow(
        "gated",
        vec![
            step(
                "tokenize",
                &target,
                "jobs.test.Tokenizer/Tokenize",
                &["text = input.text"],
            ),
            embed,
        ],
        Some(
            json!({ "type": "jobs.test.Embedding", "rules": ["source_text = input.text", "vector = embed.values"] }),
        ),
    ));
    let mut recorder = Recorder::new(Arc::default());
    let (output, steps) = completed(
        &Runner::new(),
        &wf,
        &input(&wf, "", false),
        Vec::new(),
        &mut recorder,
        &NoMetadata,
    )
    .await;
    assert_eq!(
        steps[1],
        Checkpoint {
            name: "embed".into(),
            skipped: true,
            response: None
        }
    );
    assert_eq!(
        steps[1].to_json(),
        json!({ "name": "embed", "skipped": true })
    );
    assert_eq!(
        output_json(&output),
        json!({}),
        "a skipped step's fields read defaults"
    );
    assert_eq!(server.stats.embed_calls(), 0);
}

#[tokio::test]
async fn an_unavailable_target_surfaces_as_a_retryable_grpc_failure() {
    let server = FixtureServer::start().await;
    let wf = compile(&two_step_workflow(&server.target()));
    let err = Runner::new()
        .run(&wf, &input(&wf, "x", true))
        .await
        .expect_err("embed fails");
    let RunError::Failed(failure) = err else {
        panic!("{err}")
    };
    assert_eq!(failure.step.as_deref(), Some("embed"));
    assert_eq!(
        failure.kind,
        FailureKind::Grpc {
            code: tonic::Code::Unavailable,
            message: "model loading".into(),
            transport: false,
        }
    );
    assert_eq!(
        failure.to_string(),
        "GRPC: step 'embed': UNAVAILABLE: model loading"
    );
    assert!(failure.is_retryable());
}

#[tokio::test]
async fn a_sleeping_server_surfaces_a_deadline() {
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_secs(30)),
        ..Default::default()
    })
    .await;
    let mut envelope = two_step_workflow(&server.target());
    envelope["steps"][1]["deadlineMs"] = json!(200);
    let wf = compile(&envelope);
    let err = Runner::new()
        .run(&wf, &input(&wf, "x", false))
        .await
        .expect_err("deadline");
    let RunError::Failed(failure) = err else {
        panic!("{err}")
    };
    assert_eq!(failure.kind, FailureKind::Deadline, "{failure}");
    assert!(
        failure.to_string().contains("the step's deadline"),
        "{failure}"
    );

    // The segment deadline bounds the call too when it is the smaller one.
    let mut envelope = two_step_workflow(&server.target());
    envelope["deadlineMs"] = json!(300);
    let wf = compile(&envelope);
    let err = Runner::new()
        .run(&wf, &input(&wf, "x", false))
        .await
        .expect_err("deadline");
    let RunError::Failed(failure) = err else {
        panic!("{err}")
    };
    assert_eq!(failure.kind, FailureKind::Deadline);
    assert!(
        failure.to_string().contains("segment deadline"),
        "{failure}"
    );
}

#[tokio::test]
async fn a_response_breaking_its_rules_is_a_validation_failure_with_the_field_path() {
    let server = FixtureServer::start().await;
    let mut envelope = two_step_workflow(&server.target());
    envelope["steps"][0]["validate"] = json!(true);
    let wf = compile(&envelope);
    // 65 characters make 65 ids; Tokens allows at most 64.
    let err = Runner::new()
        .run(&wf, &input(&wf, &"a".repeat(65), false))
        .await
        .expect_err("invalid");
    let RunError::Failed(failure) = err else {
        panic!("{err}")
    };
    let FailureKind::Validation { violations } = &failure.kind else {
        panic!("{failure}")
    };
    assert_eq!(violations.len(), 1);
    assert_eq!(violations[0].field_path, "ids");
    assert_eq!(violations[0].rule_id, "repeated.max_items");
    assert!(
        failure
            .to_string()
            .starts_with("VALIDATION: step 'tokenize'"),
        "{failure}"
    );
    assert_eq!(
        server.stats.embed_calls(),
        0,
        "nothing runs after a verdict"
    );

    // 64 ids pass.
    Runner::new()
        .run(&wf, &input(&wf, &"a".repeat(64), false))
        .await
        .expect("within the rules");
}

#[tokio::test]
async fn synchronous_run_refuses_when_it_reaches_an_open_external_step() {
    let server = FixtureServer::start().await;
    let wf = compile(&three_step_workflow(&server.target()));
    let err = Runner::new()
        .run(&wf, &input(&wf, "hi", false))
        .await
        .expect_err("refused");
    assert!(matches!(err, RunError::WouldPark));
    assert_eq!(err.to_string(), SYNC_REFUSAL);
    assert_eq!(
        err.to_string(),
        "synchronous run-workflow cannot park - submit the workflow as a job (submit-workflow) so complete-step can supply the response"
    );
    assert_eq!(
        (server.stats.tokenize_calls(), server.stats.embed_calls()),
        (1, 0),
        "the steps before the external one ran; none after it"
    );
}

#[tokio::test]
async fn an_external_step_whose_gate_is_closed_is_skipped_and_the_run_goes_on() {
    let server = FixtureServer::start().await;
    let mut envelope = three_step_workflow(&server.target());
    envelope["steps"][1]["when"] = json!("size(tokenize.ids) > 3");
    let wf = compile(&envelope);

    let outcome = Runner::new()
        .run(&wf, &input(&wf, "hi", false))
        .await
        .expect("the closed gate skips the external step");
    let skipped: Vec<(&str, bool)> = outcome
        .steps
        .iter()
        .map(|c| (c.name.as_str(), c.skipped))
        .collect();
    assert_eq!(
        skipped,
        [("tokenize", false), ("review", true), ("embed", false)]
    );

    // An open gate still parks a segment at the external step.
    let mut recorder = Recorder::new(Arc::new(AtomicUsize::new(0)));
    let parked = Runner::new()
        .run_segment(
            &wf,
            &input(&wf, "long enough", false),
            Vec::new(),
            &mut recorder,
            &NoMetadata,
        )
        .await
        .expect("parks");
    assert!(
        matches!(parked, SegmentOutcome::Parked { ref step, .. } if step == "review"),
        "{parked:?}"
    );
}

#[tokio::test]
async fn a_failing_sink_stops_the_segment_before_the_next_step() {
    struct Broken;
    impl CheckpointSink for Broken {
        async fn record(&mut self, _checkpoint: &Checkpoint) -> Result<(), SinkError> {
            Err("database unavailable".into())
        }
    }
    let server = FixtureServer::start().await;
    let wf = compile(&two_step_workflow(&server.target()));
    let err = Runner::new()
        .run_segment(
            &wf,
            &input(&wf, "x", false),
            Vec::new(),
            &mut Broken,
            &NoMetadata,
        )
        .await
        .expect_err("stops");
    let SegmentError::Checkpoint { step, source } = err else {
        panic!("{err}")
    };
    assert_eq!(step, "tokenize");
    assert_eq!(source.to_string(), "database unavailable");
    assert_eq!(server.stats.embed_calls(), 0, "the next step never ran");
}

#[tokio::test]
async fn a_sink_refusing_a_call_stops_the_segment_before_the_call_is_made() {
    /// Records the first checkpoint, then refuses every call (a claim that lapsed).
    struct Lapsing {
        recorded: usize,
    }
    impl CheckpointSink for Lapsing {
        async fn record(&mut self, _checkpoint: &Checkpoint) -> Result<(), SinkError> {
            self.recorded += 1;
            Ok(())
        }
        fn before_call(&mut self, _step: &str) -> Result<(), SinkError> {
            if self.recorded > 0 {
                return Err("the claim may have lapsed".into());
            }
            Ok(())
        }
    }
    let server = FixtureServer::start().await;
    let wf = compile(&two_step_workflow(&server.target()));
    let mut sink = Lapsing { recorded: 0 };
    let err = Runner::new()
        .run_segment(
            &wf,
            &input(&wf, "x", false),
            Vec::new(),
            &mut sink,
            &NoMetadata,
        )
        .await
        .expect_err("stops");
    let SegmentError::NotCalled { step, source } = err else {
        panic!("{err}")
    };
    assert_eq!(step, "embed");
    assert_eq!(source.to_string(), "the claim may have lapsed");
    assert_eq!(server.stats.tokenize_calls(), 1);
    assert_eq!(
        server.stats.embed_calls(),
        0,
        "the refused step was never called"
    );
}

#[tokio::test]
async fn an_unreachable_target_is_unavailable() {
    // Bind and drop a listener to get a port nobody serves.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let wf = compile(&two_step_workflow(&format!("127.0.0.1:{port}")));
    let err = Runner::new()
        .run(&wf, &input(&wf, "x", false))
        .await
        .expect_err("unreachable");
    let RunError::Failed(failure) = err else {
        panic!("{err}")
    };
    assert!(
        matches!(
            &failure.kind,
            FailureKind::Grpc {
                code: tonic::Code::Unavailable,
                ..
            }
        ),
        "{failure}"
    );
    assert!(failure.is_retryable());
}

#[tokio::test]
async fn call_metadata_reaches_the_target() {
    struct JobHeaders;
    impl workflow::CallMetadata for JobHeaders {
        fn for_step(&self, step: &workflow::CompiledStep) -> Vec<(String, String)> {
            vec![
                ("x-protomolt-step".into(), step.name.clone()),
                ("idempotency-key".into(), format!("job-1/{}", step.name)),
            ]
        }
    }
    let server = FixtureServer::start().await;
    let wf = compile(&two_step_workflow(&server.target()));
    let mut recorder = Recorder::new(Arc::default());
    Runner::new()
        .run_segment(
            &wf,
            &input(&wf, "x", false),
            Vec::new(),
            &mut recorder,
            &JobHeaders,
        )
        .await
        .expect("completes");
    let calls = server.stats.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[1].metadata,
        [
            ("idempotency-key".to_owned(), "job-1/embed".to_owned()),
            ("x-protomolt-step".to_owned(), "embed".to_owned())
        ]
    );
}

#[tokio::test]
async fn tls_steps_speak_tls() {
    // The fixture server speaks plaintext HTTP/2: a TLS step cannot handshake with it,
    // which shows the step took the TLS path (and fails as retryable UNAVAILABLE).
    let server = FixtureServer::start().await;
    let mut envelope = two_step_workflow(&server.target());
    envelope["steps"][0]["tls"] = json!(true);
    envelope["steps"][0]["deadlineMs"] = json!(5000);
    let wf = compile(&envelope);
    let err = Runner::new()
        .run(&wf, &input(&wf, "x", false))
        .await
        .expect_err("no TLS there");
    let RunError::Failed(failure) = err else {
        panic!("{err}")
    };
    assert_eq!(failure.step.as_deref(), Some("tokenize"));
    assert!(failure.is_retryable(), "{failure}");
    assert_eq!(
        server.stats.tokenize_calls(),
        0,
        "no plaintext call reached the server"
    );
}

#[tokio::test]
async fn a_response_with_no_json_form_fails_the_step_instead_of_storing_null() {
    let server = FixtureServer::start().await;
    let wf = compile(&workflow::testkit::unencodable_response_workflow(
        &server.target(),
    ));
    let mut recorder = Recorder::new(Arc::new(AtomicUsize::new(0)));
    let err = Runner::new()
        .run_segment(
            &wf,
            &input(&wf, workflow::testkit::UNENCODABLE_TEXT, false),
            Vec::new(),
            &mut recorder,
            &NoMetadata,
        )
        .await
        .expect_err("no checkpoint without a JSON form");
    let SegmentError::Failed(failure) = err else {
        panic!("{err}")
    };
    assert_eq!(failure.kind, FailureKind::Workflow);
    assert!(!failure.is_retryable());
    assert!(
        failure
            .to_string()
            .starts_with("WORKFLOW: step 'tokenize': its response cannot be stored: a jobs.test.Opaque that cannot be written as proto3 JSON"),
        "{failure}"
    );
    assert!(recorder.checkpoints.is_empty(), "nothing was recorded");
    assert_eq!(server.stats.tokenize_calls(), 1);
}
