//! Answers to parked (WAITING) steps, decided under the row lock.

use super::*;

/// The answer to a parked step.
#[derive(Debug, Clone)]
pub enum ParkedAnswer {
    /// Append this checkpoint entry and requeue.
    Accept {
        /// The checkpoint (`{name, skipped: false, response}`).
        checkpoint: Value,
    },
    /// The response broke its step's rules: the job fails with this verdict.
    Reject {
        /// The error, prefixed with its kind.
        error: String,
        /// The violations.
        verdict: String,
    },
}

/// What `complete_parked_step` decided, atomically under the row lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParkedCompletion {
    /// The answer was applied: the job is QUEUED again (or FAILED on a rejection, or
    /// still WAITING on other steps when the answer lets nothing run yet).
    Completed {
        /// The status after.
        status: JobStatus,
    },
    /// The step was answered before: nothing was appended.
    AlreadyDone {
        /// The job's current status.
        status: JobStatus,
    },
    /// The job is not parked on that step.
    WrongState {
        /// The job's current status.
        status: JobStatus,
        /// The steps it is parked on, if any (the first is `outstandingStep`).
        outstanding_steps: Vec<String>,
    },
    /// No such job.
    NotFound,
}

impl Store {
    /// Answers a parked step under the row lock: the gate runs again here, so racing
    /// callers get one `Completed` and the rest `AlreadyDone` or `WrongState`.
    /// `workflow` is the job's own: when the job waits on other steps too (parallel
    /// branches), an accepted answer requeues it only if it lets some step run;
    /// otherwise the job stays WAITING on the others.
    pub async fn complete_parked_step(
        &self,
        job_id: Uuid,
        step_name: &str,
        answer: &ParkedAnswer,
        workflow: &workflow::CompiledWorkflow,
    ) -> Result<ParkedCompletion, StoreError> {
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        let decided = answer_parked_step(&tx, job_id, step_name, answer, workflow, false).await?;
        if matches!(decided, ParkedCompletion::Completed { .. }) {
            tx.commit().await?;
        }
        Ok(decided)
    }
}

