//! The completions of a group commit settled together: a workflow's final checkpoint
//! with its COMPLETED settlement (a one-step job's whole write) is the flusher's
//! commonest write, and one statement for a batch of them costs PostgreSQL far less
//! than one each. Each row keeps every fence of the single statement.

use super::*;
use crate::store::writes::{ClaimWrite, Settlement};

/// The most bytes (about: see [`json_bytes_within`]) of one completion's result and
/// final checkpoint for it to share [`sql::SETTLE_MANY_COMPLETED_WITH_CHECKPOINT`].
const MAX_BYTES_PER_COMPLETION: usize = 64 * 1024;

/// The most bytes of all the completions sharing it.
const MAX_BYTES_TOGETHER: usize = 8 * 1024 * 1024;

/// About the size of `value` as JSON text (its strings, keys and numbers, and a byte
/// per punctuation mark), if it is at most `limit`: the walk stops once past it, so a
/// large value costs no more than a small one.
fn json_bytes_within(value: &Value, limit: usize) -> Option<usize> {
    let mut total = 0usize;
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        total += match value {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => 24,
            Value::String(text) => text.len() + 2,
            // Counted before their items are taken up, so a huge array or object is
            // refused without a walk of it.
            Value::Array(items) => items.len() + 2,
            Value::Object(fields) => fields.len() * 4 + 2,
        };
        if total > limit {
            return None;
        }
        match value {
            Value::Array(items) => stack.extend(items),
            Value::Object(fields) => {
                for (key, item) in fields {
                    total += key.len();
                    if total > limit {
                        return None;
                    }
                    stack.push(item);
                }
            }
            _ => {}
        }
    }
    Some(total)
}

/// The writes of a batch that only append a workflow's final checkpoint and settle
/// COMPLETED (a one-step job's whole write), settled by one statement
/// ([`sql::SETTLE_MANY_COMPLETED_WITH_CHECKPOINT`]) instead of one each; none when
/// fewer than two (a write alone keeps its own statement, so a refusal names it).
pub(super) struct Completions<'w> {
    /// Positions in the batch.
    at: std::collections::HashSet<usize>,
    job_ids: Vec<Uuid>,
    owners: Vec<&'w str>,
    tokens: Vec<i32>,
    results: Vec<&'w Value>,
    verdicts: Vec<&'w str>,
    entries: Vec<&'w Value>,
    positions: Vec<i32>,
}

