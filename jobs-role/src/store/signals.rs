//! Events sent to jobs (`send-event`, the signals topic), called signals here to tell
//! them from the outbox's events: a send answers every job waiting on its key, and a
//! job that parks on a key takes the events sent before within its step's lookback.
//!
//! Both take the key's advisory lock before any job row ([`sql::LOCK_EVENT_KEYS`]),
//! so a send and a park on the same key are ordered: the send either finds the job
//! WAITING, or the job's catch-up, run after its park committed, finds the kept
//! event; the sweeper requeues a parked job that still missed one (its node died
//! before the catch-up). Each step takes an event once: the checkpoint it answers
//! carries the event's id (`eventId`), and both skip the ids a step's checkpoint
//! names. A step's lookback counts back from when it first parked (`sinceMs`).

use std::sync::Arc;

use super::parked::answer_parked_step;
use super::*;

/// Most kept events of one key: a send past it drops the oldest.
pub const MAX_SIGNALS_PER_KEY: i64 = 1000;

/// How long a job has been parked before the sweeper requeues it for the catch-up it
/// missed (its own catch-up runs right after the park).
const MISSED_SIGNAL_PARK_AGE_MS: i64 = 5_000;

/// What offering an event to one step of one job decided: the checkpoint that
/// answers it (its workflow, to tell whether the job can run on), or why the event
/// does not answer it.
pub type Offer = Result<(Value, Arc<workflow::CompiledWorkflow>), String>;

/// A decision of an [`Offer`] under way (owned, so the store's transaction can be
/// held across it by any task).
pub type Offering = futures_util::future::BoxFuture<'static, Offer>;

/// What a send did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SignalOutcome {
    /// The id was sent before: nothing was kept or answered this time.
    pub duplicate: bool,
    /// Each job and step the event answered, with the job's status after.
    pub resumed: Vec<(Uuid, String, JobStatus)>,
    /// Each job and step waiting on the key the event did not answer, with why.
    pub refused: Vec<(Uuid, String, String)>,
}

/// An event wait of a job's `waits`: its step, key, lookback and when the step
/// first parked (milliseconds since the epoch).
struct EventWait {
    step: String,
    key: String,
    lookback_ms: i64,
    since_ms: i64,
}

