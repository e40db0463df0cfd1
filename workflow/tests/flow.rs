//! A workflow's `concurrency`: what the compiler accepts and refuses, and the keys a
//! job's input computes (scoped to the workflow, refused when they cannot be a key).

use std::time::Duration;

use serde_json::{Value, json};
use workflow::compile::{ConcurrencyKey, ConcurrencyStrategy};
use workflow::testkit::{
    assert_finding, compile_new as compile, leaf_workflow, new_findings as findings,
};

const TARGET: &str = "127.0.0.1:1";

fn with_concurrency(concurrency: Value) -> Value {
    let mut envelope = leaf_workflow(TARGET);
    envelope["concurrency"] = concurrency;
    envelope
}

async fn keys_of(envelope: &Value, text: &str) -> Result<Vec<ConcurrencyKey>, String> {
    let compiled = compile(envelope);
    let input = compiled
        .parse_input(&json!({ "text": text }))
        .expect("the input parses");
    compiled
        .concurrency_keys_within(&input, Duration::from_secs(1))
        .await
}

#[tokio::test]
async fn each_entry_computes_a_key_scoped_to_the_workflow() {
    let envelope = with_concurrency(json!([
        { "key": "input.text", "limit": 2 },
        { "key": "'all'", "limit": 50, "strategy": "cancel-oldest", "weight": 3 }
    ]));
    let keys = keys_of(&envelope, "c-17").await.expect("keys");
    assert_eq!(
        keys,
        [
            ConcurrencyKey {
                key: "leaf:input.text=c-17".into(),
                limit: 2,
                strategy: ConcurrencyStrategy::Queue,
                weight: 1,
            },
            ConcurrencyKey {
                key: "leaf:'all'=all".into(),
                limit: 50,
                strategy: ConcurrencyStrategy::CancelOldest,
                weight: 3,
            },
        ]
    );
    assert!(
        keys_of(&leaf_workflow(TARGET), "x")
            .await
            .expect("no keys")
            .is_empty()
    );
}

#[tokio::test]
async fn a_key_that_cannot_be_a_key_names_the_entry_and_why() {
    let envelope = with_concurrency(json!([{ "key": "input.text", "limit": 2 }]));
    for (text, why) in [
        ("", "0 characters"),
        ("a\u{200b}b", "U+200B"),
        ("line\nbreak", "U+000A"),
    ] {
        let refused = keys_of(&envelope, text).await.expect_err("refused");
        assert!(
            refused.starts_with("concurrency[0].key `input.text`") && refused.contains(why),
            "{refused}"
        );
    }
    let long = "k".repeat(257);
    let refused = keys_of(&envelope, &long).await.expect_err("refused");
    assert!(refused.contains("257 characters"), "{refused}");
}

#[test]
fn bad_entries_are_findings_naming_their_path() {
    let cases: Vec<(Value, &str, &[&str])> = vec![
        (json!({ "k": 1 }), "$.concurrency", &["must be a list"]),
        (json!([1]), "$.concurrency[0]", &["must be an object"]),
        (
            json!([{ "limit": 2 }]),
            "$.concurrency[0].key",
            &["required"],
        ),
        (
            json!([{ "key": "input.text" }]),
            "$.concurrency[0].limit",
            &["required"],
        ),
        (
            json!([{ "key": "input.text", "limit": 0 }]),
            "$.concurrency[0].limit",
            &["from 1 to 100000"],
        ),
        (
            json!([{ "key": "input.text", "limit": 2, "weight": 101 }]),
            "$.concurrency[0].weight",
            &["from 1 to 100"],
        ),
        (
            json!([{ "key": "input.text", "limit": 2, "strategy": "drop" }]),
            "$.concurrency[0].strategy",
            &["cancel-newest"],
        ),
        (
            json!([{ "key": "input.text", "limit": 2, "limits": 3 }]),
            "$.concurrency[0].limits",
            &["unknown field"],
        ),
        (
            json!([{ "key": "tokenize.ids", "limit": 2 }]),
            "$.concurrency[0].key",
            &["may read `input` only"],
        ),
        (
            json!([{ "key": "input.text +", "limit": 2 }]),
            "$.concurrency[0].key",
            &["the key"],
        ),
        (
            json!([{ "key": "input.text", "limit": 2 }, { "key": "input.text", "limit": 3 }]),
            "$.concurrency[1].key",
            &["declared twice"],
        ),
        (
            json!([
                { "key": "'a'", "limit": 1 }, { "key": "'b'", "limit": 1 },
                { "key": "'c'", "limit": 1 }, { "key": "'d'", "limit": 1 }
            ]),
            "$.concurrency",
            &["at most 3"],
        ),
        // Type-checked as a new workflow: a key must be a string.
        (
            json!([{ "key": "input.fail", "limit": 2 }]),
            "$.concurrency[0].key",
            &["must be a string"],
        ),
        (
            json!([{ "key": "input.nosuch", "limit": 2 }]),
            "$.concurrency[0].key",
            &["nosuch"],
        ),
    ];
    for (concurrency, path, needles) in cases {
        let all = findings(&with_concurrency(concurrency));
        assert_finding(&all, None, path, needles);
    }
}

