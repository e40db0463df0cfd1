//! Dynamic unary gRPC: requests and responses are `prost-reflect` messages, encoded
//! and decoded with a codec that knows the method's descriptors, over tonic.
//!
//! Channels are cached per target (and TLS choice) and connect lazily, so the first
//! call to a target pays for the connection and later calls reuse it. The cache is
//! bounded, because every workflow names its own targets: at most [`MAX_CHANNELS`]
//! channels, the least recently used evicted first, and a channel unused for
//! [`CHANNEL_IDLE`] dropped at the next miss. Dropping a channel only closes its
//! connection once calls still holding a clone of it finish.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::uri::PathAndQuery;
use prost::Message;
use prost_reflect::{DynamicMessage, MessageDescriptor, MethodDescriptor};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};

use crate::glob::glob_matches;
use crate::outbound::OutboundPolicy;

const DEADLINE_GRACE: Duration = Duration::from_millis(250);

/// Most channels one [`GrpcClient`] keeps.
pub const MAX_CHANNELS: usize = 1_024;
/// A cached channel unused this long is dropped.
pub const CHANNEL_IDLE: Duration = Duration::from_secs(600);

/// A map bounded in entries (least recently used evicted first) and in idleness.
///
/// A hit costs one hash lookup; a miss also sweeps idle entries and, when full, scans
/// for the least recently used one. Both scans are O(capacity), paid only when a new
/// target arrives, which is when a connection is about to be made anyway.
struct LruCache<K, V> {
    entries: HashMap<K, (V, Instant)>,
    capacity: usize,
    idle: Duration,
}

impl<K: Eq + Hash + Clone, V: Clone> LruCache<K, V> {
    fn new(capacity: usize, idle: Duration) -> Self {
        LruCache {
            entries: HashMap::new(),
            capacity,
            idle,
        }
    }

    /// The value for `key` (marked used at `now`), or the one `make` builds, cached.
    fn get_or_try_insert<E>(
        &mut self,
        key: &K,
        now: Instant,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        if let Some((value, used)) = self.entries.get_mut(key) {
            *used = now;
            return Ok(value.clone());
        }
        let value = make()?;
        let idle = self.idle;
        self.entries
            .retain(|_, (_, used)| now.saturating_duration_since(*used) < idle);
        while self.entries.len() >= self.capacity {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            self.entries.remove(&oldest);
        }
        self.entries.insert(key.clone(), (value.clone(), now));
        Ok(value)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }
}

/// One unary call: where, what, and its bounds.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// `host:port` of the server.
    pub target: &'a str,
    /// Reach it over TLS.
    pub tls: bool,
    /// The method; its input and output types encode the request and decode the
    /// response.
    pub method: &'a MethodDescriptor,
    /// How long to wait for the answer.
    pub deadline: Duration,
    /// Request headers.
    pub metadata: &'a [(String, String)],
    /// The largest response accepted.
    pub max_response_bytes: usize,
}

/// Why a call did not produce a response.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// The target answered (or the transport failed) with this status.
    Status {
        /// The status code (UNAVAILABLE for connection failures).
        code: Code,
        /// The status message.
        message: String,
        /// Made on this side from a failed connection, not answered by the target.
        transport: bool,
    },
    /// The TLS handshake failed over certificates; retrying cannot help.
    Certificate(String),
    /// No answer within the deadline.
    Deadline(Duration),
    /// The outbound policy refused the connection (every address the target's name
    /// resolved to is forbidden); nothing was sent.
    Refused(String),
}

/// Why a channel was not ready.
enum Refusal {
    /// The outbound policy refused every address.
    Policy(String),
    /// The connection or its handshake failed (the error chain).
    NotReady(String),
}

/// The error [`PolicyConnector`] fails with when the policy refuses every address.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct OutboundRefused(String);

