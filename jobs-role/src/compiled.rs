//! Compiled workflows, reused across the submissions and jobs of the same definition.
//!
//! Compiling decodes the envelope's descriptor set and verifies every rule; a node
//! taking thousands of submissions of one workflow, and running its jobs, should pay
//! for that once. One cache per node serves the submitter and the worker. Entries are
//! keyed by the definition's [`snapshot_digest`], which the submitter also stores in
//! the job row, so the worker finds a workflow submitted on its own node by the digest
//! its claim answers, without fetching the snapshot. A snapshot the store knows by
//! another digest (one PostgreSQL computed: see migration V8) is fetched and compiled
//! once, then remembered under that digest too.
//!
//! The cache is bounded by what user input can grow: at most [`MAX_ENTRIES`]
//! definitions and [`MAX_BYTES`] of definition text (a compiled workflow is of the
//! order of its envelope), evicting the least recently used entry first. A definition
//! larger than the byte bound on its own is compiled and not kept.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use sha2::{Digest, Sha256};
use workflow::{CompiledWorkflow, Findings};

/// Most definitions kept.
pub const MAX_ENTRIES: usize = 256;
/// Most bytes of definition text (its JSON) kept. A compiled workflow takes up to
/// about 25 times its definition text in memory (the decoded descriptor pool), so the
/// cache holds at most some 200 MiB.
pub const MAX_BYTES: usize = 8 * 1024 * 1024;
/// Most other digests one definition is remembered under (rows whose digest
/// PostgreSQL computed: one per form the snapshot was written in).
const MAX_ALIASES: usize = 4;

/// How every [`snapshot_digest`] begins.
pub const SNAPSHOT_DIGEST_PREFIX: &str = "sha256-compact:";

/// What a submission's snapshot is known by in the store: `sha256-compact:` and the
/// SHA-256 (hex) of the definition's compact JSON text. The prefix keeps it apart from
/// the digests PostgreSQL computes (bare hex of the jsonb text), so two different
/// snapshots can never share a digest. Also returns the text's length, which the cache
/// counts against [`MAX_BYTES`].
pub fn snapshot_digest(definition: &Value) -> (Arc<str>, usize) {
    let text = definition.to_string();
    let hash = Sha256::digest(text.as_bytes());
    let mut digest = String::with_capacity(SNAPSHOT_DIGEST_PREFIX.len() + 64);
    digest.push_str(SNAPSHOT_DIGEST_PREFIX);
    for byte in hash.iter() {
        // Writing to a String cannot fail.
        let _ = write!(digest, "{byte:02x}");
    }
    (digest.into(), text.len())
}

/// A definition's compiled workflow and the digest its job rows carry.
#[derive(Clone)]
pub struct Compiled {
    /// The compiled, verified workflow.
    pub workflow: Arc<CompiledWorkflow>,
    /// The definition's [`snapshot_digest`].
    pub digest: Arc<str>,
}

struct Entry {
    compiled: Arc<CompiledWorkflow>,
    /// Digests the store knows this definition by besides its own.
    aliases: Vec<String>,
    bytes: usize,
    last_used: u64,
}

#[derive(Default)]
struct Entries {
    /// By the definition's [`snapshot_digest`].
    by_digest: HashMap<Arc<str>, Entry>,
    bytes: usize,
    clock: u64,
}

impl Entries {
    fn evict_least_recently_used(&mut self) {
        let oldest = self
            .by_digest
            .iter()
            .min_by_key(|(_, entry)| entry.last_used)
            .map(|(digest, _)| digest.clone());
        if let Some(gone) = oldest.and_then(|digest| self.by_digest.remove(&digest)) {
            self.bytes -= gone.bytes;
        }
    }

