//! Group commit: the fenced writes of many claims (checkpoints, settlements, a final
//! checkpoint with its settlement) in one transaction, so the cost of a commit is
//! shared by every job in the batch.
//!
//! Each write stays fenced on its own claim: a write whose fence matches nothing (its
//! claim was lost) is dropped from the batch and answered [`StoreError::LostClaim`],
//! and the rest commit. The statements of a batch go to PostgreSQL pipelined (sent
//! without waiting for each answer), in the order of the writes, so one job's events
//! keep their order. When PostgreSQL refuses a value (a value past a limit), the batch
//! is rolled back and committed again without the write whose statement failed first,
//! so only the refused one fails. Any other failure before `COMMIT` (a deadlock, a
//! write held on a row lock past `lock_timeout`, a lost connection) has each write
//! tried in a transaction of its own. A failed `COMMIT` cannot be split (whether it
//! landed is unknown), so every write of that batch hears [`StoreError::GroupCommit`],
//! a failure that may pass.

use futures_util::future::try_join_all;
use tokio_postgres::Statement;

use super::*;
use crate::store::writes::{ClaimWrite, Settlement};

/// One fenced statement of a write, with the events it commits, in order.
struct Part<'w> {
    statement: &'static str,
    extra: Vec<Box<dyn ToSql + Sync + Send + 'w>>,
    events: Vec<EventFacts<'w>>,
    /// Wakes idle workers on commit (a retry with no backoff).
    wake: bool,
}

/// The statements of one write, in order: its checkpoint, then its settlement; a
/// final checkpoint with a COMPLETED settlement is one statement (one row version).
fn parts(write: &ClaimWrite) -> Vec<Part<'_>> {
    let claim = &write.claim;
    let facts = |kind, step, verdict, error, status| EventFacts {
        job_id: claim.job_id,
        workflow_name: &claim.workflow_name,
        kind,
        step,
        attempt: claim.attempt,
        verdict,
        error,
        status,
        detail: &[],
        data: None,
    };
    let checkpointed = write.checkpoint.as_ref().map(|checkpoint| {
        facts(
            Type::StepCheckpoint,
            Some(checkpoint.step.as_str()),
            None,
            None,
            JobStatus::Running,
        )
    });
    let mut parts = Vec::with_capacity(2);
    if let (Some(checkpoint), Some(Settlement::Completed { result, verdict })) =
        (&write.checkpoint, &write.settlement)
    {
        let to = JobStatus::Completed;
        parts.push(Part {
            statement: sql::SETTLE_COMPLETED_WITH_CHECKPOINT,
            extra: vec![
                Box::new(result),
                Box::new(verdict),
                Box::new(&checkpoint.entry),
            ],
            events: checkpointed
                .into_iter()
                .chain([EventFacts {
                    data: Some(("result", result)),
                    ..facts(Type::Completed, None, Some(verdict), None, to)
                }])
                .collect(),
            wake: false,
        });
        return parts;
    }
    if let Some(checkpoint) = &write.checkpoint {
        // A checkpoint written with its settlement is refused with it when an operator
        // asked to cancel, so the write's first statement is the one that matches
        // nothing (a refused write, as a lost claim), never a later one.
        let statement = match write.settlement {
            Some(_) => sql::APPEND_CHECKPOINT_BEFORE_SETTLEMENT,
            None => sql::APPEND_CHECKPOINT,
        };
        parts.push(Part {
            statement,
            extra: vec![Box::new(&checkpoint.entry)],
            events: checkpointed.into_iter().collect(),
            wake: false,
        });
    }
    let Some(settlement) = &write.settlement else {
        return parts;
    };
    let to = settlement.status();
    parts.push(match settlement {
        Settlement::Completed { result, verdict } => Part {
            statement: sql::SETTLE_COMPLETED,
            extra: vec![Box::new(result), Box::new(verdict)],
            events: vec![EventFacts {
                data: Some(("result", result)),
                ..facts(Type::Completed, None, Some(verdict), None, to)
            }],
            wake: false,
        },
        Settlement::Waiting {
            step,
            request,
            timeout,
        } => Part {
            statement: sql::SETTLE_WAITING,
            extra: vec![
                Box::new(step),
                Box::new(timeout.map(|t| millis(t.after))),
                Box::new(timeout.map(|t| t.on_timeout.as_str())),
                Box::new(request),
            ],
            events: vec![EventFacts {
                data: request.as_ref().map(|request| ("pendingRequest", request)),
                ..facts(Type::Waiting, Some(step), None, None, to)
            }],
            wake: false,
        },
        Settlement::Failed { error, verdict } => Part {
            statement: sql::SETTLE_FAILED,
            extra: vec![Box::new(error), Box::new(verdict)],
            events: vec![facts(
                Type::Failed,
                None,
                verdict.as_deref(),
                Some(error),
                to,
            )],
            wake: false,
        },
        Settlement::Dead { error } => Part {
            statement: sql::SETTLE_DEAD,
            extra: vec![Box::new(error)],
            events: vec![facts(Type::Dead, None, None, Some(error), to)],
            wake: false,
        },
        Settlement::Retry { delay, error } => Part {
            statement: sql::SETTLE_RETRY,
            extra: vec![Box::new(millis(*delay)), Box::new(error)],
            events: Vec::new(),
            wake: delay.is_zero(),
        },
    });
    parts
}

