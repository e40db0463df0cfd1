//! Reading an envelope's fields: each reader returns the value or records a
//! [`Finding`] naming the step and JSON path, so compilation never stops at the first
//! problem.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::compile::limits::{
    MAX_DEADLINE_MS, MAX_RESPONSE_BYTES_CEILING, MAX_RULES, MAX_WAIT_TIMEOUT_MS,
};
use crate::finding::Finding;
use crate::rules::{Rule, parse_rule};
use crate::spec::{Completion, OnTimeout};

/// The findings of one compilation, and the field readers that add to them.
pub(super) struct Draft<'a> {
    pub(super) findings: &'a mut Vec<Finding>,
}

impl Draft<'_> {
    pub(super) fn find(
        &mut self,
        step: Option<&str>,
        path: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.findings.push(Finding {
            step: step.map(str::to_owned),
            path: path.into(),
            message: message.into(),
        });
    }

    pub(super) fn unknown_keys(
        &mut self,
        object: &Map<String, Value>,
        allowed: &[&str],
        step: Option<&str>,
        path: &str,
    ) {
        for key in object.keys().filter(|k| !allowed.contains(&k.as_str())) {
            let meant = crate::suggest::did_you_mean(key, allowed.iter().copied())
                .map(|meant| format!("did you mean '{meant}'? "))
                .unwrap_or_default();
            self.find(
                step,
                format!("{path}.{key}"),
                format!(
                    "unknown field '{key}'; {meant}expected one of: {}",
                    allowed.join(", ")
                ),
            );
        }
    }

    pub(super) fn string(
        &mut self,
        object: &Map<String, Value>,
        key: &str,
        required: bool,
        step: Option<&str>,
        path: &str,
    ) -> Option<String> {
        match object.get(key) {
            None | Some(Value::Null) => {
                if required {
                    self.find(
                        step,
                        format!("{path}.{key}"),
                        format!("'{key}' is required"),
                    );
                }
                None
            }
            Some(Value::String(s)) if s.trim().is_empty() => {
                self.find(
                    step,
                    format!("{path}.{key}"),
                    format!("'{key}' must not be blank"),
                );
                None
            }
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.find(
                    step,
                    format!("{path}.{key}"),
                    format!("'{key}' must be a string, not {}", json_kind(other)),
                );
                None
            }
        }
    }

    pub(super) fn boolean(
        &mut self,
        object: &Map<String, Value>,
        key: &str,
        step: Option<&str>,
        path: &str,
    ) -> bool {
        match object.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.find(
                    step,
                    format!("{path}.{key}"),
                    format!("'{key}' must be true or false, not {}", json_kind(other)),
                );
                false
            }
        }
    }

    pub(super) fn deadline(
        &mut self,
        object: &Map<String, Value>,
        step: Option<&str>,
        path: &str,
    ) -> Option<Duration> {
        let value = object.get("deadlineMs")?;
        match value.as_u64() {
            Some(ms) if (1..=MAX_DEADLINE_MS).contains(&ms) => Some(Duration::from_millis(ms)),
            _ => {
                self.find(step, format!("{path}.deadlineMs"), format!("'deadlineMs' must be a whole number of milliseconds from 1 to {MAX_DEADLINE_MS}, not {value}"));
                None
            }
        }
    }

    /// `waitTimeoutMs` and `onTimeout`, which only an external step may have.
    pub(super) fn parked_wait(
        &mut self,
        object: &Map<String, Value>,
        completion: Completion,
        step: Option<&str>,
        path: &str,
    ) -> (Option<Duration>, OnTimeout) {
        for key in ["waitTimeoutMs", "onTimeout"] {
            // A sleep step refuses them where it is read.
            if matches!(completion, Completion::Call) && object.contains_key(key) {
                self.find(
                    step,
                    format!("{path}.{key}"),
                    format!("'{key}' applies to steps that wait (\"completion\": \"external\" or \"event\") only; remove it"),
                );
            }
        }
        let wait = object.get("waitTimeoutMs").and_then(|value| match value.as_u64() {
            Some(ms) if (1..=MAX_WAIT_TIMEOUT_MS).contains(&ms) => Some(Duration::from_millis(ms)),
            _ => {
                self.find(step, format!("{path}.waitTimeoutMs"), format!("'waitTimeoutMs' must be a whole number of milliseconds from 1 to {MAX_WAIT_TIMEOUT_MS}, not {value}"));
                None
            }
        });
        let on_timeout = match object.get("onTimeout") {
            None | Some(Value::Null) => OnTimeout::Fail,
            Some(Value::String(s)) if s == "fail" => OnTimeout::Fail,
            Some(Value::String(s)) if s == "dead" => OnTimeout::Dead,
            Some(other) => {
                self.find(
                    step,
                    format!("{path}.onTimeout"),
                    format!("'onTimeout' must be \"fail\" or \"dead\", not {other}"),
                );
                OnTimeout::Fail
            }
        };
        (wait, on_timeout)
    }

    pub(super) fn max_response_bytes(
        &mut self,
        object: &Map<String, Value>,
        step: Option<&str>,
        path: &str,
    ) -> Option<usize> {
        let value = object.get("maxResponseBytes")?;
        match value.as_u64() {
            Some(bytes) if (1..=MAX_RESPONSE_BYTES_CEILING).contains(&bytes) => {
                usize::try_from(bytes).ok()
            }
            _ => {
                self.find(step, format!("{path}.maxResponseBytes"), format!("'maxResponseBytes' must be a whole number of bytes from 1 to {MAX_RESPONSE_BYTES_CEILING}, not {value}"));
                None
            }
        }
    }

    pub(super) fn rules(
        &mut self,
        object: &Map<String, Value>,
        step: Option<&str>,
        path: &str,
    ) -> Vec<(Rule, String)> {
        let Some(value) = object.get("rules") else {
            return Vec::new();
        };
        let Some(items) = value.as_array() else {
            self.find(
                step,
                format!("{path}.rules"),
                format!(
                    "'rules' must be an array of strings, not {}",
                    json_kind(value)
                ),
            );
            return Vec::new();
        };
        if items.len() > MAX_RULES {
            self.find(
                step,
                format!("{path}.rules"),
                format!(
                    "{} rules is more than the limit of {MAX_RULES}",
                    items.len()
                ),
            );
            return Vec::new();
        }
        let mut rules = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let rule_path = format!("{path}.rules[{i}]");
            match item.as_str().map(parse_rule) {
                Some(Ok(rule)) => rules.push((rule, rule_path)),
                Some(Err(reason)) => self.find(step, rule_path, reason),
                None => self.find(
                    step,
                    rule_path,
                    format!("a rule must be a string, not {}", json_kind(item)),
                ),
            }
        }
        rules
    }
}

pub(super) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
