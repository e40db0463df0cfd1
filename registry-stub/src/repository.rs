//! The `WorkflowRepository` extension point: stored workflows by name.
//!
//! The registry keeps workflows as files, one `NAME.json` each in its configured
//! directory, loaded at start-up and written atomically and durably: a uniquely named
//! temporary file (`.NAME.<uuid>.tmp`) is written and fsynced, renamed into place, and
//! the directory is fsynced. Puts are serialised, and the in-memory map is updated
//! under the same lock only once the file is durable, so the workflow served is always
//! the one a restart would load. Co-mounted roles contribute workflows in memory;
//! those cannot be replaced by `put-workflow`. Names are `[a-z0-9][a-z0-9._-]{0,199}`,
//! so a name is always a safe file name.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde_json::Value;
use workflow::outbound::OutboundPolicy;
use workflow::{CompiledWorkflow, Findings};

/// Where a stored workflow comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkflowSource {
    /// A file in the registry's directory.
    File,
    /// Contributed in memory by the named role.
    Role(String),
}

impl WorkflowSource {
    /// `file`, or the contributing role's name.
    pub fn label(&self) -> &str {
        match self {
            WorkflowSource::File => "file",
            WorkflowSource::Role(role) => role,
        }
    }
}

/// A stored workflow.
#[derive(Debug, Clone)]
pub struct StoredWorkflow {
    /// Its name (also its envelope's `name`).
    pub name: String,
    /// The envelope, as stored.
    pub envelope: Value,
    /// Where it comes from.
    pub source: WorkflowSource,
    /// How many steps it declares.
    pub steps: usize,
}

