//! A fault-injecting TCP proxy: put it between a node and PostgreSQL or the broker and
//! break the connection at the moment a test chooses.
//!
//! It passes bytes through until told otherwise. The faults:
//!
//! | call                               | what the client sees                                        |
//! |------------------------------------|-------------------------------------------------------------|
//! | [`FaultProxy::cut_all`]            | every open connection closed now                            |
//! | [`FaultProxy::refuse`] / [`FaultProxy::accept`] | an outage: open connections cut, new ones closed as soon as they connect |
//! | [`FaultProxy::outage`]             | [`FaultProxy::refuse`] for a while, then [`FaultProxy::accept`] |
//! | [`FaultProxy::black_hole`]         | open connections cut, new ones accepted and never answered (a host gone from the network) |
//! | [`FaultProxy::stall`]              | nothing moves on any connection, open or new, and nothing is closed (a peer gone silent: TCP still acknowledges), until [`FaultProxy::pass`]; what was held then flows on |
//! | [`FaultProxy::cut_after`]          | every n-th chosen client message ([`Trigger`]: a PostgreSQL `COMMIT`, a Kafka Produce) is forwarded, then the connection is cut before its answer comes back: the server acted on it, the client never hears |
//! | [`FaultProxy::rewrite_produce_errors`] | the next Produce answers carry an error code of the test's choosing (45, OUT_OF_ORDER_SEQUENCE_NUMBER; -1, UNKNOWN_SERVER_ERROR) in every partition |
//! | [`FaultProxy::withhold_fetches`]   | every Kafka Fetch answer is dropped (the client waits for it), every other answer passes: a consumer that fetches nothing while the broker answers everything else |
//! | [`FaultProxy::withhold_fetches_on_open_connections`] | the same on the connections open now; a connection opened later fetches as usual (a client stuck until it is replaced) |
//! | [`FaultProxy::set_latency`]        | every message delayed, both ways                            |
//!
//! It understands just enough of each protocol to find message boundaries
//! ([`postgres`], [`kafka`]). For Kafka it also rewrites the brokers' ports in Metadata
//! and FindCoordinator answers to its own, so a client that bootstraps through it stays behind it.

pub mod kafka;
pub mod postgres;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Which protocol runs through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// PostgreSQL's frontend/backend protocol (plain text: `sslmode=disable` or a
    /// server that refuses TLS).
    Postgres,
    /// Kafka's wire protocol (plain text).
    Kafka,
}

/// A client message after which [`FaultProxy::cut_after`] cuts the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A simple-query `COMMIT` (what `Transaction::commit` sends).
    Commit,
    /// A Kafka Produce request.
    Produce,
}

/// What the proxy has done so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted (refused ones included).
    pub connections: u64,
    /// Client messages seen matching the armed [`Trigger`].
    pub triggers_seen: u64,
    /// Connections cut right after a trigger was forwarded.
    pub cut_after_trigger: u64,
    /// Produce answers whose error codes were rewritten.
    pub rewritten_answers: u64,
    /// Connections refused during an outage.
    pub refused: u64,
}

#[derive(Debug, Default)]
struct Faults {
    refusing: bool,
    black_hole: bool,
    stalled: bool,
    latency: Duration,
    cut_after: Option<CutAfter>,
    rewrite: Option<Rewrite>,
    /// Fetch answers are dropped on connections numbered below this.
    withhold_fetches_below: u64,
}

