//! `complete-step {jobId, stepName, response, dryRun?}`: answers a parked external step.
//!
//! The gate runs twice by design: fail-fast here, then again under the row lock in the
//! store, so racing callers get the same answers. Here: the job must exist, the step
//! must be an external step of the job's workflow (400 otherwise), the job must be
//! WAITING on that step (one of its `outstandingSteps`), and the response must parse as the step's output
//! type (400 otherwise). With `validate`, a response breaking its rules fails the job
//! as a verdict. Redelivery answers `ALREADY_DONE` and appends nothing.
//!
//! | answer                                              | meaning                                 |
//! |-----------------------------------------------------|-----------------------------------------|
//! | `{ok: true, outcome: "COMPLETED", status: "QUEUED", resumes: true, message}` | accepted; the job resumes after the step (not a retry) |
//! | `{ok: true, outcome: "COMPLETED", status: "WAITING", resumes: false, message}` | accepted; the job still waits for its other external steps (parallel branches), none of which this answer lets run |
//! | `{ok: true, outcome: "ALREADY_DONE", status}`        | answered before; nothing appended       |
//! | `{ok: false, outcome: "WRONG_STATE", status, outstandingStep, error}` | not parked on that step |
//! | `{ok: false, outcome: "REJECTED", status: "FAILED", error, violations}` | the verdict          |
//! | `{ok: false, error: "no workflow run <id>"}`         | no such job                             |
//! | `{ok, outcome: "VALID" \| "INVALID", violations}`    | `dryRun`: checked as above, nothing written |

use std::sync::Arc;
use workflow::Completion;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;
use workflow::compile::{RULES_TIME_LIMIT, decode_json, encode_json};
use workflow::{Checkpoint, CompiledWorkflow};

use super::{JobsState, store_error};
use crate::status::JobStatus;
use crate::store::{ParkedAnswer, ParkedCompletion, has_checkpoint, nul_path, outstanding_steps};

/// The parked step a call names, once the fail-fast gate passed.
pub(super) struct ParkedStep {
    pub job_id: Uuid,
    /// The job's workflow, compiled from its own snapshot (through the node's cache).
    pub compiled: Arc<CompiledWorkflow>,
    /// The step's position in it.
    pub index: usize,
}

