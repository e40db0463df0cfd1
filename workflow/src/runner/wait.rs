//! What a parked step waits for ([`WaitKind`]): an answer (`complete-step`), a time
//! (a sleep step's [`Wake`]) or an event on a key (`send-event`), worked out from
//! the scope when the segment reaches the step.

use std::time::Duration;

use prost_reflect::{DynamicMessage, Value as ProtoValue};
use serde_json::Value;
use tokio::time::Instant;

use super::call::{Caller, build_request};
use crate::compile::{CompiledStep, CompiledWorkflow, Completion, SleepStep, encode_json};
use crate::failure::{FailureKind, StepFailure};
use crate::scope::Scope;

/// When a sleep step wakes, as the runner knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// This long after the job first parks on the step: the store fixes the time
    /// then, by its own clock, and keeps it across resumes.
    After(Duration),
    /// At this time, in milliseconds since the Unix epoch (`sleep.until`).
    At(i64),
}

/// What a parked step waits for.
#[derive(Debug, Clone, PartialEq)]
pub enum WaitKind {
    /// An answer through `complete-step` (an external step).
    External,
    /// A time (a sleep step).
    Sleep(Wake),
    /// An event sent on `key` (an event step); one sent up to `lookback` before the
    /// job parks counts too.
    Event {
        /// The key, computed from the step's `eventKey`.
        key: String,
        /// The step's `eventLookbackMs`.
        lookback: Duration,
    },
    /// Child jobs of `workflow` (a child step): the ones to have started, by element
    /// (0 without `forEach`) with their input as proto3 JSON; at most the step's
    /// `maxParallel` of the elements not ended yet. Starting one twice is a no-op.
    Child {
        /// The stored workflow's name.
        workflow: String,
        /// Per element its position and input.
        starts: Vec<(usize, Value)>,
    },
}

impl WaitKind {
    /// The name stored with the wait and shown to users: `external`, `sleep`,
    /// `event`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            WaitKind::External => "external",
            WaitKind::Sleep(_) => "sleep",
            WaitKind::Event { .. } => "event",
            WaitKind::Child { .. } => "child",
        }
    }
}

/// A step a parked job waits for.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitingStep {
    /// The step's name.
    pub step: String,
    /// What its rules built, as proto3 JSON (`None` without a request type; always
    /// `None` for sleep and event steps).
    pub request: Option<Value>,
    /// What it waits for.
    pub kind: WaitKind,
}

/// What step `step` (not called, its gate open) waits for, seen from `scope`. A
/// sleep's wake time is answered as written; whether it already passed is the
/// sink's to say.
pub(super) async fn waiting_for(
    caller: &Caller<'_>,
    workflow: &CompiledWorkflow,
    step: &CompiledStep,
    scope: &Scope,
    segment_end: Instant,
) -> Result<WaitingStep, StepFailure> {
    let waiting = |request, kind| WaitingStep {
        step: step.name.clone(),
        request,
        kind,
    };
    match (&step.completion, &step.sleep, &step.event) {
        (Completion::Sleep, Some(sleep), _) => {
            Ok(waiting(None, WaitKind::Sleep(wake(step, sleep, scope)?)))
        }
        (Completion::Event, _, Some(event)) => {
            let key = caller
                .event_key(workflow, step, &event.key, scope, segment_end)
                .await?;
            Ok(waiting(
                None,
                WaitKind::Event {
                    key,
                    lookback: event.lookback,
                },
            ))
        }
        _ => {
            let request = match build_request(step, scope)? {
                Some(request) => Some(encode_json(&request).map_err(|e| {
                    StepFailure::at(
                        &step.name,
                        FailureKind::Mapping,
                        format!("the request its rules build cannot be stored: {e}"),
                    )
                })?),
                None => None,
            };
            Ok(waiting(request, WaitKind::External))
        }
    }
}

/// A sleep's wake time: its duration, or the `google.protobuf.Timestamp` its `until`
/// reads (an unset one, or one out of range, fails the step).
fn wake(step: &CompiledStep, sleep: &SleepStep, scope: &Scope) -> Result<Wake, StepFailure> {
    let (root, fields) = match sleep {
        SleepStep::For(duration) => return Ok(Wake::After(*duration)),
        SleepStep::Until { root, fields } => (root, fields),
    };
    let path = std::iter::once(root.as_str())
        .chain(fields.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(".");
    let failure = |why: String| {
        StepFailure::at(
            &step.name,
            FailureKind::Mapping,
            format!("its sleep 'until' {path} {why}"),
        )
    };
    // Read field by field: an unset timestamp (or a message on the way to it) is not
    // "the epoch", it is a missing time.
    let Some(mut message) = scope.get(root).cloned() else {
        return Err(failure("cannot be read: its root is not in scope".into()));
    };
    for field in fields {
        if !message.has_field_by_name(field) {
            return Err(failure(format!("is not set ('{field}' is unset)")));
        }
        message = match message.get_field_by_name(field).as_deref() {
            Some(ProtoValue::Message(inner)) => inner.clone(),
            _ => return Err(failure("is not a google.protobuf.Timestamp".into())),
        };
    }
    let timestamp = message;
    millis_of(&timestamp)
        .ok_or_else(|| failure("is out of range: a time from year 1 to 9999 is expected".into()))
        .map(Wake::At)
}

/// A `google.protobuf.Timestamp` in milliseconds since the Unix epoch, rounded up
/// (a sleep never ends before its time); `None` past the type's range.
fn millis_of(timestamp: &DynamicMessage) -> Option<i64> {
    // The type's range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
    const MIN_SECONDS: i64 = -62_135_596_800;
    const MAX_SECONDS: i64 = 253_402_300_799;
    let seconds = timestamp
        .get_field_by_name("seconds")
        .and_then(|v| v.as_i64())
        .unwrap_or(0);
    let nanos = timestamp
        .get_field_by_name("nanos")
        .and_then(|v| v.as_i32())
        .unwrap_or(0);
    if !(MIN_SECONDS..=MAX_SECONDS).contains(&seconds) || !(0..1_000_000_000).contains(&nanos) {
        return None;
    }
    // Nanos are from 0 to 999,999,999: rounding up adds at most one millisecond.
    Some(seconds * 1000 + (i64::from(nanos) + 999_999) / 1_000_000)
}

#[cfg(test)]
mod tests {
    use prost_reflect::DescriptorPool;

    use super::*;

    fn timestamp(seconds: i64, nanos: i32) -> DynamicMessage {
        let pool = DescriptorPool::global();
        let descriptor = pool
            .get_message_by_name("google.protobuf.Timestamp")
            .expect("the global pool holds the well-known types");
        let mut message = DynamicMessage::new(descriptor);
        message.set_field_by_name("seconds", ProtoValue::I64(seconds));
        message.set_field_by_name("nanos", ProtoValue::I32(nanos));
        message
    }

    #[test]
    fn a_timestamp_is_read_in_milliseconds_rounded_up() {
        assert_eq!(millis_of(&timestamp(1, 0)), Some(1000));
        assert_eq!(millis_of(&timestamp(1, 1)), Some(1001));
        assert_eq!(millis_of(&timestamp(1, 999_999_999)), Some(2000));
        assert_eq!(millis_of(&timestamp(-1, 0)), Some(-1000));
    }

    #[test]
    fn a_timestamp_out_of_its_range_is_refused() {
        assert_eq!(millis_of(&timestamp(i64::MAX, 0)), None);
        assert_eq!(millis_of(&timestamp(0, -1)), None);
        assert_eq!(millis_of(&timestamp(0, 1_000_000_000)), None);
    }
}
