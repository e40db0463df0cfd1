//! What other roles say about stored workflows in `list-workflows`: the registry
//! provides a [`WorkflowNotesSlot`] while it mounts, and a role mounted after it (the
//! jobs role: which workflows are paused) fills it with its [`WorkflowNotes`]. Each
//! note is a JSON object whose fields join the workflow's summary.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use serde_json::Value;

/// The notes of one listing, by workflow name.
pub type Notes = HashMap<String, Value>;

/// A role's notes on stored workflows.
pub trait WorkflowNotes: Send + Sync {
    /// The notes now, by workflow name (empty when they cannot be read: a listing
    /// never fails for them).
    fn notes(&self) -> Pin<Box<dyn Future<Output = Notes> + Send + '_>>;
}

/// Where a role puts its notes, once.
#[derive(Clone, Default)]
pub struct WorkflowNotesSlot(Arc<OnceLock<Arc<dyn WorkflowNotes>>>);

impl WorkflowNotesSlot {
    /// Fills the slot; false when another role filled it first.
    pub fn fill(&self, notes: Arc<dyn WorkflowNotes>) -> bool {
        self.0.set(notes).is_ok()
    }

    /// The notes now (empty without a role's).
    pub async fn notes(&self) -> Notes {
        match self.0.get() {
            Some(notes) => notes.notes().await,
            None => Notes::new(),
        }
    }
}