/// The gate `complete-step` and `reject-step` share, fail-fast before the store
/// decides again under the row lock: the job must exist (else the answer), the step
/// must be an external step of the job's own workflow (400 otherwise), and the job must
/// be WAITING on exactly that step (else the `ALREADY_DONE` or `WRONG_STATE` answer).
pub(super) async fn parked_step(
    state: &JobsState,
    request: &ActionRequest,
) -> Result<Result<ParkedStep, Value>, ActionError> {
    let job_id = Uuid::parse_str(request.str("jobId"))
        .map_err(|e| ActionError::invalid(format!("jobId: {e}")))?;
    let step_name = request.str("stepName");
    let Some(job) = state.store.get_job(job_id).await.map_err(store_error)? else {
        return Ok(Err(
            json!({ "ok": false, "error": format!("no workflow run {job_id}") }),
        ));
    };
    let (compiled, at) = super::job_step(state, &job, "stepName", step_name).await?;
    let step = &compiled.steps[at];
    match step.completion {
        Completion::External => {}
        Completion::Call => {
            return Err(ActionError::invalid(format!(
                "stepName: step '{step_name}' is called by the engine, not completed externally"
            )));
        }
        Completion::Event => {
            return Err(ActionError::invalid(format!(
                "stepName: step '{step_name}' waits for an event, not an answer: send it with send-event on the job's key"
            )));
        }
        Completion::Sleep => {
            return Err(ActionError::invalid(format!(
                "stepName: step '{step_name}' is a sleep: it ends by itself when its time comes"
            )));
        }
        Completion::Child => {
            return Err(ActionError::invalid(format!(
                "stepName: step '{step_name}' starts a child workflow: it ends when its child jobs end (cancel or retry those)"
            )));
        }
    }

    let status: JobStatus = job["status"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .map_err(ActionError::internal)?;
    let outstanding = outstanding_steps(
        job["outstanding_step"].as_str().map(str::to_owned),
        serde_json::from_value(job["outstanding_steps"].clone()).ok(),
    );
    let answered = has_checkpoint(&job["checkpoints"], step_name);
    if status != JobStatus::Waiting || !outstanding.iter().any(|s| s == step_name) {
        let decided = if answered {
            ParkedCompletion::AlreadyDone { status }
        } else {
            ParkedCompletion::WrongState {
                status,
                outstanding_steps: outstanding,
            }
        };
        return Ok(Err(answer(decided, step_name, None)));
    }
    let index = step.index;
    Ok(Ok(ParkedStep {
        job_id,
        compiled,
        index,
    }))
}

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let ParkedStep {
        job_id,
        compiled,
        index,
    } = match parked_step(&state, &request).await? {
        Ok(parked) => parked,
        Err(answered) => return Ok(answered),
    };
    let step_name = request.str("stepName");
    // The gate found the step at this position of this workflow.
    let step = &compiled.steps[index];

    let supplied = request
        .get("response")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(path) = nul_path(&supplied, "response") {
        return Err(ActionError::invalid(format!(
            "{path}: holds a NUL character (\\u0000), which PostgreSQL cannot store; remove it"
        )));
    }
    let response = decode_json(&step.output_type(), &supplied)
        .map_err(|e| ActionError::invalid(e.located("response")))?;
    let violations = if step.validate {
        // Off the async threads and bounded in time: the rules are the workflow
        // author's CEL, the response the caller's data.
        compiled
            .violations_within(&response, RULES_TIME_LIMIT)
            .await
            .map_err(|e| ActionError::invalid(format!("response: {e}")))?
    } else {
        Vec::new()
    };
    if request.get("dryRun").and_then(Value::as_bool) == Some(true) {
        // A form checking an answer before sending it: what the real call would
        // decide about the answer, nothing written.
        if violations.is_empty() {
            encode_json(&response).map_err(|e| ActionError::invalid(format!("response: {e}")))?;
        }
        return Ok(json!({
            "ok": violations.is_empty(),
            "outcome": if violations.is_empty() { "VALID" } else { "INVALID" },
            "status": "WAITING",
            "violations": violations
                .iter()
                .map(|v| json!({ "field": v.field_path, "rule": v.rule_id, "message": v.message }))
                .collect::<Vec<_>>(),
        }));
    }
    let (decision, rejected) = if violations.is_empty() {
        let checkpoint = Checkpoint {
            name: step.name.clone(),
            skipped: false,
            response: Some(
                encode_json(&response)
                    .map_err(|e| ActionError::invalid(format!("response: {e}")))?,
            ),
        };
        (
            ParkedAnswer::Accept {
                checkpoint: checkpoint.to_json(),
            },
            None,
        )
    } else {
        let listed = violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        let error = format!(
            "VALIDATION: step '{step_name}': the supplied response breaks the rules of {}: {listed}",
            step.output_type().full_name()
        );
        (
            ParkedAnswer::Reject {
                error,
                verdict: listed,
            },
            Some(violations),
        )
    };
    let decided = state
        .store
        .complete_parked_step(job_id, step_name, &decision, &compiled)
        .await
        .map_err(store_error)?;
    let mut body = answer(decided, step_name, Some(&decision));
    if let (Some(violations), Some("REJECTED")) = (rejected, body["outcome"].as_str()) {
        body["violations"] = violations
            .iter()
            .map(|v| json!({ "field": v.field_path, "rule": v.rule_id, "message": v.message }))
            .collect();
    }
    Ok(body)
}

/// The answer to a decided parked step.
pub(super) fn answer(
    decided: ParkedCompletion,
    step_name: &str,
    decision: Option<&ParkedAnswer>,
) -> Value {
    match decided {
        ParkedCompletion::Completed {
            status: JobStatus::Failed,
        } => {
            let error = match decision {
                Some(ParkedAnswer::Reject { error, .. }) => error.clone(),
                _ => "the supplied response was rejected".to_owned(),
            };
            json!({ "ok": false, "outcome": "REJECTED", "status": "FAILED", "error": error })
        }
        ParkedCompletion::Completed {
            status: JobStatus::Waiting,
        } => json!({
            "ok": true,
            "outcome": "COMPLETED",
            "status": "WAITING",
            "resumes": false,
            "message": format!(
                "answer accepted: step '{step_name}' is done; the job still waits for its other external steps, and resumes once an answer lets a step run"
            ),
        }),
        ParkedCompletion::Completed { status } => json!({
            "ok": true,
            "outcome": "COMPLETED",
            "status": status.as_str(),
            "resumes": true,
            "message": format!(
                "answer accepted: the job resumes after step '{step_name}' ({status} until a worker picks it up; not a retry: the attempt given back while it waited is counted again)"
            ),
        }),
        ParkedCompletion::AlreadyDone { status } => {
            json!({ "ok": true, "outcome": "ALREADY_DONE", "status": status.as_str() })
        }
        ParkedCompletion::WrongState {
            status,
            outstanding_steps,
        } => json!({
            "ok": false,
            "outcome": "WRONG_STATE",
            "status": status.as_str(),
            "outstandingStep": outstanding_steps.first(),
            "outstandingSteps": outstanding_steps,
            "error": match outstanding_steps.as_slice() {
                [] => format!("the job is {status}, not WAITING on step '{step_name}'"),
                [parked] => format!("the job is {status} on step '{parked}', not on step '{step_name}'"),
                several => format!(
                    "the job is {status} on steps '{}', not on step '{step_name}'",
                    several.join("', '")
                ),
            },
        }),
        ParkedCompletion::NotFound => json!({ "ok": false, "error": "no workflow run" }),
    }
}
