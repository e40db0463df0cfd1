//! A PostgreSQL cluster of a test's own: `initdb` and `pg_ctl` into a temporary
//! directory, on a free port of 127.0.0.1, optionally serving TLS with a certificate
//! from a CA the test made. Stopped (immediately) when dropped.
//!
//! `initdb` refuses to run as root; as root (CI containers), the cluster runs as the
//! `postgres` user, as `./dev` does for its own local cluster.
//!
//! A [`ClusterOptions::durable`] cluster is one as production runs it (`fsync` on,
//! its WAL beside the data directory rather than in it), and can stand in a primary and standby pair: [`PgCluster::standby_of`],
//! [`PgCluster::promote`], [`PgCluster::rejoin_as_standby_of`]. Its data directory can
//! sit on a [`SmallDisk`] that a test fills.

mod disk;

pub use disk::SmallDisk;
use disk::running_as_root;

use std::path::{Path, PathBuf};
use std::process::Command;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

/// A test CA and one server certificate it signed.
pub struct TestPki {
    /// The CA certificate (PEM): what a client trusts.
    pub ca_pem: String,
    /// The server's certificate (PEM).
    pub cert_pem: String,
    /// The server's private key (PEM).
    pub key_pem: String,
}

impl TestPki {
    /// A new CA, and a server certificate for `names` (DNS names or IP addresses).
    pub fn new(names: &[&str]) -> TestPki {
        let ca_key = KeyPair::generate().expect("a CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_pem = ca.self_signed(&ca_key).expect("the CA certificate").pem();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().expect("a server key");
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let cert = CertificateParams::new(names)
            .expect("server params")
            .signed_by(&key, &issuer)
            .expect("the server certificate");
        TestPki {
            ca_pem,
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// A running cluster; see the module docs.
pub struct PgCluster {
    // Before `dir`: unmounted before the directory is deleted.
    disk: Option<SmallDisk>,
    dir: tempfile::TempDir,
    bin: PathBuf,
    options: ClusterOptions,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

/// How a cluster is made (the default: a throwaway cluster, `fsync` off).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClusterOptions {
    /// `fsync` on, WAL kept in `wal/` beside the data directory (a full data disk then
    /// fails writes with SQLSTATE 53100 rather than stopping the server).
    pub durable: bool,
    /// The data directory on a [`SmallDisk`] of this many MiB (needs root).
    pub data_disk_mb: Option<u64>,
}

/// The directory holding `initdb` and `pg_ctl`.
fn pg_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("pg_ctl").is_file() && dir.join("initdb").is_file() {
                // A link to the server's own directory (which also holds
                // pg_basebackup and the other tools): that directory.
                return std::fs::canonicalize(dir.join("pg_ctl"))
                    .ok()
                    .and_then(|ctl| ctl.parent().map(Path::to_path_buf))
                    .filter(|real| real.join("initdb").is_file())
                    .unwrap_or(dir);
            }
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path().join("bin"))
                .filter(|bin| bin.join("pg_ctl").is_file())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!("no PostgreSQL server binaries (initdb, pg_ctl): ./dev up installs what the tests need, or apt-get install postgresql")
    })
}

