//! The signals lane: a record on `[jobs] signals_topic` (an encoded
//! `protomolt.jobs.v1.SendEvent`, the event key as the record key) is exactly the
//! `send-event` verb. Its offset is committed only after the database write, like a
//! request's; a record with no id uses its topic, partition and offset as one, so a
//! record consumed twice answers the jobs once. A record that is not a `SendEvent`,
//! has no key, or holds what PostgreSQL cannot store is dead-lettered beside the
//! rejected requests.

use std::sync::Arc;

use jobs_proto::wire::{SignalRecord, read_signal_record};
use rdkafka::message::{Message, OwnedMessage};

use super::disposition::{Disposition, dead_letter};
use crate::compiled::CompiledCache;
use crate::store::{Store, StoreError, nul_path};

/// Sends each record's event to the jobs waiting on its key.
#[derive(Clone)]
pub struct SignalHandler {
    store: Store,
    compiled: Arc<CompiledCache>,
}

impl SignalHandler {
    /// A handler answering jobs through `store`, their workflows compiled through
    /// `compiled`.
    pub fn new(store: Store, compiled: Arc<CompiledCache>) -> Self {
        SignalHandler { store, compiled }
    }

    /// Sends one record's event, or dead-letters the record. `Err` only when the
    /// database could do neither (the caller retries, uncommitted).
    pub async fn process(&self, record: &OwnedMessage) -> Result<Disposition, StoreError> {
        let SignalRecord {
            key,
            event_id,
            payload,
        } = match read_signal_record(record.key(), record.payload()) {
            Ok(read) => read,
            Err(refusal) => return dead_letter(&self.store, record, refusal).await,
        };
        if let Err(too_large) = crate::signals::check_payload(&payload) {
            return dead_letter(&self.store, record, format!("payload: {too_large}")).await;
        }
        if let Some(path) = nul_path(&payload, "payload") {
            let error =
                format!("{path}: holds a NUL character (\\u0000), which PostgreSQL cannot store");
            return dead_letter(&self.store, record, error).await;
        }
        let event_id = match event_id.as_str() {
            "" => format!(
                "{}/{}/{}",
                record.topic(),
                record.partition(),
                record.offset()
            ),
            id => id.to_owned(),
        };
        let compiled = self.compiled.clone();
        let sent = self
            .store
            .send_signal(&key, &event_id, &payload, |definition, step| {
                let (compiled, payload, event_id) =
                    (compiled.clone(), payload.clone(), event_id.clone());
                Box::pin(async move {
                    crate::signals::offer(&compiled, &definition, &step, &payload, &event_id).await
                })
            })
            .await;
        match sent {
            Ok(outcome) => Ok(Disposition::Signalled {
                event_id,
                duplicate: outcome.duplicate,
                resumed: outcome.resumed.len(),
                refused: outcome.refused.len(),
            }),
            Err(refused) if refused.is_data_error() => {
                let error = format!("the event holds a value PostgreSQL cannot store: {refused}");
                dead_letter(&self.store, record, error).await
            }
            Err(e) => Err(e),
        }
    }
}
