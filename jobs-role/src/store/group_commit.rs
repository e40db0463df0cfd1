//! Group commit: the fenced writes of many claims (checkpoints, settlements, a final
//! checkpoint with its settlement) in one transaction, so the cost of a commit is
//! shared by every job in the batch.
//!
//! **Every write is safe to apply twice.** Each is fenced on its own claim (`RUNNING`
//! under the claim's owner and token); a checkpoint also on its position (the array
//! holds exactly the entries before it); a settlement moves the row out of RUNNING, so
//! a second one matches nothing; and a claim's events have ids derived from what they
//! mark ([`events::claim_event_id`]), so a second insert is a no-op. A write whose
//! fence matches nothing is dropped from the batch (nothing of it written) and read
//! back: if the row shows it already applied (its first sending landed) it is answered
//! `Ok`, else [`StoreError::LostClaim`].
//!
//! How a batch that does not commit ends:
//!
//! | what failed                                          | what happens                                   |
//! |------------------------------------------------------|------------------------------------------------|
//! | PostgreSQL refused a value (a size limit)            | rolled back; committed again without the write whose statement failed first, which alone fails |
//! | another statement error (a deadlock, a lock timeout) | rolled back; each write committed alone          |
//! | no connection, a connection lost before `COMMIT`     | rolled back; every write answered the error at once, fast (trying each alone would meet it once per write) |
//! | `COMMIT` sent, its answer lost                       | **read back**: each write is answered by what the row shows (landed, not landed, claim lost); only the ones that did not land are committed again, conditional as ever |
//!
//! The fenced updates of a batch go to PostgreSQL pipelined (sent without waiting for
//! each answer); the events of the writes they matched follow in one statement, in
//! the order of the writes, so one job's events keep their order.

use futures_util::future::try_join_all;
use tokio_postgres::Statement;

use super::completions::Completions;
use super::*;
use crate::store::writes::{ClaimWrite, ParkedWait, Settlement};

