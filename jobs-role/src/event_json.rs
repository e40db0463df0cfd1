//! A job's events as clients read them: the `WorkflowRunEvent` payload of an outbox row
//! in proto3 JSON (the SSE stream, `get-job include:["events"]`).

use prost_reflect::DynamicMessage;

/// A `WorkflowRunEvent` payload in proto3 JSON.
pub fn event_json(payload: &[u8]) -> Result<serde_json::Value, String> {
    let descriptor = jobs_proto::DESCRIPTOR_POOL
        .get_message_by_name("protomolt.jobs.v1.WorkflowRunEvent")
        .ok_or("the contract has no WorkflowRunEvent")?;
    let message = DynamicMessage::decode(descriptor, payload).map_err(|e| e.to_string())?;
    serde_json::to_value(&message).map_err(|e| e.to_string())
}