impl<'w> Completions<'w> {
    /// The completions of `writes` small enough to share the statement (none unless
    /// `share`).
    pub(super) fn of(writes: &[&'w ClaimWrite], share: bool) -> Completions<'w> {
        let mut together = Completions {
            at: Default::default(),
            job_ids: Vec::new(),
            owners: Vec::new(),
            tokens: Vec::new(),
            results: Vec::new(),
            verdicts: Vec::new(),
            entries: Vec::new(),
            positions: Vec::new(),
        };
        let mut seen = std::collections::HashSet::new();
        let mut bytes_left = MAX_BYTES_TOGETHER;
        for (at, write) in writes.iter().enumerate().filter(|_| share) {
            // A final checkpoint with a COMPLETED settlement: the write the group
            // commit otherwise sends as one SETTLE_COMPLETED_WITH_CHECKPOINT.
            let (Some(checkpoint), Some(Settlement::Completed { result, verdict })) =
                (&write.checkpoint, &write.settlement)
            else {
                continue;
            };
            // A large value keeps its own statement: the batch's values travel in one
            // message, which PostgreSQL bounds (1 GiB), and one backend holds them all.
            let Some(bytes) = json_bytes_within(result, MAX_BYTES_PER_COMPLETION)
                .zip(json_bytes_within(
                    &checkpoint.entry,
                    MAX_BYTES_PER_COMPLETION,
                ))
                .map(|(result, entry)| result + entry)
                .filter(|&bytes| bytes <= bytes_left)
            else {
                continue;
            };
            // One row per job: an id twice (never expected) keeps its own statements.
            if !seen.insert(write.claim.job_id) {
                continue;
            }
            bytes_left -= bytes;
            together.at.insert(at);
            together.job_ids.push(write.claim.job_id);
            together.owners.push(&write.claim.owner);
            together.tokens.push(write.claim.token);
            together.results.push(result);
            together.verdicts.push(verdict);
            together.entries.push(&checkpoint.entry);
            together.positions.push(checkpoint.position);
        }
        if together.at.len() < 2 {
            together = Completions {
                at: Default::default(),
                ..together
            };
        }
        together
    }

    /// True when the write at `at` is settled here.
    pub(super) fn holds(&self, at: usize) -> bool {
        self.at.contains(&at)
    }

    /// Settles them all; answers the ids whose fences matched.
    pub(super) async fn settle(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
    ) -> Result<std::collections::HashSet<Uuid>, StoreError> {
        if self.at.is_empty() {
            return Ok(Default::default());
        }
        let statement = tx
            .prepare_cached(sql::SETTLE_MANY_COMPLETED_WITH_CHECKPOINT)
            .await?;
        let rows = tx
            .query(
                &statement,
                &[
                    &self.job_ids,
                    &self.owners,
                    &self.tokens,
                    &self.results,
                    &self.verdicts,
                    &self.entries,
                    &self.positions,
                ],
            )
            .await?;
        Ok(rows.iter().map(|row| row.get::<_, Uuid>(0)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Claim, StepCheckpoint};

    fn completion(job: u128, result: Value) -> ClaimWrite {
        let claim = Claim {
            job_id: Uuid::from_u128(job),
            owner: "w".into(),
            token: 1,
            attempt: 1,
            workflow_name: "w".into(),
            metadata: None,
        };
        let entry = json_entry(&result);
        ClaimWrite::settle(
            &claim,
            Some(StepCheckpoint {
                step: "s".into(),
                position: 0,
                entry,
            }),
            Settlement::Completed {
                result,
                verdict: "1 step".into(),
            },
        )
        .expect("RUNNING may become COMPLETED")
    }

    fn json_entry(response: &Value) -> Value {
        serde_json::json!({ "name": "s", "skipped": false, "response": response })
    }

    #[test]
    fn sizes_are_measured_only_up_to_the_limit() {
        let small = serde_json::json!({ "text": "abc", "ids": [1, 2] });
        let size = json_bytes_within(&small, 1_000).expect("small");
        assert!((10..100).contains(&size), "{size}");
        assert_eq!(json_bytes_within(&small, 5), None);
        let big = Value::String("x".repeat(100_000));
        assert_eq!(json_bytes_within(&big, MAX_BYTES_PER_COMPLETION), None);
    }

    #[test]
    fn only_small_distinct_completions_share_the_statement() {
        let big = Value::String("x".repeat(MAX_BYTES_PER_COMPLETION));
        let writes = [
            completion(1, serde_json::json!({ "n": 1 })),
            completion(2, big),
            completion(3, serde_json::json!({ "n": 3 })),
            completion(1, serde_json::json!({ "n": 1 })),
            ClaimWrite::barrier(&completion(4, Value::Null).claim),
        ];
        let writes: Vec<&ClaimWrite> = writes.iter().collect();
        let together = Completions::of(&writes, true);
        let held: Vec<usize> = (0..writes.len()).filter(|&at| together.holds(at)).collect();
        assert_eq!(
            held,
            [0, 2],
            "the large one, the repeated id and the barrier go alone"
        );
        assert!(
            !Completions::of(&writes, false).holds(0),
            "not when told not to"
        );
        assert!(
            !Completions::of(&writes[..2], true).holds(0),
            "a lone completion keeps its own statement"
        );
    }

    #[test]
    fn the_completions_sharing_a_statement_are_bounded_in_bytes_together() {
        let near_limit = Value::String("x".repeat(MAX_BYTES_PER_COMPLETION / 2 - 100));
        let count = 2 * MAX_BYTES_TOGETHER / MAX_BYTES_PER_COMPLETION + 10;
        let writes: Vec<ClaimWrite> = (0..count)
            .map(|i| completion(i as u128, near_limit.clone()))
            .collect();
        let writes: Vec<&ClaimWrite> = writes.iter().collect();
        let together = Completions::of(&writes, true);
        let held = (0..count).filter(|&at| together.holds(at)).count();
        assert!(held > 1 && held < count, "{held} of {count}");
        assert!(
            held * MAX_BYTES_PER_COMPLETION / 2 <= MAX_BYTES_TOGETHER + MAX_BYTES_PER_COMPLETION
        );
    }
}
