//! Real gRPC servers for the fixture services, on `127.0.0.1:0`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

use super::proto::embedder_server::{Embedder, EmbedderServer};
use super::proto::tokenizer_server::{Tokenizer, TokenizerServer};
use super::proto::{Text, Tokens, Vector};

/// How the fixture servers behave.
#[derive(Debug, Clone, Default)]
pub struct FixtureOptions {
    /// Embed sleeps this long before answering (deadline and lease tests).
    pub embed_delay: Option<Duration>,
    /// Tokenize sleeps this long before answering.
    pub tokenize_delay: Option<Duration>,
    /// While set, Embed answers UNAVAILABLE (a target that is down, then recovers).
    pub embed_unavailable: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// A counter the test bumps (for example once per recorded checkpoint); Embed
    /// records its value at the moment it is called.
    pub probe: Option<Arc<AtomicUsize>>,
    /// Embed answers the ids it was sent as its values (so each element of a map
    /// step answers something of its own) instead of `[len / 10, 1.0]`.
    pub embed_echo_ids: bool,
    /// Embed answers INVALID_ARGUMENT (a failure no retry fixes) when the ids hold
    /// this one.
    pub embed_rejects_id: Option<i64>,
}

/// One call as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCall {
    /// `Tokenize` or `Embed`.
    pub method: &'static str,
    /// The `x-protomolt-*`, `idempotency-key` and `traceparent` headers, sorted by name.
    pub metadata: Vec<(String, String)>,
}

/// What the servers counted.
#[derive(Debug, Default)]
pub struct FixtureStats {
    tokenize_calls: AtomicUsize,
    embed_calls: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    probe_at_embed: Mutex<Vec<usize>>,
    calls: Mutex<Vec<RecordedCall>>,
    last_call_at: Mutex<Option<std::time::Instant>>,
    /// Tokenize calls by their text: in flight now, and the most at once.
    by_text: Mutex<std::collections::HashMap<String, (usize, usize)>>,
    /// When each Tokenize call arrived, by text.
    tokenize_arrivals: Mutex<Vec<(String, std::time::Instant)>>,
}

impl FixtureStats {
    pub fn tokenize_calls(&self) -> usize {
        self.tokenize_calls.load(Ordering::SeqCst)
    }

    pub fn embed_calls(&self) -> usize {
        self.embed_calls.load(Ordering::SeqCst)
    }

    /// The most calls (of either method) that were in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    /// The probe's value at each Embed call.
    pub fn probe_at_embed(&self) -> Vec<usize> {
        self.probe_at_embed.lock().unwrap().clone()
    }