/// `detail.skipped` of a skipped step's checkpoint event.
static SKIPPED: Value = Value::Bool(true);

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
    if let Some(items) = &write.items {
        let positions: Vec<i32> = items.elements.iter().map(|(at, _)| *at).collect();
        let responses: Vec<Option<&Value>> = items
            .elements
            .iter()
            .map(|(_, outcome)| outcome.as_ref().ok())
            .collect();
        let errors: Vec<Option<&str>> = items
            .elements
            .iter()
            .map(|(_, outcome)| outcome.as_ref().err().map(String::as_str))
            .collect();
        return vec![Part {
            statement: sql::INSERT_ITEMS,
            extra: vec![
                Box::new(&items.step),
                Box::new(positions),
                Box::new(responses),
                Box::new(errors),
            ],
            events: Vec::new(),
            wake: false,
        }];
    }
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
        waiting_on: None,
        metadata: claim.metadata.as_ref(),
    };
    let checkpointed = write.checkpoint.as_ref().map(|checkpoint| EventFacts {
        // A step its gate skipped says so (`skipped: true`), so a consumer tells it
        // from one that answered; it was never called, so it has no timing.
        data: if checkpoint.entry["skipped"] == true {
            Some(("skipped", &SKIPPED))
        } else {
            write.timing.as_ref().map(|timing| ("timing", timing))
        },
        ..facts(
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
                Box::new(checkpoint.position),
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
            extra: vec![Box::new(&checkpoint.entry), Box::new(checkpoint.position)],
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
            kind,
            others,
            waiting_on,
            children_seen,
        } => {
            let first = ParkedWait {
                step: step.clone(),
                request: request.clone(),
                timeout: *timeout,
                kind: kind.clone(),
            };
            let waits = Value::Array(
                std::iter::once(&first)
                    .chain(others)
                    .map(ParkedWait::to_json)
                    .collect(),
            );
            let (statement, mut extra): (_, Vec<Box<dyn ToSql + Sync + Send>>) = match children_seen
            {
                Some(seen) => (sql::SETTLE_WAITING_ON_CHILDREN, vec![Box::new(*seen)]),
                None => (sql::SETTLE_WAITING, Vec::new()),
            };
            extra.insert(0, Box::new(waits));
            Part {
                statement,
                extra,
                events: vec![EventFacts {
                    data: request.as_ref().map(|request| ("pendingRequest", request)),
                    waiting_on: Some(waiting_on),
                    ..facts(Type::Waiting, Some(step), None, None, to)
                }],
                wake: false,
            }
        }
        Settlement::Sleeping { waits, waiting_on } => Part {
            statement: sql::SETTLE_SLEEPING,
            extra: vec![Box::new(Value::Array(
                waits.iter().map(ParkedWait::to_json).collect(),
            ))],
            events: vec![EventFacts {
                waiting_on: Some(waiting_on),
                ..facts(
                    Type::Waiting,
                    waits.first().map(|w| w.step.as_str()),
                    None,
                    None,
                    to,
                )
            }],
            // Claimable at its wake time: nothing for an idle worker now.
            wake: false,
        },
        Settlement::Failed {
            error,
            verdict,
            step,
        } => Part {
            statement: sql::SETTLE_FAILED,
            extra: vec![Box::new(error), Box::new(verdict)],
            events: vec![facts(
                Type::Failed,
                step.as_deref(),
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

/// The answer of a write that got none (a defect: every write is answered); it fails
/// safe, as a write that may not have committed.
fn no_answer() -> Result<(), StoreError> {
    Err(StoreError::GroupCommit("the write got no answer".into()))
}

/// How many times a batch whose `COMMIT` went unanswered is read back and its
/// unlanded writes sent again, before they are answered as failures that may pass.
const UNANSWERED_ROUNDS: usize = 3;

/// What a claim's row shows about one of its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Landing {
    /// The write is in the row (a checkpoint at its position, the settlement's status
    /// under the claim's token).
    Landed,
    /// The row is still RUNNING under the claim without it: it may be sent again.
    NotLanded,
    /// The row moved on without it (another claim, a sweep, deleted).
    Lost,
}

/// A claimed job's state as [`sql::CLAIM_WRITES_STATE`] reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RowState {
    status: String,
    lease_owner: Option<String>,
    claims: i32,
    checkpoints: Option<i32>,
}

/// Whether `write` is in `row` (see [`Landing`]).
fn landing(write: &ClaimWrite, row: Option<&RowState>) -> Landing {
    let Some(row) = row else {
        return Landing::Lost;
    };
    let claim = &write.claim;
    let held = row.status == JobStatus::Running.as_str()
        && row.lease_owner.as_deref() == Some(claim.owner.as_str())
        && row.claims == claim.token;
    if let Some(settlement) = &write.settlement {
        // A settlement leaves RUNNING: still held, it did not land (nor the checkpoint
        // committed with it); in its status under the same token, it did.
        return if held {
            Landing::NotLanded
        } else if row.claims == claim.token && row.status == settlement.status().as_str() {
            Landing::Landed
        } else {
            Landing::Lost
        };
    }
    if write.items.is_some() {
        // The row cannot say whether elements are stored: still held, they may be
        // sent again (an element already stored is kept as it is).
        return if held {
            Landing::NotLanded
        } else {
            Landing::Lost
        };
    }
    match &write.checkpoint {
        // Under one claim only that claim appends, each position once.
        Some(checkpoint) if held => {
            if row.checkpoints.is_some_and(|n| n > checkpoint.position) {
                Landing::Landed
            } else {
                Landing::NotLanded
            }
        }
        Some(_) => Landing::Lost,
        // A barrier writes nothing.
        None => Landing::Landed,
    }
}

impl Store {
    /// Commits the writes of many claims in one transaction and answers each: `Ok`
    /// (committed, or found already applied), [`StoreError::LostClaim`] (dropped from
    /// the batch, nothing of it written), or the error that kept it from committing.
    /// The answers are in the order of `writes`. See the module docs for how a batch
    /// that does not commit ends.
    pub async fn commit_claim_writes(&self, writes: &[ClaimWrite]) -> Vec<Result<(), StoreError>> {
        let everything: Vec<usize> = (0..writes.len()).collect();
        let mut answers = match self.commit_unsplit(writes, &everything).await {
            Err(failure) if writes.len() > 1 => {
                // A statement PostgreSQL failed (a deadlock, a lock timeout): each
                // write alone, so one job's trouble is its own.
                tracing::debug!(writes = writes.len(), error = %failure, "a batched write failed; committing each write alone");
                let mut answers = Vec::with_capacity(writes.len());
                for i in 0..writes.len() {
                    answers.push(match self.commit_unsplit(writes, &[i]).await {
                        Ok(mut answer) => answer.pop().unwrap_or_else(no_answer),
                        Err(failure) => Err(failure),
                    });
                }
                answers
            }
            Err(failure) => vec![Err(failure)],
            Ok(answers) => answers,
        };
        self.recognise_applied(writes, &mut answers).await;
        answers
    }

    /// Commits `which` of `writes` without splitting the batch: answers them in order,
    /// or returns the statement error that should split it (a failure of one
    /// statement, answered by PostgreSQL, before `COMMIT`).
    async fn commit_unsplit(
        &self,
        writes: &[ClaimWrite],
        which: &[usize],
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let mut answers: Vec<Option<Result<(), StoreError>>> =
            (0..which.len()).map(|_| None).collect();
        // Positions into `which` still to commit.
        let mut pending: Vec<usize> = (0..which.len()).collect();
        let mut unanswered_rounds = 0;
        // Completions are settled by one statement until it is refused a value: then
        // the batch is tried again with a statement per write, which names the one.
        let mut together = true;
        while !pending.is_empty() {
            let batch: Vec<&ClaimWrite> = pending.iter().map(|&p| &writes[which[p]]).collect();
            match self.try_commit(&batch, together).await {
                Ok(committed) => {
                    for (&p, answer) in pending.iter().zip(committed) {
                        answers[p] = Some(answer);
                    }
                    break;
                }
                Err(BatchFailure::Refused { at, error }) if error.is_data_error() => {
                    let refused = pending.remove(at);
                    answers[refused] = Some(Err(error));
                }
                Err(BatchFailure::Rolledback(error)) if together && error.is_data_error() => {
                    tracing::debug!(writes = batch.len(), %error, "a batched statement was refused a value; trying the batch a statement per write");
                    together = false;
                }
                Err(BatchFailure::Unanswered(error)) => {
                    unanswered_rounds += 1;
                    tracing::warn!(writes = batch.len(), %error, "a batch's COMMIT went unanswered; reading the rows back to see what landed");
                    let landings = match self.read_back(&batch).await {
                        Ok(landings) => landings,
                        Err(read) => {
                            let why = format!(
                                "the COMMIT of a batch went unanswered ({error}) and reading the rows back failed ({read}); whether it landed is unknown"
                            );
                            for &p in &pending {
                                answers[p] = Some(Err(StoreError::GroupCommit(why.clone())));
                            }
                            break;
                        }
                    };
                    let mut again = Vec::new();
                    for (&p, landing) in pending.iter().zip(landings) {
                        match landing {
                            Landing::Landed => answers[p] = Some(Ok(())),
                            Landing::Lost => answers[p] = Some(Err(writes[which[p]].claim.lost())),
                            Landing::NotLanded => again.push(p),
                        }
                    }
                    if unanswered_rounds >= UNANSWERED_ROUNDS {
                        for &p in &again {
                            answers[p] = Some(Err(StoreError::GroupCommit(format!(
                                "the COMMIT of a batch went unanswered {UNANSWERED_ROUNDS} times: {error}"
                            ))));
                        }
                        break;
                    }
                    pending = again;
                }
                // One statement failed there, the connection is fine: the caller may
                // split the batch.
                Err(BatchFailure::Refused { error, .. } | BatchFailure::Rolledback(error))
                    if which.len() > 1 && error.is_answered_by_server() =>
                {
                    return Err(error);
                }
                Err(failure) => {
                    for (&p, answer) in pending.iter().zip(failure.answers(pending.len())) {
                        answers[p] = Some(answer);
                    }
                    break;
                }
            }
        }
        Ok(answers
            .into_iter()
            .map(|answer| answer.unwrap_or_else(no_answer))
            .collect())
    }

    /// A write whose fence matched nothing may have been applied already (sent again
    /// after a first sending whose answer was lost): read back, such a write is
    /// answered `Ok`. A refused settlement of a job still held (an operator asked to
    /// cancel) stays a lost claim: the worker settles it CANCELLED then.
    async fn recognise_applied(
        &self,
        writes: &[ClaimWrite],
        answers: &mut [Result<(), StoreError>],
    ) {
        let refused: Vec<usize> = answers
            .iter()
            .enumerate()
            .filter(|(_, answer)| matches!(answer, Err(e) if e.is_lost_claim()))
            .map(|(i, _)| i)
            .collect();
        if refused.is_empty() {
            return;
        }
        let batch: Vec<&ClaimWrite> = refused.iter().map(|&i| &writes[i]).collect();
        match self.read_back(&batch).await {
            Ok(landings) => {
                for (&i, landing) in refused.iter().zip(landings) {
                    // Elements sent to a row still held that inserted nothing were
                    // every one of them stored already.
                    let stored = landing == Landing::NotLanded && writes[i].items.is_some();
                    if landing == Landing::Landed || stored {
                        tracing::debug!(job_id = %writes[i].claim.job_id, "a write sent again was already applied");
                        answers[i] = Ok(());
                    }
                }
            }
            // Unread, whether they landed is unknown: a failure that may pass (the
            // worker sends them again and reads back again), never a lost claim, on
            // which the worker would walk away from a job it still holds.
            Err(e) => {
                for &i in &refused {
                    answers[i] = Err(StoreError::GroupCommit(format!(
                        "the write's fence matched nothing and reading the row back failed ({e}): whether it landed is unknown"
                    )));
                }
            }
        }
    }

    /// What the rows of `writes` show about each of them, in order (within
    /// [`COMMIT_DEADLINE`], on a connection closed if it goes silent).
    async fn read_back(&self, writes: &[&ClaimWrite]) -> Result<Vec<Landing>, StoreError> {
        let ids: Vec<Uuid> = writes.iter().map(|w| w.claim.job_id).collect();
        let mut client = Abandonable::new(self.pool.get().await?);
        let read = tokio::time::timeout(COMMIT_DEADLINE, async {
            let statement = client
                .object()
                .prepare_cached(sql::CLAIM_WRITES_STATE)
                .await?;
            Ok::<_, StoreError>(client.object().query(&statement, &[&ids]).await?)
        })
        .await;
        let rows = match read {
            Ok(rows) => {
                client.finished();
                rows?
            }
            Err(_) => {
                return Err(StoreError::GroupCommit(format!(
                    "reading the rows back got no answer within {} s",
                    COMMIT_DEADLINE.as_secs()
                )));
            }
        };
        let states: std::collections::HashMap<Uuid, RowState> = rows
            .iter()
            .map(|row| {
                (
                    row.get("job_id"),
                    RowState {
                        status: row.get("status"),
                        lease_owner: row.get("lease_owner"),
                        claims: row.get("claims"),
                        checkpoints: row.get("checkpoints"),
                    },
                )
            })
            .collect();
        Ok(writes
            .iter()
            .map(|w| landing(w, states.get(&w.claim.job_id)))
            .collect())
    }

    /// One try at committing `writes`, within [`COMMIT_DEADLINE`]: past it the
    /// batch is answered as unanswered (its COMMIT may have been sent; the rows are
    /// read back) and its connection closed, never handed to the next caller with a
    /// statement still waiting for its answer.
    async fn try_commit(
        &self,
        writes: &[&ClaimWrite],
        together: bool,
    ) -> Result<Vec<Result<(), StoreError>>, BatchFailure> {
        let plans: Vec<Vec<Part<'_>>> = writes.iter().map(|write| parts(write)).collect();
        let mut client = Abandonable::new(batch_connection(&self.pool).await?);
        let tried = tokio::time::timeout(
            COMMIT_DEADLINE,
            self.commit_on(client.object(), writes, &plans, together),
        )
        .await;
        match tried {
            Ok(answered) => {
                client.finished();
                answered
            }
            Err(_) => Err(BatchFailure::Unanswered(StoreError::GroupCommit(format!(
                "no answer within {} s (a connection that went silent)",
                COMMIT_DEADLINE.as_secs()
            )))),
        }
    }

    async fn commit_on(
        &self,
        client: &mut deadpool_postgres::Object,
        writes: &[&ClaimWrite],
        plans: &[Vec<Part<'_>>],
        together: bool,
    ) -> Result<Vec<Result<(), StoreError>>, BatchFailure> {
        // Taken before BEGIN, by the database's clock as the node reads it (never
        // ahead of it while that clock runs steadily: see `store::clock`): the
        // transaction's `now()`, from which a park's sleep and timeout count, is no
        // earlier, so its events never look later than that.
        let began = super::clock::now();
        let tx = begin_batch(client).await?;
        // A write blocked on a row lock (an operator's open transaction) must not hold
        // the node's every other write for ever: it fails the batch, which then commits
        // each write alone.
        tx.batch_execute(sql::BATCH_LOCK_TIMEOUT)
            .await
            .map_err(|e| BatchFailure::Rolledback(e.into()))?;
        let answers = self.run_batch(&tx, writes, plans, together, began).await?;
        tx.commit().await.map_err(commit_failure)?;
        Ok(answers)
    }

    /// The statements of a batch inside its transaction: each write's fenced updates,
    /// one future per write, all of them pipelined on the one connection; then the
    /// events of the writes whose fences matched, in the order of the writes, in one
    /// statement; then one wake-up for the relays and one per requeued job.
    async fn run_batch(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        writes: &[&ClaimWrite],
        plans: &[Vec<Part<'_>>],
        together: bool,
        began: std::time::SystemTime,
    ) -> Result<Vec<Result<(), StoreError>>, BatchFailure> {
        // Prepared once per connection (the pool keeps them), so each statement is one
        // round trip, not a parse and an execute.
        let mut prepared: Vec<(&'static str, Statement)> = Vec::new();
        for text in plans.iter().flatten().map(|part| part.statement) {
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

        let completions = &Completions::of(writes, together);
        let one_by_one = try_join_all(writes.iter().zip(plans).enumerate().map(|(at, (write, plan))| async move {
            if completions.holds(at) {
                return Ok(None);
            }
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
            Ok::<bool, StoreError>(true)
            };
            // The write whose statement failed first is the one PostgreSQL refused.
            written.await.map(Some).map_err(|error| BatchFailure::Refused { at, error })
        }));
        // Sent beside the others; refused, it fails the batch, which then commits each
        // write alone (and a write alone is never in a batched statement).
        let together = async {
            completions
                .settle(tx)
                .await
                .map_err(BatchFailure::Rolledback)
        };
        let (one_by_one, settled_together) =
            futures_util::future::try_join(one_by_one, together).await?;
        let matched: Vec<bool> = one_by_one
            .into_iter()
            .zip(writes)
            .map(|(matched, write)| {
                matched.unwrap_or_else(|| settled_together.contains(&write.claim.job_id))
            })
            .collect();

        // One statement for every event of the batch (a statement per event cost the
        // flusher's one connection more than the events themselves). Refused, it fails
        // the batch, which then commits each write alone.
        let mut events = EventBatch::stamped(began);
        for ((write, plan), _) in writes.iter().zip(plans).zip(&matched).filter(|(_, m)| **m) {
            let claim = &write.claim;
            for facts in plan.iter().flat_map(|part| &part.events) {
                let position = match (facts.kind, &write.checkpoint) {
                    (Type::StepCheckpoint, Some(checkpoint)) => checkpoint.position,
                    _ => -1,
                };
                let event_id =
                    events::claim_event_id(claim.job_id, claim.token, facts.kind, position);
                events
                    .push_as(facts, event_id)
                    .map_err(BatchFailure::Rolledback)?;
            }
        }
        events
            .insert_prepared(tx)
            .await
            .map_err(BatchFailure::Rolledback)?;

        let committed = || {
            writes
                .iter()
                .zip(plans)
                .zip(&matched)
                .filter(|(_, matched)| **matched)
        };
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
