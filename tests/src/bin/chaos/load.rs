//! The load and the people around it: the workflows (written to the shared registry
//! directory), each job's plan drawn from the seed, the submitter (half over HTTP, half
//! over the request topic, each retried under its own id until accepted), and the
//! operator, who answers external steps, cancels some jobs, retries the DEAD ones and
//! re-runs some finished ones from a step.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobs_proto::v1::WorkflowRunRequest;
use prost::Message;
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use workflow::testkit::{review_step, step, workflow};

use crate::fixture::{Plan, Targets};
use crate::rng::Rng;

/// The workflow every job of a kind runs, and its steps in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// tokenize → embed.
    Two,
    /// tokenize → review (external) → embed.
    Review,
    /// tokenize → check (its response validated: at most 64 ids) → embed.
    Checked,
    /// tokenize → embed → retokenize → reembed.
    Four,
    /// A graph: tokenize; embed and retokenize both after it; reembed after both.
    Graph,
    /// tokenize, then `each`: a map step embedding every id on its own.
    Map,
    /// tokenize → nap (a durable sleep of [`NAP_MS`]) → embed.
    Sleep,
    /// tokenize → paid (waits for an event on `chaos-<text>`) → embed.
    Event,
    /// tokenize, then `each`: a child job of `chaos-child` per id, 4 alive at once.
    Child,
    /// tokenize → embed under flow control: at most [`LIMIT`] jobs RUNNING at once
    /// fleet-wide (one concurrency key), the embed step under a rate limit
    /// ([`RATE_PER_S`], burst [`BURST`]). Submitted in bursts, its targets slow.
    Limited,
}

/// The concurrency limit of the `Limited` jobs' key.
pub const LIMIT: usize = 2;

/// The rate limit of a `Limited` job's embed step: calls per second...
pub const RATE_PER_S: f64 = 2.0;

/// ...and how many a full bucket holds.
pub const BURST: usize = 2;

/// `Limited` jobs are submitted this many at once (well over [`LIMIT`], so the limit
/// is reached).
const LIMITED_TOGETHER: usize = 8;

/// The workflow a `Child` job starts per element: embeds its ids.
pub const CHILD_WORKFLOW: &str = "chaos-child";

/// How long a `Sleep` job naps.
pub const NAP_MS: i64 = 400;

