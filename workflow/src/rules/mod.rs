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
//!
//! | module   | concept                                                     |
//! |----------|-------------------------------------------------------------|
//! | `syntax` | a rule as written, parsed                                   |
//! | `check`  | what a source reads and whether it fits, at compile time    |
//! | `values` | kind names; a literal as a field's exact value              |
//! | `apply`  | conversions and writes, at run time                         |

mod apply;
mod check;
mod syntax;
#[cfg(test)]
mod tests;
mod values;

pub use apply::apply_rule;
pub use check::{Cardinality, Shape, assignable, check_rule, resolve_fields, source_shape};
pub use syntax::{Literal, Rule, RuleOp, Source, parse_path, parse_rule};
pub use values::{kind_name, literal_value};
