//! The `steps` of `get-job`: each step of the job's workflow, in declaration order,
//! with what it waits for, where it stands, when its first call started and how long
//! until its checkpoint (from its latest STEP_CHECKPOINT event's `detail.timing`, so
//! known while the job's events are kept), and for a map step its counts. Drawn by
//! the console's job page (the graph and the timeline).
//!
//! | state     | when                                                              |
//! |-----------|-------------------------------------------------------------------|
//! | `done`    | its checkpoint is stored                                          |
//! | `skipped` | its checkpoint is stored, skipped by its gate                     |
//! | `waiting` | an external step the job is parked on                             |
//! | `failed`  | the step the error of a FAILED or DEAD job names                  |
//! | `running` | the job is RUNNING and every step it waits for is done            |
//! | `pending` | otherwise                                                         |

use std::collections::HashMap;

use serde_json::{Value, json};
use uuid::Uuid;
use workflow::compile::decode_json;
use workflow::runner::list_length;
use workflow::scope::Scope;
use workflow::{CompiledWorkflow, replay_checkpoints};

use super::JobsState;
use crate::status::JobStatus;
use crate::store::{StoreError, outstanding_steps};

/// The steps of the job in `row` (its columns, snake_case), or `None` when its
/// workflow snapshot no longer compiles or its checkpoints no longer replay (the row
/// itself says what it can).
pub(super) async fn step_views(
    state: &JobsState,
    job_id: Uuid,
    row: &Value,
    events: &[Value],
) -> Result<Option<Value>, StoreError> {
    let Some(compiled) = compiled_workflow(state, job_id, row).await? else {
        return Ok(None);
    };
    let Ok(prior) = replay_checkpoints(&compiled, &row["checkpoints"]) else {
        return Ok(None);
    };
    let status: Option<JobStatus> = row["status"].as_str().and_then(|s| s.parse().ok());
    let entries: HashMap<&str, &Value> = row["checkpoints"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .filter_map(|e| Some((e["name"].as_str()?, e)))
                .collect()
        })
        .unwrap_or_default();
    let waiting = match status {
        Some(JobStatus::Waiting) => outstanding_steps(
            row["outstanding_step"].as_str().map(str::to_owned),
            serde_json::from_value(row["outstanding_steps"].clone()).ok(),
        ),
        _ => Vec::new(),
    };
    let failed = match status {
        Some(JobStatus::Failed | JobStatus::Dead) => row["error"].as_str().and_then(named_step),
        _ => None,
    };
    // The map steps' element counts, and the scope their lists are read from.
    let counts: HashMap<String, (i64, i64)> = if compiled.steps.iter().any(|s| s.map.is_some()) {
        state
            .store
            .job_item_counts(job_id)
            .await?
            .into_iter()
            .map(|(step, done, failed)| (step, (done, failed)))
            .collect()
    } else {
        HashMap::new()
    };
    let mut scope = decode_json(&compiled.input_type, &row["input"])
        .ok()
        .map(Scope::new);
    if let Some(scope) = &mut scope {
        for replayed in prior {
            replayed.into_scope(scope);
        }
    }
    // The latest timing of each step (a re-run's replaces the first run's).
    let timings: HashMap<&str, &Value> = events
        .iter()
        .filter(|e| e["type"] == "STEP_CHECKPOINT")
        .filter_map(|e| Some((e["step"].as_str()?, e["detail"].get("timing")?)))
        .collect();
    let is_done = |name: &str| entries.contains_key(name);
    let mut views = Vec::with_capacity(compiled.steps.len());
    for step in &compiled.steps {
        let entry = entries.get(step.name.as_str());
        let ready = step.after.iter().all(|&d| is_done(&compiled.steps[d].name));
        let state_name = match entry {
            Some(entry) if entry["skipped"] == true => "skipped",
            Some(_) => "done",
            None if waiting.contains(&step.name) => "waiting",
            None if failed.as_deref() == Some(step.name.as_str()) => "failed",
            None if ready && status == Some(JobStatus::Running) => "running",
            None => "pending",
        };
        let mut view = json!({
            "name": step.name,
            "after": step.after.iter().map(|&d| compiled.steps[d].name.as_str()).collect::<Vec<_>>(),
            "state": state_name,
        });
        if let (Some(_), Some(timing)) = (entry, timings.get(step.name.as_str())) {
            for key in ["startedAt", "tookMs"] {
                if let Some(value) = timing.get(key) {
                    view[key] = value.clone();
                }
            }
        }
        if let Some(map) = &step.map {
            view["map"] = map_counts(
                step,
                map.max_parallel,
                entry,
                &counts,
                scope.as_ref(),
                state_name,
            );
        }
        views.push(view);
    }
    Ok(Some(Value::Array(views)))
}

/// A map step's `{done, failed, inFlight, total}`: from its checkpoint once it is done,
/// else from its stored elements and (when its list can be read) its list's length.
fn map_counts(
    step: &workflow::CompiledStep,
    max_parallel: usize,
    entry: Option<&&Value>,
    counts: &HashMap<String, (i64, i64)>,
    scope: Option<&Scope>,
    state_name: &str,
) -> Value {
    if let Some(entry) = entry {
        let done = entry["response"]["items"].as_array().map_or(0, Vec::len);
        let failed = entry["response"]["failed"].as_array().map_or(0, Vec::len);
        return json!({ "done": done, "failed": failed, "inFlight": 0, "total": done + failed });
    }
    let (done, failed) = counts.get(&step.name).copied().unwrap_or((0, 0));
    let total = scope.and_then(|scope| list_length(step, scope));
    let in_flight = match (state_name, total) {
        ("running", Some(total)) => {
            let left = (total as i64 - done - failed).max(0);
            left.min(max_parallel as i64)
        }
        _ => 0,
    };
    json!({ "done": done, "failed": failed, "inFlight": in_flight, "total": total })
}

/// The compiled workflow of the job in `row`: from the node's cache by its digest, or
/// its snapshot read and compiled (off the async threads) on a miss; `None` when it no
/// longer compiles.
async fn compiled_workflow(
    state: &JobsState,
    job_id: Uuid,
    row: &Value,
) -> Result<Option<std::sync::Arc<CompiledWorkflow>>, StoreError> {
    let cache = state.submitter.compiled();
    if let Some(hit) = row["definition_digest"]
        .as_str()
        .and_then(|digest| cache.get_by_digest(digest))
    {
        return Ok(Some(hit));
    }
    let definition = match row.get("workflow_definition") {
        Some(definition) if !definition.is_null() => definition.clone(),
        _ => match state.store.get_job(job_id).await? {
            Some(full) => full["workflow_definition"].clone(),
            None => return Ok(None),
        },
    };
    Ok(cache
        .get_or_compile_off_thread(&definition)
        .await
        .ok()
        .map(|compiled| compiled.workflow))
}

/// The step an error names: `KIND: step 'name': ...`.
fn named_step(error: &str) -> Option<String> {
    let (_, rest) = error.split_once(": step '")?;
    let (name, _) = rest.split_once('\'')?;
    Some(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::named_step;

    #[test]
    fn an_error_names_its_step() {
        assert_eq!(
            named_step("GRPC: step 'each': element 5 of 12 failed").as_deref(),
            Some("each")
        );
        assert_eq!(named_step("RELEASED: released 3 times"), None);
    }
}
