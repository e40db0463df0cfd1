//! The snapshot mover: after migration V21, moves the workflow snapshots the rows
//! written before it still hold into `workflow_snapshot`, in short batches, then
//! validates V21's foreign key. Every node runs it at start-up; it ends at once on a
//! database where the key is validated, and the batches are safe to run on several
//! nodes at a time (rows another transaction holds are skipped, and a pass that
//! skipped some is followed by another). Batches are paced ([`BATCH_GAP`]) so the
//! rewrite of old rows never crowds out the live work, and passes back off
//! ([`PASS_GAPS`]): a row that cannot be moved, or a key that cannot be validated, is
//! named in the log and tried again later, never in a tight loop.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::{Store, StoreError};

/// Rows moved per transaction: a batch of 100 KB snapshots stays a short write.
pub const MOVE_BATCH: i64 = 200;

/// The pause between two batches of one pass.
pub const BATCH_GAP: Duration = Duration::from_millis(50);

/// The pauses before the second, third, ... pass (the last one repeats).
pub const PASS_GAPS: [Duration; 4] = [
    Duration::from_secs(2),
    Duration::from_secs(30),
    Duration::from_secs(300),
    Duration::from_secs(1800),
];

/// Moves every row's snapshot out, then validates the key; until `shutdown`.
pub async fn move_snapshots(store: Store, shutdown: CancellationToken) {
    tokio::select! {
        () = move_until_validated(&store) => {}
        () = shutdown.cancelled() => {}
    }
}

async fn move_until_validated(store: &Store) {
    let mut moved = 0u64;
    for pass in 0usize.. {
        match one_pass(store, &mut moved).await {
            Ok(true) => {
                if moved > 0 {
                    tracing::info!(
                        rows = moved,
                        "moved the workflow snapshots of the rows written before migration V21; each is now filed once"
                    );
                }
                return;
            }
            Ok(false) => {}
            Err(e) if e.is_data_error() => {
                let stranded = store.rows_without_a_snapshot().await.unwrap_or_default();
                tracing::error!(
                    error = %e,
                    ?stranded,
                    "a job row's workflow snapshot cannot be filed, or a row names a snapshot that is not filed (an edit of a row written before V21): repair or delete the rows named, and the mover tries again"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "moving workflow snapshots out of job rows failed; trying again")
            }
        }
        tokio::time::sleep(PASS_GAPS[pass.min(PASS_GAPS.len() - 1)]).await;
    }
}

/// One pass over the rows; true once the key is validated.
async fn one_pass(store: &Store, moved: &mut u64) -> Result<bool, StoreError> {
    if store.snapshot_key_validated().await? {
        return Ok(true);
    }
    let mut after = None;
    loop {
        let batch = store.move_inline_snapshots(after, MOVE_BATCH).await?;
        *moved += batch.moved;
        match batch.last {
            Some(last) => after = Some(last),
            None => break,
        }
        tokio::time::sleep(BATCH_GAP).await;
    }
    if store.any_inline_snapshot().await? {
        // Rows another transaction held: the next pass takes them.
        return Ok(false);
    }
    store.validate_snapshot_key().await?;
    Ok(true)
}
