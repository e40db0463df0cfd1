//! Map steps in the chaos mix: each element's stored row (migration V23) is that
//! element's checkpoint (its calls are checked against it as a step's are against
//! its checkpoint), and a COMPLETED map job holds every element of its list exactly
//! once, its output listing them all.

use std::collections::{BTreeMap, BTreeSet};

use protomolt_e2e::invariants::Breach;
use tokio_postgres::Client;

use crate::load::{JobSpec, Kind};

/// Every element of a COMPLETED map step has exactly one stored row.
pub const ITEMS: &str = "a COMPLETED map step stored each element once";

/// One stored element.
pub struct Element {
    /// Its job.
    pub job: String,
    /// `<step>#<index>`, as the fixture names the element's calls.
    pub key: String,
    /// Its map step.
    pub step: String,
    /// Its position in the list.
    pub index: i32,
    /// When it was stored, ms since the epoch.
    pub stored_ms: i64,
}

/// The stored elements, and how many vectors each COMPLETED map job's output lists.
pub struct MapEvidence {
    /// Every stored element.
    pub elements: Vec<Element>,
    /// `result.vectors`' length per COMPLETED map job.
    pub outputs: BTreeMap<String, i64>,
}

/// Reads the elements and the map jobs' outputs.
pub async fn read(client: &Client) -> MapEvidence {
    let elements = client
        .query(
            "SELECT job_id::text, step, item, (extract(epoch FROM created_at) * 1000)::bigint
               FROM workflow_run_items",
            &[],
        )
        .await
        .expect("the map elements")
        .into_iter()
        .map(|row| {
            let (step, index): (String, i32) = (row.get(1), row.get(2));
            Element {
                job: row.get(0),
                key: format!("{step}#{index}"),
                step,
                index,
                stored_ms: row.get(3),
            }
        })
        .collect();
    let outputs = client
        .query(
            "SELECT job_id::text, jsonb_array_length(result -> 'vectors') FROM workflow_run
              WHERE status = 'COMPLETED' AND workflow_name = $1",
            &[&Kind::Map.workflow_name()],
        )
        .await
        .expect("the map outputs")
        .into_iter()
        .map(|row| {
            (
                row.get(0),
                row.get::<_, Option<i32>>(1).map_or(-1, i64::from),
            )
        })
        .collect();
    MapEvidence { elements, outputs }
}

/// Every COMPLETED map job stored each element of its list once (the fixture's
/// tokenizer answers one id per character of the input) and lists them all.
pub fn check(
    specs: &[JobSpec],
    statuses: &BTreeMap<String, String>,
    evidence: &MapEvidence,
) -> Vec<Breach> {
    let mut stored: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for element in evidence.elements.iter().filter(|e| e.step == "each") {
        stored
            .entry(element.job.as_str())
            .or_default()
            .push(element.index);
    }
    let mut breaches = Vec::new();
    for spec in specs.iter().filter(|s| s.kind == Kind::Map) {
        if statuses.get(&spec.id).map(String::as_str) != Some("COMPLETED") {
            continue;
        }
        let n = spec.text.chars().count();
        let indices = stored.get(spec.id.as_str()).cloned().unwrap_or_default();
        let distinct: BTreeSet<i32> = indices.iter().copied().collect();
        let whole: BTreeSet<i32> = (0..n as i32).collect();
        if indices.len() != n || distinct != whole {
            breaches.push(Breach {
                invariant: ITEMS,
                detail: format!(
                    "job {}: {} rows for a list of {n} ({} distinct positions)",
                    spec.id,
                    indices.len(),
                    distinct.len()
                ),
            });
        }
        if evidence.outputs.get(&spec.id) != Some(&(n as i64)) {
            breaches.push(Breach {
                invariant: ITEMS,
                detail: format!(
                    "job {}: its output lists {:?} vectors for a list of {n}",
                    spec.id,
                    evidence.outputs.get(&spec.id)
                ),
            });
        }
    }
    breaches
}