/// The steps of a job's `waits` that wait for an event.
fn event_waits(waits: Option<&Value>) -> Vec<EventWait> {
    waits
        .and_then(Value::as_array)
        .map(|all| {
            all.iter()
                .filter(|w| w["kind"] == "event")
                .filter_map(|w| {
                    Some(EventWait {
                        step: w["step"].as_str()?.to_owned(),
                        key: w["key"].as_str()?.to_owned(),
                        lookback_ms: w["lookbackMs"].as_i64().unwrap_or(0),
                        since_ms: w["sinceMs"].as_i64().unwrap_or(0),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// True when step `step`'s checkpoint among `checkpoints` names event `event_id`.
fn took(checkpoints: &Value, step: &str, event_id: &str) -> bool {
    checkpoints.as_array().is_some_and(|all| {
        all.iter()
            .any(|c| c["name"] == step && c["eventId"] == event_id)
    })
}

impl Store {
    /// Sends an event: keeps it (for the jobs that park on its key later) and offers
    /// it to every step of every job WAITING on `key` (`offer` decides, from the
    /// job's snapshot, the step and the payload), answering each in one transaction;
    /// a job with two steps waiting on the key takes it at both before it resumes.
    /// An `event_id` sent before on `key` answers `duplicate` and changes nothing.
    pub async fn send_signal(
        &self,
        key: &str,
        event_id: &str,
        payload: &Value,
        mut offer: impl FnMut(Value, String) -> Offering + Send,
    ) -> Result<SignalOutcome, StoreError> {
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        tx.batch_execute(sql::SIGNAL_SETTINGS).await?;
        tx.execute(sql::LOCK_EVENT_KEYS, &[&vec![key]]).await?;
        if tx
            .query_opt(sql::KEEP_SIGNAL, &[&event_id, &key, payload])
            .await?
            .is_none()
        {
            return Ok(SignalOutcome {
                duplicate: true,
                ..SignalOutcome::default()
            });
        }
        tx.execute(sql::TRIM_SIGNALS_OF_KEY, &[&key, &MAX_SIGNALS_PER_KEY])
            .await?;
        let mut outcome = SignalOutcome::default();
        for row in tx.query(sql::LOCK_JOBS_WAITING_ON_KEY, &[&key]).await? {
            let job_id: Uuid = row.get("job_id");
            let definition: Value = row.get("workflow_definition");
            let waits: Option<Value> = row.get("waits");
            let checkpoints: Value = row.get("checkpoints");
            let mut accepted = Vec::new();
            for wait in event_waits(waits.as_ref())
                .into_iter()
                .filter(|w| w.key == key)
            {
                if took(&checkpoints, &wait.step, event_id) {
                    continue;
                }
                match offer(definition.clone(), wait.step.clone()).await {
                    Ok(answer) => accepted.push((wait.step, answer)),
                    Err(reason) => outcome.refused.push((job_id, wait.step, reason)),
                }
            }
            answer_all(&tx, job_id, accepted, &mut outcome).await?;
        }
        tx.commit().await?;
        Ok(outcome)
    }

    /// Offers a job that just parked on event steps the events kept for their keys
    /// since each step first parked less its lookback, that the step has not taken,
    /// oldest first: the first each step accepts (`offer` decides, from the snapshot,
    /// the step, the payload and the event's id) answers it. Answers the steps
    /// answered, with the job's status after. A job no longer WAITING is left alone.
    /// The row is stamped caught up (see [`sql::REQUEUE_MISSED_SIGNALS`]) only when the
    /// catch-up held the lock of every key the job waits on.
    pub async fn take_kept_signals(
        &self,
        job_id: Uuid,
        mut offer: impl FnMut(Value, String, Value, String) -> Offering + Send,
    ) -> Result<Vec<(String, JobStatus)>, StoreError> {
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        tx.batch_execute(sql::SIGNAL_SETTINGS).await?;
        let Some(row) = tx.query_opt(sql::JOB_WAITS, &[&job_id]).await? else {
            return Ok(Vec::new());
        };
        let waits: Option<Value> = row.get("waits");
        let definition: Value = row.get("workflow_definition");
        let keys: Vec<String> = event_waits(waits.as_ref())
            .into_iter()
            .map(|w| w.key)
            .collect();
        if keys.is_empty() || row.get::<_, &str>("status") != JobStatus::Waiting.as_str() {
            return Ok(Vec::new());
        }
        // The keys' locks first, then the row (as a send takes them).
        tx.execute(sql::LOCK_EVENT_KEYS, &[&keys]).await?;
        let Some(row) = tx.query_opt(sql::LOCK_JOB, &[&job_id]).await? else {
            return Ok(Vec::new());
        };
        let waits: Option<Value> = row.get("waits");
        let waits = event_waits(waits.as_ref());
        // A catch-up that ran late, after the job parked again on a key it did not
        // lock, leaves the stamp to that park's own catch-up (or the sweeper's).
        let every_key_taken = waits.iter().all(|wait| keys.contains(&wait.key));
        let mut accepted = Vec::new();
        for wait in waits {
            if !keys.contains(&wait.key) {
                // Parked again on another key meanwhile: its own catch-up takes it.
                continue;
            }
            let since = wait.since_ms.saturating_sub(wait.lookback_ms);
            let kept = tx
                .query(
                    sql::KEPT_SIGNALS_FOR_JOB,
                    &[&wait.key, &since, &job_id, &wait.step],
                )
                .await?;
            for event in kept {
                let (event_id, payload): (String, Value) =
                    (event.get("event_id"), event.get("payload"));
                if let Ok(answer) =
                    offer(definition.clone(), wait.step.clone(), payload, event_id).await
                {
                    accepted.push((wait.step.clone(), answer));
                    break;
                }
            }
        }
        let mut outcome = SignalOutcome::default();
        answer_all(&tx, job_id, accepted, &mut outcome).await?;
        if every_key_taken {
            tx.execute(sql::EVENTS_CAUGHT_UP, &[&job_id]).await?;
        }
        tx.commit().await?;
        Ok(outcome
            .resumed
            .into_iter()
            .map(|(_, step, status)| (step, status))
            .collect())
    }

    /// Requeues WAITING jobs that missed an event kept for their key (see
    /// [`sql::REQUEUE_MISSED_SIGNALS`]); answers how many.
    pub async fn requeue_missed_signals(&self, batch: i64) -> Result<usize, StoreError> {
        self.requeue_parked(
            sql::REQUEUE_MISSED_SIGNALS,
            &[&batch, &MISSED_SIGNAL_PARK_AGE_MS],
        )
        .await
    }

    /// Deletes up to `batch` kept events older than `older_than`; answers how many.
    pub async fn prune_signals(&self, older_than: Duration, batch: i64) -> Result<u64, StoreError> {
        let client = self.pool.get().await?;
        Ok(client
            .execute(sql::PRUNE_SIGNALS, &[&millis(older_than), &batch])
            .await?)
    }
}

/// Answers `accepted` (step, offer) of job `job_id` in order inside `tx`, the job
/// held WAITING until the last, recording each in `outcome`.
async fn answer_all(
    tx: &Transaction<'_>,
    job_id: Uuid,
    accepted: Vec<(String, (Value, Arc<workflow::CompiledWorkflow>))>,
    outcome: &mut SignalOutcome,
) -> Result<(), StoreError> {
    let last = accepted.len().saturating_sub(1);
    for (at, (step, (checkpoint, workflow))) in accepted.into_iter().enumerate() {
        let answer = ParkedAnswer::Accept { checkpoint };
        match answer_parked_step(tx, job_id, &step, &answer, &workflow, at < last).await? {
            ParkedCompletion::Completed { status } => outcome.resumed.push((job_id, step, status)),
            other => outcome.refused.push((
                job_id,
                step,
                format!("the job no longer waits on this step ({other:?})"),
            )),
        }
    }
    Ok(())
}
