//! [`Scheduler`]: a schedule's ticks made into jobs — by the firing loop, by
//! `trigger-schedule` (one job now) and by `backfill-schedule` (the ticks of a past
//! range) — and [`schedule_loop`], which every node runs.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use workflow::compile::{ConcurrencyKey, ConcurrencyStrategy};

use super::plan::{MAX_TICKS_PER_FIRE, plan};
use super::spec::{Overlap, ScheduleSpec};
use crate::metrics::JobsMetrics;
use crate::store::{
    Fired, Firing, Inserted, NewJob, ScheduleRow, ScheduledTick, Store, StoreError,
};
use crate::submit::{DefinitionSource, Start, Submission, SubmitError, Submitter};

/// The most due schedules one round of the loop fires.
const DUE_AT_ONCE: i64 = 32;

/// The shortest pause between two rounds of the loop (a round that found every due
/// schedule held by another node must not spin).
const MIN_PAUSE: Duration = Duration::from_millis(50);

/// How long a node that does not store a tick's workflow leaves the tick to the
/// other nodes before firing it without its job (half the on-time grace).
const LEAVE_TO_OTHERS: chrono::Duration = chrono::Duration::milliseconds(7_500);

/// The most keys a job holds (the claim reads three).
const MAX_KEYS_PER_JOB: usize = 3;

/// The namespace of ticks' job ids (uuid v5): a fixed, random uuid.
const TICK_NAMESPACE: Uuid = Uuid::from_u128(0x6f0c_5d2e_41a7_4b8e_9a3d_0e5b_7c21_d4f9);

/// What a round of firing did, summed over its schedules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FireReport {
    /// Schedules this node fired (held the lock of).
    pub fired: usize,
    /// Jobs made.
    pub made: usize,
    /// Ticks whose job was already there.
    pub already: usize,
    /// Ticks the overlap policy skipped.
    pub skipped: usize,
    /// Missed ticks the catch-up policy made no job for.
    pub missed: usize,
    /// Ticks that made no job because their workflow or input was refused.
    pub failed: usize,
    /// Live jobs `cancel-previous` cancelled.
    pub cancelled: usize,
    /// Schedules left to other nodes (this one does not store their workflow).
    pub deferred: usize,
    /// As many schedules were due as a round fires: more may be.
    pub more: bool,
}

/// Why a trigger or backfill made nothing.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleJobsError {
    /// No schedule of that name.
    #[error("no schedule named '{0}' (list-schedules shows them)")]
    Unknown(String),
    /// A backfill's range holds more ticks than one call makes.
    #[error("from: the range holds more than {0} ticks; backfill it in parts")]
    TooManyTicks(usize),
    /// The stored spec cannot be read back (a row edited by hand).
    #[error("schedule '{0}' holds a spec this node cannot read: {1}; put it again")]
    Unreadable(String, String),
    /// A tick's job was refused (its workflow or input).
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Makes a schedule's ticks into jobs.
#[derive(Clone)]
pub struct Scheduler {
    submitter: Submitter,
    metrics: Option<JobsMetrics>,
}

impl Scheduler {
    /// A scheduler submitting through `submitter` (its node's: the same resolution,
    /// checks and compiled-workflow cache as a submission).
    pub fn new(submitter: Submitter) -> Scheduler {
        Scheduler {
            submitter,
            metrics: None,
        }
    }

    /// The same scheduler counting its ticks in `metrics`.
    pub fn with_metrics(mut self, metrics: JobsMetrics) -> Scheduler {
        self.metrics = Some(metrics);
        self
    }

    /// Its store.
    pub fn store(&self) -> &Store {
        self.submitter.store()
    }

    /// Fires every schedule due at `now` (the database's clock; a test passes its
    /// own). A schedule another node is firing is skipped.
    pub async fn fire_due(&self, now: DateTime<Utc>) -> Result<FireReport, StoreError> {
        let mut due = self.store().due_schedules(now, DUE_AT_ONCE).await?;
        // Each node starts at its own place in the list, so nodes racing for a burst
        // of due schedules (a thousand at midnight) mostly take different ones
        // instead of all preparing the same first one.
        if !due.is_empty() {
            let start = (Uuid::new_v4().as_u128() % due.len() as u128) as usize;
            due.rotate_left(start);
        }
        let mut report = FireReport::default();
        for schedule in &due {
            match self.fire(schedule, now, &mut report).await {
                Ok(()) => {}
                // The server answered: this schedule's fire failed, the connection is
                // fine, and the other schedules still fire. A lock held too long, a
                // deadlock: it stays due for the next round.
                Err(e) if e.is_answered_by_server() => {
                    tracing::warn!(schedule = %schedule.name, error = %e, "firing a schedule failed; it stays due");
                }
                // No database: the round ends, the loop retries.
                Err(e) => return Err(e),
            }
        }
        // More may be due only when this round fired as many as it read (schedules
        // another node holds are not this node's to wait for).
        report.more = due.len() as i64 == DUE_AT_ONCE && report.fired > 0;
        Ok(report)
    }

