//! The per-target concurrency cap.
//!
//! Before running a segment, a worker takes a permit for the target of the job's next
//! ready step, at most `max_concurrent_per_target` per target on this node, and holds
//! it for the segment. This is a documented approximation: a segment may call several
//! targets one after another, but the inference tier's bottleneck is one box per
//! model, and an uncapped fleet would overwhelm it. A call that would run beside the
//! segment's other calls (parallel branches) needs a permit of its own target, taken
//! without waiting ([`TargetLimits::try_acquire`]); without one it waits for a call of
//! its segment to end, so a segment never waits for a permit while holding one.
//!
//! Targets come from user input, so the map is bounded: once it holds more than
//! [`MAX_IDLE_TARGETS`] targets, every semaphore nobody holds or waits for is dropped
//! (a fresh one has all its permits, so dropping an idle one loses nothing).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Targets kept before idle ones are dropped.
pub const MAX_IDLE_TARGETS: usize = 1024;

/// One semaphore per target.
pub struct TargetLimits {
    per_target: usize,
    semaphores: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl TargetLimits {
    /// At most `per_target` permits per target.
    pub fn new(per_target: usize) -> Self {
        TargetLimits {
            per_target,
            semaphores: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for a permit for `target`. `None` only if the semaphore was closed,
    /// which this type never does.
    pub async fn acquire(&self, target: &str) -> Option<OwnedSemaphorePermit> {
        self.semaphore(target).acquire_owned().await.ok()
    }

    /// A permit for `target` if one is free now, without waiting.
    pub fn try_acquire(&self, target: &str) -> Option<OwnedSemaphorePermit> {
        self.semaphore(target).try_acquire_owned().ok()
    }

    /// The semaphore of `target`, made on first use.
    fn semaphore(&self, target: &str) -> Arc<Semaphore> {
        {
            // A poisoned lock only means a panic mid-insert; the map is still valid.
            let mut semaphores = self.semaphores.lock().unwrap_or_else(|p| p.into_inner());
            if semaphores.len() > MAX_IDLE_TARGETS {
                // Only the map holds an idle semaphore: a waiter holds a clone, and a
                // permit holds one inside its OwnedSemaphorePermit.
                semaphores.retain(|_, semaphore| Arc::strong_count(semaphore) > 1);
            }
            semaphores
                .entry(target.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_target)))
                .clone()
        }
    }

    /// Each target in use or waited for: (target, permits in use, callers waiting).
    /// Read from the semaphores' reference counts (the map holds one, each permit and
    /// each waiter one), so a caller between taking the semaphore and waiting on it
    /// counts as waiting.
    pub fn usage(&self) -> Vec<(String, usize, usize)> {
        let semaphores = self.semaphores.lock().unwrap_or_else(|p| p.into_inner());
        semaphores
            .iter()
            .filter_map(|(target, semaphore)| {
                let in_use = self
                    .per_target
                    .saturating_sub(semaphore.available_permits());
                let holders = Arc::strong_count(semaphore).saturating_sub(1);
                let waiting = holders.saturating_sub(in_use);
                (in_use > 0 || waiting > 0).then(|| (target.clone(), in_use, waiting))
            })
            .collect()
    }

    /// Targets currently kept (for tests and metrics).
    pub fn targets(&self) -> usize {
        self.semaphores
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_targets_are_dropped_and_held_ones_kept() {
        let limits = TargetLimits::new(1);
        let held = limits.acquire("held:1").await.expect("a permit");
        for i in 0..MAX_IDLE_TARGETS + 10 {
            drop(limits.acquire(&format!("t{i}:1")).await);
        }
        assert!(limits.targets() <= MAX_IDLE_TARGETS + 1);
        // The held target still caps: a second permit must wait.
        let second = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            limits.acquire("held:1"),
        )
        .await;
        assert!(
            second.is_err(),
            "the held target's cap survived the pruning"
        );
        drop(held);
        assert!(limits.acquire("held:1").await.is_some());
    }
}
