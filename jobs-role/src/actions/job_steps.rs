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
use workflow::CompiledWorkflow;
use workflow::compile::decode_json;
use workflow::runner::list_length;
use workflow::scope::Scope;

use super::JobsState;
use crate::status::JobStatus;
use crate::store::{StoreError, outstanding_steps};

/// The steps of the job in `row` (its columns, snake_case; `events` its events as
/// `get-job` shows them), or `None` when its workflow snapshot no longer compiles
/// (the row itself says what it can).
pub(super) async fn step_views(
    state: &JobsState,
    job_id: Uuid,
    row: &Value,
    events: &[Value],
) -> Result<Option<Value>, StoreError> {
    let digest = row["definition_digest"].as_str().unwrap_or_default();
    let Some(compiled) = job_workflow(state, job_id, digest).await? else {
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
    // Element counts, for map steps without a checkpoint (a done one's are in it);
    // list lengths, for those whose dependencies are done: read from their root alone
    // (the input, or one step's response), off the async threads.
    let is_done = |name: &str| entries.contains_key(name);
    let unfinished: Vec<&workflow::CompiledStep> = compiled
        .steps
        .iter()
        .filter(|s| s.map.is_some() && !is_done(&s.name))
        .collect();
    let counts: HashMap<String, (i64, i64)> = if unfinished.is_empty() {
        HashMap::new()
    } else {
        state
            .store
            .job_item_counts(job_id)
            .await?
            .into_iter()
            .map(|(step, done, failed)| (step, (done, failed)))
            .collect()
    };
    let ready: Vec<String> = unfinished
        .iter()
        .filter(|s| s.after.iter().all(|&d| is_done(&compiled.steps[d].name)))
        .map(|s| s.name.clone())
        .collect();
    let totals: HashMap<String, usize> = if ready.is_empty() {
        HashMap::new()
    } else {
        let (compiled, row) = (compiled.clone(), row.clone());
        tokio::task::spawn_blocking(move || {
            ready
                .into_iter()
                .filter_map(|name| {
                    let total = map_total(&compiled, &name, &row)?;
                    Some((name, total))
                })
                .collect()
        })
        .await
        .unwrap_or_default()
    };
    // The latest timing of each step (a re-run's replaces the first run's).
    let timings: HashMap<&str, &Value> = events
        .iter()
        .filter(|e| e["type"] == "STEP_CHECKPOINT")
        .filter_map(|e| Some((e["step"].as_str()?, e["detail"].get("timing")?)))
        .collect();
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
                totals.get(&step.name).copied(),
                state_name,
            );
        }
        views.push(view);
    }
    Ok(Some(Value::Array(views)))
}

/// A map step's `{done, failed, inFlight, total}`: from its checkpoint once it is done,
/// else from its stored elements and (when its list could be read) its list's length.
fn map_counts(
    step: &workflow::CompiledStep,
    max_parallel: usize,
    entry: Option<&&Value>,
    counts: &HashMap<String, (i64, i64)>,
    total: Option<usize>,
    state_name: &str,
) -> Value {
    if let Some(entry) = entry {
        let done = entry["response"]["items"].as_array().map_or(0, Vec::len);
        let failed = entry["response"]["failed"].as_array().map_or(0, Vec::len);
        return json!({ "done": done, "failed": failed, "inFlight": 0, "total": done + failed });
    }
    let (done, failed) = counts.get(&step.name).copied().unwrap_or((0, 0));
    let in_flight = match (state_name, total) {
        ("running", Some(total)) => {
            let left = (total as i64 - done - failed).max(0);
            left.min(max_parallel as i64)
        }
        _ => 0,
    };
    json!({ "done": done, "failed": failed, "inFlight": in_flight, "total": total })
}

/// The length of the list map step `name` fans out over, read from its root alone:
/// the job's input, or one done step's response (a done map step's list length);
/// `None` when it cannot be read.
fn map_total(compiled: &CompiledWorkflow, name: &str, row: &Value) -> Option<usize> {
    let step = compiled.step(name)?;
    let map = step.map.as_ref()?;
    let input = decode_json(&compiled.input_type, &row["input"]).ok()?;
    let mut scope = Scope::new(input);
    if map.root != workflow::scope::INPUT {
        let root = compiled.step(&map.root)?;
        let entry = row["checkpoints"]
            .as_array()?
            .iter()
            .find(|e| e["name"] == map.root.as_str())?;
        if root.map.is_some() {
            // Over a whole earlier map step: its list's length.
            return entry["response"]["items"].as_array().map(Vec::len);
        }
        if entry["skipped"] == true {
            scope.insert_skipped(
                &map.root,
                prost_reflect::DynamicMessage::new(root.output_type()),
            );
        } else {
            let response = decode_json(&root.output_type(), &entry["response"]).ok()?;
            scope.insert_step(&map.root, response);
        }
    }
    list_length(step, &scope)
}

/// The compiled workflow of job `job_id`, whose row names its snapshot by `digest`:
/// from the node's cache by the digest, or the snapshot read (alone, not the row) and
/// compiled off the async threads on a miss, remembered under the row's digest;
/// `None` when the job is gone or its snapshot no longer compiles.
pub(super) async fn job_workflow(
    state: &JobsState,
    job_id: Uuid,
    digest: &str,
) -> Result<Option<std::sync::Arc<CompiledWorkflow>>, StoreError> {
    let cache = state.submitter.compiled();
    if let Some(hit) = cache.get_by_digest(digest) {
        return Ok(Some(hit));
    }
    let Some((definition, stored_digest)) = state.store.job_snapshot(job_id).await? else {
        return Ok(None);
    };
    Ok(match cache.get_or_compile_off_thread(&definition).await {
        Ok(compiled) => {
            cache.remember_digest(&compiled.digest, &stored_digest);
            Some(compiled.workflow)
        }
        Err(_) => None,
    })
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