#[derive(Debug, Clone, Copy)]
struct CutAfter {
    trigger: Trigger,
    every: u64,
    /// Cuts left (None: for as long as it stays armed).
    left: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Rewrite {
    code: i16,
    left: u64,
}

struct Shared {
    upstream: SocketAddr,
    protocol: Protocol,
    port: u16,
    faults: Mutex<Faults>,
    /// Cancelled (and replaced) by [`FaultProxy::cut_all`]: every connection holds the
    /// token current when it was accepted.
    epoch: Mutex<CancellationToken>,
    connections: AtomicU64,
    triggers_seen: AtomicU64,
    cut_after_trigger: AtomicU64,
    rewritten_answers: AtomicU64,
    refused: AtomicU64,
}

impl Shared {
    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn epoch(&self) -> CancellationToken {
        self.epoch.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn latency(&self) -> Duration {
        self.faults().latency
    }

    /// Whether the connection must be cut after forwarding this trigger.
    fn counts_trigger(&self, seen: Trigger) -> bool {
        let mut faults = self.faults();
        let Some(cut) = faults.cut_after.as_mut() else {
            return false;
        };
        if cut.trigger != seen {
            return false;
        }
        let n = self.triggers_seen.fetch_add(1, Ordering::SeqCst) + 1;
        if !n.is_multiple_of(cut.every) {
            return false;
        }
        match cut.left.as_mut() {
            Some(0) => false,
            Some(left) => {
                *left -= 1;
                true
            }
            None => true,
        }
    }

    /// The error code the next Produce answer gets, if one is to be rewritten.
    fn take_rewrite(&self) -> Option<i16> {
        let mut faults = self.faults();
        let rewrite = faults.rewrite.as_mut()?;
        if rewrite.left == 0 {
            return None;
        }
        rewrite.left -= 1;
        Some(rewrite.code)
    }
}

/// A running proxy; stops accepting when dropped (open connections are cut).
pub struct FaultProxy {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: CancellationToken,
}

impl FaultProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr, protocol: Protocol) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("the proxy binds a port");
        let addr = listener.local_addr().expect("the proxy's address");
        let shared = Arc::new(Shared {
            upstream,
            protocol,
            port: addr.port(),
            faults: Mutex::default(),
            epoch: Mutex::new(CancellationToken::new()),
            connections: AtomicU64::new(0),
            triggers_seen: AtomicU64::new(0),
            cut_after_trigger: AtomicU64::new(0),
            rewritten_answers: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let stop = CancellationToken::new();
        tokio::spawn(accept_loop(listener, shared.clone(), stop.clone()));
        FaultProxy { shared, addr, stop }
    }

    /// A proxy in front of the PostgreSQL server of `database_url`.
    pub async fn postgres_for(database_url: &str) -> FaultProxy {
        let upstream = resolve(&host_port(database_url)).await;
        Self::start(upstream, Protocol::Postgres).await
    }

    /// A proxy in front of the broker at `bootstrap` (`host:port`).
    pub async fn kafka_for(bootstrap: &str) -> FaultProxy {
        let upstream = resolve(bootstrap).await;
        Self::start(upstream, Protocol::Kafka).await
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `database_url` with its host and port replaced by the proxy's, and
    /// `sslmode=disable` (the proxy reads the messages it cuts after: TLS would hide
    /// them).
    pub fn database_url(&self, database_url: &str) -> String {
        let written = authority_host(database_url);
        let url = database_url.replacen(&format!("@{written}"), &format!("@{}", self.addr), 1);
        let url = if url == database_url {
            database_url.replacen(written, &self.addr.to_string(), 1)
        } else {
            url
        };
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}sslmode=disable")
    }

    /// Closes every open connection now; new ones are accepted as before.
    pub fn cut_all(&self) {
        let mut epoch = self.shared.epoch.lock().unwrap_or_else(|p| p.into_inner());
        epoch.cancel();
        *epoch = CancellationToken::new();
    }

    /// Starts an outage: open connections are cut, new ones closed as they connect.
    pub fn refuse(&self) {
        self.shared.faults().refusing = true;
        self.cut_all();
    }

    /// Ends an outage (or a black hole, letting go of the connections it held).
    pub fn accept(&self) {
        let was_black_hole = {
            let mut faults = self.shared.faults();
            faults.refusing = false;
            std::mem::replace(&mut faults.black_hole, false)
        };
        if was_black_hole {
            self.cut_all();
        }
    }

    /// A host gone from the network: open connections are cut, new ones are accepted
    /// and then never answered (the client waits for its own timeout), until
    /// [`Self::accept`].
    pub fn black_hole(&self) {
        self.shared.faults().black_hole = true;
        self.cut_all();
    }

    /// An outage of `length`: [`Self::refuse`], a wait, [`Self::accept`].
    pub async fn outage(&self, length: Duration) {
        self.refuse();
        tokio::time::sleep(length).await;
        self.accept();
    }

    /// Arms `trigger`: every `every`-th matching client message (counted over all
    /// connections) is forwarded, then its connection is cut before any answer comes
    /// back; at most `times` times (None: until [`Self::pass`]).
    pub fn cut_after(&self, trigger: Trigger, every: u64, times: Option<u64>) {
        assert!(every > 0, "every is at least 1");
        self.shared.faults().cut_after = Some(CutAfter {
            trigger,
            every,
            left: times,
        });
    }

    /// The next `count` Produce answers carry `code` as every partition's error.
    pub fn rewrite_produce_errors(&self, code: i16, count: u64) {
        self.shared.faults().rewrite = Some(Rewrite { code, left: count });
    }

    /// Drops every Kafka Fetch answer until [`Self::pass`]; every other answer passes.
    pub fn withhold_fetches(&self) {
        self.shared.faults().withhold_fetches_below = u64::MAX;
    }

    /// Drops Kafka Fetch answers on the connections open now (not on those opened
    /// later) until [`Self::pass`]: a client that keeps its connections fetches
    /// nothing, a new client fetches as usual.
    pub fn withhold_fetches_on_open_connections(&self) {
        let open = self.shared.connections.load(Ordering::SeqCst);
        self.shared.faults().withhold_fetches_below = open;
    }

    /// Stops every byte on every connection, open or new, without closing any,
    /// until [`Self::pass`] (then what was held flows on, late).
    pub fn stall(&self) {
        self.shared.faults().stalled = true;
    }

    /// Delays every message by `latency`, both ways.
    pub fn set_latency(&self, latency: Duration) {
        self.shared.faults().latency = latency;
    }

    /// Clears every fault: bytes pass through again.
    pub fn pass(&self) {
        *self.shared.faults() = Faults::default();
    }

    /// What the proxy has done so far.
    pub fn stats(&self) -> ProxyStats {
        let s = &self.shared;
        ProxyStats {
            connections: s.connections.load(Ordering::SeqCst),
            triggers_seen: s.triggers_seen.load(Ordering::SeqCst),
            cut_after_trigger: s.cut_after_trigger.load(Ordering::SeqCst),
            rewritten_answers: s.rewritten_answers.load(Ordering::SeqCst),
            refused: s.refused.load(Ordering::SeqCst),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.cancel();
        self.cut_all();
    }
}

/// The `host:port` of a `postgres://` URL (port 5432 when it names none).
fn host_port(url: &str) -> String {
    let hp = authority_host(url);
    if hp
        .rsplit_once(':')
        .is_some_and(|(_, port)| port.parse::<u16>().is_ok())
    {
        hp.to_owned()
    } else {
        format!("{hp}:5432")
    }
}

/// The `host[:port]` of a `postgres://` URL, as written.
fn authority_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    &rest[..end]
}

async fn resolve(host_port: &str) -> SocketAddr {
    tokio::net::lookup_host(host_port)
        .await
        .unwrap_or_else(|e| panic!("resolving {host_port}: {e}"))
        .next()
        .unwrap_or_else(|| panic!("{host_port} resolves to nothing"))
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => return,
        };
        let Ok((client, _)) = accepted else { continue };
        let number = shared.connections.fetch_add(1, Ordering::SeqCst);
        if shared.faults().refusing {
            shared.refused.fetch_add(1, Ordering::SeqCst);
            drop(client);
            continue;
        }
        if shared.faults().black_hole {
            // Held silently until the black hole ends (the next cut) or the proxy stops.
            let (cut, stop) = (shared.epoch(), stop.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = cut.cancelled() => {}
                    () = stop.cancelled() => {}
                }
                drop(client);
            });
            continue;
        }
        let (shared, cut) = (shared.clone(), shared.epoch());
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(shared.upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            serve(client, server, shared, cut, number).await;
        });
    }
}

