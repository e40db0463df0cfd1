//! The sweeper: requeues RUNNING jobs whose lease passed (their worker crashed or went
//! quiet), keeping their attempts, so the next claim resumes from the checkpoints. A
//! job whose last attempt's lease passed lands DEAD; one an operator asked to cancel,
//! CANCELLED. It also ends the WAITING jobs whose wait for their external step ran out
//! (FAILED or DEAD, per the step's `onTimeout`), wakes the WAITING jobs whose sleep
//! (beside other waits) ended, deletes the events sent to jobs kept past the longest
//! lookback, and sets ready again the concurrency keys a claim found empty while a
//! job was being queued in their lane (see migration V26).
//!
//! A lease that ran out while the database refused everyone (a full disk, an outage
//! longer than the lease) was not let go by a quiet worker: no worker could renew.
//! The sweeper tells the two apart by what it saw itself ([`Refusals`]): once the
//! database answers again, the leases that ran out since the sweeper's last answered
//! sweep before the refusal are requeued with their attempt given back, as a release
//! gives it. Only a refusal of the node counts (unreachable, shutting down, a full
//! disk: [`StoreError::is_refusal`]), never a busy pool or a timed-out statement, and
//! the `max_releases` bound keeps a job whose workers really crash from looping on
//! it. What a node cannot see: a sweep by a node whose sweeper did not run during the
//! refusal charges the attempt, as before.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::metrics::JobsMetrics;
use crate::store::{RefusedSince, Store, StoreError};

/// Most rows one sweep moves.
const SWEEP_BATCH: i64 = 500;

/// How long events sent to jobs are kept: the longest `eventLookbackMs` a step may
/// ask (and dedupe answers, 7 days as well).
const KEPT_SIGNALS_FOR: Duration = Duration::from_millis(workflow::compile::MAX_EVENT_LOOKBACK_MS);

/// What the sweeper saw of the database refusing it: when its last sweep before the
/// current refusal was answered, and when it was last refused (none: no refusal since).
#[derive(Debug)]
struct Refusals {
    answered_at: Instant,
    refused_at: Option<Instant>,
}

impl Refusals {
    /// Nothing refused yet; the stretch before `started` is not the sweeper's to judge.
    fn new(started: Instant) -> Refusals {
        Refusals {
            answered_at: started,
            refused_at: None,
        }
    }

    /// A store call at `at` failed: when the database refused the node (see
    /// [`StoreError::is_refusal`]), the sweeper saw it refuse then.
    fn failed(&mut self, error: &StoreError, at: Instant) {
        if error.is_refusal() {
            self.refused_at = Some(at);
        }
    }

    /// The leases whose attempt the next sweep gives back: those that ran out since
    /// the last answered sweep before the refusal, if there was one.
    fn window(&self) -> Option<RefusedSince> {
        self.refused_at.map(|_| RefusedSince(self.answered_at))
    }

    /// A sweep sent at `sent_at` was answered; `full` when it moved a whole batch (the
    /// refusal's leases may not all be swept: its window is kept for the next).
    fn answered(&mut self, sent_at: Instant, full: bool) {
        if self.refused_at.is_some() && full {
            return;
        }
        self.refused_at = None;
        self.answered_at = sent_at;
    }
}

/// Sweeps every `interval` until `shutdown`; `max_releases` bounds the attempts given
/// back in a row (see [`Refusals`]).
pub async fn sweep_loop(
    store: Store,
    interval: Duration,
    max_releases: i32,
    metrics: JobsMetrics,
    shutdown: CancellationToken,
) {
    let count = JobsMetrics::count;
    let mut refusals = Refusals::new(Instant::now());
    loop {
        // Event stamps follow the database's clock (see `store::clock`).
        if let Err(e) = store.read_database_clock().await {
            refusals.failed(&e, Instant::now());
            tracing::debug!(error = %e, "reading the database's clock failed; retrying at the next interval");
        }
        let sent_at = Instant::now();
        let window = refusals.window();
        match store
            .sweep_expired_leases(SWEEP_BATCH, window, max_releases)
            .await
        {
            Ok(report) => {
                let swept = report.requeued + report.dead + report.cancelled + report.given_back;
                refusals.answered(sent_at, swept >= SWEEP_BATCH as usize);
                if swept > 0 {
                    count(&metrics.sweeps, "requeued", report.requeued as u64);
                    count(&metrics.sweeps, "dead", report.dead as u64);
                    count(&metrics.sweeps, "cancelled", report.cancelled as u64);
                    count(&metrics.sweeps, "given_back", report.given_back as u64);
                    tracing::info!(
                        requeued = report.requeued,
                        dead = report.dead,
                        cancelled = report.cancelled,
                        given_back = report.given_back,
                        "swept expired leases"
                    )
                }
            }
            Err(e) => {
                refusals.failed(&e, Instant::now());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_opens_at_the_last_answered_sweep_before_a_refusal() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut refusals = Refusals::new(start);
        refusals.answered(start + ms(1_000), false);
        assert_eq!(refusals.window(), None, "nothing refused yet");

        let refused = StoreError::DiskFull("could not extend file".into());
        refusals.failed(&refused, start + ms(2_000));
        refusals.failed(&refused, start + ms(3_000));
        assert_eq!(refusals.window(), Some(RefusedSince(start + ms(1_000))));

        // A full batch keeps the window for the next sweep; a partial one closes it.
        refusals.answered(start + ms(4_000), true);
        assert_eq!(refusals.window(), Some(RefusedSince(start + ms(1_000))));
        refusals.answered(start + ms(4_100), false);
        assert_eq!(refusals.window(), None);
        refusals.failed(&refused, start + ms(5_000));
        assert_eq!(refusals.window(), Some(RefusedSince(start + ms(4_100))));
    }

    #[test]
    fn only_a_refusal_of_the_node_opens_a_window() {
        let start = Instant::now();
        let mut refusals = Refusals::new(start);
        let busy_pool = StoreError::Pool(deadpool_postgres::PoolError::Timeout(
            deadpool_postgres::TimeoutType::Wait,
        ));
        let lost = StoreError::LostClaim {
            job_id: uuid::Uuid::nil(),
            attempt: 1,
        };
        for not_a_refusal in [busy_pool, lost] {
            refusals.failed(&not_a_refusal, start);
            assert_eq!(refusals.window(), None, "{not_a_refusal}");
        }
        let unreachable = StoreError::Pool(deadpool_postgres::PoolError::Timeout(
            deadpool_postgres::TimeoutType::Create,
        ));
        refusals.failed(&unreachable, start);
        assert_eq!(refusals.window(), Some(RefusedSince(start)));
    }
}
