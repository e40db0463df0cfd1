//! When a schedule's ticks fall: a cron expression read in an IANA time zone, or a
//! fixed period (`@every 90s`).
//!
//! Cron expressions are parsed and walked by `croner`, in the schedule's time zone
//! (`chrono-tz`, the IANA database compiled in). Five fields (minute, hour,
//! day-of-month, month, day-of-week), an optional leading seconds field, and the
//! names `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily` and `@hourly`.
//!
//! Daylight-saving changes, checked by the tests below:
//! - a local time that does not exist (the hour a spring-forward skips) fires **once**,
//!   at the first instant after the gap, for a schedule at a fixed time of day (`30 2
//!   * * *` in New York fires at 03:00 EDT that day); a schedule stepping through the
//!   hours (`*/15 * * * *`) simply has no tick in the missing hour;
//! - a local time that exists twice (a fall-back) fires **once**, at its first
//!   occurrence (the daylight-saving one).
//!
//! `@every <period>` (`90s`, `5m`, `1h30m`, `2d`; at least one second) ticks at the
//! whole multiples of the period since the Unix epoch, so every node agrees on the
//! ticks without any state; the time zone does not move them.
//!
//! Every tick is a whole second. [`Timing::next_after`] is the one source of ticks:
//! walking backwards ([`Timing::ticks_between`]) only bounds where a forward walk
//! starts, so a tick is the same instant whichever way it was found (its job id is
//! derived from it).

use std::str::FromStr;

