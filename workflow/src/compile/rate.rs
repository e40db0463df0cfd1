//! A called step's `rateLimit`: a token bucket the jobs store keeps for the whole
//! fleet, which each call of the step (each element of a map step) takes its units
//! from before it is made.
//!
//! ```json
//! "rateLimit": { "key": "input.customerId", "rate": "100/min", "burst": 10,
//!                "units": "size(input.chunks)" }
//! ```
//!
//! `rate` is `<count>/<unit>` (`s`, `sec`, `second`, `min`, `minute`, `h`, `hour`,
//! `day`); `burst` (default 1, at most [`MAX_BURST`]) is how many units the bucket
//! holds when full, so calls may come that close together; `key` (optional) is a CEL
//! string over the step's scope giving each value its own bucket; `units` (optional,
//! default 1) a CEL whole number, what one call costs (at most the burst: a call
//! costing more fails its step, as it could never be let through). The buckets are named
//! [`RateLimitRule::bucket_for`]. A call over the limit is deferred by the jobs
//! worker, never failed; a synchronous run ignores the limit.

use serde_json::{Map, Value};

use crate::compile::draft::{Draft, json_kind};
use crate::gate::Gate;
pub use crate::rate::{MAX_BURST, Rate, RateLimitRule};
use crate::spec::Completion;

pub(super) const LIMIT_KEYS: &[&str] = &["key", "rate", "burst", "units"];

/// Reads a step's `rateLimit` (a called step's only), with a finding per problem;
/// answers it with the JSON path of each expression (`key`, `units`).
pub(super) fn read_rate_limit(
    draft: &mut Draft<'_>,
    object: &Map<String, Value>,
    completion: Completion,
    step: Option<&str>,
    path: &str,
) -> Option<RateLimitRule> {
    let value = object.get("rateLimit")?;
    let path = format!("{path}.rateLimit");
    if completion != Completion::Call {
        draft.find(
            step,
            &path,
            "only a called step has a rateLimit: the others make no call",
        );
        return None;
    }
    let Some(limit) = value.as_object() else {
        draft.find(
            step,
            &path,
            format!(
                "'rateLimit' must be an object like {{\"rate\": \"100/min\"}}, not {}",
                json_kind(value)
            ),
        );
        return None;
    };
    draft.unknown_keys(limit, LIMIT_KEYS, step, &path);
    let rate = draft
        .string(limit, "rate", true, step, &path)
        .and_then(|text| match Rate::parse(&text) {
            Ok(rate) => Some(rate),
            Err(reason) => {
                draft.find(step, format!("{path}.rate"), format!("'rate' {reason}"));
                None
            }
        });
    let burst = match limit.get("burst").filter(|v| !v.is_null()) {
        None => Some(1),
        Some(value) => match value.as_u64().filter(|n| (1..=MAX_BURST).contains(n)) {
            // At most MAX_BURST, far below u32::MAX.
            Some(n) => u32::try_from(n).ok(),
            None => {
                draft.find(
                    step,
                    format!("{path}.burst"),
                    format!("'burst' must be a whole number from 1 to {MAX_BURST}, not {value}"),
                );
                None
            }
        },
    };
    let mut expression = |field: &str, label: &'static str| -> Result<Option<Gate>, ()> {
        let Some(source) = draft.string(limit, field, false, step, &path) else {
            // Absent, or refused with a finding.
            return match limit.get(field) {
                Some(value) if !value.is_null() => Err(()),
                _ => Ok(None),
            };
        };
        match Gate::compile_as(&source, label) {
            Ok(gate) => Ok(Some(gate)),
            Err(reason) => {
                draft.find(step, format!("{path}.{field}"), format!("{label} {reason}"));
                Err(())
            }
        }
    };
    let key = expression("key", "rateLimit `key`");
    let units = expression("units", "rateLimit `units`");
    Some(RateLimitRule {
        key: key.ok()?,
        rate: rate?,
        burst: burst?,
        units: units.ok()?,
    })
}

impl super::CompiledWorkflow {
    /// The strict checks of each step's `rateLimit` (see
    /// [`CompiledWorkflow::strict_findings`](super::CompiledWorkflow::strict_findings)):
    /// its key type-checks as a string and its units as a whole number, over the
    /// step's scope (a map step's, which reads `item`, is checked when it runs).
    pub(super) fn rate_limit_findings(&self) -> Vec<super::Finding> {
        let mut findings = Vec::new();
        for step in self.steps.iter().filter(|s| s.map.is_none()) {
            let Some(limit) = &step.rate_limit else {
                continue;
            };
            let root_type = |root: &str| self.root_type_from(step, root);
            let checks = [
                (
                    "key",
                    limit.key.as_ref().map(|k| k.check_string_type(&root_type)),
                ),
                (
                    "units",
                    limit.units.as_ref().map(|u| u.check_int_type(&root_type)),
                ),
            ];
            for (field, problems) in checks {
                if let Some(problems) = problems.filter(|p| !p.is_empty()) {
                    findings.push(super::Finding {
                        step: Some(step.name.clone()),
                        path: format!("$.steps[{}].rateLimit.{field}", step.index),
                        message: format!("rateLimit `{field}` {}", problems.join("; ")),
                    });
                }
            }
        }
        findings
    }
}