/// Why a workflow could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum RepositoryError {
    /// The envelope does not compile.
    #[error(transparent)]
    Findings(#[from] Findings),
    /// The name cannot be a stored workflow's name.
    #[error("workflow name '{name}' {reason}")]
    InvalidName {
        /// The offending name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A role contributed a workflow of that name.
    #[error("workflow '{name}' is contributed by the {role} role and cannot be replaced")]
    Contributed {
        /// The name.
        name: String,
        /// The contributing role.
        role: String,
    },
    /// The directory or a file could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// Which path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Resolves stored workflows by name; the registry role provides it to co-mounted roles.
pub trait WorkflowRepository: Send + Sync {
    /// The workflow stored under `name`.
    fn resolve(&self, name: &str) -> Option<StoredWorkflow>;
    /// Every stored workflow, by name.
    fn list(&self) -> Vec<StoredWorkflow>;
    /// Every stored workflow's name (what a did-you-mean compares; no envelope copied).
    fn names(&self) -> Vec<String> {
        self.list().into_iter().map(|stored| stored.name).collect()
    }
    /// Adds a workflow a role ships, in memory; it must compile.
    fn contribute(&self, role: &str, envelope: Value) -> Result<String, RepositoryError>;
}

/// Checks a stored workflow's name: `[a-z0-9][a-z0-9._-]{0,199}`.
pub fn check_name(name: &str) -> Result<(), RepositoryError> {
    let invalid = |reason: &str| RepositoryError::InvalidName {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    let mut chars = name.chars();
    match chars.next() {
        None => return Err(invalid("is empty")),
        Some(c) if !(c.is_ascii_lowercase() || c.is_ascii_digit()) => {
            return Err(invalid("must start with a lower-case letter or a digit"));
        }
        _ => {}
    }
    if name.len() > 200 {
        return Err(invalid("is longer than 200 characters"));
    }
    if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
    {
        return Err(invalid("may contain only a-z, 0-9, '.', '_' and '-'"));
    }
    Ok(())
}

/// Compiles a workflow to store it: as a new workflow
/// ([`CompiledWorkflow::compile_new`]) for a put or a role's contribution.
/// The outbound policy is one of the checks: a workflow calling what it forbids is
/// not stored.
fn compile_named(
    envelope: &Value,
    outbound: &OutboundPolicy,
    stored: &BTreeMap<String, StoredWorkflow>,
) -> Result<(String, usize), RepositoryError> {
    let compiled = CompiledWorkflow::compile_new(&with_children(envelope, stored)?)?;
    let breaches = outbound.findings(&compiled);
    if !breaches.is_empty() {
        return Err(Findings(breaches).into());
    }
    check_name(&compiled.name)?;
    Ok((compiled.name.clone(), compiled.steps.len()))
}

/// Compiles a file stored before: it needs only to run, so a check added since
/// ([`CompiledWorkflow::strict_findings`]) is a warning, not a reason to stop serving
/// it (submissions by its name are still held to it).
fn compile_loaded(
    envelope: &Value,
    path: &Path,
    outbound: &OutboundPolicy,
    stored: &BTreeMap<String, StoredWorkflow>,
) -> Result<(String, usize), RepositoryError> {
    let compiled = CompiledWorkflow::compile(&with_children(envelope, stored)?)?;
    check_name(&compiled.name)?;
    for finding in compiled
        .strict_findings()
        .into_iter()
        .chain(outbound.findings(&compiled))
    {
        tracing::warn!(path = %path.display(), %finding, "a stored workflow fails a check new workflows must pass; new jobs of it are refused until it is fixed");
    }
    Ok((compiled.name.clone(), compiled.steps.len()))
}

/// `envelope` with its child workflows' snapshots filed in from `stored`
/// ([`workflow::resolve`]): what is compiled to check it (the envelope stored is the
/// one given; a job snapshots its children when it is submitted).
fn with_children(
    envelope: &Value,
    stored: &BTreeMap<String, StoredWorkflow>,
) -> Result<Value, RepositoryError> {
    if !workflow::resolve::has_child_steps(envelope) {
        return Ok(envelope.clone());
    }
    let names: Vec<String> = stored.keys().cloned().collect();
    let lookup = |name: &str| stored.get(name).map(|s| s.envelope.clone());
    Ok(workflow::resolve::resolve_children(
        envelope,
        &lookup,
        &names,
        workflow::compile::MAX_CHILD_DEPTH,
    )?)
}

/// The registry's store: files plus contributions.
pub struct FileWorkflowRepository {
    dir: PathBuf,
    entries: Arc<RwLock<BTreeMap<String, StoredWorkflow>>>,
    /// Held for a whole put (file written, renamed, directory synced, map updated):
    /// without it two puts of one name could finish their renames and their map
    /// updates in different orders, serving one version while the file holds the
    /// other. Puts are rare and short, so one lock for every name costs nothing. The
    /// whole put runs on one blocking task that holds it, so a caller that goes away
    /// mid-put (a client disconnecting, a timeout) cannot leave the write done and the
    /// served copy stale.
    writer: Arc<std::sync::Mutex<()>>,
    /// What a stored or contributed workflow may call.
    outbound: Arc<OutboundPolicy>,
}

impl FileWorkflowRepository {
    /// Opens (creating when missing) `dir` and loads every `NAME.json` in it. A file
    /// that is not a valid workflow is skipped with a warning, not fatal. No outbound
    /// policy: see [`FileWorkflowRepository::open_with`].
    pub async fn open(dir: &Path) -> Result<FileWorkflowRepository, RepositoryError> {
        Self::open_with(dir, Arc::new(OutboundPolicy::unrestricted())).await
    }

    /// As [`FileWorkflowRepository::open`], holding every put and contribution to
    /// `outbound` (a stored file that breaks it still loads, with a warning: its jobs
    /// fail at the step the policy forbids, and new submissions of it are refused).
    pub async fn open_with(
        dir: &Path,
        outbound: Arc<OutboundPolicy>,
    ) -> Result<FileWorkflowRepository, RepositoryError> {
        let io = |action, source| RepositoryError::Io {
            action,
            path: dir.to_owned(),
            source,
        };
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| io("creating", e))?;
        let mut entries = BTreeMap::new();
        // Workflows that start others, loaded once those are: a pass per level.
        let mut parents: Vec<(Value, PathBuf, String)> = Vec::new();
        let mut listing = tokio::fs::read_dir(dir)
            .await
            .map_err(|e| io("reading", e))?;
        while let Some(entry) = listing.next_entry().await.map_err(|e| io("reading", e))? {
            let path = entry.path();
            let Some(stem) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".json"))
            else {
                continue;
            };
            let loaded = async {
                let bytes = tokio::fs::read(&path).await.map_err(|e| e.to_string())?;
                let envelope: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
                if workflow::resolve::has_child_steps(&envelope) {
                    // Checked once the workflows it starts are loaded.
                    return Ok(Err((envelope, path.clone(), stem.to_owned())));
                }
                let (name, steps) = compile_loaded(&envelope, &path, &outbound, &BTreeMap::new())
                    .map_err(|e| e.to_string())?;
                if name != stem {
                    return Err(format!("its workflow is named '{name}', not '{stem}'"));
                }
                Ok(Ok(StoredWorkflow {
                    name,
                    envelope,
                    source: WorkflowSource::File,
                    steps,
                }))
            };
            match loaded.await {
                Ok(Ok(stored)) => {
                    entries.insert(stored.name.clone(), stored);
                }
                Ok(Err(parent)) => parents.push(parent),
                Err(reason) => {
                    tracing::warn!(path = %path.display(), %reason, "skipping a stored workflow that does not load")
                }
            }
        }
        for _ in 0..=workflow::compile::MAX_CHILD_DEPTH {
            let before = parents.len();
            let mut waiting = Vec::new();
            for (envelope, path, stem) in std::mem::take(&mut parents) {
                match compile_loaded(&envelope, &path, &outbound, &entries) {
                    Ok((name, steps)) if name == stem => {
                        let stored = StoredWorkflow {
                            name: name.clone(),
                            envelope,
                            source: WorkflowSource::File,
                            steps,
                        };
                        entries.insert(name, stored);
                    }
                    Ok((name, _)) => {
                        tracing::warn!(path = %path.display(), reason = %format!("its workflow is named '{name}', not '{stem}'"), "skipping a stored workflow that does not load")
                    }
                    Err(reason) => waiting.push((envelope, path, stem, reason)),
                }
            }
            let progress = waiting.len() < before;
            if !progress {
                for (_, path, _, reason) in waiting {
                    tracing::warn!(path = %path.display(), %reason, "skipping a stored workflow that does not load");
                }
                break;
            }
            parents = waiting
                .into_iter()
                .map(|(envelope, path, stem, _)| (envelope, path, stem))
                .collect();
        }
        Ok(FileWorkflowRepository {
            dir: dir.to_owned(),
            entries: Arc::new(RwLock::new(entries)),
            writer: Arc::new(std::sync::Mutex::new(())),
            outbound,
        })
    }

    /// Compiles and verifies `envelope` as [`Self::put`] would, storing nothing;
    /// returns its name and whether a put would make it (no workflow of that name yet).
    /// The map is copied first: compiling (up to megabytes of descriptors) runs on a
    /// blocking thread, never under the lock every read of a workflow takes.
    pub async fn check(&self, envelope: Value) -> Result<(String, bool), RepositoryError> {
        let entries = self.read_entries().clone();
        let outbound = self.outbound.clone();
        let checked = tokio::task::spawn_blocking(move || {
            let (name, _) = compile_named(&envelope, &outbound, &entries)?;
            match entries.get(&name).map(|s| &s.source) {
                Some(WorkflowSource::Role(role)) => Err(RepositoryError::Contributed {
                    name,
                    role: role.clone(),
                }),
                stored => Ok((name, stored.is_none())),
            }
        });
        checked.await.map_err(|e| RepositoryError::Io {
            action: "checking",
            path: self.dir.clone(),
            source: std::io::Error::other(e),
        })?
    }

    /// Compiles, verifies and stores `envelope` under its own name; returns the name
    /// and whether it was new. When it returns `Ok`, the file is on disk (fsynced,
    /// directory included) and the same version is served.
    pub async fn put(&self, envelope: Value) -> Result<(String, bool), RepositoryError> {
        let (name, steps) = compile_named(&envelope, &self.outbound, &self.read_entries())?;
        let path = self.dir.join(format!("{name}.json"));
        let bytes = serde_json::to_vec_pretty(&envelope).map_err(|e| RepositoryError::Io {
            action: "encoding",
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        // A unique temporary name, so that even a writer outside this lock (another
        // process over the same directory) never renames our half-written file.
        let temporary = self
            .dir
            .join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4()));
        let (dir, writer, entries) = (self.dir.clone(), self.writer.clone(), self.entries.clone());
        let stored = StoredWorkflow {
            name: name.clone(),
            envelope,
            source: WorkflowSource::File,
            steps,
        };
        let target = path.clone();
        // Lock, write durably and update the served copy on one blocking task: it runs
        // to the end even when this future is dropped.
        let put = tokio::task::spawn_blocking(move || {
            // A poisoned lock means a put panicked; the files and the map are whole.
            let _writer = writer.lock().unwrap_or_else(|p| p.into_inner());
            let contributed = entries
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&stored.name)
                .map(|s| s.source.clone());
            if let Some(WorkflowSource::Role(role)) = contributed {
                return Err(RepositoryError::Contributed {
                    name: stored.name,
                    role,
                });
            }
            write_durably(&dir, &temporary, &target, &bytes)?;
            let name = stored.name.clone();
            let created = entries
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.clone(), stored)
                .is_none();
            Ok((name, created))
        });
        put.await.map_err(|e| RepositoryError::Io {
            action: "writing",
            path,
            source: std::io::Error::other(e),
        })?
    }

    fn write_entries(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, StoredWorkflow>> {
        // A poisoned lock means a panic mid-insert; the map itself is still consistent.
        self.entries.write().unwrap_or_else(|p| p.into_inner())
    }

    fn read_entries(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, StoredWorkflow>> {
        self.entries.read().unwrap_or_else(|p| p.into_inner())
    }
}

/// Writes `bytes` to `temporary`, fsyncs it, renames it to `path` and fsyncs `dir`, so
/// the rename itself survives a crash. The temporary file is removed on failure.
fn write_durably(
    dir: &Path,
    temporary: &Path,
    path: &Path,
    bytes: &[u8],
) -> Result<(), RepositoryError> {
    let io = |action: &'static str, path: &Path| {
        let path = path.to_owned();
        move |source| RepositoryError::Io {
            action,
            path,
            source,
        }
    };
    let written = (|| {
        let mut file = std::fs::File::create(temporary).map_err(io("writing", temporary))?;
        file.write_all(bytes).map_err(io("writing", temporary))?;
        file.sync_all().map_err(io("syncing", temporary))?;
        std::fs::rename(temporary, path).map_err(io("renaming into", path))
    })();
    if written.is_err() {
        // Best effort: the error that matters is the one being returned.
        let _ = std::fs::remove_file(temporary);
    }
    written?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("syncing the directory", dir))
}

impl WorkflowRepository for FileWorkflowRepository {
    fn resolve(&self, name: &str) -> Option<StoredWorkflow> {
        self.read_entries().get(name).cloned()
    }

    fn list(&self) -> Vec<StoredWorkflow> {
        self.read_entries().values().cloned().collect()
    }

    fn names(&self) -> Vec<String> {
        self.read_entries().keys().cloned().collect()
    }

    fn contribute(&self, role: &str, envelope: Value) -> Result<String, RepositoryError> {
        let (name, steps) = compile_named(&envelope, &self.outbound, &self.read_entries())?;
        let stored = StoredWorkflow {
            name: name.clone(),
            envelope,
            source: WorkflowSource::Role(role.to_owned()),
            steps,
        };
        self.write_entries().insert(name.clone(), stored);
        Ok(name)
    }
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn names_are_safe_file_names() {
        for good in ["embed-text", "a", "0.v2_x", &"a".repeat(200)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Embed",
            "-x",
            ".hidden",
            "../etc/passwd",
            "a/b",
            "a b",
            "é",
            &"a".repeat(201),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
