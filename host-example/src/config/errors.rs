//! figment's errors as one line: the full dotted key, where its value came from (the
//! file or the variable), and for an unknown key the closest valid one.

use figment::Source;
use figment::error::Kind;
use workflow::suggest::did_you_mean;

use crate::config::env::{ENV_SOURCE, EnvOverrides};
use crate::config::keys::{dotted, env_name};

/// A figment error as one line: the full dotted key (never figment's `default.`
/// profile prefix), where the value came from (the file, or the variable that set
/// it), and for an unknown key the closest valid one.
pub(super) fn describe(error: &figment::Error, env: &EnvOverrides) -> String {
    error
        .clone()
        .into_iter()
        .map(|e| describe_one(&e, env))
        .collect::<Vec<_>>()
        .join("; ")
}

fn describe_one(error: &figment::Error, env: &EnvOverrides) -> String {
    let from_env = error
        .metadata
        .as_ref()
        .is_some_and(|m| m.name == ENV_SOURCE);
    // Where the value came from: ` (in FILE)` or ` (from VARIABLE)`.
    let source = |path: &[String]| -> String {
        if from_env {
            return match env.variable_for(path) {
                Some(variable) => format!(" (from {variable})"),
                None => " (from the environment)".to_owned(),
            };
        }
        match error.metadata.as_ref().and_then(|m| m.source.as_ref()) {
            Some(Source::File(file)) => format!(" (in {})", file.display()),
            _ => String::new(),
        }
    };
    match &error.kind {
        Kind::UnknownField(found, expected) => {
            // figment's path ends with the unknown key itself.
            let mut section: Vec<String> = error.path.clone();
            if section.last() == Some(found) {
                section.pop();
            }
            let mut key = section.clone();
            key.push(found.clone());
            let source = source(&key);
            let named = |name: &str| {
                let mut near = section.clone();
                near.push(name.to_owned());
                if from_env {
                    format!("{} ({})", dotted(&near), env_name(&near))
                } else {
                    dotted(&near)
                }
            };
            match did_you_mean(found, expected.iter().copied()) {
                Some(near) if section.is_empty() => {
                    format!("unknown section [{found}]{source}; did you mean [{near}]?")
                }
                Some(near) => format!(
                    "unknown key {}{source}; did you mean {}?",
                    dotted(&key),
                    named(near)
                ),
                None if section.is_empty() => format!(
                    "unknown section [{found}]{source}; the sections are {}",
                    expected.join(", ")
                ),
                None => format!(
                    "unknown key {}{source}; the keys of [{}] are {}",
                    dotted(&key),
                    dotted(&section),
                    expected.join(", ")
                ),
            }
        }
        // The environment's own errors name their variable.
        kind if error.path.is_empty() && from_env => one_line(&kind.to_string()),
        kind if error.path.is_empty() => format!("{}{}", one_line(&kind.to_string()), source(&[])),
        kind => format!(
            "{}{}: {}",
            dotted(&error.path),
            source(&error.path),
            one_line(&kind.to_string())
        ),
    }
}

/// A message on one line. A TOML syntax error comes with a snippet of the file over
/// several lines (`TOML parse error at line 1, column 6`, the line with a caret under
/// the column, `invalid table header`, ...): kept are the position and the message.
fn one_line(message: &str) -> String {
    let snippet = |line: &str| {
        let line = line.trim();
        line.is_empty()
            || line.starts_with('|')
            || line.split_once('|').is_some_and(|(number, _)| {
                let number = number.trim();
                !number.is_empty() && number.chars().all(|c| c.is_ascii_digit())
            })
    };
    let mut lines = message.lines().filter(|line| !snippet(line)).map(str::trim);
    let first = lines.next().unwrap_or_default().to_owned();
    let rest: Vec<&str> = lines.collect();
    if rest.is_empty() {
        first
    } else {
        format!("{first}: {}", rest.join("; "))
    }
}
