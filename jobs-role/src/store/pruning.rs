//! Retention: deleting finished jobs and published events past their retention, in
//! short batches under a lock only one node holds at a time.

use super::*;

/// The most batches one round deletes per kind of row, so a backlog is worked off
/// over several rounds (each kind gets its turn) and a round always ends.
pub const MAX_BATCHES_PER_ROUND: usize = 100;

/// What one pruning round deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Jobs deleted (with their outbox rows), by status.
    pub jobs: Vec<(JobStatus, u64)>,
    /// PUBLISHED outbox rows deleted.
    pub published_events: u64,
    /// Remembered ids of pruned jobs forgotten.
    pub pruned_ids: u64,
    /// Dead-lettered request records deleted.
    pub rejects: u64,
    /// Workflow snapshots no job named any more, deleted.
    pub snapshots: u64,
    /// Another node was pruning: this round stopped there.
    pub skipped: bool,
}

impl Pruned {
    /// Jobs deleted, all statuses.
    pub fn job_count(&self) -> u64 {
        self.jobs.iter().map(|(_, n)| n).sum()
    }
}

/// Which of a job's events must be out before the job may be deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventsOut {
    /// Every outbox row PUBLISHED (the Kafka lanes are on).
    Published,
    /// None dead-lettered or held (the lanes are off: nothing is ever published).
    NotDeadLettered,
}

impl Store {
    /// One pruning round: for each status in `jobs`, the jobs that finished longer
    /// than its retention ago and whose events are out (`events_out`), then the
    /// PUBLISHED outbox rows older than `published_events`, `batch` rows per
    /// transaction, at most [`MAX_BATCHES_PER_ROUND`] batches each. Each transaction
    /// first takes the pruner's lock; when another node holds it, the round stops
    /// (`skipped`, with what it deleted so far). Rows another transaction holds are
    /// skipped; a job's outbox rows the relay is publishing are waited for, at most
    /// 2 s, so the delete sees whether they were dead-lettered.
    pub async fn prune(
        &self,
        jobs: &[(JobStatus, Duration)],
        published_events: Option<Duration>,
        events_out: EventsOut,
        batch: i64,
    ) -> Result<Pruned, StoreError> {
        let mut pruned = Pruned::default();
        let require_published = events_out == EventsOut::Published;
        for &(status, retention) in jobs {
            debug_assert!(status.is_terminal());
            let mut deleted = 0;
            for _ in 0..MAX_BATCHES_PER_ROUND {
                let Some(n) = self
                    .prune_jobs(status, retention, require_published, batch)
                    .await?
                else {
                    pruned.jobs.push((status, deleted));
                    pruned.skipped = true;
                    return Ok(pruned);
                };
                deleted += n.deleted;
                if n.locked < batch.unsigned_abs() {
                    break;
                }
            }
            pruned.jobs.push((status, deleted));
        }
        if let Some(retention) = published_events {
            for _ in 0..MAX_BATCHES_PER_ROUND {
                let Some(n) = self.prune_published_events(retention, batch).await? else {
                    pruned.skipped = true;
                    return Ok(pruned);
                };
                pruned.published_events += n;
                if n < batch.unsigned_abs() {
                    break;
                }
            }
        }
        Ok(pruned)
    }

    /// The records kept beside the jobs: remembered ids of pruned jobs older than
    /// `pruned_ids`, and dead-lettered request records older than `rejects` (when
    /// set), `batch` rows per transaction, at most [`MAX_BATCHES_PER_ROUND`] batches
    /// each, under the pruner's lock (`skipped` when another node holds it).
    pub async fn prune_records(
        &self,
        pruned_ids: Duration,
        rejects: Option<Duration>,
        batch: i64,
    ) -> Result<Pruned, StoreError> {
        let mut pruned = Pruned::default();
        let kinds = [
            (sql::PRUNE_PRUNED_IDS, Some(pruned_ids)),
            (sql::PRUNE_REQUEST_REJECTS, rejects),
        ];
        for (statement, retention) in kinds {
            let Some(retention) = retention else { continue };
            for _ in 0..MAX_BATCHES_PER_ROUND {
                let Some(n) = self.delete_batch(statement, retention, batch).await? else {
                    pruned.skipped = true;
                    return Ok(pruned);
                };
                if statement == sql::PRUNE_PRUNED_IDS {
                    pruned.pruned_ids += n;
                } else {
                    pruned.rejects += n;
                }
                if n < batch.unsigned_abs() {
                    break;
                }
            }
        }
        Ok(pruned)
    }

    /// One batch of `statement` (`$1` retention in ms, `$2` batch) under the pruner's
    /// lock; `None` when another node holds it.
    async fn delete_batch(
        &self,
        statement: &str,
        retention: Duration,
        batch: i64,
    ) -> Result<Option<u64>, StoreError> {
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        if !take_pruner_lock(&tx).await? {
            tx.rollback().await?;
            return Ok(None);
        }
        let deleted = tx.execute(statement, &[&millis(retention), &batch]).await?;
        tx.commit().await?;
        Ok(Some(deleted))
    }

    /// One batch of jobs: lock the candidates, lock their outbox rows, delete the
    /// ones whose events are still out. `None` when another node holds the lock.
    async fn prune_jobs(
        &self,
        status: JobStatus,
        retention: Duration,
        require_published: bool,
        batch: i64,
    ) -> Result<Option<JobBatch>, StoreError> {
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        if !take_pruner_lock(&tx).await? {
            tx.rollback().await?;
            return Ok(None);
        }
        let candidates: Vec<Uuid> = tx
            .query(
                sql::PRUNABLE_JOBS,
                &[
                    &status.as_str(),
                    &millis(retention),
                    &batch,
                    &require_published,
                ],
            )
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let mut done = JobBatch {
            locked: candidates.len() as u64,
            deleted: 0,
        };
        if !candidates.is_empty() {
            tx.execute(sql::LOCK_PRUNABLE_EVENTS, &[&candidates])
                .await?;
            done.deleted = tx
                .execute(sql::PRUNE_JOBS, &[&candidates, &require_published])
                .await?;
        }
        tx.commit().await?;
        Ok(Some(done))
    }

    /// One batch of PUBLISHED outbox rows; `None` when another node holds the lock.
    async fn prune_published_events(
        &self,
        retention: Duration,
        batch: i64,
    ) -> Result<Option<u64>, StoreError> {
        self.delete_batch(sql::PRUNE_PUBLISHED_EVENTS, retention, batch)
            .await
    }
}

/// Takes the pruner's lock for `tx`, bounding its waits for row locks; false when
/// another node holds the lock.
async fn take_pruner_lock(tx: &Transaction<'_>) -> Result<bool, StoreError> {
    let locked: bool = tx.query_one(sql::TRY_LOCK_PRUNER, &[]).await?.get(0);
    if locked {
        tx.batch_execute(sql::PRUNE_LOCK_TIMEOUT).await?;
    }
    Ok(locked)
}

/// What one batch of jobs came to.
struct JobBatch {
    /// Candidates locked (a full batch means there may be more).
    locked: u64,
    /// Deleted after the re-check.
    deleted: u64,
}