/// What one connection's two directions share.
pub(crate) struct Connection {
    shared: Arc<Shared>,
    /// Which connection this is, counting from 0 in the order they were accepted.
    number: u64,
    /// Cut this connection (after a trigger), or all of them (the epoch's token).
    cut: CancellationToken,
    /// Set once a trigger was forwarded: nothing more goes back to the client.
    muted: std::sync::atomic::AtomicBool,
    /// Kafka: the API key and version of each request in flight, by correlation id.
    requests: Mutex<std::collections::HashMap<i32, (i16, i16)>>,
}

async fn serve(
    client: TcpStream,
    server: TcpStream,
    shared: Arc<Shared>,
    epoch: CancellationToken,
    number: u64,
) {
    let conn = Arc::new(Connection {
        shared,
        number,
        cut: epoch.child_token(),
        muted: std::sync::atomic::AtomicBool::new(false),
        requests: Mutex::default(),
    });
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = {
        let conn = conn.clone();
        async move {
            match conn.shared.protocol {
                Protocol::Postgres => {
                    postgres::client_to_server(&conn, &mut client_read, &mut server_write).await
                }
                Protocol::Kafka => {
                    kafka::client_to_server(&conn, &mut client_read, &mut server_write).await
                }
            }
        }
    };
    let downstream = {
        let conn = conn.clone();
        async move {
            match conn.shared.protocol {
                Protocol::Postgres => raw(&conn, &mut server_read, &mut client_write).await,
                Protocol::Kafka => {
                    kafka::server_to_client(&conn, &mut server_read, &mut client_write).await
                }
            }
        }
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        () = conn.cut.cancelled() => {}
    }
    // Dropping the halves closes both sockets.
}

