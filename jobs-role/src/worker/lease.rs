//! The worker's own view of its lease on a job: valid until a little before the lease
//! would end if counted from the claim or from the last renewal the store confirmed,
//! each counted from when it was *sent*. The monotonic clock keeps counting while the
//! process is frozen (SIGSTOP, a paused VM, a long GC-like stall), so a worker that
//! wakes past it knows, before any database round trip, that another node may hold the
//! job and may have run the next step already: it must not call it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The share of the lease a claim is trusted for: the rest covers the drift between
/// this process's clock and the database's, and a renewal's own time on the wire.
const TRUSTED_TENTHS: u32 = 9;

/// See the module docs.
#[derive(Debug)]
pub struct LeaseClock {
    base: Instant,
    lease: Duration,
    /// Milliseconds after `base` until which the claim is trusted.
    valid_until_ms: AtomicU64,
}

impl LeaseClock {
    /// A clock for a claim sent at `asked_at` with `lease`.
    pub fn new(asked_at: Instant, lease: Duration) -> LeaseClock {
        let clock = LeaseClock {
            base: asked_at,
            lease,
            valid_until_ms: AtomicU64::new(0),
        };
        clock.renewed(asked_at);
        clock
    }

    /// A renewal sent at `sent_at` was confirmed.
    pub fn renewed(&self, sent_at: Instant) {
        let trusted = self.lease * TRUSTED_TENTHS / 10;
        let until = sent_at.saturating_duration_since(self.base) + trusted;
        let until_ms = u64::try_from(until.as_millis()).unwrap_or(u64::MAX);
        self.valid_until_ms.fetch_max(until_ms, Ordering::SeqCst);
    }

    /// Whether the claim may have lapsed by now.
    pub fn lapsed(&self) -> bool {
        let elapsed = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        elapsed >= self.valid_until_ms.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_lapses_short_of_its_lease_unless_renewed() {
        let lease = Duration::from_secs(10);
        let fresh = LeaseClock::new(Instant::now(), lease);
        assert!(!fresh.lapsed());
        // Asked 9.5 s ago: past the trusted 9 s, though the lease itself has 0.5 s left.
        let asked = Instant::now()
            .checked_sub(Duration::from_millis(9_500))
            .expect("the machine has been up for 10 s");
        let stale = LeaseClock::new(asked, lease);
        assert!(stale.lapsed());
        stale.renewed(Instant::now());
        assert!(!stale.lapsed(), "a confirmed renewal extends it");
        // An older renewal confirmed late never shortens it.
        stale.renewed(asked);
        assert!(!stale.lapsed());
    }
}
