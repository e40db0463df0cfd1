//! The bench binary at its tiny size: every scenario completes and prints its JSON
//! line, and the chart is drawn. Never a speed: speeds live in `docs/benchmarks.md`.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

#[test]
fn every_bench_scenario_completes_at_the_tiny_size_and_prints_its_json_line() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let chart = dir.path().join("throughput.png");
    let output = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["--size", "tiny", "--chart"])
        .arg(&chart)
        .output()
        .expect("the bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");

    let reports: Vec<Value> = stdout
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let scenarios: BTreeSet<&str> = reports
        .iter()
        .map(|report| report["scenario"].as_str().expect("a scenario name"))
        .collect();
    assert_eq!(
        scenarios,
        BTreeSet::from([
            "claim-depth",
            "cost",
            "fanout",
            "memory",
            "peer",
            "pickup",
            "relay",
            "storage",
            "submit",
            "throughput",
            "versus-peer"
        ])
    );
    for report in &reports {
        let figures = report["figures"].as_array().expect("figures");
        assert!(!figures.is_empty(), "{report}");
        for figure in figures {
            assert!(figure["value"].is_number(), "a measured number: {figure}");
            assert!(
                figure["name"].is_string() && figure["unit"].is_string(),
                "{figure}"
            );
        }
    }
    assert!(
        stdout.contains("| scenario | figure | value | target | met |"),
        "{stdout}"
    );
    let png = std::fs::read(&chart).expect("the chart was drawn");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
}