/// `program args…`, as the `postgres` user when this process is root.
fn as_owner(program: &Path) -> Command {
    if running_as_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// Gives `path` to the `postgres` user when this process is root.
fn give_to_owner(path: &Path) {
    if running_as_root() {
        let status = Command::new("chown")
            .args(["-R", "postgres"])
            .arg(path)
            .status()
            .expect("chown runs");
        assert!(status.success(), "chown -R postgres {}", path.display());
    }
}

/// Starts the server of the cluster in `dir` (its `data`, logging to `server.log`);
/// blocks until it accepts connections.
fn start_server(bin: &Path, dir: &Path, what: &str) {
    let mut start = as_owner(&bin.join("pg_ctl"));
    start
        .arg("-D")
        .arg(dir.join("data"))
        .arg("-l")
        .arg(dir.join("server.log"))
        .args(["-w", "start"]);
    let output = start.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    if !output.status.success() {
        let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        panic!(
            "{what} failed: {}{}\nthe server's log ends:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
}

fn run(mut command: Command, what: &str) {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl PgCluster {
    /// Creates and starts a cluster (trust authentication for `postgres`), serving TLS
    /// with `pki`'s server certificate when given.
    pub fn start(pki: Option<&TestPki>) -> PgCluster {
        Self::start_with(pki, ClusterOptions::default())
    }

    /// [`Self::start`] made as `options` say.
    pub fn start_with(pki: Option<&TestPki>, options: ClusterOptions) -> PgCluster {
        let bin = pg_bin();
        let dir = tempfile::Builder::new()
            .prefix("protomolt-pg-")
            .tempdir()
            .expect("a temporary directory");
        let data = dir.path().join("data");
        let disk = options
            .data_disk_mb
            .map(|megabytes| SmallDisk::mount(&data, megabytes));
        give_to_owner(dir.path());
        let mut initdb = as_owner(&bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "--no-sync"]);
        if options.durable {
            initdb.arg("--waldir").arg(dir.path().join("wal"));
        }
        run(initdb, "initdb");
        let port = free_port();
        let mut settings = format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\n",
            dir.path().display()
        );
        if options.durable {
            settings.push_str("fsync = on\n");
        } else {
            settings.push_str("fsync = off\n");
        }
        if let Some(pki) = pki {
            std::fs::write(data.join("server.crt"), &pki.cert_pem).expect("the certificate");
            let key = data.join("server.key");
            std::fs::write(&key, &pki.key_pem).expect("the key");
            // PostgreSQL refuses a key others can read.
            std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .expect("key permissions");
            settings
                .push_str("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        }
        let conf = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).expect("postgresql.conf");
        text.push_str(&settings);
        std::fs::write(&conf, text).expect("postgresql.conf written");
        give_to_owner(dir.path());
        start_server(&bin, dir.path(), "pg_ctl start");
        PgCluster {
            disk,
            dir,
            bin,
            options,
            port,
        }
    }

    /// A URL to `database` as `postgres`, with `params` (`sslmode=require`, …).
    pub fn url(&self, params: &str) -> String {
        let query = if params.is_empty() {
            String::new()
        } else {
            format!("?{params}")
        };
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres{query}",
            self.port
        )
    }

    /// Restarts the server the way an operator or a crash would: `fast` ends every
    /// session cleanly first, `immediate` kills the server without a checkpoint (it
    /// recovers from its WAL on start). Blocks until it accepts connections again.
    pub fn restart(&self, mode: Shutdown) {
        let mut restart = as_owner(&self.bin.join("pg_ctl"));
        restart
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-m", mode.as_pg_ctl(), "-w", "restart"]);
        run(restart, "pg_ctl restart");
    }

    /// The cluster's directory (readable by the test; the CA file can go here).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A streaming standby of `primary` (`pg_basebackup -R`: it follows the primary's
    /// WAL and answers read-only until promoted), started on a port of its own, made
    /// with the primary's options.
    pub fn standby_of(primary: &PgCluster) -> PgCluster {
        let options = primary.options;
        let dir = tempfile::Builder::new()
            .prefix("protomolt-pg-standby-")
            .tempdir()
            .expect("a temporary directory");
        let disk = options
            .data_disk_mb
            .map(|megabytes| SmallDisk::mount(&dir.path().join("data"), megabytes));
        let standby = PgCluster {
            disk,
            dir,
            bin: primary.bin.clone(),
            options,
            port: free_port(),
        };
        standby.copy_from(primary);
        start_server(&standby.bin, standby.dir.path(), "pg_ctl start (standby)");
        standby
    }

    /// Copies `primary`'s data into this (stopped, empty) cluster's directories as a
    /// standby of it (`pg_basebackup -R`), keeping this cluster's port.
    fn copy_from(&self, primary: &PgCluster) {
        let data = self.dir.path().join("data");
        give_to_owner(self.dir.path());
        let mut backup = as_owner(&self.bin.join("pg_basebackup"));
        backup
            .args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
            .args([
                "-U",
                "postgres",
                "-X",
                "stream",
                "-R",
                "--no-sync",
                "--checkpoint=fast",
                "-D",
            ])
            .arg(&data);
        if self.options.durable {
            backup.arg("--waldir").arg(self.dir.path().join("wal"));
        }
        run(backup, "pg_basebackup");
        self.settle_as_standby();
    }

    /// After a copy of another cluster's files: this cluster's own port and socket
    /// directory (the copied `postgresql.conf` names the other's; the lines added last
    /// win), and a quick reconnection to a primary that restarts.
    fn settle_as_standby(&self) {
        self.append_settings(&format!(
            "port = {}\nunix_socket_directories = '{}'\nwal_retrieve_retry_interval = '500ms'\n",
            self.port,
            self.dir.path().display()
        ));
        give_to_owner(self.dir.path());
    }

    fn append_settings(&self, lines: &str) {
        let conf = self.dir.path().join("data/postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).expect("postgresql.conf");
        text.push_str(lines);
        std::fs::write(&conf, text).expect("postgresql.conf written");
    }

    /// Appends `lines` to `postgresql.conf` and reloads the running server.
    pub fn configure(&self, lines: &str) {
        self.append_settings(lines);
        let mut reload = as_owner(&self.bin.join("pg_ctl"));
        reload
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("reload");
        run(reload, "pg_ctl reload");
    }

    /// Makes this stopped former primary a standby of `primary`, the promoted standby
    /// it had: its data is replaced by a base backup of `primary` (what it wrote that
    /// the standby never had is thrown away, as a failover manager does), and it is
    /// started. (`pg_rewind` was tried first and is not used: a former primary it
    /// rewound, promoted in a later hand-over and rewound again would not start,
    /// "requested timeline does not contain minimum recovery point"; a base backup of
    /// the small databases here takes about a second.)
    pub fn rejoin_as_standby_of(&self, primary: &PgCluster) {
        for dir in [self.dir.path().join("data"), self.dir.path().join("wal")] {
            empty_directory(&dir);
        }
        self.copy_from(primary);
        start_server(
            &self.bin,
            self.dir.path(),
            "pg_ctl start (rejoined standby)",
        );
    }

    /// Stops the server the way `mode` says and leaves it down.
    pub fn stop(&self, mode: Shutdown) {
        let mut stop = as_owner(&self.bin.join("pg_ctl"));
        stop.arg("-D").arg(self.dir.path().join("data")).args([
            "-m",
            mode.as_pg_ctl(),
            "-w",
            "stop",
        ]);
        run(stop, "pg_ctl stop");
    }

    /// The small disk its data directory is on, when it has one.
    pub fn disk(&self) -> Option<&SmallDisk> {
        self.disk.as_ref()
    }

    /// Makes every commit on this primary wait until a standby has the commit's WAL
    /// (`synchronous_standby_names = '*'`): what the server acknowledges survives a
    /// failover to the standby.
    pub fn require_synchronous_standby(&self) {
        self.configure("synchronous_standby_names = '*'\nsynchronous_commit = on\n");
    }

    /// Blocks until a standby streams from this primary synchronously, caught up
    /// (`state = 'streaming'`: it has every record written before): only then may it
    /// be promoted without losing what this primary acknowledged while it was away.
    pub fn wait_for_synchronous_standby(&self, patience: std::time::Duration) {
        let deadline = std::time::Instant::now() + patience;
        loop {
            let output = Command::new(self.bin.join("psql"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                .args(["-U", "postgres", "-d", "postgres", "-Atc"])
                .arg("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync'")
                .output();
            // A psql that failed (too many clients, a restart) proves nothing.
            let synchronous = output.is_ok_and(|out| {
                out.status.success()
                    && String::from_utf8_lossy(&out.stdout)
                        .trim()
                        .parse::<i64>()
                        .is_ok_and(|count| count > 0)
            });
            if synchronous {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no synchronous standby caught up with :{} within {patience:?}",
                self.port
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Lets every commit on this primary return without a standby (while its standby
    /// is being rebuilt after a failover: a lone primary must not stall).
    pub fn allow_without_standby(&self) {
        self.configure("synchronous_standby_names = ''\n");
    }

    /// Kills the server without a checkpoint, as a crashed host would, and leaves it
    /// down.
    pub fn crash(&self) {
        self.stop(Shutdown::Immediate);
    }

    /// Promotes a standby to primary; blocks until it accepts writes.
    pub fn promote(&self) {
        let mut promote = as_owner(&self.bin.join("pg_ctl"));
        promote
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-w", "promote"]);
        run(promote, "pg_ctl promote");
    }
}

/// A free TCP port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Deletes what `dir` holds, keeping `dir` (a mount point stays one).
fn empty_directory(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            let _ = if path.is_dir() && !path.is_symlink() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
        }
    }
}

/// How [`PgCluster::restart`] stops the server (`pg_ctl -m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Sessions are ended and a checkpoint written.
    Fast,
    /// The server is killed; it replays its WAL on start.
    Immediate,
}

impl Shutdown {
    fn as_pg_ctl(self) -> &'static str {
        match self {
            Shutdown::Fast => "fast",
            Shutdown::Immediate => "immediate",
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let mut stop = as_owner(&self.bin.join("pg_ctl"));
        stop.arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "-w", "stop"]);
        let _ = stop.output();
    }
}