impl Connection {
    /// Waits the configured latency, if any, and for as long as the proxy stalls.
    async fn delay(&self) {
        let latency = self.shared.latency();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        while self.shared.faults().stalled {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Forwards one client message; when it is the armed trigger, mutes the answers
    /// first and cuts the connection once the server has had time to act on it.
    async fn forward_client_message(
        &self,
        message: &[u8],
        trigger: Option<Trigger>,
        to: &mut (impl AsyncWriteExt + Unpin),
    ) -> std::io::Result<()> {
        self.delay().await;
        let cut = trigger.is_some_and(|t| self.shared.counts_trigger(t));
        if cut {
            self.muted.store(true, Ordering::SeqCst);
        }
        to.write_all(message).await?;
        to.flush().await?;
        if cut {
            // The server reads what reached its socket before the close: give it a
            // moment to act on the message, so the cut lands after it, not before.
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.shared.cut_after_trigger.fetch_add(1, Ordering::SeqCst);
            self.cut.cancel();
            return Err(std::io::Error::other("cut after a trigger"));
        }
        Ok(())
    }

    /// Forwards answer bytes unless the connection was muted.
    async fn forward_answer(
        &self,
        bytes: &[u8],
        to: &mut (impl AsyncWriteExt + Unpin),
    ) -> std::io::Result<()> {
        self.delay().await;
        // Muted: the answers are swallowed until the cut closes the connection.
        if self.muted.load(Ordering::SeqCst) {
            return Ok(());
        }
        to.write_all(bytes).await?;
        to.flush().await
    }
}

/// Copies answers as they come (PostgreSQL's answers need no parsing here).
async fn raw(
    conn: &Connection,
    from: &mut (impl AsyncReadExt + Unpin),
    to: &mut (impl AsyncWriteExt + Unpin),
) -> std::io::Result<()> {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buffer).await?;
        if n == 0 {
            return Ok(());
        }
        conn.forward_answer(&buffer[..n], to).await?;
    }
}

/// Reads exactly `n` bytes, or None at a clean end of stream before the first byte.
pub(crate) async fn read_exact_or_end(
    from: &mut (impl AsyncReadExt + Unpin),
    n: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut buffer = vec![0u8; n];
    let mut filled = 0;
    while filled < n {
        let read = from.read(&mut buffer[filled..]).await?;
        if read == 0 {
            if filled == 0 {
                return Ok(None);
            }
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        filled += read;
    }
    Ok(Some(buffer))
}

#[cfg(test)]
mod tests {
    use super::host_port;

    #[test]
    fn host_and_port_are_read_from_database_urls() {
        assert_eq!(
            host_port("postgres://postgres@127.0.0.1:5432/x"),
            "127.0.0.1:5432"
        );
        assert_eq!(host_port("postgres://u:p@h/db?sslmode=disable"), "h:5432");
        assert_eq!(host_port("postgres://h:1"), "h:1");
    }
}
