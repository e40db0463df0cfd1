//! Flow control: the concurrency keys submissions file, their cancel strategies
//! decided in the submission's transaction, pausing and resuming a workflow or a
//! key, and what holds a queued job back.
//!
//! The limit itself is kept by the claim (`protomolt_claimable`, migration V26): a
//! key's RUNNING jobs are counted under its row lock, so it holds across every node.

use std::collections::{BTreeMap, HashSet};

use workflow::compile::ConcurrencyStrategy;

use super::cancels::CancelAct;
use super::operator_acts::Act;
use super::*;

/// A paused workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PausedWorkflow {
    /// Its name.
    pub workflow_name: String,
    /// When it was paused, in milliseconds since the Unix epoch.
    pub paused_at_ms: i64,
    /// Why, as the operator said.
    pub reason: Option<String>,
}

/// A concurrency key as the fleet sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyState {
    /// The stored key (`<workflow>:<expression>=<value>`).
    pub key: String,
    /// Its workflow.
    pub workflow_name: String,
    /// Its limit.
    pub limit: i32,
    /// Its RUNNING jobs.
    pub running: i64,
    /// Whether its lane may hold queued jobs.
    pub queued: bool,
    /// Whether it is paused.
    pub paused: bool,
}

/// Concurrency keys by state (see [`Store::keys_summary`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeysSummary {
    /// Keys whose lane has queued jobs.
    pub with_work: i64,
    /// Of those, the ones running their limit.
    pub at_limit: i64,
    /// Paused keys.
    pub paused: i64,
}

/// What holds a QUEUED job back from being claimed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HoldUps {
    /// Its start is still ahead: when, in milliseconds since the Unix epoch.
    pub run_after_ms: Option<i64>,
    /// Its workflow is paused.
    pub workflow_paused: bool,
    /// Its keys: each `{key, limit, running, paused}`.
    pub keys: Value,
}

/// The most paused keys a listing answers.
const PAUSED_KEYS_LISTED: i64 = 1_000;

impl Store {
    /// Pauses workflow `name` fleet-wide (new claims of its jobs stop at once);
    /// answers false when it was already paused.
    pub async fn pause_workflow(&self, name: &str, reason: &str) -> Result<bool, StoreError> {
        let client = self.pool.get().await?;
        let reason = printable(reason);
        let row = client
            .query_opt(sql::PAUSE_WORKFLOW, &[&name, &reason])
            .await?;
        Ok(row.is_some())
    }

    /// Whether any job of workflow `name` exists.
    pub async fn workflow_has_jobs(&self, name: &str) -> Result<bool, StoreError> {
        let client = self.pool.get().await?;
        Ok(client
            .query_one(sql::WORKFLOW_HAS_JOBS, &[&name])
            .await?
            .get("known"))
    }

    /// Resumes workflow `name`; answers false when it was not paused.
    pub async fn resume_workflow(&self, name: &str) -> Result<bool, StoreError> {
        let client = self.pool.get().await?;
        Ok(client
            .query_opt(sql::RESUME_WORKFLOW, &[&name])
            .await?
            .is_some())
    }

    /// Pauses (`paused` true) or resumes concurrency key `key`: `None` when no job
    /// ever held it, else whether it changed.
    pub async fn set_key_paused(
        &self,
        key: &str,
        paused: bool,
    ) -> Result<Option<bool>, StoreError> {
        let client = self.pool.get().await?;
        if client.query_opt(sql::KEY_EXISTS, &[&key]).await?.is_none() {
            return Ok(None);
        }
        let changed = client
            .query_opt(sql::SET_KEY_PAUSED, &[&key, &paused])
            .await?;
        Ok(Some(changed.is_some()))
    }

    /// The paused workflows, by name.
    pub async fn paused_workflows(&self) -> Result<Vec<PausedWorkflow>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client.query(sql::PAUSED_WORKFLOWS, &[]).await?;
        Ok(rows
            .iter()
            .map(|row| PausedWorkflow {
                workflow_name: row.get("workflow_name"),
                paused_at_ms: row.get("paused_at_ms"),
                reason: row.get("reason"),
            })
            .collect())
    }

    /// The paused keys, by key (at most a thousand).
    pub async fn paused_keys(&self) -> Result<Vec<String>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client
            .query(sql::PAUSED_KEYS, &[&PAUSED_KEYS_LISTED])
            .await?;
        Ok(rows.iter().map(|row| row.get("key")).collect())
    }

    /// The keys with queued work, running jobs or a pause, busiest first (at most
    /// `limit`).
    pub async fn busiest_keys(&self, limit: i64) -> Result<Vec<KeyState>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client.query(sql::BUSIEST_KEYS, &[&limit]).await?;
        Ok(rows
            .iter()
            .map(|row| KeyState {
                key: row.get("key"),
                workflow_name: row.get("workflow_name"),
                limit: row.get("max_running"),
                running: row.get("running"),
                queued: row.get("ready"),
                paused: row.get("paused"),
            })
            .collect())
    }

    /// How many keys have queued work, run their limit, are paused.
    pub async fn keys_summary(&self) -> Result<KeysSummary, StoreError> {
        let client = self.pool.get().await?;
        let row = client.query_one(sql::KEYS_SUMMARY, &[]).await?;
        Ok(KeysSummary {
            with_work: row.get("with_work"),
            at_limit: row.get("at_limit"),
            paused: row.get("paused"),
        })
    }

    /// What holds QUEUED job `job_id` back (`None` when it is not QUEUED).
    pub async fn hold_ups(&self, job_id: Uuid) -> Result<Option<HoldUps>, StoreError> {
        let client = self.pool.get().await?;
        let row = client.query_opt(sql::JOB_HOLD_UPS, &[&job_id]).await?;
        Ok(row.map(|row| HoldUps {
            run_after_ms: row.get("run_after_ms"),
            workflow_paused: row.get("workflow_paused"),
            keys: row.get("keys"),
        }))
    }

    /// Deletes dedupe answers older than `older_than`, at most `batch`; answers how
    /// many.
    pub async fn prune_dedupe_answers(
        &self,
        older_than: Duration,
        batch: i64,
    ) -> Result<u64, StoreError> {
        let client = self.pool.get().await?;
        Ok(client
            .execute(sql::PRUNE_DEDUPE_ANSWERS, &[&millis(older_than), &batch])
            .await?)
    }

    /// Sets ready again the keys a claim cleared while a job was being queued in
    /// their lane (the sweeper's repair); answers how many.
    pub async fn reready_keys(&self) -> Result<i32, StoreError> {
        let client = self.pool.get().await?;
        Ok(client.query_one(sql::REREADY_KEYS, &[]).await?.get("fixed"))
    }
}

