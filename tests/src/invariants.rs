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
/// order; a COMPLETED job has one for every step.
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
                        THEN checkpoints ELSE '[]'::jsonb END) c)
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
        if let Some(detail) = checkpoint_breach(&status, &steps, &done) {
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
    if done.len() > steps.len() {
        return Some(format!(
            "{} checkpoints for {} steps",
            done.len(),
            steps.len()
        ));
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
    if status == "COMPLETED" && done.len() != steps.len() {
        return Some(format!(
            "COMPLETED with {} checkpoints for {} steps",
            done.len(),
            steps.len()
        ));
    }
    None
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
}
