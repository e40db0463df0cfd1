//! The run's database as production runs one: a primary and a streaming standby with
//! synchronous replication (`fsync` on), each behind a fault proxy of its own. The
//! nodes name both proxies in one multi-host URL with `target_session_attrs=read-write`
//! (libpq's and tokio-postgres's way to find the primary), so after a failover they
//! find the promoted standby by themselves. The data directories can sit on small
//! disks the driver fills. A former primary comes back as the new primary's standby
//! from a base backup (`PgCluster::rejoin_as_standby_of`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use protomolt_e2e::cluster::{ClusterOptions, PgCluster, Shutdown};
use protomolt_e2e::proxy::FaultProxy;

/// How long a rebuilt standby may take to catch up with its primary.
const CATCH_UP: Duration = Duration::from_secs(120);

/// The pair, and which of the two is the primary now.
pub struct Database {
    servers: [PgCluster; 2],
    proxies: [FaultProxy; 2],
    primary: AtomicUsize,
    /// Held while the roles change, so two changes never interleave.
    changing: Mutex<()>,
}

/// How the primary hands over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handover {
    /// The primary is killed (`pg_ctl stop -m immediate`), the standby promoted.
    Failover,
    /// The primary shuts down cleanly (`-m fast`: its standby gets every record
    /// first), the standby is promoted.
    Switchover,
}

impl Database {
    /// Starts the primary and its synchronous standby, each data directory on a small
    /// disk of `disk_mb` MiB when given (root only).
    pub async fn start(disk_mb: Option<u64>) -> Database {
        let options = ClusterOptions {
            durable: true,
            data_disk_mb: disk_mb,
        };
        let servers = tokio::task::spawn_blocking(move || {
            let primary = PgCluster::start_with(None, options);
            let standby = PgCluster::standby_of(&primary);
            primary.require_synchronous_standby();
            primary.wait_for_synchronous_standby(CATCH_UP);
            [primary, standby]
        })
        .await
        .expect("the database pair starts");
        let proxies = [
            FaultProxy::postgres_for(&servers[0].url("")).await,
            FaultProxy::postgres_for(&servers[1].url("")).await,
        ];
        Database {
            servers,
            proxies,
            primary: AtomicUsize::new(0),
            changing: Mutex::new(()),
        }
    }

    fn primary_index(&self) -> usize {
        self.primary.load(Ordering::SeqCst)
    }

    /// The primary now.
    pub fn primary(&self) -> &PgCluster {
        &self.servers[self.primary_index()]
    }

    /// A direct URL to the primary now (the run's own checks).
    pub fn url(&self) -> String {
        self.primary().url("")
    }

    /// The proxy in front of the primary now (where the proxy's faults hurt).
    pub fn proxy(&self) -> &FaultProxy {
        &self.proxies[self.primary_index()]
    }

    /// What node `name` connects with: both proxies, the writable one chosen.
    pub fn node_url(&self, name: &str) -> String {
        format!(
            "postgres://postgres@{},{}/postgres?target_session_attrs=read-write&sslmode=disable&application_name={name}",
            self.proxies[0].addr(),
            self.proxies[1].addr()
        )
    }

    /// The two servers' ports, the primary's first.
    pub fn ports(&self) -> (u16, u16) {
        let primary = self.primary_index();
        (self.servers[primary].port, self.servers[1 - primary].port)
    }

    /// Hands the primary's role to the standby: stops the primary as `how` says,
    /// waits `noticed` (the time a failover manager takes to see it), promotes the
    /// standby (alone until its new standby catches up, so its commits do not stall),
    /// then rebuilds the old primary as its standby and makes replication synchronous
    /// again. Blocks until the pair is whole (the standby streaming, caught up, as a
    /// failover manager such as Patroni waits before it calls a standby synchronous);
    /// answers what it did.
    pub fn hand_over(&self, how: Handover, noticed: Duration) -> String {
        // A hand-over that panicked left the pair half-changed: no other may follow.
        let _one_at_a_time = self.changing.lock().expect("an earlier hand-over panicked");
        let old = self.primary_index();
        let new = 1 - old;
        match how {
            Handover::Failover => self.servers[old].crash(),
            Handover::Switchover => self.servers[old].stop(Shutdown::Fast),
        }
        std::thread::sleep(noticed);
        self.servers[new].allow_without_standby();
        self.servers[new].promote();
        self.primary.store(new, Ordering::SeqCst);
        self.servers[old].rejoin_as_standby_of(&self.servers[new]);
        self.servers[new].require_synchronous_standby();
        // Until it has caught up, it holds less than the primary acknowledged (the
        // commits made while the primary was alone): no hand-over before then.
        self.servers[new].wait_for_synchronous_standby(CATCH_UP);
        format!(
            ":{} promoted after {} ms, :{} back as its standby",
            self.servers[new].port,
            noticed.as_millis(),
            self.servers[old].port
        )
    }

    /// Fills the primary's disk, holds it full for `hold`, frees it; answers how much
    /// it wrote, or why it could not.
    pub async fn fill_disk(&self, hold: Duration) -> String {
        let Some(disk) = self.primary().disk() else {
            return "no small disk (start the run with disk-full among its faults)".into();
        };
        let written = tokio::task::block_in_place(|| disk.fill());
        tokio::time::sleep(hold).await;
        disk.free();
        format!(
            "{} MiB written, full for {} ms",
            written >> 20,
            hold.as_millis()
        )
    }
}