/// The policy's refusal somewhere in `error`'s chain (tonic and hyper wrap it).
fn refused_by_policy(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(refused) = error.downcast_ref::<OutboundRefused>() {
            return Some(refused.0.clone());
        }
        // An io::Error's `source` skips the error it wraps: look inside it too.
        if let Some(refused) = error
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<OutboundRefused>())
        {
            return Some(refused.0.clone());
        }
        next = error.source();
    }
    None
}

/// Connects a channel the way the outbound policy allows: resolves the target's name
/// here (not in the HTTP stack), drops every address the policy forbids, and connects
/// to the first allowed one that answers. A name that resolves only into forbidden
/// ranges fails with [`OutboundRefused`], before any connection is attempted.
///
/// It connects only to the host and port of the target the policy checked: a URI
/// whose host the HTTP stack reads differently (a zone id holding `@` read as
/// userinfo and a host after it) is refused, never followed.
#[derive(Clone)]
struct PolicyConnector {
    policy: Arc<OutboundPolicy>,
    /// The step's target, `host:port`, as the policy checked it.
    target: String,
}

impl tower::Service<http::Uri> for PolicyConnector {
    type Response = hyper_util::rt::TokioIo<tokio::net::TcpStream>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let policy = self.policy.clone();
        let target = self.target.clone();
        Box::pin(async move {
            let invalid =
                |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
            let host = uri
                .host()
                .ok_or_else(|| invalid(format!("'{uri}' names no host")))?
                .to_owned();
            let port = uri
                .port_u16()
                .unwrap_or(if uri.scheme_str() == Some("https") {
                    443
                } else {
                    80
                });
            // The host and port the policy checked, as written (case aside; a port
            // by its number, so `050051` is 50051).
            let checked = target
                .rsplit_once(':')
                .and_then(|(checked_host, checked_port)| {
                    Some((checked_host, checked_port.parse::<u16>().ok()?))
                });
            let same = checked.is_some_and(|(checked_host, checked_port)| {
                checked_host.eq_ignore_ascii_case(&host) && checked_port == port
            });
            if !same {
                return Err(std::io::Error::other(OutboundRefused(format!(
                    "the outbound policy refuses the connection: target '{target}' was read as '{host}:{port}' by the HTTP stack; no connection was made"
                ))));
            }
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            let addresses: Vec<std::net::SocketAddr> = match bare.parse::<std::net::IpAddr>() {
                Ok(ip) => vec![std::net::SocketAddr::new(ip, port)],
                Err(_) => {
                    // A zone is written `%25` in a URI; the resolver reads `%`, and
                    // gives the address its interface.
                    let resolvable = bare.replacen("%25", "%", 1);
                    tokio::net::lookup_host((resolvable.as_str(), port))
                        .await?
                        .collect()
                }
            };
            let (allowed, refused): (Vec<_>, Vec<_>) = addresses
                .into_iter()
                .partition(|address| policy.allows_connection(&host, address.ip(), port));
            if allowed.is_empty() {
                let refused: Vec<String> = refused.iter().map(|a| a.ip().to_string()).collect();
                return Err(std::io::Error::other(OutboundRefused(format!(
                    "the outbound policy refuses '{host}:{port}': it resolves to {} only, which workflow.outbound does not allow (a name may not resolve into workflow.outbound.deny_addresses unless workflow.outbound.allow lists the address); no connection was made",
                    if refused.is_empty() {
                        "nothing".to_owned()
                    } else {
                        refused.join(", ")
                    }
                ))));
            }
            let mut failure = None;
            for address in allowed {
                match tokio::net::TcpStream::connect(address).await {
                    Ok(stream) => {
                        stream.set_nodelay(true)?;
                        return Ok(hyper_util::rt::TokioIo::new(stream));
                    }
                    Err(e) => failure = Some(e),
                }
            }
            Err(failure
                .unwrap_or_else(|| invalid(format!("no address to connect to for '{host}'"))))
        })
    }
}

/// Encodes any message, decodes the method's output type.
#[derive(Clone)]
struct DynamicCodec {
    response: MessageDescriptor,
}

