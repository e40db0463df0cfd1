//! Events sent to jobs (`send-event`, the signals topic), called signals here to tell
//! them from the outbox's events: a send answers every job waiting on its key, and a
//! job that parks on a key takes the events sent before within its step's lookback.
//!
//! Both take the key's advisory lock before any job row ([`sql::LOCK_EVENT_KEY`]),
//! so a send and a park on the same key are ordered: the send either finds the job
//! WAITING, or the job's catch-up, run after its park committed, finds the kept
//! event. Each job takes an event once: the checkpoint it answers carries the
//! event's id (`eventId`), and a catch-up skips the ids a job's checkpoints name.

use std::sync::Arc;

use super::parked::answer_parked_step;
use super::*;

/// Most kept events of one key: a send past it drops the oldest.
pub const MAX_SIGNALS_PER_KEY: i64 = 1000;

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

/// The steps of a job's `waits` that wait for an event, with their key and lookback
/// in milliseconds.
fn event_waits(waits: Option<&Value>) -> Vec<(String, String, i64)> {
    waits
        .and_then(Value::as_array)
        .map(|all| {
            all.iter()
                .filter(|w| w["kind"] == "event")
                .filter_map(|w| {
                    Some((
                        w["step"].as_str()?.to_owned(),
                        w["key"].as_str()?.to_owned(),
                        w["lookbackMs"].as_i64().unwrap_or(0),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

impl Store {
    /// Sends an event: keeps it (for the jobs that park on its key later) and offers
    /// it to every step of every job WAITING on `key` (`offer` decides, from the
    /// job's snapshot, the step and the payload), answering each in one transaction.
    /// An `event_id` sent before answers `duplicate` and changes nothing.
    pub async fn send_signal(
        &self,
        key: &str,
        event_id: &str,
        payload: &Value,
        mut offer: impl FnMut(Value, String) -> Offering + Send,
    ) -> Result<SignalOutcome, StoreError> {
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        tx.execute(sql::LOCK_EVENT_KEY, &[&key]).await?;
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
            for (step, _, _) in event_waits(waits.as_ref())
                .into_iter()
                .filter(|(_, waited, _)| waited == key)
            {
                match offer(definition.clone(), step.clone()).await {
                    Ok((checkpoint, workflow)) => {
                        let answer = ParkedAnswer::Accept { checkpoint };
                        match answer_parked_step(&tx, job_id, &step, &answer, &workflow).await? {
                            ParkedCompletion::Completed { status } => {
                                outcome.resumed.push((job_id, step, status));
                            }
                            other => outcome.refused.push((
                                job_id,
                                step,
                                format!("the job no longer waits on this step ({other:?})"),
                            )),
                        }
                    }
                    Err(reason) => outcome.refused.push((job_id, step, reason)),
                }
            }
        }
        tx.commit().await?;
        Ok(outcome)
    }

    /// Offers a job that just parked on event steps the events kept for their keys
    /// within each step's lookback that it has not taken, oldest first: the first
    /// each step accepts (`offer` decides, from the snapshot, the step, the payload
    /// and the event's id) answers it. Answers the steps answered, with the job's
    /// status after. A job no longer WAITING is left alone.
    pub async fn take_kept_signals(
        &self,
        job_id: Uuid,
        mut offer: impl FnMut(Value, String, Value, String) -> Offering + Send,
    ) -> Result<Vec<(String, JobStatus)>, StoreError> {
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        let Some(row) = tx.query_opt(sql::JOB_WAITS, &[&job_id]).await? else {
            return Ok(Vec::new());
        };
        let waits: Option<Value> = row.get("waits");
        let definition: Value = row.get("workflow_definition");
        let mut keys: Vec<String> = event_waits(waits.as_ref())
            .into_iter()
            .map(|(_, key, _)| key)
            .collect();
        keys.sort();
        keys.dedup();
        if keys.is_empty() || row.get::<_, &str>("status") != JobStatus::Waiting.as_str() {
            return Ok(Vec::new());
        }
        // The keys' locks first, in order, then the row (as a send takes them).
        for key in &keys {
            tx.execute(sql::LOCK_EVENT_KEY, &[key]).await?;
        }
        let Some(row) = tx.query_opt(sql::LOCK_JOB, &[&job_id]).await? else {
            return Ok(Vec::new());
        };
        let waits: Option<Value> = row.get("waits");
        let mut answered = Vec::new();
        for (step, key, lookback_ms) in event_waits(waits.as_ref()) {
            if !keys.contains(&key) {
                // Parked again on another key meanwhile: its own catch-up takes it.
                continue;
            }
            let kept = tx
                .query(sql::KEPT_SIGNALS_FOR_JOB, &[&key, &lookback_ms, &job_id])
                .await?;
            for event in kept {
                let (event_id, payload): (String, Value) =
                    (event.get("event_id"), event.get("payload"));
                let Ok((checkpoint, workflow)) =
                    offer(definition.clone(), step.clone(), payload, event_id).await
                else {
                    continue;
                };
                let answer = ParkedAnswer::Accept { checkpoint };
                if let ParkedCompletion::Completed { status } =
                    answer_parked_step(&tx, job_id, &step, &answer, &workflow).await?
                {
                    answered.push((step.clone(), status));
                }
                break;
            }
        }
        tx.commit().await?;
        Ok(answered)
    }

    /// Deletes up to `batch` kept events older than `older_than`; answers how many.
    pub async fn prune_signals(&self, older_than: Duration, batch: i64) -> Result<u64, StoreError> {
        let client = self.pool.get().await?;
        Ok(client
            .execute(sql::PRUNE_SIGNALS, &[&millis(older_than), &batch])
            .await?)
    }
}
