//! What an event sent to jobs answers (`send-event`, the signals topic, and a job
//! that parks on a key catching up on the events sent before): the payload parsed as
//! the waiting step's `outputType` and, with `validate: true`, checked against its
//! rules, becomes the step's checkpoint, naming the event's id. The store decides
//! which jobs wait and answers them ([`crate::store::Store::send_signal`],
//! [`crate::store::Store::take_kept_signals`]); this decides what one event means
//! for one step.

use std::sync::Arc;

use serde_json::Value;
use workflow::compile::{RULES_TIME_LIMIT, decode_json, encode_json};
use workflow::{Checkpoint, Completion};

use crate::compiled::CompiledCache;
use crate::store::Offer;

/// The largest event payload, in bytes of compact JSON: a kept event is a row, and
/// every job waiting on its key copies it into a checkpoint.
pub const MAX_EVENT_PAYLOAD_BYTES: usize = 1024 * 1024;

/// Why `payload` cannot be sent (too large), or `Ok`.
pub fn check_payload(payload: &Value) -> Result<(), String> {
    let bytes = serde_json::to_vec(payload).map_or(usize::MAX, |b| b.len());
    if bytes > MAX_EVENT_PAYLOAD_BYTES {
        return Err(format!(
            "{bytes} bytes of JSON is more than the {MAX_EVENT_PAYLOAD_BYTES} an event may carry: send a reference to the data instead"
        ));
    }
    Ok(())
}

/// The checkpoint that event `event_id` with `payload` makes of step `step` of the
/// job whose snapshot is `definition`, or why it makes none (the snapshot no longer
/// compiles, the step is not an event step, the payload is not its type or breaks
/// its rules).
pub async fn offer(
    compiled: &Arc<CompiledCache>,
    definition: &Value,
    step: &str,
    payload: &Value,
    event_id: &str,
) -> Offer {
    let workflow = compiled
        .get_or_compile_off_thread(definition)
        .await
        .map_err(|findings| format!("the job's stored workflow no longer compiles: {findings}"))?
        .workflow;
    let Some(waiting) = workflow
        .step(step)
        .filter(|s| s.completion == Completion::Event)
    else {
        return Err(format!(
            "step '{step}' of the job's workflow is not an event step"
        ));
    };
    let type_name = waiting.output_type().full_name().to_owned();
    let response = decode_json(&waiting.output_type(), payload)
        .map_err(|e| format!("the payload is not a {type_name}: {}", e.located("payload")))?;
    if waiting.validate {
        let violations = workflow
            .violations_within(&response, RULES_TIME_LIMIT)
            .await
            .map_err(|e| format!("the payload could not be checked: {e}"))?;
        if !violations.is_empty() {
            let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
            return Err(format!(
                "the payload breaks the rules of {type_name}: {}",
                listed.join("; ")
            ));
        }
    }
    let json = encode_json(&response)
        .map_err(|e| format!("the payload cannot be stored as a {type_name}: {e}"))?;
    let mut checkpoint = Checkpoint {
        name: step.to_owned(),
        skipped: false,
        response: Some(json),
    }
    .to_json();
    checkpoint["eventId"] = Value::String(event_id.to_owned());
    Ok((checkpoint, workflow))
}