impl Codec for DynamicCodec {
    type Encode = DynamicMessage;
    type Decode = DynamicMessage;
    type Encoder = DynamicEncoder;
    type Decoder = DynamicDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        DynamicEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        DynamicDecoder {
            response: self.response.clone(),
        }
    }
}

struct DynamicEncoder;

impl Encoder for DynamicEncoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding the request: {e}")))
    }
}

struct DynamicDecoder {
    response: MessageDescriptor,
}

impl Decoder for DynamicDecoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Self::Error> {
        DynamicMessage::decode(self.response.clone(), src)
            .map(Some)
            .map_err(|e| {
                Status::internal(format!(
                    "the response is not a valid {}: {e}",
                    self.response.full_name()
                ))
            })
    }
}

/// How TLS steps reach the targets matching `pattern`: a CA bundle to trust instead
/// of the public roots, and a client certificate to present (mutual TLS).
#[derive(Clone, PartialEq, Eq)]
pub struct TlsTarget {
    /// `host:port` with `*` matching any run of characters (`*.internal:443`,
    /// `10.0.0.7:*`, `*`); the first matching entry applies.
    pub pattern: String,
    /// PEM certificates to trust for these targets (the public roots otherwise).
    pub ca_pem: Option<String>,
    /// PEM client certificate chain and its private key.
    pub identity: Option<(String, String)>,
}

impl std::fmt::Debug for TlsTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The private key never reaches a log line.
        f.debug_struct("TlsTarget")
            .field("pattern", &self.pattern)
            .field("ca", &self.ca_pem.is_some())
            .field("client_certificate", &self.identity.is_some())
            .finish()
    }
}

impl TlsTarget {
    /// True when `target` matches the pattern.
    pub fn matches(&self, target: &str) -> bool {
        glob_matches(self.pattern.as_bytes(), target.as_bytes())
    }
}

/// A gRPC client for any method of any target, with channels cached per target
/// (at most [`MAX_CHANNELS`], see the module docs).
pub struct GrpcClient {
    channels: Mutex<LruCache<(String, bool), Channel>>,
    tls: Vec<TlsTarget>,
    outbound: Arc<OutboundPolicy>,
}

impl Default for GrpcClient {
    fn default() -> Self {
        GrpcClient {
            channels: Mutex::new(LruCache::new(MAX_CHANNELS, CHANNEL_IDLE)),
            tls: Vec::new(),
            outbound: Arc::new(OutboundPolicy::unrestricted()),
        }
    }
}

impl GrpcClient {
    /// A client with an empty channel cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// A client whose TLS steps use `tls` for the targets each entry matches.
    pub fn with_tls(tls: Vec<TlsTarget>) -> Self {
        GrpcClient {
            tls,
            ..GrpcClient::default()
        }
    }

    /// Connects only where `policy` allows: each address a target's name resolves to
    /// is checked before it is connected to (see [`crate::outbound`]).
    pub fn with_outbound(mut self, policy: Arc<OutboundPolicy>) -> Self {
        self.outbound = policy;
        self
    }

    fn channel(&self, target: &str, tls: bool) -> Result<Channel, CallError> {
        let key = (target.to_owned(), tls);
        // A poisoned lock only means another call panicked mid-insert; the map is
        // still a valid cache.
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels.get_or_try_insert(&key, Instant::now(), || self.connect(target, tls))
    }

