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
//! database answers again, the leases that ran out in the refusal's window (see
//! [`Refusals::window`]) are requeued with their attempt given back, as a release
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
/// current refusal was answered, and, since then, when it was first refused and
/// whether a refusal was a full disk.
#[derive(Debug)]
struct Refusals {
    /// The node's lease: a live worker renews every third of it.
    lease: Duration,
    answered_at: Instant,
    /// The first refusal since `answered_at` (none: no refusal since).
    first_refused_at: Option<Instant>,
    disk_full: bool,
}

impl Refusals {
    /// Nothing refused yet; the stretch before `started` is not the sweeper's to judge.
    fn new(started: Instant, lease: Duration) -> Refusals {
        Refusals {
            lease,
            answered_at: started,
            first_refused_at: None,
            disk_full: false,
        }
    }

    /// A store call at `at` failed: when the database refused the node (see
    /// [`StoreError::is_refusal`]), the sweeper saw it refuse then.
    fn failed(&mut self, error: &StoreError, at: Instant) {
        if error.is_refusal() {
            self.first_refused_at.get_or_insert(at);
            self.disk_full |= error.is_disk_full();
        }
    }

    /// The leases whose attempt the next sweep gives back, if the database refused
    /// the sweeper since its last answered sweep. An unreachable database refuses
    /// everything: the refusal began after that sweep, and a live worker renews every
    /// third of a lease, so a lease the refusal cost runs out at least two thirds of a
    /// lease after it; the window opens half a lease after the last answered sweep (a
    /// margin for a slow renewal), and an earlier expiry was a worker gone already. A
    /// full disk refuses only the writes that need a new page, so the sweeps that
    /// found nothing to write were answered while renewals failed: the window opens a
    /// lease before the first refused sweep (which found the first lease it cost).
    fn window(&self) -> Option<RefusedSince> {
        let first_refused_at = self.first_refused_at?;
        let opens = if self.disk_full {
            first_refused_at
                .checked_sub(self.lease)
                .unwrap_or(self.answered_at)
        } else {
            self.answered_at + self.lease / 2
        };
        Some(RefusedSince(opens))
    }

    /// A sweep sent at `sent_at` was answered and swept everything expired: the
    /// refusal, if any, is over.
    fn answered(&mut self, sent_at: Instant) {
        self.first_refused_at = None;
        self.disk_full = false;
        self.answered_at = sent_at;
    }
}

/// Sweeps every `interval` until `shutdown`; `lease` (the node's) and `max_releases`
/// bound the attempts given back (see the module docs).
pub async fn sweep_loop(
    store: Store,
    interval: Duration,
    lease: Duration,
    max_releases: i32,
    metrics: JobsMetrics,
    shutdown: CancellationToken,
) {
    let mut refusals = Refusals::new(Instant::now(), lease);
    loop {
        // Event stamps follow the database's clock (see `store::clock`).
        if let Err(e) = store.read_database_clock().await {
            refusals.failed(&e, Instant::now());
            tracing::debug!(error = %e, "reading the database's clock failed; retrying at the next interval");
        }
        sweep_expired_leases(&store, &mut refusals, max_releases, &metrics, &shutdown).await;
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

/// Sweeps the expired leases, batch after batch while they come back full (a
/// refusal's backlog is swept at once, so its window closes before leases that run
/// out later are judged by it).
async fn sweep_expired_leases(
    store: &Store,
    refusals: &mut Refusals,
    max_releases: i32,
    metrics: &JobsMetrics,
    shutdown: &CancellationToken,
) {
    let count = JobsMetrics::count;
    let sent_at = Instant::now();
    loop {
        match store
            .sweep_expired_leases(SWEEP_BATCH, refusals.window(), max_releases)
            .await
        {
            Ok(report) => {
                let swept = report.requeued + report.dead + report.cancelled + report.given_back;
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
                if swept < SWEEP_BATCH as usize || shutdown.is_cancelled() {
                    refusals.answered(sent_at);
                    return;
                }
            }
            Err(e) => {
                refusals.failed(&e, Instant::now());
                tracing::warn!(error = %e, "sweeping expired leases failed; retrying at the next interval");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_opens_half_a_lease_after_the_last_answered_sweep_before_an_outage() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut refusals = Refusals::new(start, ms(2_000));
        refusals.answered(start + ms(1_000));
        assert_eq!(refusals.window(), None, "nothing refused yet");

        let unreachable = StoreError::Pool(deadpool_postgres::PoolError::Timeout(
            deadpool_postgres::TimeoutType::Create,
        ));
        refusals.failed(&unreachable, start + ms(2_000));
        refusals.failed(&unreachable, start + ms(3_000));
        assert_eq!(refusals.window(), Some(RefusedSince(start + ms(2_000))));

        refusals.answered(start + ms(4_000));
        assert_eq!(refusals.window(), None, "an answered sweep closes it");
        refusals.failed(&unreachable, start + ms(5_000));
        assert_eq!(refusals.window(), Some(RefusedSince(start + ms(5_000))));
    }

    #[test]
    fn a_full_disk_opens_the_window_a_lease_before_its_first_refused_sweep() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut refusals = Refusals::new(start, ms(2_000));
        // Sweeps that found nothing to write were answered while renewals failed.
        refusals.answered(start + ms(9_000));
        let full = StoreError::DiskFull("could not extend file".into());
        refusals.failed(&full, start + ms(9_500));
        refusals.failed(&full, start + ms(10_000));
        assert_eq!(refusals.window(), Some(RefusedSince(start + ms(7_500))));
    }

    #[test]
    fn only_a_refusal_of_the_node_opens_a_window() {
        let start = Instant::now();
        let mut refusals = Refusals::new(start, Duration::ZERO);
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
