//! `submit-workflow {workflow | workflowName, input, jobId?, maxAttempts?, priority?,
//! runAt? | delayMs?, dedupeKey?, dedupeMode?, dedupeWindowMs?}` →
//! `{ok, jobId, status, created, deduplicated?}` (`jobId` the job that stands for the
//! submission: another job of its dedupe key when `deduplicated` names the mode).

use std::sync::Arc;

use registry_stub::registry::findings_error;
use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{JobsState, store_error};
use crate::store::StoreError;
use crate::submit::{
    DefinitionSource, Start, Submission, SubmitError, Submitted, Submitter, dedupe_of, metadata_of,
};

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let source = match request.get("workflow") {
        Some(inline) => DefinitionSource::Inline(Arc::new(inline.clone())),
        None => DefinitionSource::Stored(request.str("workflowName").to_owned()),
    };
    let job_id = match request.str("jobId") {
        "" => None,
        // The request rule already checked it is a uuid.
        id => Some(Uuid::parse_str(id).map_err(|e| ActionError::invalid(format!("jobId: {e}")))?),
    };
    let start = Start::parse(
        request.str("runAt"),
        request.get("delayMs").and_then(Value::as_i64).unwrap_or(0),
    )
    .map_err(ActionError::invalid)?;
    let dedupe = dedupe_of(
        request.str("dedupeKey"),
        request.str("dedupeMode"),
        request
            .get("dedupeWindowMs")
            .and_then(Value::as_i64)
            .unwrap_or(0),
        start,
    )
    .map_err(ActionError::invalid)?;
    let submission = Submission {
        source,
        input: request.get("input").cloned().unwrap_or_else(|| json!({})),
        job_id,
        max_attempts: request
            .get("maxAttempts")
            .and_then(Value::as_i64)
            .and_then(|n| i32::try_from(n).ok()),
        start,
        dedupe,
        // The request rule already checked it is 0..=9.
        priority: request
            .get("priority")
            .and_then(Value::as_i64)
            .and_then(|p| i16::try_from(p).ok()),
        metadata: metadata_of(request.get("metadata")).map_err(ActionError::invalid)?,
    };
    match state.submitter.submit(submission).await {
        Ok(submitted) => {
            let mut answer = answered(&submitted);
            answer["ok"] = json!(true);
            Ok(answer)
        }
        Err(refused) => Err(submit_error(&state.submitter, refused)),
    }
}

/// What a submission's answer says of the job that stands for it: `jobId`,
/// `status`, `created`, and `deduplicated` (the mode) when another job of its dedupe
/// key stands for it.
pub fn answered(submitted: &Submitted) -> Value {
    let mut answer = json!({
        "jobId": submitted.stands_for.unwrap_or(submitted.job_id).to_string(),
        "status": submitted.status.as_str(),
        "created": submitted.created,
    });
    if submitted.stands_for.is_some() {
        answer["deduplicated"] = json!(submitted.dedupe_mode.unwrap_or_default());
    }
    answer
}

/// The answer to a refused submission: the field to fix, or the store's failure.
/// `submitter` names the closest stored workflow to an unknown name.
pub fn submit_error(submitter: &Submitter, error: SubmitError) -> ActionError {
    match error {
        SubmitError::UnknownWorkflow(name) => ActionError::invalid(format!(
            "workflowName: {} (list-workflows shows them)",
            submitter.unknown_workflow(&name)
        )),
        SubmitError::Findings(findings) => findings_error(&findings),
        SubmitError::Input(e) => ActionError::invalid(e.located("input")),
        unstorable @ SubmitError::Unstorable(_) => ActionError::invalid(unstorable.to_string()),
        key @ SubmitError::ConcurrencyKey(_) => ActionError::invalid(key.to_string()),
        SubmitError::Store(StoreError::Conflict(id)) => ActionError::invalid(format!(
            "jobId: job {id} already exists with a different workflow or input; use a new jobId"
        )),
        SubmitError::Store(pruned @ StoreError::Pruned(_)) => {
            ActionError::invalid(format!("jobId: {pruned}"))
        }
        SubmitError::Store(e) => store_error(e),
    }
}