    /// A lazily connecting channel to `target`.
    fn connect(&self, target: &str, tls: bool) -> Result<Channel, CallError> {
        let unavailable = |e: String| CallError::Status {
            code: Code::Unavailable,
            message: e,
            transport: false,
        };
        let scheme = if tls { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{target}"))
            .map_err(|e| unavailable(format!("target '{target}' is not a host:port address: {e}")))?
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true);
        if tls {
            let mut config = ClientTlsConfig::new();
            match self.tls.iter().find(|entry| entry.matches(target)) {
                Some(entry) => {
                    config = match &entry.ca_pem {
                        Some(ca) => config.ca_certificate(Certificate::from_pem(ca)),
                        None => config.with_webpki_roots(),
                    };
                    if let Some((cert, key)) = &entry.identity {
                        config = config.identity(Identity::from_pem(cert, key));
                    }
                }
                None => config = config.with_webpki_roots(),
            }
            endpoint = endpoint
                .tls_config(config)
                .map_err(|e| unavailable(format!("TLS set-up for '{target}': {e}")))?;
        }
        if self.outbound.is_unrestricted() {
            return Ok(endpoint.connect_lazy());
        }
        Ok(endpoint.connect_with_connector_lazy(PolicyConnector {
            policy: self.outbound.clone(),
            target: target.to_owned(),
        }))
    }

    /// Makes `call` with `request`.
    pub async fn call(
        &self,
        call: &Call<'_>,
        request: DynamicMessage,
    ) -> Result<DynamicMessage, CallError> {
        let Call {
            target,
            tls,
            method,
            deadline,
            metadata,
            max_response_bytes,
        } = *call;
        let channel = self.channel(target, tls)?;
        let path = PathAndQuery::try_from(format!(
            "/{}/{}",
            method.parent_service().full_name(),
            method.name()
        ))
        .map_err(|e| CallError::Status {
            code: Code::Internal,
            message: format!("method path: {e}"),
            transport: false,
        })?;
        let mut request = tonic::Request::new(request);
        // The server learns the deadline (grpc-timeout) with a small grace, so that the
        // engine's own timer below always decides first and a late answer is reported
        // as a deadline, never as tonic's local "Timeout expired" cancellation.
        request.set_timeout(deadline + DEADLINE_GRACE);
        for (key, value) in metadata {
            let key = MetadataKey::from_bytes(key.as_bytes());
            let value = MetadataValue::try_from(value.as_str());
            if let (Ok(key), Ok(value)) = (key, value) {
                request.metadata_mut().insert(key, value);
            }
        }
        let codec = DynamicCodec {
            response: method.output(),
        };
        let call = async move {
            let mut grpc =
                tonic::client::Grpc::new(channel).max_decoding_message_size(max_response_bytes);
            // Not ready: the connection (or its TLS handshake) failed; no server spoke.
            grpc.ready().await.map_err(|e| {
                Err(match refused_by_policy(&e) {
                    Some(refused) => Refusal::Policy(refused),
                    None => Refusal::NotReady(error_chain(&e)),
                })
            })?;
            grpc.unary(request, path, codec).await.map_err(Ok)
        };
        // Only what this side made from a failed connection can be a certificate
        // failure: a status the target sent is its own answer, whatever its text says.
        let certificate = |chain: &str| tls && is_certificate_failure(chain);
        match tokio::time::timeout(deadline, call).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(Err(Refusal::Policy(refused)))) => Err(CallError::Refused(refused)),
            Ok(Err(Err(Refusal::NotReady(not_ready)))) if certificate(&not_ready) => {
                Err(CallError::Certificate(not_ready))
            }
            Ok(Err(Err(Refusal::NotReady(not_ready)))) => Err(CallError::Status {
                code: Code::Unavailable,
                message: format!("target not ready: {not_ready}"),
                transport: true,
            }),
            // A status the target sent has no source; one tonic made from a failed
            // connection (reset, closed mid-call) carries the transport error.
            Ok(Err(Ok(status))) => {
                if let Some(refused) = refused_by_policy(&status) {
                    return Err(CallError::Refused(refused));
                }
                let transport = std::error::Error::source(&status).is_some();
                if transport && certificate(&error_chain(&status)) {
                    return Err(CallError::Certificate(error_chain(&status)));
                }
                Err(CallError::Status {
                    code: status.code(),
                    message: status.message().to_owned(),
                    transport,
                })
            }
            Err(_) => Err(CallError::Deadline(deadline)),
        }
    }
}

