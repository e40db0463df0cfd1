//! The fleet under test, each piece a real process the fault driver can hurt: a
//! PostgreSQL cluster of the run's own, a Tansu broker of its own (stopping it must
//! not hurt anyone else's tests), and the `protomolt-node` processes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use protomolt_e2e::cluster::PgCluster;
pub use protomolt_e2e::process::{Node, free_port};
use protomolt_e2e::process::{log_file, wait_for_port};

/// Tansu 0.6.0's PostgreSQL schema (`third_party/tansu`), which the broker does not
/// create itself.
const TANSU_SCHEMA: &str = include_str!("../../../../third_party/tansu/postgres-schema-0.6.0.sql");

/// The broker's storage: a PostgreSQL cluster of its own (not the one the nodes use,
/// whose restarts are faults of the database, not of the broker), its schema applied.
/// Not SQLite: Tansu 0.6.0's SQLite store panics on an idempotent retry of a batch it
/// stored (`broker-error` and `commit-lost` make those) and stays unusable.
pub async fn broker_storage() -> (PgCluster, String) {
    let cluster = tokio::task::spawn_blocking(|| PgCluster::start(None))
        .await
        .expect("the broker's cluster starts");
    let url = cluster.url("sslmode=disable");
    protomolt_e2e::connect(&url)
        .await
        .batch_execute(TANSU_SCHEMA)
        .await
        .expect("the broker's schema applies");
    (cluster, url)
}

/// The run's Tansu broker, on a port kept across restarts.
pub struct Broker {
    bin: PathBuf,
    dir: PathBuf,
    /// Where it keeps its data (`--storage-engine`).
    storage: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    child: Mutex<Option<Child>>,
}

impl Broker {
    /// Starts a broker storing into `storage` (a restart keeps the records), its log
    /// in `dir`.
    pub fn start(bin: PathBuf, dir: PathBuf, storage: String) -> Broker {
        std::fs::create_dir_all(&dir).expect("the broker's directory");
        let broker = Broker {
            bin,
            dir,
            storage,
            port: free_port(),
            child: Mutex::new(None),
        };
        broker.up();
        broker
    }

    /// `127.0.0.1:port`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the process and waits until it listens.
    pub fn up(&self) {
        let listener = format!("tcp://127.0.0.1:{}", self.port);
        let log = self.dir.join("broker.log");
        let child = Command::new(&self.bin)
            .current_dir(&self.dir)
            .args(["broker", "--storage-engine", &self.storage])
            .args([
                "--listener-url",
                &listener,
                "--advertised-listener-url",
                &listener,
            ])
            .stdin(Stdio::null())
            .stdout(log_file(&log))
            .stderr(log_file(&log))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.bin.display()));
        *self.child.lock().expect("broker lock") = Some(child);
        wait_for_port(self.port, "the broker", &log);
    }

    /// Stops the process: `kill -9`, a crash. (Tansu 0.6.0 stopped with SIGTERM while
    /// produces are in flight closes its storage first and answers them with errors; the
    /// next start then panics on the idempotent producer's state and stores nothing
    /// more. A crash loses only uncommitted work, which the clients retry.)
    pub fn down(&self) {
        if let Some(mut child) = self.child.lock().expect("broker lock").take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.down();
    }
}

/// The `[node]`, `[registry]` and `[jobs]` of a chaos node: a short lease so a
/// stopped node loses it within the run, quick sweeps, backoffs and relay polls; with
/// `retention`, finished jobs and published events deleted 5 minutes on (a soak).
#[allow(clippy::too_many_arguments)]
pub fn node_config(
    name: &str,
    port: u16,
    workflows_dir: &Path,
    database_url: &str,
    bootstrap: &str,
    topics: &Topics,
    lease_ms: u64,
    retention: bool,
) -> String {
    let retention = if retention {
        "
[jobs.retention]
completed_ms = 300000
failed_ms = 300000
dead_ms = 300000
cancelled_ms = 300000
published_events_ms = 300000
interval_ms = 60000
"
    } else {
        ""
    };
    format!(
        r#"[node]
bind = "127.0.0.1:{port}"
roles = ["registry", "jobs"]
shutdown_grace_ms = 5000

[registry]
workflows_dir = "{workflows}"

[jobs]
database_url = "{database_url}"
worker_id = "{name}"
max_in_flight = 16
max_concurrent_per_target = 16
lease_ms = {lease_ms}
sweep_interval_ms = 500
poll_interval_ms = 500
backoff_base_ms = 200
max_attempts_default = 5
shutdown_grace_ms = 2000
kafka_bootstrap = "{bootstrap}"
events_topic = "{events}"
requests_topic = "{requests}"
consumer_group = "chaos-requests-{name}"
relay_poll_interval_ms = 100
relay_backoff_base_ms = 50
relay_backoff_max_ms = 1000

# A message outlives any broker restart of the run: one that timed out with its
# request in flight would make librdkafka bump the idempotent producer's epoch, which
# Tansu 0.6.0 does not implement (a `todo!()` that stops its storage for good).
#
# Tansu 0.6.0 storing in PostgreSQL 15 cannot answer the latest offset under
# read_committed (its query needs PostgreSQL 16): nothing here is transactional, so
# read_uncommitted reads the same records.
[jobs.kafka_options]
"message.timeout.ms" = "300000"
"isolation.level" = "read_uncommitted"
"reconnect.backoff.max.ms" = "1000"
{retention}"#,
        workflows = workflows_dir.display(),
        events = topics.events,
        requests = topics.requests,
    )
}

/// The run's two topics.
#[derive(Debug, Clone)]
pub struct Topics {
    /// Where the relays publish.
    pub events: String,
    /// Where half the submissions are produced.
    pub requests: String,
}

/// The `protomolt-node` to run: `explicit`, or the one beside this binary, built first
/// when this run was started by `cargo run` (so a long run never tests a stale node).
pub fn node_binary(explicit: Option<PathBuf>) -> PathBuf {
    if let Some(path) = explicit {
        assert!(path.is_file(), "no node binary at {}", path.display());
        return path;
    }
    let me = std::env::current_exe().expect("this binary's path");
    let dir = me.parent().expect("this binary's directory");
    let beside = dir.join("protomolt-node");
    if let Ok(cargo) = std::env::var("CARGO") {
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "host-example", "--bin", "protomolt-node"]);
        if dir.file_name().is_some_and(|name| name == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("cargo build runs");
        assert!(status.success(), "building protomolt-node failed");
    }
    assert!(
        beside.is_file(),
        "no protomolt-node beside {}: build it (cargo build -p host-example --bin protomolt-node, --release for a release run) or pass --node-bin",
        me.display()
    );
    beside
}

/// The Tansu broker `./dev up` installed: `explicit`, `$PROTOMOLT_TANSU_ROOT/bin/tansu`,
/// or the set-up script's default place.
pub fn tansu_binary(explicit: Option<PathBuf>) -> PathBuf {
    let path = explicit.unwrap_or_else(|| {
        let root = std::env::var_os("PROTOMOLT_TANSU_ROOT")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let home = std::env::var_os("HOME").unwrap_or_default();
                PathBuf::from(home).join(".cache/protomolt/tansu-0.6.0-dynostore-libsql-postgres")
            });
        root.join("bin/tansu")
    });
    assert!(
        path.is_file(),
        "no Tansu broker at {}: run ./dev up (it builds the pinned broker) or pass --tansu",
        path.display()
    );
    path
}
