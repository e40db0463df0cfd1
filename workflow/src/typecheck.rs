//! Static types of a `when` gate, checked when the workflow is compiled.
//!
//! A gate is CEL over messages converted to maps (see [`crate::gate`]): the checker
//! follows the same conversion to give every sub-expression a type, so a field that
//! does not exist (`summarize.word` for `summarize.words`) and a gate that cannot be a
//! boolean (`summarize.words`) are findings at compile time instead of failures after
//! the earlier steps were called.
//!
//! It reports only what is certain: whatever it cannot type (an unknown function, a
//! map read by index, a mix of branch types) is [`Ty::Dyn`] and passes, and the run-time
//! check still catches it. Presence is not a type: reading through an unset message
//! is a run-time matter.

use std::fmt;

use cel::IdedExpr;
use cel::common::ast::{EntryExpr, Expr, LiteralValue, MapExpr, StructExpr};
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};

use crate::suggest::did_you_mean;

/// The static type of a CEL sub-expression, as the gate's conversion produces it.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    /// `bool`.
    Bool,
    /// Signed integers and enum numbers.
    Int,
    /// Unsigned integers.
    Uint,
    /// `float` and `double`.
    Double,
    /// `string`.
    String,
    /// `bytes`.
    Bytes,
    /// `null`.
    Null,
    /// A message, read as a map keyed by field name.
    Message(MessageDescriptor),
    /// A repeated field or a list literal.
    List(Box<Ty>),
    /// A map field or a map literal: key and value.
    Map(Box<Ty>, Box<Ty>),
    /// Not known statically; never a finding.
    Dyn,
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Bool => f.write_str("a bool"),
            Ty::Int => f.write_str("an int"),
            Ty::Uint => f.write_str("a uint"),
            Ty::Double => f.write_str("a double"),
            Ty::String => f.write_str("a string"),
            Ty::Bytes => f.write_str("bytes"),
            Ty::Null => f.write_str("null"),
            Ty::Message(m) => write!(f, "a message {}", m.full_name()),
            Ty::List(_) => f.write_str("a list"),
            Ty::Map(..) => f.write_str("a map"),
            Ty::Dyn => f.write_str("a value"),
        }
    }
}

impl Ty {
    /// The type of a scope root of message type `message`: a wrapper reads as its
    /// inner value, as in the gate.
    pub fn of_root(message: &MessageDescriptor) -> Ty {
        wrapped(message).unwrap_or_else(|| Ty::Message(message.clone()))
    }

    /// The type a field's value converts to (see [`crate::gate`]): wrappers read as
    /// their inner value, enums as ints, repeated fields as lists, maps as maps.
    pub fn of_field(field: &FieldDescriptor) -> Ty {
        if field.is_map() {
            if let Kind::Message(entry) = field.kind() {
                let key = entry.map_entry_key_field();
                let value = entry.map_entry_value_field();
                return Ty::Map(
                    Box::new(Ty::of_kind(&key.kind())),
                    Box::new(Ty::of_kind(&value.kind())),
                );
            }
            return Ty::Map(Box::new(Ty::Dyn), Box::new(Ty::Dyn));
        }
        let single = Ty::of_kind(&field.kind());
        if field.is_list() {
            Ty::List(Box::new(single))
        } else {
            single
        }
    }

    fn of_kind(kind: &Kind) -> Ty {
        match kind {
            Kind::Bool => Ty::Bool,
            Kind::Int32
            | Kind::Int64
            | Kind::Sint32
            | Kind::Sint64
            | Kind::Sfixed32
            | Kind::Sfixed64
            | Kind::Enum(_) => Ty::Int,
            Kind::Uint32 | Kind::Uint64 | Kind::Fixed32 | Kind::Fixed64 => Ty::Uint,
            Kind::Float | Kind::Double => Ty::Double,
            Kind::String => Ty::String,
            Kind::Bytes => Ty::Bytes,
            Kind::Message(message) => match wrapped(message) {
                Some(inner) => inner,
                None => Ty::Message(message.clone()),
            },
        }
    }

    fn is_numeric(&self) -> bool {
        matches!(self, Ty::Int | Ty::Uint | Ty::Double)
    }