impl Store {
    /// Commits the writes of many claims in one transaction and answers each: `Ok`,
    /// [`StoreError::LostClaim`] (dropped from the batch, nothing of it written), or the
    /// error that kept it from committing. The answers are in the order of `writes`.
    ///
    /// A value PostgreSQL refuses fails its own write only: the batch is rolled back,
    /// that write answered with the refusal, and the rest committed again without it
    /// (the first statement to fail names its write; the ones after it only say the
    /// transaction was aborted). Any other failure before `COMMIT` (a deadlock, a lock
    /// timeout, a lost connection) has each write tried alone.
    pub async fn commit_claim_writes(&self, writes: &[ClaimWrite]) -> Vec<Result<(), StoreError>> {
        let mut answers: Vec<Option<Result<(), StoreError>>> =
            (0..writes.len()).map(|_| None).collect();
        let mut pending: Vec<usize> = (0..writes.len()).collect();
        while !pending.is_empty() {
            let batch: Vec<&ClaimWrite> = pending.iter().map(|&i| &writes[i]).collect();
            match self.try_commit(&batch).await {
                Ok(committed) => {
                    for (&i, answer) in pending.iter().zip(committed) {
                        answers[i] = Some(answer);
                    }
                    break;
                }
                Err(BatchFailure::Refused { at, error }) if error.is_data_error() => {
                    let refused = pending.remove(at);
                    answers[refused] = Some(Err(error));
                }
                Err(failure) if pending.len() > 1 => {
                    tracing::debug!(writes = pending.len(), error = %failure.error(), "a batched write failed; committing each write alone");
                    for &i in &pending {
                        answers[i] = Some(match self.try_commit(&[&writes[i]]).await {
                            Ok(mut answer) => answer.pop().unwrap_or_else(|| {
                                Err(StoreError::GroupCommit("the write got no answer".into()))
                            }),
                            Err(failure) => Err(failure.into_error()),
                        });
                    }
                    break;
                }
                Err(failure) => {
                    for (&i, answer) in pending.iter().zip(failure.answers(pending.len())) {
                        answers[i] = Some(answer);
                    }
                    break;
                }
            }
        }
        answers
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|| {
                    Err(StoreError::GroupCommit("the write got no answer".into()))
                })
            })
            .collect()
    }

    async fn try_commit(
        &self,
        writes: &[&ClaimWrite],
    ) -> Result<Vec<Result<(), StoreError>>, BatchFailure> {
        let plans: Vec<Vec<Part<'_>>> = writes.iter().map(|write| parts(write)).collect();
        let mut client = batch_connection(&self.pool).await?;
        let tx = begin_batch(&mut client).await?;
        // A write blocked on a row lock (an operator's open transaction) must not hold
        // the node's every other write for ever: it fails the batch, which then commits
        // each write alone.
        tx.batch_execute(sql::BATCH_LOCK_TIMEOUT)
            .await
            .map_err(|e| BatchFailure::Rolledback(e.into()))?;
        let answers = self.run_batch(&tx, writes, &plans).await?;
        tx.commit()
            .await
            .map_err(|e| BatchFailure::Whole(e.into()))?;
        Ok(answers)
    }

    /// The statements of a batch inside its transaction: each write's fenced updates
    /// and then its events, one future per write, all of them pipelined on the one
    /// connection; then one wake-up for the relays and one per requeued job.
    async fn run_batch(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        writes: &[&ClaimWrite],
        plans: &[Vec<Part<'_>>],
    ) -> Result<Vec<Result<(), StoreError>>, BatchFailure> {
        // Prepared once per connection (the pool keeps them), so each statement is one
        // round trip, not a parse and an execute.
        let mut prepared: Vec<(&'static str, Statement)> = Vec::new();
        for text in plans
            .iter()
            .flatten()
            .map(|part| part.statement)
            .chain([sql::INSERT_EVENT])
        {
            if !prepared.iter().any(|(known, _)| *known == text) {
                prepared.push((text, tx.prepare_cached(text).await?));
            }
        }
        let statement = |text: &str| {
            prepared
                .iter()
                .find(|(known, _)| *known == text)
                .map(|(_, statement)| statement)
                .ok_or_else(|| StoreError::GroupCommit(format!("no prepared statement for {text}")))
        };
        let insert_event = statement(sql::INSERT_EVENT)?;

        let matched = try_join_all(writes.iter().zip(plans).enumerate().map(|(at, (write, plan))| async move {
            let claim = &write.claim;
            let written = async {
            for (index, part) in plan.iter().enumerate() {
                let mut params: Vec<&(dyn ToSql + Sync)> =
                    vec![&claim.job_id, &claim.owner, &claim.token];
                params.extend(
                    part.extra
                        .iter()
                        .map(|extra| extra.as_ref() as &(dyn ToSql + Sync)),
                );
                if tx.execute(statement(part.statement)?, &params).await? == 0 {
                    if index > 0 {
                        // Under the row lock the first update took, the same fence
                        // cannot stop matching; if it ever did, commit none of it.
                        return Err(StoreError::GroupCommit(format!(
                            "job {}: the fence matched a write's first statement and not a later one",
                            claim.job_id
                        )));
                    }
                    return Ok(false);
                }
            }
            for facts in plan.iter().flat_map(|part| &part.events) {
                let (event_id, payload) = events::encode(facts)?;
                tx.execute(
                    insert_event,
                    &[
                        &event_id,
                        &facts.job_id,
                        &events::type_name(facts.kind),
                        &payload,
                    ],
                )
                .await?;
            }
            Ok::<bool, StoreError>(true)
            };
            // The write whose statement failed first is the one PostgreSQL refused.
            written.await.map_err(|error| BatchFailure::Refused { at, error })
        }))
        .await?;

        let committed = || {
            writes
                .iter()
                .zip(plans)
                .zip(&matched)
                .filter(|(_, matched)| **matched)
        };
        if committed().any(|((_, plan), _)| plan.iter().any(|part| !part.events.is_empty())) {
            // Wakes idle relays when this transaction commits.
            let notify = tx.prepare_cached(sql::NOTIFY_OUTBOX).await?;
            tx.execute(&notify, &[]).await?;
        }
        for ((write, _), _) in
            committed().filter(|((_, plan), _)| plan.iter().any(|part| part.wake))
        {
            let notify = tx.prepare_cached(sql::NOTIFY_QUEUED).await?;
            tx.execute(&notify, &[&write.claim.job_id.to_string()])
                .await?;
        }
        Ok(writes
            .iter()
            .zip(&matched)
            .map(|(write, matched)| {
                if *matched {
                    Ok(())
                } else {
                    Err(write.claim.lost())
                }
            })
            .collect())
    }
}
