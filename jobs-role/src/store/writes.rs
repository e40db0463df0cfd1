//! Writes after a claim: lease renewals, checkpoints, settlements and releases, each
//! fenced on `(job_id, lease_owner, claims)` while the row is RUNNING.

use super::*;

/// How a settle ends a claim.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement<'a> {
    /// COMPLETED with the output and the one-line verdict.
    Completed {
        /// proto3 JSON of the output.
        result: &'a Value,
        /// `N steps, output <type>`.
        verdict: &'a str,
    },
    /// WAITING on an external step.
    Waiting {
        /// The step.
        step: &'a str,
    },
    /// FAILED: a validation verdict or a non-retryable error.
    Failed {
        /// The error, prefixed with its kind.
        error: &'a str,
        /// The violations of a validation verdict.
        verdict: Option<&'a str>,
    },
    /// DEAD: retries exhausted.
    Dead {
        /// The last error, verbatim.
        error: &'a str,
    },
    /// QUEUED again after a retryable failure, claimable after `delay`.
    Retry {
        /// The backoff.
        delay: Duration,
        /// The error that caused it.
        error: &'a str,
    },
}

impl Settlement<'_> {
    fn status(&self) -> JobStatus {
        match self {
            Settlement::Completed { .. } => JobStatus::Completed,
            Settlement::Waiting { .. } => JobStatus::Waiting,
            Settlement::Failed { .. } => JobStatus::Failed,
            Settlement::Dead { .. } => JobStatus::Dead,
            Settlement::Retry { .. } => JobStatus::Queued,
        }
    }
}

impl Store {
    /// Runs one fenced write, with its event and wake-up, in one transaction.
    async fn fenced(
        &self,
        claim: &Claim,
        statement: &str,
        extra: &[&(dyn ToSql + Sync)],
        event: Option<EventFacts<'_>>,
        wake: bool,
    ) -> Result<(), StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&claim.job_id, &claim.owner, &claim.token];
        params.extend_from_slice(extra);
        if tx.execute(statement, &params).await? == 0 {
            tx.rollback().await?;
            return Err(StoreError::LostClaim {
                job_id: claim.job_id,
                attempt: claim.attempt,
            });
        }
        if let Some(event) = event {
            insert_event(&tx, &event).await?;
        }
        if wake {
            tx.execute(sql::NOTIFY_QUEUED, &[&claim.job_id.to_string()])
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Extends the lease of a running claim.
    pub async fn renew_lease(&self, claim: &Claim, lease: Duration) -> Result<(), StoreError> {
        self.fenced(claim, sql::RENEW_LEASE, &[&millis(lease)], None, false)
            .await
    }

    /// Appends one checkpoint with its STEP_CHECKPOINT event.
    pub async fn append_checkpoint(
        &self,
        claim: &Claim,
        step: &str,
        checkpoint: &Value,
    ) -> Result<(), StoreError> {
        let event = EventFacts {
            job_id: claim.job_id,
            workflow_name: &claim.workflow_name,
            kind: Type::StepCheckpoint,
            step: Some(step),
            attempt: claim.attempt,
            verdict: None,
            error: None,
            status: JobStatus::Running,
        };
        self.fenced(
            claim,
            sql::APPEND_CHECKPOINT,
            &[checkpoint],
            Some(event),
            false,
        )
        .await
    }

    /// Ends a claim: completed, parked, failed, dead, retried or released, each with
    /// its event (none for retries and releases: those are row changes, not commit
    /// points).
    pub async fn settle(
        &self,
        claim: &Claim,
        settlement: Settlement<'_>,
    ) -> Result<(), StoreError> {
        let to = settlement.status();
        if !JobStatus::Running.can_become(to) {
            return Err(StoreError::IllegalTransition {
                from: JobStatus::Running,
                to,
            });
        }
        let facts = |kind, step, verdict, error| EventFacts {
            job_id: claim.job_id,
            workflow_name: &claim.workflow_name,
            kind,
            step,
            attempt: claim.attempt,
            verdict,
            error,
            status: to,
        };
        match settlement {
            Settlement::Completed { result, verdict } => {
                let event = facts(Type::Completed, None, Some(verdict), None);
                self.fenced(
                    claim,
                    sql::SETTLE_COMPLETED,
                    &[result, &verdict],
                    Some(event),
                    false,
                )
                .await
            }
            Settlement::Waiting { step } => {
                let event = facts(Type::Waiting, Some(step), None, None);
                self.fenced(claim, sql::SETTLE_WAITING, &[&step], Some(event), false)
                    .await
            }
            // Errors and verdicts may quote a step target's own message: a NUL in them
            // must not make the settlement unstorable.
            Settlement::Failed { error, verdict } => {
                let (error, verdict) = (&printable(error), verdict.map(printable));
                let verdict = verdict.as_deref();
                let event = facts(Type::Failed, None, verdict, Some(error));
                self.fenced(
                    claim,
                    sql::SETTLE_FAILED,
                    &[&error, &verdict],
                    Some(event),
                    false,
                )
                .await
            }
            Settlement::Dead { error } => {
                let error = &printable(error);
                let event = facts(Type::Dead, None, None, Some(error));
                self.fenced(claim, sql::SETTLE_DEAD, &[&error], Some(event), false)
                    .await
            }
            Settlement::Retry { delay, error } => {
                let error = &printable(error);
                self.fenced(
                    claim,
                    sql::SETTLE_RETRY,
                    &[&millis(delay), &error],
                    None,
                    delay.is_zero(),
                )
                .await
            }
        }
    }

    /// Gives a claim back without spending its attempt (claimable again after
    /// `delay`), unless the job was given back `max_releases` times in a row without a
    /// checkpoint in between: then it lands DEAD (`RELEASED: ...`, naming `reason`)
    /// with its event. Decided on the row, under the fence. Returns the status after.
    pub async fn release_claim(
        &self,
        claim: &Claim,
        delay: Duration,
        max_releases: i32,
        reason: &str,
    ) -> Result<JobStatus, StoreError> {
        let reason = printable(reason);
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let Some(row) = tx
            .query_opt(
                sql::RELEASE_CLAIM,
                &[
                    &claim.job_id,
                    &claim.owner,
                    &claim.token,
                    &millis(delay),
                    &max_releases,
                    &reason,
                ],
            )
            .await?
        else {
            tx.rollback().await?;
            return Err(StoreError::LostClaim {
                job_id: claim.job_id,
                attempt: claim.attempt,
            });
        };
        let status: JobStatus = row.get::<_, String>("status").parse()?;
        if status == JobStatus::Dead {
            insert_dead_event(&tx, claim.job_id, &claim.workflow_name, &row).await?;
        } else if delay.is_zero() {
            tx.execute(sql::NOTIFY_QUEUED, &[&claim.job_id.to_string()])
                .await?;
        }
        tx.commit().await?;
        Ok(status)
    }
}