/// [`Store::complete_parked_step`] inside `tx` (the row locked there, kept until
/// `tx` ends; nothing is written unless it answers `Completed`): `send-event`
/// answers many jobs in one transaction. With `hold` an accepted answer keeps the job
/// WAITING on its other steps (another answer in the same transaction follows).
pub(super) async fn answer_parked_step(
    tx: &Transaction<'_>,
    job_id: Uuid,
    step_name: &str,
    answer: &ParkedAnswer,
    workflow: &workflow::CompiledWorkflow,
    hold: bool,
) -> Result<ParkedCompletion, StoreError> {
    let Some(row) = tx.query_opt(sql::LOCK_JOB, &[&job_id]).await? else {
        return Ok(ParkedCompletion::NotFound);
    };
    let status: JobStatus = row.get::<_, String>("status").parse()?;
    let outstanding = outstanding_steps(row.get("outstanding_step"), row.get("outstanding_steps"));
    let checkpoints: Value = row.get("checkpoints");
    let answered = has_checkpoint(&checkpoints, step_name);
    if status != JobStatus::Waiting || !outstanding.iter().any(|s| s == step_name) {
        return Ok(if answered {
            ParkedCompletion::AlreadyDone { status }
        } else {
            ParkedCompletion::WrongState {
                status,
                outstanding_steps: outstanding,
            }
        });
    }
    let still_waiting: Vec<String> = outstanding.into_iter().filter(|s| s != step_name).collect();
    let waits: Option<Value> = row.get("waits");
    let remaining_waits = Value::Array(
        waits
            .as_ref()
            .and_then(Value::as_array)
            .map(|all| {
                all.iter()
                    .filter(|w| w["step"] != step_name)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default(),
    );
    // The answer lets something run when a step other than those still waited
    // for can start with it done (its gate decided by the worker).
    let done = |name: &str| name == step_name || has_checkpoint(&checkpoints, name);
    let resumes = still_waiting.is_empty()
        || (!hold
            && workflow
                .ready_steps(&done)
                .any(|step| !still_waiting.contains(&step.name)));
    let workflow_name: String = row.get("workflow_name");
    let attempt: i32 = row.get("attempt");
    let metadata: Option<Value> = row.get("metadata");
    // The answered step's STEP_CHECKPOINT event, the job `status` after it.
    let checkpointed = |status| EventFacts {
        job_id,
        workflow_name: &workflow_name,
        kind: Type::StepCheckpoint,
        step: Some(step_name),
        attempt,
        verdict: None,
        error: None,
        status,
        detail: &[],
        data: None,
        waiting_on: None,
        metadata: metadata.as_ref(),
    };
    let status = match answer {
        ParkedAnswer::Accept { checkpoint } if !resumes => {
            tx.execute(
                sql::ANSWER_ONE_PARKED_STEP,
                &[&job_id, checkpoint, &still_waiting, &remaining_waits],
            )
            .await?;
            insert_event(tx, &checkpointed(JobStatus::Waiting)).await?;
            JobStatus::Waiting
        }
        ParkedAnswer::Accept { checkpoint } => {
            tx.execute(
                sql::ACCEPT_PARKED_STEP,
                &[&job_id, checkpoint, &remaining_waits],
            )
            .await?;
            insert_event(tx, &checkpointed(JobStatus::Queued)).await?;
            tx.execute(sql::NOTIFY_QUEUED, &[&job_id.to_string()])
                .await?;
            JobStatus::Queued
        }
        ParkedAnswer::Reject { error, verdict } => {
            let (error, verdict) = (&printable(error), &printable(verdict));
            tx.execute(sql::REJECT_PARKED_STEP, &[&job_id, error, verdict])
                .await?;
            let event = EventFacts {
                job_id,
                workflow_name: &workflow_name,
                kind: Type::Failed,
                step: Some(step_name),
                attempt,
                verdict: Some(verdict),
                error: Some(error),
                status: JobStatus::Failed,
                detail: &[],
                data: None,
                waiting_on: None,
                metadata: metadata.as_ref(),
            };
            insert_event(tx, &event).await?;
            JobStatus::Failed
        }
    };
    Ok(ParkedCompletion::Completed { status })
}

/// The steps a job is parked on: V22's list, or (a row parked before it) its one
/// `outstanding_step`.
pub fn outstanding_steps(first: Option<String>, all: Option<Vec<String>>) -> Vec<String> {
    match all {
        Some(all) if !all.is_empty() => all,
        _ => first.into_iter().collect(),
    }
}

/// True when `checkpoints` (a job's stored array) holds an entry of step `step`:
/// found by name, since parallel branches end in any order.
pub fn has_checkpoint(checkpoints: &Value, step: &str) -> bool {
    checkpoints
        .as_array()
        .is_some_and(|entries| entries.iter().any(|entry| entry["name"] == step))
}

/// What a sweep of timed-out parked steps did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimedOut {
    /// Jobs FAILED (`onTimeout: "fail"`, the default).
    pub failed: usize,
    /// Jobs DEAD (`onTimeout: "dead"`).
    pub dead: usize,
}

impl Store {
    /// Wakes WAITING jobs whose first wait to end is a sleep that has ended (a
    /// sleep beside other waits: a job whose every wait is a sleep is QUEUED with
    /// `run_after` instead); answers how many. See [`sql::WAKE_PARKED_SLEEPS`].
    pub async fn wake_parked_sleeps(&self, batch: i64) -> Result<usize, StoreError> {
        self.requeue_parked(sql::WAKE_PARKED_SLEEPS, &[&batch])
            .await
    }

    /// Runs `statement` (an UPDATE that requeues parked jobs, answering their
    /// `job_id`s) and wakes the workers for each, in one transaction; answers how
    /// many it requeued.
    pub(super) async fn requeue_parked(
        &self,
        statement: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<usize, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let rows = tx.query(statement, params).await?;
        for row in &rows {
            let job_id: Uuid = row.get("job_id");
            tx.execute(sql::NOTIFY_QUEUED, &[&job_id.to_string()])
                .await?;
        }
        tx.commit().await?;
        Ok(rows.len())
    }

    /// Ends the WAITING jobs whose wait for their external step ran out, at most
    /// `batch` at once, each with its FAILED or DEAD event. A `complete-step` racing
    /// this is serialised on the row: whichever commits first decides, and the other
    /// finds the job no longer parked.
    pub async fn time_out_parked_steps(&self, batch: i64) -> Result<TimedOut, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let rows = tx.query(sql::TIME_OUT_PARKED_STEPS, &[&batch]).await?;
        let mut report = TimedOut::default();
        for row in &rows {
            let status: JobStatus = row.get::<_, String>("status").parse()?;
            let job_id: Uuid = row.get("job_id");
            let name: String = row.get("workflow_name");
            let (step, error): (String, String) = (row.get("step"), row.get("error"));
            let metadata: Option<Value> = row.get("metadata");
            let (kind, counted) = if status == JobStatus::Dead {
                (Type::Dead, &mut report.dead)
            } else {
                (Type::Failed, &mut report.failed)
            };
            // The event names the step whose wait ran out.
            let event = EventFacts {
                job_id,
                workflow_name: &name,
                kind,
                step: Some(&step),
                attempt: row.get("attempt"),
                verdict: None,
                error: Some(&error),
                status,
                detail: &[],
                data: None,
                waiting_on: None,
                metadata: metadata.as_ref(),
            };
            insert_event(&tx, &event).await?;
            *counted += 1;
        }
        tx.commit().await?;
        Ok(report)
    }
}
