//! `docs/envelope.md` names every key the compiler reads, so a key cannot be added
//! without its page saying what it does.

use super::{
    REVIEWER_SEES, ROOT_KEYS, flow::ENTRY_KEYS, parking::SLEEP_KEYS, pool::SCHEMA_KEYS,
    rate::LIMIT_KEYS, steps::OUTPUT_KEYS, steps::STEP_KEYS,
};

const PAGE: &str = include_str!("../../../docs/envelope.md");

#[test]
fn the_envelope_page_names_every_key_the_compiler_reads() {
    let groups = [
        ("the envelope", ROOT_KEYS),
        ("a step", STEP_KEYS),
        ("output", OUTPUT_KEYS),
        ("schema", SCHEMA_KEYS),
        ("sleep", SLEEP_KEYS),
        ("a concurrency entry", ENTRY_KEYS),
        ("rateLimit", LIMIT_KEYS),
        ("reviewerSees", REVIEWER_SEES),
    ];
    let mut missing = Vec::new();
    for (of, keys) in groups {
        for key in keys {
            if !PAGE.contains(&format!("`{key}`")) && !PAGE.contains(&format!("\"{key}\"")) {
                missing.push(format!("{key} (of {of})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/envelope.md does not name these keys: {missing:?}"
    );
}
