//! The mapping language: how a step's request (and the workflow's output) is built.
//!
//! Each rule is one line applied, in order, to a fresh message:
//!
//! - `target = source` copies `source` into `target`;
//! - `target += source` appends `source` (one element, or every element of a
//!   repeated source) to the repeated field `target`;
//! - `-target` clears `target`.
//!
//! `target` is a dotted field path of the message being built. `source` is either a
//! dotted path rooted at `input` or at an earlier step's name (that step's response),
//! or a literal: a JSON string (`"text"`), a number, `true` or `false`. Values convert
//! only where protobuf itself widens without loss (int32 into int64 or double, float
//! into double, ...); a string never becomes a number. A number literal must fit its
//! field exactly ([`literal_value`]): `1e39` is refused for a `float` field, and an
//! integer a `double` (above 2^53) or a `float` (above 2^24) cannot hold exactly is
//! refused, at compile time. A map copies into a map with the same key and value types,
//! whichever messages hold the two maps.
//!
//! # Presence
//!
//! Rules never invent presence. A source that tracks presence (a singular message
//! field, wrappers and `Timestamp` included, a proto3 `optional` scalar, a oneof
//! member, a proto2 optional field) and is unset is **absent**, and a rule with an
//! absent source does nothing: the target stays as it was (unset on a fresh message),
//! never its default. So one rule per oneof member (`a = input.a`, `b = input.b`)
//! copies only the member the source set. A source path through an unset message
//! (`input.meta.id` with `meta` unset) is absent too. Unlike a `when` gate, where that
//! read is a failure, a rule treats it as a no-op: a mapping copies what is there.
//! A plain proto3 scalar (implicit presence) always reads its value, default
//! included; repeated and map fields always read, empty copying nothing.
//!
//! A rule that writes nothing creates nothing: `-meta.notes` does nothing when the
//! built message has no `meta`, `+=` with an absent or empty source appends nothing,
//! and neither creates `meta`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use base64::Engine as _;
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage, Value,
};

use crate::scope::Scope;

/// One parsed mapping rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The rule as written.
    pub text: String,
    /// Field names from the built message down to the target field.
    pub target: Vec<String>,
    /// What to do there.
    pub op: RuleOp,
}

/// The three operations.
#[derive(Debug, Clone, PartialEq)]
pub enum RuleOp {
    /// `target = source`
    Assign(Source),
    /// `target += source`
    Append(Source),
    /// `-target`
    Clear,
}

/// Where a value comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A dotted path: `input.text`, `tokenize.ids`, or a whole scope (`input`).
    Path {
        /// `input` or an earlier step's name.
        root: String,
        /// Field names below the root.
        fields: Vec<String>,
    },
    /// A constant.
    Literal(Literal),
}

/// A constant written in a rule.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// A JSON string literal.
    String(String),
    /// An integer that fits i64.
    Int(i64),
    /// An integer above i64::MAX.
    UInt(u64),
    /// A number with a fraction or exponent.
    Float(f64),
    /// `true` or `false`.
    Bool(bool),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Path { root, fields } if fields.is_empty() => f.write_str(root),
            Source::Path { root, fields } => write!(f, "{root}.{}", fields.join(".")),
            Source::Literal(literal) => write!(f, "{literal:?}"),
        }
    }
}

/// Parses one rule; the error says what is wrong with it and what is expected.
pub fn parse_rule(text: &str) -> Result<Rule, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(
            "empty rule: expected `target = source`, `target += source` or `-target`".into(),
        );
    }
    let (target, op) = if let Some(cleared) = trimmed.strip_prefix('-') {
        (cleared.trim(), RuleOp::Clear)
    } else {
        let Some(eq) = trimmed.find('=') else {
            return Err(format!(
                "'{trimmed}' has no '=': expected `target = source`, `target += source` or `-target`"
            ));
        };
        let (left, right) = (&trimmed[..eq], trimmed[eq + 1..].trim());
        let (target, append) = match left.strip_suffix('+') {
            Some(target) => (target, true),
            None => (left, false),
        };
        if right.is_empty() {
            return Err(format!(
                "'{trimmed}' has nothing after '=': name a source path or a literal"
            ));
        }
        let source = parse_source(right)?;
        (
            target.trim(),
            if append {
                RuleOp::Append(source)
            } else {
                RuleOp::Assign(source)
            },
        )
    };
    let target = parse_path(target).map_err(|e| format!("target of '{trimmed}': {e}"))?;
    Ok(Rule {
        text: trimmed.to_owned(),
        target,
        op,
    })
}

