//! The per-target concurrency cap.
//!
//! Before running a segment, a worker takes a permit for the target of the job's next
//! unexecuted step, at most `max_concurrent_per_target` per target on this node. This
//! is a documented approximation: a segment may call several targets, but the
//! inference tier's bottleneck is one box per model, and an uncapped fleet would
//! overwhelm it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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
        let semaphore = {
            // A poisoned lock only means a panic mid-insert; the map is still valid.
            let mut semaphores = self.semaphores.lock().unwrap_or_else(|p| p.into_inner());
            semaphores
                .entry(target.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_target)))
                .clone()
        };
        semaphore.acquire_owned().await.ok()
    }
}
