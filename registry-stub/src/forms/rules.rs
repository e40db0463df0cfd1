//! The `buf.validate` rules a field or message declares, described for a form: each
//! rule's id, value, the message a refusal would carry and a short summary for the
//! field's hint.

use prost_protovalidate_types::rules_meta;
use prost_reflect::{FieldDescriptor, MessageDescriptor};
use serde_json::{Map, Value, json};
use workflow::failure::rule_sentence;

/// A rule's value whose JSON is longer is shown cut and left to the node.
const MAX_RULE_VALUE_CHARS: usize = 2_000;
/// Rules shown per field or message.
pub(super) const MAX_RULES: usize = 50;

/// The message-level CEL rules: `[{id, message}]` (the node checks them).
pub(super) fn message_rules(message: &MessageDescriptor) -> Value {
    let Some(extension) = message
        .parent_pool()
        .get_extension_by_name("buf.validate.message")
    else {
        return json!([]);
    };
    let options = message.options();
    if !options.has_extension(&extension) {
        return json!([]);
    }
    let rules = to_json(&options.get_extension(&extension));
    cel_rules(&rules["cel"])
}

fn cel_rules(cel: &Value) -> Value {
    cel.as_array()
        .map(|rules| {
            rules
                .iter()
                .take(MAX_RULES)
                .map(|rule| {
                    let message = rule["message"]
                        .as_str()
                        .filter(|m| !m.is_empty())
                        .or(rule["expression"].as_str())
                        .unwrap_or_default();
                    json!({ "id": cut(rule["id"].as_str().unwrap_or_default(), 200),
                            "message": cut(message, 500) })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A `buf.validate` option value as proto3 JSON (camelCase keys, 64-bit integers as
/// strings).
fn to_json(value: &prost_reflect::Value) -> Value {
    value
        .as_message()
        .and_then(|m| serde_json::to_value(m).ok())
        .unwrap_or(Value::Null)
}

/// A field's declared `buf.validate` rules, as the form shows them.
#[derive(Default)]
pub(super) struct DeclaredRules {
    pub(super) required: bool,
    /// `ignore: IGNORE_IF_ZERO_VALUE` (or its older names): an empty value is not
    /// checked.
    pub(super) ignore_empty: bool,
    /// Each `{id, value, message, summary, checkedBy}`.
    pub(super) rules: Vec<Value>,
}

pub(super) fn field_rules(field: &FieldDescriptor) -> DeclaredRules {
    let Some(extension) = field
        .parent_pool()
        .get_extension_by_name("buf.validate.field")
    else {
        return DeclaredRules::default();
    };
    let options = field.options();
    if !options.has_extension(&extension) {
        return DeclaredRules::default();
    }
    let declared = to_json(&options.get_extension(&extension));
    let ignore = declared["ignore"].as_str().unwrap_or_default();
    if ignore == "IGNORE_ALWAYS" {
        // The node never checks them: nothing to show or check.
        return DeclaredRules::default();
    }
    let mut rules = Vec::new();
    let required = declared["required"].as_bool().unwrap_or(false);
    if required {
        rules.push(rule(
            "required",
            json!(true),
            "value is required".into(),
            "required".into(),
            true,
        ));
    }
    for cel in cel_rules(&declared["cel"]).as_array().into_iter().flatten() {
        let message = cel["message"].as_str().unwrap_or_default().to_owned();
        rules.push(json!({
            "id": cel["id"], "value": Value::Null, "message": message.clone(),
            "summary": message, "checkedBy": "node",
        }));
    }
    if let Some(object) = declared.as_object() {
        for (kind, typed) in object {
            if matches!(kind.as_str(), "required" | "cel" | "ignore") {
                continue;
            }
            if let Some(typed) = typed.as_object() {
                typed_rules(kind, typed, &mut rules);
            }
        }
    }
    DeclaredRules {
        required,
        ignore_empty: matches!(
            ignore,
            "IGNORE_IF_ZERO_VALUE" | "IGNORE_IF_UNPOPULATED" | "IGNORE_IF_DEFAULT_VALUE"
        ),
        rules,
    }
}

/// The numeric kinds' rule groups.
const NUMERIC: [&str; 12] = [
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32",
    "fixed64", "sfixed32", "sfixed64",
];

fn typed_rules(kind: &str, typed: &Map<String, Value>, rules: &mut Vec<Value>) {
    // An exclusive range (lt below gt) is "outside", which the page does not model.
    let exclusive = NUMERIC.contains(&kind) && {
        let bound = |keys: [&str; 2]| keys.iter().find_map(|k| typed.get(*k)).and_then(number_of);
        matches!((bound(["gt", "gte"]), bound(["lt", "lte"])), (Some(g), Some(l)) if l < g)
    };
    for (key, value) in typed {
        let id = format!("{kind}.{}", snake_case(key));
        if value.to_string().len() > MAX_RULE_VALUE_CHARS {
            // Too long to carry (a huge `in` list, a pattern of a page): shown cut,
            // checked by the node.
            let text = format!("{id}: {}", compact(value));
            rules.push(rule(&id, Value::Null, text.clone(), text, false));
            continue;
        }
        let shown = display(value);
        let (message, summary, page) = match (kind, key.as_str()) {
            (k, "const") if NUMERIC.contains(&k) => (
                rules_meta::numeric::const_message(&shown),
                format!("= {shown}"),
                true,
            ),
            (k, "gt" | "gte" | "lt" | "lte") if NUMERIC.contains(&k) => {
                let (words, sign) = match key.as_str() {
                    "gt" => ("greater than", ">"),
                    "gte" => ("greater than or equal to", "≥"),
                    "lt" => ("less than", "<"),
                    _ => ("less than or equal to", "≤"),
                };
                (
                    format!("value must be {words} {shown}"),
                    format!("{sign} {shown}"),
                    !exclusive,
                )
            }
            (k, "in") if NUMERIC.contains(&k) || k == "string" || k == "enum" => (
                format!("{} [{}]", rules_meta::numeric::IN_MESSAGE, list(value)),
                format!("one of {}", list(value)),
                true,
            ),
            (k, "notIn") if NUMERIC.contains(&k) || k == "string" || k == "enum" => (
                format!("{} [{}]", rules_meta::numeric::NOT_IN_MESSAGE, list(value)),
                format!("not {}", list(value)),
                true,
            ),
            ("string", "const") => (
                rules_meta::string::const_message(&shown),
                format!("exactly \"{shown}\""),
                true,
            ),
            ("string", "len") => (
                rules_meta::string::len_message(count(value)),
                format!("exactly {shown} characters"),
                true,
            ),
            ("string", "minLen") => (
                rules_meta::string::min_len_message(count(value)),
                format!("at least {shown} characters"),
                true,
            ),
            ("string", "maxLen") => (
                rules_meta::string::max_len_message(count(value)),
                format!("at most {shown} characters"),
                true,
            ),
            // A pattern is left to the node: JavaScript's regular expressions are
            // not RE2 (Unicode classes differ) and can backtrack for seconds.
            ("string", "pattern") => (
                rules_meta::string::pattern_message(&shown),
                format!("matches {shown}"),
                false,
            ),
            ("string", "prefix") => (
                rules_meta::string::prefix_message(&shown),
                format!("starts with \"{shown}\""),
                true,
            ),
            ("string", "suffix") => (
                rules_meta::string::suffix_message(&shown),
                format!("ends with \"{shown}\""),
                true,
            ),
            ("string", "contains") => (
                rules_meta::string::contains_message(&shown),
                format!("contains \"{shown}\""),
                true,
            ),
            ("string", "notContains") => (
                rules_meta::string::not_contains_message(&shown),
                format!("without \"{shown}\""),
                true,
            ),
            // Email addresses and URIs are left to the node: its parsers are the
            // standard's, a page's pattern would only approximate them.
            // The node's own sentences for these rules, so the page and the node say
            // the same thing.
            ("string", "email") => (
                rule_sentence("string.email"),
                "an email address".into(),
                false,
            ),
            ("string", "uuid") => (rule_sentence("string.uuid"), "a UUID".into(), true),
            ("string", "uri") => (rule_sentence("string.uri"), "a URI".into(), false),
            ("bytes", "minLen") => (
                rules_meta::bytes::min_len_message(count(value)),
                format!("at least {shown} bytes"),
                true,
            ),
            ("bytes", "maxLen") => (
                rules_meta::bytes::max_len_message(count(value)),
                format!("at most {shown} bytes"),
                true,
            ),
            ("enum", "const") => (
                rules_meta::numeric::const_message(&shown),
                format!("= {shown}"),
                true,
            ),
            ("enum", "definedOnly") => (
                rules_meta::enumeration::DEFINED_ONLY_MESSAGE.into(),
                "a defined value".into(),
                true,
            ),
            ("repeated", "minItems") => (
                rules_meta::repeated::min_items_message(count(value)),
                format!("at least {shown} items"),
                true,
            ),
            ("repeated", "maxItems") => (
                rules_meta::repeated::max_items_message(count(value)),
                format!("at most {shown} items"),
                true,
            ),
            ("repeated", "unique") => (
                rules_meta::repeated::UNIQUE_MESSAGE.into(),
                "no duplicates".into(),
                true,
            ),
            // Everything else (well-known formats, time-relative bounds, the rules of
            // a list's items or a map's keys and values) is shown and left to the node.
            (_, other) => {
                let text = format!("{kind}.{}: {}", snake_case(other), compact(value));
                (text.clone(), text, false)
            }
        };
        // A float's bounds compare in 32 bits on the node; the page would compare in 64.
        let page = page && kind != "float";
        rules.push(rule(&id, value.clone(), message, summary, page));
    }
}

fn rule(id: &str, value: Value, message: String, summary: String, page: bool) -> Value {
    json!({
        "id": id,
        "value": value,
        "message": message,
        "summary": summary,
        "checkedBy": if page { "page" } else { "node" },
    })
}

/// A rule value as its message shows it: strings bare, numbers as written.
fn display(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn compact(value: &Value) -> String {
    cut(&display(value), 120)
}

/// `text`, cut to `max` characters with an ellipsis.
pub(super) fn cut(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        text.chars()
            .take(max.saturating_sub(1))
            .chain(std::iter::once('…'))
            .collect()
    } else {
        text.to_owned()
    }
}

fn list(value: &Value) -> String {
    value
        .as_array()
        .map(|items| items.iter().map(display).collect::<Vec<_>>().join(", "))
        .unwrap_or_default()
}

/// A count rule's value (proto3 JSON writes `uint64` as a string).
fn count(value: &Value) -> u64 {
    match value {
        Value::String(s) => s.parse().unwrap_or(0),
        other => other.as_u64().unwrap_or(0),
    }
}

fn number_of(value: &Value) -> Option<f64> {
    match value {
        Value::String(s) => s.parse().ok(),
        other => other.as_f64(),
    }
}

pub(super) fn snake_case(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