use chrono::{DateTime, Duration, DurationRound, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// The longest cron expression accepted, in characters.
pub const MAX_CRON_CHARS: usize = 200;

/// The longest `@every` period: 366 days.
const MAX_PERIOD_SECONDS: i64 = 366 * 86_400;

/// How many times one search may step past a tick that fell at or before where it
/// started (the second pass of a fall-back's repeated hour) before it jumps ahead.
const REPEATED_HOUR_STEPS: usize = 4_000;

/// A schedule's ticks.
#[derive(Debug, Clone)]
pub enum Timing {
    /// A cron expression in a time zone.
    Cron {
        /// The parsed expression.
        cron: Box<Cron>,
        /// The zone it is read in.
        zone: Tz,
    },
    /// Every `seconds` seconds, at its whole multiples since the Unix epoch.
    Every {
        /// The period.
        seconds: i64,
    },
}

impl Timing {
    /// Parses `cron` read in the IANA zone `timezone` (empty: UTC), or the error
    /// naming the field (`cron` or `timezone`) and why.
    pub fn parse(cron: &str, timezone: &str) -> Result<Timing, String> {
        let zone = parse_zone(timezone)?;
        let text = cron.trim();
        if text.is_empty() {
            return Err(format!("cron: required: {CRON_FORMS}"));
        }
        if text.chars().count() > MAX_CRON_CHARS {
            return Err(format!("cron: at most {MAX_CRON_CHARS} characters"));
        }
        if let Some(c) = text.chars().find(|c| c.is_control() || !c.is_ascii()) {
            return Err(format!(
                "cron: holds U+{:04X}; a cron expression is plain ASCII: {CRON_FORMS}",
                u32::from(c)
            ));
        }
        if let Some(period) = text.strip_prefix("@every") {
            return parse_period(period.trim()).map(|seconds| Timing::Every { seconds });
        }
        let fields = text.split_whitespace().count();
        if !text.starts_with('@') && !(5..=6).contains(&fields) {
            return Err(format!("cron: '{text}' has {fields} fields; {CRON_FORMS}"));
        }
        let parser = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build();
        let parsed = parser
            .parse(text)
            .map_err(|e| format!("cron: '{text}' is not a cron expression ({e}); {CRON_FORMS}"))?;
        let timing = Timing::Cron {
            cron: Box::new(parsed),
            zone,
        };
        // An expression that matches no date (`0 0 30 2 *`) is refused, not stored
        // to never fire.
        if timing.next_after(Utc::now()).is_none() {
            return Err(format!(
                "cron: '{text}' never fires (no date matches it, for example February 30)"
            ));
        }
        Ok(timing)
    }

    /// The first tick strictly after `t`, or `None` when there is none (an
    /// expression no date matches, or past the year 5000).
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let t = floor_second(t);
        match self {
            Timing::Every { seconds } => {
                let at = t.timestamp().div_euclid(*seconds) * seconds + seconds;
                Utc.timestamp_opt(at, 0).single()
            }
            Timing::Cron { cron, zone } => {
                let mut from = t.with_timezone(zone);
                for _ in 0..REPEATED_HOUR_STEPS {
                    let found = cron.find_next_occurrence(&from, false).ok()?;
                    // Searching from the second pass of a repeated hour, the search
                    // (in local time) can answer that hour's first pass, before `t`:
                    // a time that exists twice fires once, so step on.
                    if found.with_timezone(&Utc) > t {
                        return Some(found.with_timezone(&Utc));
                    }
                    from = found;
                }
                // Past a whole repeated hour of such steps: look beyond it.
                self.next_after(t + Duration::hours(1))
            }
        }
    }

    /// The first tick at or after `t`.
    pub fn at_or_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let whole = floor_second(t);
        let from = if whole == t {
            t
        } else {
            whole + Duration::seconds(1)
        };
        self.next_after(from - Duration::seconds(1))
    }

    /// The ticks in `[from, to]`, oldest first; when there are more than `most`, the
    /// newest `most` of them.
    pub fn ticks_between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        most: usize,
    ) -> Vec<DateTime<Utc>> {
        if from > to || most == 0 {
            return Vec::new();
        }
        let start = match self {
            Timing::Every { seconds } => {
                // No more than `most` periods back from `to`.
                let span = Duration::seconds(seconds.saturating_mul(most as i64));
                from.max(to.checked_sub_signed(span).unwrap_or(from))
            }
            Timing::Cron { cron, zone } => {
                // Walk back `most` ticks from `to` (cheap, bounded) to find where the
                // forward walk must start; the forward walk decides the ticks.
                let mut at = floor_second(to).with_timezone(zone) + Duration::seconds(1);
                let mut steps = 0;
                while steps < most && at.with_timezone(&Utc) > from {
                    match cron.find_previous_occurrence(&at, false) {
                        Ok(previous) => at = previous,
                        Err(_) => break,
                    }
                    steps += 1;
                }
                // A few seconds before where the walk stopped: a gap's tick, found
                // backwards before the gap, is found forwards after it.
                from.max(at.with_timezone(&Utc) - Duration::hours(3))
            }
        };
        let mut ticks = std::collections::VecDeque::new();
        let mut next = self.at_or_after(start);
        while let Some(tick) = next.filter(|tick| *tick <= to) {
            if tick >= from {
                ticks.push_back(tick);
                if ticks.len() > most {
                    ticks.pop_front();
                }
            }
            next = self.next_after(tick);
        }
        ticks.into()
    }

    /// The next `count` ticks after `t`.
    pub fn upcoming(&self, t: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let mut ticks = Vec::with_capacity(count);
        let mut at = t;
        while ticks.len() < count {
            match self.next_after(at) {
                Some(tick) => {
                    ticks.push(tick);
                    at = tick;
                }
                None => break,
            }
        }
        ticks
    }
}

/// What `cron` accepts, for error messages.
const CRON_FORMS: &str = "give five fields (minute hour day-of-month month day-of-week, \
for example '0 9 * * MON-FRI'), six with a leading seconds field, a name (@hourly, \
@daily, @weekly, @monthly, @yearly), or @every with a period (@every 90s, @every 1h30m)";

/// The IANA zone `name` (empty: UTC), or the error naming `timezone`.
pub fn parse_zone(name: &str) -> Result<Tz, String> {
    if name.is_empty() {
        return Ok(Tz::UTC);
    }
    if name.len() > 64 {
        return Err("timezone: at most 64 characters (an IANA name such as Europe/Berlin)".into());
    }
    Tz::from_str(name).map_err(|_| {
        format!(
            "timezone: '{}' is not an IANA time zone name (for example UTC, Europe/Berlin, America/New_York)",
            name.escape_debug()
        )
    })
}

