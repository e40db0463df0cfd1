//! What one fire of a due schedule does, decided without the database: which ticks
//! make jobs under the catch-up policy ([`plan`]), and which of those the overlap
//! policy admits beside the schedule's live jobs ([`admit`]).
//!
//! A tick fired within [`LATE_GRACE`] of its time is **on time**: a node that stalled,
//! a database that blinked, a busy fleet. Every on-time tick makes a job. A tick
//! older than that was **missed** (the whole fleet was down): the catch-up policy
//! decides, within `catchupWindowMs`: `none` makes nothing, `last` one job for the
//! newest missed tick (only when no tick is on time: an on-time job already stands
//! for the outage), `all` a job per missed tick (at most [`MAX_TICKS_PER_FIRE`], the
//! newest).

use chrono::{DateTime, Duration, Utc};

use super::spec::{Catchup, Overlap, ScheduleSpec};
use super::timing::Timing;

/// How late a tick may fire and still be on time, not missed.
pub const LATE_GRACE: Duration = Duration::seconds(15);

/// The most ticks one fire (or one backfill) makes jobs for.
pub const MAX_TICKS_PER_FIRE: usize = 1_000;

/// What a fire does with a schedule's due ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The ticks to make jobs for, oldest first.
    pub ticks: Vec<DateTime<Utc>>,
    /// Missed ticks the catch-up policy made no job for (counted up to
    /// [`MAX_TICKS_PER_FIRE`]).
    pub missed: usize,
    /// Where the schedule's `next_fire_at` moves: the first tick after `now`;
    /// `None` once `endAt` has passed.
    pub next: Option<DateTime<Utc>>,
}

/// The fire at `now` of a schedule whose next tick was `due`.
pub fn plan(spec: &ScheduleSpec, timing: &Timing, due: DateTime<Utc>, now: DateTime<Utc>) -> Plan {
    if due > now {
        return Plan {
            ticks: Vec::new(),
            missed: 0,
            next: Some(due),
        };
    }
    let next = spec.tick_after(timing, now);
    let late = now - LATE_GRACE;
    // One walk over the due ticks, split at the grace: no tick falls between two.
    let due_ticks: Vec<DateTime<Utc>> = timing
        .ticks_between(due, now, MAX_TICKS_PER_FIRE)
        .into_iter()
        .filter(|t| spec.in_range(*t))
        .collect();
    let (missed, on_time): (Vec<DateTime<Utc>>, Vec<DateTime<Utc>>) =
        due_ticks.into_iter().partition(|t| *t <= late);
    let window_start = now - Duration::milliseconds(spec.catchup_window_ms as i64);
    let caught: Vec<DateTime<Utc>> = match spec.catchup {
        Catchup::None => Vec::new(),
        Catchup::Last if on_time.is_empty() => missed
            .last()
            .filter(|t| **t >= window_start)
            .copied()
            .into_iter()
            .collect(),
        Catchup::Last => Vec::new(),
        Catchup::All => missed
            .iter()
            .filter(|t| **t >= window_start)
            .copied()
            .collect(),
    };
    let dropped = missed.len() - caught.len();
    let mut ticks = caught;
    ticks.extend(on_time);
    if ticks.len() > MAX_TICKS_PER_FIRE {
        ticks.drain(..ticks.len() - MAX_TICKS_PER_FIRE);
    }
    Plan {
        ticks,
        missed: dropped,
        next,
    }
}

/// The schedule's jobs not finished when a tick fires.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveJobs {
    /// RUNNING, or WAITING on a step: started.
    pub started: usize,
    /// QUEUED: not started (or between attempts).
    pub queued: usize,
}

/// What the overlap policy lets a fire do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The ticks that make jobs, oldest first.
    pub ticks: Vec<DateTime<Utc>>,
    /// The ticks skipped because the previous jobs have not finished.
    pub skipped: usize,
    /// Cancel the live jobs first (`cancel-previous`).
    pub cancel_previous: bool,
}

