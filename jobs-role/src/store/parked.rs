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
    /// The answer was applied: the job is QUEUED again (or FAILED on a rejection).
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
        /// The step it is parked on, if any.
        outstanding_step: Option<String>,
    },
    /// No such job.
    NotFound,
}

impl Store {
    /// Answers a parked step under the row lock: the gate runs again here, so racing
    /// callers get one `Completed` and the rest `AlreadyDone` or `WrongState`.
    /// `step_index` is the step's position in the job's workflow.
    pub async fn complete_parked_step(
        &self,
        job_id: Uuid,
        step_name: &str,
        step_index: usize,
        answer: &ParkedAnswer,
    ) -> Result<ParkedCompletion, StoreError> {
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        let Some(row) = tx.query_opt(sql::LOCK_JOB, &[&job_id]).await? else {
            return Ok(ParkedCompletion::NotFound);
        };
        let status: JobStatus = row.get::<_, String>("status").parse()?;
        let outstanding: Option<String> = row.get("outstanding_step");
        let checkpoints: Value = row.get("checkpoints");
        let answered = checkpoints.as_array().is_some_and(|c| c.len() > step_index);
        if status != JobStatus::Waiting || outstanding.as_deref() != Some(step_name) {
            tx.rollback().await?;
            return Ok(if answered {
                ParkedCompletion::AlreadyDone { status }
            } else {
                ParkedCompletion::WrongState {
                    status,
                    outstanding_step: outstanding,
                }
            });
        }
        let workflow_name: String = row.get("workflow_name");
        let attempt: i32 = row.get("attempt");
        let status = match answer {
            ParkedAnswer::Accept { checkpoint } => {
                tx.execute(sql::ACCEPT_PARKED_STEP, &[&job_id, checkpoint])
                    .await?;
                let event = EventFacts {
                    job_id,
                    workflow_name: &workflow_name,
                    kind: Type::StepCheckpoint,
                    step: Some(step_name),
                    attempt,
                    verdict: None,
                    error: None,
                    status: JobStatus::Queued,
                    detail: &[],
                    data: None,
                };
                insert_event(&tx, &event).await?;
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
                };
                insert_event(&tx, &event).await?;
                JobStatus::Failed
            }
        };
        tx.commit().await?;
        Ok(ParkedCompletion::Completed { status })
    }
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
            };
            insert_event(&tx, &event).await?;
            *counted += 1;
        }
        tx.commit().await?;
        Ok(report)
    }
}
