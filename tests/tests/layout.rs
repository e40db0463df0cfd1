//! The house rule that keeps the code readable as a map: no hand-written source file
//! over 800 lines (tests, style sheets and generated or vendored code excepted). The files that were
//! over it when the rule came are listed with the size they had; they may only shrink,
//! and leave the list once they are under it (issue 30 splits them).

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

/// Files over the bound when it came, with their size then: each may only shrink.
const STILL_TO_SPLIT: &[(&str, usize)] = &[
    ("jobs-role/console/console.js", 2_883),
    ("workflow/src/compile.rs", 1_507),
    ("host-example/src/config.rs", 1_270),
    ("jobs-role/src/worker/mod.rs", 969),
    ("workflow/src/rules.rs", 957),
    ("host-example/src/cli/main.rs", 867),
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
        match STILL_TO_SPLIT.iter().find(|(listed, _)| *listed == name) {
            Some((_, was)) if lines > *was => problems.push(format!(
                "{name} has {lines} lines, more than the {was} it had when the bound came: split it by concept (at most {MOST_LINES} lines a file)"
            )),
            Some(_) if lines <= MOST_LINES => problems.push(format!(
                "{name} is now {lines} lines, within the bound: take it off STILL_TO_SPLIT in tests/tests/layout.rs"
            )),
            Some(_) => {}
            None if lines > MOST_LINES => problems.push(format!(
                "{name} has {lines} lines, over {MOST_LINES}: split it into one module per concept"
            )),
            None => {}
        }
    }
    for (listed, _) in STILL_TO_SPLIT {
        if !root.join(listed).exists() {
            problems.push(format!(
                "{listed} is gone: take it off STILL_TO_SPLIT in tests/tests/layout.rs"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
