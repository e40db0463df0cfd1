//! Envelope builders over the fixture schema.

use base64::Engine as _;
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

/// The `review` step: `ReviewDesk/Review` of the input text, completed externally,
/// its answer validated.
pub fn review_step(target: &str) -> Value {
    let mut review = step(
        "review",
        target,
        "jobs.test.ReviewDesk/Review",
        &["text = input.text"],
    );
    review["completion"] = json!("external");
    review["validate"] = json!(true);
    review
}

/// tokenize → review (external, validated) → embed (gated on ids), output
/// `jobs.test.Embedding { source_text, vector, notes }`.
pub fn three_step_workflow(target: &str) -> Value {
    let review = review_step(target);
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

/// A diamond: `a` tokenizes the input; `b` and `c` both embed `a`'s ids, each
/// after `a` only (so they run at once); `d` tokenizes the input again after both.
/// Output `jobs.test.Embedding { source_text, vector }`: `b`'s values then `c`'s.
pub fn diamond_workflow(target: &str) -> Value {
    let after = |mut step: Value, names: &[&str]| {
        step["after"] = json!(names);
        step
    };
    let tokenize = |name: &str| {
        step(
            name,
            target,
            "jobs.test.Tokenizer/Tokenize",
            &["text = input.text", "fail = input.fail"],
        )
    };
    let embed = |name: &str| {
        step(
            name,
            target,
            "jobs.test.Embedder/Embed",
            &["ids = a.ids", "fail = a.fail"],
        )
    };
    workflow(
        "diamond",
        vec![
            tokenize("a"),
            after(embed("b"), &["a"]),
            after(embed("c"), &["a"]),
            after(tokenize("d"), &["b", "c"]),
        ],
        Some(json!({
            "type": "jobs.test.Embedding",
            "rules": ["source_text = input.text", "vector = b.values", "vector += c.values"],
        })),
    )
}

/// A text of `n` characters whose code points (0x100 on) are all distinct: the
/// fixture tokenizer answers one id per character, [`map_element_id`] each.
pub fn distinct_text(n: usize) -> String {
    (0..n)
        .filter_map(|i| char::from_u32(0x100 + i as u32))
        .collect()
}

/// The id the fixture tokenizer answers for character `i` of [`distinct_text`] (what
/// the embedder echoes with `embed_echo_ids`).
pub fn map_element_id(i: usize) -> f64 {
    (0x100 + i) as f64
}

/// A map step: `a` tokenizes the input (one id per character); `each` embeds every
/// id on its own (`forEach: a.ids`, at most `max_parallel` at once). Output
/// `jobs.test.Vectors { vectors, source_text }`: `each`'s responses in order.
pub fn map_workflow(target: &str, max_parallel: u64) -> Value {
    let mut each = step("each", target, "jobs.test.Embedder/Embed", &["ids += item"]);
    each["forEach"] = json!("a.ids");
    each["maxParallel"] = json!(max_parallel);
    workflow(
        "map-ids",
        vec![
            step(
                "a",
                target,
                "jobs.test.Tokenizer/Tokenize",
                &["text = input.text"],
            ),
            each,
        ],
        Some(json!({
            "type": "jobs.test.Vectors",
            "rules": ["vectors = each", "source_text = input.text"],
        })),
    )
}

/// The input text that makes [`unencodable_response_workflow`]'s step answer a
/// response with no proto3 JSON form: its code points, which the fixture tokenizer
/// returns as packed ids (one byte each), are the encoding of a
/// `google.protobuf.Any` naming a type no descriptor set holds.
pub const UNENCODABLE_TEXT: &str = "\n\u{1d}type.googleapis.com/nope.Nope";

/// One step against the fixture tokenizer, declared (wire-compatibly) as returning
/// `jobs.test.Opaque { google.protobuf.Any any = 1; }`: with [`UNENCODABLE_TEXT`] as
/// input the response holds an `Any` whose type cannot be resolved, so it cannot be
/// written as proto3 JSON.
pub fn unencodable_response_workflow(target: &str) -> Value {
    let source = r#"
        syntax = "proto3";
        package jobs.test;
        import "google/protobuf/any.proto";
        message Text { string text = 1; bool fail = 2; }
        message Opaque { google.protobuf.Any any = 1; }
        service Tokenizer { rpc Tokenize(Text) returns (Opaque); }
    "#;
    let bytes = crate::schema::compile_proto_source("opaque.proto", source)
        .expect("the opaque schema compiles");
    json!({
        "name": "opaque",
        "schema": { "descriptorSetBase64": base64::engine::general_purpose::STANDARD.encode(bytes) },
        "inputType": "jobs.test.Text",
        "steps": [step("tokenize", target, "jobs.test.Tokenizer/Tokenize", &["text = input.text"])],
    })
}

/// `tokenize`: the fixture tokenizer over the input's text.
pub fn tokenize_step(target: &str) -> Value {
    step(
        "tokenize",
        target,
        "jobs.test.Tokenizer/Tokenize",
        &["text = input.text"],
    )
}

/// A sleep step `cool_off` with `sleep` as written (`{"forMs": n}` or `{"until": …}`).
pub fn sleep_step(sleep: Value) -> Value {
    json!({ "name": "cool_off", "sleep": sleep })
}

/// `paid`: tokenize, then wait for a `jobs.test.Review` on `'order-' + input.text`;
/// `extra`'s keys (`eventLookbackMs`, `validate`, ...) are set on the event step.
pub fn event_workflow(target: &str, extra: Value) -> Value {
    let mut paid = json!({ "name": "paid", "completion": "event",
                           "eventKey": "'order-' + input.text",
                           "outputType": "jobs.test.Review" });
    if let Some(extra) = extra.as_object() {
        for (key, value) in extra {
            paid[key] = value.clone();
        }
    }
    workflow("paid", vec![tokenize_step(target), paid], None)
}

/// `leaf`: a stored workflow that tokenizes its input (a child of the tests' relays).
pub fn leaf_workflow(target: &str) -> Value {
    workflow("leaf", vec![tokenize_step(target)], None)
}

/// `embed-one`: embeds the ids of its input (a `jobs.test.Tokens`): the child the
/// tests' parents start per element.
pub fn embed_one_workflow(target: &str) -> Value {
    let mut child = workflow(
        "embed-one",
        vec![step(
            "embed",
            target,
            "jobs.test.Embedder/Embed",
            &["ids = input.ids"],
        )],
        None,
    );
    child["inputType"] = json!("jobs.test.Tokens");
    child
}

/// `embed-all`: tokenizes, then starts an `embed-one` child per id, `max_parallel`
/// at once; output the children's vectors in order.
pub fn embed_all_workflow(target: &str, max_parallel: u64) -> Value {
    workflow(
        "embed-all",
        vec![
            step(
                "a",
                target,
                "jobs.test.Tokenizer/Tokenize",
                &["text = input.text"],
            ),
            json!({ "name": "each", "workflow": "embed-one", "forEach": "a.ids",
                    "maxParallel": max_parallel, "rules": ["ids += item"] }),
        ],
        Some(
            json!({ "type": "jobs.test.Vectors", "rules": ["vectors = each", "source_text = input.text"] }),
        ),
    )
}
