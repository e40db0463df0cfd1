//! The outbox as the Kafka lanes see it: relay batches, dead-lettered and held rows,
//! redrives, and poison records of the request topic.

use super::*;

/// One outbox row.
#[derive(Debug, Clone)]
pub struct OutboxRow {
    /// The event id.
    pub event_id: Uuid,
    /// `ACCEPTED`, `STEP_CHECKPOINT`, ...
    pub event_type: String,
    /// The encoded event.
    pub payload: Vec<u8>,
    /// `PENDING`, `PUBLISHED` or `FAILED`.
    pub status: String,
}

/// A PENDING outbox row handed to the relay.
#[derive(Debug, Clone)]
pub struct PendingEvent {
    /// The event id (also the record's event_id).
    pub event_id: Uuid,
    /// The job: the record key.
    pub job_id: Uuid,
    /// The encoded event.
    pub payload: Vec<u8>,
    /// Failed publishes so far.
    pub attempts: i32,
    /// The job's W3C trace context, sent as the record's `traceparent` header.
    pub trace_context: Option<String>,
}

/// What became of one publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The broker acknowledged it.
    Published,
    /// The record itself was refused (too large, invalid): counts an attempt.
    Failed(String),
    /// The broker could not take it right now (a timeout, no leader for the
    /// partition, not enough in-sync replicas): an outage, not the row's fault. The
    /// row stays PENDING with its attempts untouched.
    Outage(String),
}

/// What one relay batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Rows published.
    pub published: usize,
    /// Rows whose publish failed and that wait for another attempt.
    pub retrying: usize,
    /// Rows that spent their attempts and landed FAILED.
    pub dead_lettered: Vec<Uuid>,
    /// Rows the broker could not take (an outage): PENDING, attempts untouched.
    pub outage: usize,
    /// The last outage error, when `outage > 0`.
    pub outage_error: Option<String>,
}

impl DrainReport {
    /// Rows the batch handled (published, retried or dead-lettered; not the rows an
    /// outage left untouched).
    pub fn handled(&self) -> usize {
        self.published + self.retrying + self.dead_lettered.len()
    }
}

/// Backlog of the Kafka lanes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneCounts {
    /// Outbox rows waiting for the relay.
    pub pending_events: i64,
    /// Outbox rows that spent their attempts (the dead-letter queue).
    pub failed_events: i64,
    /// HELD rows: an earlier row of the same job is FAILED; they publish, in order,
    /// once an operator redrives that row.
    pub held_events: i64,
    /// Poison records of the request topic.
    pub rejected_requests: i64,
}

/// A record of the request topic that could not become a job row.
#[derive(Debug, Clone)]
pub struct RejectedRecord<'a> {
    /// Its topic.
    pub topic: &'a str,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its key, if any.
    pub key: Option<&'a [u8]>,
    /// Its payload, if any.
    pub payload: Option<&'a [u8]>,
    /// Why it was rejected.
    pub error: &'a str,
}

