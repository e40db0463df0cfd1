//! What a schedule is: the `put-schedule` body, checked, as it is stored (the
//! `spec` column, camelCase JSON) and read back by every node that fires it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::timing::Timing;

/// The longest schedule name, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// The longest `jitterMs`: one day.
pub const MAX_JITTER_MS: u64 = 86_400_000;

/// The longest `catchupWindowMs`: 366 days.
pub const MAX_CATCHUP_WINDOW_MS: u64 = 366 * 86_400_000;

/// The `catchupWindowMs` of a schedule that gives none: one day.
pub const DEFAULT_CATCHUP_WINDOW_MS: u64 = 86_400_000;

/// What a tick does when the schedule's previous job has not finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Overlap {
    /// No job for the tick (the default).
    #[default]
    Skip,
    /// One job waits for the running one to finish; further ticks are skipped while it waits.
    BufferOne,
    /// A job for every tick, running beside the previous ones.
    Allow,
    /// The previous jobs are cancelled; the tick's job starts once they stopped.
    CancelPrevious,
}

impl Overlap {
    /// The policy named `text` (empty: the default), or the error naming `overlap`.
    pub fn parse(text: &str) -> Result<Overlap, String> {
        match text {
            "" | "skip" => Ok(Overlap::Skip),
            "buffer-one" => Ok(Overlap::BufferOne),
            "allow" => Ok(Overlap::Allow),
            "cancel-previous" => Ok(Overlap::CancelPrevious),
            other => Err(format!(
                "overlap: '{}' is not skip, buffer-one, allow or cancel-previous",
                other.escape_debug()
            )),
        }
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer-one",
            Overlap::Allow => "allow",
            Overlap::CancelPrevious => "cancel-previous",
        }
    }
}

/// What a schedule does with the ticks the whole fleet missed (all nodes down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Catchup {
    /// Nothing: missed ticks make no job.
    None,
    /// One job, for the most recent missed tick (the default).
    #[default]
    Last,
    /// A job for every missed tick within `catchupWindowMs`.
    All,
}

impl Catchup {
    /// The policy named `text` (empty: the default), or the error naming `catchup`.
    pub fn parse(text: &str) -> Result<Catchup, String> {
        match text {
            "" | "last" => Ok(Catchup::Last),
            "none" => Ok(Catchup::None),
            "all" => Ok(Catchup::All),
            other => Err(format!(
                "catchup: '{}' is not none, last or all",
                other.escape_debug()
            )),
        }
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Catchup::None => "none",
            Catchup::Last => "last",
            Catchup::All => "all",
        }
    }
}

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSpec {
    /// Its name (the key of `workflow_schedules`).
    pub name: String,
    /// Its cron expression (see [`Timing`]).
    pub cron: String,
    /// The IANA zone the expression is read in (empty: UTC).
    #[serde(default)]
    pub timezone: String,
    /// The stored workflow each tick runs (resolved when the tick fires).
    pub workflow_name: String,
    /// Each job's input.
    pub input: Value,
    /// Each job's priority (default: a submission's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i16>,
    /// Each job's attempts (default: the node's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<i32>,
    /// Each job starts up to this long after its tick (a fixed offset per tick).
    #[serde(default)]
    pub jitter_ms: u64,
    /// See [`Overlap`].
    #[serde(default)]
    pub overlap: Overlap,
    /// See [`Catchup`].
    #[serde(default)]
    pub catchup: Catchup,
    /// How far back catch-up reaches.
    #[serde(default = "default_catchup_window")]
    pub catchup_window_ms: u64,
    /// No tick before this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<DateTime<Utc>>,
    /// No tick at or after this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<DateTime<Utc>>,
}

fn default_catchup_window() -> u64 {
    DEFAULT_CATCHUP_WINDOW_MS
}

impl ScheduleSpec {
    /// Its ticks (the expression was checked when the schedule was put).
    pub fn timing(&self) -> Result<Timing, String> {
        Timing::parse(&self.cron, &self.timezone)
    }

    /// Checks what the request's rules cannot: the name, the expression and zone,
    /// the bounds and the window. The errors name the field.
    pub fn check(&self) -> Result<Timing, String> {
        check_name(&self.name)?;
        let timing = self.timing()?;
        if self.jitter_ms > MAX_JITTER_MS {
            return Err(format!("jitterMs: at most {MAX_JITTER_MS} (one day)"));
        }
        if self.catchup_window_ms > MAX_CATCHUP_WINDOW_MS {
            return Err(format!(
                "catchupWindowMs: at most {MAX_CATCHUP_WINDOW_MS} (366 days)"
            ));
        }
        if let (Some(start), Some(end)) = (self.start_at, self.end_at)
            && end <= start
        {
            return Err("endAt: must be after startAt".into());
        }
        Ok(timing)
    }

