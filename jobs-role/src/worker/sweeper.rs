//! The sweeper: requeues RUNNING jobs whose lease passed (their worker crashed or went
//! quiet), keeping their attempts, so the next claim resumes from the checkpoints. A
//! job whose last attempt's lease passed lands DEAD; one an operator asked to cancel,
//! CANCELLED. It also ends the WAITING jobs whose wait for their external step ran out
//! (FAILED or DEAD, per the step's `onTimeout`), wakes the WAITING jobs whose sleep
//! (beside other waits) ended, deletes the events sent to jobs kept past the longest
//! lookback, and sets ready again the concurrency keys a claim found empty while a
//! job was being queued in their lane (see migration V26).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::metrics::JobsMetrics;
use crate::store::Store;

/// Most rows one sweep moves.
const SWEEP_BATCH: i64 = 500;

/// How long events sent to jobs are kept: the longest `eventLookbackMs` a step may
/// ask (and dedupe answers, 7 days as well).
const KEPT_SIGNALS_FOR: Duration = Duration::from_millis(workflow::compile::MAX_EVENT_LOOKBACK_MS);

/// Sweeps every `interval` until `shutdown`.
pub async fn sweep_loop(
    store: Store,
    interval: Duration,
    metrics: JobsMetrics,
    shutdown: CancellationToken,
) {
    let count = JobsMetrics::count;
    loop {
        // Event stamps follow the database's clock (see `store::clock`).
        if let Err(e) = store.read_database_clock().await {
            tracing::debug!(error = %e, "reading the database's clock failed; retrying at the next interval");
        }
        match store.sweep_expired_leases(SWEEP_BATCH).await {
            Ok(report) if report.requeued + report.dead + report.cancelled > 0 => {
                count(&metrics.sweeps, "requeued", report.requeued as u64);
                count(&metrics.sweeps, "dead", report.dead as u64);
                count(&metrics.sweeps, "cancelled", report.cancelled as u64);
                tracing::info!(
                    requeued = report.requeued,
                    dead = report.dead,
                    cancelled = report.cancelled,
                    "swept expired leases"
                )
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "sweeping expired leases failed; retrying at the next interval")
            }
        }
        // Events sent to jobs are kept for the longest lookback a step may ask, on
        // every fleet (the per-key bound alone leaves one row per key for ever).
        loop {
            match store.prune_signals(KEPT_SIGNALS_FOR, SWEEP_BATCH).await {
                Ok(pruned) if pruned > 0 => {
                    tracing::info!(pruned, "deleted events kept past the longest lookback");
                    if pruned < SWEEP_BATCH as u64 || shutdown.is_cancelled() {
                        break;
                    }
                }
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "deleting old kept events failed; retrying at the next interval");
                    break;
                }
            }
        }
        // A parked job whose catch-up never completed (its node died after the park,
        // or the catch-up failed: a full disk, a database gone).
        match store.requeue_missed_signals(SWEEP_BATCH).await {
            Ok(requeued) if requeued > 0 => {
                tracing::info!(
                    requeued,
                    "requeued parked jobs that missed an event kept for their key"
                )
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "looking for missed events failed; retrying at the next interval")
            }
        }
        if let Err(e) = store
            .prune_dedupe_answers(KEPT_SIGNALS_FOR, SWEEP_BATCH)
            .await
        {
            tracing::warn!(error = %e, "deleting old dedupe answers failed; retrying at the next interval");
        }
        match store.reready_keys().await {
            Ok(fixed) if fixed > 0 => {
                tracing::info!(
                    fixed,
                    "set ready again concurrency keys cleared while a job was being queued"
                )
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "looking for concurrency keys cleared too soon failed; retrying at the next interval")
            }
        }
        // Sleeps beside other waits, before those waits' timeouts: a job whose
        // sleep ended first is woken, not failed.
        loop {
            match store.wake_parked_sleeps(SWEEP_BATCH).await {
                Ok(woken) if woken > 0 => {
                    tracing::info!(woken, "woke parked jobs whose sleep ended");
                    if woken < SWEEP_BATCH as usize || shutdown.is_cancelled() {
                        break;
                    }
                }
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "waking parked sleeps failed; retrying at the next interval");
                    break;
                }
            }
        }
        // Batch after batch while they come back full: a backlog of waits that ran
        // out is ended now, not one batch per interval.
        loop {
            match store.time_out_parked_steps(SWEEP_BATCH).await {
                Ok(report) if report.failed + report.dead > 0 => {
                    metrics
                        .wait_timeouts
                        .inc_by((report.failed + report.dead) as u64);
                    tracing::info!(
                        failed = report.failed,
                        dead = report.dead,
                        "ended parked steps whose wait ran out"
                    );
                    let full = report.failed + report.dead >= SWEEP_BATCH as usize;
                    if !full || shutdown.is_cancelled() {
                        break;
                    }
                }
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "ending timed-out parked steps failed; retrying at the next interval");
                    break;
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = shutdown.cancelled() => return,
        }
    }
}
