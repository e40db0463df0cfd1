//! Hostile input to every verb of a node with the registry and jobs roles, driven by
//! the catalog itself (each verb's request schema says which fields it has and their
//! types): integers at and beyond the extremes, names with SQL metacharacters, control
//! characters and right-to-left marks, uuid look-alikes, a million-element array,
//! nesting far deeper than any request needs, oversized descriptor sets.
//!
//! Every answer is either a 400 naming the field, or (for free text that may hold
//! anything, such as a `reason`) an answer that stored nothing; never a 5xx, never a
//! hang (each call is bounded by a generous timeout that only a hang would reach), and
//! afterwards the database holds no job and the registry no workflow.

use std::time::Duration;

use base64::Engine as _;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};

/// Only a hang reaches this; the answers come in milliseconds.
const HANG: Duration = Duration::from_secs(120);

const JOB_ID: &str = "0192f0c4-6a4e-7cc1-9d7e-1a2b3c4d5e6f";

/// A request each verb would accept, apart from the field under test (ids of jobs
/// that do not exist: nothing a verb does with them writes).
fn base(verb: &str) -> Value {
    match verb {
        "submit-workflow" => json!({ "workflowName": "no-such-workflow", "input": {} }),
        "submit-workflows" => {
            json!({ "workflowName": "no-such-workflow", "submissions": [{ "input": {} }] })
        }
        "get-job" | "cancel-job" => json!({ "jobId": JOB_ID }),
        "retry-job" => json!({ "jobId": JOB_ID }),
        "complete-step" => json!({ "jobId": JOB_ID, "stepName": "review", "response": {} }),
        "reject-step" => json!({ "jobId": JOB_ID, "stepName": "review", "reason": "no" }),
        "cancel-jobs" | "retry-jobs" => json!({ "jobIds": [JOB_ID] }),
        "get-form" => json!({ "jobId": JOB_ID, "stepName": "review" }),
        "get-job-items" => json!({ "jobId": JOB_ID, "stepName": "each" }),
        "get-workflow" => json!({ "name": "no-such-workflow" }),
        "run-workflow" => json!({ "workflowName": "no-such-workflow", "input": {} }),
        "put-workflow" => json!({ "workflow": {} }),
        "send-event" => json!({ "key": "order-1", "payload": { "score": 1 } }),
        "pause-workflow" | "resume-workflow" => json!({ "workflowName": "no-such-workflow" }),
        "put-schedule" => {
            json!({ "name": "nightly", "cron": "0 3 * * *", "workflowName": "no-such-workflow" })
        }
        "get-schedule" | "delete-schedule" | "pause-schedule" | "resume-schedule"
        | "trigger-schedule" => json!({ "name": "no-such-schedule" }),
        "backfill-schedule" => json!({ "name": "no-such-schedule",
            "from": "2026-01-01T00:00:00Z", "to": "2026-01-01T01:00:00Z" }),
        _ => json!({}),
    }
}

/// Fields that hold free text: any character may be meant (a reason quoting a
/// name, in any script), so they are stored verbatim as data, never as SQL.
fn free_text(field: &str) -> bool {
    matches!(field, "reason" | "text" | "message" | "notes")
}

/// Hostile values for a field of `schema`'s type.
fn hostile_values(schema: &Value) -> Vec<(&'static str, Value)> {
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if types.contains(&"integer") {
        return vec![
            ("i64::MAX", json!(i64::MAX)),
            ("i64::MIN", json!(i64::MIN)),
            ("2^64 as a string", json!("18446744073709551616")),
            ("1e308", json!(1e308)),
            ("-1", json!(-1)),
            ("a fraction", json!(1.5)),
        ];
    }
    if schema["format"] == "date-time" {
        return vec![
            ("month 13", json!("2026-13-45T99:99:99Z")),
            ("year 10^9", json!("1000000000-01-01T00:00:00Z")),
            ("no zone", json!("2026-12-03T10:00:00")),
        ];
    }
    if types.contains(&"string") {
        return vec![
            ("SQL metacharacters", json!("x'; DROP TABLE jobs; --")),
            ("a NUL", json!("a\u{0}b")),
            ("a bell", json!("\u{7}ring")),
            ("a right-to-left override", json!("\u{202e}fdp.exe")),
            (
                "a uuid with a zero-width space",
                json!(format!("{JOB_ID}\u{200b}")),
            ),
            (
                "a uuid in full-width digits",
                json!("０１９２f0c4-6a4e-7cc1-9d7e-1a2b3c4d5e6f"),
            ),
            ("a braced uuid", json!(format!("{{{JOB_ID}}}"))),
            ("a urn uuid", json!(format!("urn:uuid:{JOB_ID}"))),
            ("a megabyte", json!("x".repeat(1 << 20))),
        ];
    }
    if types.contains(&"array") {
        // Short elements, so the body stays under the route's 8 MiB and the field's
        // own rules answer.
        let million: Vec<Value> = (0..1_000_000).map(|_| json!("a")).collect();
        return vec![("a million elements", Value::Array(million))];
    }
    if types.contains(&"object") {
        return vec![("nesting 100,000 deep", nested(100_000))];
    }
    Vec::new()
}

