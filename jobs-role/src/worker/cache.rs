//! Compiled workflows, reused across the jobs that snapshot the same definition.
//!
//! Compiling decodes the envelope's descriptor set and verifies every rule; a fleet
//! running thousands of jobs of one workflow should pay for that once. Entries are
//! keyed by a hash of the snapshot and checked for equality, so two different
//! definitions never share an entry; the cache is bounded and simply cleared when full.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use workflow::{CompiledWorkflow, Findings};

const CAPACITY: usize = 256;

/// Definitions sharing a hash, each with its compiled workflow.
type Bucket = Vec<(Value, Arc<CompiledWorkflow>)>;

#[derive(Default)]
pub(super) struct CompiledCache {
    entries: Mutex<HashMap<u64, Bucket>>,
}

impl CompiledCache {
    pub(super) fn get_or_compile(
        &self,
        definition: &Value,
    ) -> Result<Arc<CompiledWorkflow>, Findings> {
        let mut hasher = DefaultHasher::new();
        definition.to_string().hash(&mut hasher);
        let key = hasher.finish();
        {
            // A poisoned lock only means a panic mid-insert; entries are still whole.
            let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((_, compiled)) = entries
                .get(&key)
                .and_then(|bucket| bucket.iter().find(|(d, _)| d == definition))
            {
                return Ok(compiled.clone());
            }
        }
        let compiled = Arc::new(CompiledWorkflow::compile(definition)?);
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= CAPACITY {
            entries.clear();
        }
        entries
            .entry(key)
            .or_default()
            .push((definition.clone(), compiled.clone()));
        Ok(compiled)
    }
}
