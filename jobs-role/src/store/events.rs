//! The outbox payload: one encoded, validated `WorkflowRunEvent` per commit point.

use std::time::SystemTime;

use jobs_proto::WireMessage;
use jobs_proto::v1::WorkflowRunEvent;
use jobs_proto::v1::workflow_run_event::Type;
use prost_types::value::Kind;
use serde_json::Value;
use uuid::Uuid;

use crate::status::JobStatus;

/// Longest verdict and error the contract allows; longer texts are cut, with a
/// marker, in the event only (the row keeps them whole).
const MAX_VERDICT_CHARS: usize = 500;
const MAX_ERROR_CHARS: usize = 4000;

/// What an event says.
#[derive(Debug, Clone)]
pub struct EventFacts<'a> {
    /// The job.
    pub job_id: Uuid,
    /// Its workflow.
    pub workflow_name: &'a str,
    /// What happened.
    pub kind: Type,
    /// The step it is about (checkpoint, park).
    pub step: Option<&'a str>,
    /// The job's attempt counter at the commit point.
    pub attempt: i32,
    /// The verdict (COMPLETED; also validation verdicts).
    pub verdict: Option<&'a str>,
    /// The error (FAILED, DEAD).
    pub error: Option<&'a str>,
    /// The job's status after the transition.
    pub status: JobStatus,
    /// More context for `detail` beside the status (an operator's reason, the step
    /// a retry starts from).
    pub detail: &'a [(&'a str, &'a str)],
    /// One JSON value for `detail` under its key (COMPLETED's `result`, WAITING's
    /// `pendingRequest`), bounded: past [`MAX_DETAIL_JSON_BYTES`] (as JSON, and as the
    /// encoded `Struct` value), or nested deeper than [`MAX_DETAIL_DEPTH`], it is left
    /// out and `<key>Cut: true` and `<key>Bytes: <JSON size>` say so (get-job has the
    /// whole value).
    pub data: Option<(&'a str, &'a Value)>,
    /// What a parked job waits on (WAITING: per step its kind, and an event step's
    /// key or a sleep as written), under `waitingOn`, bounded as `data` is.
    pub waiting_on: Option<&'a Value>,
    /// The job's metadata (a JSON object of strings, set at submission and never
    /// changed), carried under `metadata` in every event of the job so a consumer can
    /// route by it; `None` or an empty object: no `metadata` entry.
    pub metadata: Option<&'a Value>,
}

/// Largest JSON value an event carries in its detail, in bytes of compact JSON and in
/// bytes of its encoding as a `google.protobuf.Value` (which can be several times
/// larger: every list element is a message): an event stays small for the broker and
/// for every consumer.
pub const MAX_DETAIL_JSON_BYTES: usize = 16 * 1024;

/// Deepest JSON value an event carries in its detail. Each JSON level is about three
/// protobuf levels in a `Struct` (value, struct, map entry), and protobuf decoders
/// stop at 100 levels (prost-reflect's check of the event panics past it): deeper
/// values would make events no consumer can read.
pub const MAX_DETAIL_DEPTH: usize = 16;

/// True when `value` nests more than `limit` levels of arrays and objects (recursing
/// at most `limit + 1` deep).
fn nests_deeper_than(value: &Value, limit: usize) -> bool {
    let children: Box<dyn Iterator<Item = &Value>> = match value {
        Value::Array(items) => Box::new(items.iter()),
        Value::Object(fields) => Box::new(fields.values()),
        _ => return false,
    };
    if limit == 0 {
        return true;
    }
    children
        .into_iter()
        .any(|child| nests_deeper_than(child, limit - 1))
}

/// A JSON value as a `google.protobuf.Value`. Numbers become doubles, as in every
/// `Struct`; a 64-bit integer past 2^53 loses precision here (get-job keeps it).
fn proto_value(value: &Value) -> prost_types::Value {
    let kind = match value {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Value::String(text) => Kind::StringValue(text.clone()),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.iter().map(proto_value).collect(),
        }),
        Value::Object(fields) => Kind::StructValue(prost_types::Struct {
            fields: fields
                .iter()
                .map(|(key, value)| (key.clone(), proto_value(value)))
                .collect(),
        }),
    };
    prost_types::Value { kind: Some(kind) }
}

/// The detail entries of one bounded JSON value (see [`EventFacts::data`]).
fn data_entries(key: &str, value: &Value) -> Vec<(String, prost_types::Value)> {
    use prost::Message as _;
    let bytes = serde_json::to_vec(value).map_or(usize::MAX, |json| json.len());
    if bytes <= MAX_DETAIL_JSON_BYTES && !nests_deeper_than(value, MAX_DETAIL_DEPTH) {
        let converted = proto_value(value);
        if converted.encoded_len() <= MAX_DETAIL_JSON_BYTES {
            return vec![(key.to_owned(), converted)];
        }
    }
    vec![
        (
            format!("{key}Cut"),
            prost_types::Value {
                kind: Some(Kind::BoolValue(true)),
            },
        ),
        (
            format!("{key}Bytes"),
            prost_types::Value {
                kind: Some(Kind::NumberValue(bytes as f64)),
            },
        ),
    ]
}

