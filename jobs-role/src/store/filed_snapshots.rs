//! The digests this node saw filed in `workflow_snapshot`, so a submission of a
//! workflow the node has submitted before sends its digest alone, not the snapshot
//! (100 KB and more with descriptors) for PostgreSQL to parse and find filed again.
//!
//! A digest is remembered once a submission naming it commits (its row holds the
//! snapshot in place through the foreign key). The memory may go stale: the pruner
//! deletes a snapshot once no job names it. Then the foreign key refuses the row, and
//! the submission forgets the digest and is sent again with its snapshot
//! ([`is_missing_snapshot`]); a stale entry costs one retry, never a job.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// How many digests a node remembers; past it the memory starts over (a node serving
/// more distinct workflows than this sends their snapshots as before).
const REMEMBERED_DIGESTS: usize = 4_096;

/// The name of V21's foreign key from a job to its snapshot.
const SNAPSHOT_KEY: &str = "workflow_run_snapshot";

/// Digests known to be filed, shared by the clones of a store.
#[derive(Debug, Default, Clone)]
pub(crate) struct FiledSnapshots {
    digests: Arc<Mutex<HashSet<Arc<str>>>>,
}

impl FiledSnapshots {
    /// True when a submission naming `digest` committed on this node (and the digest
    /// was not forgotten since).
    pub(crate) fn knows(&self, digest: &str) -> bool {
        self.lock().contains(digest)
    }

    /// Remembers `digest` as filed: a submission naming it committed.
    pub(crate) fn remember(&self, digest: &Arc<str>) {
        let mut digests = self.lock();
        if digests.len() >= REMEMBERED_DIGESTS && !digests.contains(digest) {
            digests.clear();
        }
        digests.insert(digest.clone());
    }

    /// Forgets every digest: a submission sent without its snapshot found one of them
    /// gone (the pruner deleted it), and others may be gone with it.
    pub(crate) fn forget_all(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<Arc<str>>> {
        // A panic while holding the lock cannot leave the set half-changed (each
        // operation is one call on it), so a poisoned lock is taken as it is.
        self.digests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// True when PostgreSQL refused a job row because the snapshot it names is not filed
/// (V21's foreign key): a submission sent without its snapshot, whose digest the
/// pruner deleted since the node saw it filed.
pub(crate) fn is_missing_snapshot(error: &super::StoreError) -> bool {
    match error {
        super::StoreError::Data { sqlstate, message } => {
            sqlstate == "23503" && message.contains(SNAPSHOT_KEY)
        }
        super::StoreError::Database(e) => e.as_db_error().is_some_and(|db| {
            db.code() == &tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION
                && db.constraint() == Some(SNAPSHOT_KEY)
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_until_forgotten() {
        let filed = FiledSnapshots::default();
        let digest: Arc<str> = Arc::from("ab");
        assert!(!filed.knows("ab"));
        filed.remember(&digest);
        assert!(filed.clone().knows("ab"), "clones share the memory");
        filed.forget_all();
        assert!(!filed.knows("ab"));
    }

    #[test]
    fn starts_over_past_its_bound() {
        let filed = FiledSnapshots::default();
        for i in 0..REMEMBERED_DIGESTS {
            filed.remember(&Arc::from(format!("{i:x}")));
        }
        assert!(filed.knows("0"));
        filed.remember(&Arc::from("new"));
        assert!(filed.knows("new"));
        assert!(!filed.knows("0"), "the memory started over");
        assert!(filed.lock().len() <= REMEMBERED_DIGESTS);
    }

    #[test]
    fn a_missing_snapshot_is_told_by_its_key() {
        let refused = crate::store::StoreError::Data {
            sqlstate: "23503".into(),
            message: "insert or update on table \"workflow_run\" violates foreign key constraint \"workflow_run_snapshot\"".into(),
        };
        assert!(is_missing_snapshot(&refused));
        let other = crate::store::StoreError::Data {
            sqlstate: "23505".into(),
            message: "workflow_run_snapshot".into(),
        };
        assert!(!is_missing_snapshot(&other));
    }
}
