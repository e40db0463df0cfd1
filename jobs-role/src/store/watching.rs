//! Reads for watchers ([`crate::watch`]): the events of watched jobs after the
//! positions their watchers have seen.

use super::*;

/// The most events of one job one read for the watchers returns (a watcher's
/// channel holds as many); a job with more is read on at once.
pub const WATCHED_EVENTS_PER_JOB: i64 = 64;

/// One event of a watched job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedEvent {
    /// Its job.
    pub job_id: Uuid,
    /// Its id (the SSE event id).
    pub event_id: Uuid,
    /// Its outbox position (per job, the order it committed in).
    pub seq: i64,
    /// `ACCEPTED`, `STEP_CHECKPOINT`, ...
    pub event_type: String,
    /// The encoded `WorkflowRunEvent`.
    pub payload: Vec<u8>,
}

impl Store {
    /// The events of `job_ids[i]` after position `after[i]`, each job's in order, at
    /// most [`WATCHED_EVENTS_PER_JOB`] each; and whether some job had more.
    pub async fn events_after(
        &self,
        job_ids: &[Uuid],
        after: &[i64],
    ) -> Result<(Vec<WatchedEvent>, bool), StoreError> {
        let client = self.shared().await?;
        let rows = client
            .query(
                sql::EVENTS_AFTER,
                &[&job_ids, &after, &WATCHED_EVENTS_PER_JOB],
            )
            .await?;
        let mut per_job: std::collections::HashMap<Uuid, i64> = std::collections::HashMap::new();
        for row in &rows {
            *per_job.entry(row.get("job_id")).or_default() += 1;
        }
        let cut = per_job.values().any(|n| *n >= WATCHED_EVENTS_PER_JOB);
        let events = rows
            .iter()
            .map(|row| WatchedEvent {
                job_id: row.get("job_id"),
                event_id: row.get("event_id"),
                seq: row.get("seq"),
                event_type: row.get("event_type"),
                payload: row.get("payload"),
            })
            .collect();
        Ok((events, cut))
    }

    /// The outbox position of `job_id`'s event `event_id` (a watcher resuming after
    /// it), or `None` when the job has no such event.
    pub async fn event_position(
        &self,
        job_id: Uuid,
        event_id: Uuid,
    ) -> Result<Option<i64>, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query_opt(sql::EVENT_POSITION, &[&job_id, &event_id])
            .await?
            .map(|row| row.get(0)))
    }

    /// The position of `job_id`'s latest event (0 when it has none).
    pub async fn latest_event_position(&self, job_id: Uuid) -> Result<i64, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query_one(sql::LATEST_EVENT_POSITION, &[&job_id])
            .await?
            .get(0))
    }
}
