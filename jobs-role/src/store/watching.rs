//! Reads for watchers ([`crate::watch`]): the events of watched jobs after the
//! positions their watchers have seen.

use super::*;

/// The most events one read for the watchers returns; a read cut here is followed
/// at once by the next.
pub const WATCHED_EVENTS_PER_READ: i64 = 5_000;

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
    /// The events of `job_ids[i]` after position `after[i]`, each job's in order; and
    /// whether the read was cut at [`WATCHED_EVENTS_PER_READ`].
    pub async fn events_after(
        &self,
        job_ids: &[Uuid],
        after: &[i64],
    ) -> Result<(Vec<WatchedEvent>, bool), StoreError> {
        let client = self.pool.get().await?;
        let rows = client
            .query(
                sql::EVENTS_AFTER,
                &[&job_ids, &after, &WATCHED_EVENTS_PER_READ],
            )
            .await?;
        let cut = rows.len() as i64 >= WATCHED_EVENTS_PER_READ;
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
        let client = self.pool.get().await?;
        Ok(client
            .query_opt(sql::EVENT_POSITION, &[&job_id, &event_id])
            .await?
            .map(|row| row.get(0)))
    }

    /// The position of `job_id`'s latest event (0 when it has none).
    pub async fn latest_event_position(&self, job_id: Uuid) -> Result<i64, StoreError> {
        let client = self.pool.get().await?;
        Ok(client
            .query_one(sql::LATEST_EVENT_POSITION, &[&job_id])
            .await?
            .get(0))
    }
}
