//! Tests of the mapping language: its parser, its conversions and its writes.

use prost_reflect::{DynamicMessage, Kind, Value};

use super::apply::convert;
use super::syntax::parse_source;
use super::*;
use crate::scope::Scope;

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