    /// The first tick at or after `now` (and `startAt`), before `endAt`; `None`: no
    /// tick is left.
    pub fn first_tick(&self, timing: &Timing, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let from = self.start_at.map_or(now, |start| start.max(now));
        timing.at_or_after(from).filter(|tick| self.in_range(*tick))
    }

    /// The first tick after `tick`, before `endAt`.
    pub fn tick_after(&self, timing: &Timing, tick: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let from = self.start_at.map_or(tick, |start| {
            start.max(tick + chrono::Duration::milliseconds(1))
        });
        let next = if from > tick {
            timing.at_or_after(from)
        } else {
            timing.next_after(tick)
        };
        next.filter(|t| self.in_range(*t))
    }

    /// Whether `tick` lies within `[startAt, endAt)`.
    pub fn in_range(&self, tick: DateTime<Utc>) -> bool {
        self.start_at.is_none_or(|start| tick >= start) && self.end_at.is_none_or(|end| tick < end)
    }
}

/// A schedule name: 1 to 200 lower-case letters, digits, `.`, `_` or `-`, beginning
/// with a letter or digit (as a stored workflow's), or the error naming `name`.
pub fn check_name(name: &str) -> Result<(), String> {
    let fine = !name.is_empty()
        && name.len() <= MAX_NAME_CHARS
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
    if fine {
        Ok(())
    } else {
        Err(format!(
            "name: '{}' is not a schedule name: 1 to {MAX_NAME_CHARS} lower-case letters, digits, '.', '_' or '-', beginning with a letter or digit",
            name.escape_debug()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ScheduleSpec {
        ScheduleSpec {
            name: "nightly".into(),
            cron: "0 3 * * *".into(),
            timezone: String::new(),
            workflow_name: "report".into(),
            input: serde_json::json!({}),
            priority: None,
            max_attempts: None,
            jitter_ms: 0,
            overlap: Overlap::default(),
            catchup: Catchup::default(),
            catchup_window_ms: DEFAULT_CATCHUP_WINDOW_MS,
            start_at: None,
            end_at: None,
        }
    }

    #[test]
    fn a_spec_round_trips_through_its_stored_json() {
        let mut spec = spec();
        spec.overlap = Overlap::BufferOne;
        spec.catchup = Catchup::All;
        let stored = serde_json::to_value(&spec).expect("json");
        assert_eq!(stored["overlap"], "buffer-one");
        assert_eq!(stored["workflowName"], "report");
        let back: ScheduleSpec = serde_json::from_value(stored).expect("back");
        assert_eq!(back, spec);
    }

    #[test]
    fn checks_name_their_field() {
        for (change, field) in [
            (
                Box::new(|s: &mut ScheduleSpec| s.name = "Bad Name".into())
                    as Box<dyn Fn(&mut ScheduleSpec)>,
                "name:",
            ),
            (Box::new(|s| s.name = String::new()), "name:"),
            (Box::new(|s| s.name = "x".repeat(201)), "name:"),
            (Box::new(|s| s.cron = "nope".into()), "cron:"),
            (
                Box::new(|s| s.timezone = "Nowhere/Land".into()),
                "timezone:",
            ),
            (Box::new(|s| s.jitter_ms = MAX_JITTER_MS + 1), "jitterMs:"),
            (
                Box::new(|s| s.catchup_window_ms = MAX_CATCHUP_WINDOW_MS + 1),
                "catchupWindowMs:",
            ),
            (
                Box::new(|s| {
                    s.start_at = Some(Utc::now());
                    s.end_at = s.start_at;
                }),
                "endAt:",
            ),
        ] {
            let mut bad = spec();
            change(&mut bad);
            let refused = bad.check().expect_err(field);
            assert!(refused.starts_with(field), "{field}: {refused}");
        }
        assert!(
            Overlap::parse("sometimes")
                .unwrap_err()
                .starts_with("overlap:")
        );
        assert!(Catchup::parse("most").unwrap_err().starts_with("catchup:"));
    }

    #[test]
    fn ticks_stay_within_start_and_end() {
        let mut spec = spec();
        spec.cron = "@every 10s".into();
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        spec.start_at = Some(at("2027-01-01T00:00:05Z"));
        spec.end_at = Some(at("2027-01-01T00:00:30Z"));
        let timing = spec.check().expect("a good spec");
        assert_eq!(
            spec.first_tick(&timing, at("2026-12-31T00:00:00Z")),
            Some(at("2027-01-01T00:00:10Z"))
        );
        assert_eq!(
            spec.tick_after(&timing, at("2027-01-01T00:00:10Z")),
            Some(at("2027-01-01T00:00:20Z"))
        );
        assert_eq!(spec.tick_after(&timing, at("2027-01-01T00:00:20Z")), None);
    }
}