fn parse_source(text: &str) -> Result<Source, String> {
    if text.starts_with('"') {
        let value: String = serde_json::from_str(text)
            .map_err(|e| format!("string literal {text} is not a valid JSON string: {e}"))?;
        return Ok(Source::Literal(Literal::String(value)));
    }
    match text {
        "true" => return Ok(Source::Literal(Literal::Bool(true))),
        "false" => return Ok(Source::Literal(Literal::Bool(false))),
        _ => {}
    }
    if text.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+') {
        if let Ok(int) = text.parse::<i64>() {
            return Ok(Source::Literal(Literal::Int(int)));
        }
        if let Ok(uint) = text.parse::<u64>() {
            return Ok(Source::Literal(Literal::UInt(uint)));
        }
        return match text.parse::<f64>() {
            // A literal with a non-zero digit that parses to zero underflowed: refuse
            // it rather than let `1e-400` become a silent 0.
            Ok(float) if float == 0.0 && has_nonzero_digit(text) => Err(format!(
                "'{text}' is too small for any number type and would become 0"
            )),
            Ok(float) if float.is_finite() => Ok(Source::Literal(Literal::Float(float))),
            _ => Err(format!("'{text}' is not a number literal")),
        };
    }
    let mut fields = parse_path(text)?;
    let root = fields.remove(0);
    Ok(Source::Path { root, fields })
}

fn parse_path(text: &str) -> Result<Vec<String>, String> {
    let parts: Vec<String> = text.split('.').map(|p| p.trim().to_owned()).collect();
    for part in &parts {
        let mut chars = part.chars();
        let valid = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!(
                "'{text}' is not a dotted field path (bad segment '{part}')"
            ));
        }
    }
    Ok(parts)
}

/// The static type of a value: a field's kind and whether it is repeated or a map.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Element kind (for a map: the map entry message).
    pub kind: Kind,
    /// One value, a list, or a map.
    pub cardinality: Cardinality,
}

/// How many values a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cardinality {
    /// One value.
    Single,
    /// A repeated field.
    Repeated,
    /// A map field.
    Map,
}

impl Shape {
    fn of(field: &FieldDescriptor) -> Shape {
        let cardinality = if field.is_map() {
            Cardinality::Map
        } else if field.is_list() {
            Cardinality::Repeated
        } else {
            Cardinality::Single
        };
        Shape {
            kind: field.kind(),
            cardinality,
        }
    }

    fn describe(&self) -> String {
        let kind = kind_name(&self.kind);
        match self.cardinality {
            Cardinality::Single => kind,
            Cardinality::Repeated => format!("repeated {kind}"),
            Cardinality::Map => format!("map ({kind})"),
        }
    }
}