/// The ticks of one fire (oldest first) the overlap policy admits beside `live`.
/// The jobs of one fire never overlap each other under any policy but `allow`: they
/// share the schedule's concurrency key (limit 1) and run one after another.
pub fn admit(overlap: Overlap, live: LiveJobs, mut ticks: Vec<DateTime<Utc>>) -> Admitted {
    let total = ticks.len();
    let keep = |ticks: &mut Vec<DateTime<Utc>>, most: usize| {
        if ticks.len() > most {
            ticks.drain(..ticks.len() - most);
        }
    };
    let mut cancel_previous = false;
    match overlap {
        Overlap::Allow => {}
        Overlap::Skip => {
            if live.started + live.queued > 0 {
                ticks.clear();
            }
        }
        Overlap::BufferOne => {
            // One running and one waiting, at most.
            let room = if live.queued > 0 {
                0
            } else if live.started > 0 {
                1
            } else {
                2
            };
            keep(&mut ticks, room);
        }
        Overlap::CancelPrevious => {
            // The newest tick's job only: it would cancel any older one at once.
            keep(&mut ticks, 1);
            cancel_previous = live.started + live.queued > 0 && !ticks.is_empty();
        }
    }
    Admitted {
        skipped: total - ticks.len(),
        ticks,
        cancel_previous,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedules::spec::DEFAULT_CATCHUP_WINDOW_MS;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("a test time")
            .with_timezone(&Utc)
    }

    fn spec(cron: &str, catchup: Catchup) -> (ScheduleSpec, Timing) {
        let spec = ScheduleSpec {
            name: "s".into(),
            cron: cron.into(),
            timezone: String::new(),
            workflow_name: "w".into(),
            input: serde_json::json!({}),
            priority: None,
            max_attempts: None,
            jitter_ms: 0,
            overlap: Overlap::Skip,
            catchup,
            catchup_window_ms: DEFAULT_CATCHUP_WINDOW_MS,
            start_at: None,
            end_at: None,
        };
        let timing = spec.check().expect("a good spec");
        (spec, timing)
    }

    #[test]
    fn an_on_time_tick_fires_whatever_the_catchup() {
        for catchup in [Catchup::None, Catchup::Last, Catchup::All] {
            let (spec, timing) = spec("* * * * *", catchup);
            let fired = plan(
                &spec,
                &timing,
                at("2027-01-01T10:05:00Z"),
                at("2027-01-01T10:05:03Z"),
            );
            assert_eq!(fired.ticks, [at("2027-01-01T10:05:00Z")], "{catchup:?}");
            assert_eq!(fired.next, Some(at("2027-01-01T10:06:00Z")));
            assert_eq!(fired.missed, 0);
        }
    }

    #[test]
    fn five_missed_minutes_make_one_five_or_no_jobs() {
        // Down from 10:00:30 to 10:05:30: the ticks 10:01 to 10:05 were missed.
        let due = at("2027-01-01T10:01:00Z");
        let now = at("2027-01-01T10:05:30Z");
        let (last, timing) = spec("* * * * *", Catchup::Last);
        let fired = plan(&last, &timing, due, now);
        assert_eq!(fired.ticks, [at("2027-01-01T10:05:00Z")]);
        assert_eq!(fired.missed, 4);
        let (all, timing) = spec("* * * * *", Catchup::All);
        assert_eq!(plan(&all, &timing, due, now).ticks.len(), 5);
        let (none, timing) = spec("* * * * *", Catchup::None);
        let fired = plan(&none, &timing, due, now);
        assert!(fired.ticks.is_empty());
        assert_eq!(fired.missed, 5);
        assert_eq!(fired.next, Some(at("2027-01-01T10:06:00Z")));
    }

    #[test]
    fn catchup_reaches_back_no_further_than_its_window() {
        let (mut all, timing) = spec("* * * * *", Catchup::All);
        all.catchup_window_ms = 140_000;
        let fired = plan(
            &all,
            &timing,
            at("2027-01-01T10:01:00Z"),
            at("2027-01-01T10:05:30Z"),
        );
        assert_eq!(
            fired.ticks,
            [at("2027-01-01T10:04:00Z"), at("2027-01-01T10:05:00Z")]
        );
    }

    #[test]
    fn no_tick_falls_between_on_time_and_missed() {
        // A second-by-second schedule fired just over 15 s after a tick: every tick
        // is either caught up (all) or on time, none lost at the grace's edge.
        let (mut all, timing) = spec("@every 1s", Catchup::All);
        all.catchup_window_ms = 60_000;
        let due = at("2027-01-01T10:00:00Z");
        let now = due + Duration::milliseconds(35_999);
        let fired = plan(&all, &timing, due, now);
        let expected: Vec<DateTime<Utc>> = (0..=35).map(|s| due + Duration::seconds(s)).collect();
        assert_eq!(fired.ticks, expected);
        assert_eq!(fired.missed, 0);
    }

    #[test]
    fn a_tick_not_yet_due_fires_nothing() {
        let (spec, timing) = spec("* * * * *", Catchup::Last);
        let fired = plan(
            &spec,
            &timing,
            at("2027-01-01T10:06:00Z"),
            at("2027-01-01T10:05:30Z"),
        );
        assert!(fired.ticks.is_empty());
        assert_eq!(fired.next, Some(at("2027-01-01T10:06:00Z")));
    }

    #[test]
    fn overlap_policies_admit_what_they_promise() {
        let ticks = vec![at("2027-01-01T10:04:00Z"), at("2027-01-01T10:05:00Z")];
        let idle = LiveJobs::default();
        let running = LiveJobs {
            started: 1,
            queued: 0,
        };
        let buffered = LiveJobs {
            started: 1,
            queued: 1,
        };
        assert_eq!(admit(Overlap::Skip, idle, ticks.clone()).ticks.len(), 2);
        assert_eq!(admit(Overlap::Skip, running, ticks.clone()).skipped, 2);
        assert_eq!(
            admit(Overlap::Allow, buffered, ticks.clone()).ticks.len(),
            2
        );
        let one = admit(Overlap::BufferOne, running, ticks.clone());
        assert_eq!(one.ticks, [at("2027-01-01T10:05:00Z")]);
        assert!(
            admit(Overlap::BufferOne, buffered, ticks.clone())
                .ticks
                .is_empty()
        );
        let cancel = admit(Overlap::CancelPrevious, running, ticks.clone());
        assert_eq!(cancel.ticks, [at("2027-01-01T10:05:00Z")]);
        assert!(cancel.cancel_previous);
        assert!(!admit(Overlap::CancelPrevious, idle, ticks).cancel_previous);
    }
}
