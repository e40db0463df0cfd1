//! `docs/bring-your-own-service.md`, run as written: every block naming a file
//! (` ```python file=server.py `) is written to a fresh folder, and every ` ```sh `
//! block runs there, in order, as one bash script, with the two binaries and the
//! guide's Python on `PATH`, against real PostgreSQL and the real broker. Blocks marked
//! otherwise (` ```sh install `) are what `./dev` does for the test instead (its
//! packages in the guide's venv; the Python client from this checkout, on
//! `PYTHONPATH`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use protomolt_e2e::TestDatabase;

const GUIDE: &str = include_str!("../../docs/bring-your-own-service.md");
const DEV: &str = include_str!("../../dev");

/// The guide's files (name, text) and its script.
fn blocks(markdown: &str) -> (Vec<(String, String)>, String) {
    let mut files = Vec::new();
    let mut script = String::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let mut body = String::new();
        for inner in lines.by_ref() {
            if inner.starts_with("```") {
                break;
            }
            body.push_str(inner);
            body.push('\n');
        }
        let file = info
            .split_whitespace()
            .find_map(|token| token.strip_prefix("file="));
        match file {
            Some(name) => files.push((name.to_owned(), body)),
            None if info.trim() == "sh" => {
                // Each block stamps when it starts, so the test can say how long each
                // took (the guide promises a newcomer's first job within minutes).
                let first = body.lines().next().unwrap_or_default().replace('\'', "");
                script.push_str(&format!(
                    "printf 'guide-step %s %s\\n' \"$(date +%s%N)\" '{first}'\n"
                ));
                script.push_str(&body);
            }
            None => {}
        }
    }
    script.push_str("printf 'guide-step %s %s\\n' \"$(date +%s%N)\" 'end'\n");
    (files, script)
}

/// The time each block of the guide took, from the stamps its script printed.
fn step_times(stdout: &str) -> Vec<(String, f64)> {
    let stamps: Vec<(u128, String)> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("guide-step "))
        .filter_map(|rest| {
            let (nanos, what) = rest.split_once(' ')?;
            Some((nanos.parse().ok()?, what.to_owned()))
        })
        .collect();
    stamps
        .windows(2)
        .map(|pair| {
            let took = pair[1].0.saturating_sub(pair[0].0) as f64 / 1e9;
            (pair[0].1.clone(), took)
        })
        .collect()
}

#[test]
fn the_guide_names_the_python_pins_the_set_up_script_installs() {
    let pins = DEV
        .lines()
        .find_map(|line| line.strip_prefix("GUIDE_PACKAGES=("))
        .and_then(|rest| rest.strip_suffix(')'))
        .expect("./dev pins GUIDE_PACKAGES");
    let mut wanted: Vec<&str> = pins.split_whitespace().collect();
    wanted.sort_unstable();
    let install = GUIDE
        .lines()
        .find_map(|line| line.strip_prefix("pip install "))
        .expect("the guide says what to pip install");
    let mut named: Vec<&str> = install.split_whitespace().collect();
    named.sort_unstable();
    assert_eq!(named, wanted);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .unwrap()
}

fn dir_of(program: &str) -> String {
    Path::new(program)
        .parent()
        .map(|dir| dir.display().to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_bring_your_own_service_guide_runs_as_written() {
    let python = std::env::var("GUIDE_PYTHON").unwrap_or_else(|_| {
        panic!("GUIDE_PYTHON is not set: run the tests with ./dev test (it installs the guide's Python packages), or ./dev up && source target/dev/env")
    });
    let db = TestDatabase::create().await;
    let events = protomolt_e2e::unique_topic("guide-events");
    let requests = protomolt_e2e::unique_topic("guide-requests");
    protomolt_e2e::create_topic(&events, 1).await;
    protomolt_e2e::create_topic(&requests, 1).await;

    let dir = tempfile::tempdir().unwrap();
    let (files, script) = blocks(GUIDE);
    assert!(files.len() >= 4, "{files:?}");
    for (name, text) in &files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    // A failed command ends the script, and whatever it started in the background
    // (the service, the node) ends with it; a TERM from the harness ends it too.
    let script = format!(
        "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\ntrap 'exit 124' TERM\n{script}"
    );
    let port = free_port();
    let path = format!(
        "{}:{}:{}",
        dir_of(env!("CARGO_BIN_EXE_protomolt")),
        dir_of(&python),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", path)
        .env("DATABASE_URL", &db.url)
        .env("KAFKA_BOOTSTRAP", protomolt_e2e::kafka_bootstrap())
        .env("PROTOMOLT_URL", format!("http://127.0.0.1:{port}"))
        .env("PROTOMOLT_NODE__BIND", format!("127.0.0.1:{port}"))
        // The guide's service takes 50051 unless told: tests running side by side
        // each take a free port.
        .env("SUMMARIZER_PORT", free_port().to_string())
        .env("PROTOMOLT_JOBS__EVENTS_TOPIC", &events)
        .env("PROTOMOLT_JOBS__REQUESTS_TOPIC", &requests)
        .env(
            "PROTOMOLT_JOBS__CONSUMER_GROUP",
            format!("guide-{}", uuid::Uuid::new_v4().simple()),
        )
        .env(
            "PYTHONPATH",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python"),
        )
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .env_remove("PROTOMOLT_TOKEN")
        .env_remove("VIRTUAL_ENV")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash runs");
    let pid = child.id();
    let waited = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Some(_status) = child.try_wait().unwrap() {
                return child.wait_with_output().unwrap();
            }
            if Instant::now() > deadline {
                // The script's own TERM trap stops what it started.
                let _ = Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
                std::thread::sleep(Duration::from_secs(3));
                let _ = child.kill();
                return child.wait_with_output().unwrap();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&waited.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&waited.stderr).into_owned();
    let node_log = std::fs::read_to_string(dir.path().join("node.log")).unwrap_or_default();
    let said = format!("stdout:\n{stdout}\nstderr:\n{stderr}\nnode.log:\n{node_log}");
    assert!(waited.status.success(), "the guide's script failed\n{said}");
    // How long a newcomer waits on each command (the binaries already built: `./dev
    // install` is timed on its own, see the guide).
    let times = step_times(&stdout);
    let total: f64 = times.iter().map(|(_, took)| took).sum();
    for (what, took) in &times {
        println!("guide step {took:>6.1} s  {what}");
    }
    println!("guide total {total:.1} s");
    assert!(!times.is_empty(), "the script stamped no step\n{said}");

    // What the guide tells the reader they will see.
    for expected in [
        "wrote proto/buf/validate/validate.proto",
        "waits on step 'approve'",
        "it asks to approve: {",
        "'words': 8",
        "'firstSentence': 'Protobuf is a language-neutral format'",
        "refused: invalid_argument",
        "response.approved: expected a boolean",
        "status COMPLETED result {",
        "ACCEPTED \n",
        "WAITING approve\n",
        "TYPE_ACCEPTED",
        "TYPE_STEP_CHECKPOINT summarize",
        "TYPE_WAITING approve {",
        "'pendingRequest': {",
        "TYPE_COMPLETED",
        "'approved': True",
        "'reviewer': 'ada@example.com'",
        "'metadata': {'team': 'docs'}",
    ] {
        assert!(said.contains(expected), "missing {expected:?}\n{said}");
    }
}
