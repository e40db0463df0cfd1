//! A rate limit's types: [`Rate`] (`600/min`) and a step's compiled `rateLimit`
//! ([`RateLimitRule`]); read from an envelope by `compile::rate`.

use std::fmt;
use std::time::Duration;

use crate::gate::Gate;

/// The largest `burst` a limit may declare.
pub const MAX_BURST: u64 = 1_000_000;
/// The largest count a rate may give per unit of time.
const MAX_RATE_COUNT: u64 = 1_000_000_000;

/// A rate: `count` units per `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Units per period.
    pub count: u64,
    /// The period.
    pub per: Duration,
}

impl Rate {
    /// Parses `<count>/<unit>` (`600/min`, `10/s`, `5000/hour`, `1/day`), or says why
    /// not.
    pub fn parse(text: &str) -> Result<Rate, String> {
        let example = "for example \"600/min\", \"10/s\" or \"5000/hour\"";
        let Some((count, unit)) = text.trim().split_once('/') else {
            return Err(format!("'{text}' is not <count>/<unit>: {example}"));
        };
        let count: u64 = count
            .trim()
            .parse()
            .ok()
            .filter(|n| (1..=MAX_RATE_COUNT).contains(n))
            .ok_or_else(|| {
                format!("'{text}': the count must be a whole number from 1 to {MAX_RATE_COUNT}; {example}")
            })?;
        let per = match unit.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            "d" | "day" => Duration::from_secs(86_400),
            other => {
                return Err(format!(
                    "'{text}': the unit '{other}' is not s, min, hour or day; {example}"
                ));
            }
        };
        Ok(Rate { count, per })
    }

    /// Units per second.
    pub fn per_second(&self) -> f64 {
        self.count as f64 / self.per.as_secs_f64()
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "s",
            60 => "min",
            3600 => "hour",
            _ => "day",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// A compiled `rateLimit`.
#[derive(Debug, Clone)]
pub struct RateLimitRule {
    /// Gives each value its own bucket (a CEL string over the step's scope).
    pub key: Option<Gate>,
    /// The rate.
    pub rate: Rate,
    /// How many units the bucket holds when full.
    pub burst: u32,
    /// What one call costs (a CEL whole number over the step's scope; 1 without).
    pub units: Option<Gate>,
}

impl RateLimitRule {
    /// The bucket of step `step` of workflow `workflow` for key value `key`:
    /// `<workflow>.<step>` or `<workflow>.<step>=<key>`.
    pub fn bucket_for(&self, workflow: &str, step: &str, key: Option<&str>) -> String {
        match key {
            Some(key) => format!("{workflow}.{step}={key}"),
            None => format!("{workflow}.{step}"),
        }
    }
}