/// A readable name of a kind: `int64`, `message jobs.test.Tokens`.
pub fn kind_name(kind: &Kind) -> String {
    match kind {
        Kind::Message(m) => format!("message {}", m.full_name()),
        Kind::Enum(e) => format!("enum {}", e.full_name()),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// Walks `fields` down from `message`: every field but the last must be a singular
/// message. Returns the last field, or `None` for an empty path.
pub fn resolve_fields(
    message: &MessageDescriptor,
    fields: &[String],
) -> Result<Option<FieldDescriptor>, String> {
    let mut current = message.clone();
    let mut last = None;
    for (i, name) in fields.iter().enumerate() {
        let Some(field) = current.get_field_by_name(name) else {
            let known: Vec<String> = current.fields().map(|f| f.name().to_owned()).collect();
            return Err(format!(
                "{} has no field '{name}' (its fields: {})",
                current.full_name(),
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ));
        };
        if i + 1 < fields.len() {
            match (field.kind(), field.is_list() || field.is_map()) {
                (Kind::Message(inner), false) => current = inner,
                _ => {
                    return Err(format!(
                        "'{name}' is {} and cannot be walked into",
                        Shape::of(&field).describe()
                    ));
                }
            }
        }
        last = Some(field);
    }
    Ok(last)
}

/// The static shape of a source path rooted at a message of type `root`.
pub fn source_shape(root: &MessageDescriptor, fields: &[String]) -> Result<Shape, String> {
    Ok(match resolve_fields(root, fields)? {
        Some(field) => Shape::of(&field),
        None => Shape {
            kind: Kind::Message(root.clone()),
            cardinality: Cardinality::Single,
        },
    })
}

/// Checks a rule against the message it builds (`target_type`); `source_type` gives the
/// static shape of a path source (already resolved by the caller).
pub fn check_rule(
    rule: &Rule,
    target_type: &MessageDescriptor,
    source: Option<&Shape>,
) -> Result<(), String> {
    let field = resolve_fields(target_type, &rule.target)?
        .ok_or_else(|| "a rule needs a target field".to_owned())?;
    let target = Shape::of(&field);
    match &rule.op {
        RuleOp::Clear => Ok(()),
        RuleOp::Assign(Source::Literal(literal)) | RuleOp::Append(Source::Literal(literal)) => {
            if matches!(rule.op, RuleOp::Append(_)) && target.cardinality != Cardinality::Repeated {
                return Err(format!(
                    "'+=' needs a repeated target; '{}' is {}",
                    field.name(),
                    target.describe()
                ));
            }
            if matches!(rule.op, RuleOp::Assign(_)) && target.cardinality != Cardinality::Single {
                return Err(format!(
                    "a literal cannot be assigned to '{}' ({}); use '+=' to append it",
                    field.name(),
                    target.describe()
                ));
            }
            literal_value(literal, &target.kind)
                .map(|_| ())
                .map_err(|e| {
                    format!(
                        "cannot write it into '{}' ({}): {e}",
                        field.name(),
                        target.describe()
                    )
                })
        }
        RuleOp::Assign(Source::Path { .. }) => {
            let source = source.ok_or("the source has no known type")?;
            if source.cardinality != target.cardinality {
                return Err(format!(
                    "cannot assign {} to '{}' ({}){}",
                    source.describe(),
                    field.name(),
                    target.describe(),
                    if target.cardinality == Cardinality::Repeated {
                        "; use '+=' to append one value"
                    } else {
                        ""
                    }
                ));
            }
            let compatible = if target.cardinality == Cardinality::Map {
                same_map_types(&source.kind, &target.kind)
            } else {
                assignable(&source.kind, &target.kind)
            };
            compatible.then_some(()).ok_or_else(|| {
                format!(
                    "cannot assign {} to '{}' ({})",
                    source.describe(),
                    field.name(),
                    target.describe()
                )
            })
        }
        RuleOp::Append(Source::Path { .. }) => {
            let source = source.ok_or("the source has no known type")?;
            if target.cardinality != Cardinality::Repeated {
                return Err(format!(
                    "'+=' needs a repeated target; '{}' is {}",
                    field.name(),
                    target.describe()
                ));
            }
            if source.cardinality == Cardinality::Map || !assignable(&source.kind, &target.kind) {
                return Err(format!(
                    "cannot append {} to '{}' ({})",
                    source.describe(),
                    field.name(),
                    target.describe()
                ));
            }
            Ok(())
        }
    }
}

/// True when two map fields (given by their entry types) have the same key type and
/// the same value type. Each map field has its own entry message, so two maps of
/// different messages never share an entry type even when their keys and values match.
fn same_map_types(source: &Kind, target: &Kind) -> bool {
    let (Kind::Message(source), Kind::Message(target)) = (source, target) else {
        return false;
    };
    // The entry accessors below may panic on a message that is not a map entry.
    if !source.is_map_entry() || !target.is_map_entry() {
        return false;
    }
    let same = |a: &FieldDescriptor, b: &FieldDescriptor| match (a.kind(), b.kind()) {
        (Kind::Message(a), Kind::Message(b)) => a.full_name() == b.full_name(),
        (Kind::Enum(a), Kind::Enum(b)) => a.full_name() == b.full_name(),
        (a, b) => a == b,
    };
    same(&source.map_entry_key_field(), &target.map_entry_key_field())
        && same(
            &source.map_entry_value_field(),
            &target.map_entry_value_field(),
        )
}

/// True when protobuf widens `from` into `to` without loss.
pub fn assignable(from: &Kind, to: &Kind) -> bool {
    use Kind::*;
    let signed32 = |k: &Kind| matches!(k, Int32 | Sint32 | Sfixed32);
    let signed64 = |k: &Kind| matches!(k, Int64 | Sint64 | Sfixed64);
    let unsigned32 = |k: &Kind| matches!(k, Uint32 | Fixed32);
    let unsigned64 = |k: &Kind| matches!(k, Uint64 | Fixed64);
    match (from, to) {
        (Message(a), Message(b)) => a.full_name() == b.full_name(),
        (Enum(a), Enum(b)) => a.full_name() == b.full_name(),
        (a, b) if signed32(a) => signed32(b) || signed64(b) || matches!(b, Double),
        (a, b) if unsigned32(a) => {
            unsigned32(b) || unsigned64(b) || signed64(b) || matches!(b, Double)
        }
        (a, b) if signed64(a) => signed64(b),
        (a, b) if unsigned64(a) => unsigned64(b),
        (Float, Float | Double)
        | (Double, Double)
        | (Bool, Bool)
        | (String, String)
        | (Bytes, Bytes) => true,
        _ => false,
    }
}

/// The value a literal takes in a field of `kind`, or why it cannot.
///
/// Numbers convert only without loss: an integer must fit the integer field, and
/// become exactly the same number in a `double` or `float` field (every integer up to
/// 2^53 in magnitude for `double`, 2^24 for `float`; larger ones only when exactly
/// representable); a fractional literal must stay within `float`'s range and not
/// underflow to zero (rounding the decimal to the nearest `float`, as any parser
/// does, is not a loss).
pub fn literal_value(literal: &Literal, kind: &Kind) -> Result<Value, String> {
    let wrong = || format!("literal {literal:?} cannot become {}", kind_name(kind));
    match (literal, kind) {
        (Literal::String(s), Kind::String) => Ok(Value::String(s.clone())),
        (Literal::String(s), Kind::Bytes) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .map(|b| Value::Bytes(b.into()))
            .map_err(|e| format!("literal {s:?} is not base64 for a bytes field: {e}")),
        (Literal::String(s), Kind::Enum(e)) => e
            .get_value_by_name(s)
            .map(|v| Value::EnumNumber(v.number()))
            .ok_or_else(|| format!("{s:?} is not a value of enum {}", e.full_name())),
        (Literal::Bool(b), Kind::Bool) => Ok(Value::Bool(*b)),
        (Literal::Float(f), Kind::Double) => Ok(Value::F64(*f)),
        (Literal::Float(f), Kind::Float) => narrow_float(*f).map(Value::F32),
        (Literal::Int(i), _) => integer_value(i128::from(*i), kind).unwrap_or_else(|| Err(wrong())),
        (Literal::UInt(u), _) => {
            integer_value(i128::from(*u), kind).unwrap_or_else(|| Err(wrong()))
        }
        _ => Err(wrong()),
    }
}

/// A fractional literal in a `float` field: refused when `f32` cannot hold its
/// magnitude (it would become infinity, or zero).
fn narrow_float(f: f64) -> Result<f32, String> {
    // `as` rounds to the nearest f32, saturating to infinity above f32::MAX and
    // flushing to zero below the smallest subnormal: both are checked right after.
    let narrowed = f as f32;
    if narrowed.is_infinite() {
        Err(format!(
            "{f} is beyond the range of float (at most {:e} in magnitude) and would become infinity",
            f32::MAX
        ))
    } else if narrowed == 0.0 && f != 0.0 {
        Err(format!("{f} is too small for float and would become 0"))
    } else {
        Ok(narrowed)
    }
}

/// An integer literal in a field of `kind`: `None` when `kind` takes no integer,
/// an error when the number does not fit exactly.
fn integer_value(n: i128, kind: &Kind) -> Option<Result<Value, String>> {
    use Kind::*;
    let out_of_range = || format!("{n} is out of range for {}", kind_name(kind));
    let inexact = |significand: u32| {
        format!(
            "{n} is not exactly representable in {} (integers are exact only up to 2^{significand} in magnitude) and would lose precision",
            kind_name(kind)
        )
    };
    Some(match kind {
        Int32 | Sint32 | Sfixed32 => i32::try_from(n).map(Value::I32).map_err(|_| out_of_range()),
        Int64 | Sint64 | Sfixed64 => i64::try_from(n).map(Value::I64).map_err(|_| out_of_range()),
        Uint32 | Fixed32 => u32::try_from(n).map(Value::U32).map_err(|_| out_of_range()),
        Uint64 | Fixed64 => u64::try_from(n).map(Value::U64).map_err(|_| out_of_range()),
        // `as` rounds to the nearest float (every i64/u64 is within range); converting
        // back and comparing proves the result is exactly `n`.
        Double => {
            let float = n as f64;
            if float as i128 == n {
                Ok(Value::F64(float))
            } else {
                Err(inexact(53))
            }
        }
        Float => {
            let float = n as f32;
            if float as i128 == n {
                Ok(Value::F32(float))
            } else {
                Err(inexact(24))
            }
        }
        _ => return None,
    })
}

/// Converts a runtime value into a field of `kind` (the pairs [`assignable`] allows),
/// with conversions that cannot lose: anything else is an error, never a cast.
fn convert(value: Value, kind: &Kind) -> Result<Value, String> {
    use Kind::*;
    Ok(match (value, kind) {
        (Value::I32(v), Int32 | Sint32 | Sfixed32) => Value::I32(v),
        (Value::I32(v), Int64 | Sint64 | Sfixed64) => Value::I64(v.into()),
        (Value::I32(v), Double) => Value::F64(v.into()),
        (Value::U32(v), Uint32 | Fixed32) => Value::U32(v),
        (Value::U32(v), Uint64 | Fixed64) => Value::U64(v.into()),
        (Value::U32(v), Int64 | Sint64 | Sfixed64) => Value::I64(v.into()),
        (Value::U32(v), Double) => Value::F64(v.into()),
        (Value::I64(v), Int64 | Sint64 | Sfixed64) => Value::I64(v),
        (Value::U64(v), Uint64 | Fixed64) => Value::U64(v),
        (Value::F32(v), Float) => Value::F32(v),
        (Value::F32(v), Double) => Value::F64(v.into()),
        (Value::F64(v), Double) => Value::F64(v),
        (Value::Bool(v), Bool) => Value::Bool(v),
        (Value::String(v), String) => Value::String(v),
        (Value::Bytes(v), Bytes) => Value::Bytes(v),
        // Enum numbers are only assignable between the same enum type (verified).
        (Value::EnumNumber(v), Enum(_)) => Value::EnumNumber(v),
        // `Value::is_valid` accepts any message for any message field: check the type.
        (Value::Message(m), Message(target))
            if m.descriptor().full_name() == target.full_name() =>
        {
            Value::Message(m)
        }
        (value, kind) => {
            return Err(format!(
                "a {value:?} value cannot become {}",
                kind_name(kind)
            ));
        }
    })
}

/// Converts every entry of a map value into the map field `field` (keys of the same
/// kind, values through [`convert`]).
fn convert_map(entries: HashMap<MapKey, Value>, field: &FieldDescriptor) -> Result<Value, String> {
    let entry = match field.kind() {
        // The entry accessors below may panic on a message that is not a map entry.
        Kind::Message(entry) if field.is_map() && entry.is_map_entry() => entry,
        _ => return Err(format!("'{}' is not a map", field.name())),
    };
    let key_kind = entry.map_entry_key_field().kind();
    let value_kind = entry.map_entry_value_field().kind();
    entries
        .into_iter()
        .map(|(key, value)| {
            if !key.is_valid(&key_kind) {
                return Err(format!(
                    "a map key {key:?} cannot become {}",
                    kind_name(&key_kind)
                ));
            }
            Ok((key, convert(value, &value_kind)?))
        })
        .collect::<Result<_, _>>()
        .map(Value::Map)
}

/// Reads a source path with protobuf presence: `None` when the field is unset and
/// tracks presence (a singular message, a proto3 `optional` scalar, a oneof member, a
/// proto2 optional field), or when the path passes through an unset message. Fields
/// without presence (plain proto3 scalars, repeated, maps) always read their value.
///
/// Only the value read is cloned, never the root message.
fn read_source(scope: &Scope, root: &str, fields: &[String]) -> Result<Option<Value>, String> {
    let message = scope
        .get(root)
        .ok_or_else(|| format!("'{root}' is not in scope yet"))?;
    let Some((last, parents)) = fields.split_last() else {
        // A skipped step's response is absent as a whole (its fields still read as
        // their kinds say: plain scalars at defaults, presence fields absent).
        if scope.is_skipped(root) {
            return Ok(None);
        }
        return Ok(Some(Value::Message(message.clone())));
    };
    let field_of = |message: &DynamicMessage, name: &str| {
        message
            .descriptor()
            .get_field_by_name(name)
            .ok_or_else(|| format!("{} has no field '{name}'", message.descriptor().full_name()))
    };
    let mut current = message;
    for name in parents {
        let field = field_of(current, name)?;
        if !current.has_field(&field) {
            return Ok(None);
        }
        current = match current.get_field(&field) {
            // A set field is stored in the message, so the value is borrowed.
            Cow::Borrowed(Value::Message(inner)) => inner,
            _ => return Err(format!("'{name}' is not a message")),
        };
    }
    let field = field_of(current, last)?;
    if field.supports_presence() && !current.has_field(&field) {
        return Ok(None);
    }
    Ok(Some(current.get_field(&field).into_owned()))
}

/// The message holding the target field: walks `parents` down from `message`,
/// creating unset parents only when `create` is true (`None` when one is unset).
fn target_parent<'m>(
    message: &'m mut DynamicMessage,
    parents: &[String],
    create: bool,
) -> Result<Option<&'m mut DynamicMessage>, String> {
    let mut current = message;
    for name in parents {
        let field = current
            .descriptor()
            .get_field_by_name(name)
            .ok_or_else(|| format!("no field '{name}'"))?;
        if !create && !current.has_field(&field) {
            return Ok(None);
        }
        current = current
            .get_field_mut(&field)
            .as_message_mut()
            .ok_or_else(|| format!("'{name}' is not a message"))?;
    }
    Ok(Some(current))
}

