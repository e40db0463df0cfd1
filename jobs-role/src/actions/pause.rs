//! `pause-workflow` and `resume-workflow` (scope `jobs:operate`): stop, and start
//! again, new claims of a workflow's jobs (`workflowName`) or of one concurrency
//! key's (`concurrencyKey`, as `get-job` names it) across the whole fleet. The pause
//! is a row in PostgreSQL that every claim reads (a name neither stored nor held by
//! any job answers `ok: false` and writes nothing, so a typo never pauses nothing), so it holds from the next claim on
//! every node; running segments finish and settle as usual, queued jobs stay QUEUED
//! (and a parked job that wakes queues behind the pause). Resuming wakes idle
//! workers.
//!
//! ```json
//! {"ok": true, "changed": true, "workflowName": "charge", "concurrencyKey": ""}
//! ```
//!
//! `list-workflows` shows a paused stored workflow's `paused` and `pausedReason`
//! ([`PausedNotes`]).

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};

use super::{JobsState, store_error};

/// What a pause or resume names: a workflow, or a key.
enum Target<'a> {
    Workflow(&'a str),
    Key(&'a str),
}

/// The request's `workflowName` or `concurrencyKey` (exactly one), checked.
fn target(request: &ActionRequest) -> Result<Target<'_>, ActionError> {
    let (name, key) = (request.str("workflowName"), request.str("concurrencyKey"));
    let refuse_hidden = |field: &str, text: &str| match workflow::compile::hidden_character(text) {
        Some(c) => Err(ActionError::invalid(format!(
            "{field}: holds U+{:04X}, a control or invisible formatting character: remove it",
            u32::from(c)
        ))),
        None => Ok(()),
    };
    match (name, key) {
        ("", "") => Err(ActionError::invalid(
            "workflowName: name the workflow to pause, or give concurrencyKey to pause one key",
        )),
        (name, "") => {
            refuse_hidden("workflowName", name)?;
            Ok(Target::Workflow(name))
        }
        ("", key) => {
            refuse_hidden("concurrencyKey", key)?;
            Ok(Target::Key(key))
        }
        _ => Err(ActionError::invalid(
            "concurrencyKey: give workflowName or concurrencyKey, not both",
        )),
    }
}

/// `pause-workflow`.
pub async fn pause(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let target = target(&request)?;
    let changed = match target {
        Target::Workflow(name) => {
            // A typo must not pause nothing silently: the name is stored, or has jobs.
            let known = state.submitter.stored_envelope(name).is_some()
                || state
                    .store
                    .workflow_has_jobs(name)
                    .await
                    .map_err(store_error)?;
            if !known {
                // As get-job answers an unknown id: nothing to act on, nothing written.
                return Ok(json!({ "ok": false, "changed": false, "workflowName": name,
                    "concurrencyKey": "",
                    "error": format!("no stored workflow and no job is named '{name}' (list-workflows and list-jobs show names)") }));
            }
            state
                .store
                .pause_workflow(name, request.str("reason"))
                .await
                .map_err(store_error)?
        }
        Target::Key(key) => known_key(state.store.set_key_paused(key, true).await, key)?,
    };
    Ok(answer(&target, changed))
}

/// `resume-workflow`.
pub async fn resume(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let target = target(&request)?;
    let changed = match target {
        Target::Workflow(name) => state
            .store
            .resume_workflow(name)
            .await
            .map_err(store_error)?,
        Target::Key(key) => known_key(state.store.set_key_paused(key, false).await, key)?,
    };
    Ok(answer(&target, changed))
}

/// A key no job ever held is a 400 naming it.
fn known_key(
    changed: Result<Option<bool>, crate::store::StoreError>,
    key: &str,
) -> Result<bool, ActionError> {
    changed.map_err(store_error)?.ok_or_else(|| {
        ActionError::invalid(format!(
            "concurrencyKey: no job ever held the key '{key}' (get-job and get-fleet show keys as <workflow>:<expression>=<value>)"
        ))
    })
}

fn answer(target: &Target<'_>, changed: bool) -> Value {
    let (name, key) = match target {
        Target::Workflow(name) => (*name, ""),
        Target::Key(key) => ("", *key),
    };
    json!({ "ok": true, "changed": changed, "workflowName": name, "concurrencyKey": key })
}

/// The jobs role's notes in `list-workflows`: `paused` and `pausedReason` of each
/// paused workflow.
pub struct PausedNotes(pub crate::store::Store);

impl registry_stub::WorkflowNotes for PausedNotes {
    fn notes(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = registry_stub::notes::Notes> + Send + '_>>
    {
        Box::pin(async move {
            match self.0.paused_workflows().await {
                Ok(paused) => paused
                    .into_iter()
                    .map(|p| {
                        let note =
                            json!({ "paused": true, "pausedReason": p.reason.unwrap_or_default() });
                        (p.workflow_name, note)
                    })
                    .collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "list-workflows: the paused workflows could not be read; listed without");
                    Default::default()
                }
            }
        })
    }
}
