//! Flow control a workflow declares: `concurrency`, the keys that bound how many of
//! its jobs run at once across the whole fleet.
//!
//! ```json
//! "concurrency": [
//!   { "key": "input.customerId", "limit": 2, "strategy": "queue", "weight": 1 },
//!   { "key": "'all'", "limit": 50 }
//! ]
//! ```
//!
//! Each entry's `key` is a CEL expression over `input` that must be a string; it is
//! computed when a job is submitted and stored with the job. At most `limit` jobs of
//! one key run at once. `strategy` says what a submission over the limit does:
//! `queue` (the default: it waits its turn), `cancel-newest` (it ends CANCELLED at
//! once) or `cancel-oldest` (the oldest queued or running job of the key is cancelled
//! to make room). `weight` (1 to [`MAX_WEIGHT`], default 1) gives a key more turns
//! when claims rotate among keys with work.
//!
//! A key is scoped to its workflow: the stored key is
//! `<workflow>:<expression>=<value>` ([`ConcurrencyRule::key_for`]), so two workflows
//! that both key on `input.customerId` never share slots, and one workflow's two
//! entries never collide.

use serde_json::{Map, Value};

use crate::compile::draft::{Draft, json_kind};
use crate::gate::Gate;

/// Most entries one workflow's `concurrency` may hold.
pub const MAX_CONCURRENCY_KEYS: usize = 3;
/// The largest `limit` an entry may declare.
pub const MAX_CONCURRENCY_LIMIT: u64 = 100_000;
/// The largest `weight` an entry may declare.
pub const MAX_WEIGHT: u64 = 100;
/// The longest key value a submission may compute, in characters.
pub const MAX_KEY_VALUE_CHARS: usize = 256;
/// The longest key expression, in characters.
const MAX_KEY_EXPRESSION_CHARS: usize = 500;

/// What a submission over an entry's limit does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConcurrencyStrategy {
    /// It waits its turn (the default).
    #[default]
    Queue,
    /// It ends CANCELLED at once, saying why.
    CancelNewest,
    /// The oldest queued or running job of the key is cancelled to make room.
    CancelOldest,
}

impl ConcurrencyStrategy {
    /// The envelope's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            ConcurrencyStrategy::Queue => "queue",
            ConcurrencyStrategy::CancelNewest => "cancel-newest",
            ConcurrencyStrategy::CancelOldest => "cancel-oldest",
        }
    }

    /// The strategy spelled `text`.
    pub fn parse(text: &str) -> Option<ConcurrencyStrategy> {
        [
            ConcurrencyStrategy::Queue,
            ConcurrencyStrategy::CancelNewest,
            ConcurrencyStrategy::CancelOldest,
        ]
        .into_iter()
        .find(|strategy| strategy.as_str() == text)
    }
}

/// One compiled `concurrency` entry.
#[derive(Debug, Clone)]
pub struct ConcurrencyRule {
    /// The key expression (a CEL string over `input`).
    pub key: Gate,
    /// At most this many jobs of one key run at once.
    pub limit: u32,
    /// What a submission over the limit does.
    pub strategy: ConcurrencyStrategy,
    /// Its share of turns when claims rotate among keys (1 to [`MAX_WEIGHT`]).
    pub weight: u32,
}

impl ConcurrencyRule {
    /// The stored key for `value` computed in workflow `workflow`:
    /// `<workflow>:<expression>=<value>`.
    pub fn key_for(&self, workflow: &str, value: &str) -> String {
        format!("{workflow}:{}={value}", self.key.source)
    }
}

/// One key a job holds: computed at submission from a [`ConcurrencyRule`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcurrencyKey {
    /// The stored key (see [`ConcurrencyRule::key_for`]).
    pub key: String,
    /// Its limit.
    pub limit: u32,
    /// Its strategy.
    pub strategy: ConcurrencyStrategy,
    /// Its weight.
    pub weight: u32,
}

