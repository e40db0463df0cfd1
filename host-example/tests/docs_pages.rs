//! The reference pages of the two binaries cannot drift from them:
//! `docs/configuration.md` names every key `protomolt-node config-keys` lists, and
//! every key its TOML blocks set exists; `docs/cli.md` names every command
//! `protomolt --help` lists, and every `protomolt <command>` it shows exists.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn page(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn run(binary: &str, args: &[&str]) -> String {
    let output = Command::new(binary)
        .args(args)
        .env_remove("PROTOMOLT_URL")
        .output()
        .expect("the binary runs");
    assert!(output.status.success(), "{binary} {args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// The keys the page's TOML blocks set, commented out or not, as
/// `section.key` (`section[].key` inside an array of tables). Quoted keys (a
/// `[jobs.kafka_options]` librdkafka option) are left out: that table takes any.
fn keys_in_toml_blocks(markdown: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut in_toml = false;
    let mut section = String::new();
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_toml = line.trim() == "```toml";
            section.clear();
            continue;
        }
        if !in_toml {
            continue;
        }
        let text = line.trim_start_matches('#').trim();
        let header = text.split('#').next().unwrap_or_default().trim();
        if let Some(name) = header.strip_prefix("[[").and_then(|h| h.strip_suffix("]]")) {
            section = format!("{name}[]");
            continue;
        }
        if let Some(name) = header.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        let Some((key, _)) = text.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let is_key = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !is_key || section.is_empty() {
            continue;
        }
        keys.insert(format!("{section}.{key}"));
    }
    keys
}

#[test]
fn the_configuration_page_names_every_key_and_only_keys_that_exist() {
    let listing = run(env!("CARGO_BIN_EXE_protomolt-node"), &["config-keys"]);
    let known: BTreeSet<String> = listing
        .lines()
        .filter_map(|line| line.split('\t').next())
        .filter(|key| !key.contains("\"<option>\""))
        .map(str::to_owned)
        .collect();
    assert!(known.len() > 60, "config-keys listed {known:?}");
    let markdown = page("configuration.md");
    let written = keys_in_toml_blocks(&markdown);
    let unknown: Vec<&String> = written.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "docs/configuration.md sets keys no config type has: {unknown:?}"
    );
    // A key may be named in the prose instead (`jobs.worker_count`, the old name).
    let missing: Vec<&String> = known
        .iter()
        .filter(|key| !written.contains(*key) && !markdown.contains(&format!("`{key}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md does not name these keys (add them to its TOML blocks): {missing:?}"
    );
    assert!(markdown.contains("protomolt-node config-keys"));
}

/// The commands a `--help` lists (without `help`).
fn commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_cli_page_names_every_command_and_only_commands_that_exist() {
    let cli = env!("CARGO_BIN_EXE_protomolt");
    let listed = commands(&run(cli, &["--help"]));
    assert!(listed.len() > 15, "{listed:?}");
    let markdown = page("cli.md");
    let shown = |name: &str| {
        markdown.lines().any(|line| {
            line.strip_prefix(&format!("protomolt {name}"))
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
        })
    };
    let missing: Vec<&String> = listed.iter().filter(|name| !shown(name)).collect();
    assert!(
        missing.is_empty(),
        "docs/cli.md shows no line of these commands: {missing:?}"
    );
    // Every command the page shows is one (its aliases too: `workflow`, `schedule`).
    for line in markdown.lines().filter(|l| l.starts_with("protomolt ")) {
        let name = line.split_whitespace().nth(1).unwrap_or_default();
        if name.starts_with('-') {
            continue;
        }
        let help = Command::new(cli)
            .args([name, "--help"])
            .output()
            .expect("the CLI runs");
        assert!(
            help.status.success(),
            "docs/cli.md shows `protomolt {name}`, which is not a command: {}",
            String::from_utf8_lossy(&help.stderr)
        );
    }
    // The nested commands are each named too (`protomolt schedules backfill`).
    for parent in ["workflows", "schedules", "node", "proto", "token"] {
        for child in commands(&run(cli, &[parent, "--help"])) {
            assert!(
                markdown.contains(&format!("{parent} {child}"))
                    // Its alias (`workflow build`).
                    || markdown.contains(&format!("{} {child}", parent.trim_end_matches('s')))
                    || markdown.contains(&format!("| {child} "))
                    || markdown.contains(&format!("| {child}\n")),
                "docs/cli.md does not name `protomolt {parent} {child}`"
            );
        }
    }
}