/// An error and every error under it, `: `-joined (tonic's own text is often just
/// "transport error"; the reason is further down).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let said = cause.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        next = cause.source();
    }
    text
}

/// A TLS handshake that failed over certificates (an unknown issuer, a name or date
/// mismatch, a client certificate refused or missing): configuration, not weather.
fn is_certificate_failure(chain: &str) -> bool {
    let lower = chain.to_ascii_lowercase();
    lower.contains("certificate") || lower.contains("unknownca")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_channel_cache_stays_bounded_and_keeps_the_recently_used() {
        let start = Instant::now();
        let mut cache = LruCache::new(8, CHANNEL_IDLE);
        let tick = |n: u64| start + Duration::from_millis(n);
        let insert = |cache: &mut LruCache<String, u64>, key: &str, at: u64| {
            cache
                .get_or_try_insert(&key.to_owned(), tick(at), || Ok::<_, ()>(at))
                .unwrap()
        };
        insert(&mut cache, "kept", 0);
        for i in 1..1_000u64 {
            insert(&mut cache, &format!("target-{i}"), i);
            // Using "kept" on every round makes it the most recently used.
            assert_eq!(
                insert(&mut cache, "kept", i),
                0,
                "a hit returns the cached value"
            );
            assert!(cache.len() <= 8);
        }
        assert_eq!(cache.len(), 8);
        assert!(cache.contains(&"kept".to_owned()));
        assert!(cache.contains(&"target-999".to_owned()));
        assert!(
            !cache.contains(&"target-1".to_owned()),
            "the least recent went first"
        );
    }

    #[test]
    fn idle_channels_are_dropped_at_the_next_miss() {
        let start = Instant::now();
        let mut cache = LruCache::new(8, Duration::from_secs(600));
        let mut insert = |key: &str, at: Duration| {
            cache
                .get_or_try_insert(&key.to_owned(), start + at, || Ok::<_, ()>(()))
                .unwrap();
        };
        insert("old", Duration::ZERO);
        insert("busy", Duration::from_secs(300));
        insert("new", Duration::from_secs(601));
        assert!(!cache.contains(&"old".to_owned()), "idle for 601 s");
        assert!(cache.contains(&"busy".to_owned()));
        assert_eq!(cache.len(), 2);
    }

    /// A zone id holding `@` and a number made `http::Uri` read a userinfo and another
    /// host, which the connector then resolved and connected to: an allow-list
    /// bypass. The connector now connects only to the host the policy checked.
    #[tokio::test]
    async fn the_connector_never_follows_a_host_the_policy_did_not_check() {
        use tower::Service as _;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while listener.accept().await.is_ok() {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        // Nothing denied: before, the connector's only check (deny_addresses) let
        // the smuggled address through.
        let policy = crate::outbound::OutboundRules {
            allow: vec!["[fd00::/8]:*".into()],
            deny_addresses: Vec::new(),
            require_tls: false,
            ..Default::default()
        }
        .compile()
        .unwrap();
        // 2130706433 is 127.0.0.1 written as one number.
        let target = format!("[fd00::1%25@2130706433]:{port}");
        let mut connector = PolicyConnector {
            policy: Arc::new(policy),
            target: target.clone(),
        };
        let uri: http::Uri = format!("http://{target}").parse().unwrap();
        let connected = connector.call(uri).await;
        assert!(connected.is_err(), "{target} must not connect");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "no connection reached 127.0.0.1"
        );
    }

    #[tokio::test]
    async fn the_client_caps_its_channels() {
        let client = GrpcClient::new();
        for port in 0..(MAX_CHANNELS + 50) {
            client
                .channel(&format!("127.0.0.1:{}", 10_000 + port), false)
                .unwrap();
        }
        let channels = client.channels.lock().unwrap();
        assert_eq!(channels.len(), MAX_CHANNELS);
    }
}
