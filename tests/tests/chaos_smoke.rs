//! The chaos run at the size CI affords: 200 jobs under two minutes of faults of every
//! kind from a fixed seed (failover, switchover, a full disk and a skewed clock among
//! them), three real nodes, and every invariant checked after the drain. The long runs (2,000 jobs) are made by hand; `docs/reliability.md` records
//! them.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Far beyond a run's two minutes of faults and its drain: a hung run fails here.
const PATIENCE: Duration = Duration::from_secs(25 * 60);

#[test]
fn a_short_chaos_run_of_every_fault_kind_keeps_every_invariant() {
    let chaos = std::path::Path::new(env!("CARGO_BIN_EXE_chaos"));
    // `cargo test --workspace` builds the node binary beside this package's binaries.
    let node = chaos.with_file_name("protomolt-node");
    assert!(
        node.is_file(),
        "no {}: build it first (cargo build -p host-example --bin protomolt-node)",
        node.display()
    );
    let mut child = Command::new(chaos)
        // A lease of 5 s: a debug build on a loaded machine still renews in time.
        .args([
            "--jobs",
            "200",
            "--seed",
            "17",
            "--minutes",
            "2",
            "--lease-ms",
            "5000",
        ])
        .args(["--drain-minutes", "8", "--node-bin"])
        .arg(&node)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the chaos binary runs");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let stdout = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        text
    });
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the run") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    let status =
        status.unwrap_or_else(|| panic!("the run hung past {PATIENCE:?}:\n{stdout}\n{stderr}"));
    assert!(
        status.success(),
        "the chaos run broke an invariant:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("chaos: every invariant held"), "{stdout}");
    for line in stdout.lines().filter(|l| l.starts_with("| ")) {
        assert!(!line.contains("BROKEN"), "{line}");
    }
    // Every kind of fault ran, and the operator did each of its acts.
    let figure = |name: &str| -> u64 {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .and_then(|l| l.trim_end_matches(" |").rsplit("| ").next())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no figure '{name}' in:\n{stdout}"))
    };
    for fault in [
        "kill -9 a node, restart it",
        "SIGSTOP a node past its lease, SIGCONT",
        "pg_ctl restart -m fast",
        "pg_ctl restart -m immediate",
        "kill the broker, start it",
        "pg_terminate_backend a node's connections",
        "a target hangs",
        "a COMMIT's answer lost",
        "the database unreachable 1-5 s",
        "produce answered with an error",
        "kill the primary, promote the standby",
        "switch the primary over cleanly",
        "the database's disk full 1-4 s",
        "a node's clock 30 s off",
    ] {
        assert!(figure(fault) > 0, "{fault} never ran:\n{stdout}");
    }
    for act in [
        "operator retries of DEAD jobs",
        "re-runs from a step",
        "cancels",
        "review answers",
    ] {
        assert!(figure(act) > 0, "the operator never did '{act}':\n{stdout}");
    }
    // The concurrency limit (2) was reached, so its check means something.
    assert!(
        figure("most calls of the concurrency-limited key in flight at once") >= 2,
        "the limited jobs never reached their limit:\n{stdout}"
    );
    for invariant in [
        "none lost or stuck",
        "the fleet drains after the faults",
        "every event on the topic, in order",
        "a step re-ran only under a fault",
        "a concurrency limit never exceeded at the target",
        "a rate limit never exceeded beyond its burst",
        "one job per schedule tick",
    ] {
        assert!(
            stdout.contains(&format!("| {invariant} | held |")),
            "{invariant}: {stdout}"
        );
    }
}
