//! The pruner: applies `[jobs.retention]` every `interval_ms`, on one node at a time
//! (an advisory lock). It runs only when a retention is set; the seed's rule, keep
//! everything, is the default. Each round also sweeps part of the workflow snapshots
//! (migration V21), deleting those no job names any more: a cursor walks them in
//! digest order, [`MAX_BATCHES_PER_ROUND`] batches a round, and starts over at the end.

use tokio_util::sync::CancellationToken;

use crate::config::RetentionConfig;
use crate::store::{EventsOut, MAX_BATCHES_PER_ROUND, Store, StoreError};

/// Prunes every `retention.interval_ms` until `shutdown`, logging what it deleted.
/// `events_out` says which of a job's events must be out before it is deleted (all
/// published when the Kafka lanes are on).
pub async fn prune_loop(
    store: Store,
    retention: RetentionConfig,
    events_out: EventsOut,
    shutdown: CancellationToken,
) {
    let jobs = retention.jobs();
    let published = retention.published_events();
    let interval = std::time::Duration::from_millis(retention.interval_ms);
    let mut snapshot_cursor: Option<String> = None;
    loop {
        let round = tokio::select! {
            round = async {
                let mut pruned = store.prune(&jobs, published, events_out, retention.batch).await?;
                if !pruned.skipped {
                    let records = store
                        .prune_records(retention.pruned_ids(), retention.rejects(), retention.batch)
                        .await?;
                    pruned.pruned_ids = records.pruned_ids;
                    pruned.rejects = records.rejects;
                    pruned.skipped = records.skipped;
                }
                if !pruned.skipped {
                    pruned.snapshots =
                        sweep_snapshots(&store, &mut snapshot_cursor, retention.batch).await?;
                }
                Ok::<_, StoreError>(pruned)
            } => round,
            () = shutdown.cancelled() => return,
        };
        match round {
            Ok(pruned)
                if pruned.job_count()
                    + pruned.published_events
                    + pruned.pruned_ids
                    + pruned.rejects
                    + pruned.snapshots
                    > 0 =>
            {
                let by_status: Vec<String> = pruned
                    .jobs
                    .iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(status, n)| format!("{status} {n}"))
                    .collect();
                tracing::info!(
                    jobs = pruned.job_count(),
                    by_status = %by_status.join(", "),
                    published_events = pruned.published_events,
                    forgotten_pruned_ids = pruned.pruned_ids,
                    request_rejects = pruned.rejects,
                    workflow_snapshots = pruned.snapshots,
                    "pruned rows past their retention"
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "pruning failed; trying again at the next interval")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Up to [`MAX_BATCHES_PER_ROUND`] batches of the snapshot sweep from `cursor`,
/// answering how many snapshots it deleted; the cursor starts over once it passes the
/// last digest, and stops where another node took the pruner's lock.
async fn sweep_snapshots(
    store: &Store,
    cursor: &mut Option<String>,
    batch: i64,
) -> Result<u64, StoreError> {
    let mut deleted = 0;
    for _ in 0..MAX_BATCHES_PER_ROUND {
        let Some(swept) = store.prune_snapshots(cursor.as_deref(), batch).await? else {
            break;
        };
        deleted += swept.deleted;
        *cursor = swept.last;
        if cursor.is_none() {
            break;
        }
    }
    Ok(deleted)
}
