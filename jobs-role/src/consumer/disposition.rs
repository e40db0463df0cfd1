//! What a consumed record became ([`Disposition`]), how it is logged, and the
//! dead-letter store every lane sends a record to when nothing else can hold it.

use rdkafka::message::{Message, OwnedMessage};
use uuid::Uuid;

use crate::store::{RejectedRecord, Store, StoreError};

/// What a record became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// A job was submitted (or found, when `created` is false).
    Submitted {
        /// The job.
        job_id: Uuid,
        /// False when the same request was seen before.
        created: bool,
    },
    /// A FAILED row records why the request could not run.
    FailedRow {
        /// The job.
        job_id: Uuid,
        /// Why.
        error: String,
    },
    /// The record went to the dead-letter store.
    Rejected {
        /// Why.
        error: String,
    },
    /// A replay: its job ran and retention deleted it; it is not run again.
    AlreadyPruned {
        /// The job.
        job_id: Uuid,
    },
    /// An event from the signals topic was sent to the jobs waiting on its key.
    Signalled {
        /// The event's id.
        event_id: String,
        /// The id was sent before: nothing was answered this time.
        duplicate: bool,
        /// Steps the event answered.
        resumed: usize,
        /// Steps waiting on the key it did not fit.
        refused: usize,
    },
}

impl Disposition {
    /// The label the record is counted under.
    pub fn outcome(&self) -> &'static str {
        match self {
            Disposition::Submitted { .. } => "submitted",
            Disposition::FailedRow { .. } => "failed_row",
            Disposition::Rejected { .. } => "rejected",
            Disposition::AlreadyPruned { .. } => "already_pruned",
            Disposition::Signalled { .. } => "signalled",
        }
    }
}

/// Dead-letters `record` to `workflow_run_request_rejects` with `error`.
pub(super) async fn dead_letter(
    store: &Store,
    record: &OwnedMessage,
    error: String,
) -> Result<Disposition, StoreError> {
    let rejected = RejectedRecord {
        topic: record.topic(),
        partition: record.partition(),
        offset: record.offset(),
        key: record.key(),
        payload: record.payload(),
        error: &error,
    };
    store.reject_request(&rejected).await?;
    Ok(Disposition::Rejected { error })
}

pub(super) fn log_disposition(record: &OwnedMessage, disposition: &Disposition) {
    let (partition, offset) = (record.partition(), record.offset());
    match disposition {
        Disposition::Submitted { job_id, created } => {
            tracing::debug!(%job_id, created, partition, offset, "request submitted")
        }
        Disposition::FailedRow { job_id, error } => {
            tracing::warn!(%job_id, %error, partition, offset, "request recorded as a FAILED job")
        }
        Disposition::Rejected { error } => {
            tracing::warn!(%error, partition, offset, "request dead-lettered to workflow_run_request_rejects")
        }
        Disposition::Signalled {
            event_id,
            duplicate,
            resumed,
            refused,
        } => {
            tracing::debug!(%event_id, duplicate, resumed, refused, partition, offset, "event sent to the jobs waiting on its key")
        }
        Disposition::AlreadyPruned { job_id } => {
            tracing::info!(%job_id, partition, offset, "a replayed request: its job already ran and retention deleted it; not run again")
        }
    }
}
