//! Compiled workflows, reused across the submissions and jobs of the same definition.
//!
//! Compiling decodes the envelope's descriptor set and verifies every rule; a node
//! taking thousands of submissions of one workflow, and running its jobs, should pay
//! for that once. One cache per node serves the submitter and the worker. Entries are
//! keyed by a hash of the snapshot and checked for equality, so two different
//! definitions never share an entry.
//!
//! The cache is bounded by what user input can grow: at most [`MAX_ENTRIES`]
//! definitions and [`MAX_BYTES`] of definition text (a compiled workflow is of the
//! order of its envelope), evicting the least recently used entry first. A definition
//! larger than the byte bound on its own is compiled and not kept.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use workflow::{CompiledWorkflow, Findings};

/// Most definitions kept.
pub const MAX_ENTRIES: usize = 256;
/// Most bytes of definition text (its JSON) kept. A compiled workflow takes up to
/// about 25 times its definition text in memory (the decoded descriptor pool), so the
/// cache holds at most some 200 MiB.
pub const MAX_BYTES: usize = 8 * 1024 * 1024;

struct Entry {
    definition: Value,
    /// The snapshot digest the store knows this definition by, once a worker asked.
    digest: Option<String>,
    compiled: Arc<CompiledWorkflow>,
    bytes: usize,
    last_used: u64,
}

#[derive(Default)]
struct Entries {
    /// Definitions sharing a hash, each with its compiled workflow.
    by_hash: HashMap<u64, Vec<Entry>>,
    count: usize,
    bytes: usize,
    clock: u64,
}

impl Entries {
    fn evict_least_recently_used(&mut self) {
        let oldest = self
            .by_hash
            .iter()
            .flat_map(|(hash, bucket)| bucket.iter().map(move |e| (e.last_used, *hash)))
            .min();
        let Some((last_used, hash)) = oldest else {
            return;
        };
        if let Some(bucket) = self.by_hash.get_mut(&hash) {
            if let Some(at) = bucket.iter().position(|e| e.last_used == last_used) {
                let gone = bucket.swap_remove(at);
                self.count -= 1;
                self.bytes -= gone.bytes;
            }
            if bucket.is_empty() {
                self.by_hash.remove(&hash);
            }
        }
    }
}

/// The node's compiled workflows, bounded by count and bytes.
pub struct CompiledCache {
    entries: Mutex<Entries>,
    max_entries: usize,
    max_bytes: usize,
}

impl Default for CompiledCache {
    fn default() -> Self {
        CompiledCache::with_limits(MAX_ENTRIES, MAX_BYTES)
    }
}

impl CompiledCache {
    /// A cache keeping at most `max_entries` definitions and `max_bytes` of them.
    pub fn with_limits(max_entries: usize, max_bytes: usize) -> Self {
        CompiledCache {
            entries: Mutex::default(),
            max_entries,
            max_bytes,
        }
    }

