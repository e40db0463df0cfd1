//! Map steps (`forEach`): one call per element, at most `maxParallel` at once, each
//! element recorded as its call ends, a resume calling only the elements with no
//! record, and `onItemFailure`. Real gRPC servers on loopback.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use workflow::testkit::{
    FixtureOptions, FixtureServer, assert_finding, compile_new as compile, distinct_text,
    map_element_id, map_workflow, new_findings as findings, step,
};
use workflow::{
    CallMetadata, Checkpoint, CheckpointSink, CompiledStep, CompiledWorkflow, FailureKind, Finding,
    ItemCheckpoint, ItemOutcome, NoMetadata, Runner, SegmentError, SegmentOutcome, SinkError,
    replay_checkpoints,
};

const TARGET: &str = "127.0.0.1:1";

/// Records checkpoints and elements.
#[derive(Default)]
struct Recorder {
    checkpoints: Vec<Checkpoint>,
    items: BTreeMap<usize, ItemOutcome>,
}

impl CheckpointSink for Recorder {
    async fn record(&mut self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        self.checkpoints.push(checkpoint.clone());
        Ok(())
    }

    async fn record_items(
        &mut self,
        step: &CompiledStep,
        items: &[(usize, ItemOutcome)],
    ) -> Result<(), SinkError> {
        assert_eq!(step.name, "each");
        for (index, outcome) in items {
            assert!(
                self.items.insert(*index, outcome.clone()).is_none(),
                "element {index} recorded twice"
            );
        }
        Ok(())
    }
}

fn assert_one(all: &[Finding], step: Option<&str>, path: &str, needle: &str) {
    assert_finding(all, step, path, &[needle]);
}

async fn run(
    runner: &Runner,
    wf: &CompiledWorkflow,
    input: &str,
    prior_items: &[ItemCheckpoint],
    sink: &mut Recorder,
) -> Result<SegmentOutcome, SegmentError> {
    let input = wf.parse_input(&json!({ "text": input })).unwrap();
    runner
        .resume_segment(wf, &input, Vec::new(), prior_items, sink, &NoMetadata)
        .await
}

#[tokio::test]
async fn a_map_step_calls_each_element_at_most_max_parallel_at_once_and_keeps_their_order() {
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_millis(10)),
        embed_echo_ids: true,
        ..Default::default()
    })
    .await;
    let wf = compile(&map_workflow(&server.target(), 16));
    let mut recorder = Recorder::default();
    let outcome = run(&Runner::new(), &wf, &distinct_text(200), &[], &mut recorder)
        .await
        .expect("completes");
    assert_eq!(server.stats.embed_calls(), 200);
    let most = server.stats.max_in_flight();
    assert!((2..=16).contains(&most), "{most} calls at once");
    assert_eq!(recorder.items.len(), 200, "every element recorded");
    let SegmentOutcome::Completed { output_json, .. } = outcome else {
        panic!("expected completion")
    };
    let vectors = output_json["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 200);
    for (i, vector) in vectors.iter().enumerate() {
        assert_eq!(
            vector["values"],
            json!([map_element_id(i)]),
            "element {i} in order"
        );
    }
    // The step's checkpoint holds the list; it replays.
    let each = recorder.checkpoints.last().unwrap();
    assert_eq!(each.name, "each");
    assert_eq!(
        each.response.as_ref().unwrap()["items"]
            .as_array()
            .unwrap()
            .len(),
        200
    );
    let stored = Value::Array(
        recorder
            .checkpoints
            .iter()
            .map(Checkpoint::to_json)
            .collect(),
    );
    let replayed = replay_checkpoints(&wf, &stored).unwrap();
    assert_eq!(replayed[1].list.as_ref().unwrap().len(), 200);
}

#[tokio::test]
async fn a_resumed_map_step_calls_only_the_elements_with_no_record() {
    let server = FixtureServer::start_with(FixtureOptions {
        embed_echo_ids: true,
        ..Default::default()
    })
    .await;
    let wf = compile(&map_workflow(&server.target(), 8));
    let prior: Vec<ItemCheckpoint> = (0..60)
        .map(|i| ItemCheckpoint {
            step: "each".into(),
            index: i,
            outcome: ItemOutcome::Response(json!({ "values": [map_element_id(i)] })),
        })
        .collect();
    let mut recorder = Recorder::default();
    let outcome = run(
        &Runner::new(),
        &wf,
        &distinct_text(100),
        &prior,
        &mut recorder,
    )
    .await
    .expect("completes");
    assert_eq!(server.stats.embed_calls(), 40);
    assert_eq!(
        recorder.items.keys().copied().collect::<Vec<_>>(),
        (60..100).collect::<Vec<_>>()
    );
    let SegmentOutcome::Completed { output_json, .. } = outcome else {
        panic!("expected completion")
    };
    assert_eq!(
        output_json["vectors"][59]["values"],
        json!([map_element_id(59)])
    );
    assert_eq!(
        output_json["vectors"][99]["values"],
        json!([map_element_id(99)])
    );
}

