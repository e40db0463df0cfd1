//! Checkpoint replay is not trusting.

use serde_json::{Value, json};
use workflow::testkit::three_step_workflow;
use workflow::{CompiledWorkflow, FailureKind, replay_checkpoints};

fn wf() -> CompiledWorkflow {
    CompiledWorkflow::compile(&three_step_workflow("127.0.0.1:1")).unwrap()
}

fn refused(stored: Value, needle: &str) {
    let failure = replay_checkpoints(&wf(), &stored).expect_err("replay should refuse");
    assert_eq!(failure.kind, FailureKind::Workflow);
    assert!(failure.to_string().starts_with("WORKFLOW: "), "{failure}");
    assert!(
        failure.to_string().contains(needle),
        "{failure} should mention {needle:?}"
    );
}

#[test]
fn replay_rejects_what_drifted() {
    refused(json!({ "name": "tokenize" }), "not an array");
    refused(json!("[]"), "not an array");
    let tokenize = json!({ "name": "tokenize", "skipped": false, "response": { "ids": [1] } });
    let review = json!({ "name": "review", "skipped": false, "response": { "notes": "ok" } });
    let embed = json!({ "name": "embed", "skipped": true });
    refused(
        json!([tokenize, review, embed, embed]),
        "4 checkpoints are stored but the workflow has only 3 steps",
    );
    refused(
        json!([review]),
        "checkpoint 1 names step 'review' but step 1 is 'tokenize'",
    );
    refused(
        json!([{ "skipped": false, "response": {} }]),
        "names step ''",
    );
    refused(
        json!([{ "name": "tokenize", "response": { "ids": ["not a number"] } }]),
        "does not decode",
    );
    refused(
        json!([{ "name": "tokenize", "response": { "unknown": 1 } }]),
        "does not decode",
    );
    refused(
        json!([{ "name": "tokenize", "skipped": false }]),
        "has no response",
    );
    refused(
        json!([{ "name": "tokenize", "skipped": "no", "response": {} }]),
        "non-boolean 'skipped'",
    );
    refused(
        json!([{ "name": "tokenize", "skipped": true, "response": { "ids": [1] } }]),
        "skipped yet carries a response",
    );
    refused(json!([7]), "checkpoint 1 is not an object");
}

#[test]
fn replay_accepts_skipped_entries_and_prefixes() {
    let replayed = replay_checkpoints(&wf(), &json!([])).unwrap();
    assert!(replayed.is_empty());
    let stored = json!([
        { "name": "tokenize", "skipped": false, "response": { "ids": [104, 105] } },
        { "name": "review", "response": { "notes": "fine", "score": 3 } },
        { "name": "embed", "skipped": true },
    ]);
    let replayed = replay_checkpoints(&wf(), &stored).unwrap();
    assert_eq!(replayed.len(), 3);
    assert!(replayed[2].checkpoint.skipped);
    assert_eq!(replayed[2].checkpoint.response, None);
    assert_eq!(replayed[0].checkpoint.to_json(), stored[0]);
}
