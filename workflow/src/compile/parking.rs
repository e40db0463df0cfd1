//! Steps a job parks on besides an external one: a **sleep** (`"sleep": {"forMs":
//! 3600000}` or `"sleep": {"until": "input.sendAt"}`, a `google.protobuf.Timestamp`
//! in scope) and an **event** (`"completion": "event"`, `"eventKey"`: a CEL string
//! over the step's scope, `"outputType"`: what the event's payload must be, and
//! `"eventLookbackMs"`: how long an event sent before the job parks still counts).
//!
//! Neither is called, so neither has a target, a method or rules. A sleep step
//! answers `google.protobuf.Empty`; an event step answers its `outputType`.

use std::time::Duration;

use prost_reflect::{MessageDescriptor, ReflectMessage};
use serde_json::{Map, Value};

use crate::compile::draft::{Draft, json_kind};
use crate::compile::limits::{MAX_EVENT_LOOKBACK_MS, MAX_WAIT_TIMEOUT_MS};
use crate::gate::Gate;
use crate::rules::parse_path;
use crate::spec::{Completion, EventSpec, SleepSpec};

/// The keys of a sleep step's `sleep`.
pub(super) const SLEEP_KEYS: &[&str] = &["forMs", "until"];

/// How long an event sent before a job parks on its key still counts, unless the step
/// says otherwise: 24 hours.
pub const DEFAULT_EVENT_LOOKBACK: Duration = Duration::from_secs(24 * 3600);

/// A sleep step's wake time.
#[derive(Debug, Clone, PartialEq)]
pub enum SleepStep {
    /// This long after the job first reached the step (kept across resumes).
    For(Duration),
    /// The time a `google.protobuf.Timestamp` in scope holds.
    Until {
        /// `input` or an ancestor step.
        root: String,
        /// The fields below the root down to the timestamp.
        fields: Vec<String>,
    },
}

/// An event step's key and lookback.
#[derive(Debug, Clone)]
pub struct EventStep {
    /// The CEL string expression the key is computed from when the job parks.
    pub key: Gate,
    /// How far back an event sent before the job parks still counts.
    pub lookback: Duration,
}

/// The message a sleep step answers: `google.protobuf.Empty`.
pub fn empty_type() -> MessageDescriptor {
    ().descriptor()
}

/// Reads a step's `sleep`: `None` for a step without one.
pub(super) fn read_sleep(
    draft: &mut Draft<'_>,
    object: &Map<String, Value>,
    step: Option<&str>,
    path: &str,
) -> Option<SleepSpec> {
    let value = object.get("sleep")?;
    let sleep_path = format!("{path}.sleep");
    for key in [
        "completion",
        "target",
        "method",
        "rules",
        "outputType",
        "requestType",
        "forEach",
        "validate",
        "waitTimeoutMs",
        "onTimeout",
    ] {
        if object.contains_key(key) {
            draft.find(
                step,
                format!("{path}.{key}"),
                format!("a sleep step is never called and answers nothing: remove '{key}'"),
            );
        }
    }
    let Some(sleep) = value.as_object() else {
        draft.find(
            step,
            &sleep_path,
            format!(
                "'sleep' must be an object ({{\"forMs\": 60000}} or {{\"until\": \"input.sendAt\"}}), not {}",
                json_kind(value)
            ),
        );
        return None;
    };
    draft.unknown_keys(sleep, SLEEP_KEYS, step, &sleep_path);
    match (sleep.get("forMs"), sleep.get("until")) {
        (Some(ms), None) => match ms.as_u64() {
            Some(ms) if (1..=MAX_WAIT_TIMEOUT_MS).contains(&ms) => {
                Some(SleepSpec::For(Duration::from_millis(ms)))
            }
            _ => {
                draft.find(
                    step,
                    format!("{sleep_path}.forMs"),
                    format!("'forMs' must be a whole number of milliseconds from 1 to {MAX_WAIT_TIMEOUT_MS}, not {ms}"),
                );
                None
            }
        },
        (None, Some(until)) => {
            let until_path = format!("{sleep_path}.until");
            let Some(text) = until.as_str() else {
                draft.find(
                    step,
                    &until_path,
                    format!(
                        "'until' must be a path to a google.protobuf.Timestamp (\"input.sendAt\"), not {}",
                        json_kind(until)
                    ),
                );
                return None;
            };
            match parse_path(text) {
                Ok(mut segments) => {
                    let root = segments.remove(0);
                    Some(SleepSpec::Until {
                        root,
                        fields: segments,
                        path: until_path,
                    })
                }
                Err(reason) => {
                    draft.find(step, &until_path, format!("'until': {reason}"));
                    None
                }
            }
        }
        _ => {
            draft.find(
                step,
                &sleep_path,
                "'sleep' takes exactly one of 'forMs' (how long) and 'until' (a google.protobuf.Timestamp in scope)",
            );
            None
        }
    }
}

/// Reads an event step's `eventKey` and `eventLookbackMs`: `None` for another kind of
/// step (the two keys are findings on it).
pub(super) fn read_event(
    draft: &mut Draft<'_>,
    object: &Map<String, Value>,
    completion: Completion,
    step: Option<&str>,
    path: &str,
) -> Option<EventSpec> {
    if completion != Completion::Event {
        for key in ["eventKey", "eventLookbackMs"] {
            if object.contains_key(key) {
                draft.find(
                    step,
                    format!("{path}.{key}"),
                    format!("only an event step (\"completion\": \"event\") declares '{key}'"),
                );
            }
        }
        return None;
    }
    for key in ["target", "method", "rules", "requestType", "forEach"] {
        if object.contains_key(key) {
            draft.find(
                step,
                format!("{path}.{key}"),
                format!("an event step is never called: its answer is the event's payload, of its 'outputType'; remove '{key}'"),
            );
        }
    }
    let lookback = match object.get("eventLookbackMs") {
        None => DEFAULT_EVENT_LOOKBACK,
        Some(value) => match value.as_u64() {
            Some(ms) if ms <= MAX_EVENT_LOOKBACK_MS => Duration::from_millis(ms),
            _ => {
                draft.find(
                    step,
                    format!("{path}.eventLookbackMs"),
                    format!("'eventLookbackMs' must be a whole number of milliseconds from 0 to {MAX_EVENT_LOOKBACK_MS} (7 days), not {value}"),
                );
                DEFAULT_EVENT_LOOKBACK
            }
        },
    };
    let key = draft.string(object, "eventKey", true, step, path)?;
    Some(EventSpec {
        key: (key, format!("{path}.eventKey")),
        lookback,
    })
}