impl Kind {
    /// The stored workflow's name.
    pub fn workflow_name(self) -> &'static str {
        match self {
            Kind::Two => "chaos-two",
            Kind::Review => "chaos-review",
            Kind::Checked => "chaos-checked",
            Kind::Four => "chaos-four",
            Kind::Graph => "chaos-graph",
            Kind::Map => "chaos-map",
            Kind::Sleep => "chaos-sleep",
            Kind::Event => "chaos-event",
            Kind::Child => "chaos-children",
            Kind::Limited => "chaos-limited",
        }
    }

    /// The steps of the workflow that call a target (a review, a sleep and an event
    /// are never called).
    pub fn called(self) -> Vec<&'static str> {
        self.steps()
            .iter()
            .copied()
            .filter(|s| !matches!(*s, "review" | "nap" | "paid"))
            .filter(|s| !(self == Kind::Child && *s == "each"))
            .collect()
    }

    /// The steps, in order.
    pub fn steps(self) -> &'static [&'static str] {
        match self {
            Kind::Two | Kind::Limited => &["tokenize", "embed"],
            Kind::Review => &["tokenize", "review", "embed"],
            Kind::Checked => &["tokenize", "check", "embed"],
            Kind::Four | Kind::Graph => &["tokenize", "embed", "retokenize", "reembed"],
            Kind::Map => &["tokenize", "each"],
            Kind::Sleep => &["tokenize", "nap", "embed"],
            Kind::Event => &["tokenize", "paid", "embed"],
            Kind::Child => &["tokenize", "each"],
        }
    }

    /// The key an `Event` job with input `text` waits on.
    pub fn event_key(text: &str) -> String {
        format!("chaos-{text}")
    }

    const ALL: [Kind; 10] = [
        Kind::Two,
        Kind::Review,
        Kind::Checked,
        Kind::Four,
        Kind::Graph,
        Kind::Map,
        Kind::Sleep,
        Kind::Event,
        Kind::Child,
        Kind::Limited,
    ];

    /// The workflow's envelope over the targets at `target`.
    fn envelope(self, target: &str) -> Value {
        let call = |name: &str, method: &str, rules: &[&str]| {
            let mut s = step(name, target, method, rules);
            // Short deadlines: a hung target costs a retry, not the lease.
            s["deadlineMs"] = json!(2_000);
            s
        };
        let tokenize =
            |name: &str| call(name, "jobs.test.Tokenizer/Tokenize", &["text = input.text"]);
        let embed = |name: &str, from: &str| {
            call(
                name,
                "jobs.test.Embedder/Embed",
                &[&format!("ids = {from}.ids")],
            )
        };
        let steps = match self {
            Kind::Two => vec![tokenize("tokenize"), embed("embed", "tokenize")],
            Kind::Limited => {
                let mut limited_embed = embed("embed", "tokenize");
                limited_embed["rateLimit"] =
                    json!({ "rate": format!("{RATE_PER_S}/s"), "burst": BURST });
                let mut limited = workflow(
                    self.workflow_name(),
                    vec![tokenize("tokenize"), limited_embed],
                    None,
                );
                limited["concurrency"] = json!([{ "key": "'all'", "limit": LIMIT }]);
                return limited;
            }
            Kind::Review => vec![
                tokenize("tokenize"),
                review_step(target),
                embed("embed", "tokenize"),
            ],
            Kind::Checked => {
                let mut check = tokenize("check");
                check["validate"] = json!(true);
                vec![tokenize("tokenize"), check, embed("embed", "tokenize")]
            }
            Kind::Four => vec![
                tokenize("tokenize"),
                embed("embed", "tokenize"),
                tokenize("retokenize"),
                embed("reembed", "retokenize"),
            ],
            Kind::Graph => {
                let after = |mut step: Value, names: &[&str]| {
                    step["after"] = json!(names);
                    step
                };
                vec![
                    tokenize("tokenize"),
                    after(embed("embed", "tokenize"), &["tokenize"]),
                    after(tokenize("retokenize"), &["tokenize"]),
                    after(embed("reembed", "retokenize"), &["embed", "retokenize"]),
                ]
            }
            Kind::Sleep => vec![
                tokenize("tokenize"),
                json!({ "name": "nap", "sleep": { "forMs": NAP_MS } }),
                embed("embed", "tokenize"),
            ],
            Kind::Event => vec![
                tokenize("tokenize"),
                json!({ "name": "paid", "completion": "event", "eventKey": "'chaos-' + input.text",
                        "outputType": "jobs.test.Review" }),
                embed("embed", "tokenize"),
            ],
            Kind::Child => {
                let each = json!({ "name": "each", "workflow": CHILD_WORKFLOW, "forEach": "tokenize.ids",
                                   "maxParallel": 4, "rules": ["ids += item"] });
                let mut parent =
                    workflow(self.workflow_name(), vec![tokenize("tokenize"), each], None);
                parent["output"] =
                    json!({ "type": "jobs.test.Vectors", "rules": ["vectors = each"] });
                return parent;
            }
            Kind::Map => {
                let mut each = call("each", "jobs.test.Embedder/Embed", &["ids += item"]);
                each["forEach"] = json!("tokenize.ids");
                each["maxParallel"] = json!(4);
                let mut map =
                    workflow(self.workflow_name(), vec![tokenize("tokenize"), each], None);
                map["output"] = json!({ "type": "jobs.test.Vectors", "rules": ["vectors = each"] });
                return map;
            }
        };
        workflow(self.workflow_name(), steps, None)
    }
}

/// Writes every workflow into the registry directory the nodes share (each loads it at
/// start-up).
pub fn write_workflows(dir: &Path, target: &str) {
    std::fs::create_dir_all(dir).expect("the workflows directory");
    for kind in Kind::ALL {
        let path = dir.join(format!("{}.json", kind.workflow_name()));
        std::fs::write(&path, kind.envelope(target).to_string()).expect("a workflow file");
    }
    // What a `Child` job starts: the nodes load it before its parent.
    let mut embed = step(
        "embed",
        target,
        "jobs.test.Embedder/Embed",
        &["ids = input.ids"],
    );
    embed["deadlineMs"] = json!(2_000);
    let mut child = workflow(CHILD_WORKFLOW, vec![embed], None);
    child["inputType"] = json!("jobs.test.Tokens");
    std::fs::write(
        dir.join(format!("{CHILD_WORKFLOW}.json")),
        child.to_string(),
    )
    .expect("a workflow file");
}