#[tokio::test]
async fn a_failed_element_fails_the_step_once_its_siblings_end_by_default() {
    let server = FixtureServer::start_with(FixtureOptions {
        embed_rejects_id: Some(map_element_id(7) as i64),
        ..Default::default()
    })
    .await;
    let wf = compile(&map_workflow(&server.target(), 4));
    let mut recorder = Recorder::default();
    let failed = run(&Runner::new(), &wf, &distinct_text(20), &[], &mut recorder)
        .await
        .expect_err("element 7 fails");
    let SegmentError::Failed(failure) = failed else {
        panic!("expected a step failure, got {failed:?}")
    };
    assert_eq!(failure.step.as_deref(), Some("each"));
    assert!(
        matches!(
            failure.kind,
            FailureKind::Grpc {
                code: tonic::Code::InvalidArgument,
                ..
            }
        ),
        "{failure}"
    );
    assert!(
        failure
            .message
            .contains("element 7 of 20 failed (1 failed in all)"),
        "{failure}"
    );
    assert!(
        !recorder.items.contains_key(&7),
        "a failure is not recorded in fail mode"
    );
    assert_eq!(
        recorder
            .checkpoints
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["a"],
        "no checkpoint of the failed step"
    );
    assert!(
        server.stats.embed_calls() < 20,
        "nothing started after the failure was seen"
    );
}

