//! `peer`: the established queue measured beside us in the same run, against the same
//! PostgreSQL: graphile-worker (pinned in `tests/peer/package.json`, installed by
//! `./dev`) running a task that does nothing, with its defaults but a concurrency of
//! 24. An absolute target on a shared 2-core machine drifts with the machine; a ratio
//! to a peer measured beside us does not, so [`versus`] holds our figures to ratios.

use std::path::Path;
use std::process::Stdio;

use protomolt_e2e::TestDatabase;
use serde_json::{Value, json};

use crate::Size;
use crate::report::{Figure, Report, Target, figure};

/// The peer's figures, as `tests/peer/peer.js` prints them.
pub async fn run(size: Size) -> Report {
    let (jobs, adds, pickups) = match size {
        Size::Tiny => (500u32, 200u32, 10u32),
        Size::Full => (20_000, 5_000, 200),
    };
    let modules = std::env::var("PROTOMOLT_PEER_MODULES").unwrap_or_else(|_| {
        panic!("PROTOMOLT_PEER_MODULES is not set: run `./dev up` (it installs the peer) and source target/dev/env")
    });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peer/peer.js");
    let db = TestDatabase::create().await;
    let output = tokio::process::Command::new("node")
        .arg(&script)
        .arg(&db.url)
        .args([jobs.to_string(), adds.to_string(), pickups.to_string()])
        .env("NODE_PATH", &modules)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("node runs the peer (./dev up installs Node's packages for it)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the peer failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let measured: Value = stdout
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| panic!("the peer printed no JSON: {stdout}"));
    let number = |key: &str| {
        measured[key]
            .as_f64()
            .unwrap_or_else(|| panic!("the peer's {key} is not a number: {measured}"))
    };
    Report {
        scenario: "peer",
        params: json!({
            "peer": format!("graphile-worker {}", measured["version"].as_str().unwrap_or("?")),
            "concurrency": 24, "jobs": jobs, "single_adds": adds, "pickups": pickups,
        }),
        figures: vec![
            figure(PEER_DRAIN, number("drain_jobs_per_s"), "jobs/s"),
            figure(PEER_ADD_JOB, number("add_job_per_s"), "jobs/s"),
            figure(PEER_ADD_JOBS, number("add_jobs_per_s"), "jobs/s"),
            figure(PEER_PICKUP, number("pickup_p50_ms"), "ms"),
            figure("idle pickup p95", number("pickup_p95_ms"), "ms"),
        ],
    }
}

const PEER_DRAIN: &str = "drain of no-op jobs, concurrency 24";
const PEER_ADD_JOB: &str = "addJob, 32 clients";
const PEER_ADD_JOBS: &str = "addJobs, 1000 per call";
const PEER_PICKUP: &str = "idle pickup p50";

/// Our figures as ratios to the peer's from the same run, held to the issue's
/// targets; `None` unless the peer and at least one of ours ran.
pub fn versus(reports: &[Report]) -> Option<Report> {
    let find = |scenario: &str, name: &str| {
        reports
            .iter()
            .filter(|r| r.scenario == scenario)
            .flat_map(|r| r.figures.iter())
            .find(|f| f.name.starts_with(name))
            .map(|f| f.value)
            .filter(|v| v.is_finite() && *v > 0.0)
    };
    let ratios: [(&str, &str, &str, &str, Target); 4] = [
        (
            "one-step drain / peer's drain",
            "throughput",
            "one-step jobs, one node",
            PEER_DRAIN,
            Target::AtLeast(2.0),
        ),
        (
            "single submissions / peer's addJob",
            "submit",
            "submit-workflow, 32 clients",
            PEER_ADD_JOB,
            Target::AtLeast(1.5),
        ),
        (
            "batched submissions / peer's addJobs",
            "submit",
            "submit-workflows,",
            PEER_ADD_JOBS,
            Target::AtLeast(0.5),
        ),
        // Both from the moment the submission is answered (the peer's addJob
        // returning) to the job's first work starting.
        (
            "idle pickup p50 / peer's",
            "pickup",
            "submit answered -> first step call p50",
            PEER_PICKUP,
            Target::AtMost(1.0),
        ),
    ];
    let figures: Vec<Figure> = ratios
        .iter()
        .filter_map(|(label, scenario, ours, theirs, target)| {
            let ratio = find(scenario, ours)? / find("peer", theirs)?;
            Some(figure(*label, ratio, "x").target(*target))
        })
        .collect();
    (!figures.is_empty()).then(|| Report {
        scenario: "versus-peer",
        params: json!({ "note": "ours divided by the peer's, both measured in this run" }),
        figures,
    })
}

/// The peer's drain (jobs/s) among `reports`, when the `peer` scenario ran.
pub fn drain(reports: &[Report]) -> Option<f64> {
    reports
        .iter()
        .filter(|report| report.scenario == "peer")
        .flat_map(|report| &report.figures)
        .find(|figure| figure.name == PEER_DRAIN)
        .map(|figure| figure.value)
}
