//! Many events' outbox rows written by one statement ([`sql::INSERT_EVENTS`]): the
//! flusher's batches, a bulk act's events, a batch of submissions.

use super::*;

/// The most payload bytes one statement of the flusher's events carries (an event
/// larger than this goes alone).
const EVENT_BYTES_PER_STATEMENT: usize = 8 * 1024 * 1024;

/// The outbox rows of many events, written by one [`sql::INSERT_EVENTS`].
#[derive(Default)]
pub(super) struct EventBatch {
    event_ids: Vec<Uuid>,
    job_ids: Vec<Uuid>,
    types: Vec<&'static str>,
    payloads: Vec<Vec<u8>>,
    /// When its claims' events occurred ([`events::encode_at`]); `None`: as encoded.
    stamped: Option<std::time::SystemTime>,
}

impl EventBatch {
    /// A batch whose claims' events all occurred at `at`.
    pub(super) fn stamped(at: std::time::SystemTime) -> EventBatch {
        EventBatch {
            stamped: Some(at),
            ..EventBatch::default()
        }
    }

    /// Encodes and adds one event.
    pub(super) fn push(&mut self, facts: &EventFacts<'_>) -> Result<(), StoreError> {
        let (event_id, payload) = events::encode(facts)?;
        self.add(facts, event_id, payload);
        Ok(())
    }

    /// Encodes and adds one event under `event_id` (a claim's events have ids derived
    /// from what they mark, so a write sent twice writes each once).
    pub(super) fn push_as(
        &mut self,
        facts: &EventFacts<'_>,
        event_id: Uuid,
    ) -> Result<(), StoreError> {
        let (event_id, payload) = match self.stamped {
            Some(at) => events::encode_at(facts, event_id, at)?,
            None => events::encode_as(facts, event_id)?,
        };
        self.add(facts, event_id, payload);
        Ok(())
    }

    pub(super) fn add(&mut self, facts: &EventFacts<'_>, event_id: Uuid, payload: Vec<u8>) {
        self.event_ids.push(event_id);
        self.job_ids.push(facts.job_id);
        self.types.push(events::type_name(facts.kind));
        self.payloads.push(payload);
    }

    /// The job of the first event, if any.
    pub(super) fn first_job(&self) -> Option<Uuid> {
        self.job_ids.first().copied()
    }

    /// Writes the events, in the order pushed, and wakes idle relays when `tx`
    /// commits; nothing when there are none.
    pub(super) async fn insert(&self, tx: &Transaction<'_>) -> Result<(), StoreError> {
        if self.job_ids.is_empty() {
            return Ok(());
        }
        tx.execute(
            sql::INSERT_EVENTS,
            &[&self.event_ids, &self.job_ids, &self.types, &self.payloads],
        )
        .await?;
        tx.execute(sql::NOTIFY_OUTBOX, &[]).await?;
        Ok(())
    }

    /// [`EventBatch::insert`] with its statements prepared once per connection (the
    /// pool keeps them): for the flusher, which writes a batch many times a second.
    pub(super) async fn insert_prepared(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
    ) -> Result<(), StoreError> {
        if self.job_ids.is_empty() {
            return Ok(());
        }
        let insert = tx.prepare_cached(sql::INSERT_EVENTS).await?;
        let notify = tx.prepare_cached(sql::NOTIFY_OUTBOX).await?;
        // Statements of at most EVENT_BYTES_PER_STATEMENT (a COMPLETED event carries its
        // result): PostgreSQL bounds a message. Pipelined, run in order.
        let mut inserts = Vec::new();
        let mut start = 0;
        while start < self.payloads.len() {
            let mut end = start + 1;
            let mut bytes = self.payloads[start].len();
            while end < self.payloads.len()
                && bytes + self.payloads[end].len() <= EVENT_BYTES_PER_STATEMENT
            {
                bytes += self.payloads[end].len();
                end += 1;
            }
            let range = start..end;
            let insert = &insert;
            inserts.push(async move {
                tx.execute(
                    insert,
                    &[
                        &&self.event_ids[range.clone()],
                        &&self.job_ids[range.clone()],
                        &&self.types[range.clone()],
                        &&self.payloads[range],
                    ],
                )
                .await
            });
            start = end;
        }
        futures_util::future::try_join(
            futures_util::future::try_join_all(inserts),
            tx.execute(&notify, &[]),
        )
        .await?;
        Ok(())
    }
}