    /// The compiled workflow of `definition`, compiled on a miss.
    pub fn get_or_compile(&self, definition: &Value) -> Result<Arc<CompiledWorkflow>, Findings> {
        if let Some(hit) = self.cached(definition) {
            return Ok(hit);
        }
        let text = definition.to_string();
        let key = hash_of(&text);
        let compiled = Arc::new(CompiledWorkflow::compile(definition)?);
        let bytes = text.len();
        if bytes > self.max_bytes {
            return Ok(compiled);
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        while entries.count >= self.max_entries || entries.bytes + bytes > self.max_bytes {
            if entries.count == 0 {
                break;
            }
            entries.evict_least_recently_used();
        }
        entries.clock += 1;
        let last_used = entries.clock;
        entries.count += 1;
        entries.bytes += bytes;
        entries.by_hash.entry(key).or_default().push(Entry {
            definition: definition.clone(),
            digest: None,
            compiled: compiled.clone(),
            bytes,
            last_used,
        });
        Ok(compiled)
    }

    /// [`Self::get_or_compile`], compiling a miss on tokio's blocking pool: a large
    /// envelope takes seconds to compile and verify, which must not stall the async
    /// threads (nor, in the worker, the lease renewal beside it). Compiling is bounded
    /// by the envelope's static limits, so the blocking thread always finishes.
    pub async fn get_or_compile_off_thread(
        self: &Arc<Self>,
        definition: &Value,
    ) -> Result<Arc<CompiledWorkflow>, Findings> {
        if let Some(hit) = self.cached(definition) {
            return Ok(hit);
        }
        let (cache, definition) = (self.clone(), definition.clone());
        match tokio::task::spawn_blocking(move || cache.get_or_compile(&definition)).await {
            Ok(compiled) => compiled,
            // The compile task panicked (a defect): say so as a finding, never crash.
            Err(join) => Err(Findings(vec![workflow::Finding {
                step: None,
                path: "$".into(),
                message: format!("compiling the workflow failed: {join}"),
            }])),
        }
    }

    /// The compiled workflow of `definition` when it is kept.
    fn cached(&self, definition: &Value) -> Option<Arc<CompiledWorkflow>> {
        let key = hash_of(&definition.to_string());
        // A poisoned lock only means a panic mid-insert; entries are still whole.
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.clock += 1;
        let now = entries.clock;
        let entry = entries
            .by_hash
            .get_mut(&key)
            .and_then(|bucket| bucket.iter_mut().find(|e| &e.definition == definition))?;
        entry.last_used = now;
        Some(entry.compiled.clone())
    }

    /// The compiled workflow of the snapshot with `digest` (the store's
    /// `definition_digest`), when a worker compiled it before. A scan of at most
    /// [`MAX_ENTRIES`] entries: far cheaper than receiving and parsing the snapshot.
    pub fn get_by_digest(&self, digest: &str) -> Option<Arc<CompiledWorkflow>> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.clock += 1;
        let now = entries.clock;
        let entry = entries
            .by_hash
            .values_mut()
            .flatten()
            .find(|e| e.digest.as_deref() == Some(digest))?;
        entry.last_used = now;
        Some(entry.compiled.clone())
    }

    /// Records that `definition` (kept already) has the store digest `digest`, so the
    /// next job of the same snapshot finds it by [`Self::get_by_digest`].
    pub fn remember_digest(&self, definition: &Value, digest: &str) {
        let key = hash_of(&definition.to_string());
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = entries
            .by_hash
            .get_mut(&key)
            .and_then(|bucket| bucket.iter_mut().find(|e| &e.definition == definition))
        {
            entry.digest = Some(digest.to_owned());
        }
    }

    /// Definitions and bytes kept.
    #[cfg(test)]
    fn size(&self) -> (usize, usize) {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        (entries.count, entries.bytes)
    }
}

fn hash_of(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use workflow::testkit::two_step_workflow;

    fn definition(i: usize) -> Value {
        let mut workflow = two_step_workflow("127.0.0.1:1");
        workflow["name"] = Value::String(format!("w{i}"));
        workflow
    }

    #[test]
    fn the_cache_keeps_at_most_max_entries_and_evicts_the_least_recently_used() {
        // The count bound alone (the fixture definitions would hit the byte bound first).
        let cache = CompiledCache::with_limits(MAX_ENTRIES, usize::MAX);
        cache.get_or_compile(&definition(0)).unwrap();
        for i in 1..MAX_ENTRIES + 20 {
            cache.get_or_compile(&definition(i)).unwrap();
            // Keep definition 0 hot: it must survive every eviction.
            cache.get_or_compile(&definition(0)).unwrap();
        }
        let (count, bytes) = cache.size();
        assert_eq!(count, MAX_ENTRIES);
        assert!(bytes > 0);
        let entries = cache.entries.lock().unwrap();
        let kept: Vec<String> = entries
            .by_hash
            .values()
            .flatten()
            .map(|e| e.definition["name"].as_str().unwrap().to_owned())
            .collect();
        assert!(kept.contains(&"w0".to_owned()), "the hot entry survived");
        assert!(!kept.contains(&"w1".to_owned()), "the coldest entry went");
    }

    #[test]
    fn the_cache_is_bounded_by_bytes_and_keeps_no_definition_larger_than_the_bound() {
        let one = definition(0).to_string().len();
        let cache = CompiledCache::with_limits(1000, one * 3 + one / 2);
        for i in 0..10 {
            cache.get_or_compile(&definition(i)).unwrap();
        }
        let (count, bytes) = cache.size();
        assert_eq!(count, 3, "three definitions fit the byte bound");
        assert!(bytes <= one * 3 + one / 2);

        let tiny = CompiledCache::with_limits(1000, one / 2);
        tiny.get_or_compile(&definition(0)).expect("still compiled");
        assert_eq!(tiny.size(), (0, 0), "too large to keep");
    }
}
