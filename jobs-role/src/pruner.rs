//! The pruner: applies `[jobs.retention]` every `interval_ms`, on one node at a time
//! (an advisory lock). It runs only when a retention is set; the seed's rule, keep
//! everything, is the default.

use tokio_util::sync::CancellationToken;

use crate::config::RetentionConfig;
use crate::store::{EventsOut, Store};

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
                Ok::<_, crate::store::StoreError>(pruned)
            } => round,
            () = shutdown.cancelled() => return,
        };
        match round {
            Ok(pruned)
                if pruned.job_count()
                    + pruned.published_events
                    + pruned.pruned_ids
                    + pruned.rejects
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
