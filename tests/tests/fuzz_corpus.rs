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

/// A fuzz target's body.
type Target = fn(&[u8]);

/// Runs `target` over every file of `fuzz/corpus/<name>` and `fuzz/regressions/<name>`;
/// the number of inputs replayed.
fn replay(name: &str, target: Target) -> usize {
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
fn every_target_s_saved_inputs_replay_without_a_panic() {
    let targets: [(&str, Target); 5] = [
        ("envelope", targets::envelope),
        ("rules", targets::rules),
        ("checkpoints", targets::checkpoints),
        ("request_record", targets::request_record),
        ("actions_body", targets::actions_body),
    ];
    for (name, target) in targets {
        assert!(replay(name, target) > 0, "{name} has no saved inputs");
    }
}
