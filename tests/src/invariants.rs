//! The engine's promises, checked over its database after a run: nothing lost or
//! stuck, checkpoints that are a prefix of the workflow's steps, each step once and in
//! order, and every event published. The chaos run (issue 17) checks these after its
//! faults; a test here proves each check passes a clean run and names a breach.
//!
//! The checks read the tables directly: they judge the store, so they cannot go
//! through it.

use std::collections::BTreeMap;
use std::fmt;

use tokio_postgres::Client;

/// What the checks found.
#[derive(Debug, Default)]
pub struct Report {
    /// Jobs by status.
    pub jobs_by_status: BTreeMap<String, i64>,
    /// Outbox rows by status.
    pub outbox_by_status: BTreeMap<String, i64>,
    /// Every broken promise, by invariant.
    pub breaches: Vec<Breach>,
}

/// One broken promise: the invariant, and the jobs or rows that break it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breach {
    /// The invariant's name ([`STUCK`], [`CHECKPOINTS`], [`UNPUBLISHED`]).
    pub invariant: &'static str,
    /// What breaks it, naming the job.
    pub detail: String,
}

/// Every job is terminal, or WAITING on its step: none QUEUED or RUNNING after the
/// drain.
pub const STUCK: &str = "none lost or stuck";
/// Each job's checkpoints name its workflow's steps from the first, each once, in
/// order (in a graph, where steps declare `after`: each step once, after the steps it
/// waits for); a COMPLETED job has one for every step.
pub const CHECKPOINTS: &str = "checkpoints are a prefix of the steps";
/// Every outbox row is PUBLISHED.
pub const UNPUBLISHED: &str = "every event published";

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "jobs by status: {:?}", self.jobs_by_status)?;
        writeln!(f, "outbox by status: {:?}", self.outbox_by_status)?;
        for invariant in [STUCK, CHECKPOINTS, UNPUBLISHED] {
            let broken = self
                .breaches
                .iter()
                .filter(|b| b.invariant == invariant)
                .count();
            let verdict = if broken == 0 { "held" } else { "BROKEN" };
            writeln!(f, "{invariant}: {verdict} ({broken} breaches)")?;
        }
        for breach in self.breaches.iter().take(20) {
            writeln!(f, "  {}: {}", breach.invariant, breach.detail)?;
        }
        Ok(())
    }
}

/// Runs the checks; `expect_published` says whether a relay ran (without one, every
/// row stays PENDING by design).
pub async fn check(client: &Client, expect_published: bool) -> Report {
    let mut report = Report {
        jobs_by_status: counts(
            client,
            "SELECT status, count(*) FROM workflow_run GROUP BY status",
        )
        .await,
        outbox_by_status: counts(
            client,
            "SELECT status, count(*) FROM workflow_run_events_outbox GROUP BY status",
        )
        .await,
        breaches: Vec::new(),
    };

    for row in client
        .query(
            "SELECT job_id::text, status FROM workflow_run WHERE status IN ('QUEUED', 'RUNNING') ORDER BY job_id",
            &[],
        )
        .await
        .expect("stuck jobs")
    {
        let (job, status): (String, String) = (row.get(0), row.get(1));
        report.breaches.push(Breach {
            invariant: STUCK,
            detail: format!("job {job} is still {status}"),
        });
    }

    for row in client
        .query(
            "SELECT job_id::text, status,
                    ARRAY(SELECT s->>'name' FROM jsonb_array_elements(
                        CASE jsonb_typeof(d.definition->'steps') WHEN 'array'
                        THEN d.definition->'steps' ELSE '[]'::jsonb END) s),
                    ARRAY(SELECT c->>'name' FROM jsonb_array_elements(
                        CASE jsonb_typeof(checkpoints) WHEN 'array'
                        THEN checkpoints ELSE '[]'::jsonb END) c),
                    ARRAY(SELECT s->'after' FROM jsonb_array_elements(
                        CASE jsonb_typeof(d.definition->'steps') WHEN 'array'
                        THEN d.definition->'steps' ELSE '[]'::jsonb END) s)
             FROM workflow_run w
             LEFT JOIN workflow_snapshot f ON f.digest = w.definition_digest,
             LATERAL (SELECT COALESCE(w.workflow_definition, f.definition) AS definition) d
             ORDER BY job_id",
            &[],
        )
        .await
        .expect("checkpoints")
    {
        let (job, status): (String, String) = (row.get(0), row.get(1));
        let steps: Vec<Option<String>> = row.get(2);
        let done: Vec<Option<String>> = row.get(3);
        let after: Vec<Option<serde_json::Value>> = row.get(4);
        let breach = if after.iter().all(Option::is_none) {
            checkpoint_breach(&status, &steps, &done)
        } else {
            graph_checkpoint_breach(&status, &steps, &after, &done)
        };
        if let Some(detail) = breach {
            report.breaches.push(Breach {
                invariant: CHECKPOINTS,
                detail: format!("job {job}: {detail}"),
            });
        }
    }

    if expect_published {
        for row in client
            .query(
                "SELECT job_id::text, event_type, status FROM workflow_run_events_outbox
                 WHERE status <> 'PUBLISHED' ORDER BY seq",
                &[],
            )
            .await
            .expect("unpublished rows")
        {
            let (job, event, status): (String, String, String) =
                (row.get(0), row.get(1), row.get(2));
            report.breaches.push(Breach {
                invariant: UNPUBLISHED,
                detail: format!("job {job}: its {event} event is {status}"),
            });
        }
    }
    report
}