    /// Two known scalar types that can never be ordered against each other (`<`).
    fn unorderable_with(&self, other: &Ty) -> bool {
        let family = |t: &Ty| match t {
            Ty::Int | Ty::Uint | Ty::Double => Some(0),
            Ty::String => Some(1),
            Ty::Bytes => Some(2),
            Ty::Bool => Some(3),
            _ => None,
        };
        matches!((family(self), family(other)), (Some(a), Some(b)) if a != b)
    }
}

/// The inner type of a `google.protobuf` wrapper, which the gate reads unwrapped.
fn wrapped(message: &MessageDescriptor) -> Option<Ty> {
    Some(match message.full_name() {
        "google.protobuf.BoolValue" => Ty::Bool,
        "google.protobuf.Int32Value" | "google.protobuf.Int64Value" => Ty::Int,
        "google.protobuf.UInt32Value" | "google.protobuf.UInt64Value" => Ty::Uint,
        "google.protobuf.FloatValue" | "google.protobuf.DoubleValue" => Ty::Double,
        "google.protobuf.StringValue" => Ty::String,
        "google.protobuf.BytesValue" => Ty::Bytes,
        _ => return None,
    })
}

/// Checks a parsed gate against the types of its roots. `root_type` gives the type
/// of a scope root (a message, or a map step's list of messages; use
/// [`Ty::of_root`] for a message), or `None` when it is unknown or did not resolve
/// (those are reported elsewhere). Returns every problem found, each a sentence.
pub fn check_gate(expression: &IdedExpr, root_type: &dyn Fn(&str) -> Option<Ty>) -> Vec<String> {
    let mut checker = Checker {
        root_type,
        bound: Vec::new(),
        problems: Vec::new(),
    };
    let ty = checker.type_of(expression);
    if !matches!(ty, Ty::Bool | Ty::Dyn) {
        let hint = match &ty {
            Ty::Int | Ty::Uint | Ty::Double => " (compare it: `… > 0`)",
            Ty::String => " (compare it: `… != ''`)",
            Ty::List(_) | Ty::Map(..) => " (test its size: `size(…) > 0`)",
            Ty::Message(_) => " (test a field, or presence with `has(…)`)",
            _ => "",
        };
        checker.problems.push(format!(
            "must be a boolean, but `{}` is {ty}{hint}",
            describe(expression)
        ));
    }
    checker.problems
}

/// [`check_gate`] for an expression whose result must be a string (an event step's
/// key).
pub fn check_string(expression: &IdedExpr, root_type: &dyn Fn(&str) -> Option<Ty>) -> Vec<String> {
    let mut checker = Checker {
        root_type,
        bound: Vec::new(),
        problems: Vec::new(),
    };
    let ty = checker.type_of(expression);
    if !matches!(ty, Ty::String | Ty::Dyn) {
        let hint = match &ty {
            Ty::Int | Ty::Uint | Ty::Double | Ty::Bool => " (convert it: `string(…)`)",
            _ => "",
        };
        checker.problems.push(format!(
            "must be a string, but `{}` is {ty}{hint}",
            describe(expression)
        ));
    }
    checker.problems
}

/// [`check_gate`] for an expression whose result must be a whole number (a rate
/// limit's units).
pub fn check_int(expression: &IdedExpr, root_type: &dyn Fn(&str) -> Option<Ty>) -> Vec<String> {
    let mut checker = Checker {
        root_type,
        bound: Vec::new(),
        problems: Vec::new(),
    };
    let ty = checker.type_of(expression);
    if !matches!(ty, Ty::Int | Ty::Uint | Ty::Dyn) {
        let hint = match &ty {
            Ty::Double | Ty::String => " (convert it: `int(…)`)",
            _ => "",
        };
        checker.problems.push(format!(
            "must be a whole number, but `{}` is {ty}{hint}",
            describe(expression)
        ));
    }
    checker.problems
}

struct Checker<'a> {
    root_type: &'a dyn Fn(&str) -> Option<Ty>,
    /// Variables bound by enclosing comprehensions, innermost last.
    bound: Vec<(String, Ty)>,
    problems: Vec<String>,
}

