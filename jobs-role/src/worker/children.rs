//! Starting a parent's children before it parks on them: each child's row written
//! (fenced on the parent's claim, its id derived from its slot so none is made twice)
//! with the child's snapshot and the input the parent's rules built, checked against
//! the child's input rules as any submission is.

use std::sync::Arc;

use uuid::Uuid;
use workflow::CompiledWorkflow;
use workflow::compile::RULES_TIME_LIMIT;
use workflow::runner::WaitKind;

use super::Worker;
use crate::compiled::snapshot_digest;
use crate::store::{ClaimedJob, NewChild, NewJob, Settlement, StoreError};

/// The namespace of children's ids (UUID v5 of `<parent>/<step>/<element>/<re-runs>`).
const CHILD_IDS: Uuid = Uuid::from_u128(0x6d1c_33a0_5a8e_4c3f_9b1e_70c4_1d2f_0b33);

/// The id of the child answering element `item` of `parent`'s step `step` after
/// `reruns` operator re-runs of the step: the same slot always gets the same id, a
/// re-run a new one.
pub fn child_job_id(parent: Uuid, step: &str, item: usize, reruns: i32) -> Uuid {
    Uuid::new_v5(
        &CHILD_IDS,
        format!("{parent}/{step}/{item}/{reruns}").as_bytes(),
    )
}

impl Worker {
    /// Starts the children a park on child steps waits for. `Ok(Err(failed))` when an
    /// input the parent's rules built breaks the child's input rules: the parent
    /// fails so (a verdict on its step). `Err` when the claim was lost or the store
    /// failed.
    pub(super) async fn start_children(
        &self,
        job: &ClaimedJob,
        compiled: &CompiledWorkflow,
        settlement: &Settlement,
    ) -> Result<Result<(), Settlement>, StoreError> {
        let Settlement::Waiting {
            step, kind, others, ..
        } = settlement
        else {
            return Ok(Ok(()));
        };
        let waits = std::iter::once((step, kind)).chain(others.iter().map(|w| (&w.step, &w.kind)));
        for (name, kind) in waits {
            let WaitKind::Child { starts, .. } = kind else {
                continue;
            };
            let Some((step, child)) = compiled
                .step(name)
                .and_then(|step| Some((step, step.child.as_ref()?)))
            else {
                continue;
            };
            let reruns = job.step_reruns.get(step.index).copied().unwrap_or(0);
            let envelope = Arc::new(child.compiled.envelope().clone());
            let (digest, _) = snapshot_digest(&envelope);
            let mut children = Vec::with_capacity(starts.len());
            for (item, input) in starts {
                let parsed = match child
                    .compiled
                    .parse_input_within(input, RULES_TIME_LIMIT)
                    .await
                {
                    Ok(parsed) => parsed,
                    Err(refused) => {
                        let error = format!(
                            "VALIDATION: step '{name}': the input built for child workflow '{}' (element {item}): {}",
                            child.workflow,
                            refused.located("input")
                        );
                        return Ok(Err(Settlement::Failed {
                            error,
                            verdict: None,
                            step: Some(name.to_owned()),
                        }));
                    }
                };
                // A child holds its own workflow's concurrency keys, as any job does.
                let concurrency = match child
                    .compiled
                    .concurrency_keys_within(&parsed, RULES_TIME_LIMIT)
                    .await
                {
                    Ok(keys) => keys,
                    Err(why) => {
                        let error = format!(
                            "VALIDATION: step '{name}': child workflow '{}' (element {item}): {why}",
                            child.workflow
                        );
                        return Ok(Err(Settlement::Failed {
                            error,
                            verdict: None,
                            step: Some(name.to_owned()),
                        }));
                    }
                };
                children.push(NewChild {
                    job: NewJob {
                        job_id: child_job_id(job.claim.job_id, name, *item, reruns),
                        workflow_name: child.compiled.name.clone(),
                        definition: envelope.clone(),
                        definition_digest: Some(digest.clone()),
                        input: input.clone(),
                        // As the parent: a child is part of its parent's work.
                        max_attempts: job.max_attempts,
                        priority: job.priority,
                        run_after: Default::default(),
                        trace_context: job.trace_context.clone(),
                        by_name: false,
                        concurrency,
                        dedupe: None,
                        schedule: None,
                        // As the parent's: whoever routes or finds jobs by metadata
                        // (a tenant, an order) finds the children too.
                        metadata: job.claim.metadata.clone(),
                    },
                    item: i32::try_from(*item).unwrap_or(i32::MAX),
                });
            }
            self.store
                .start_children(&job.claim, name, &children)
                .await?;
        }
        Ok(Ok(()))
    }
}