    fn touch(&mut self, digest: &str) -> Option<Arc<CompiledWorkflow>> {
        self.clock += 1;
        let now = self.clock;
        let entry = self.by_digest.get_mut(digest)?;
        entry.last_used = now;
        Some(entry.compiled.clone())
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

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A poisoned lock only means a panic mid-insert; entries are still whole.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The compiled workflow of `definition`, compiled on a miss.
    pub fn get_or_compile(&self, definition: &Value) -> Result<Compiled, Findings> {
        let (digest, bytes) = snapshot_digest(definition);
        self.get_or_compile_as(definition, digest, bytes)
    }

    fn get_or_compile_as(
        &self,
        definition: &Value,
        digest: Arc<str>,
        bytes: usize,
    ) -> Result<Compiled, Findings> {
        if let Some(workflow) = self.entries().touch(&digest) {
            return Ok(Compiled { workflow, digest });
        }
        let workflow = Arc::new(CompiledWorkflow::compile(definition)?);
        let compiled = Compiled {
            workflow: workflow.clone(),
            digest: digest.clone(),
        };
        if bytes > self.max_bytes {
            return Ok(compiled);
        }
        let mut entries = self.entries();
        if entries.by_digest.contains_key(&digest) {
            // Compiled beside us meanwhile.
            return Ok(compiled);
        }
        while entries.by_digest.len() >= self.max_entries || entries.bytes + bytes > self.max_bytes
        {
            if entries.by_digest.is_empty() {
                break;
            }
            entries.evict_least_recently_used();
        }
        entries.clock += 1;
        let last_used = entries.clock;
        entries.bytes += bytes;
        entries.by_digest.insert(
            digest,
            Entry {
                compiled: workflow,
                aliases: Vec::new(),
                bytes,
                last_used,
            },
        );
        Ok(compiled)
    }

    /// [`Self::get_or_compile`], compiling a miss on tokio's blocking pool: a large
    /// envelope takes seconds to compile and verify, which must not stall the async
    /// threads (nor, in the worker, the lease renewal beside it). Compiling is bounded
    /// by the envelope's static limits, so the blocking thread always finishes.
    pub async fn get_or_compile_off_thread(
        self: &Arc<Self>,
        definition: &Value,
    ) -> Result<Compiled, Findings> {
        let (digest, bytes) = snapshot_digest(definition);
        if let Some(workflow) = self.entries().touch(&digest) {
            return Ok(Compiled { workflow, digest });
        }
        let (cache, definition) = (self.clone(), definition.clone());
        match tokio::task::spawn_blocking(move || {
            cache.get_or_compile_as(&definition, digest, bytes)
        })
        .await
        {
            Ok(compiled) => compiled,
            // The compile task panicked (a defect): say so as a finding, never crash.
            Err(join) => Err(Findings(vec![workflow::Finding {
                step: None,
                path: "$".into(),
                message: format!("compiling the workflow failed: {join}"),
            }])),
        }
    }

    /// The compiled workflow of the snapshot with `digest` (the store's
    /// `definition_digest`), when this node submitted or compiled it before: its own
    /// digest is a map lookup; another digest it was remembered under a scan of at
    /// most [`MAX_ENTRIES`] entries, far cheaper than receiving and parsing the
    /// snapshot.
    pub fn get_by_digest(&self, digest: &str) -> Option<Arc<CompiledWorkflow>> {
        let mut entries = self.entries();
        if let Some(hit) = entries.touch(digest) {
            return Some(hit);
        }
        let now = entries.clock;
        let entry = entries
            .by_digest
            .values_mut()
            .find(|e| e.aliases.iter().any(|alias| alias == digest))?;
        entry.last_used = now;
        Some(entry.compiled.clone())
    }

    /// Records that the definition kept under `digest` is also known to the store as
    /// `store_digest` (a digest PostgreSQL computed), so the next job of the same
    /// snapshot finds it by [`Self::get_by_digest`].
    pub fn remember_digest(&self, digest: &str, store_digest: &str) {
        if digest == store_digest {
            return;
        }
        let mut entries = self.entries();
        if let Some(entry) = entries.by_digest.get_mut(digest) {
            if entry.aliases.iter().any(|alias| alias == store_digest) {
                return;
            }
            if entry.aliases.len() >= MAX_ALIASES {
                entry.aliases.remove(0);
            }
            entry.aliases.push(store_digest.to_owned());
        }
    }

    /// Definitions and bytes kept.
    #[cfg(test)]
    fn size(&self) -> (usize, usize) {
        let entries = self.entries();
        (entries.by_digest.len(), entries.bytes)
    }
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
        let kept = |i: usize| cache.get_by_digest(&snapshot_digest(&definition(i)).0);
        assert!(kept(0).is_some(), "the hot entry survived");
        assert!(kept(1).is_none(), "the coldest entry went");
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

    #[test]
    fn a_definition_is_found_by_its_own_digest_and_by_the_digests_it_was_remembered_under() {
        let cache = CompiledCache::default();
        let compiled = cache.get_or_compile(&definition(0)).unwrap();
        assert_eq!(compiled.digest, snapshot_digest(&definition(0)).0);
        assert!(compiled.digest.starts_with("sha256-compact:"));
        assert!(cache.get_by_digest(&compiled.digest).is_some());

        let from_postgres = "ab".repeat(32);
        assert!(cache.get_by_digest(&from_postgres).is_none());
        cache.remember_digest(&compiled.digest, &from_postgres);
        let hit = cache.get_by_digest(&from_postgres).expect("remembered");
        assert!(Arc::ptr_eq(&hit, &compiled.workflow));

        // A bounded number of aliases: the oldest goes first.
        for i in 0..MAX_ALIASES {
            cache.remember_digest(&compiled.digest, &format!("{i:064}"));
        }
        assert!(cache.get_by_digest(&from_postgres).is_none());
        assert!(
            cache
                .get_by_digest(&format!("{:064}", MAX_ALIASES - 1))
                .is_some()
        );
        // Another definition never answers for this one's digest.
        let other = cache.get_or_compile(&definition(1)).unwrap();
        assert_ne!(other.digest, compiled.digest);
    }
}