/// How a job is submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// `submit-workflow` on a node.
    Http,
    /// A `WorkflowRunRequest` on the request topic.
    Kafka,
}

/// One job of the run, as drawn from the seed.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Its id, minted here (so a retried submission is the same job).
    pub id: String,
    /// Its workflow.
    pub kind: Kind,
    /// Its input text; past 64 characters the `check` step's verdict fails it.
    pub text: String,
    /// How it is submitted.
    pub lane: Lane,
    /// How its targets misbehave.
    pub plan: Plan,
    /// When it is submitted, from the start of the load.
    pub submit_at: Duration,
    /// The operator cancels it this long after submitting.
    pub cancel_after: Option<Duration>,
    /// The operator answers its review this long after submitting (never, for some).
    pub answer_after: Option<Duration>,
    /// Once it completes, the operator re-runs it from this step.
    pub rerun_from: Option<&'static str>,
}

/// Draws `count` jobs submitted over `window`.
pub fn draw_jobs(rng: &mut Rng, count: usize, window: Duration) -> Vec<JobSpec> {
    // Each group of `Limited` jobs goes in when its first would.
    let (mut limited, mut group_at) = (0usize, Duration::ZERO);
    (0..count)
        .map(|i| {
            let kind = match rng.between(0, 99) {
                0..=13 => Kind::Two,
                14..=21 => Kind::Limited,
                22..=35 => Kind::Four,
                36..=53 => Kind::Review,
                54..=67 => Kind::Checked,
                68..=79 => Kind::Graph,
                80..=85 => Kind::Map,
                86..=89 => Kind::Child,
                90..=94 => Kind::Sleep,
                _ => Kind::Event,
            };
            let verdict = kind == Kind::Checked && rng.percent(50);
            let text = if verdict {
                format!("job {i} {}", "too long for the check step ".repeat(3))
            } else {
                format!("job {i}")
            };
            let steps = kind.called();
            let mut plan = Plan {
                // A limited job's calls are slow, so its limit is reached.
                slow: kind == Kind::Limited || rng.percent(10),
                ..Plan::default()
            };
            if rng.percent(25) {
                plan.failing_step =
                    Some(steps[rng.between(0, steps.len() as u64 - 1) as usize].to_owned());
                plan.fail_first = rng.between(1, 3) as u32;
            } else if rng.percent(5) {
                plan.failing_step = Some(steps[0].to_owned());
                plan.doomed = true;
            }
            let cancel_after = rng
                .percent(8)
                .then(|| Duration::from_millis(rng.between(0, 3_000)));
            // A review is answered once it can be; an event is sometimes sent before
            // its job parks (kept for it), sometimes never.
            let answer_after = match kind {
                Kind::Review => {
                    (!rng.percent(10)).then(|| Duration::from_millis(rng.between(300, 5_000)))
                }
                Kind::Event => {
                    (!rng.percent(10)).then(|| Duration::from_millis(rng.between(0, 5_000)))
                }
                _ => None,
            };
            let rerun_from = (matches!(kind, Kind::Two | Kind::Four)
                && !plan.doomed
                && cancel_after.is_none()
                && rng.percent(5))
            .then(|| *kind.steps().last().unwrap_or(&"tokenize"));
            JobSpec {
                id: uuid::Uuid::from_u64_pair(rng.next_u64(), rng.next_u64())
                    .hyphenated()
                    .to_string()
                    // A valid v4 shape: the request contract checks the id is a uuid.
                    .chars()
                    .enumerate()
                    .map(|(at, c)| match at {
                        14 => '4',
                        19 => '8',
                        _ => c,
                    })
                    .collect(),
                kind,
                text,
                lane: if rng.percent(50) {
                    Lane::Http
                } else {
                    Lane::Kafka
                },
                plan,
                submit_at: {
                    let at = window.mul_f64(i as f64 / count.max(1) as f64);
                    if kind == Kind::Limited {
                        if limited % LIMITED_TOGETHER == 0 {
                            group_at = at;
                        }
                        limited += 1;
                        group_at
                    } else {
                        at
                    }
                },
                cancel_after,
                answer_after,
                rerun_from,
            }
        })
        .collect()
}

