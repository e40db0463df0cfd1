//! `chaos`: the whole fleet under random faults, then every promise checked.
//!
//! ```sh
//! ./dev up && source target/dev/env
//! cargo run --release -p protomolt-e2e --bin chaos -- --jobs 2000 --seed 42 --minutes 10 --gap-ms 1000
//! ```
//!
//! It starts a PostgreSQL primary with a synchronous standby (`database`) and a Tansu
//! broker of its own (storing in a third cluster), serves the fixture targets
//! in-process, and runs three `protomolt-node` processes (the real binary, built beside
//! this one first when started by `cargo run`), each reaching the database and the
//! broker through the test kit's fault proxies, on a wall clock the driver can set off
//! (libfaketime). It submits the jobs over
//! the minutes given, half over HTTP and half over the request topic, while an
//! operator answers external steps, cancels some jobs, retries the DEAD ones and
//! re-runs some finished ones from a step, and a fault driver kills, freezes and
//! restarts the pieces. After the last fault it waits for the fleet to drain, stops the
//! nodes, reads the events topic and checks every invariant: those over the database
//! (`protomolt_e2e::invariants`) and the run's own (`verdict`). It prints a summary and
//! exits 1 on any breach, naming the seed that replays the run's job mix and fault
//! schedule (the machine's timing still varies). The working directory (node logs,
//! configs) is kept when a check fails, or with `--keep`.

mod database;
mod faults;
mod fixture;
mod flow;
mod items;
mod load;
mod rng;
mod soak;
mod verdict;
mod world;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use protomolt_e2e::cluster::SmallDisk;
use protomolt_e2e::invariants;
use protomolt_e2e::process::FakeClock;
use protomolt_e2e::proxy::FaultProxy;
use tokio_util::sync::CancellationToken;

use crate::database::Database;
use crate::faults::{Fault, Fleet};
use crate::fixture::{Targets, now_ms};
use crate::load::{Ledger, Nodes};
use crate::rng::Rng;
use crate::world::{Broker, Node, Topics};