    /// Every call, in arrival order.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.calls.lock().unwrap().clone()
    }

    /// Per Tokenize text (a concurrency key in the flow tests): the most calls with
    /// that text that were in flight at once.
    pub fn max_in_flight_by_text(&self) -> std::collections::HashMap<String, usize> {
        self.by_text
            .lock()
            .unwrap()
            .iter()
            .map(|(text, (_, max))| (text.clone(), *max))
            .collect()
    }

    /// Every Tokenize call's text and arrival, in arrival order.
    pub fn tokenize_arrivals(&self) -> Vec<(String, std::time::Instant)> {
        self.tokenize_arrivals.lock().unwrap().clone()
    }

    /// When the latest call (of either method) arrived (the bench's pickup clock).
    pub fn last_call_at(&self) -> Option<std::time::Instant> {
        *self.last_call_at.lock().unwrap()
    }

    fn enter<T>(&self, method: &'static str, request: &Request<T>) -> InFlight<'_> {
        *self.last_call_at.lock().unwrap() = Some(std::time::Instant::now());
        let mut metadata: Vec<(String, String)> = request
            .metadata()
            .iter()
            .filter_map(|entry| match entry {
                tonic::metadata::KeyAndValueRef::Ascii(key, value) => {
                    let key = key.as_str();
                    (key.starts_with("x-protomolt-")
                        || key == "idempotency-key"
                        || key == "traceparent")
                        .then(|| {
                            (
                                key.to_owned(),
                                value.to_str().unwrap_or_default().to_owned(),
                            )
                        })
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        metadata.sort();
        self.calls
            .lock()
            .unwrap()
            .push(RecordedCall { method, metadata });
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(self)
    }
}

struct InFlight<'a>(&'a FixtureStats);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One Tokenize call in flight, counted under its text.
struct TextInFlight<'a>(&'a FixtureStats, String);

impl<'a> TextInFlight<'a> {
    fn enter(stats: &'a FixtureStats, text: &str) -> TextInFlight<'a> {
        let now = std::time::Instant::now();
        stats
            .tokenize_arrivals
            .lock()
            .unwrap()
            .push((text.to_owned(), now));
        let mut by_text = stats.by_text.lock().unwrap();
        let entry = by_text.entry(text.to_owned()).or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(entry.0);
        TextInFlight(stats, text.to_owned())
    }
}

impl Drop for TextInFlight<'_> {
    fn drop(&mut self) {
        if let Some(entry) = self.0.by_text.lock().unwrap().get_mut(&self.1) {
            entry.0 -= 1;
        }
    }
}

#[derive(Clone)]
struct Fixtures {
    options: FixtureOptions,
    stats: Arc<FixtureStats>,
}

#[tonic::async_trait]
impl Tokenizer for Fixtures {
    async fn tokenize(&self, request: Request<Text>) -> Result<Response<Tokens>, Status> {
        let _in_flight = self.stats.enter("Tokenize", &request);
        self.stats.tokenize_calls.fetch_add(1, Ordering::SeqCst);
        let _by_text = TextInFlight::enter(&self.stats, &request.get_ref().text);
        if let Some(delay) = self.options.tokenize_delay {
            tokio::time::sleep(delay).await;
        }
        let text = request.into_inner();
        Ok(Response::new(Tokens {
            ids: text.text.chars().map(|c| i64::from(u32::from(c))).collect(),
            fail: text.fail,
        }))
    }
}

#[tonic::async_trait]
impl Embedder for Fixtures {
    async fn embed(&self, request: Request<Tokens>) -> Result<Response<Vector>, Status> {
        let _in_flight = self.stats.enter("Embed", &request);
        self.stats.embed_calls.fetch_add(1, Ordering::SeqCst);
        if let Some(probe) = &self.options.probe {
            self.stats
                .probe_at_embed
                .lock()
                .unwrap()
                .push(probe.load(Ordering::SeqCst));
        }
        if let Some(delay) = self.options.embed_delay {
            tokio::time::sleep(delay).await;
        }
        let down = self
            .options
            .embed_unavailable
            .as_ref()
            .is_some_and(|down| down.load(Ordering::SeqCst));
        let tokens = request.into_inner();
        if tokens.fail || down {
            return Err(Status::unavailable("model loading"));
        }
        if let Some(rejected) = self.options.embed_rejects_id
            && tokens.ids.contains(&rejected)
        {
            return Err(Status::invalid_argument(format!(
                "id {rejected} is refused"
            )));
        }
        if self.options.embed_echo_ids {
            return Ok(Response::new(Vector {
                values: tokens.ids.iter().map(|id| *id as f64).collect(),
            }));
        }
        Ok(Response::new(Vector {
            values: vec![tokens.ids.len() as f64 / 10.0, 1.0],
        }))
    }
}

/// Tokenizer and Embedder served on a loopback port until dropped.
pub struct FixtureServer {
    pub addr: SocketAddr,
    pub stats: Arc<FixtureStats>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl FixtureServer {
    /// Serves with default options.
    pub async fn start() -> FixtureServer {
        Self::start_with(FixtureOptions::default()).await
    }

    /// Serves with `options`.
    pub async fn start_with(options: FixtureOptions) -> FixtureServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let stats = Arc::new(FixtureStats::default());
        let fixtures = Fixtures {
            options,
            stats: stats.clone(),
        };
        let (shutdown, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(TokenizerServer::new(fixtures.clone()))
                .add_service(EmbedderServer::new(fixtures))
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = served {
                eprintln!("fixture server on {addr} stopped: {e}");
            }
        });
        FixtureServer {
            addr,
            stats,
            shutdown: Some(shutdown),
        }
    }

    /// `host:port` for envelopes.
    pub fn target(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for FixtureServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}
