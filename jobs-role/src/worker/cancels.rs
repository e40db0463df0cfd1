//! How a running job hears that an operator asked to cancel it: the node's running
//! jobs, each with its wake-up, and the cancels heard for jobs not (yet) registered.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use uuid::Uuid;

use super::Worker;

/// A running job's registration for [`Worker::hear_cancel`], removed on drop.
pub(super) struct CancelWatch<'a> {
    pub(super) worker: &'a Worker,
    pub(super) job_id: Uuid,
    pub(super) cancel: Arc<Notify>,
}

impl Drop for CancelWatch<'_> {
    fn drop(&mut self) {
        let mut cancels = self
            .worker
            .cancels
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // Only its own entry: a newer claim of the same job on this node (while an old
        // task winds down) has replaced it.
        if cancels
            .running
            .get(&self.job_id)
            .is_some_and(|watch| Arc::ptr_eq(watch, &self.cancel))
        {
            cancels.running.remove(&self.job_id);
        }
    }
}

/// The least time between two lease renewals a heard cancel triggers.
pub(super) const CANCEL_CHECK_GAP: Duration = Duration::from_millis(250);

/// How long a cancel heard for a job this node does not run (yet) is kept.
pub(super) const EARLY_CANCEL_KEPT: Duration = Duration::from_secs(10);
/// Most such cancels kept (notifications for jobs other nodes run are most of them):
/// room for a `cancel-jobs` of 10,000 RUNNING jobs, a few hundred kilobytes.
pub(super) const EARLY_CANCELS_KEPT: usize = 16_384;

/// The node's running jobs, for [`Worker::hear_cancel`].
#[derive(Default)]
pub(super) struct Cancels {
    pub(super) running: HashMap<Uuid, Arc<Notify>>,
    /// Cancels heard for jobs not registered, with when.
    pub(super) early: HashMap<Uuid, std::time::Instant>,
    /// When `early`, full, may next be swept of expired entries.
    pub(super) next_sweep: Option<std::time::Instant>,
}

impl Cancels {
    pub(super) fn heard_early(&mut self, job_id: Uuid) {
        let now = std::time::Instant::now();
        // Forget the expired ones only when full, and at most once a second: a burst
        // of notifications (a bulk cancel) costs a scan now and then, not one each.
        if self.early.len() >= EARLY_CANCELS_KEPT && self.next_sweep.is_none_or(|at| now >= at) {
            self.early
                .retain(|_, heard| now.duration_since(*heard) < EARLY_CANCEL_KEPT);
            self.next_sweep = Some(now + Duration::from_secs(1));
        }
        if self.early.len() < EARLY_CANCELS_KEPT {
            self.early.insert(job_id, now);
        }
    }

    pub(super) fn take_early(&mut self, job_id: Uuid) -> bool {
        if self.early.is_empty() {
            return false;
        }
        self.early
            .remove(&job_id)
            .is_some_and(|heard| heard.elapsed() < EARLY_CANCEL_KEPT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_heard_before_its_job_registers_is_kept_for_a_while_and_taken_once() {
        let mut cancels = Cancels::default();
        let (heard, other) = (Uuid::now_v7(), Uuid::now_v7());
        cancels.heard_early(heard);
        assert!(!cancels.take_early(other));
        assert!(cancels.take_early(heard));
        assert!(!cancels.take_early(heard), "taken once");
    }

    #[test]
    fn cancels_heard_for_jobs_of_other_nodes_are_bounded() {
        let mut cancels = Cancels::default();
        for _ in 0..EARLY_CANCELS_KEPT * 3 {
            cancels.heard_early(Uuid::now_v7());
        }
        assert_eq!(cancels.early.len(), EARLY_CANCELS_KEPT);
    }
}