impl Checker<'_> {
    fn type_of(&mut self, expr: &IdedExpr) -> Ty {
        match &expr.expr {
            Expr::Ident(name) => {
                if let Some((_, ty)) = self.bound.iter().rev().find(|(n, _)| n == name) {
                    return ty.clone();
                }
                (self.root_type)(name).unwrap_or(Ty::Dyn)
            }
            Expr::Literal(literal) => match literal {
                LiteralValue::Boolean(_) => Ty::Bool,
                LiteralValue::Int(_) => Ty::Int,
                LiteralValue::UInt(_) => Ty::Uint,
                LiteralValue::Double(_) => Ty::Double,
                LiteralValue::String(_) => Ty::String,
                LiteralValue::Bytes(_) => Ty::Bytes,
                LiteralValue::Null => Ty::Null,
            },
            Expr::Select(select) => {
                let operand = self.type_of(&select.operand);
                let ty = self.select(&operand, &select.operand, &select.field);
                if select.test { Ty::Bool } else { ty }
            }
            Expr::Call(call) => {
                let target = call.target.as_ref().map(|t| self.type_of(t));
                let args: Vec<Ty> = call.args.iter().map(|a| self.type_of(a)).collect();
                self.call(&call.func_name, target, &args, &call.args)
            }
            Expr::Comprehension(comprehension) => {
                let range = self.type_of(&comprehension.iter_range);
                let (first, second) = match &range {
                    Ty::List(element) => (Ty::Int, (**element).clone()),
                    Ty::Map(key, value) => ((**key).clone(), (**value).clone()),
                    _ => (Ty::Dyn, Ty::Dyn),
                };
                let accumulator = self.type_of(&comprehension.accu_init);
                let depth = self.bound.len();
                // With one variable it ranges over list elements or map keys; with two,
                // over (index, element) or (key, value).
                match &comprehension.iter_var2 {
                    Some(var2) => {
                        self.bound.push((comprehension.iter_var.clone(), first));
                        self.bound.push((var2.clone(), second));
                    }
                    None => {
                        let single = match &range {
                            Ty::List(element) => (**element).clone(),
                            Ty::Map(key, _) => (**key).clone(),
                            _ => Ty::Dyn,
                        };
                        self.bound.push((comprehension.iter_var.clone(), single));
                    }
                }
                self.bound
                    .push((comprehension.accu_var.clone(), accumulator));
                self.type_of(&comprehension.loop_cond);
                self.type_of(&comprehension.loop_step);
                let result = self.type_of(&comprehension.result);
                self.bound.truncate(depth);
                result
            }
            Expr::List(list) => {
                let types: Vec<Ty> = list.elements.iter().map(|e| self.type_of(e)).collect();
                let element = match types.split_first() {
                    Some((first, rest)) if rest.iter().all(|t| t == first) => first.clone(),
                    _ => Ty::Dyn,
                };
                Ty::List(Box::new(element))
            }
            Expr::Map(MapExpr { entries }) | Expr::Struct(StructExpr { entries, .. }) => {
                for entry in entries {
                    match &entry.expr {
                        EntryExpr::MapEntry(e) => {
                            self.type_of(&e.key);
                            self.type_of(&e.value);
                        }
                        EntryExpr::StructField(f) => {
                            self.type_of(&f.value);
                        }
                    }
                }
                Ty::Map(Box::new(Ty::Dyn), Box::new(Ty::Dyn))
            }
            Expr::Unspecified => Ty::Dyn,
        }
    }

    /// `operand.field`.
    fn select(&mut self, operand: &Ty, operand_expr: &IdedExpr, field: &str) -> Ty {
        match operand {
            Ty::Message(message) => match message.get_field_by_name(field) {
                Some(found) => Ty::of_field(&found),
                None => {
                    let names: Vec<String> =
                        message.fields().map(|f| f.name().to_owned()).collect();
                    let guess = did_you_mean(field, names.iter().map(String::as_str))
                        .map(|g| format!("; did you mean '{g}'?"))
                        .unwrap_or_default();
                    self.problems.push(format!(
                        "reads `{}.{field}`, but {} has no field '{field}'{guess} (its fields: {})",
                        describe(operand_expr),
                        message.full_name(),
                        if names.is_empty() {
                            "none".to_owned()
                        } else {
                            names.join(", ")
                        }
                    ));
                    Ty::Dyn
                }
            },
            Ty::Map(_, value) => (**value).clone(),
            Ty::Dyn => Ty::Dyn,
            other => {
                self.problems.push(format!(
                    "reads `{}.{field}`, but `{}` is {other}, which has no fields",
                    describe(operand_expr),
                    describe(operand_expr)
                ));
                Ty::Dyn
            }
        }
    }

    fn call(
        &mut self,
        function: &str,
        target: Option<Ty>,
        args: &[Ty],
        arg_exprs: &[IdedExpr],
    ) -> Ty {
        match (function, args) {
            ("_&&_" | "_||_", _) | ("!_", _) => {
                for (ty, expr) in args.iter().zip(arg_exprs) {
                    if !matches!(ty, Ty::Bool | Ty::Dyn) {
                        let operator = match function {
                            "_&&_" => "&&",
                            "_||_" => "||",
                            _ => "!",
                        };
                        self.problems.push(format!(
                            "`{operator}` needs booleans, but `{}` is {ty}",
                            describe(expr)
                        ));
                    }
                }
                Ty::Bool
            }
            ("_<_" | "_<=_" | "_>_" | "_>=_", [left, right]) => {
                if left.unorderable_with(right) {
                    self.problems.push(format!(
                        "compares `{}` ({left}) with `{}` ({right}), which can never be ordered",
                        describe(&arg_exprs[0]),
                        describe(&arg_exprs[1])
                    ));
                }
                Ty::Bool
            }
            (
                "_==_" | "_!=_" | "@in" | "@not_strictly_false" | "_<_" | "_<=_" | "_>_" | "_>=_",
                _,
            ) => Ty::Bool,
            ("size", _) | ("int", _) => Ty::Int,
            ("uint", _) => Ty::Uint,
            ("double", _) => Ty::Double,
            ("string", _) => Ty::String,
            ("bytes", _) => Ty::Bytes,
            ("startsWith" | "endsWith" | "contains" | "matches", _) if target.is_some() => Ty::Bool,
            ("_+_", [left, right]) if left == right && !matches!(left, Ty::Message(_)) => {
                left.clone()
            }
            ("_+_", [Ty::List(_), Ty::List(_)]) => Ty::List(Box::new(Ty::Dyn)),
            ("_-_" | "_*_" | "_/_" | "_%_", [left, right])
                if left == right && left.is_numeric() =>
            {
                left.clone()
            }
            ("-_", [operand]) if operand.is_numeric() => operand.clone(),
            ("_[_]", [Ty::List(element), _]) => (**element).clone(),
            ("_[_]", [Ty::Map(_, value), _]) => (**value).clone(),
            ("_?_:_", [_, yes, no]) if yes == no => yes.clone(),
            _ => Ty::Dyn,
        }
    }
}