/// Why `value` cannot be a key's value, or `None`: 1 to [`MAX_KEY_VALUE_CHARS`]
/// characters, no control or invisible formatting character (which would make one key
/// display as another in `get-job` and the console).
pub fn key_value_problem(value: &str) -> Option<String> {
    let length = value.chars().count();
    if length == 0 || length > MAX_KEY_VALUE_CHARS {
        return Some(format!(
            "is {length} characters long: a key is 1 to {MAX_KEY_VALUE_CHARS} characters"
        ));
    }
    hidden_character(value).map(|c| {
        format!(
            "holds U+{:04X}, a control or invisible formatting character",
            u32::from(c)
        )
    })
}

/// The first control or invisible formatting character of `text` (one that makes a
/// name or key display as another), if any.
pub fn hidden_character(text: &str) -> Option<char> {
    text.chars()
        .find(|c| c.is_control() || crate::compile::is_invisible_format(*c))
}

pub(super) const ENTRY_KEYS: &[&str] = &["key", "limit", "strategy", "weight"];

/// Reads the envelope's `concurrency` (absent: none), with a finding per problem.
pub(super) fn read_concurrency(
    draft: &mut Draft<'_>,
    root: &Map<String, Value>,
) -> Vec<ConcurrencyRule> {
    let Some(value) = root.get("concurrency") else {
        return Vec::new();
    };
    let Some(entries) = value.as_array() else {
        draft.find(
            None,
            "$.concurrency",
            format!(
                "'concurrency' must be a list of {{key, limit}} objects, not {}",
                json_kind(value)
            ),
        );
        return Vec::new();
    };
    if entries.len() > MAX_CONCURRENCY_KEYS {
        draft.find(
            None,
            "$.concurrency",
            format!(
                "'concurrency' holds {} entries; a workflow may declare at most {MAX_CONCURRENCY_KEYS}",
                entries.len()
            ),
        );
        return Vec::new();
    }
    let mut rules: Vec<ConcurrencyRule> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let path = format!("$.concurrency[{index}]");
        if let Some(rule) = read_entry(draft, entry, &path) {
            if rules.iter().any(|seen| seen.key.source == rule.key.source) {
                draft.find(
                    None,
                    format!("{path}.key"),
                    format!(
                        "the key `{}` is declared twice: give each entry its own expression",
                        rule.key.source
                    ),
                );
                continue;
            }
            rules.push(rule);
        }
    }
    rules
}

fn read_entry(draft: &mut Draft<'_>, entry: &Value, path: &str) -> Option<ConcurrencyRule> {
    let Some(object) = entry.as_object() else {
        draft.find(
            None,
            path,
            format!(
                "a concurrency entry must be an object like {{\"key\": \"input.customerId\", \"limit\": 2}}, not {}",
                json_kind(entry)
            ),
        );
        return None;
    };
    draft.unknown_keys(object, ENTRY_KEYS, None, path);
    let key = draft
        .string(object, "key", true, None, path)
        .and_then(|source| {
            if source.chars().count() > MAX_KEY_EXPRESSION_CHARS {
                draft.find(
                    None,
                    format!("{path}.key"),
                    format!(
                        "the key expression is longer than {MAX_KEY_EXPRESSION_CHARS} characters"
                    ),
                );
                return None;
            }
            match Gate::compile_as(&source, "concurrency `key`") {
                Ok(gate) => Some(gate),
                Err(reason) => {
                    draft.find(None, format!("{path}.key"), format!("the key {reason}"));
                    None
                }
            }
        });
    if let Some(gate) = &key
        && let Some(root) = gate.variables().into_iter().find(|root| root != "input")
    {
        draft.find(
            None,
            format!("{path}.key"),
            format!(
                "the key reads '{root}': a concurrency key is computed at submission, so it may read `input` only"
            ),
        );
    }
    let limit = whole_number(draft, object, "limit", path, 1, MAX_CONCURRENCY_LIMIT, None);
    let weight = whole_number(draft, object, "weight", path, 1, MAX_WEIGHT, Some(1));
    let strategy = match object.get("strategy") {
        None | Some(Value::Null) => Some(ConcurrencyStrategy::Queue),
        Some(Value::String(text)) => ConcurrencyStrategy::parse(text).or_else(|| {
            draft.find(
                None,
                format!("{path}.strategy"),
                format!("'strategy' must be \"queue\", \"cancel-newest\" or \"cancel-oldest\", not \"{text}\""),
            );
            None
        }),
        Some(other) => {
            draft.find(
                None,
                format!("{path}.strategy"),
                format!("'strategy' must be a string, not {}", json_kind(other)),
            );
            None
        }
    };
    Some(ConcurrencyRule {
        key: key?,
        limit: limit?,
        strategy: strategy?,
        weight: weight?,
    })
}

