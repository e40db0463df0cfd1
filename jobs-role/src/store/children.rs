//! Child workflows: a parent's claim starts its children (rows written as any
//! submission is, their parent named, fenced on the parent's claim), and the reads of
//! a parent's children. A child's end answers its parent through migration V25's
//! trigger, whatever statement ends it.

use super::submissions::insert_children;
use super::*;

/// One child of a parent's step.
#[derive(Debug, Clone)]
pub struct NewChild {
    /// The child's row, its id derived from its slot.
    pub job: NewJob,
    /// The element of the parent's step it answers (0 without `forEach`).
    pub item: i32,
}

/// A child as the parent's `get-job` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildRow {
    /// The child.
    pub job_id: Uuid,
    /// Its workflow.
    pub workflow_name: String,
    /// Its status.
    pub status: String,
    /// The parent's step it answers.
    pub step: String,
    /// The element it answers.
    pub item: i32,
}

impl Store {
    /// Starts the children of `claim`'s step `step` in one transaction, while the
    /// claim holds (a lost claim, or one an operator asked to cancel, starts none:
    /// [`StoreError::LostClaim`]). A child whose id exists already is left as it is,
    /// so a claim that starts the same children again (a resend, a crash before the
    /// park) makes none twice; an id taken by a job that is not this parent's child
    /// (a client chose it) is [`StoreError::Conflict`].
    pub async fn start_children(
        &self,
        claim: &Claim,
        step: &str,
        children: &[NewChild],
    ) -> Result<(), StoreError> {
        if children.is_empty() {
            return Ok(());
        }
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        tx.batch_execute(sql::SUBMISSION_SETTINGS).await?;
        let Some(held) = tx
            .query_opt(
                sql::HOLD_PARENT,
                &[&claim.job_id, &claim.owner, &claim.token],
            )
            .await?
        else {
            return Err(claim.lost());
        };
        let root: Uuid = held.get("root_job_id");
        // Children started before are left alone (a resume names the running ones
        // again); an id taken by a job that is not this parent's child is refused.
        let ids: Vec<Uuid> = children.iter().map(|c| c.job.job_id).collect();
        let mut started = std::collections::HashSet::new();
        for row in tx.query(sql::EXISTING_CHILDREN, &[&ids]).await? {
            let (id, parent): (Uuid, Option<Uuid>) = (row.get(0), row.get(1));
            if parent != Some(claim.job_id) {
                return Err(StoreError::Conflict(id));
            }
            started.insert(id);
        }
        let new: Vec<&NewChild> = children
            .iter()
            .filter(|c| !started.contains(&c.job.job_id))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let jobs: Vec<NewJob> = new.iter().map(|c| c.job.clone()).collect();
        insert_children(&tx, &jobs).await?;
        let ids: Vec<Uuid> = new.iter().map(|c| c.job.job_id).collect();
        let items: Vec<i32> = new.iter().map(|c| c.item).collect();
        tx.execute(
            sql::LINK_CHILDREN,
            &[&ids, &items, &claim.job_id, &root, &step],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A page of `parent`'s children (by step and element) and how many it has.
    pub async fn children_of(
        &self,
        parent: Uuid,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<ChildRow>, i64), StoreError> {
        let client = self.shared().await?;
        let rows = client
            .query(sql::CHILDREN_OF, &[&parent, &limit, &offset])
            .await?
            .iter()
            .map(|row| ChildRow {
                job_id: row.get("job_id"),
                workflow_name: row.get("workflow_name"),
                status: row.get("status"),
                step: row
                    .get::<_, Option<String>>("parent_step")
                    .unwrap_or_default(),
                item: row.get::<_, Option<i32>>("parent_item").unwrap_or_default(),
            })
            .collect();
        let count = client.query_one(sql::CHILD_COUNT, &[&parent]).await?.get(0);
        Ok((rows, count))
    }

    /// Cancels the live descendants of `job` (children, grandchildren, ...), each as
    /// `cancel-job` would (QUEUED and WAITING ones at once, RUNNING ones by their
    /// workers), deepest first, with `reason`; answers how many it changed. A
    /// descendant started meanwhile is not: a cancelled (or cancel-requested) parent
    /// starts no child.
    pub async fn cancel_descendants(&self, job: Uuid, reason: &str) -> Result<usize, StoreError> {
        let descendants = self.live_descendants(job).await?;
        if descendants.is_empty() {
            return Ok(0);
        }
        let reason = format!("its parent job {job} was cancelled or ended: {reason}");
        let reason: String = reason.chars().take(500).collect();
        let acted = self
            .cancel_jobs(&descendants, &reason, super::Recheck::default())
            .await;
        if let Some(error) = acted.interrupted {
            return Err(error);
        }
        Ok(acted
            .outcomes
            .iter()
            .filter(|(_, outcome)| matches!(outcome, super::ByJob::Decided(o) if o.changed()))
            .count())
    }

    /// Of `jobs`, the ones with children (of any status).
    pub async fn parents_among(&self, jobs: &[Uuid]) -> Result<Vec<Uuid>, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query(sql::PARENTS_AMONG, &[&jobs])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect())
    }

    /// The live descendants of `job` (children, grandchildren, ...), deepest first.
    pub async fn live_descendants(&self, job: Uuid) -> Result<Vec<Uuid>, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query(sql::LIVE_DESCENDANTS, &[&job])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect())
    }
}