/// What the submitter and the operator did, for the checks.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Jobs whose submission was accepted (200, or the broker's ack).
    pub accepted: BTreeSet<String>,
    /// Submissions never accepted (the run gives up after minutes).
    pub never_accepted: BTreeSet<String>,
    /// The answer of each cancel-job.
    pub cancels: BTreeMap<String, String>,
    /// Review answers sent and taken (COMPLETED or ALREADY_DONE), or no longer wanted
    /// (the job ended first).
    pub answered: BTreeSet<String>,
    /// `complete-step` answers other than those, by outcome.
    pub answer_refusals: BTreeMap<String, u64>,
    /// Operator retries of DEAD jobs, per job.
    pub retries: BTreeMap<String, u32>,
    /// Jobs re-run from a step.
    pub reruns: BTreeSet<String>,
    /// Jobs meant to be re-run that ended FAILED or CANCELLED instead.
    pub reruns_given_up: BTreeSet<String>,
}

/// Calls the nodes' actions route, trying each node in turn.
#[derive(Clone)]
pub struct Nodes {
    urls: Vec<String>,
    http: reqwest::Client,
}

impl Nodes {
    /// Over the nodes at `urls`.
    pub fn new(urls: Vec<String>) -> Nodes {
        Nodes {
            urls,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("an HTTP client"),
        }
    }

    /// `verb` on the node `turn` picks (or the next ones): the first 200 answer, or
    /// the last failure.
    pub async fn call(&self, turn: usize, verb: &str, body: &Value) -> Result<Value, String> {
        let mut last = String::new();
        for k in 0..self.urls.len() {
            let url = &self.urls[(turn + k) % self.urls.len()];
            let sent = self
                .http
                .post(format!("{url}/v1/actions/{verb}"))
                .json(body)
                .send()
                .await;
            match sent {
                Ok(answer) if answer.status().is_success() => {
                    return answer.json().await.map_err(|e| e.to_string());
                }
                Ok(answer) => {
                    last = format!(
                        "{verb} on {url}: {} {}",
                        answer.status(),
                        answer.text().await.unwrap_or_default()
                    );
                }
                Err(e) => last = format!("{verb} on {url}: {e}"),
            }
        }
        Err(last)
    }
}

/// How long a submission is retried before the run calls it never accepted.
const SUBMIT_PATIENCE: Duration = Duration::from_secs(300);

