//! Schedules: durable cron, fired by whichever node gets there first.
//!
//! A schedule (`put-schedule`) is one row of `workflow_schedules` holding its spec and
//! its next tick. Every node runs [`schedule_loop`]: it reads the database's clock,
//! and when a tick is due it prepares the tick's jobs (the stored workflow resolved
//! and checked as at a submission, so each job snapshots the workflow as it is when
//! its tick fires), then locks the row, skipping it when another node holds it, and
//! in one transaction applies the overlap policy, inserts the jobs and moves the row
//! to its next tick. A tick's job id is derived from the schedule and the tick, so a
//! tick fired twice (a node frozen mid-fire, a COMMIT whose answer was lost) makes
//! one job; a node that dies mid-fire leaves the tick due for the next node.
//!
//! | module     | concept                                                            |
//! |------------|--------------------------------------------------------------------|
//! | [`timing`] | when ticks fall: cron in a time zone, `@every`, daylight saving    |
//! | [`spec`]   | a schedule as stored: overlap and catch-up policies, bounds        |
//! | [`plan`]   | what one fire makes: catch-up of missed ticks, the overlap policy  |
//! | [`firing`] | [`Scheduler`]: ticks to jobs, triggers, backfills; the firing loop |

pub mod firing;
pub mod plan;
pub mod spec;
pub mod timing;

pub use firing::{FireReport, Scheduler, schedule_loop};
pub use spec::{Catchup, Overlap, ScheduleSpec};
pub use timing::Timing;