    /// Fires one due schedule.
    async fn fire(
        &self,
        schedule: &ScheduleRow,
        now: DateTime<Utc>,
        report: &mut FireReport,
    ) -> Result<(), StoreError> {
        let Some(due) = schedule.next_fire_at else {
            return Ok(());
        };
        // A spec this node cannot read (a row edited by hand, a node older than the
        // schedule) is paused, saying why, not retried every round.
        let read = serde_json::from_value::<ScheduleSpec>(schedule.spec.clone())
            .map_err(|e| e.to_string())
            .and_then(|spec| spec.timing().map(|timing| (spec, timing)));
        let (spec, timing) = match read {
            Ok(read) => read,
            Err(e) => {
                let reason =
                    format!("this node cannot read the schedule's spec ({e}); put it again");
                tracing::warn!(schedule = %schedule.name, %reason, "pausing a schedule");
                self.store()
                    .pause_unreadable_schedule(schedule, &reason)
                    .await?;
                return Ok(());
            }
        };
        let planned = plan(&spec, &timing, due, now);
        let mut jobs = Vec::with_capacity(planned.ticks.len());
        let mut error = None;
        let mut unknown_since = None;
        for tick in &planned.ticks {
            match self
                .job_for(&spec, schedule.id_salt, *tick, TickKind::Tick)
                .await
            {
                Ok(job) => jobs.push(job),
                Err(refused) => {
                    if matches!(refused, SubmitError::UnknownWorkflow(_)) {
                        unknown_since.get_or_insert(*tick);
                    }
                    error = Some(format!(
                        "tick {}: {refused}",
                        tick.to_rfc3339_opts(SecondsFormat::Secs, true)
                    ));
                }
            }
        }
        // The workflow is not stored on this node (a rolling deploy, a node set up
        // differently): leave the tick to a node that has it, for a while, before
        // firing it without its job.
        if unknown_since.is_some_and(|tick| now - tick < LEAVE_TO_OTHERS) {
            report.deferred += 1;
            return Ok(());
        }
        let failed = planned.ticks.len() - jobs.len();
        let made_at: Vec<DateTime<Utc>> = jobs
            .iter()
            .filter_map(|job| job.schedule.as_ref().map(|tick| tick.at))
            .collect();
        let fired = match self
            .store()
            .fire_schedule(Firing {
                schedule,
                overlap: spec.overlap,
                jobs,
                next: planned.next,
                error: error.clone(),
            })
            .await
        {
            Ok(fired) => fired,
            // PostgreSQL refused a value of the ticks' jobs: sending them again can
            // never pass, so the schedule moves past them, saying why.
            Err(refused) if refused.is_data_error() => {
                let error = format!("ticks up to {}: {refused}", due.to_rfc3339());
                tracing::warn!(schedule = %schedule.name, %error, "a schedule's ticks made no job");
                if self
                    .store()
                    .skip_schedule_ticks(schedule, planned.next, &error)
                    .await?
                {
                    report.fired += 1;
                    report.failed += planned.ticks.len();
                }
                return Ok(());
            }
            Err(other) => return Err(other),
        };
        if !fired.locked {
            return Ok(());
        }
        if let Some(error) = &error {
            tracing::warn!(schedule = %schedule.name, %error, "a schedule tick made no job");
        }
        report.fired += 1;
        report.made += fired.made;
        report.already += fired.already;
        report.skipped += fired.skipped;
        report.cancelled += fired.cancelled;
        report.missed += planned.missed;
        report.failed += failed + fired.taken;
        self.count(&fired, planned.missed, failed + fired.taken, &made_at, now);
        Ok(())
    }