impl Store {
    /// One relay batch: locks up to `batch` due PENDING rows (skipping rows other
    /// relays hold, and all but the earliest PENDING row of each job), hands them to
    /// `publish`, and records each outcome in the same transaction: PUBLISHED after the
    /// broker's ack; a refused record counts one more attempt with
    /// `backoff(attempts)`, and lands FAILED once `max_attempts` are spent; a row an
    /// outage kept from the broker is left as it was. When `publish` returns `Err`
    /// (the broker is unreachable) nothing is recorded: the rows stay PENDING,
    /// attempts untouched.
    pub async fn drain_outbox<F, Fut, E>(
        &self,
        batch: i64,
        max_attempts: i32,
        backoff: impl Fn(i32) -> Duration,
        publish: F,
    ) -> Result<Result<DrainReport, E>, StoreError>
    where
        F: FnOnce(Vec<PendingEvent>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<PublishOutcome>, E>>,
    {
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        let rows = tx.query(sql::CLAIM_OUTBOX_BATCH, &[&batch]).await?;
        if rows.is_empty() {
            tx.commit().await?;
            return Ok(Ok(DrainReport::default()));
        }
        let pending: Vec<PendingEvent> = rows
            .iter()
            .map(|row| PendingEvent {
                event_id: row.get("event_id"),
                job_id: row.get("job_id"),
                payload: row.get("payload"),
                attempts: row.get("attempts"),
                trace_context: row.get("trace_context"),
            })
            .collect();
        let ids: Vec<(Uuid, i32)> = pending.iter().map(|p| (p.event_id, p.attempts)).collect();
        let job_of: std::collections::HashMap<Uuid, Uuid> =
            pending.iter().map(|p| (p.event_id, p.job_id)).collect();
        let outcomes = match publish(pending).await {
            Ok(outcomes) => outcomes,
            Err(unreachable) => {
                tx.rollback().await?;
                return Ok(Err(unreachable));
            }
        };
        let mut report = DrainReport::default();
        let mut published = Vec::new();
        let mut deferred = Vec::new();
        for ((event_id, attempts), outcome) in ids.into_iter().zip(outcomes) {
            match outcome {
                PublishOutcome::Published => published.push(event_id),
                PublishOutcome::Outage(error) => {
                    deferred.push(event_id);
                    report.outage += 1;
                    report.outage_error = Some(error);
                }
                PublishOutcome::Failed(error) => {
                    let row = tx
                        .query_one(
                            sql::MARK_PUBLISH_FAILED,
                            &[
                                &event_id,
                                &printable(&error),
                                &millis(backoff(attempts + 1)),
                                &max_attempts,
                            ],
                        )
                        .await?;
                    if row.get::<_, String>("status") == "FAILED" {
                        tx.execute(sql::HOLD_BEHIND_FAILED, &[&event_id]).await?;
                        report.dead_lettered.push(event_id);
                    } else {
                        report.retrying += 1;
                    }
                }
            }
        }
        if !published.is_empty() {
            tx.execute(sql::MARK_PUBLISHED, &[&published]).await?;
            // A redriven row that published lets the rows held behind it go.
            let published_jobs: Vec<Uuid> = published
                .iter()
                .filter_map(|event_id| job_of.get(event_id).copied())
                .collect();
            tx.execute(sql::RELEASE_HELD_OF_JOBS, &[&published_jobs])
                .await?;
        }
        if !deferred.is_empty() {
            // Not the rows' fault: no attempt is spent, but the next batch reaches
            // other rows first (their partitions may be healthy).
            tx.execute(sql::DEFER_AFTER_OUTAGE, &[&deferred, &millis(backoff(1))])
                .await?;
        }
        tx.commit().await?;
        report.published = published.len();
        Ok(Ok(report))
    }

    /// Keeps a poison record in the dead-letter store (once per record).
    pub async fn reject_request(&self, record: &RejectedRecord<'_>) -> Result<(), StoreError> {
        let client = self.shared().await?;
        client
            .execute(
                sql::INSERT_REQUEST_REJECT,
                &[
                    &record.topic,
                    &record.partition,
                    &record.offset,
                    &record.key,
                    &record.payload,
                    &printable(record.error),
                ],
            )
            .await?;
        Ok(())
    }

    /// The jobs with a dead-lettered (FAILED) outbox row, of `workflow` if given,
    /// the one dead-lettered earliest first, at most `limit`.
    pub async fn jobs_with_failed_events(
        &self,
        workflow: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Uuid>, StoreError> {
        let client = self.shared().await?;
        let rows = client
            .query(sql::JOBS_WITH_FAILED_EVENTS, &[&workflow, &limit])
            .await?;
        Ok(rows.iter().map(|row| row.get("job_id")).collect())
    }

    /// An operator's redrive of jobs' events: their FAILED rows PENDING again with a
    /// fresh budget; their HELD rows follow, in order, as the rows ahead of them
    /// publish. Answers, per job redriven, how many FAILED rows.
    pub async fn redrive_job_events(
        &self,
        job_ids: &[Uuid],
    ) -> Result<Vec<(Uuid, usize)>, StoreError> {
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        let rows = tx.query(sql::REDRIVE_JOB_EVENTS, &[&job_ids]).await?;
        let mut released: Vec<(Uuid, usize)> = Vec::new();
        for row in &rows {
            let job_id: Uuid = row.get("job_id");
            match released.iter_mut().find(|(id, _)| *id == job_id) {
                Some((_, n)) => *n += 1,
                None => released.push((job_id, 1)),
            }
        }
        if !rows.is_empty() {
            tx.execute(sql::NOTIFY_OUTBOX, &[]).await?;
        }
        tx.commit().await?;
        Ok(released)
    }

    /// Releases HELD rows no FAILED row holds back any more (see
    /// [`sql::RELEASE_UNBLOCKED_HELD`]); answers how many.
    pub async fn release_unblocked_held(&self) -> Result<u64, StoreError> {
        let client = self.shared().await?;
        let released = client.execute(sql::RELEASE_UNBLOCKED_HELD, &[]).await?;
        if released > 0 {
            client.execute(sql::NOTIFY_OUTBOX, &[]).await?;
        }
        Ok(released)
    }

    /// An operator's redrive of a FAILED (dead-lettered) outbox row: PENDING again
    /// with a fresh budget, and the job's HELD rows behind it PENDING too, so they
    /// follow in order. False when the row is not FAILED.
    pub async fn redrive_failed_event(&self, event_id: Uuid) -> Result<bool, StoreError> {
        let client = self.shared().await?;
        let released = client
            .query(sql::REDRIVE_FAILED_EVENT, &[&event_id])
            .await?;
        if !released.is_empty() {
            client.execute(sql::NOTIFY_OUTBOX, &[]).await?;
        }
        Ok(!released.is_empty())
    }
}
