//! The README is a door and the reference lives in `docs/`; these checks keep the
//! pages from drifting: the README stays short and links every page; `docs/verbs.md`
//! has a row for every verb of the node's catalog (and none for a verb that is not);
//! `docs/kafka.md` names every event type of the contract and every lane key;
//! `docs/console.md` every page of the console; `docs/operations.md` every metric
//! family a node serves. (The configuration and CLI pages are checked against the
//! binaries in `host-example/tests/docs_pages.rs`, the envelope page against the
//! compiler in `workflow`.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use axum::body::Body;
use http_body_util::BodyExt;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::Value;
use tower::ServiceExt;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_owned()
}

fn read(relative: &str) -> String {
    let path = root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

async fn get(node: &JobsNode, path: &str) -> String {
    let response = node
        .router
        .clone()
        .oneshot(http::Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert!(response.status().is_success(), "GET {path}");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn the_readme_is_short_and_links_every_reference_page() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(
        lines < 300,
        "the README is {lines} lines: it is a door; move reference to docs/"
    );
    let mut pages: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.ends_with(".md").then_some(name)
        })
        .collect();
    pages.sort();
    for page in &pages {
        assert!(
            readme.contains(&format!("(docs/{page})")),
            "the README does not link docs/{page}"
        );
    }
    // Every link of the README leads somewhere.
    for link in readme.split("](").skip(1) {
        let target = link.split(')').next().unwrap_or_default();
        if target.starts_with("http") || target.starts_with('#') {
            continue;
        }
        let file = target.split('#').next().unwrap_or_default();
        assert!(
            root().join(file).exists(),
            "the README links {target}, which does not exist"
        );
    }
}

/// The verbs of the rows of the page's verb tables (`| \`verb\` | scope | ...`).
fn verb_rows(markdown: &str) -> BTreeSet<String> {
    let mut verbs = BTreeSet::new();
    let mut in_verb_table = false;
    for line in markdown.lines() {
        if line.starts_with("| verb |") {
            in_verb_table = true;
            continue;
        }
        if !line.starts_with('|') {
            in_verb_table = false;
            continue;
        }
        if !in_verb_table {
            continue;
        }
        // One verb, or two that share a row (`pause-schedule` / `resume-schedule`).
        let first = line.split('|').nth(1).unwrap_or_default();
        for name in first.split('/').map(str::trim) {
            if let Some(verb) = name.strip_prefix('`').and_then(|v| v.strip_suffix('`')) {
                verbs.insert(verb.to_owned());
            }
        }
    }
    verbs
}

#[tokio::test]
async fn the_verbs_page_has_a_row_for_every_verb_of_the_catalog_and_no_other() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "docs", 0)).await;
    let catalog: Value = serde_json::from_str(&get(&node, "/v1/actions").await).unwrap();
    let mut served: BTreeSet<String> = catalog["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|action| action["name"].as_str().unwrap().to_owned())
        .collect();
    // The parse role's verb: the demo node mounts it, the test node does not.
    served.insert("parse-text".to_owned());
    let rows = verb_rows(&read("docs/verbs.md"));
    let missing: Vec<&String> = served.difference(&rows).collect();
    assert!(
        missing.is_empty(),
        "docs/verbs.md has no row for these verbs: {missing:?}"
    );
    let unknown: Vec<&String> = rows.difference(&served).collect();
    assert!(
        unknown.is_empty(),
        "docs/verbs.md has rows for verbs no role serves: {unknown:?}"
    );
    node.stop().await;
}

#[test]
fn the_kafka_page_names_every_event_type_and_every_lane_key() {
    use jobs_proto::v1::workflow_run_event::Type;
    let page = read("docs/kafka.md");
    let types: Vec<String> = (1..64)
        .filter_map(|n| Type::try_from(n).ok())
        .map(|t| t.as_str_name().trim_start_matches("TYPE_").to_owned())
        .collect();
    assert!(types.len() >= 8, "{types:?}");
    let missing: Vec<&String> = types
        .iter()
        .filter(|name| !page.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/kafka.md does not name these event types: {missing:?}"
    );
    for key in [
        "kafka_bootstrap",
        "events_topic",
        "requests_topic",
        "signals_topic",
        "consumer_group",
        "schema_registry_url",
        "kafka_options",
    ] {
        assert!(page.contains(key), "docs/kafka.md does not name {key}");
    }
}

#[test]
fn the_console_page_names_every_page_of_the_console() {
    let script = read("jobs-role/console/console.js");
    let page = read("docs/console.md");
    let mut routes = 0;
    for pattern in script.split("pattern: /^").skip(1) {
        let pattern = pattern.split("$/").next().unwrap_or_default();
        // `\/workflows\/(.+)` is `#/workflows/{...}`.
        let route = format!("#{}", pattern.replace("\\/", "/").replace("(.+)", "{"));
        assert!(
            page.contains(&route),
            "docs/console.md does not name the console's page {route}"
        );
        routes += 1;
    }
    assert!(routes >= 7, "read {routes} routes from console.js");
}

#[tokio::test]
async fn the_operations_page_names_every_metric_family_a_node_serves() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "docs-metrics", 1)).await;
    let text = get(&node, "/metrics").await;
    let page = read("docs/operations.md");
    let mut families = 0;
    let mut missing = Vec::new();
    for line in text.lines() {
        let Some(declared) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = declared.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        // A counter's samples (and the page) carry `_total`.
        let shown = if kind == "counter" {
            format!("{name}_total")
        } else {
            name.to_owned()
        };
        if !page.contains(&format!("`{shown}`")) {
            missing.push(format!("{shown} ({kind})"));
        }
        families += 1;
    }
    assert!(
        missing.is_empty(),
        "docs/operations.md does not name these metrics: {missing:?}"
    );
    assert!(families > 5, "the node declared {families} families");
    node.stop().await;
}

/// The families a node registers, read from the code that registers them (a family
/// with no sample yet is not in a scrape at all): each name, with its prefix.
fn registered_families() -> Vec<String> {
    let mut names = Vec::new();
    for (file, prefix) in [
        ("jobs-role/src/metrics.rs", "protomolt_jobs_"),
        ("registry-stub/src/metrics.rs", ""),
    ] {
        let source = read(file);
        for call in source.split(".register(").skip(1) {
            let Some(name) = call.split('"').nth(1) else {
                continue;
            };
            names.push(format!("{prefix}{name}"));
        }
    }
    names
}

#[test]
fn the_operations_page_names_every_metric_family_the_code_registers() {
    let page = read("docs/operations.md");
    let families = registered_families();
    assert!(families.len() > 30, "read {families:?}");
    let missing: Vec<&String> = families
        .iter()
        .filter(|name| {
            !page.contains(&format!("`{name}`")) && !page.contains(&format!("`{name}_total`"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/operations.md does not name these metrics: {missing:?}"
    );
}
