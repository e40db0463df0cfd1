//! `docs/architecture.md` names a file and a function (or SQL statement) at each hop
//! of a job's path: each must exist, so the page cannot drift from the code, and the
//! README links the page.

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
}

/// The backticked cells of a table row.
fn code_cells(row: &str) -> Vec<&str> {
    row.split('|')
        .map(str::trim)
        .filter_map(|cell| cell.strip_prefix('`').and_then(|c| c.strip_suffix('`')))
        .collect()
}

#[test]
fn every_function_the_architecture_page_names_exists() {
    let page = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let mut checked = 0;
    let mut missing = Vec::new();
    for row in page.lines().filter(|l| l.starts_with('|')) {
        let cells = code_cells(row);
        let (Some(file), Some(item)) = (
            cells.iter().find(|c| c.ends_with(".rs")),
            cells
                .iter()
                .find(|c| c.starts_with("fn ") || c.starts_with("const ")),
        ) else {
            continue;
        };
        let source = std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| {
            panic!("docs/architecture.md names {file}, which cannot be read: {e}")
        });
        let defined = ["(", "<", ":"]
            .iter()
            .any(|next| source.contains(&format!("{item}{next}")));
        if !defined {
            missing.push(format!("{file}: {item}"));
        }
        checked += 1;
    }
    assert!(
        checked >= 20,
        "only {checked} hops found in docs/architecture.md"
    );
    assert!(
        missing.is_empty(),
        "docs/architecture.md names what the code no longer has (update the page):\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_readme_links_the_architecture_page() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.contains("(docs/architecture.md)"));
}
