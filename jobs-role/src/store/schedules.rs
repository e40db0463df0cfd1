//! Schedules in PostgreSQL (migration V29): the rows the schedule verbs manage, and
//! the one transaction that fires a due schedule. What a fire makes is decided in
//! [`crate::schedules`]; this module keeps it atomic: the schedule's lock, the overlap
//! policy against its live jobs, the inserts and the move to the next tick commit
//! together, or not at all (the ticks are then still due, and their jobs' ids are
//! derived from them, so firing them again makes each job once).

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Row;
use uuid::Uuid;

use super::cancels::CancelAct;
use super::operator_acts::Act;
use super::submissions::insert_batch;
use super::{Inserted, NewJob, Store, StoreError, printable, sql};
use crate::schedules::plan::{LiveJobs, admit};
use crate::schedules::spec::Overlap;

/// A frozen node's firing session ends after this long idle in its transaction.
const FIRING_IDLE_TIMEOUT: &str = "3s";

/// A fire waits this long for a job's row lock (a job to cancel).
const FIRING_LOCK_TIMEOUT: &str = "2s";

/// One schedule row.
#[derive(Debug, Clone)]
pub struct ScheduleRow {
    /// Its name.
    pub name: String,
    /// Its spec (the put-schedule body as accepted).
    pub spec: Value,
    /// Bumped by every put-schedule.
    pub revision: i64,
    /// Its next tick; `None` once none is left.
    pub next_fire_at: Option<DateTime<Utc>>,
    /// Paused: no tick fires.
    pub paused: bool,
    /// Why.
    pub paused_reason: Option<String>,
    /// The newest tick that made a job.
    pub last_tick_at: Option<DateTime<Utc>>,
    /// When that was.
    pub last_fired_at: Option<DateTime<Utc>>,
    /// Why the newest tick that made no job made none.
    pub last_error: Option<String>,
    /// A random value, part of its ticks' job ids (never shown: a future tick's id
    /// cannot be guessed and taken).
    pub id_salt: Uuid,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// When it was last changed.
    pub updated_at: DateTime<Utc>,
}

impl ScheduleRow {
    fn of(row: &Row) -> ScheduleRow {
        ScheduleRow {
            name: row.get("name"),
            spec: row.get("spec"),
            revision: row.get("revision"),
            next_fire_at: row.get("next_fire_at"),
            paused: row.get("paused"),
            paused_reason: row.get("paused_reason"),
            last_tick_at: row.get("last_tick_at"),
            last_fired_at: row.get("last_fired_at"),
            last_error: row.get("last_error"),
            id_salt: row.get("id_salt"),
            created_at: row.get("created_at"),
            updated_at: row.get("updated_at"),
        }
    }
}

/// One fire of a due schedule, prepared from the row as read.
#[derive(Debug, Clone)]
pub struct Firing<'a> {
    /// The row as read (its revision and `next_fire_at` must still hold).
    pub schedule: &'a ScheduleRow,
    /// Its overlap policy.
    pub overlap: Overlap,
    /// The jobs of the ticks the catch-up policy keeps, oldest tick first.
    pub jobs: Vec<NewJob>,
    /// The tick after this fire; `None`: none left.
    pub next: Option<DateTime<Utc>>,
    /// Why some tick made no job (its workflow or input refused), if one did not.
    pub error: Option<String>,
}

/// What a fire did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fired {
    /// False when another node fired it, or it changed meanwhile: nothing was written.
    pub locked: bool,
    /// Jobs made.
    pub made: usize,
    /// Ticks whose job was already there (a fire sent twice).
    pub already: usize,
    /// Ticks the overlap policy skipped.
    pub skipped: usize,
    /// Live jobs `cancel-previous` cancelled or asked to cancel.
    pub cancelled: usize,
    /// Ticks whose job id another job holds (they made nothing).
    pub taken: usize,
}

impl Store {
    /// The database's clock, and the soonest tick of a schedule not paused.
    pub async fn schedule_clock(
        &self,
    ) -> Result<(DateTime<Utc>, Option<DateTime<Utc>>), StoreError> {
        let client = self.shared().await?;
        let row = client.query_one(sql::SCHEDULE_CLOCK, &[]).await?;
        Ok((row.get("now"), row.get("soonest")))
    }

    /// Makes or replaces a schedule (`paused` `None`: a replaced one keeps its
    /// pause); answers whether it was made, and the row.
    pub async fn put_schedule(
        &self,
        name: &str,
        spec: &Value,
        first_tick: Option<DateTime<Utc>>,
        paused: Option<bool>,
        reason: &str,
    ) -> Result<(bool, ScheduleRow), StoreError> {
        let reason = printable(reason);
        let client = self.shared().await?;
        let row = client
            .query_one(
                sql::PUT_SCHEDULE,
                &[&name, spec, &first_tick, &paused, &reason],
            )
            .await?;
        Ok((row.get("created"), ScheduleRow::of(&row)))
    }

