//! The fault driver: from its seed, one fault after another at random gaps, each kind
//! in turn within a shuffled round (so a run of R rounds injects R of every kind), every
//! fault logged with the time it hurt the fleet (for the call-count bound).

use std::sync::Arc;
use std::time::{Duration, Instant};

use protomolt_e2e::cluster::Shutdown;
use protomolt_e2e::proxy::{FaultProxy, Trigger};

use crate::database::{Database, Handover};
use crate::fixture::{Targets, now_ms};
use crate::rng::Rng;
use crate::world::{Broker, Node};

/// What the driver can do to the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Fault {
    /// `kill -9` a node, and start it again.
    KillNode,
    /// `SIGSTOP` a node past its lease, then `SIGCONT`.
    StopNode,
    /// `pg_ctl restart -m fast`.
    RestartDatabaseFast,
    /// `pg_ctl restart -m immediate` (a crash; the server replays its WAL).
    RestartDatabaseImmediate,
    /// Kill the broker (`kill -9`), start it again (`Broker::down` says why not SIGTERM).
    RestartBroker,
    /// `pg_terminate_backend` on a node's connections.
    CutConnections,
    /// The targets hang: no call is answered for a while.
    HangTarget,
    /// The connection cut right after a `COMMIT` reached the database, before its
    /// answer came back (the fault proxy, a few COMMITs in a row).
    CommitLost,
    /// The database unreachable for 1 to 5 s (the fault proxy refuses and cuts).
    DbBlip,
    /// Produce answers rewritten to an error: OUT_OF_ORDER_SEQUENCE_NUMBER (fatal for
    /// an idempotent producer) or UNKNOWN_SERVER_ERROR (retriable), one to three.
    BrokerError,
    /// Kill the primary (`-m immediate`), promote its synchronous standby a moment
    /// later, rebuild the old primary as the new standby (a base backup).
    Failover,
    /// Stop the primary cleanly (`-m fast`), promote the standby, rebuild the old
    /// primary as its standby.
    Switchover,
    /// The primary's data disk full to the last byte for 1 to 4 s (WAL on its own
    /// disk, as production keeps it).
    DiskFull,
    /// One node's wall clock 30 s ahead or behind for a while.
    ClockSkew,
}

impl Fault {
    /// Every kind, in the order the summary prints them.
    pub const ALL: [Fault; 14] = [
        Fault::KillNode,
        Fault::StopNode,
        Fault::RestartDatabaseFast,
        Fault::RestartDatabaseImmediate,
        Fault::RestartBroker,
        Fault::CutConnections,
        Fault::HangTarget,
        Fault::CommitLost,
        Fault::DbBlip,
        Fault::BrokerError,
        Fault::Failover,
        Fault::Switchover,
        Fault::DiskFull,
        Fault::ClockSkew,
    ];

    /// The summary's name.
    pub fn label(self) -> &'static str {
        match self {
            Fault::KillNode => "kill -9 a node, restart it",
            Fault::StopNode => "SIGSTOP a node past its lease, SIGCONT",
            Fault::RestartDatabaseFast => "pg_ctl restart -m fast",
            Fault::RestartDatabaseImmediate => "pg_ctl restart -m immediate",
            Fault::RestartBroker => "kill the broker, start it",
            Fault::CutConnections => "pg_terminate_backend a node's connections",
            Fault::HangTarget => "a target hangs",
            Fault::CommitLost => "a COMMIT's answer lost",
            Fault::DbBlip => "the database unreachable 1-5 s",
            Fault::BrokerError => "produce answered with an error",
            Fault::Failover => "kill the primary, promote the standby",
            Fault::Switchover => "switch the primary over cleanly",
            Fault::DiskFull => "the database's disk full 1-4 s",
            Fault::ClockSkew => "a node's clock 30 s off",
        }
    }
}

/// One fault as injected.
#[derive(Debug, Clone)]
pub struct Injected {
    /// Its kind.
    pub fault: Fault,
    /// When it began and ended, in ms since the epoch.
    pub started_ms: i64,
    /// See `started_ms`.
    pub ended_ms: i64,
}

/// What the driver may hurt.
pub struct Fleet {
    /// The database: a primary and its standby, each behind a fault proxy.
    pub database: Arc<Database>,
    /// The broker.
    pub broker: Arc<Broker>,
    /// The nodes.
    pub nodes: Vec<Arc<Node>>,
    /// The targets.
    pub targets: Arc<Targets>,
    /// The nodes' lease.
    pub lease: Duration,
    /// Between the nodes and the broker.
    pub broker_proxy: Arc<FaultProxy>,
}

/// Injects faults of the `kinds` given until `until`, waiting `gap` (a range, ms)
/// between them.
pub async fn drive(
    fleet: &Fleet,
    mut rng: Rng,
    kinds: &[Fault],
    until: Instant,
    gap: (u64, u64),
) -> Vec<Injected> {
    let mut injected = Vec::new();
    if kinds.is_empty() {
        // A soak without faults: the load runs its course.
        tokio::time::sleep_until(until.into()).await;
        return injected;
    }
    let mut round: Vec<Fault> = Vec::new();
    loop {
        tokio::time::sleep(Duration::from_millis(rng.between(gap.0, gap.1))).await;
        if Instant::now() >= until {
            return injected;
        }
        if round.is_empty() {
            round = kinds.to_vec();
            // Fisher-Yates: each round is every kind once, in the seed's order.
            for i in (1..round.len()).rev() {
                round.swap(i, rng.between(0, i as u64) as usize);
            }
        }
        let fault = round.pop().unwrap_or(Fault::KillNode);
        let started_ms = now_ms();
        let target = inject(fleet, fault, &mut rng).await;
        let ended_ms = now_ms();
        eprintln!(
            "chaos: {} ({target}): {} ms",
            fault.label(),
            ended_ms - started_ms
        );
        injected.push(Injected {
            fault,
            started_ms,
            ended_ms,
        });
    }
}