/// A short rendering of an expression for messages: the path for `a.b.c`, the
/// function for a call, `…` for anything else.
fn describe(expr: &IdedExpr) -> String {
    match &expr.expr {
        Expr::Ident(name) => name.clone(),
        Expr::Select(select) if select.test => {
            format!("has({})", path_of(&select.operand, &select.field))
        }
        Expr::Select(select) => path_of(&select.operand, &select.field),
        Expr::Literal(LiteralValue::Int(_) | LiteralValue::UInt(_) | LiteralValue::Double(_)) => {
            "a number".into()
        }
        Expr::Literal(LiteralValue::String(_)) => "a string literal".into(),
        Expr::Call(call) => match call.func_name.as_str() {
            "_+_" | "_-_" | "_*_" | "_/_" | "_%_" => "the arithmetic".into(),
            "size" => "size(…)".into(),
            "_[_]" => match call.args.first() {
                Some(operand) => format!("{}[…]", describe(operand)),
                None => "…".into(),
            },
            name => format!("{name}(…)"),
        },
        Expr::Comprehension(_) => "the comprehension".into(),
        Expr::List(_) => "the list".into(),
        _ => "…".into(),
    }
}

fn path_of(operand: &IdedExpr, field: &str) -> String {
    format!("{}.{field}", describe(operand))
}

#[cfg(test)]
mod tests {
    use super::Ty;
    use crate::gate::Gate;
    use crate::schema::compile_proto_pool;