/// Files the keys `jobs` hold, then locks them all (in key order, waiting:
/// [`sql::LOCK_CONCURRENCY_KEYS`]) and makes their lanes ready. Runs in the submission's
/// transaction before the insert.
pub(super) async fn file_keys(tx: &Transaction<'_>, jobs: &[NewJob]) -> Result<(), StoreError> {
    let mut keys: BTreeMap<&str, (&str, i32, i32, bool)> = BTreeMap::new();
    let mut lanes: Vec<&str> = Vec::new();
    for job in jobs {
        if let Some(lane) = job.concurrency.first() {
            lanes.push(&lane.key);
        }
        for held in &job.concurrency {
            // Both bounds are checked when the workflow compiles (at most 100,000).
            let limit = i32::try_from(held.limit).unwrap_or(i32::MAX);
            let weight = i32::try_from(held.weight).unwrap_or(1);
            keys.insert(&held.key, (&job.workflow_name, limit, weight, job.by_name));
        }
    }
    if keys.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = keys.keys().copied().collect();
    let workflows: Vec<&str> = keys.values().map(|k| k.0).collect();
    let limits: Vec<i32> = keys.values().map(|k| k.1).collect();
    let weights: Vec<i32> = keys.values().map(|k| k.2).collect();
    let by_name: Vec<bool> = keys.values().map(|k| k.3).collect();
    tx.execute(
        sql::UPSERT_CONCURRENCY_KEYS,
        &[&names, &workflows, &limits, &weights, &by_name],
    )
    .await?;
    lanes.sort_unstable();
    lanes.dedup();
    tx.query(sql::LOCK_CONCURRENCY_KEYS, &[&names]).await?;
    tx.execute(sql::MAKE_LANES_READY, &[&lanes]).await?;
    Ok(())
}

/// After the insert: for each key whose strategy cancels, the live jobs over its
/// limit are cancelled with their events (`cancel-newest`: the new jobs past the
/// limit; `cancel-oldest`: the oldest jobs, to make room). Answers the jobs of
/// `created` that ended CANCELLED.
pub(super) async fn apply_strategies(
    tx: &Transaction<'_>,
    jobs: &[NewJob],
    created: &HashSet<Uuid>,
) -> Result<HashSet<Uuid>, StoreError> {
    let mut rules: BTreeMap<&str, (u32, ConcurrencyStrategy)> = BTreeMap::new();
    for job in jobs.iter().filter(|job| created.contains(&job.job_id)) {
        for held in &job.concurrency {
            if held.strategy != ConcurrencyStrategy::Queue {
                rules.insert(&held.key, (held.limit, held.strategy));
            }
        }
    }
    let mut cancelled_new = HashSet::new();
    for (key, (limit, strategy)) in rules {
        let live: Vec<Uuid> = tx
            .query(sql::LIVE_JOBS_OF_KEY, &[&key])
            .await?
            .iter()
            .map(|row| row.get("job_id"))
            .collect();
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        if live.len() <= limit {
            continue;
        }
        let (victims, reason): (Vec<Uuid>, String) = match strategy {
            ConcurrencyStrategy::CancelNewest => (
                live[limit..]
                    .iter()
                    .filter(|id| created.contains(id))
                    .copied()
                    .collect(),
                format!(
                    "concurrency key '{key}' already had {limit} queued or running jobs, its limit (strategy cancel-newest)"
                ),
            ),
            ConcurrencyStrategy::CancelOldest => (
                live[..live.len() - limit].to_vec(),
                format!(
                    "cancelled to make room for a newer job: concurrency key '{key}' allows {limit} queued or running jobs (strategy cancel-oldest)"
                ),
            ),
            ConcurrencyStrategy::Queue => continue,
        };
        if victims.is_empty() {
            continue;
        }
        let mut sorted = victims;
        sorted.sort_unstable();
        let rows = tx
            .query(
                sql::LOCK_JOBS_FOR_CANCEL_WAITING,
                &[&sorted, &None::<String>],
            )
            .await?;
        let outcomes = CancelAct::new(&reason).on_locked(tx, &rows).await?;
        for (job_id, outcome) in outcomes {
            if outcome == CancelOutcome::Cancelled && created.contains(&job_id) {
                cancelled_new.insert(job_id);
            }
        }
    }
    Ok(cancelled_new)
}