/// The `(status, count)` rows `query` answers, as a map.
async fn counts(client: &Client, query: &str) -> BTreeMap<String, i64> {
    client
        .query(query, &[])
        .await
        .unwrap_or_else(|e| panic!("{query}: {e}"))
        .into_iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// Why a job's checkpoint names break [`CHECKPOINTS`], if they do.
fn checkpoint_breach(
    status: &str,
    steps: &[Option<String>],
    done: &[Option<String>],
) -> Option<String> {
    if let Some(breach) = count_breach(None, steps.len(), done.len()) {
        return Some(breach);
    }
    if let Some(at) = done.iter().zip(steps).position(|(d, s)| d != s) {
        return Some(format!(
            "checkpoint {} is {:?}, step {} is {:?}",
            at + 1,
            done[at],
            at + 1,
            steps[at]
        ));
    }
    count_breach(Some(status), steps.len(), done.len())
}

/// Too many checkpoints for the steps; or (with the job's `status`) a COMPLETED job
/// without one per step.
fn count_breach(status: Option<&str>, steps: usize, done: usize) -> Option<String> {
    match status {
        None if done > steps => Some(format!("{done} checkpoints for {steps} steps")),
        Some("COMPLETED") if done != steps => Some(format!(
            "COMPLETED with {done} checkpoints for {steps} steps"
        )),
        _ => None,
    }
}

/// [`checkpoint_breach`] for a graph: each checkpoint names a step of the workflow,
/// once, after the checkpoints of every step it waits for (its `after`, or the step
/// before it).
fn graph_checkpoint_breach(
    status: &str,
    steps: &[Option<String>],
    after: &[Option<serde_json::Value>],
    done: &[Option<String>],
) -> Option<String> {
    if let Some(breach) = count_breach(None, steps.len(), done.len()) {
        return Some(breach);
    }
    let mut seen: Vec<&str> = Vec::new();
    for (at, name) in done.iter().enumerate() {
        let name = name.as_deref().unwrap_or_default();
        let Some(index) = steps.iter().position(|s| s.as_deref() == Some(name)) else {
            return Some(format!("checkpoint {} names no step: {name:?}", at + 1));
        };
        if seen.contains(&name) {
            return Some(format!("checkpoint {} names step {name:?} twice", at + 1));
        }
        let waits: Vec<String> = match after.get(index).cloned().flatten() {
            Some(serde_json::Value::Array(names)) => names
                .iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect(),
            _ => index
                .checked_sub(1)
                .and_then(|before| steps[before].clone())
                .into_iter()
                .collect(),
        };
        if let Some(missing) = waits.iter().find(|w| !seen.contains(&w.as_str())) {
            return Some(format!(
                "checkpoint {} ({name:?}) comes before {missing:?}, which it waits for",
                at + 1
            ));
        }
        seen.push(name);
    }
    count_breach(Some(status), steps.len(), done.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<Option<String>> {
        list.iter().map(|n| Some((*n).to_owned())).collect()
    }

    #[test]
    fn checkpoints_must_name_the_steps_from_the_first_each_once() {
        let steps = names(&["tokenize", "review", "embed"]);
        assert_eq!(checkpoint_breach("RUNNING", &steps, &[]), None);
        assert_eq!(
            checkpoint_breach("WAITING", &steps, &names(&["tokenize"])),
            None
        );
        assert_eq!(checkpoint_breach("COMPLETED", &steps, &steps), None);
        for (status, done) in [
            ("FAILED", names(&["review"])),
            ("FAILED", names(&["tokenize", "tokenize"])),
            ("FAILED", names(&["tokenize", "review", "embed", "embed"])),
            ("COMPLETED", names(&["tokenize", "review"])),
        ] {
            assert!(
                checkpoint_breach(status, &steps, &done).is_some(),
                "{status} {done:?}"
            );
        }
    }

    #[test]
    fn a_graphs_checkpoints_come_after_the_steps_they_wait_for() {
        let steps = names(&["a", "b", "c", "d"]);
        let after = vec![
            None,
            Some(serde_json::json!(["a"])),
            Some(serde_json::json!(["a"])),
            Some(serde_json::json!(["b", "c"])),
        ];
        let ok = names(&["a", "c", "b", "d"]);
        assert_eq!(
            graph_checkpoint_breach("COMPLETED", &steps, &after, &ok),
            None
        );
        let early = names(&["a", "d"]);
        assert!(
            graph_checkpoint_breach("RUNNING", &steps, &after, &early)
                .unwrap()
                .contains("waits for")
        );
        let twice = names(&["a", "b", "b"]);
        assert!(
            graph_checkpoint_breach("RUNNING", &steps, &after, &twice)
                .unwrap()
                .contains("twice")
        );
    }
}