/// Applies one (verified) rule to `message`, reading sources from `scope`.
///
/// Presence is honoured: a rule whose source is absent (unset and tracking presence,
/// or behind an unset message) leaves the target untouched, so an unset wrapper,
/// timestamp, sub-message, `optional` scalar or oneof member stays unset rather than
/// becoming its default, and a rule per oneof member keeps the member the source set.
/// A rule that writes nothing (an absent source, an empty `+=`, a clear, an empty
/// list or map) never creates the target's parent messages.
pub fn apply_rule(rule: &Rule, message: &mut DynamicMessage, scope: &Scope) -> Result<(), String> {
    let (name, parents) = rule
        .target
        .split_last()
        .ok_or("a rule needs a target field")?;
    let target_field = |parent: &DynamicMessage| {
        parent
            .descriptor()
            .get_field_by_name(name)
            .ok_or_else(|| format!("no field '{name}'"))
    };
    match &rule.op {
        RuleOp::Clear => {
            if let Some(parent) = target_parent(message, parents, false)? {
                let field = target_field(parent)?;
                parent.clear_field(&field);
            }
        }
        RuleOp::Assign(Source::Literal(literal)) => {
            let parent = created_parent(message, parents)?;
            let field = target_field(parent)?;
            let value = literal_value(literal, &field.kind())?;
            parent
                .try_set_field(&field, value)
                .map_err(|e| e.to_string())?;
        }
        RuleOp::Assign(Source::Path { root, fields }) => {
            let Some(value) = read_source(scope, root, fields)? else {
                return Ok(());
            };
            let empty = match &value {
                Value::List(items) => items.is_empty(),
                Value::Map(entries) => entries.is_empty(),
                _ => false,
            };
            // An empty list or map replaces what earlier rules wrote, but does not
            // create a parent just to hold nothing.
            let Some(parent) = target_parent(message, parents, !empty)? else {
                return Ok(());
            };
            let field = target_field(parent)?;
            let kind = field.kind();
            let value = match value {
                Value::List(items) => Value::List(
                    items
                        .into_iter()
                        .map(|v| convert(v, &kind))
                        .collect::<Result<_, _>>()?,
                ),
                Value::Map(entries) => convert_map(entries, &field)?,
                single => convert(single, &kind)?,
            };
            parent
                .try_set_field(&field, value)
                .map_err(|e| e.to_string())?;
        }
        RuleOp::Append(Source::Literal(literal)) => {
            let parent = created_parent(message, parents)?;
            let field = target_field(parent)?;
            let value = literal_value(literal, &field.kind())?;
            append(parent, &field, vec![value])?;
        }
        RuleOp::Append(Source::Path { root, fields }) => {
            let additions = match read_source(scope, root, fields)? {
                None => return Ok(()),
                Some(Value::List(items)) => items,
                Some(single) => vec![single],
            };
            if additions.is_empty() {
                return Ok(());
            }
            let parent = created_parent(message, parents)?;
            let field = target_field(parent)?;
            let kind = field.kind();
            let additions = additions
                .into_iter()
                .map(|v| convert(v, &kind))
                .collect::<Result<_, _>>()?;
            append(parent, &field, additions)?;
        }
    }
    Ok(())
}

