//! The values a field takes: a kind's name as messages write it, and a literal as the
//! exact value of a field (or refused, never rounded into another number).

use base64::Engine as _;
use prost_reflect::{Kind, Value};

use crate::rules::syntax::Literal;

/// A readable name of a kind: `int64`, `message jobs.test.Tokens`.
pub fn kind_name(kind: &Kind) -> String {
    match kind {
        Kind::Message(m) => format!("message {}", m.full_name()),
        Kind::Enum(e) => format!("enum {}", e.full_name()),
        other => format!("{other:?}").to_lowercase(),
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
