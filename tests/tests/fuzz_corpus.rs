//! Every saved fuzz input, replayed once through its target on stable Rust: the fuzz
//! corpora (`fuzz/corpus/<target>/`, seeded from the test fixtures and grown by
//! `./dev fuzz`) and the inputs that once crashed a target
//! (`fuzz/regressions/<target>/`), so a crash found by fuzzing stays fixed. The
//! targets' bodies are `fuzz/src/lib.rs`, included here as they are.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

#[path = "../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod targets;

/// Runs `target` over every file of `fuzz/corpus/<name>` and `fuzz/regressions/<name>`;
/// the number of inputs replayed.
fn replay(name: &str, target: fn(&[u8])) -> usize {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    let mut failed = Vec::new();
    for folder in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(folder).join(name)) else {
            continue;
        };
        let mut paths: Vec<_> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
        paths.sort();
        for path in paths {
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            if catch_unwind(AssertUnwindSafe(|| target(&data))).is_err() {
                failed.push(path.display().to_string());
            }
            replayed += 1;
        }
    }
    assert!(failed.is_empty(), "{name} panicked on {failed:#?}");
    replayed
}

#[test]
fn the_envelope_corpus_replays() {
    assert!(replay("envelope", targets::envelope) > 0);
}

#[test]
fn the_rules_corpus_replays() {
    assert!(replay("rules", targets::rules) > 0);
}

#[test]
fn the_checkpoints_corpus_replays() {
    assert!(replay("checkpoints", targets::checkpoints) > 0);
}

#[test]
fn the_request_record_corpus_replays() {
    assert!(replay("request_record", targets::request_record) > 0);
}

#[test]
fn the_actions_body_corpus_replays() {
    assert!(replay("actions_body", targets::actions_body) > 0);
}