/// Submits every job at its time, each in its own task; ends when all are accepted
/// (or given up on).
pub async fn submit_all(
    jobs: Arc<Vec<JobSpec>>,
    targets: Arc<Targets>,
    nodes: Nodes,
    bootstrap: String,
    requests_topic: String,
    ledger: Arc<Mutex<Ledger>>,
) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("acks", "all")
        .set("message.timeout.ms", "10000")
        .create()
        .expect("a producer");
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, job) in jobs.iter().enumerate() {
        tokio::time::sleep_until((start + job.submit_at).into()).await;
        targets.plan(&job.id, job.plan.clone());
        let (job, nodes, producer, topic, ledger) = (
            job.clone(),
            nodes.clone(),
            producer.clone(),
            requests_topic.clone(),
            ledger.clone(),
        );
        tasks.spawn(async move {
            let deadline = Instant::now() + SUBMIT_PATIENCE;
            let mut turn = i;
            let accepted = loop {
                let sent = match job.lane {
                    Lane::Http => {
                        let body = json!({
                            "jobId": job.id,
                            "workflowName": job.kind.workflow_name(),
                            "input": { "text": job.text },
                        });
                        nodes.call(turn, "submit-workflow", &body).await.map(|_| ())
                    }
                    Lane::Kafka => {
                        let request = WorkflowRunRequest {
                            job_id: job.id.clone(),
                            workflow_name: job.kind.workflow_name().into(),
                            input: Some(text_input(&job.text)),
                            ..Default::default()
                        }
                        .encode_to_vec();
                        producer
                            .send(
                                FutureRecord::to(&topic).key(&job.id).payload(&request),
                                Duration::from_secs(15),
                            )
                            .await
                            .map(|_| ())
                            .map_err(|(e, _)| e.to_string())
                    }
                };
                if sent.is_ok() {
                    break true;
                }
                if Instant::now() > deadline {
                    break false;
                }
                turn += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            };
            let mut ledger = ledger.lock().expect("ledger");
            if accepted {
                ledger.accepted.insert(job.id);
            } else {
                ledger.never_accepted.insert(job.id);
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// `{"text": text}` as a protobuf `Struct`.
fn text_input(text: &str) -> prost_types::Struct {
    prost_types::Struct {
        fields: [(
            "text".to_owned(),
            prost_types::Value {
                kind: Some(prost_types::value::Kind::StringValue(text.into())),
            },
        )]
        .into(),
    }
}

/// The statuses after which no answer is wanted.
fn ended(status: &str) -> bool {
    matches!(status, "COMPLETED" | "FAILED" | "CANCELLED")
}

/// At most this many operator retries of a job that keeps going DEAD.
pub const MAX_OPERATOR_RETRIES: u32 = 3;

/// The operator, until `stop`: every tick, the cancels, answers and re-runs that are
/// due, and every few ticks a look for DEAD jobs to retry. Returns when stopped.
pub async fn operate(
    jobs: Arc<Vec<JobSpec>>,
    targets: Arc<Targets>,
    nodes: Nodes,
    ledger: Arc<Mutex<Ledger>>,
    start: Instant,
    stop: CancellationToken,
) {
    let by_id: BTreeMap<&str, &JobSpec> = jobs.iter().map(|j| (j.id.as_str(), j)).collect();
    let mut tick = 0usize;
    while !stop.is_cancelled() {
        tick += 1;
        let now = start.elapsed();
        for (i, job) in jobs.iter().enumerate() {
            let due = |after: Option<Duration>| after.is_some_and(|a| now >= job.submit_at + a);
            let (accepted, cancelled, answered, rerun) = {
                let ledger = ledger.lock().expect("ledger");
                (
                    ledger.accepted.contains(&job.id),
                    ledger.cancels.contains_key(&job.id),
                    ledger.answered.contains(&job.id),
                    ledger.reruns.contains(&job.id),
                )
            };
            if !accepted {
                continue;
            }
            if due(job.cancel_after) && !cancelled {
                let body =
                    json!({ "jobId": job.id, "reason": "chaos: the operator changed their mind" });
                if let Ok(answer) = nodes.call(i + tick, "cancel-job", &body).await {
                    let outcome = answer["outcome"].as_str().unwrap_or("?").to_owned();
                    ledger
                        .lock()
                        .expect("ledger")
                        .cancels
                        .insert(job.id.clone(), outcome);
                }
            }
            if due(job.answer_after) && !answered && job.kind == Kind::Event {
                // Idempotent by its id: sent again until a node answers it.
                let body = json!({
                    "key": Kind::event_key(&job.text),
                    "eventId": format!("chaos-{}", job.id),
                    "payload": { "notes": "paid", "score": 1 },
                });
                if nodes.call(i + tick, "send-event", &body).await.is_ok() {
                    ledger
                        .lock()
                        .expect("ledger")
                        .answered
                        .insert(job.id.clone());
                }
            } else if due(job.answer_after) && !answered {
                let body = json!({
                    "jobId": job.id,
                    "stepName": "review",
                    "response": { "notes": "looks right", "score": 7 },
                });
                if let Ok(answer) = nodes.call(i + tick, "complete-step", &body).await {
                    let outcome = answer["outcome"].as_str().unwrap_or("?");
                    let status = answer["status"].as_str().unwrap_or("?");
                    let mut ledger = ledger.lock().expect("ledger");
                    let given_up = status == "DEAD"
                        && ledger.retries.get(&job.id).copied().unwrap_or(0)
                            >= MAX_OPERATOR_RETRIES;
                    if matches!(outcome, "COMPLETED" | "ALREADY_DONE") || ended(status) || given_up
                    {
                        ledger.answered.insert(job.id.clone());
                    } else if outcome != "WRONG_STATE" {
                        *ledger
                            .answer_refusals
                            .entry(outcome.to_owned())
                            .or_default() += 1;
                    }
                }
            }
            if let Some(from) = job.rerun_from
                && !rerun
            {
                // Only a COMPLETED job is re-run: the path `fromStep` alone opens.
                let status = nodes
                    .call(i + tick, "get-job", &json!({ "jobId": job.id }))
                    .await
                    .map(|answer| answer["job"]["status"].as_str().unwrap_or("?").to_owned());
                match status.as_deref() {
                    Ok("COMPLETED") => {
                        let body = json!({ "jobId": job.id, "fromStep": from, "reason": "chaos: re-run the last step" });
                        if let Ok(answer) = nodes.call(i + tick, "retry-job", &body).await
                            && answer["outcome"] == "RETRIED"
                        {
                            ledger.lock().expect("ledger").reruns.insert(job.id.clone());
                        }
                    }
                    Ok("DEAD")
                        if ledger
                            .lock()
                            .expect("ledger")
                            .retries
                            .get(&job.id)
                            .copied()
                            .unwrap_or(0)
                            >= MAX_OPERATOR_RETRIES =>
                    {
                        ledger
                            .lock()
                            .expect("ledger")
                            .reruns_given_up
                            .insert(job.id.clone());
                    }
                    Ok("FAILED" | "CANCELLED") => {
                        ledger
                            .lock()
                            .expect("ledger")
                            .reruns_given_up
                            .insert(job.id.clone());
                    }
                    _ => {}
                }
            }
        }
        if tick.is_multiple_of(4) {
            retry_dead(&by_id, &targets, &nodes, &ledger, tick).await;
        }
        tokio::select! {
            () = stop.cancelled() => {}
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

/// Retries the DEAD jobs (a doomed job's target is forgiven first), each at most
/// [`MAX_OPERATOR_RETRIES`] times.
async fn retry_dead(
    by_id: &BTreeMap<&str, &JobSpec>,
    targets: &Targets,
    nodes: &Nodes,
    ledger: &Mutex<Ledger>,
    tick: usize,
) {
    let Ok(answer) = nodes
        .call(
            tick,
            "list-jobs",
            &json!({ "status": "DEAD", "limit": 1000 }),
        )
        .await
    else {
        return;
    };
    let dead: Vec<String> = answer["jobs"]
        .as_array()
        .map(|jobs| {
            jobs.iter()
                .filter_map(|j| j["jobId"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    for id in dead {
        let retried = ledger
            .lock()
            .expect("ledger")
            .retries
            .get(&id)
            .copied()
            .unwrap_or(0);
        if retried >= MAX_OPERATOR_RETRIES || !by_id.contains_key(id.as_str()) {
            continue;
        }
        targets.forgive(&id);
        let body = json!({ "jobId": id, "reason": "chaos: the operator retries a DEAD job" });
        if let Ok(answer) = nodes.call(tick, "retry-job", &body).await
            && answer["outcome"] == "RETRIED"
        {
            *ledger
                .lock()
                .expect("ledger")
                .retries
                .entry(id)
                .or_default() += 1;
        }
    }
}

/// Whether the operator still has something to do: a submission, a cancel, an answer
/// or a re-run outstanding. (DEAD jobs it would retry show in the database.)
pub fn operator_busy(jobs: &[JobSpec], ledger: &Ledger) -> bool {
    jobs.iter().any(|job| {
        if ledger.never_accepted.contains(&job.id) {
            return false;
        }
        !ledger.accepted.contains(&job.id)
            || (job.cancel_after.is_some() && !ledger.cancels.contains_key(&job.id))
            || (job.answer_after.is_some() && !ledger.answered.contains(&job.id))
            || (job.rerun_from.is_some()
                && !ledger.reruns.contains(&job.id)
                && !ledger.reruns_given_up.contains(&job.id))
    })
}