#[tokio::test]
async fn collected_failures_are_left_out_of_the_list_and_listed_in_the_checkpoint() {
    let server = FixtureServer::start_with(FixtureOptions {
        embed_rejects_id: Some(map_element_id(3) as i64),
        embed_echo_ids: true,
        ..Default::default()
    })
    .await;
    let mut envelope = map_workflow(&server.target(), 4);
    envelope["steps"][1]["onItemFailure"] = json!("collect");
    let wf = compile(&envelope);
    let mut recorder = Recorder::default();
    let outcome = run(&Runner::new(), &wf, &distinct_text(10), &[], &mut recorder)
        .await
        .expect("completes");
    let SegmentOutcome::Completed { output_json, .. } = outcome else {
        panic!("expected completion")
    };
    let vectors = output_json["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 9);
    assert_eq!(
        vectors[3]["values"],
        json!([map_element_id(4)]),
        "element 3 left out"
    );
    let ItemOutcome::Failed(error) = &recorder.items[&3] else {
        panic!("element 3 recorded as failed")
    };
    assert!(error.contains("INVALID_ARGUMENT"), "{error}");
    let each = recorder
        .checkpoints
        .last()
        .unwrap()
        .response
        .clone()
        .unwrap();
    assert_eq!(each["failed"][0]["index"], 3);
    assert!(
        each["failed"][0]["error"]
            .as_str()
            .unwrap()
            .contains("refused")
    );
}

#[tokio::test]
async fn a_list_longer_than_max_map_items_fails_the_step_naming_both_numbers() {
    let server = FixtureServer::start().await;
    let wf = compile(&map_workflow(&server.target(), 4));
    let mut recorder = Recorder::default();
    let failed = run(
        &Runner::new().with_max_map_items(10),
        &wf,
        &distinct_text(11),
        &[],
        &mut recorder,
    )
    .await
    .expect_err("too many elements");
    let message = failed.to_string();
    assert!(message.contains("11 elements"), "{message}");
    assert!(message.contains("limit of 10"), "{message}");
    assert!(message.contains("max_map_items"), "{message}");
    assert_eq!(server.stats.embed_calls(), 0);
}

struct JobHeaders;

impl CallMetadata for JobHeaders {
    fn for_step(&self, step: &CompiledStep) -> Vec<(String, String)> {
        vec![("idempotency-key".into(), format!("job-1/{}", step.name))]
    }
}

#[tokio::test]
async fn each_element_carries_the_steps_idempotency_key_and_its_index() {
    let server = FixtureServer::start().await;
    let wf = compile(&map_workflow(&server.target(), 1));
    let input = wf
        .parse_input(&json!({ "text": distinct_text(3) }))
        .unwrap();
    Runner::new()
        .run_segment(
            &wf,
            &input,
            Vec::new(),
            &mut Recorder::default(),
            &JobHeaders,
        )
        .await
        .expect("completes");
    let keys: Vec<String> = server
        .stats
        .calls()
        .into_iter()
        .filter(|call| call.method == "Embed")
        .map(|call| {
            let header = |name: &str| {
                call.metadata
                    .iter()
                    .find(|(key, _)| key == name)
                    .map(|(_, value)| value.clone())
                    .unwrap_or_default()
            };
            format!(
                "{} {}",
                header("idempotency-key"),
                header("x-protomolt-item")
            )
        })
        .collect();
    assert_eq!(keys, ["job-1/each/0 0", "job-1/each/1 1", "job-1/each/2 2"]);
}

#[tokio::test]
async fn later_steps_and_gates_read_a_map_step_as_its_list() {
    let server = FixtureServer::start_with(FixtureOptions {
        embed_echo_ids: true,
        ..Default::default()
    })
    .await;
    let target = server.target();
    let mut envelope = map_workflow(&target, 4);
    let mut last = step(
        "last",
        &target,
        "jobs.test.Tokenizer/Tokenize",
        &["text = input.text"],
    );
    last["when"] = json!("size(each) == 3 && each.all(v, size(v.values) == 1)");
    envelope["steps"].as_array_mut().unwrap().push(last);
    let wf = compile(&envelope);
    let input = wf
        .parse_input(&json!({ "text": distinct_text(3) }))
        .unwrap();
    let outcome = Runner::new().run(&wf, &input).await.expect("runs");
    assert!(
        !outcome.steps.last().unwrap().skipped,
        "the gate over the list opened"
    );
    assert_eq!(outcome.output_json["vectors"].as_array().unwrap().len(), 3);
}

#[test]
fn for_each_must_name_a_list_the_step_may_read() {
    let mut envelope = map_workflow(TARGET, 4);
    envelope["steps"][1]["forEach"] = json!("input.text");
    assert_one(
        &findings(&envelope),
        Some("each"),
        "$.steps[1].forEach",
        "'input.text' is string, not a list",
    );
    envelope["steps"][1]["forEach"] = json!("input.nope");
    assert_one(
        &findings(&envelope),
        Some("each"),
        "$.steps[1].forEach",
        "has no field 'nope'",
    );
    envelope["steps"][1]["forEach"] = json!("later.ids");
    assert_one(
        &findings(&envelope),
        Some("each"),
        "$.steps[1].forEach",
        "unknown scope 'later'",
    );
    envelope["steps"][1]["forEach"] = json!(7);
    assert_one(
        &findings(&envelope),
        Some("each"),
        "$.steps[1].forEach",
        "must be a path to a repeated field",
    );
}

#[test]
fn map_keys_are_checked() {
    let mut envelope = map_workflow(TARGET, 4);
    envelope["steps"][0]["maxParallel"] = json!(4);
    envelope["steps"][0]["onItemFailure"] = json!("collect");
    let all = findings(&envelope);
    assert_one(&all, Some("a"), "$.steps[0].maxParallel", "only a map step");
    assert_one(
        &all,
        Some("a"),
        "$.steps[0].onItemFailure",
        "only a map step",
    );
    let mut envelope = map_workflow(TARGET, 4);
    envelope["steps"][1]["onItemFailure"] = json!("skip");
    envelope["steps"][1]["maxParallel"] = json!(0);
    let all = findings(&envelope);
    assert_one(
        &all,
        Some("each"),
        "$.steps[1].onItemFailure",
        "\"fail\" or \"collect\"",
    );
    assert_one(
        &all,
        Some("each"),
        "$.steps[1].maxParallel",
        "from 1 to 256",
    );
    // The output is a message: a last map step needs an output mapping.
    let mut envelope = map_workflow(TARGET, 4);
    envelope.as_object_mut().unwrap().remove("output");
    assert_one(
        &findings(&envelope),
        Some("each"),
        "$.output",
        "is a map step",
    );
    // `item` is only the element in a map step's rules.
    let mut envelope = map_workflow(TARGET, 4);
    envelope["steps"][0]["rules"] = json!(["text = item"]);
    assert_one(
        &findings(&envelope),
        Some("a"),
        "$.steps[0].rules[0]",
        "unknown scope 'item'",
    );
}
