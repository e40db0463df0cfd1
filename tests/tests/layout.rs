//! The house rule that keeps the code readable as a map: no hand-written source file
//! over 800 lines (test binaries, style sheets and generated or vendored code
//! excepted; a module's `tests.rs` counts). A file that outgrows it is split into one
//! module per concept, as issue 30 split the first six.

use std::path::{Path, PathBuf};

/// The most lines a source file may hold.
const MOST_LINES: usize = 800;

/// Where hand-written source lives (paths from the workspace root).
const SOURCE_ROOTS: &[&str] = &[
    "host-example/src",
    "jobs-proto/src",
    "jobs-role/src",
    "jobs-role/console",
    "registry-stub/src",
    "workflow/src",
];

fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs" || e == "js") {
            found.push(path);
        }
    }
}

#[test]
fn no_source_file_grows_past_eight_hundred_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let mut files = Vec::new();
    for dir in SOURCE_ROOTS {
        sources(&root.join(dir), &mut files);
    }
    assert!(
        files.len() > 50,
        "the source roots hold {} files",
        files.len()
    );
    let mut problems = Vec::new();
    for file in files {
        let name = file
            .strip_prefix(root)
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        let lines = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {name}: {e}"))
            .lines()
            .count();
        if lines > MOST_LINES {
            problems.push(format!(
                "{name} has {lines} lines, over {MOST_LINES}: split it into one module per concept"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