    /// One schedule.
    pub async fn schedule(&self, name: &str) -> Result<Option<ScheduleRow>, StoreError> {
        let client = self.shared().await?;
        let row = client.query_opt(sql::SCHEDULE, &[&name]).await?;
        Ok(row.as_ref().map(ScheduleRow::of))
    }

    /// Schedules by name, at most `limit`.
    pub async fn list_schedules(&self, limit: i64) -> Result<Vec<ScheduleRow>, StoreError> {
        let client = self.shared().await?;
        let rows = client.query(sql::LIST_SCHEDULES, &[&limit]).await?;
        Ok(rows.iter().map(ScheduleRow::of).collect())
    }

    /// Deletes a schedule (its jobs stay); false when there was none.
    pub async fn delete_schedule(&self, name: &str) -> Result<bool, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query_opt(sql::DELETE_SCHEDULE, &[&name])
            .await?
            .is_some())
    }

    /// Pauses or resumes a schedule (resuming moves its next tick to `next`); answers
    /// whether it changed, `None` when there is no such schedule.
    pub async fn set_schedule_paused(
        &self,
        name: &str,
        paused: bool,
        reason: &str,
        next: Option<DateTime<Utc>>,
    ) -> Result<Option<bool>, StoreError> {
        // A reason is free text, kept verbatim but for NULs (written out).
        let reason = printable(reason);
        let client = self.shared().await?;
        let row = client
            .query_opt(sql::SET_SCHEDULE_PAUSED, &[&name, &paused, &reason, &next])
            .await?;
        Ok(row.map(|row| row.get::<_, bool>("was_paused") != paused))
    }

    /// The schedules due at `now`, soonest first.
    pub async fn due_schedules(
        &self,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<ScheduleRow>, StoreError> {
        let client = self.shared().await?;
        let rows = client.query(sql::DUE_SCHEDULES, &[&now, &limit]).await?;
        Ok(rows.iter().map(ScheduleRow::of).collect())
    }

    /// A schedule's newest `limit` jobs by tick (summaries).
    pub async fn schedule_jobs(&self, name: &str, limit: i64) -> Result<Vec<Value>, StoreError> {
        let client = self.shared().await?;
        let rows = client.query(sql::SCHEDULE_JOBS, &[&name, &limit]).await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// Each schedule's (the first `limit` by name) newest `per` jobs by tick, as
    /// `{jobId, status, scheduledFor}` lists.
    pub async fn recent_schedule_jobs(
        &self,
        limit: i64,
        per: i64,
    ) -> Result<std::collections::HashMap<String, Value>, StoreError> {
        let client = self.shared().await?;
        let rows = client
            .query(sql::RECENT_SCHEDULE_JOBS, &[&limit, &per])
            .await?;
        Ok(rows
            .iter()
            .map(|row| (row.get("name"), row.get("jobs")))
            .collect())
    }

    /// Moves a schedule as read past ticks that can never make their job, to `next`,
    /// keeping `error`; false when it was fired, changed or paused meanwhile.
    pub async fn skip_schedule_ticks(
        &self,
        schedule: &ScheduleRow,
        next: Option<DateTime<Utc>>,
        error: &str,
    ) -> Result<bool, StoreError> {
        let error = printable(error);
        let client = self.shared().await?;
        let moved = client
            .execute(
                sql::SKIP_SCHEDULE_TICKS,
                &[
                    &schedule.name,
                    &schedule.revision,
                    &schedule.next_fire_at,
                    &next,
                    &error,
                ],
            )
            .await?;
        Ok(moved > 0)
    }

    /// Pauses a schedule as read whose spec cannot be read, saying why.
    pub async fn pause_unreadable_schedule(
        &self,
        schedule: &ScheduleRow,
        reason: &str,
    ) -> Result<bool, StoreError> {
        let reason = printable(reason);
        let client = self.shared().await?;
        let paused = client
            .execute(
                sql::PAUSE_UNREADABLE_SCHEDULE,
                &[
                    &schedule.name,
                    &schedule.revision,
                    &schedule.next_fire_at,
                    &reason,
                ],
            )
            .await?;
        Ok(paused > 0)
    }

    /// Fires a due schedule in one transaction: locks it (skipping it when another
    /// node holds it, or answering `locked: false` when it was fired, changed or
    /// paused since it was read), applies the overlap policy against its live jobs,
    /// inserts the admitted jobs and moves it to its next tick.
    pub async fn fire_schedule(&self, firing: Firing<'_>) -> Result<Fired, StoreError> {
        let schedule = firing.schedule;
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        // A submission's settings (the node's snapshot digests kept, the snapshot
        // lock shared), then the fire's tighter bounds.
        tx.batch_execute(sql::SUBMISSION_SETTINGS).await?;
        tx.query(
            sql::FIRING_SETTINGS,
            &[&FIRING_IDLE_TIMEOUT, &FIRING_LOCK_TIMEOUT],
        )
        .await?;
        let locked = tx
            .query_opt(
                sql::LOCK_DUE_SCHEDULE,
                &[&schedule.name, &schedule.revision, &schedule.next_fire_at],
            )
            .await?;
        if locked.is_none() {
            tx.rollback().await?;
            return Ok(Fired::default());
        }
        let own: Vec<Uuid> = firing.jobs.iter().map(|job| job.job_id).collect();
        let live = tx
            .query_one(sql::LIVE_SCHEDULE_JOBS, &[&schedule.name, &own])
            .await?;
        let live = LiveJobs {
            started: usize::try_from(live.get::<_, i64>("started")).unwrap_or(usize::MAX),
            queued: usize::try_from(live.get::<_, i64>("queued")).unwrap_or(usize::MAX),
        };
        let ticks = firing
            .jobs
            .iter()
            .filter_map(|job| job.schedule.as_ref().map(|tick| tick.at))
            .collect();
        let admitted = admit(firing.overlap, live, ticks);
        let jobs: Vec<NewJob> = firing
            .jobs
            .into_iter()
            .filter(|job| {
                job.schedule
                    .as_ref()
                    .is_some_and(|tick| admitted.ticks.contains(&tick.at))
            })
            .collect();
        let mut fired = Fired {
            locked: true,
            skipped: admitted.skipped,
            ..Fired::default()
        };
        if admitted.cancel_previous {
            let reason = format!(
                "schedule '{}' fired its next tick under overlap cancel-previous",
                schedule.name
            );
            fired.cancelled = cancel_live_jobs(&tx, &schedule.name, &own, &reason).await?;
        }
        let mut taken = None;
        for answer in insert_batch(&tx, &jobs, None).await? {
            match answer {
                Ok(Inserted { created: true, .. }) => fired.made += 1,
                Ok(_) => fired.already += 1,
                // Retention pruned the job the tick made before.
                Err(StoreError::Pruned(_)) => fired.already += 1,
                // Another job holds the id (ids are salted, so only someone who read
                // it from a job could): the tick made nothing, and says so.
                Err(StoreError::Conflict(id)) => {
                    fired.taken += 1;
                    taken = Some(format!(
                        "a tick's job id {id} is held by another job: that tick made no job"
                    ));
                }
                Err(other) => return Err(other),
            }
        }
        let newest = jobs
            .iter()
            .filter_map(|job| job.schedule.as_ref().map(|tick| tick.at))
            .max();
        // Errors quote what a caller wrote (an input): NULs written out.
        let error = firing.error.or(taken).map(|e| printable(&e));
        tx.execute(
            sql::ADVANCE_SCHEDULE,
            &[&schedule.name, &firing.next, &newest, &error],
        )
        .await?;
        tx.commit().await?;
        Ok(fired)
    }

    /// Inserts jobs of schedule `name` outside its ticks (`trigger-schedule`,
    /// `backfill-schedule`), each answered as an insert is; `None` when there is no
    /// such schedule (nothing written).
    pub async fn insert_schedule_jobs(
        &self,
        name: &str,
        jobs: &[NewJob],
    ) -> Result<Option<Vec<Result<Inserted, StoreError>>>, StoreError> {
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        tx.batch_execute(sql::SUBMISSION_SETTINGS).await?;
        if tx
            .query_opt(sql::LOCK_SCHEDULE_FOR_JOBS, &[&name])
            .await?
            .is_none()
        {
            tx.rollback().await?;
            return Ok(None);
        }
        let answers = insert_batch(&tx, jobs, None).await?;
        tx.commit().await?;
        Ok(Some(answers))
    }
}

/// Cancels schedule `name`'s live jobs (QUEUED or WAITING at once, RUNNING asked to
/// stop) in the firing transaction; answers how many.
async fn cancel_live_jobs(
    tx: &deadpool_postgres::Transaction<'_>,
    name: &str,
    own: &[Uuid],
    reason: &str,
) -> Result<usize, StoreError> {
    let ids: Vec<Uuid> = tx
        .query(sql::LIVE_SCHEDULE_JOB_IDS, &[&name, &own])
        .await?
        .iter()
        .map(|row| row.get("job_id"))
        .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    let rows = tx
        .query(sql::LOCK_JOBS_FOR_CANCEL_WAITING, &[&ids, &None::<String>])
        .await?;
    let outcomes = CancelAct::new(reason).on_locked(tx, &rows).await?;
    Ok(outcomes
        .iter()
        .filter(|(_, outcome)| outcome.changed())
        .count())
}
