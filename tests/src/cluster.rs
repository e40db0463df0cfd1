//! A PostgreSQL cluster of a test's own: `initdb` and `pg_ctl` into a temporary
//! directory, on a free port of 127.0.0.1, optionally serving TLS with a certificate
//! from a CA the test made. Stopped (immediately) when dropped.
//!
//! `initdb` refuses to run as root; as root (CI containers), the cluster runs as the
//! `postgres` user, as `./dev` does for its own local cluster.

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
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
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

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
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
    run(start, what);
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
        let bin = pg_bin();
        let dir = tempfile::Builder::new()
            .prefix("protomolt-pg-")
            .tempdir()
            .expect("a temporary directory");
        let data = dir.path().join("data");
        give_to_owner(dir.path());
        let mut initdb = as_owner(&bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "--no-sync"]);
        run(initdb, "initdb");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut settings = format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\nfsync = off\n",
            dir.path().display()
        );
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
        PgCluster { dir, bin, port }
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
    /// WAL and answers read-only until promoted), started on a port of its own.
    pub fn standby_of(primary: &PgCluster) -> PgCluster {
        let bin = primary.bin.clone();
        let dir = tempfile::Builder::new()
            .prefix("protomolt-pg-standby-")
            .tempdir()
            .expect("a temporary directory");
        let data = dir.path().join("data");
        give_to_owner(dir.path());
        let mut backup = as_owner(&bin.join("pg_basebackup"));
        backup
            .args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
            .args(["-U", "postgres", "-X", "stream", "-R", "--no-sync", "-D"])
            .arg(&data);
        run(backup, "pg_basebackup");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        // The copied postgresql.conf names the primary's port and socket directory:
        // the lines added last win.
        let conf = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).expect("postgresql.conf");
        text.push_str(&format!(
            "port = {port}\nunix_socket_directories = '{}'\n",
            dir.path().display()
        ));
        std::fs::write(&conf, text).expect("postgresql.conf written");
        give_to_owner(dir.path());
        start_server(&bin, dir.path(), "pg_ctl start (standby)");
        PgCluster { dir, bin, port }
    }

    /// Makes every commit on this primary wait until a standby has the commit's WAL
    /// (`synchronous_standby_names = '*'`): what the server acknowledges survives a
    /// failover to the standby.
    pub fn require_synchronous_standby(&self) {
        let conf = self.dir.path().join("data/postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).expect("postgresql.conf");
        text.push_str("synchronous_standby_names = '*'\nsynchronous_commit = on\n");
        std::fs::write(&conf, text).expect("postgresql.conf written");
        let mut reload = as_owner(&self.bin.join("pg_ctl"));
        reload
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("reload");
        run(reload, "pg_ctl reload");
    }

    /// Kills the server without a checkpoint, as a crashed host would, and leaves it
    /// down.
    pub fn crash(&self) {
        let mut stop = as_owner(&self.bin.join("pg_ctl"));
        stop.arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "-w", "stop"]);
        run(stop, "pg_ctl stop -m immediate");
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
