//! The job state machine, in one place.
//!
//! ```text
//! QUEUED ──claim──► RUNNING ──► COMPLETED | WAITING | FAILED
//!   ▲                  │
//!   ├── retry/sweep ───┘          WAITING ──complete-step──► QUEUED
//!   └──► DEAD (attempts exhausted; only an operator re-enqueues it)
//!
//! WAITING ──rejected response, reject-step, wait ran out──► FAILED
//! WAITING ──wait ran out (onTimeout "dead")──► DEAD
//!
//! QUEUED | WAITING ──cancel-job──► CANCELLED
//! RUNNING ──cancel-job (requested; the worker or the sweeper settles)──► CANCELLED
//!
//! DEAD | FAILED | CANCELLED ──retry-job──► QUEUED      COMPLETED ──retry-job fromStep──► QUEUED
//! ```
//!
//! The engine never moves a job out of a terminal state; only an operator's
//! `retry-job` does ([`JobStatus::can_be_retried`]).
//!
//! The store writes statuses only through [`JobStatus::as_str`] and checks every
//! transition it performs with [`JobStatus::can_become`]; the migrations' CHECK
//! constraint lists the same seven names.

use std::fmt;
use std::str::FromStr;

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobStatus {
    /// Claimable once `run_after` is in the past.
    Queued,
    /// Leased to exactly one worker.
    Running,
    /// Parked on an external step until `complete-step` answers.
    Waiting,
    /// Finished; the verdict carries the one-line summary.
    Completed,
    /// A validation verdict or a non-retryable error.
    Failed,
    /// Retries exhausted: the dead-letter state; only an operator's `retry-job` re-enqueues it.
    Dead,
    /// Stopped by an operator (`cancel-job`); never claimed again.
    Cancelled,
}

impl JobStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [JobStatus; 7] = [
        JobStatus::Queued,
        JobStatus::Running,
        JobStatus::Waiting,
        JobStatus::Completed,
        JobStatus::Failed,
        JobStatus::Dead,
        JobStatus::Cancelled,
    ];

    /// The name stored in `workflow_run.status`.
    pub const fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "QUEUED",
            JobStatus::Running => "RUNNING",
            JobStatus::Waiting => "WAITING",
            JobStatus::Completed => "COMPLETED",
            JobStatus::Failed => "FAILED",
            JobStatus::Dead => "DEAD",
            JobStatus::Cancelled => "CANCELLED",
        }
    }

    /// True for the states the engine never moves a job out of (an operator's
    /// `retry-job` may: see [`JobStatus::can_be_retried`]).
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Completed | JobStatus::Failed | JobStatus::Dead | JobStatus::Cancelled
        )
    }

    /// The legal transitions of the seed's state machine.
    pub const fn can_become(self, next: JobStatus) -> bool {
        use JobStatus::*;
        matches!(
            (self, next),
            // a claim
            (Queued, Running)
            // attempts exhausted before a claim could run it again
            | (Queued, Dead)
            // settle: done, parked, failed loud, retried / swept / released, exhausted
            | (Running, Completed)
            | (Running, Waiting)
            | (Running, Failed)
            | (Running, Queued)
            | (Running, Dead)
            // complete-step accepted; its response rejected, reject-step, or the wait
            // ran out; the wait ran out with onTimeout "dead"
            | (Waiting, Queued)
            | (Waiting, Failed)
            | (Waiting, Dead)
            // an operator's cancel-job: at once, or settled by the worker holding it
            | (Queued, Cancelled)
            | (Waiting, Cancelled)
            | (Running, Cancelled)
            // an operator's retry-job (COMPLETED only from a named step)
            | (Dead, Queued)
            | (Failed, Queued)
            | (Cancelled, Queued)
            | (Completed, Queued)
        )
    }

    /// The states an operator's `retry-job` re-queues: DEAD, FAILED and CANCELLED;
    /// COMPLETED too, when a step to re-run from is named.
    pub const fn can_be_retried(self, from_a_step: bool) -> bool {
        match self {
            JobStatus::Dead | JobStatus::Failed | JobStatus::Cancelled => true,
            JobStatus::Completed => from_a_step,
            _ => false,
        }
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of the seven.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown job status '{0}': expected one of QUEUED, RUNNING, WAITING, COMPLETED, FAILED, DEAD, CANCELLED"
)]
pub struct UnknownStatus(pub String);

impl FromStr for JobStatus {
    type Err = UnknownStatus;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        JobStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == name)
            .ok_or_else(|| UnknownStatus(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for status in JobStatus::ALL {
            assert_eq!(status.as_str().parse::<JobStatus>(), Ok(status));
        }
        assert_eq!(
            "BOGUS".parse::<JobStatus>(),
            Err(UnknownStatus("BOGUS".into()))
        );
        assert!("queued".parse::<JobStatus>().is_err(), "names are exact");
    }

    #[test]
    fn terminal_states_go_nowhere_but_back_to_the_queue_by_an_operator() {
        for from in JobStatus::ALL.into_iter().filter(|s| s.is_terminal()) {
            for to in JobStatus::ALL {
                assert_eq!(
                    from.can_become(to),
                    to == JobStatus::Queued,
                    "{from} -> {to}"
                );
            }
            assert!(from.can_be_retried(true), "{from}");
            assert_eq!(from.can_be_retried(false), from != JobStatus::Completed);
        }
        for live in [JobStatus::Queued, JobStatus::Running, JobStatus::Waiting] {
            assert!(!live.can_be_retried(true), "{live}");
        }
    }

    #[test]
    fn only_a_claim_starts_a_run_and_only_a_retry_revives_the_dead() {
        for from in JobStatus::ALL {
            assert_eq!(
                from.can_become(JobStatus::Running),
                from == JobStatus::Queued
            );
            assert_eq!(JobStatus::Dead.can_become(from), from == JobStatus::Queued);
        }
        assert!(JobStatus::Waiting.can_become(JobStatus::Queued));
        assert!(
            JobStatus::Waiting.can_become(JobStatus::Dead),
            "a wait ran out"
        );
        assert!(!JobStatus::Waiting.can_become(JobStatus::Completed));
    }

    #[test]
    fn only_live_jobs_can_be_cancelled() {
        for from in JobStatus::ALL {
            assert_eq!(
                from.can_become(JobStatus::Cancelled),
                matches!(
                    from,
                    JobStatus::Queued | JobStatus::Waiting | JobStatus::Running
                ),
                "{from}"
            );
        }
        assert!(JobStatus::Cancelled.is_terminal());
    }
}