fn with_rate_limit(limit: Value) -> Value {
    let mut envelope = leaf_workflow(TARGET);
    envelope["steps"][0]["rateLimit"] = limit;
    envelope
}

#[test]
fn rates_parse_with_their_unit_and_bad_ones_say_how_to_write_them() {
    use workflow::compile::Rate;
    for (text, count, seconds) in [
        ("600/min", 600, 60),
        ("10/s", 10, 1),
        ("5000/hour", 5000, 3600),
        (" 1 / day ", 1, 86_400),
    ] {
        let rate = Rate::parse(text).expect(text);
        assert_eq!((rate.count, rate.per.as_secs()), (count, seconds), "{text}");
    }
    assert_eq!(Rate::parse("600/min").unwrap().to_string(), "600/min");
    assert!((Rate::parse("120/min").unwrap().per_second() - 2.0).abs() < 1e-9);
    for bad in ["600", "0/min", "-1/s", "ten/s", "5/week", "5/"] {
        let why = Rate::parse(bad).expect_err(bad);
        assert!(why.contains("for example"), "{bad}: {why}");
    }
}

#[test]
fn a_rate_limit_compiles_and_bad_ones_are_findings() {
    let compiled = compile(&with_rate_limit(json!({
        "key": "input.text", "rate": "100/min", "burst": 5, "units": "size(input.text)"
    })));
    let limit = compiled.steps[0].rate_limit.as_ref().expect("a limit");
    assert_eq!((limit.rate.count, limit.burst), (100, 5));
    assert_eq!(
        limit.bucket_for("leaf", "tokenize", Some("c-1")),
        "leaf.tokenize=c-1"
    );
    let cases: Vec<(Value, &str, &[&str])> = vec![
        (
            json!("fast"),
            "$.steps[0].rateLimit",
            &["must be an object"],
        ),
        (json!({}), "$.steps[0].rateLimit.rate", &["required"]),
        (
            json!({ "rate": "5/week" }),
            "$.steps[0].rateLimit.rate",
            &["not s, min, hour or day"],
        ),
        (
            json!({ "rate": "5/s", "burst": 0 }),
            "$.steps[0].rateLimit.burst",
            &["from 1 to"],
        ),
        (
            json!({ "rate": "5/s", "units": "input.text" }),
            "$.steps[0].rateLimit.units",
            &["must be a whole number"],
        ),
        (
            json!({ "rate": "5/s", "key": "input.fail" }),
            "$.steps[0].rateLimit.key",
            &["must be a string"],
        ),
        (
            json!({ "rate": "5/s", "key": "nosuch.text" }),
            "$.steps[0].rateLimit.key",
            &["nosuch"],
        ),
        (
            json!({ "rate": "5/s", "per": 1 }),
            "$.steps[0].rateLimit.per",
            &["unknown field"],
        ),
    ];
    for (limit, path, needles) in cases {
        let all = findings(&with_rate_limit(limit));
        assert_finding(&all, Some("tokenize"), path, needles);
    }
    // Only a called step makes calls to limit.
    let mut parked = leaf_workflow(TARGET);
    parked["steps"][0]["completion"] = json!("external");
    parked["steps"][0]["rateLimit"] = json!({ "rate": "5/s" });
    assert_finding(
        &findings(&parked),
        Some("tokenize"),
        "$.steps[0].rateLimit",
        &["only a called step"],
    );
}
