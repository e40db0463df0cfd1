//! The elements of map steps (migration V23): read back for the claim that resumes
//! a job, paged and counted for `get-job` and `get-job-items`. They are written
//! through the group commit ([`ClaimWrite::items`]).

use super::*;
use workflow::{ItemCheckpoint, ItemOutcome};

/// One stored element, as `get-job-items` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredItem {
    /// Its position in the step's list.
    pub index: i32,
    /// Its response (proto3 JSON), or its error (kept under `onItemFailure:
    /// "collect"`).
    pub outcome: Result<Value, String>,
}

impl Store {
    /// A job's workflow snapshot and the digest its row names it by (`None`: no such
    /// job), without the rest of the row: for the read verbs that compile it.
    pub async fn job_snapshot(&self, job_id: Uuid) -> Result<Option<(Value, String)>, StoreError> {
        let client = self.shared().await?;
        let row = client.query_opt(sql::JOB_DEFINITION, &[&job_id]).await?;
        Ok(row.map(|row| (row.get("workflow_definition"), row.get("definition_digest"))))
    }

    /// The digest a job's row names its snapshot by (`None`: no such job).
    pub async fn job_digest(&self, job_id: Uuid) -> Result<Option<String>, StoreError> {
        let client = self.shared().await?;
        let row = client.query_opt(sql::JOB_DIGEST, &[&job_id]).await?;
        Ok(row.map(|row| row.get(0)))
    }

    /// The stored elements of `steps` (map steps with no checkpoint yet) of a job, so
    /// the claim resuming it calls only the others.
    pub async fn job_items(
        &self,
        job_id: Uuid,
        steps: &[String],
    ) -> Result<Vec<ItemCheckpoint>, StoreError> {
        let client = self.shared().await?;
        let rows = client.query(sql::JOB_ITEMS, &[&job_id, &steps]).await?;
        let mut items = Vec::with_capacity(rows.len());
        for row in rows {
            let index: i32 = row.get("item");
            let response: Option<Value> = row.get("response");
            let error: Option<String> = row.get("error");
            items.push(ItemCheckpoint {
                step: row.get("step"),
                // The table's check keeps it at 0 or more.
                index: usize::try_from(index).unwrap_or_default(),
                outcome: match (response, error) {
                    (Some(response), _) => ItemOutcome::Response(response),
                    (None, error) => ItemOutcome::Failed(error.unwrap_or_default()),
                },
            });
        }
        Ok(items)
    }

    /// One page of a map step's stored elements, from position `offset`, at most
    /// `limit`, by position.
    pub async fn job_items_page(
        &self,
        job_id: Uuid,
        step: &str,
        offset: i32,
        limit: i64,
    ) -> Result<Vec<StoredItem>, StoreError> {
        let client = self.shared().await?;
        let rows = client
            .query(sql::JOB_ITEMS_PAGE, &[&job_id, &step, &offset, &limit])
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let response: Option<Value> = row.get("response");
                let error: Option<String> = row.get("error");
                StoredItem {
                    index: row.get("item"),
                    outcome: response.ok_or_else(|| error.unwrap_or_default()),
                }
            })
            .collect())
    }

    /// Per map step of a job with stored elements: how many answered and how many
    /// failed (kept under `onItemFailure: "collect"`).
    pub async fn job_item_counts(
        &self,
        job_id: Uuid,
    ) -> Result<Vec<(String, i64, i64)>, StoreError> {
        let client = self.shared().await?;
        let rows = client.query(sql::JOB_ITEM_COUNTS, &[&job_id]).await?;
        Ok(rows
            .into_iter()
            .map(|row| (row.get("step"), row.get("answered"), row.get("failed")))
            .collect())
    }
}
