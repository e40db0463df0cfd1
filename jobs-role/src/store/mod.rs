//! The store: the only module that talks to PostgreSQL.
//!
//! Schema changes are the plain SQL files under `migrations/` at the workspace
//! root, embedded at build time and applied with refinery at start-up. Every
//! statement the role runs is a named constant in [`sql`].

pub mod sql;

use tokio_postgres::Client;

mod embedded {
    refinery::embed_migrations!("../migrations");
}

/// What went wrong talking to PostgreSQL.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A schema migration failed to apply; the database is left at the last good version.
    #[error("applying the jobs schema migrations failed: {0}")]
    Migration(#[from] refinery::Error),
    /// A statement failed.
    #[error("database error: {0}")]
    Database(#[from] tokio_postgres::Error),
}

/// Applies every pending migration. Safe to call from many nodes at once: an advisory
/// lock serialises them, and applying an up-to-date schema is a no-op.
pub async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    client.execute(sql::LOCK_MIGRATIONS, &[]).await?;
    let applied = embedded::migrations::runner()
        .set_abort_divergent(true)
        .run_async(client)
        .await;
    // Release even when the migration failed, so a fixed node can retry at once.
    let released = client.execute(sql::UNLOCK_MIGRATIONS, &[]).await;
    applied?;
    released?;
    Ok(())
}
