//! Values PostgreSQL cannot store: a NUL character, in `jsonb` or in `text`. Found
//! before anything is written, so the caller hears which field to fix, or written out
//! where the value is the engine's own (an error quoting a target).

use serde_json::Value;

/// The path (`root.field[2].name`) of the first string or key in `value` holding a
/// NUL character, which PostgreSQL stores in neither `jsonb` nor `text`; `None` when
/// the whole value is storable. Submissions and answers are checked with it before
/// anything is written, so the caller hears which field to fix.
pub fn nul_path(value: &Value, root: &str) -> Option<String> {
    match value {
        Value::String(text) if text.contains('\0') => Some(root.to_owned()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| nul_path(item, &format!("{root}[{i}]"))),
        Value::Object(fields) => fields.iter().find_map(|(key, item)| {
            let path = format!("{root}.{}", printable(key));
            if key.contains('\0') {
                Some(path)
            } else {
                nul_path(item, &path)
            }
        }),
        _ => None,
    }
}

/// `text` with its NULs written out, so an error about a NUL can itself be stored.
pub fn printable(text: &str) -> String {
    text.replace('\0', "\\u0000")
}
