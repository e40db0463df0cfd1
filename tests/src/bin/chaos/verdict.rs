//! The checks after the drain, beyond the database's own ([`invariants::check`]): the
//! WAITING jobs are the unanswered ones, every submission has its one row, an accepted
//! cancel ends CANCELLED, a step re-ran only under a fault and never after its
//! checkpoint but by `fromStep`, every event reached the topic in its job's order, and
//! no node logged a constraint error or panicked.
//!
//! [`invariants::check`]: protomolt_e2e::invariants::check

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jobs_proto::v1::WorkflowRunEvent;
use jobs_proto::v1::workflow_run_event::Type;
use prost::Message as _;
use protomolt_e2e::invariants::Breach;
use rdkafka::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message as _;
use tokio_postgres::Client;

use crate::faults::{Fault, Injected};
use crate::fixture::{Call, Outcome};
use crate::flow::{self, Ticks};
use crate::items::{self, MapEvidence};
use crate::load::{JobSpec, Kind, Lane, Ledger, NAP_MS};

/// WAITING jobs are the ones whose review the operator never answers, and a review
/// job completes only after its answer.
pub const WAITING: &str = "WAITING only on an unanswered step";
/// Every submission accepted has exactly one row and one ACCEPTED event.
pub const SUBMISSIONS: &str = "every submission has its row, once";
/// A cancel answered CANCELLED or CANCEL_REQUESTED ends CANCELLED.
pub const CANCELS: &str = "an accepted cancel ends CANCELLED";
/// A step's side effect ran more than once only when faults hit it in flight.
pub const SIDE_EFFECTS: &str = "a step re-ran only under a fault";
/// A checkpointed step is never called again, but after a `fromStep` re-run.
pub const AFTER_CHECKPOINT: &str = "no call after a checkpoint but by fromStep";
/// The topic holds every outbox row, each job's in commit order, ACCEPTED first and a
/// terminal event last.
pub const TOPIC: &str = "every event on the topic, in order";
/// A parent's step started one child per element, never two.
pub const CHILDREN: &str = "one child per slot";
/// A job that slept took its next step no earlier than its sleep's end.
pub const SLEEPS: &str = "no job woken before its sleep ends";
/// No node logged a constraint violation or a panic.
pub const LOGS: &str = "no constraint error, no panic";

/// The fleet drained after the last fault: nothing left QUEUED, RUNNING or PENDING,
/// nothing the operator still had to do.
pub const DRAINED: &str = "the fleet drains after the faults";

/// Every invariant of this module, in the summary's order.
pub const ALL: [&str; 14] = [
    DRAINED,
    WAITING,
    SLEEPS,
    CHILDREN,
    SUBMISSIONS,
    CANCELS,
    SIDE_EFFECTS,
    AFTER_CHECKPOINT,
    items::ITEMS,
    flow::LIMITS,
    flow::RATES,
    flow::TICKS,
    TOPIC,
    LOGS,
];

/// One outbox row, decoded.
#[derive(Debug, Clone)]
pub struct Event {
    /// Its id.
    pub event_id: String,
    /// Its job.
    pub job_id: String,
    /// Its type.
    pub kind: Type,
    /// Its step, if any.
    pub step: String,
    /// `occurredAt`, ms since the epoch.
    pub occurred_ms: i64,
    /// A RETRIED event's `detail.fromStep`.
    pub from_step: Option<String>,
}