    fn count(
        &self,
        fired: &Fired,
        missed: usize,
        failed: usize,
        ticks: &[DateTime<Utc>],
        now: DateTime<Utc>,
    ) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        let count = JobsMetrics::count;
        count(&metrics.schedule_ticks, "fired", fired.made as u64);
        count(&metrics.schedule_ticks, "already", fired.already as u64);
        count(
            &metrics.schedule_ticks,
            "skipped_overlap",
            fired.skipped as u64,
        );
        count(&metrics.schedule_ticks, "missed", missed as u64);
        count(&metrics.schedule_ticks, "failed", failed as u64);
        if fired.made > 0 {
            for tick in ticks {
                let lag = (now - *tick).to_std().unwrap_or_default();
                metrics
                    .schedule_lag_seconds
                    .get_or_create(&Vec::new())
                    .observe(lag.as_secs_f64());
            }
        }
    }

    /// `trigger-schedule`: one job of schedule `name` now (at the database's `now`),
    /// whatever its ticks and pause; `job_id` makes a retried trigger one job. The
    /// job takes the schedule's concurrency key, so under any overlap policy but
    /// `allow` it starts once the running one finished.
    pub async fn trigger(
        &self,
        name: &str,
        job_id: Option<Uuid>,
    ) -> Result<(Uuid, DateTime<Utc>, Inserted), ScheduleJobsError> {
        let (schedule, spec) = self.read(name).await?;
        let (now, _) = self.store().schedule_clock().await?;
        let mut job = self
            .job_for(&spec, schedule.id_salt, now, TickKind::Trigger)
            .await?;
        if let Some(id) = job_id {
            job.job_id = id;
        }
        let id = job.job_id;
        let inserted = self.insert(name, vec![job]).await?.pop();
        let inserted = inserted
            .unwrap_or_else(|| Err(StoreError::GroupCommit("the insert got no answer".into())))?;
        Ok((id, now, inserted))
    }

    /// `backfill-schedule`: a job for each of schedule `name`'s ticks in `[from, to)`
    /// (at most [`MAX_TICKS_PER_FIRE`]), each with its tick's job id, so a backfill run
    /// twice makes each job once. Under any overlap policy but `allow` they share the
    /// schedule's concurrency key and run one after another. Answers each tick with
    /// its job and whether it was made now.
    pub async fn backfill(
        &self,
        name: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<(DateTime<Utc>, Uuid, bool)>, ScheduleJobsError> {
        let (schedule, spec) = self.read(name).await?;
        let timing = spec
            .timing()
            .map_err(|e| ScheduleJobsError::Unreadable(name.to_owned(), e))?;
        let last = to - chrono::Duration::milliseconds(1);
        let ticks: Vec<DateTime<Utc>> = timing
            .ticks_between(from, last, MAX_TICKS_PER_FIRE + 1)
            .into_iter()
            .filter(|tick| *tick < to && spec.in_range(*tick))
            .collect();
        if ticks.len() > MAX_TICKS_PER_FIRE {
            return Err(ScheduleJobsError::TooManyTicks(MAX_TICKS_PER_FIRE));
        }
        let mut jobs = Vec::with_capacity(ticks.len());
        for tick in &ticks {
            jobs.push(
                self.job_for(&spec, schedule.id_salt, *tick, TickKind::Tick)
                    .await?,
            );
        }
        let answers = self.insert(name, jobs.clone()).await?;
        let mut out = Vec::with_capacity(jobs.len());
        for ((tick, job), answer) in ticks.into_iter().zip(&jobs).zip(answers) {
            let created = match answer {
                Ok(inserted) => inserted.created,
                Err(StoreError::Conflict(_) | StoreError::Pruned(_)) => false,
                Err(e) => return Err(e.into()),
            };
            out.push((tick, job.job_id, created));
        }
        Ok(out)
    }

    /// A schedule and its spec, or why not.
    async fn read(&self, name: &str) -> Result<(ScheduleRow, ScheduleSpec), ScheduleJobsError> {
        let schedule = self
            .store()
            .schedule(name)
            .await?
            .ok_or_else(|| ScheduleJobsError::Unknown(name.to_owned()))?;
        let spec = serde_json::from_value(schedule.spec.clone())
            .map_err(|e| ScheduleJobsError::Unreadable(name.to_owned(), e.to_string()))?;
        Ok((schedule, spec))
    }

    async fn insert(
        &self,
        name: &str,
        jobs: Vec<NewJob>,
    ) -> Result<Vec<Result<Inserted, StoreError>>, ScheduleJobsError> {
        self.store()
            .insert_schedule_jobs(name, &jobs)
            .await?
            .ok_or_else(|| ScheduleJobsError::Unknown(name.to_owned()))
    }

    /// The job of `spec`'s tick `tick`: its stored workflow resolved and checked as a
    /// submission's, with the tick's id, jitter and schedule key.
    pub async fn job_for(
        &self,
        spec: &ScheduleSpec,
        salt: Uuid,
        tick: DateTime<Utc>,
        kind: TickKind,
    ) -> Result<NewJob, SubmitError> {
        let job_id = tick_job_id(&spec.name, salt, tick, kind);
        let jitter = jitter_of(&spec.name, tick, spec.jitter_ms);
        let submission = Submission {
            source: DefinitionSource::Stored(spec.workflow_name.clone()),
            input: spec.input.clone(),
            job_id: Some(job_id),
            max_attempts: spec.max_attempts,
            // Jitter counts from the tick (the database's time), not from this node's
            // clock: a late tick's jitter may be over already.
            start: if jitter.is_zero() {
                Start::Now
            } else {
                Start::At(std::time::SystemTime::from(tick) + jitter)
            },
            priority: spec.priority,
            dedupe: None,
            metadata: None,
        };
        let (mut job, _) = self.submitter.prepare(submission).await?;
        job.schedule = Some(ScheduledTick {
            name: spec.name.clone(),
            at: tick,
        });
        if spec.overlap != Overlap::Allow {
            if job.concurrency.len() < MAX_KEYS_PER_JOB {
                job.concurrency
                    .push(schedule_key(&job.workflow_name, &spec.name));
            } else {
                tracing::warn!(schedule = %spec.name, "the workflow holds three concurrency keys already: the schedule's jobs are not kept from overlapping while they run");
            }
        }
        Ok(job)
    }
}

