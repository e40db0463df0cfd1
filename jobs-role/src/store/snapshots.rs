//! Workflow snapshots, each filed once and named by digest (migration V21): the rows
//! written before it moved out in the background, and the snapshots no job names
//! pruned under the lock that keeps a racing submission's snapshot.

use super::*;

/// What one batch of [`Store::move_inline_snapshots`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MovedSnapshots {
    /// The last job id the batch looked at; `None` when no row after the cursor still
    /// holds its snapshot.
    pub last: Option<Uuid>,
    /// Rows whose snapshot moved.
    pub moved: u64,
}

/// What one batch of [`Store::prune_snapshots`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrunedSnapshots {
    /// The last digest the batch looked at; `None` when there is none after the cursor.
    pub last: Option<String>,
    /// Snapshots deleted (no job named them).
    pub deleted: u64,
}

/// How many times [`Store::prune_snapshots`] tries the snapshot lock.
pub const SNAPSHOT_LOCK_TRIES: u32 = 25;

/// The pause between two such tries.
pub const SNAPSHOT_LOCK_TRY_GAP: Duration = Duration::from_millis(20);

impl Store {
    /// Moves the snapshots of up to `batch` rows after `after` (in id order) out of the
    /// rows into `workflow_snapshot`, rows another transaction holds skipped (a later
    /// pass takes them). Safe to run twice and beside submissions and the pruner.
    pub async fn move_inline_snapshots(
        &self,
        after: Option<Uuid>,
        batch: i64,
    ) -> Result<MovedSnapshots, StoreError> {
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        tx.batch_execute(sql::SNAPSHOT_WORK_SETTINGS).await?;
        let row = tx
            .query_one(sql::MOVE_INLINE_SNAPSHOTS, &[&after, &batch])
            .await?;
        tx.commit().await?;
        Ok(MovedSnapshots {
            last: row.get("last"),
            moved: row.get::<_, i64>("moved").unsigned_abs(),
        })
    }

    /// Whether any job row still holds its snapshot (a whole-table scan).
    pub async fn any_inline_snapshot(&self) -> Result<bool, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query_one(sql::ANY_INLINE_SNAPSHOT, &[])
            .await?
            .get(0))
    }

    /// Whether V21's foreign key is validated: every row names a filed snapshot, and
    /// nothing is left to move.
    pub async fn snapshot_key_validated(&self) -> Result<bool, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query_opt(sql::SNAPSHOT_KEY_VALIDATED, &[])
            .await?
            .is_some_and(|row| row.get(0)))
    }

    /// Validates V21's foreign key (a scan that blocks no reader or writer).
    pub async fn validate_snapshot_key(&self) -> Result<(), StoreError> {
        let client = self.shared().await?;
        client.batch_execute(sql::VALIDATE_SNAPSHOT_KEY).await?;
        Ok(())
    }

    /// Deletes, of up to `batch` snapshots after `after` (in digest order), those no
    /// job names, under the pruner's lock and the snapshot lock taken exclusive (so
    /// no submission is between finding a snapshot filed and naming it in its row).
    /// The snapshot lock is only tried, never waited for (a waiting pruner would hold
    /// up every submission behind it): [`SNAPSHOT_LOCK_TRIES`] tries
    /// [`SNAPSHOT_LOCK_TRY_GAP`] apart, then `None`, as when another node holds the
    /// pruner's lock.
    pub async fn prune_snapshots(
        &self,
        after: Option<&str>,
        batch: i64,
    ) -> Result<Option<PrunedSnapshots>, StoreError> {
        let mut client = self.shared().await?;
        for _ in 0..SNAPSHOT_LOCK_TRIES {
            let tx = client.transaction().await?;
            let locked: bool = tx.query_one(sql::TRY_LOCK_PRUNER, &[]).await?.get(0);
            if !locked {
                tx.rollback().await?;
                return Ok(None);
            }
            tx.batch_execute(sql::SNAPSHOT_WORK_SETTINGS).await?;
            let free: bool = tx.query_one(sql::TRY_LOCK_SNAPSHOTS, &[]).await?.get(0);
            if !free {
                tx.rollback().await?;
                tokio::time::sleep(SNAPSHOT_LOCK_TRY_GAP).await;
                continue;
            }
            let row = tx
                .query_one(sql::PRUNE_SNAPSHOTS, &[&after, &batch])
                .await?;
            tx.commit().await?;
            return Ok(Some(PrunedSnapshots {
                last: row.get("last"),
                deleted: row.get::<_, i64>("deleted").unsigned_abs(),
            }));
        }
        Ok(None)
    }

    /// Up to 10 jobs whose digest names no filed snapshot (what keeps V21's foreign
    /// key from validating).
    pub async fn rows_without_a_snapshot(&self) -> Result<Vec<Uuid>, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query(sql::ROWS_WITHOUT_A_SNAPSHOT, &[])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect())
    }

    /// A filed snapshot by its digest, or `None`.
    pub async fn snapshot(&self, digest: &str) -> Result<Option<Value>, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query_opt(sql::SNAPSHOT_BY_DIGEST, &[&digest])
            .await?
            .map(|row| row.get(0)))
    }
}
