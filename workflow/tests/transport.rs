//! Which step failures are retried: the connection failing under a call is, a
//! server's own UNKNOWN or INTERNAL answer is not.

use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};
use workflow::testkit::proto::review_desk_server::{ReviewDesk, ReviewDeskServer};
use workflow::testkit::proto::{Review, Text};
use workflow::testkit::{step, workflow};
use workflow::{CompiledWorkflow, FailureKind, RunError, Runner, StepFailure};

/// A target that takes the call and then drops the connection without an answer,
/// as a process that dies mid-call does.
async fn dying_target() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                // Read the preface and the request, then die.
                let mut buffer = [0u8; 4096];
                let _ = tokio::time::timeout(Duration::from_millis(300), async {
                    loop {
                        match socket.read(&mut buffer).await {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {}
                        }
                    }
                })
                .await;
                drop(socket);
            });
        }
    });
    addr.to_string()
}

/// A ReviewDesk answering every call with `status`.
async fn answering(status: Status) -> String {
    #[derive(Clone)]
    struct Desk(Status);
    #[tonic::async_trait]
    impl ReviewDesk for Desk {
        async fn review(&self, _: Request<Text>) -> Result<Response<Review>, Status> {
            Err(self.0.clone())
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ReviewDeskServer::new(Desk(status)))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    addr.to_string()
}

async fn review_failure(target: &str) -> StepFailure {
    let envelope = workflow(
        "review",
        vec![step(
            "review",
            target,
            "jobs.test.ReviewDesk/Review",
            &["text = input.text"],
        )],
        None,
    );
    let wf = CompiledWorkflow::compile(&envelope).unwrap();
    let input = wf.parse_input(&json!({ "text": "x" })).unwrap();
    match Runner::new().run(&wf, &input).await {
        Err(RunError::Failed(failure)) => failure,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_target_dying_mid_call_is_a_retryable_transport_failure() {
    let failure = review_failure(&dying_target().await).await;
    assert!(
        matches!(
            failure.kind,
            FailureKind::Grpc {
                transport: true,
                ..
            }
        ),
        "{failure} ({:?})",
        failure.kind
    );
    assert!(failure.is_retryable(), "{failure}");
    assert!(
        failure.to_string().contains("(the connection to target "),
        "{failure}"
    );
}

#[tokio::test]
async fn a_servers_own_unknown_and_internal_answers_are_not_retried() {
    for status in [Status::unknown("it broke"), Status::internal("bug")] {
        let code = status.code();
        let failure = review_failure(&answering(status).await).await;
        assert!(
            matches!(failure.kind, FailureKind::Grpc { transport: false, code: c, .. } if c == code),
            "{failure}"
        );
        assert!(!failure.is_retryable(), "{failure}");
    }
}

#[tokio::test]
async fn aborted_is_retried() {
    let failure = review_failure(&answering(Status::aborted("conflict, try again")).await).await;
    assert!(failure.is_retryable(), "{failure}");
}

fn tokenize_only(target: &str, max_response_bytes: Option<u64>) -> CompiledWorkflow {
    let mut tokenize = step(
        "tokenize",
        target,
        "jobs.test.Tokenizer/Tokenize",
        &["text = input.text"],
    );
    if let Some(bytes) = max_response_bytes {
        tokenize["maxResponseBytes"] = json!(bytes);
    }
    CompiledWorkflow::compile(&workflow("tokenize", vec![tokenize], None)).unwrap()
}

#[tokio::test]
async fn a_response_over_the_limit_fails_naming_the_settings_and_a_step_may_raise_it() {
    let server = workflow::testkit::FixtureServer::start().await;
    let runner = Runner::new().with_max_response_bytes(50);
    let text = json!({ "text": "a".repeat(100) });

    let wf = tokenize_only(&server.target(), None);
    let input = wf.parse_input(&text).unwrap();
    let Err(RunError::Failed(failure)) = runner.run(&wf, &input).await else {
        panic!("over the node's limit")
    };
    assert!(!failure.is_retryable(), "{failure}");
    let said = failure.to_string();
    assert!(
        said.contains("the response is larger than the limit of 50 bytes")
            && said.contains("maxResponseBytes")
            && said.contains("[registry].max_response_bytes"),
        "{said}"
    );

    let raised = tokenize_only(&server.target(), Some(1_000));
    let input = raised.parse_input(&text).unwrap();
    runner
        .run(&raised, &input)
        .await
        .expect("the step's own limit applies");

    let lowered = tokenize_only(&server.target(), Some(10));
    let input = lowered
        .parse_input(&json!({ "text": "a".repeat(20) }))
        .unwrap();
    assert!(
        Runner::new().run(&lowered, &input).await.is_err(),
        "a step may lower it too"
    );
}

#[test]
fn max_response_bytes_must_be_a_sensible_number() {
    for bad in [json!(0), json!(-1), json!("big"), json!(1u64 << 40)] {
        let mut tokenize = step(
            "tokenize",
            "127.0.0.1:1",
            "jobs.test.Tokenizer/Tokenize",
            &[],
        );
        tokenize["maxResponseBytes"] = bad.clone();
        let findings =
            CompiledWorkflow::compile(&workflow("w", vec![tokenize], None)).expect_err("refused");
        assert!(
            findings
                .0
                .iter()
                .any(|f| f.path == "$.steps[0].maxResponseBytes"),
            "{bad}: {findings}"
        );
    }
}

#[tokio::test]
async fn a_gate_cut_short_by_the_segment_deadline_is_a_retryable_deadline() {
    let server = workflow::testkit::FixtureServer::start_with(workflow::testkit::FixtureOptions {
        tokenize_delay: Some(std::time::Duration::from_millis(1_800)),
        ..Default::default()
    })
    .await;
    let mut envelope = workflow::testkit::two_step_workflow(&server.target());
    envelope["deadlineMs"] = json!(2_000);
    // Quadratic over the ids: fast alone, but only ~200 ms of segment are left.
    envelope["steps"][1]["when"] = json!("tokenize.ids.all(x, tokenize.ids.all(y, x + y > 0))");
    let wf = CompiledWorkflow::compile(&envelope).unwrap();
    let input = wf.parse_input(&json!({ "text": "a".repeat(600) })).unwrap();
    match Runner::new().run(&wf, &input).await {
        Err(RunError::Failed(failure)) => {
            assert_eq!(failure.kind, FailureKind::Deadline, "{failure}");
            assert!(failure.is_retryable());
        }
        // A fast machine may finish the gate within what is left: nothing to test.
        Ok(_) => {}
        Err(other) => panic!("{other}"),
    }
}
