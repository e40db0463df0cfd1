//! Envelope builders over the fixture schema.

use serde_json::{Value, json};

use super::fixture_descriptor_set_base64;

/// A step calling `method` on `target` with `rules`.
pub fn step(name: &str, target: &str, method: &str, rules: &[&str]) -> Value {
    json!({ "name": name, "target": target, "method": method, "rules": rules })
}

/// A workflow over the fixture schema with input `jobs.test.Text`.
pub fn workflow(name: &str, steps: Vec<Value>, output: Option<Value>) -> Value {
    let mut envelope = json!({
        "name": name,
        "schema": { "descriptorSetBase64": fixture_descriptor_set_base64() },
        "inputType": "jobs.test.Text",
        "steps": steps,
    });
    if let Some(output) = output {
        envelope["output"] = output;
    }
    envelope
}

/// tokenize → embed, output `jobs.test.Embedding { source_text, vector }`.
pub fn two_step_workflow(target: &str) -> Value {
    workflow(
        "embed-text",
        vec![
            step(
                "tokenize",
                target,
                "jobs.test.Tokenizer/Tokenize",
                &["text = input.text", "fail = input.fail"],
            ),
            step(
                "embed",
                target,
                "jobs.test.Embedder/Embed",
                &["ids = tokenize.ids", "fail = tokenize.fail"],
            ),
        ],
        Some(
            json!({ "type": "jobs.test.Embedding", "rules": ["source_text = input.text", "vector = embed.values"] }),
        ),
    )
}

/// tokenize → review (external, validated) → embed (gated on ids), output
/// `jobs.test.Embedding { source_text, vector, notes }`.
pub fn three_step_workflow(target: &str) -> Value {
    let mut review = step(
        "review",
        target,
        "jobs.test.ReviewDesk/Review",
        &["text = input.text"],
    );
    review["completion"] = json!("external");
    review["validate"] = json!(true);
    let mut embed = step(
        "embed",
        target,
        "jobs.test.Embedder/Embed",
        &["ids = tokenize.ids", "fail = tokenize.fail"],
    );
    embed["when"] = json!("size(tokenize.ids) > 0");
    workflow(
        "review-text",
        vec![
            step(
                "tokenize",
                target,
                "jobs.test.Tokenizer/Tokenize",
                &["text = input.text", "fail = input.fail"],
            ),
            review,
            embed,
        ],
        Some(json!({
            "type": "jobs.test.Embedding",
            "rules": ["source_text = input.text", "vector = embed.values", "notes = review.notes"],
        })),
    )
}