/// Injects one fault and undoes it; answers what it hit.
async fn inject(fleet: &Fleet, fault: Fault, rng: &mut Rng) -> String {
    let node = fleet.nodes[rng.between(0, fleet.nodes.len() as u64 - 1) as usize].clone();
    let pause = |rng: &mut Rng, low, high| Duration::from_millis(rng.between(low, high));
    match fault {
        Fault::KillNode => {
            node.kill();
            tokio::time::sleep(pause(rng, 200, 2_000)).await;
            let name = node.name.clone();
            blocking(move || node.up()).await;
            name
        }
        Fault::StopNode => {
            node.signal("STOP");
            let past = fleet.lease.as_millis() as u64;
            tokio::time::sleep(pause(rng, past + 500, past + 2_500)).await;
            node.signal("CONT");
            node.name.clone()
        }
        Fault::RestartDatabaseFast | Fault::RestartDatabaseImmediate => {
            let mode = if fault == Fault::RestartDatabaseFast {
                Shutdown::Fast
            } else {
                Shutdown::Immediate
            };
            let database = fleet.database.clone();
            blocking(move || database.primary().restart(mode)).await;
            format!("primary :{}", fleet.database.ports().0)
        }
        Fault::RestartBroker => {
            let broker = fleet.broker.clone();
            blocking(move || broker.down()).await;
            tokio::time::sleep(pause(rng, 500, 3_000)).await;
            let broker = fleet.broker.clone();
            blocking(move || broker.up()).await;
            "broker".into()
        }
        Fault::CutConnections => {
            let cut = cut_connections(&fleet.database.url(), &node.name).await;
            format!("{}: {cut} connections", node.name)
        }
        Fault::HangTarget => {
            let hold = pause(rng, 1_500, 4_000);
            fleet.targets.hang_until(now_ms() + hold.as_millis() as i64);
            tokio::time::sleep(hold).await;
            "targets".into()
        }
        Fault::CommitLost => {
            let proxy = fleet.database.proxy();
            let cuts = rng.between(1, 4);
            let before = proxy.stats().cut_after_trigger;
            proxy.cut_after(Trigger::Commit, 1, Some(cuts));
            // Until the COMMITs were cut, or a while on an idle fleet.
            let deadline = Instant::now() + Duration::from_secs(5);
            while proxy.stats().cut_after_trigger < before + cuts && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            proxy.pass();
            format!("{} COMMITs", proxy.stats().cut_after_trigger - before)
        }
        Fault::DbBlip => {
            let length = pause(rng, 1_000, 5_000);
            fleet.database.proxy().outage(length).await;
            format!("{} ms", length.as_millis())
        }
        Fault::BrokerError => {
            let proxy = &fleet.broker_proxy;
            let (code, name) = if rng.between(0, 1) == 0 {
                (45, "OUT_OF_ORDER_SEQUENCE_NUMBER")
            } else {
                (-1, "UNKNOWN_SERVER_ERROR")
            };
            let answers = rng.between(1, 3);
            let before = proxy.stats().rewritten_answers;
            proxy.rewrite_produce_errors(code, answers);
            let deadline = Instant::now() + Duration::from_secs(5);
            while proxy.stats().rewritten_answers < before + answers && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            proxy.pass();
            format!(
                "{} answers {name}",
                proxy.stats().rewritten_answers - before
            )
        }
        Fault::Failover | Fault::Switchover => {
            let how = if fault == Fault::Failover {
                Handover::Failover
            } else {
                Handover::Switchover
            };
            let noticed = pause(rng, 200, 2_000);
            let database = fleet.database.clone();
            tokio::task::spawn_blocking(move || database.hand_over(how, noticed))
                .await
                .unwrap_or_else(|e| panic!("a hand-over panicked: {e}"))
        }
        Fault::DiskFull => fleet.database.fill_disk(pause(rng, 1_000, 4_000)).await,
        Fault::ClockSkew => {
            let Some(clock) = node.clock() else {
                return format!("{}: no clock of its own", node.name);
            };
            let seconds = if rng.percent(50) { 30 } else { -30 };
            clock.set(seconds);
            // Past a lease, so a node judging leases by its own clock would be seen.
            let past = fleet.lease.as_millis() as u64;
            tokio::time::sleep(pause(rng, past + 1_000, 2 * past + 2_000)).await;
            clock.set(0);
            format!("{}: {seconds:+} s", node.name)
        }
    }
}

/// Runs a blocking step (a process start, `pg_ctl`) off the async threads.
async fn blocking(f: impl FnOnce() + Send + 'static) {
    if let Err(e) = tokio::task::spawn_blocking(f).await {
        panic!("a fault step panicked: {e}");
    }
}

/// Terminates the sessions a node opened (their `application_name` is its name).
async fn cut_connections(url: &str, node: &str) -> u64 {
    let Ok((client, connection)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await else {
        return 0;
    };
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE application_name = $1 AND pid <> pg_backend_pid()",
            &[&node],
        )
        .await
        .map_or(0, |row| row.get::<_, i64>(0) as u64)
}