/// [`target_parent`] creating every unset parent, for a rule that writes a value.
fn created_parent<'m>(
    message: &'m mut DynamicMessage,
    parents: &[String],
) -> Result<&'m mut DynamicMessage, String> {
    target_parent(message, parents, true)?
        .ok_or_else(|| "the target's parent could not be created".to_owned())
}

fn append(
    parent: &mut DynamicMessage,
    field: &FieldDescriptor,
    additions: Vec<Value>,
) -> Result<(), String> {
    parent
        .get_field_mut(field)
        .as_list_mut()
        .ok_or_else(|| format!("'{}' is not repeated", field.name()))?
        .extend(additions);
    Ok(())
}

/// True when the mantissa of a number literal (before any exponent) has a non-zero digit.
fn has_nonzero_digit(text: &str) -> bool {
    text.split(['e', 'E'])
        .next()
        .is_some_and(|mantissa| mantissa.chars().any(|c| ('1'..='9').contains(&c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(text: &str) -> Source {
        match parse_rule(&format!("x = {text}")).expect("parses").op {
            RuleOp::Assign(source) => source,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_the_three_operations() {
        let rule = parse_rule(" ids = tokenize.ids ").unwrap();
        assert_eq!(rule.target, ["ids"]);
        assert_eq!(
            rule.op,
            RuleOp::Assign(Source::Path {
                root: "tokenize".into(),
                fields: vec!["ids".into()]
            })
        );
        let rule = parse_rule("vector += embed.values").unwrap();
        assert!(matches!(rule.op, RuleOp::Append(_)));
        let rule = parse_rule("-meta.notes").unwrap();
        assert_eq!(
            (rule.target, rule.op),
            (vec!["meta".to_owned(), "notes".to_owned()], RuleOp::Clear)
        );
    }

    #[test]
    fn parses_literals() {
        assert_eq!(
            source("\"a = b\""),
            Source::Literal(Literal::String("a = b".into()))
        );
        assert_eq!(source("42"), Source::Literal(Literal::Int(42)));
        assert_eq!(source("-7"), Source::Literal(Literal::Int(-7)));
        assert_eq!(
            source("18446744073709551615"),
            Source::Literal(Literal::UInt(u64::MAX))
        );
        assert_eq!(source("2.5"), Source::Literal(Literal::Float(2.5)));
        assert_eq!(source("true"), Source::Literal(Literal::Bool(true)));
        assert_eq!(
            source("input"),
            Source::Path {
                root: "input".into(),
                fields: vec![]
            }
        );
    }

    #[test]
    fn refuses_malformed_rules() {
        for bad in [
            "",
            "   ",
            "text",
            "= input.text",
            "text =",
            "a..b = input",
            "1x = input",
            "x = \"open",
            "x = 1e999",
            "x = in put",
            "x = 12abc",
        ] {
            assert!(parse_rule(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn widening_is_lossless_only() {
        use Kind::*;
        assert!(assignable(&Int32, &Int64));
        assert!(assignable(&Int32, &Double));
        assert!(assignable(&Uint32, &Int64));
        assert!(assignable(&Float, &Double));
        assert!(!assignable(&Int64, &Int32));
        assert!(!assignable(&Int64, &Double));
        assert!(!assignable(&String, &Int64));
        assert!(!assignable(&Double, &Float));
        assert!(!assignable(&Int32, &Uint32));
    }

    #[test]
    fn literal_ranges_are_checked() {
        assert!(literal_value(&Literal::Int(1 << 40), &Kind::Int32).is_err());
        assert!(literal_value(&Literal::Int(-1), &Kind::Uint64).is_err());
        assert_eq!(
            literal_value(&Literal::Int(3), &Kind::Double).unwrap(),
            Value::F64(3.0)
        );
        assert!(literal_value(&Literal::String("1".into()), &Kind::Int64).is_err());
        assert!(literal_value(&Literal::Bool(true), &Kind::String).is_err());
    }

    #[test]
    fn number_literals_into_floating_fields_are_exact_or_refused() {
        let f32_of = |l: Literal| literal_value(&l, &Kind::Float);
        let f64_of = |l: Literal| literal_value(&l, &Kind::Double);
        assert!(f32_of(Literal::Float(1e39)).is_err(), "would be infinity");
        assert!(f32_of(Literal::Float(-1e39)).is_err(), "would be -infinity");
        assert!(f32_of(Literal::Float(1e-50)).is_err(), "would be 0");
        assert!(parse_source("1e-400").is_err(), "underflows even a double");
        assert_eq!(
            parse_source("0e10").unwrap(),
            Source::Literal(Literal::Float(0.0))
        );
        assert_eq!(f32_of(Literal::Float(0.0)).unwrap(), Value::F32(0.0));
        assert_eq!(f32_of(Literal::Float(0.1)).unwrap(), Value::F32(0.1));
        assert_eq!(
            f32_of(Literal::Int(1 << 24)).unwrap(),
            Value::F32(16_777_216.0)
        );
        assert!(f32_of(Literal::Int((1 << 24) + 1)).is_err());
        assert!(f32_of(Literal::Int(-(1 << 24) - 1)).is_err());
        assert_eq!(
            f64_of(Literal::Int(1 << 53)).unwrap(),
            Value::F64(9_007_199_254_740_992.0)
        );
        assert!(f64_of(Literal::Int((1 << 53) + 1)).is_err());
        assert!(f64_of(Literal::Int(i64::MAX)).is_err());
        // Exactly representable, if large: no loss.
        assert_eq!(
            f64_of(Literal::Int(1 << 60)).unwrap(),
            Value::F64(2f64.powi(60))
        );
        assert!(f64_of(Literal::UInt(u64::MAX)).is_err());
        assert!(literal_value(&Literal::Float(2.5), &Kind::Int64).is_err());
    }

    fn pool() -> prost_reflect::DescriptorPool {
        crate::schema::compile_proto_pool(
            "t.proto",
            "syntax = \"proto3\"; package t;\n\
             message Inner { repeated int64 ids = 1; }\n\
             message M { repeated int64 ids = 1; Inner inner = 2; }",
        )
        .unwrap()
    }

    fn apply(rules: &[&str], message: &mut DynamicMessage, scope: &Scope) {
        for text in rules {
            apply_rule(&parse_rule(text).unwrap(), message, scope).unwrap();
        }
    }

    #[test]
    fn an_empty_list_replaces_earlier_values_but_creates_no_parent() {
        let m = pool().get_message_by_name("t.M").unwrap();
        let scope = Scope::new(DynamicMessage::new(m.clone()));
        let mut built = DynamicMessage::new(m.clone());
        apply(
            &["inner.ids = input.ids", "ids += input.ids"],
            &mut built,
            &scope,
        );
        assert!(!built.has_field_by_name("inner"), "{built:?}");
        apply(&["ids += 1", "ids = input.ids"], &mut built, &scope);
        assert_eq!(
            built.get_field_by_name("ids").unwrap().as_list(),
            Some(&[][..])
        );
    }

    #[test]
    fn runtime_conversion_refuses_what_it_cannot_keep() {
        assert!(convert(Value::I64(1), &Kind::Double).is_err());
        assert!(convert(Value::F64(1.0), &Kind::Float).is_err());
        assert!(convert(Value::String("1".into()), &Kind::Int64).is_err());
        assert!(convert(Value::Bool(true), &Kind::String).is_err());
        assert_eq!(
            convert(Value::I32(-3), &Kind::Double).unwrap(),
            Value::F64(-3.0)
        );
    }
}