/// The outbox type name of an event type.
pub fn type_name(kind: Type) -> &'static str {
    match kind {
        Type::Unspecified => "UNSPECIFIED",
        Type::Accepted => "ACCEPTED",
        Type::StepCheckpoint => "STEP_CHECKPOINT",
        Type::Waiting => "WAITING",
        Type::Completed => "COMPLETED",
        Type::Failed => "FAILED",
        Type::Dead => "DEAD",
        Type::Cancelled => "CANCELLED",
        Type::Retried => "RETRIED",
    }
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut kept: String = text.chars().take(max - 1).collect();
    kept.push('…');
    kept
}

/// The id of an event a claim's write commits: derived from what it marks (the job,
/// the claim's fencing token, the event type and the checkpoint's position, -1 for a
/// settlement), so the same write sent twice carries the same id and its second
/// insert is a no-op. Within one claim each position is checkpointed once and the
/// claim settles once, so no two events of a job share an id. (A UUID of version 8:
/// the first 16 bytes of a SHA-256.)
pub fn claim_event_id(job_id: Uuid, token: i32, kind: Type, position: i32) -> Uuid {
    use sha2::Digest as _;
    let mut hash = sha2::Sha256::new();
    hash.update(b"protomolt.jobs.claim-event\0");
    hash.update(job_id.as_bytes());
    hash.update(token.to_be_bytes());
    hash.update(type_name(kind).as_bytes());
    hash.update(position.to_be_bytes());
    let digest = hash.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

/// Builds, validates and encodes the event under a new id; returns its id (also the
/// outbox row id) and payload.
pub fn encode(facts: &EventFacts<'_>) -> Result<(Uuid, Vec<u8>), jobs_proto::ContractError> {
    encode_as(facts, Uuid::now_v7())
}

/// [`encode`] under `event_id` (a claim's write: [`claim_event_id`]).
pub fn encode_as(
    facts: &EventFacts<'_>,
    event_id: Uuid,
) -> Result<(Uuid, Vec<u8>), jobs_proto::ContractError> {
    encode_at(facts, event_id, super::clock::now())
}

/// [`encode_as`], the event stamped `occurred_at` (a claim's batch: when its
/// transaction began, which is no later than what PostgreSQL's `now()` counts a
/// sleep or a wait's timeout from, so an event never looks later than what it set).
pub fn encode_at(
    facts: &EventFacts<'_>,
    event_id: Uuid,
    occurred_at: SystemTime,
) -> Result<(Uuid, Vec<u8>), jobs_proto::ContractError> {
    let status = prost_types::Value {
        kind: Some(Kind::StringValue(facts.status.as_str().to_owned())),
    };
    let occurred_at = prost_types::Timestamp::from(occurred_at);
    let mut event = WorkflowRunEvent {
        event_id: event_id.to_string(),
        job_id: facts.job_id.to_string(),
        workflow_name: facts.workflow_name.to_owned(),
        r#type: facts.kind as i32,
        step: facts.step.unwrap_or_default().to_owned(),
        attempt: facts.attempt,
        verdict: facts
            .verdict
            .map(|v| cut(v, MAX_VERDICT_CHARS))
            .unwrap_or_default(),
        error: facts
            .error
            .map(|e| cut(e, MAX_ERROR_CHARS))
            .unwrap_or_default(),
        detail: Some(prost_types::Struct {
            fields: facts
                .detail
                .iter()
                .map(|(key, value)| {
                    let value = prost_types::Value {
                        kind: Some(Kind::StringValue(cut(value, MAX_ERROR_CHARS))),
                    };
                    ((*key).to_owned(), value)
                })
                .chain(
                    facts
                        .data
                        .map(|(key, value)| data_entries(key, value))
                        .unwrap_or_default(),
                )
                .chain(
                    facts
                        .waiting_on
                        .map(|value| data_entries("waitingOn", value))
                        .unwrap_or_default(),
                )
                .chain(
                    facts
                        .metadata
                        .filter(|metadata| metadata.as_object().is_some_and(|m| !m.is_empty()))
                        .map(|metadata| ("metadata".to_owned(), proto_value(metadata))),
                )
                .chain([("status".to_owned(), status)])
                .collect(),
        }),
        occurred_at: Some(occurred_at),
    };
    // The detail is a `Struct`, which the contract declares no rules for, and it is
    // the large part of an event (a result, a pending request): the validator would
    // transcode all of it, on the flusher's one thread, for nothing, and measurably
    // (docs/benchmarks.md). So the rules are checked on the event without it.
    let detail = event.detail.take();
    // The validator panics past its recursion limit; should anything reach it, the
    // event is refused (its write fails alone) instead of the panic ending the task
    // that commits every claim's writes.
    let checked = std::panic::catch_unwind(move || event.validate().map(|()| event))
        .unwrap_or_else(|_| {
            Err(jobs_proto::ContractError::RulesUnusable {
                message: "protomolt.jobs.v1.WorkflowRunEvent",
                reason: "the validator panicked on this event".into(),
            })
        })?;
    let mut event = checked;
    event.detail = detail;
    let encoded = prost::Message::encode_to_vec(&event);
    Ok((event_id, encoded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_errors_are_cut_to_the_contract() {
        let error = "e".repeat(10_000);
        let facts = EventFacts {
            job_id: Uuid::new_v4(),
            workflow_name: "w",
            kind: Type::Dead,
            step: None,
            attempt: 3,
            verdict: None,
            error: Some(&error),
            status: JobStatus::Dead,
            detail: &[],
            data: None,
            waiting_on: None,
            metadata: None,
        };
        let (id, payload) = encode(&facts).expect("a cut error still encodes");
        let event = WorkflowRunEvent::decode_validated(&payload).unwrap();
        assert_eq!(event.event_id, id.to_string());
        assert_eq!(event.error.chars().count(), 4000);
        assert!(event.error.ends_with('…'));
    }

    #[test]
    fn a_json_detail_is_carried_whole_or_flagged_as_cut() {
        let small =
            serde_json::json!({ "vector": [1.5, 2], "notes": "ok", "nested": { "n": null } });
        let facts = |data| EventFacts {
            job_id: Uuid::new_v4(),
            workflow_name: "w",
            kind: Type::Completed,
            step: None,
            attempt: 1,
            verdict: Some("1 steps"),
            error: None,
            status: JobStatus::Completed,
            detail: &[],
            data,
            waiting_on: None,
            metadata: None,
        };
        let (_, payload) = encode(&facts(Some(("result", &small)))).unwrap();
        let event = WorkflowRunEvent::decode_validated(&payload).unwrap();
        let detail = event.detail.unwrap().fields;
        let result = detail["result"].kind.clone().unwrap();
        let Kind::StructValue(result) = result else {
            panic!("{result:?}")
        };
        assert_eq!(
            result.fields["notes"].kind,
            Some(Kind::StringValue("ok".into()))
        );
        assert!(!detail.contains_key("resultCut"));

        let large = serde_json::json!({ "text": "x".repeat(MAX_DETAIL_JSON_BYTES) });
        let (_, payload) = encode(&facts(Some(("result", &large)))).unwrap();
        let detail = WorkflowRunEvent::decode_validated(&payload)
            .unwrap()
            .detail
            .unwrap()
            .fields;
        assert!(!detail.contains_key("result"), "too large: left out");
        assert_eq!(detail["resultCut"].kind, Some(Kind::BoolValue(true)));
        assert!(payload.len() < 2 * MAX_DETAIL_JSON_BYTES);

        // Small as JSON, five times larger encoded: cut too.
        let wide = serde_json::json!(vec![0; 8_000]);
        let (_, payload) = encode(&facts(Some(("result", &wide)))).unwrap();
        assert!(
            payload.len() < 2 * MAX_DETAIL_JSON_BYTES,
            "{}",
            payload.len()
        );

        // Deeply nested: cut, and the event still encodes and decodes.
        let mut deep = serde_json::json!("leaf");
        for _ in 0..60 {
            deep = serde_json::json!({ "child": deep });
        }
        let (_, payload) = encode(&facts(Some(("result", &deep)))).unwrap();
        let detail = WorkflowRunEvent::decode_validated(&payload)
            .unwrap()
            .detail
            .unwrap()
            .fields;
        assert_eq!(detail["resultCut"].kind, Some(Kind::BoolValue(true)));
        let mut nested = serde_json::json!("leaf");
        for _ in 0..MAX_DETAIL_DEPTH {
            nested = serde_json::json!({ "child": nested });
        }
        let (_, payload) = encode(&facts(Some(("result", &nested)))).unwrap();
        let detail = WorkflowRunEvent::decode_validated(&payload)
            .unwrap()
            .detail
            .unwrap()
            .fields;
        assert!(detail.contains_key("result"), "within the depth: carried");
        assert!(
            crate::event_json::event_json(&payload).is_ok(),
            "readable by get-job and SSE"
        );
    }

    #[test]
    fn a_terminal_event_without_its_error_is_refused() {
        let facts = EventFacts {
            job_id: Uuid::new_v4(),
            workflow_name: "w",
            kind: Type::Failed,
            step: None,
            attempt: 1,
            verdict: None,
            error: None,
            status: JobStatus::Failed,
            detail: &[],
            data: None,
            waiting_on: None,
            metadata: None,
        };
        assert!(encode(&facts).is_err());
    }
}
