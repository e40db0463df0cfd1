//! The targets every step calls: the fixture Tokenizer and Embedder, served in this
//! process (so they outlive every node fault), counting each call by job and step with
//! its outcome and time, and misbehaving as each job's [`Plan`] says: failing
//! retryably for its first calls, failing until an operator retries the job, answering
//! slowly, or, while the fault driver holds a hang, not answering at all.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};
use workflow::testkit::proto::embedder_server::{Embedder, EmbedderServer};
use workflow::testkit::proto::tokenizer_server::{Tokenizer, TokenizerServer};
use workflow::testkit::proto::{Text, Tokens, Vector};

/// How one job's targets misbehave.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The step that fails, if any.
    pub failing_step: Option<String>,
    /// Its first this many calls answer UNAVAILABLE.
    pub fail_first: u32,
    /// It answers UNAVAILABLE on every call until the operator retries the job (the
    /// job goes DEAD first).
    pub doomed: bool,
    /// Calls take 100 to 800 ms instead of up to 20.
    pub slow: bool,
}

/// How a call ended, as the target saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered with a response: the side effect happened.
    Answered,
    /// Refused as the plan said (UNAVAILABLE).
    Refused,
    /// Held by a hang fault, then refused.
    Hung,
    /// The caller went away before the answer (a killed node, a deadline, a cancel).
    Abandoned,
}

/// One call.
#[derive(Debug, Clone)]
pub struct Call {
    /// `x-protomolt-job-id`.
    pub job: String,
    /// `x-protomolt-step`, followed by `#<index>` for an element of a map step
    /// (`x-protomolt-item`).
    pub step: String,
    /// When it arrived and ended, in ms since the epoch.
    pub started_ms: i64,
    /// See `started_ms`.
    pub ended_ms: i64,
    /// How it ended.
    pub outcome: Outcome,
}

/// Milliseconds since the epoch (the clock the events' `occurredAt` use too).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What the targets share with the run.
#[derive(Default)]
pub struct Targets {
    plans: Mutex<HashMap<String, Plan>>,
    calls: Mutex<Vec<Call>>,
    counts: Mutex<HashMap<(String, String), u32>>,
    hang_until_ms: Mutex<i64>,
}

impl Targets {
    /// Sets `job`'s plan (before it is submitted).
    pub fn plan(&self, job: &str, plan: Plan) {
        self.plans
            .lock()
            .expect("plans")
            .insert(job.to_owned(), plan);
    }

    /// Lets a doomed job's step answer from now on (the operator fixed the target).
    pub fn forgive(&self, job: &str) {
        if let Some(plan) = self.plans.lock().expect("plans").get_mut(job) {
            plan.doomed = false;
        }
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("calls").clone()
    }

    /// Every call arriving before `until_ms` hangs until then.
    pub fn hang_until(&self, until_ms: i64) {
        *self.hang_until_ms.lock().expect("hang") = until_ms;
    }

    /// Decides a call of `job`'s `step`: `Ok(latency)` to answer after it, or the
    /// outcome and status to refuse with (after the delay held in `Hung`).
    fn decide(&self, job: &str, step: &str) -> Result<Duration, (Outcome, Duration)> {
        let hang = *self.hang_until_ms.lock().expect("hang") - now_ms();
        if hang > 0 {
            return Err((Outcome::Hung, Duration::from_millis(hang as u64)));
        }
        let n = {
            let mut counts = self.counts.lock().expect("counts");
            let n = counts.entry((job.to_owned(), step.to_owned())).or_default();
            *n += 1;
            *n
        };
        let plan = self
            .plans
            .lock()
            .expect("plans")
            .get(job)
            .cloned()
            .unwrap_or_default();
        if plan.failing_step.as_deref() == Some(step) && (plan.doomed || n <= plan.fail_first) {
            return Err((Outcome::Refused, Duration::ZERO));
        }
        // A latency from the call's own identity: no shared generator to lock.
        let spread = job.bytes().chain(step.bytes()).fold(u64::from(n), |h, b| {
            h.wrapping_mul(31).wrapping_add(u64::from(b))
        });
        Ok(Duration::from_millis(if plan.slow {
            100 + spread % 700
        } else {
            spread % 20
        }))
    }

    /// Runs one call: records it, misbehaves per plan, then `answer`s.
    async fn serve<Q, A>(
        &self,
        request: Request<Q>,
        answer: impl FnOnce(Q) -> A,
    ) -> Result<Response<A>, Status> {
        let header = |name: &str| {
            request
                .metadata()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let mut record = Recorder {
            targets: self,
            call: Some(Call {
                job: header("x-protomolt-job-id"),
                step: match header("x-protomolt-item").as_str() {
                    "" => header("x-protomolt-step"),
                    item => format!("{}#{item}", header("x-protomolt-step")),
                },
                started_ms: now_ms(),
                ended_ms: 0,
                outcome: Outcome::Abandoned,
            }),
        };
        // A map step's elements share the step's plan (and its count of calls).
        let (job, step) = record
            .call
            .as_ref()
            .map(|c| (c.job.clone(), header("x-protomolt-step")))
            .unwrap_or_default();
        match self.decide(&job, &step) {
            Ok(latency) => {
                tokio::time::sleep(latency).await;
                let response = answer(request.into_inner());
                record.end(Outcome::Answered);
                Ok(Response::new(response))
            }
            Err((outcome, hold)) => {
                tokio::time::sleep(hold).await;
                record.end(outcome);
                Err(Status::unavailable(format!("chaos: {outcome:?}")))
            }
        }
    }
}

/// Records its call when dropped: as ended, or as abandoned when the caller went away
/// first (the handler's future is dropped).
struct Recorder<'a> {
    targets: &'a Targets,
    call: Option<Call>,
}

impl Recorder<'_> {
    fn end(&mut self, outcome: Outcome) {
        if let Some(call) = self.call.as_mut() {
            call.outcome = outcome;
        }
    }
}

impl Drop for Recorder<'_> {
    fn drop(&mut self) {
        if let Some(mut call) = self.call.take() {
            call.ended_ms = now_ms();
            if let Ok(mut calls) = self.targets.calls.lock() {
                calls.push(call);
            }
        }
    }
}

#[derive(Clone)]
struct Service(Arc<Targets>);

#[tonic::async_trait]
impl Tokenizer for Service {
    async fn tokenize(&self, request: Request<Text>) -> Result<Response<Tokens>, Status> {
        self.0
            .serve(request, |text| Tokens {
                ids: text.text.chars().map(|c| i64::from(u32::from(c))).collect(),
                fail: false,
            })
            .await
    }
}

#[tonic::async_trait]
impl Embedder for Service {
    async fn embed(&self, request: Request<Tokens>) -> Result<Response<Vector>, Status> {
        self.0
            .serve(request, |tokens| Vector {
                values: vec![tokens.ids.len() as f64 / 10.0, 1.0],
            })
            .await
    }
}

/// Serves the targets on a loopback port for the rest of the process.
pub async fn serve(targets: Arc<Targets>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    let service = Service(targets);
    tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .add_service(TokenizerServer::new(service.clone()))
            .add_service(EmbedderServer::new(service))
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await;
        if let Err(e) = served {
            eprintln!("chaos: the targets on {addr} stopped: {e}");
        }
    });
    addr
}