    const PROTO: &str = r#"
        syntax = "proto3";
        package t;
        import "google/protobuf/wrappers.proto";
        enum Mood { MOOD_UNSPECIFIED = 0; HAPPY = 1; }
        message Meta { string id = 1; }
        message Summary {
          int64 words = 1;
          string text = 2;
          Meta meta = 3;
          repeated Meta metas = 4;
          map<string, int64> counts = 5;
          bool done = 6;
          google.protobuf.Int64Value wrapped = 7;
          Mood mood = 8;
          repeated int64 ids = 9;
        }
    "#;

    fn problems(source: &str) -> Vec<String> {
        let pool = compile_proto_pool("t.proto", PROTO).unwrap();
        let summary = pool.get_message_by_name("t.Summary").unwrap();
        let approved = pool
            .get_message_by_name("google.protobuf.BoolValue")
            .unwrap();
        let gate = Gate::compile(source).unwrap();
        gate.check_types(&|root| match root {
            "summarize" => Some(Ty::of_root(&summary)),
            "approve" => Some(Ty::of_root(&approved)),
            "summarize_each" => Some(Ty::List(Box::new(Ty::of_root(&summary)))),
            _ => None,
        })
    }

    #[test]
    fn a_map_steps_responses_are_a_list_of_its_messages() {
        for source in ["size(summarize_each) > 0", "summarize_each.all(s, s.done)"] {
            assert_eq!(problems(source), Vec::<String>::new(), "{source}");
        }
        assert!(!problems("summarize_each.all(s, s.word)").is_empty());
        assert!(!problems("summarize_each").is_empty());
    }

    #[test]
    fn a_root_of_a_wrapper_type_is_its_inner_value() {
        for source in ["approve", "!approve", "approve && summarize.done"] {
            assert_eq!(problems(source), Vec::<String>::new(), "{source}");
        }
        assert!(problems("approve.value")[0].contains("which has no fields"));
    }

    #[test]
    fn well_typed_gates_pass() {
        for source in [
            "summarize.words > 3",
            "summarize.done",
            "has(summarize.meta) && summarize.meta.id != ''",
            "summarize.metas.exists(m, m.id == 'x')",
            "summarize.counts['a'] > 1",
            "summarize.counts.all(k, k != '')",
            "size(summarize.ids) > 0 && summarize.ids[0] == 5",
            "summarize.wrapped > 2",
            "summarize.mood == 1",
            "summarize.text.startsWith('a') || summarize.text.contains('b')",
            "summarize.ids.map(i, i * 2).exists(i, i > 4)",
            "summarize.ids.exists_one(i, i == 1)",
            "unknown_root.anything",
            "summarize.words + 1 > 2 ? true : false",
        ] {
            assert_eq!(problems(source), Vec::<String>::new(), "{source}");
        }
    }

    #[test]
    fn an_unknown_field_is_named_with_a_suggestion() {
        let found = problems("summarize.word > 3");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("`summarize.word`"), "{}", found[0]);
        assert!(
            found[0].contains("t.Summary has no field 'word'"),
            "{}",
            found[0]
        );
        assert!(found[0].contains("did you mean 'words'?"), "{}", found[0]);
    }

    #[test]
    fn unknown_fields_are_found_inside_comprehensions_and_nested_messages() {
        let found =
            problems("summarize.metas.exists(m, m.idd == 'x') && summarize.meta.name == ''");
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("`m.idd`") && found[0].contains("t.Meta has no field 'idd'"));
        assert!(found[1].contains("`summarize.meta.name`"));
    }

    #[test]
    fn a_non_boolean_gate_is_a_problem_with_a_hint() {
        let found = problems("summarize.words");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("must be a boolean, but `summarize.words` is an int"),
            "{}",
            found[0]
        );
        assert!(found[0].contains("> 0"));
        assert!(problems("summarize.metas")[0].contains("size("));
        assert!(problems("summarize.text")[0].contains("is a string"));
        assert!(problems("summarize.meta")[0].contains("has("));
        assert!(problems("1 + 2")[0].contains("is an int"));
    }

    #[test]
    fn operands_of_logic_and_ordering_are_checked() {
        assert!(problems("summarize.words && true")[0].contains("`&&` needs booleans"));
        assert!(problems("summarize.text > 3")[0].contains("can never be ordered"));
        assert!(problems("summarize.words.id == 1")[0].contains("which has no fields"));
    }
}
