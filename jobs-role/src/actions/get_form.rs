//! `get-form {jobId, stepName}` or `get-form {workflowName}`: the message a human fills
//! in, described for a generated form (see [`registry_stub::forms`]).
//!
//! With `jobId` and `stepName` it is the output type of that step of the job's own
//! workflow snapshot: what `complete-step` expects for it, whatever the stored workflow
//! has become since. With `workflowName` it is the input type of the stored workflow:
//! what `submit-workflow` expects.
//!
//! | answer                                                                  | meaning |
//! |-------------------------------------------------------------------------|---------|
//! | `{ok: true, messageType, validates, messageRules, fields, truncated}`   | the form |
//! | `{ok: false, error: "no workflow run <id>"}`                            | no such job |
//! | 400 naming `stepName` or `workflowName`                                 | no such step or stored workflow |
//!
//! `validates` tells whether the node checks the declared rules when the form is
//! sent: always for a workflow's input; for a step, when the step says `validate`
//! (an answer breaking them then fails the job, so the console checks first).

use std::sync::Arc;

use registry_stub::forms::describe_message;
use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{JobsState, store_error};

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    super::review::check_form(&request)?;
    let (message, validates) = match request.str("workflowName") {
        "" => {
            let job_id = Uuid::parse_str(request.str("jobId"))
                .map_err(|e| ActionError::invalid(format!("jobId: {e}")))?;
            let Some(job) = state.store.get_job(job_id).await.map_err(store_error)? else {
                return Ok(json!({ "ok": false, "error": format!("no workflow run {job_id}") }));
            };
            let step_name = request.str("stepName");
            let (compiled, at) = super::job_step(&state, &job, "stepName", step_name).await?;
            let step = &compiled.steps[at];
            (step.output_type(), step.validate)
        }
        name => {
            let Some(envelope) = state.submitter.stored_envelope(name) else {
                return Err(ActionError::invalid(format!(
                    "workflowName: {} (list-workflows names them)",
                    state.submitter.unknown_workflow(name)
                )));
            };
            let compiled = state
                .submitter
                .compiled()
                .get_or_compile_off_thread(&envelope)
                .await
                .map_err(|findings| {
                    ActionError::invalid(format!(
                        "workflowName: the stored workflow '{name}' does not compile: {findings}"
                    ))
                })?
                .workflow;
            (compiled.input_type.clone(), true)
        }
    };
    // Bounded, but up to a megabyte of walking a submitter's descriptors: off the
    // async threads.
    let mut form = tokio::task::spawn_blocking(move || describe_message(&message))
        .await
        .map_err(ActionError::internal)?;
    form["ok"] = json!(true);
    form["validates"] = json!(validates);
    Ok(form)
}