/// The seconds of an `@every` period (`90s`, `5m`, `1h30m`, `2d`).
fn parse_period(text: &str) -> Result<i64, String> {
    let refuse = |why: &str| {
        Err(format!(
            "cron: '@every {text}' {why}: give a period of whole numbers with units s, m, h or d, such as @every 90s or @every 1h30m"
        ))
    };
    if text.is_empty() {
        return refuse("has no period");
    }
    let mut total: i64 = 0;
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            if digits.len() >= 9 {
                return refuse("is too long");
            }
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            _ => {
                return refuse(&format!(
                    "has '{}' where a number or unit belongs",
                    c.escape_debug()
                ));
            }
        };
        let Ok(amount) = digits.parse::<i64>() else {
            return refuse("has a unit without a number before it");
        };
        digits.clear();
        total = total.saturating_add(amount.saturating_mul(unit));
    }
    if !digits.is_empty() {
        return refuse("ends in a number without a unit");
    }
    if total < 1 {
        return refuse("is shorter than one second");
    }
    if total > MAX_PERIOD_SECONDS {
        return refuse("is longer than 366 days");
    }
    Ok(total)
}

/// `t` without its fraction of a second.
fn floor_second(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(Duration::seconds(1)).unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("a test time")
            .with_timezone(&Utc)
    }

    /// The ticks of `cron` in `zone` between two instants.
    fn ticks(cron: &str, zone: &str, from: &str, to: &str) -> Vec<String> {
        let timing = Timing::parse(cron, zone).expect("a timing");
        timing
            .ticks_between(utc(from), utc(to), 1000)
            .iter()
            .map(|t| t.to_rfc3339())
            .collect()
    }

    /// The ticks found one `next_after` at a time, as the firing loop finds them.
    fn walked(cron: &str, zone: &str, from: &str, to: &str) -> Vec<String> {
        let timing = Timing::parse(cron, zone).expect("a timing");
        let mut out = Vec::new();
        let mut at = timing.at_or_after(utc(from));
        while let Some(tick) = at.filter(|t| *t <= utc(to)) {
            out.push(tick.to_rfc3339());
            at = timing.next_after(tick);
        }
        out
    }

    #[test]
    fn new_york_fires_once_on_the_spring_forward_day_and_once_on_the_fall_back_day() {
        // 2027-03-14: 02:00 EST becomes 03:00 EDT, so 02:30 does not exist.
        let spring = walked(
            "30 2 * * *",
            "America/New_York",
            "2027-03-13T00:00:00Z",
            "2027-03-16T00:00:00Z",
        );
        assert_eq!(
            spring,
            [
                "2027-03-13T07:30:00+00:00", // 02:30 EST
                "2027-03-14T07:00:00+00:00", // the gap: 03:00 EDT, once
                "2027-03-15T06:30:00+00:00", // 02:30 EDT
            ]
        );
        // 2027-11-07: 02:00 EDT becomes 01:00 EST; 02:30 exists once.
        let fall = walked(
            "30 2 * * *",
            "America/New_York",
            "2027-11-06T00:00:00Z",
            "2027-11-09T00:00:00Z",
        );
        assert_eq!(
            fall,
            [
                "2027-11-06T06:30:00+00:00",
                "2027-11-07T07:30:00+00:00",
                "2027-11-08T07:30:00+00:00",
            ]
        );
        // And walking backwards to bound the walk finds the same ticks.
        assert_eq!(
            ticks(
                "30 2 * * *",
                "America/New_York",
                "2027-03-13T00:00:00Z",
                "2027-03-16T00:00:00Z"
            ),
            spring
        );
    }

    #[test]
    fn a_time_that_exists_twice_fires_once_at_its_first_occurrence() {
        // 01:30 happens twice in New York on 2027-11-07: 05:30Z (EDT) and 06:30Z (EST).
        let fixed = walked(
            "30 1 * * *",
            "America/New_York",
            "2027-11-07T00:00:00Z",
            "2027-11-08T00:00:00Z",
        );
        assert_eq!(fixed, ["2027-11-07T05:30:00+00:00"]);
        // A stepping schedule too: each local quarter hour of the repeated hour once.
        let stepping = walked(
            "*/15 1 * * *",
            "America/New_York",
            "2027-11-07T00:00:00Z",
            "2027-11-08T00:00:00Z",
        );
        assert_eq!(
            stepping,
            [
                "2027-11-07T05:00:00+00:00",
                "2027-11-07T05:15:00+00:00",
                "2027-11-07T05:30:00+00:00",
                "2027-11-07T05:45:00+00:00",
            ]
        );
        // Starting inside the second pass does not go back to the first.
        let timing = Timing::parse("30 1 * * *", "America/New_York").expect("a timing");
        assert_eq!(
            timing.next_after(utc("2027-11-07T06:10:00Z")),
            Some(utc("2027-11-08T06:30:00Z"))
        );
    }

    #[test]
    fn berlin_weekdays_at_nine_are_eight_utc_in_winter_and_seven_in_summer() {
        assert_eq!(
            walked(
                "0 9 * * MON-FRI",
                "Europe/Berlin",
                "2027-01-08T00:00:00Z", // a Friday
                "2027-01-12T00:00:00Z",
            ),
            ["2027-01-08T08:00:00+00:00", "2027-01-11T08:00:00+00:00"]
        );
        assert_eq!(
            walked(
                "0 9 * * MON-FRI",
                "Europe/Berlin",
                "2027-07-09T00:00:00Z",
                "2027-07-13T00:00:00Z",
            ),
            ["2027-07-09T07:00:00+00:00", "2027-07-12T07:00:00+00:00"]
        );
    }

    #[test]
    fn every_ticks_at_multiples_of_its_period_since_the_epoch() {
        let timing = Timing::parse("@every 90s", "").expect("a timing");
        assert_eq!(
            timing.next_after(utc("1970-01-01T00:00:00Z")),
            Some(utc("1970-01-01T00:01:30Z"))
        );
        assert_eq!(
            timing.at_or_after(utc("1970-01-01T00:03:00Z")),
            Some(utc("1970-01-01T00:03:00Z"))
        );
        assert_eq!(
            timing.at_or_after(utc("1970-01-01T00:03:00.5Z")),
            Some(utc("1970-01-01T00:04:30Z"))
        );
        let every = Timing::parse("@every 1h30m", "Europe/Berlin").expect("a timing");
        assert!(matches!(every, Timing::Every { seconds: 5400 }));
        // At most `most` ticks, the newest.
        let second = Timing::parse("@every 1s", "").expect("a timing");
        let kept =
            second.ticks_between(utc("2020-01-01T00:00:00Z"), utc("2026-01-01T00:00:00Z"), 3);
        assert_eq!(
            kept,
            [
                utc("2025-12-31T23:59:58Z"),
                utc("2026-01-01T00:00:00Z") - Duration::seconds(1),
                utc("2026-01-01T00:00:00Z"),
            ]
        );
    }

    #[test]
    fn seconds_fields_and_names_are_accepted() {
        let seconds = Timing::parse("*/10 * * * * *", "").expect("six fields");
        assert_eq!(
            seconds.next_after(utc("2027-01-01T00:00:01Z")),
            Some(utc("2027-01-01T00:00:10Z"))
        );
        let hourly = Timing::parse("@hourly", "UTC").expect("a name");
        assert_eq!(
            hourly.next_after(utc("2027-01-01T00:00:00Z")),
            Some(utc("2027-01-01T01:00:00Z"))
        );
        assert_eq!(
            ticks("@daily", "", "2027-01-01T00:00:00Z", "2027-01-03T00:00:00Z").len(),
            3
        );
    }

    #[test]
    fn bad_expressions_and_zones_name_their_field() {
        for (cron, zone, field) in [
            ("", "", "cron:"),
            ("* * *", "", "cron:"),
            ("61 * * * *", "", "cron:"),
            ("* * * * * * * *", "", "cron:"),
            ("0 0 30 2 *", "", "never fires"),
            ("@every", "", "cron:"),
            ("@every 0s", "", "cron:"),
            ("@every 10", "", "cron:"),
            ("@every 10x", "", "cron:"),
            ("@every 999999999999d", "", "cron:"),
            ("@sometimes", "", "cron:"),
            ("* * * * \u{202e}", "", "cron:"),
            ("* * * * *\0", "", "cron:"),
            ("99999999999999999999 * * * *", "", "cron:"),
            ("*/0 * * * *", "", "cron:"),
            ("5-1 * * * *", "", "cron:"),
            ("* * * * *", "Mars/Olympus", "timezone:"),
            ("* * * * *", "europe/berlin\u{0}", "timezone:"),
        ] {
            let refused = Timing::parse(cron, zone).expect_err(cron);
            assert!(refused.contains(field), "{cron:?} in {zone:?}: {refused}");
        }
        let long = "1,".repeat(150) + "1 * * * *";
        assert!(Timing::parse(&long, "").unwrap_err().starts_with("cron:"));
    }
}