/// What a job id is derived for: a tick of the schedule, or a trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickKind {
    /// A tick (fired, caught up or backfilled: the same id).
    Tick,
    /// `trigger-schedule` at an instant.
    Trigger,
}

/// A tick's job id: uuid v5 of the schedule's name, its salt (random, never shown:
/// nobody can take a future tick's id by computing it) and the tick, so every node
/// firing the tick (and every backfill of it) names the same job, and a schedule
/// deleted and made again is a new schedule.
pub fn tick_job_id(name: &str, salt: Uuid, tick: DateTime<Utc>, kind: TickKind) -> Uuid {
    let kind = match kind {
        TickKind::Tick => "tick",
        TickKind::Trigger => "trigger",
    };
    let seed = format!("{name}\n{salt}\n{kind}\n{}", tick.timestamp_micros());
    Uuid::new_v5(&TICK_NAMESPACE, seed.as_bytes())
}

/// A tick's jitter: a fixed offset in `[0, jitter_ms]` per schedule and tick (every
/// node firing the tick agrees).
fn jitter_of(name: &str, tick: DateTime<Utc>, jitter_ms: u64) -> Duration {
    if jitter_ms == 0 {
        return Duration::ZERO;
    }
    let digest = Sha256::digest(format!("{name}\n{}", tick.timestamp_micros()).as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Duration::from_millis(u64::from_be_bytes(first) % (jitter_ms + 1))
}

/// The concurrency key (limit 1) that keeps a schedule's jobs from running side by
/// side: `<workflow>:schedule=<name>`.
pub fn schedule_key(workflow_name: &str, schedule: &str) -> ConcurrencyKey {
    ConcurrencyKey {
        key: format!("{workflow_name}:schedule={schedule}"),
        limit: 1,
        strategy: ConcurrencyStrategy::Queue,
        weight: 1,
    }
}

/// Fires due schedules until `shutdown`: reads the database's clock, fires what is
/// due, and sleeps until the soonest tick (at most `poll`; `wake` cuts the sleep
/// short when a schedule was put on this node).
pub async fn schedule_loop(
    scheduler: Scheduler,
    poll: Duration,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    loop {
        let pause = match scheduler.store().schedule_clock().await {
            Ok((now, soonest)) => {
                let mut pause = poll;
                if soonest.is_some_and(|at| at <= now) {
                    match scheduler.fire_due(now).await {
                        Ok(report) => {
                            if report.made + report.skipped + report.missed + report.failed > 0 {
                                tracing::debug!(?report, "fired schedules");
                            }
                            pause = if report.more {
                                Duration::ZERO
                            } else if report.deferred > 0 && report.fired == 0 {
                                // Left to other nodes: look again, not at once.
                                poll.min(Duration::from_millis(500))
                            } else {
                                MIN_PAUSE
                            };
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "firing schedules failed; retrying")
                        }
                    }
                } else if let Some(at) = soonest {
                    pause = (at - now).to_std().unwrap_or_default().min(poll);
                }
                pause
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the schedules' clock failed; retrying");
                poll
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
            _ = wake.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticks_job_id_is_the_same_on_every_node_and_new_for_a_new_schedule() {
        let salt = Uuid::new_v4();
        let tick = Utc::now();
        let id = tick_job_id("nightly", salt, tick, TickKind::Tick);
        assert_eq!(id, tick_job_id("nightly", salt, tick, TickKind::Tick));
        assert_ne!(id, tick_job_id("nightly", salt, tick, TickKind::Trigger));
        assert_ne!(
            id,
            tick_job_id("nightly", Uuid::new_v4(), tick, TickKind::Tick)
        );
        assert_ne!(id, tick_job_id("weekly", salt, tick, TickKind::Tick));
    }

    #[test]
    fn jitter_stays_within_its_bound_and_is_fixed_per_tick() {
        let tick = Utc::now();
        assert_eq!(jitter_of("s", tick, 0), Duration::ZERO);
        let once = jitter_of("s", tick, 5_000);
        assert_eq!(once, jitter_of("s", tick, 5_000));
        assert!(once <= Duration::from_millis(5_000));
    }
}