/// A whole number field from `min` to `max` (`default` when absent; required when
/// `default` is `None`).
fn whole_number(
    draft: &mut Draft<'_>,
    object: &Map<String, Value>,
    field: &str,
    path: &str,
    min: u64,
    max: u64,
    default: Option<u32>,
) -> Option<u32> {
    let Some(value) = object.get(field).filter(|v| !v.is_null()) else {
        if default.is_none() {
            draft.find(
                None,
                format!("{path}.{field}"),
                format!("'{field}' is required"),
            );
        }
        return default;
    };
    match value.as_u64() {
        // max fits in u32 (both bounds are far below it).
        Some(n) if (min..=max).contains(&n) => u32::try_from(n).ok(),
        _ => {
            draft.find(
                None,
                format!("{path}.{field}"),
                format!("'{field}' must be a whole number from {min} to {max}, not {value}"),
            );
            None
        }
    }
}

impl super::CompiledWorkflow {
    /// The strict checks of `concurrency` (see
    /// [`CompiledWorkflow::strict_findings`](super::CompiledWorkflow::strict_findings)):
    /// each key type-checks as a string over the input.
    pub(super) fn concurrency_findings(&self) -> Vec<super::Finding> {
        let input = crate::typecheck::Ty::of_root(&self.input_type);
        let root_type = |root: &str| (root == crate::scope::INPUT).then(|| input.clone());
        self.concurrency
            .iter()
            .enumerate()
            .filter_map(|(index, rule)| {
                let problems = rule.key.check_string_type(&root_type);
                (!problems.is_empty()).then(|| super::Finding {
                    step: None,
                    path: format!("$.concurrency[{index}].key"),
                    message: format!("the key {}", problems.join("; ")),
                })
            })
            .collect()
    }

    /// The keys a job of this workflow with `input` holds: each entry's key computed
    /// over the input on an evaluation thread within `limit`. The error names the
    /// entry and its expression, and why.
    pub async fn concurrency_keys_within(
        &self,
        input: &prost_reflect::DynamicMessage,
        limit: std::time::Duration,
    ) -> Result<Vec<ConcurrencyKey>, String> {
        if self.concurrency.is_empty() {
            return Ok(Vec::new());
        }
        let scope = crate::scope::Scope::new(input.clone());
        let mut keys = Vec::with_capacity(self.concurrency.len());
        for (index, rule) in self.concurrency.iter().enumerate() {
            let named =
                |why: String| format!("concurrency[{index}].key `{}`: {why}", rule.key.source);
            let value = rule
                .key
                .evaluate_string_within(&scope, limit)
                .await
                .map_err(named)?;
            if let Some(problem) = key_value_problem(&value) {
                return Err(named(format!("computed a key that {problem}")));
            }
            keys.push(ConcurrencyKey {
                key: rule.key_for(&self.name, &value),
                limit: rule.limit,
                strategy: rule.strategy,
                weight: rule.weight,
            });
        }
        Ok(keys)
    }
}
