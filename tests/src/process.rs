//! Real processes a test can hurt: `protomolt-node` started from its binary, killed
//! with `kill -9`, frozen with `SIGSTOP` and thawed with `SIGCONT` (what an
//! in-process node cannot be), and the small helpers around them (free ports, logs).

use std::fs::OpenOptions;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A free port on 127.0.0.1 (free when asked; kept for the process's restarts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// Waits until something accepts connections on `port`, or panics naming `what`.
pub fn wait_for_port(port: u16, what: &str, log: &Path) {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(90);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} never listened on {addr}: see {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `signal` (`STOP`, `CONT`, `TERM`) to `pid` with the `kill` command.
pub fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status();
}

/// Opens `path` for appending (a process's log, kept across its restarts).
pub fn log_file(path: &Path) -> std::fs::File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Ends `child` gently (SIGTERM), or with SIGKILL after `patience`.
pub fn terminate(child: &mut Child, patience: Duration) {
    signal(child.id(), "CONT");
    signal(child.id(), "TERM");
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// One `protomolt-node` process, restartable on its own port and config.
pub struct Node {
    /// `n1`, `n2`, ...: also its worker id.
    pub name: String,
    /// Its HTTP port on 127.0.0.1.
    pub port: u16,
    bin: PathBuf,
    config: PathBuf,
    /// Its log (stdout and stderr, across restarts).
    pub log: PathBuf,
    /// Its wall clock, when set off from the machine's.
    clock: Option<FakeClock>,
    child: Mutex<Option<Child>>,
}

/// Where Debian's `libfaketime` puts the library (`./dev` installs it).
const LIBFAKETIME: [&str; 2] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
];

/// A process's wall clock set off from the machine's by `libfaketime` (preloaded), its
/// offset read from a file the test rewrites while the process runs (re-read each
/// second). Only the wall clock moves: the monotonic clock, which a clock step never
/// moves either, is left alone, as is sleeping.
#[derive(Debug)]
pub struct FakeClock {
    library: PathBuf,
    file: PathBuf,
}

impl FakeClock {
    /// A clock whose offset lives in `file` (at +0 s until [`Self::set`]), or `None`
    /// when `libfaketime` is not installed.
    pub fn new(file: &Path) -> Option<FakeClock> {
        let library = LIBFAKETIME
            .iter()
            .map(PathBuf::from)
            .find(|path| path.is_file())?;
        let clock = FakeClock {
            library,
            file: file.to_owned(),
        };
        clock.set(0);
        Some(clock)
    }

    /// Sets the offset, in seconds (the process sees it within a second).
    pub fn set(&self, seconds: i64) {
        // Written aside and renamed: libfaketime never reads a half-written file.
        let aside = self.file.with_extension("new");
        std::fs::write(&aside, format!("{seconds:+}\n")).expect("the clock's offset file");
        std::fs::rename(&aside, &self.file).expect("the clock's offset file renamed");
    }

    /// Makes `command` run on this clock.
    pub fn apply(&self, command: &mut Command) {
        command
            .env("LD_PRELOAD", &self.library)
            .env("FAKETIME_TIMESTAMP_FILE", &self.file)
            .env("FAKETIME_CACHE_DURATION", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env("DONT_FAKE_MONOTONIC", "1");
    }
}

impl Node {
    /// A node named `name` configured by `config_toml` (written to `dir`), not started.
    pub fn new(name: &str, port: u16, bin: &Path, dir: &Path, config_toml: &str) -> Node {
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, config_toml).expect("the node's config");
        Node {
            name: name.to_owned(),
            port,
            bin: bin.to_owned(),
            config,
            log: dir.join(format!("{name}.log")),
            clock: None,
            child: Mutex::new(None),
        }
    }

    /// Runs the node on `clock` from its next start.
    pub fn with_clock(mut self, clock: FakeClock) -> Node {
        self.clock = Some(clock);
        self
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child
            .lock()
            .expect("node lock")
            .as_ref()
            .map(Child::id)
    }

    /// Its clock, when it has one of its own.
    pub fn clock(&self) -> Option<&FakeClock> {
        self.clock.as_ref()
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts the process and waits until it listens.
    pub fn up(&self) {
        let mut command = Command::new(&self.bin);
        if let Some(clock) = &self.clock {
            clock.apply(&mut command);
        }
        let child = command
            .env("RUST_LOG", "warn")
            .env_remove("DATABASE_URL")
            .env_remove("KAFKA_BOOTSTRAP")
            .arg("--config")
            .arg(&self.config)
            .arg("run")
            .stdin(Stdio::null())
            .stdout(log_file(&self.log))
            .stderr(log_file(&self.log))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.bin.display()));
        *self.child.lock().expect("node lock") = Some(child);
        wait_for_port(self.port, &self.name, &self.log);
    }

    /// `kill -9`: the process dies mid-whatever.
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().expect("node lock").take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes (`STOP`) or thaws (`CONT`) the process: a node that stalls past its
    /// lease and then goes on as if nothing happened.
    pub fn signal(&self, name: &str) {
        if let Some(child) = self.child.lock().expect("node lock").as_ref() {
            signal(child.id(), name);
        }
    }

    /// Stops the process gently (its shutdown path), as at the end of the run.
    pub fn down(&self) {
        if let Some(mut child) = self.child.lock().expect("node lock").take() {
            terminate(&mut child, Duration::from_secs(30));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.lock().map(|mut c| c.take()).unwrap_or(None) {
            signal(child.id(), "CONT");
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The config of a `protomolt-node` named `name` running the registry and jobs roles
/// over `database_url`, its stored workflows in `workflows`, with `jobs_settings`
/// (lines of `[jobs]` keys: leases, polls, what the test needs) added to its `[jobs]`.
pub fn fleet_node_config(
    name: &str,
    port: u16,
    workflows: &Path,
    database_url: &str,
    jobs_settings: &str,
) -> String {
    format!(
        r#"[node]
bind = "127.0.0.1:{port}"
roles = ["registry", "jobs"]
shutdown_grace_ms = 2000

[registry]
workflows_dir = "{workflows}"

[jobs]
database_url = "{database_url}"
worker_id = "{name}"
max_in_flight = 4
shutdown_grace_ms = 1000
max_connections = 6
{jobs_settings}"#,
        workflows = workflows.display(),
    )
}

/// Calls `verb` on `node` with `body`; panics unless it answers 2xx; answers its JSON.
pub async fn post_verb(
    http: &reqwest::Client,
    node: &Node,
    verb: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let response = http
        .post(format!("{}/v1/actions/{verb}", node.url()))
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{verb} on {}: {e}", node.name));
    let status = response.status();
    let answer: serde_json::Value = response.json().await.expect("a JSON answer");
    assert!(status.is_success(), "{verb} answered {status}: {answer}");
    answer
}

/// The `protomolt-node` binary `cargo test` built beside `binary` (a binary of this
/// package, such as `env!("CARGO_BIN_EXE_chaos")`), or a panic saying how to build it.
pub fn node_binary_beside(binary: &Path) -> PathBuf {
    let node = binary.with_file_name("protomolt-node");
    assert!(
        node.is_file(),
        "no {}: build it first (cargo build -p host-example --bin protomolt-node)",
        node.display()
    );
    node
}

/// No variables beyond the process's own, for [`run_checked`].
pub const NO_ENV: [(&str, &str); 0] = [];

/// Runs `program` with `args` in `dir` and the variables `envs` (blocking: call it
/// from `spawn_blocking` in an async test); its output, stdout then stderr, or a panic
/// that shows it.
pub fn run_checked<K, V>(
    program: &Path,
    args: &[&str],
    dir: &Path,
    envs: impl IntoIterator<Item = (K, V)>,
) -> String
where
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(envs)
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", program.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{} {args:?} failed:\n{text}",
        program.display()
    );
    text
}

/// The clients' Python (`./dev up` installs it, with the OpenAPI validator and
/// generator, pytest and the Kafka helper's packages, and exports `CLIENTS_PYTHON`).
pub fn clients_python() -> PathBuf {
    PathBuf::from(std::env::var("CLIENTS_PYTHON").unwrap_or_else(|_| {
        panic!("CLIENTS_PYTHON is not set: run the tests with ./dev test (it installs the clients' Python tooling), or ./dev up && source target/dev/env")
    }))
}