/// A chaos run of several nodes under process, database and broker faults.
#[derive(Debug, Parser)]
struct Args {
    /// Jobs to submit.
    #[arg(long, default_value_t = 2_000)]
    jobs: usize,
    /// The seed of the job mix and the fault schedule (random when not given; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// How long faults are injected; the jobs are submitted over the first 80% of it.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Nodes in the fleet.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// The nodes' lease (a stopped node is frozen past it).
    #[arg(long, default_value_t = 4_000)]
    lease_ms: u64,
    /// The pause between two faults, a random time from this to twice it.
    #[arg(long, default_value_t = 1_500)]
    gap_ms: u64,
    /// How long the fleet may take to drain after the last fault.
    #[arg(long, default_value_t = 10.0)]
    drain_minutes: f64,
    /// The kinds of fault to inject (every kind when none is named).
    #[arg(long, value_enum, value_delimiter = ',')]
    faults: Vec<Fault>,
    /// The size of each database server's data disk, in MiB, when `disk-full` is
    /// among the faults (the disk is a tmpfs: mounting it needs root).
    #[arg(long, default_value_t = 512)]
    disk_mb: u64,
    /// A soak of this many minutes instead of a chaos run: a steady load at `--rate`,
    /// retention on, no faults unless `--faults` names some, every minute sampled
    /// (see `soak.rs`); its CSV and chart go to `--soak-out`.
    #[arg(long)]
    soak: Option<f64>,
    /// The soak's load, in jobs per second (run it at half what the fleet drains).
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// Where the soak writes `soak.csv` and `soak.png`.
    #[arg(long, default_value = "docs/soak")]
    soak_out: PathBuf,
    /// The `protomolt-node` binary (default: beside this one).
    #[arg(long)]
    node_bin: Option<PathBuf>,
    /// The Tansu binary (default: where `./dev up` installs it).
    #[arg(long)]
    tansu: Option<PathBuf>,
    /// Keep the working directory (logs, configs) even when every invariant holds.
    #[arg(long)]
    keep: bool,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(|| now_ms() as u64);
    let args = match args.soak {
        Some(minutes) => Args {
            minutes,
            jobs: (args.rate * minutes * 60.0) as usize,
            ..args
        },
        None => args,
    };
    println!(
        "chaos: seed {seed} (replay with --seed {seed}), {} jobs, {} minutes{}, {} nodes",
        args.jobs,
        args.minutes,
        if args.soak.is_some() {
            " of soak"
        } else {
            " of faults"
        },
        args.nodes
    );
    let node_bin = world::node_binary(args.node_bin.clone());
    let tansu = world::tansu_binary(args.tansu.clone());
    let dir = tempfile::Builder::new()
        .prefix(&format!("protomolt-chaos-{seed}-"))
        .tempdir()
        .expect("a working directory")
        // Kept until the run passes, so a panic leaves the logs it points to.
        .keep();
    let passed = run(&args, seed, node_bin, tansu, dir.clone()).await;
    if passed && !args.keep {
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    println!("chaos: logs and configs kept in {}", dir.display());
    if !passed {
        println!("chaos: BROKEN; replay with --seed {seed}");
        std::process::exit(1);
    }
}

/// The whole run; true when every invariant held.
async fn run(args: &Args, seed: u64, node_bin: PathBuf, tansu: PathBuf, dir: PathBuf) -> bool {
    let mut rng = Rng::new(seed);
    let (mut job_rng, fault_rng) = (rng.fork(), rng.fork());

    let kinds = if args.soak.is_some() || !args.faults.is_empty() {
        args.faults.clone()
    } else {
        Fault::ALL.to_vec()
    };
    let disk_mb = kinds.contains(&Fault::DiskFull).then(|| {
        assert!(
            SmallDisk::allowed(),
            "the disk-full fault mounts a small tmpfs, which needs root: run as root or leave it out (--faults)"
        );
        args.disk_mb
    });
    let database = Arc::new(Database::start(disk_mb).await);
    let (_broker_storage, storage) = world::broker_storage().await;
    let broker = Arc::new(Broker::start(tansu, dir.join("broker"), storage));
    let topics = Topics {
        events: "chaos-events".into(),
        requests: "chaos-requests".into(),
    };
    protomolt_e2e::create_topic_at(&broker.bootstrap(), &topics.events, 3).await;
    protomolt_e2e::create_topic_at(&broker.bootstrap(), &topics.requests, 3).await;

    // The nodes reach the database and the broker through fault proxies (commit-lost,
    // db-blip, broker-error); the run's own checks go direct.
    let broker_proxy = Arc::new(FaultProxy::kafka_for(&broker.bootstrap()).await);
    let targets = Arc::new(Targets::default());
    let target = fixture::serve(targets.clone()).await.to_string();
    let workflows = dir.join("workflows");
    load::write_workflows(&workflows, &target);
    let nodes: Vec<Arc<Node>> = (1..=args.nodes)
        .map(|i| {
            let name = format!("n{i}");
            let port = world::free_port();
            let config = world::node_config(
                &name,
                port,
                &workflows,
                &database.node_url(&name),
                &broker_proxy.addr().to_string(),
                &topics,
                args.lease_ms,
                args.soak.is_some(),
            );
            let node = Node::new(&name, port, &node_bin, &dir, &config);
            if !kinds.contains(&Fault::ClockSkew) {
                return Arc::new(node);
            }
            let clock = FakeClock::new(&dir.join(format!("{name}.clock")));
            let clock = clock.unwrap_or_else(|| {
                panic!("the clock-skew fault needs libfaketime (./dev up installs it), or leave it out (--faults)")
            });
            Arc::new(node.with_clock(clock))
        })
        .collect();
    // The first node migrates the database alone; then the others join.
    for node in &nodes {
        let node = node.clone();
        tokio::task::spawn_blocking(move || node.up())
            .await
            .expect("a node starts");
    }
    println!(
        "chaos: fleet up in {} (database :{} with standby :{}, broker {}, targets {target})",
        dir.display(),
        database.ports().0,
        database.ports().1,
        broker.bootstrap()
    );

    let window = Duration::from_secs_f64(args.minutes * 60.0);
    // A chaos run submits over the first 80% of its faults; a soak all along.
    let submitting = if args.soak.is_some() { 1.0 } else { 0.8 };
    let specs = Arc::new(load::draw_jobs(
        &mut job_rng,
        args.jobs,
        window.mul_f64(submitting),
    ));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let schedule_span = flow::put_schedule(&nodes[0].url(), window).await;
    let client_nodes = Nodes::new(nodes.iter().map(|n| n.url()).collect());
    let start = Instant::now();
    let submitter = tokio::spawn(load::submit_all(
        specs.clone(),
        targets.clone(),
        client_nodes.clone(),
        broker.bootstrap(),
        topics.requests.clone(),
        ledger.clone(),
    ));
    let stop_operator = CancellationToken::new();
    let operator = tokio::spawn(load::operate(
        specs.clone(),
        targets.clone(),
        client_nodes,
        ledger.clone(),
        start,
        stop_operator.clone(),
    ));

    let fleet = Fleet {
        database: database.clone(),
        broker: broker.clone(),
        nodes: nodes.clone(),
        targets: targets.clone(),
        lease: Duration::from_millis(args.lease_ms),
        broker_proxy: broker_proxy.clone(),
    };
    let stop_sampling = CancellationToken::new();
    let sampler = args.soak.is_some().then(|| {
        tokio::spawn(soak::sample(
            nodes.clone(),
            database.clone(),
            targets.clone(),
            soak::steady_jobs(&specs),
            Duration::from_secs(60),
            stop_sampling.clone(),
        ))
    });
    let injected = faults::drive(
        &fleet,
        fault_rng,
        &kinds,
        start + window,
        (args.gap_ms, args.gap_ms * 2),
    )
    .await;
    let last_fault = Instant::now();
    stop_sampling.cancel();
    println!("chaos: {} faults injected; draining", injected.len());

    let client = protomolt_e2e::connect(&database.url()).await;
    if args.soak.is_none() {
        flow::wait_for_last_tick(&client, schedule_span, Duration::from_secs(60)).await;
    }
    let drained = drain(
        &client,
        &specs,
        &ledger,
        &submitter,
        Duration::from_secs_f64(args.drain_minutes * 60.0),
    )
    .await;
    let drain_time = last_fault.elapsed();
    let drain_figure = match &drained {
        Ok(()) => format!("{:.1} s", drain_time.as_secs_f64()),
        Err(_) => format!("did not drain in {:.0} s", drain_time.as_secs_f64()),
    };
    stop_operator.cancel();
    let _ = operator.await;
    let _ = submitter.await;
    for node in &nodes {
        let node = node.clone();
        let _ = tokio::task::spawn_blocking(move || node.down()).await;
    }

    let report = invariants::check(&client, true).await;
    if let Some(sampler) = sampler {
        let samples = sampler.await.expect("the sampler ends");
        let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        let logs: Vec<(String, String)> = nodes
            .iter()
            .map(|n| {
                let log = std::fs::read_to_string(&n.log).unwrap_or_default();
                (n.name.clone(), log)
            })
            .collect();
        return soak::report(
            &args.soak_out,
            &samples,
            &names,
            report,
            drained,
            &logs,
            commit(),
        );
    }
    let database_state = verdict::read_database(&client).await;
    let (topic, topic_records, topic_undecodable) = verdict::read_topic(
        &broker.bootstrap(),
        &topics.events,
        3,
        database_state.outbox.len(),
    )
    .await;
    let logs: Vec<(String, String)> = nodes
        .iter()
        .map(|n| {
            (
                n.name.clone(),
                std::fs::read_to_string(&n.log).unwrap_or_default(),
            )
        })
        .collect();
    let evidence = verdict::Evidence {
        statuses: database_state.statuses,
        outbox: database_state.outbox,
        topic,
        topic_records,
        undecodable: database_state.undecodable + topic_undecodable,
        rejects: database_state.rejects,
        logs,
        drained,
        requests: verdict::read_request_keys(&broker.bootstrap(), &topics.requests, 3).await,
        map: items::read(&client).await,
        ticks: flow::read_ticks(&client, schedule_span).await,
        children_twice: database_state.children_twice,
    };

    let calls = targets.calls();
    let slack = Duration::from_millis(args.lease_ms * 2);
    let ledger = ledger.lock().expect("ledger");
    let findings = verdict::check(&specs, &ledger, &evidence, &calls, &injected, slack);

    let mut faults_by_kind: BTreeMap<Fault, usize> = BTreeMap::new();
    for fault in &injected {
        *faults_by_kind.entry(fault.fault).or_default() += 1;
    }
    println!("\n## Chaos run: seed {seed}\n");
    println!(
        "{} jobs over {} minutes of faults, {} nodes, lease {} ms; commit {}\n",
        args.jobs,
        args.minutes,
        args.nodes,
        args.lease_ms,
        commit()
    );
    println!("| fault | injected |\n|---|---|");
    for fault in Fault::ALL {
        println!(
            "| {} | {} |",
            fault.label(),
            faults_by_kind.get(&fault).unwrap_or(&0)
        );
    }
    println!("\n| jobs by final status | count |\n|---|---|");
    for (status, count) in &report.jobs_by_status {
        println!("| {status} | {count} |");
    }
    println!("\n| figure | value |\n|---|---|");
    let figures = [
        (
            "steps called (calls to the targets)",
            calls.len().to_string(),
        ),
        (
            "steps answered more than once",
            findings.steps_reexecuted.to_string(),
        ),
        (
            "max re-executions of one step",
            findings.max_reexecutions.to_string(),
        ),
        ("time to drain after the last fault", drain_figure),
        (
            "events published (outbox rows)",
            evidence.outbox.len().to_string(),
        ),
        (
            "records read from the events topic",
            evidence.topic_records.to_string(),
        ),
        (
            "operator retries of DEAD jobs",
            ledger.retries.values().sum::<u32>().to_string(),
        ),
        ("re-runs from a step", ledger.reruns.len().to_string()),
        ("cancels", ledger.cancels.len().to_string()),
        (
            "most calls of the concurrency-limited key in flight at once",
            findings.limited_peak.to_string(),
        ),
        ("review answers", ledger.answered.len().to_string()),
    ];
    for (name, value) in figures {
        println!("| {name} | {value} |");
    }
    let mut breaches = report.breaches.clone();
    breaches.extend(findings.breaches);
    let database_invariants = [
        invariants::STUCK,
        invariants::CHECKPOINTS,
        invariants::UNPUBLISHED,
    ];
    verdict::print_verdicts(
        database_invariants.into_iter().chain(verdict::ALL),
        &breaches,
    )
}

/// Waits until the submitter is done, the operator has nothing left to do and the
/// database is quiet: every accepted submission has its row, no job is QUEUED or
/// RUNNING, no DEAD job waits for the operator's retry, every outbox row is
/// PUBLISHED. Answers what was left when `patience` ran out.
async fn drain(
    client: &tokio_postgres::Client,
    specs: &[load::JobSpec],
    ledger: &Mutex<Ledger>,
    submitter: &tokio::task::JoinHandle<()>,
    patience: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + patience;
    let mut left = String::from("the drain never began");
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if !submitter.is_finished() {
            left = "submissions were still being retried".into();
            continue;
        }
        if load::operator_busy(specs, &ledger.lock().expect("ledger")) {
            left = "the operator still had cancels, answers or re-runs to make".into();
            continue;
        }
        let accepted: Vec<String> = ledger
            .lock()
            .expect("ledger")
            .accepted
            .iter()
            .cloned()
            .collect();
        let Ok(row) = client
            .query_one(
                "SELECT (SELECT count(*) FROM workflow_run WHERE status IN ('QUEUED', 'RUNNING')),
                        (SELECT count(*) FROM workflow_run_events_outbox WHERE status <> 'PUBLISHED'),
                        ARRAY(SELECT job_id::text FROM workflow_run WHERE status = 'DEAD'),
                        (SELECT count(*) FROM unnest($1::text[]) AS a(id)
                          WHERE NOT EXISTS (SELECT 1 FROM workflow_run WHERE job_id::text = a.id)
                            AND NOT EXISTS (SELECT 1 FROM workflow_run_pruned p WHERE p.job_id::text = a.id))",
                &[&accepted],
            )
            .await
        else {
            left = "the database did not answer".into();
            continue;
        };
        let (live, unpublished, missing): (i64, i64, i64) = (row.get(0), row.get(1), row.get(3));
        let dead: Vec<String> = row.get(2);
        let retries = &ledger.lock().expect("ledger").retries;
        let retriable = dead
            .iter()
            .filter(|id| retries.get(*id).copied().unwrap_or(0) < load::MAX_OPERATOR_RETRIES)
            .count();
        if live == 0 && unpublished == 0 && retriable == 0 && missing == 0 {
            return Ok(());
        }
        left = format!(
            "{missing} accepted submissions without a row, {live} jobs QUEUED or RUNNING, {retriable} DEAD jobs to retry, {unpublished} events not PUBLISHED"
        );
    }
    Err(format!("after {:.0} s: {left}", patience.as_secs_f64()))
}

/// The commit the run tested (`git rev-parse`), when run from a checkout.
fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map_or_else(
            || "unknown".into(),
            |out| String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        )
}