/// Decodes an outbox payload or a topic record.
fn decode(payload: &[u8]) -> Option<Event> {
    let (_, bytes) = jobs_proto::wire::unframe(payload).ok()?;
    let event = WorkflowRunEvent::decode(bytes).ok()?;
    let from_step = event
        .detail
        .as_ref()
        .and_then(|d| d.fields.get("fromStep"))
        .and_then(|v| match &v.kind {
            Some(prost_types::value::Kind::StringValue(s)) => Some(s.clone()),
            _ => None,
        });
    Some(Event {
        kind: Type::try_from(event.r#type)
            .ok()
            .filter(|kind| *kind != Type::Unspecified)?,
        occurred_ms: event
            .occurred_at
            .map_or(0, |t| t.seconds * 1_000 + i64::from(t.nanos) / 1_000_000),
        event_id: event.event_id,
        job_id: event.job_id,
        step: event.step,
        from_step,
    })
}

/// What the run left: the rows, the outbox, the topic, the calls, the faults.
pub struct Evidence {
    /// Each job's status.
    pub statuses: BTreeMap<String, String>,
    /// The outbox rows in `seq` order.
    pub outbox: Vec<Event>,
    /// The event ids on the topic, per job, in offset order (duplicates kept).
    pub topic: BTreeMap<String, Vec<String>>,
    /// Records read from the topic (duplicates included).
    pub topic_records: usize,
    /// Outbox rows and topic records that did not decode as a valid event.
    pub undecodable: usize,
    /// Rows of `workflow_run_request_rejects` (poison requests): none expected.
    pub rejects: i64,
    /// Each node's log.
    pub logs: Vec<(String, String)>,
    /// Whether the fleet drained, or what was left.
    pub drained: Result<(), String>,
    /// Where each request on the requests topic is (`partition/offset`), by its key:
    /// tells a request the broker lost from one no consumer turned into a row.
    pub requests: BTreeMap<String, String>,
    /// The map steps' stored elements and outputs.
    pub map: MapEvidence,
    /// The jobs the run's schedule made per tick.
    pub ticks: Ticks,
    /// Parents' slots with more than one child.
    pub children_twice: Vec<String>,
}

/// What the database holds: each job's status, the decoded outbox (in `seq` order),
/// how many outbox rows did not decode, and the rejected requests.
pub struct Database {
    /// Each job's status.
    pub statuses: BTreeMap<String, String>,
    /// The outbox rows that decode.
    pub outbox: Vec<Event>,
    /// Rows that do not.
    pub undecodable: usize,
    /// Rejected requests.
    pub rejects: i64,
    /// Parents' slots (`parent/step/element`) with more than one child linked.
    pub children_twice: Vec<String>,
}

/// Reads the jobs, the outbox and the rejected requests.
pub async fn read_database(client: &Client) -> Database {
    // The jobs the load submitted: children are checked as their parents' slots.
    let statuses = client
        .query(
            "SELECT job_id::text, status FROM workflow_run WHERE root_job_id IS NULL AND schedule_name IS NULL",
            &[],
        )
        .await
        .expect("the jobs")
        .into_iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let rows = client
        .query(
            "SELECT payload FROM workflow_run_events_outbox ORDER BY seq",
            &[],
        )
        .await
        .expect("the outbox");
    let outbox: Vec<Event> = rows
        .iter()
        .filter_map(|row| decode(row.get::<_, &[u8]>(0)))
        .collect();
    let rejects = client
        .query_one("SELECT count(*) FROM workflow_run_request_rejects", &[])
        .await
        .expect("the rejects")
        .get(0);
    let children_twice = client
        .query(
            "SELECT parent_job_id::text || '/' || parent_step || '/' || parent_item || ': ' || count(*)
               FROM workflow_run WHERE parent_job_id IS NOT NULL
              GROUP BY parent_job_id, parent_step, parent_item HAVING count(*) > 1",
            &[],
        )
        .await
        .expect("the children")
        .iter()
        .map(|row| row.get(0))
        .collect();
    Database {
        statuses,
        undecodable: rows.len() - outbox.len(),
        outbox,
        rejects,
        children_twice,
    }
}

/// Reads `topic`'s `partitions` from the start (assigned: no group join to wait for)
/// until it holds `expected` distinct event ids, or until it has been quiet for 20 s
/// with fewer (those missing are then breaches). Answers the ids per job in offset
/// order, the records read, and those that did not decode or were not keyed by their
/// job.
/// The keys of every record on `topic` (the requests topic), with where each is,
/// read by assignment from the beginning until nothing comes for 10 s.
pub async fn read_request_keys(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<String, String> {
    let consumer = reader_from_the_start(
        bootstrap,
        topic,
        partitions,
        &[("isolation.level", "read_uncommitted")],
    );
    let mut keys = BTreeMap::new();
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_secs(10) {
        if let Ok(Ok(message)) = tokio::time::timeout(Duration::from_secs(1), consumer.recv()).await
        {
            quiet_since = Instant::now();
            if let Some(key) = message.key() {
                keys.insert(
                    String::from_utf8_lossy(key).into_owned(),
                    format!("{}/{}", message.partition(), message.offset()),
                );
            }
        }
    }
    keys
}

pub async fn read_topic(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    expected: usize,
) -> (BTreeMap<String, Vec<String>>, usize, usize) {
    let consumer = reader_from_the_start(
        bootstrap,
        topic,
        partitions,
        &[("auto.offset.reset", "earliest")],
    );
    let mut undecodable = 0;
    let mut records: Vec<(i32, i64, String, String)> = Vec::new();
    let mut distinct = BTreeSet::new();
    let mut quiet_since = Instant::now();
    let cap = Instant::now() + Duration::from_secs(600);
    while distinct.len() < expected
        && quiet_since.elapsed() < Duration::from_secs(20)
        && Instant::now() < cap
    {
        if let Ok(Ok(message)) = tokio::time::timeout(Duration::from_secs(1), consumer.recv()).await
        {
            quiet_since = Instant::now();
            match message.payload().and_then(decode) {
                Some(event) if message.key() == Some(event.job_id.as_bytes()) => {
                    distinct.insert(event.event_id.clone());
                    records.push((
                        message.partition(),
                        message.offset(),
                        event.job_id,
                        event.event_id,
                    ));
                }
                _ => undecodable += 1,
            }
        }
    }
    let total = records.len();
    records.sort();
    let mut per_job: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, _, job, event) in records {
        per_job.entry(job).or_default().push(event);
    }
    (per_job, total, undecodable)
}

/// Each `Sleep` job's nap ended no earlier than [`NAP_MS`] after the job first
/// parked on it: its checkpoint event against its first WAITING event (both stamped
/// by the nodes' clocks, which the database's clock, deciding the wake, shares here).
fn sleep_breaches(by_id: &BTreeMap<&str, &JobSpec>, outbox: &[Event]) -> Vec<Breach> {
    let mut parked: BTreeMap<&str, i64> = BTreeMap::new();
    let mut woke: BTreeMap<&str, i64> = BTreeMap::new();
    for event in outbox.iter().filter(|e| e.step == "nap") {
        if by_id
            .get(event.job_id.as_str())
            .is_none_or(|s| s.kind != Kind::Sleep)
        {
            continue;
        }
        let at = match event.kind {
            Type::Waiting => parked
                .entry(event.job_id.as_str())
                .or_insert(event.occurred_ms),
            Type::StepCheckpoint => woke
                .entry(event.job_id.as_str())
                .or_insert(event.occurred_ms),
            _ => continue,
        };
        *at = (*at).min(event.occurred_ms);
    }
    woke.into_iter()
        .filter_map(|(job, woke_ms)| {
            let parked_ms = *parked.get(job)?;
            (woke_ms < parked_ms + NAP_MS).then(|| {
                breach(
                    SLEEPS,
                    format!(
                        "job {job} went on {} ms after parking on its {NAP_MS} ms sleep",
                        woke_ms - parked_ms
                    ),
                )
            })
        })
        .chain(
            // A nap with no park before it was never slept.
            outbox
                .iter()
                .filter(|e| e.step == "nap" && e.kind == Type::StepCheckpoint)
                .filter(|e| {
                    !outbox
                        .iter()
                        .any(|w| w.job_id == e.job_id && w.step == "nap" && w.kind == Type::Waiting)
                })
                .map(|e| {
                    breach(
                        SLEEPS,
                        format!("job {} took its nap without parking", e.job_id),
                    )
                }),
        )
        .collect()
}

fn breach(invariant: &'static str, detail: String) -> Breach {
    Breach { invariant, detail }
}

/// The statuses a job ends in.
fn terminal(kind: Type) -> bool {
    matches!(
        kind,
        Type::Completed | Type::Failed | Type::Dead | Type::Cancelled
    )
}

/// Why a job's events break [`TOPIC`]: `outbox` its rows in commit order, `on_topic`
/// the ids read for it in offset order (at-least-once: a repeat is fine, not a gap or
/// a reordering).
pub fn event_order_breach(outbox: &[(String, Type)], on_topic: &[String]) -> Option<String> {
    let mut seen = BTreeSet::new();
    let first_seen: Vec<&String> = on_topic.iter().filter(|id| seen.insert(*id)).collect();
    let committed: Vec<&String> = outbox.iter().map(|(id, _)| id).collect();
    if first_seen != committed {
        let missing = committed.iter().filter(|id| !seen.contains(**id)).count();
        return Some(format!(
            "{} events committed, {} distinct on the topic ({missing} missing), or out of order",
            committed.len(),
            first_seen.len()
        ));
    }
    let kinds: Vec<Type> = outbox.iter().map(|(_, kind)| *kind).collect();
    if kinds.first() != Some(&Type::Accepted) {
        return Some(format!(
            "the first event is {:?}, not ACCEPTED",
            kinds.first()
        ));
    }
    for pair in kinds.windows(2) {
        if terminal(pair[0]) && pair[1] != Type::Retried {
            return Some(format!("{:?} is followed by {:?}", pair[0], pair[1]));
        }
    }
    None
}

/// Why one step's calls break [`SIDE_EFFECTS`] or [`AFTER_CHECKPOINT`]: `calls` of the
/// step in arrival order, `checkpoints_ms` when each of its checkpoints was written,
/// `reruns_ms` when an operator re-ran the job from this step or an earlier one,
/// `faults` the windows of the faults injected (each stretched by `slack`, the time a
/// fault takes to be noticed: a cut connection is found when next used).
pub fn step_call_breaches(
    calls: &[&Call],
    checkpoints_ms: &[i64],
    reruns_ms: &[i64],
    faults: &[(i64, i64)],
    slack: i64,
) -> (usize, Vec<(&'static str, String)>) {
    let mut found = Vec::new();
    let answered: Vec<&&Call> = calls
        .iter()
        .filter(|c| c.outcome == Outcome::Answered)
        .collect();
    let excess = answered.len().saturating_sub(1 + reruns_ms.len());
    if excess > 0 {
        let (from, to) = (
            answered[0].started_ms,
            answered[answered.len() - 1].ended_ms,
        );
        let hit = faults
            .iter()
            .filter(|(start, end)| *start <= to && end + slack >= from)
            .count();
        if hit < excess {
            found.push((
                SIDE_EFFECTS,
                format!(
                    "answered {} times ({excess} more than its runs) under {hit} faults",
                    answered.len()
                ),
            ));
        }
    }
    // Each call after a checkpoint needs an operator's re-run between the latest such
    // checkpoint and the call.
    for call in calls {
        let latest = checkpoints_ms
            .iter()
            .filter(|at| **at < call.started_ms)
            .max();
        if let Some(&at) = latest {
            let rerun_between = reruns_ms.iter().any(|r| *r > at && *r <= call.started_ms);
            if !rerun_between {
                found.push((
                    AFTER_CHECKPOINT,
                    format!(
                        "called {} ms after its checkpoint ({:?})",
                        call.started_ms - at,
                        call.outcome
                    ),
                ));
            }
        }
    }
    (excess, found)
}

/// What the checks found, and the figures the summary prints.
#[derive(Debug, Default)]
pub struct Findings {
    /// Every breach.
    pub breaches: Vec<Breach>,
    /// The most extra answers of one step (beyond its runs).
    pub max_reexecutions: usize,
    /// Steps answered more than once.
    pub steps_reexecuted: usize,
    /// The most calls of the concurrency-limited jobs in flight at once.
    pub limited_peak: usize,
}

/// Runs every check of this module.
pub fn check(
    specs: &[JobSpec],
    ledger: &Ledger,
    evidence: &Evidence,
    calls: &[Call],
    faults: &[Injected],
    slack: Duration,
) -> Findings {
    let mut findings = Findings::default();
    if let Err(left) = &evidence.drained {
        findings.breaches.push(breach(DRAINED, left.clone()));
    }
    let by_id: BTreeMap<&str, &JobSpec> = specs.iter().map(|s| (s.id.as_str(), s)).collect();

    for (job, status) in &evidence.statuses {
        let spec = by_id.get(job.as_str());
        if status == "WAITING"
            && !spec.is_some_and(|s| {
                matches!(s.kind, Kind::Review | Kind::Event) && s.answer_after.is_none()
            })
        {
            findings.breaches.push(breach(
                WAITING,
                format!("job {job} is WAITING though its answer was sent"),
            ));
        }
        if spec.is_none() {
            findings.breaches.push(breach(
                SUBMISSIONS,
                format!("job {job} was never submitted"),
            ));
        }
        // A review resumes only on the operator's answer, an event step only on
        // its event.
        if status == "COMPLETED"
            && spec.is_some_and(|s| matches!(s.kind, Kind::Review | Kind::Event))
            && !ledger.answered.contains(job)
        {
            findings.breaches.push(breach(
                WAITING,
                format!("job {job} COMPLETED though its review was never answered"),
            ));
        }
    }
    if evidence.rejects > 0 {
        findings.breaches.push(breach(
            SUBMISSIONS,
            format!("{} requests were rejected as poison", evidence.rejects),
        ));
    }
    let mut accepted_events: BTreeMap<&str, usize> = BTreeMap::new();
    for event in &evidence.outbox {
        if event.kind == Type::Accepted {
            *accepted_events.entry(event.job_id.as_str()).or_default() += 1;
        }
    }
    for spec in specs {
        let id = spec.id.as_str();
        if ledger.never_accepted.contains(id) {
            findings.breaches.push(breach(
                SUBMISSIONS,
                format!(
                    "job {id}: its submission ({:?}) was never accepted",
                    spec.lane
                ),
            ));
        } else if !evidence.statuses.contains_key(id) {
            let on_topic = match (spec.lane, evidence.requests.get(id)) {
                (Lane::Kafka, Some(place)) => format!(" (its request is on the topic at {place})"),
                (Lane::Kafka, None) => " (its request is not on the topic)".to_owned(),
                _ => String::new(),
            };
            findings.breaches.push(breach(
                SUBMISSIONS,
                format!("job {id}: accepted ({:?}) but no row{on_topic}", spec.lane),
            ));
        } else if accepted_events.get(id) != Some(&1) {
            findings.breaches.push(breach(
                SUBMISSIONS,
                format!(
                    "job {id}: {} ACCEPTED events",
                    accepted_events.get(id).unwrap_or(&0)
                ),
            ));
        }
    }
    for (job, outcome) in &ledger.cancels {
        let status = evidence.statuses.get(job).map_or("none", String::as_str);
        if matches!(outcome.as_str(), "CANCELLED" | "CANCEL_REQUESTED") && status != "CANCELLED" {
            findings.breaches.push(breach(
                CANCELS,
                format!("job {job}: cancel answered {outcome}, the job ended {status}"),
            ));
        }
    }

    // Calls per job and step, against checkpoints, re-runs and faults.
    let mut checkpointed: BTreeMap<(&str, &str), Vec<i64>> = BTreeMap::new();
    let mut reruns: BTreeMap<&str, Vec<(i64, &str)>> = BTreeMap::new();
    for event in &evidence.outbox {
        match event.kind {
            Type::StepCheckpoint => {
                checkpointed
                    .entry((event.job_id.as_str(), event.step.as_str()))
                    .or_default()
                    .push(event.occurred_ms);
            }
            Type::Retried => {
                if let Some(from) = &event.from_step {
                    reruns
                        .entry(event.job_id.as_str())
                        .or_default()
                        .push((event.occurred_ms, from.as_str()));
                }
            }
            _ => {}
        }
    }
    // A map step's element is checkpointed when its row is stored.
    for element in &evidence.map.elements {
        checkpointed
            .entry((element.job.as_str(), element.key.as_str()))
            .or_default()
            .push(element.stored_ms);
    }
    findings
        .breaches
        .extend(items::check(specs, &evidence.statuses, &evidence.map));
    let mut by_step: BTreeMap<(&str, &str), Vec<&Call>> = BTreeMap::new();
    for call in calls {
        by_step
            .entry((call.job.as_str(), call.step.as_str()))
            .or_default()
            .push(call);
    }
    // Only faults that can cost a worker its claim or its write explain a re-run: a
    // hung target is refused, not answered, and the broker holds no step. A node's
    // clock set off explains nothing: leases are judged by the database's clock.
    let windows: Vec<(i64, i64)> = faults
        .iter()
        .filter(|f| {
            !matches!(
                f.fault,
                Fault::HangTarget | Fault::RestartBroker | Fault::BrokerError | Fault::ClockSkew
            )
        })
        .map(|f| (f.started_ms, f.ended_ms))
        .collect();
    let (flow_breaches, limited_peak) = flow::check(specs, calls, &evidence.ticks);
    findings.breaches.extend(flow_breaches);
    findings.limited_peak = limited_peak;
    for ((job, step), mut step_calls) in by_step {
        step_calls.sort_by_key(|c| c.started_ms);
        let steps = by_id.get(job).map_or(&[][..], |s| s.kind.steps());
        let position = steps.iter().position(|s| *s == step).unwrap_or(0);
        let reruns_ms: Vec<i64> = reruns
            .get(job)
            .map(|list| {
                list.iter()
                    .filter(|(_, from)| {
                        steps
                            .iter()
                            .position(|s| s == from)
                            .is_some_and(|p| p <= position)
                    })
                    .map(|(at, _)| *at)
                    .collect()
            })
            .unwrap_or_default();
        let (excess, found) = step_call_breaches(
            &step_calls,
            checkpointed
                .get(&(job, step))
                .map_or(&[][..], Vec::as_slice),
            &reruns_ms,
            &windows,
            slack.as_millis() as i64,
        );
        findings.max_reexecutions = findings.max_reexecutions.max(excess);
        if excess > 0 {
            findings.steps_reexecuted += 1;
        }
        for (invariant, detail) in found {
            findings.breaches.push(breach(
                invariant,
                format!("job {job} step {step}: {detail}"),
            ));
        }
    }
    let answered: BTreeSet<(&str, &str)> = calls
        .iter()
        .filter(|c| c.outcome == Outcome::Answered)
        .map(|c| (c.job.as_str(), c.step.as_str()))
        .collect();
    for &(job, step) in checkpointed.keys() {
        // The external step is answered by the operator, never called; a map step is
        // called element by element, each checked as a step of its own.
        let map_step = by_id.get(job).is_some_and(|s| s.kind == Kind::Map) && step == "each";
        let called = by_id
            .get(job)
            .is_none_or(|s| s.kind.called().contains(&step));
        if called && !map_step && !answered.contains(&(job, step)) {
            findings.breaches.push(breach(
                SIDE_EFFECTS,
                format!("job {job} step {step}: checkpointed without an answered call"),
            ));
        }
    }

    findings
        .breaches
        .extend(sleep_breaches(&by_id, &evidence.outbox));
    for slot in &evidence.children_twice {
        findings
            .breaches
            .push(breach(CHILDREN, format!("slot {slot} children")));
    }

    // The topic against the outbox, job by job.
    let mut committed: BTreeMap<&str, Vec<(String, Type)>> = BTreeMap::new();
    for event in &evidence.outbox {
        committed
            .entry(event.job_id.as_str())
            .or_default()
            .push((event.event_id.clone(), event.kind));
    }
    let empty = Vec::new();
    for (job, events) in &committed {
        let on_topic = evidence.topic.get(*job).unwrap_or(&empty);
        if let Some(detail) = event_order_breach(events, on_topic) {
            findings
                .breaches
                .push(breach(TOPIC, format!("job {job}: {detail}")));
        }
        let status = evidence.statuses.get(*job).map_or("", String::as_str);
        let last = events.last().map(|(_, kind)| *kind);
        let expected = match status {
            "COMPLETED" => Some(Type::Completed),
            "FAILED" => Some(Type::Failed),
            "DEAD" => Some(Type::Dead),
            "CANCELLED" => Some(Type::Cancelled),
            _ => None,
        };
        if expected.is_some() && last != expected {
            findings.breaches.push(breach(
                TOPIC,
                format!("job {job} is {status}; its last event is {last:?}"),
            ));
        }
    }
    if evidence.undecodable > 0 {
        findings.breaches.push(breach(
            TOPIC,
            format!(
                "{} outbox rows or topic records are not valid events keyed by their job",
                evidence.undecodable
            ),
        ));
    }
    for job in evidence.topic.keys() {
        if !committed.contains_key(job.as_str()) {
            findings.breaches.push(breach(
                TOPIC,
                format!("job {job}: events on the topic, none in the outbox"),
            ));
        }
    }

    findings.breaches.extend(log_breaches(&evidence.logs));
    findings
}

/// Prints the verdict table of `invariants` and the first breaches; answers whether
/// every invariant held.
pub fn print_verdicts<'a>(
    invariants: impl IntoIterator<Item = &'a str>,
    breaches: &[Breach],
) -> bool {
    println!("\n| invariant | verdict |\n|---|---|");
    for invariant in invariants {
        let broken = breaches.iter().filter(|b| b.invariant == invariant).count();
        let verdict = if broken == 0 {
            "held".to_owned()
        } else {
            format!("BROKEN ({broken})")
        };
        println!("| {invariant} | {verdict} |");
    }
    for breach in breaches.iter().take(40) {
        println!("- {}: {}", breach.invariant, breach.detail);
    }
    if breaches.is_empty() {
        println!("\nchaos: every invariant held");
    }
    breaches.is_empty()
}

/// [`LOGS`] over each node's log (its name, its text).
pub fn log_breaches(logs: &[(String, String)]) -> Vec<Breach> {
    let mut breaches = Vec::new();
    for (node, log) in logs {
        for line in log.lines() {
            let constraint = line.contains("violates") && line.contains("constraint");
            if constraint || line.contains("panicked") {
                breaches.push(breach(
                    LOGS,
                    format!("{node}: {}", line.chars().take(300).collect::<String>()),
                ));
            }
        }
    }
    breaches
}

/// A consumer assigned every partition of `topic` from its first record (by
/// assignment: no group join to wait for), with `settings` on top.
fn reader_from_the_start(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    settings: &[(&str, &str)],
) -> StreamConsumer {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set(
            "group.id",
            format!("chaos-reader-{}", uuid::Uuid::new_v4().simple()),
        )
        .set("enable.auto.commit", "false");
    for (key, value) in settings {
        config.set(*key, *value);
    }
    let consumer: StreamConsumer = config.create().expect("a consumer");
    let mut assignment = rdkafka::TopicPartitionList::new();
    for partition in 0..partitions {
        assignment
            .add_partition_offset(topic, partition, rdkafka::Offset::Beginning)
            .expect("a partition");
    }
    consumer.assign(&assignment).expect("assign");
    consumer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(started_ms: i64, outcome: Outcome) -> Call {
        Call {
            job: "j".into(),
            step: "s".into(),
            started_ms,
            ended_ms: started_ms + 10,
            outcome,
        }
    }

    #[test]
    fn a_step_answered_twice_needs_a_fault_in_its_span() {
        let (first, second) = (
            call(1_000, Outcome::Answered),
            call(5_000, Outcome::Answered),
        );
        let calls = [&first, &second];
        let (excess, found) = step_call_breaches(&calls, &[], &[], &[], 0);
        assert_eq!(excess, 1);
        assert_eq!(found[0].0, SIDE_EFFECTS);
        // A fault inside the span explains it; one long before does not.
        assert!(
            step_call_breaches(&calls, &[], &[], &[(2_000, 2_500)], 0)
                .1
                .is_empty()
        );
        assert!(
            !step_call_breaches(&calls, &[], &[], &[(100, 200)], 0)
                .1
                .is_empty()
        );
        // A fault noticed late (the slack) explains it too; so does an operator's re-run.
        assert!(
            step_call_breaches(&calls, &[], &[], &[(100, 200)], 900)
                .1
                .is_empty()
        );
        assert!(
            step_call_breaches(&calls, &[], &[3_000], &[], 0)
                .1
                .is_empty()
        );
        // Refused calls are the plan's, never a re-execution.
        let refused = call(500, Outcome::Refused);
        assert!(
            step_call_breaches(&[&refused, &first], &[], &[], &[], 0)
                .1
                .is_empty()
        );
    }

    #[test]
    fn a_call_after_the_checkpoint_is_a_breach_unless_a_rerun_came_between() {
        let (first, late) = (
            call(1_000, Outcome::Answered),
            call(5_000, Outcome::Refused),
        );
        let found = step_call_breaches(&[&first, &late], &[2_000], &[], &[], 0).1;
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, AFTER_CHECKPOINT);
        assert!(
            step_call_breaches(&[&first, &late], &[2_000], &[4_000], &[], 0)
                .1
                .is_empty()
        );
    }

    #[test]
    fn the_topic_must_hold_each_jobs_events_once_in_order_with_repeats_allowed() {
        let outbox = vec![
            ("a".to_owned(), Type::Accepted),
            ("b".to_owned(), Type::StepCheckpoint),
            ("c".to_owned(), Type::Dead),
            ("d".to_owned(), Type::Retried),
            ("e".to_owned(), Type::Completed),
        ];
        let ids = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            event_order_breach(&outbox, &ids(&["a", "b", "c", "d", "e"])),
            None
        );
        assert_eq!(
            event_order_breach(&outbox, &ids(&["a", "b", "b", "c", "d", "e", "e"])),
            None
        );
        assert!(event_order_breach(&outbox, &ids(&["a", "c", "b", "d", "e"])).is_some());
        assert!(event_order_breach(&outbox, &ids(&["a", "b", "c", "d"])).is_some());
        let mut bad = outbox.clone();
        bad.swap(3, 4);
        let reordered: Vec<String> = bad.iter().map(|(id, _)| id.clone()).collect();
        assert!(
            event_order_breach(&bad, &reordered).is_some(),
            "COMPLETED after DEAD without RETRIED"
        );
        assert!(
            event_order_breach(&outbox[1..], &ids(&["b", "c", "d", "e"])).is_some(),
            "ACCEPTED first"
        );
    }
}