fn nested(depth: usize) -> Value {
    // Not json!: it would serialize `value` again, recursively, at every level.
    let mut value = Value::from(1);
    for _ in 0..depth {
        let mut object = serde_json::Map::new();
        object.insert("a".into(), Value::Array(vec![value]));
        value = Value::Object(object);
    }
    value
}

/// `body` as JSON text without serde_json's recursion (a deep value is built as text).
fn body_text(body: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                out.push('{');
                for (i, (key, item)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    write(item, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    // Iterative enough: the deep values here nest objects in one-element arrays, and
    // this recursion runs on a thread with a large stack (see below).
    let mut out = String::new();
    write(body, &mut out);
    out
}

async fn call_raw(node: &JobsNode, verb: &str, body: String) -> (u16, Value) {
    use tower::ServiceExt;
    let request = http::Request::post(format!("/v1/actions/{verb}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body))
        .unwrap();
    let response = tokio::time::timeout(HANG, node.router.clone().oneshot(request))
        .await
        .unwrap_or_else(|_| panic!("{verb} hung"))
        .unwrap();
    let status = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let answer = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| json!({ "raw": String::from_utf8_lossy(&bytes) }));
    (status, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_answers_hostile_values_with_a_400_naming_the_field_and_writes_nothing() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "hostile", 0)).await;
    let catalog = {
        use tower::ServiceExt;
        let response = node
            .router
            .clone()
            .oneshot(
                http::Request::get("/v1/actions")
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        serde_json::from_slice::<Value>(&bytes).unwrap()
    };
    let mut problems = Vec::new();
    let mut cases = 0;
    for action in catalog["actions"].as_array().unwrap() {
        let verb = action["name"].as_str().unwrap();
        let properties = action["request"]["properties"].as_object().unwrap();
        // What the base request alone is answered: a printable value taken as data
        // may meet the base's own refusal (a workflow that does not exist).
        let (_, base_answer) = call_raw(&node, verb, base(verb).to_string()).await;
        let base_message = base_answer["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        for (field, schema) in properties {
            // Proto-name aliases take the same values as their JSON names.
            if schema["description"]
                .as_str()
                .is_some_and(|d| d.starts_with("the proto name"))
            {
                continue;
            }
            for (kind, value) in hostile_values(schema) {
                cases += 1;
                let mut body = base(verb);
                body[field.as_str()] = value;
                // The deep values are written out on a thread with room for them.
                let text = std::thread::Builder::new()
                    .stack_size(256 << 20)
                    .spawn(move || body_text(&body))
                    .unwrap()
                    .join()
                    .unwrap();
                let (status, answer) = call_raw(&node, verb, text).await;
                let message = answer["message"].as_str().unwrap_or_default();
                let named = message.contains(field.as_str())
                    || answer["details"].to_string().contains(field.as_str());
                // Printable text is data: a lookup of it may answer "nothing
                // matches"; control and invisible formatting characters in a name
                // must be refused, naming the field.
                let printable = !matches!(
                    kind,
                    "a NUL"
                        | "a bell"
                        | "a right-to-left override"
                        | "a uuid with a zero-width space"
                );
                let base_refusal = !base_message.is_empty() && message == base_message;
                let fine = match status {
                    400 => named || (printable && base_refusal),
                    200 => free_text(field) || printable,
                    _ => false,
                };
                if !fine {
                    let shown: String = answer.to_string().chars().take(300).collect();
                    problems.push(format!("{verb}.{field} with {kind}: {status} {shown}"));
                }
            }
        }
    }
    assert!(cases > 100, "the catalog drove {cases} cases");
    assert!(
        problems.is_empty(),
        "{} of {cases} cases:\n{}",
        problems.len(),
        problems.join("\n")
    );

    let listed = node.ok("list-jobs", json!({})).await;
    assert_eq!(listed["jobs"], json!([]), "no job was written");
    let stored = node.ok("list-workflows", json!({})).await;
    assert_eq!(stored["workflows"], json!([]), "no workflow was stored");
    node.stop().await;
}

/// A file of package `h` with `types` messages `T0…`, each holding the next.
fn file(name: &str, imports: &[&str], types: usize) -> prost_types::FileDescriptorProto {
    let message = |i: usize| prost_types::DescriptorProto {
        name: Some(format!("T{i}{}", name.trim_end_matches(".proto"))),
        field: if i + 1 < types {
            vec![prost_types::FieldDescriptorProto {
                name: Some("next".into()),
                number: Some(1),
                label: Some(prost_types::field_descriptor_proto::Label::Optional as i32),
                r#type: Some(prost_types::field_descriptor_proto::Type::Message as i32),
                type_name: Some(format!(".h.T{}{}", i + 1, name.trim_end_matches(".proto"))),
                json_name: Some("next".into()),
                ..Default::default()
            }]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    prost_types::FileDescriptorProto {
        name: Some(name.into()),
        package: Some("h".into()),
        dependency: imports.iter().map(|i| (*i).to_owned()).collect(),
        message_type: (0..types).map(message).collect(),
        syntax: Some("proto3".into()),
        ..Default::default()
    }
}

fn descriptor_set(files: Vec<prost_types::FileDescriptorProto>) -> String {
    let set = prost_types::FileDescriptorSet { file: files };
    base64::engine::general_purpose::STANDARD.encode(prost::Message::encode_to_vec(&set))
}

#[tokio::test]
async fn hostile_descriptor_sets_are_refused_naming_the_schema_and_nothing_is_stored() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "hostile-schema", 0)).await;
    let envelope = |schema: Value| {
        json!({
            "name": "hostile",
            "schema": schema,
            "inputType": "h.T0h",
            "steps": [{ "name": "s", "target": "127.0.0.1:1", "method": "h.S/M" }],
        })
    };
    // As much base64 as fits the route's 8 MiB body (about 8 MiB), not a descriptor
    // set; a larger body is refused before it is read, naming the limit.
    let junk = base64::engine::general_purpose::STANDARD.encode(vec![0xa5u8; (6 << 20) - 4096]);
    let many = descriptor_set(vec![file("h.proto", &[], 5_000)]);
    let cyclic = descriptor_set(vec![
        file("a.proto", &["b.proto"], 1),
        file("b.proto", &["a.proto"], 1),
    ]);
    for (what, schema, field) in [
        (
            "8 MiB of junk",
            json!({ "descriptorSetBase64": junk }),
            "descriptorSetBase64",
        ),
        (
            "not base64",
            json!({ "descriptorSetBase64": "!!!" }),
            "descriptorSetBase64",
        ),
        (
            "5,000 types, each holding the next",
            json!({ "descriptorSetBase64": many }),
            "nests message types 5000 deep",
        ),
        (
            "cyclic imports",
            json!({ "descriptorSetBase64": cyclic }),
            "import each other in a cycle (a.proto → b.proto → a.proto)",
        ),
    ] {
        for verb in ["put-workflow", "submit-workflow", "run-workflow"] {
            let body = match verb {
                "put-workflow" => json!({ "workflow": envelope(schema.clone()) }),
                _ => json!({ "workflow": envelope(schema.clone()), "input": {} }),
            };
            let (status, answer) = call_raw(&node, verb, body.to_string()).await;
            let text = answer.to_string();
            assert_eq!(
                status,
                400,
                "{verb} with {what}: {}",
                &text[..text.len().min(400)]
            );
            assert!(
                text.contains(field),
                "{verb} with {what} names {field}: {}",
                &text[..text.len().min(400)]
            );
        }
    }
    let listed = node.ok("list-jobs", json!({})).await;
    assert_eq!(listed["jobs"], json!([]), "no job was written");
    let stored = node.ok("list-workflows", json!({})).await;
    assert_eq!(stored["workflows"], json!([]), "no workflow was stored");
    node.stop().await;
}
