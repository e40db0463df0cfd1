//! Writing through a database outage: a write after a claim (a checkpoint, a
//! settlement, a release) that fails for a reason that may pass is sent again, with
//! backoff, for as long as the node holds the claim. The caller runs it beside the
//! lease renewal (which ends it when the claim is lost), so a settlement that could
//! not be written is written when the database answers again, not replaced by a sweep
//! that would charge the attempt.
//!
//! Sending a write again is safe because every write after a claim is conditional
//! (see `store::group_commit`): a second application matches nothing and is answered
//! as the first one's outcome.

use std::future::Future;
use std::time::Duration;

use uuid::Uuid;

use crate::store::StoreError;

/// The first wait after a failed write.
const FIRST_WAIT: Duration = Duration::from_millis(100);
/// The longest wait between two tries.
const LONGEST_WAIT: Duration = Duration::from_secs(2);

/// Whether a failed write may succeed if sent again: the database was unreachable, the
/// pool had no connection, a batch failed whole or went unanswered, or PostgreSQL
/// answered with an error of a class that passes (08 connection, 40 rolled back: a
/// deadlock or serialization failure, 53 insufficient resources, 55 a lock not
/// available, 57 an operator intervention: a restart, a cancelled statement, 58 a
/// system error). A lost claim, a refused value, an illegal transition, an event that
/// breaks the contract, or a statement PostgreSQL will refuse every time (a
/// permission, a missing object) never will: retried, it would hold the job's lease
/// for ever.
pub fn may_pass(error: &StoreError) -> bool {
    match error {
        StoreError::Database(e) => match e.as_db_error() {
            Some(db) => ["08", "40", "53", "55", "57", "58"]
                .iter()
                .any(|class| db.code().code().starts_with(class)),
            None => true,
        },
        // The flusher stops only once every job has let go of it: a write that finds
        // it stopped will never be written by it.
        StoreError::GroupCommit(why) => !why.contains("has stopped"),
        StoreError::Pool(_) | StoreError::DiskFull(_) => true,
        _ => false,
    }
}

/// Exponential waits from [`FIRST_WAIT`], doubling up to [`LONGEST_WAIT`].
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: FIRST_WAIT }
    }
}

impl Backoff {
    /// The wait before the next try.
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(LONGEST_WAIT);
        wait
    }
}

/// Runs `write` until it succeeds or fails for a reason that will not pass, waiting
/// with [`Backoff`] between tries, while `keep_trying` says so (checked after each
/// failure). Logs the first failure and the recovery.
pub async fn until_written<F, Fut, T>(
    what: &str,
    job_id: Uuid,
    mut keep_trying: impl FnMut() -> bool,
    mut write: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut backoff = Backoff::default();
    let mut failures = 0u32;
    loop {
        match write().await {
            Err(error) if may_pass(&error) && keep_trying() => {
                failures += 1;
                let wait = backoff.next_wait();
                if failures == 1 {
                    tracing::warn!(%job_id, %error, "writing the {what} failed; trying again while the node holds the claim");
                } else {
                    tracing::debug!(%job_id, %error, failures, "writing the {what} failed again");
                }
                tokio::time::sleep(wait).await;
            }
            written => {
                if failures > 0 && written.is_ok() {
                    tracing::info!(%job_id, failures, "the {what} was written after the database answered again");
                }
                return written;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_a_ceiling() {
        let mut backoff = Backoff::default();
        let waits: Vec<u128> = (0..7).map(|_| backoff.next_wait().as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 2000, 2000]);
    }

    #[test]
    fn only_failures_that_may_pass_are_retried() {
        assert!(may_pass(&StoreError::GroupCommit("unanswered".into())));
        assert!(!may_pass(&StoreError::LostClaim {
            job_id: Uuid::nil(),
            attempt: 1
        }));
        assert!(!may_pass(&StoreError::unstorable("response")));
    }

    #[tokio::test]
    async fn a_write_is_sent_again_until_it_lands() {
        let mut tries = 0;
        let written = until_written(
            "checkpoint",
            Uuid::nil(),
            || true,
            || {
                tries += 1;
                let answer = if tries < 4 {
                    Err(StoreError::GroupCommit("no connection".into()))
                } else {
                    Ok(tries)
                };
                async move { answer }
            },
        )
        .await;
        assert_eq!(written.ok(), Some(4));
    }

    #[tokio::test]
    async fn it_gives_up_when_told_to() {
        let written: Result<(), StoreError> = until_written(
            "settlement",
            Uuid::nil(),
            || false,
            || async { Err(StoreError::GroupCommit("no connection".into())) },
        )
        .await;
        assert!(matches!(written, Err(StoreError::GroupCommit(_))));
    }
}
