//! `bench`: how fast a jobs node is, scenario by scenario, against the real services.
//!
//! ```sh
//! ./dev up && source target/dev/env
//! cargo run --release -p protomolt-e2e --bin bench -- throughput pickup
//! cargo run --release -p protomolt-e2e --bin bench -- --chart docs/throughput.png   # every scenario
//! ```
//!
//! Each scenario creates its own databases (fixture gRPC servers on loopback; the
//! `relay` scenario uses the set-up script's broker, `KAFKA_BOOTSTRAP`), prints one
//! JSON line (`{"scenario", "params", "figures": [{name, value, unit, target, met}]}`),
//! and at the end a table with every figure beside its target. With `peer` (the
//! established queue, graphile-worker, measured beside us against the same
//! PostgreSQL) the run ends with our figures as ratios to the peer's (`versus-peer`),
//! held to ratio targets that do not drift with the machine. `--size tiny` runs each
//! at a size CI can afford; CI checks that it completes and its JSON parses, never a
//! speed. Speed targets live here, not in the tests.

mod chart;
mod claim_depth;
mod cost;
mod fanout;
mod memory;
mod peer;
mod pickup;
mod relay;
mod report;
mod setup;
mod storage;
mod submit;
mod throughput;

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// How big a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Size {
    /// Seconds per scenario: for CI, which checks only that each completes.
    Tiny,
    /// The sizes the figures in `docs/benchmarks.md` are measured at.
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// First when every scenario runs: the process's resident set is still its own.
    Memory,
    Throughput,
    Submit,
    Pickup,
    ClaimDepth,
    Storage,
    /// What one job costs PostgreSQL (statements, rows, WAL).
    Cost,
    /// One job's map step over a list: elements/s beside jobs/s, bytes per element.
    Fanout,
    Relay,
    /// graphile-worker beside us in the same run; with ours, their ratios.
    Peer,
}

/// The speed of a jobs node, against the real PostgreSQL, gRPC and broker.
#[derive(Debug, Parser)]
struct Args {
    /// Scenarios to run, in order (every one when none is named).
    #[arg(value_enum)]
    scenarios: Vec<Scenario>,
    /// `tiny` for CI, `full` for the recorded figures.
    #[arg(long, value_enum, default_value = "full")]
    size: Size,
    /// Where `throughput` draws its chart (jobs/s against the in-flight limit, with the
    /// peer's drain when `peer` runs too), a PNG.
    #[arg(long)]
    chart: Option<PathBuf>,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let scenarios = if args.scenarios.is_empty() {
        Scenario::value_variants().to_vec()
    } else {
        args.scenarios.clone()
    };
    let mut reports = Vec::new();
    let mut chart_points = Vec::new();
    for scenario in scenarios {
        let report = match scenario {
            Scenario::Throughput => {
                let (report, points) = throughput::run(args.size).await;
                chart_points = points;
                report
            }
            Scenario::Submit => submit::run(args.size).await,
            Scenario::Pickup => pickup::run(args.size).await,
            Scenario::ClaimDepth => claim_depth::run(args.size).await,
            Scenario::Storage => storage::run(args.size).await,
            Scenario::Cost => cost::run(args.size).await,
            Scenario::Fanout => fanout::run(args.size).await,
            Scenario::Relay => relay::run(args.size).await,
            Scenario::Memory => memory::run(args.size).await,
            Scenario::Peer => peer::run(args.size).await,
        };
        println!("{}", report.json());
        reports.push(report);
    }
    // Drawn once every scenario ran, so the peer's drain of the same run is on it.
    if let (Some(path), false) = (&args.chart, chart_points.is_empty()) {
        match chart::draw(path, &chart_points, 2_500.0, peer::drain(&reports)) {
            Ok(()) => eprintln!("chart drawn to {}", path.display()),
            Err(e) => eprintln!("no chart: {e}"),
        }
    }
    if let Some(versus) = peer::versus(&reports) {
        println!("{}", versus.json());
        reports.push(versus);
    }
    println!("\n{}", report::table(&reports));
}
