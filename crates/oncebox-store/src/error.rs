//! Errors of the store, split by what the caller should do next.

use oncebox_core::intent::InvalidIntent;

/// A database or migration failure. Usually transient (connection lost, server restarting):
/// the caller may retry the whole transaction.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database answered with an error or could not be reached.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// A schema migration failed.
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The database holds migrations this binary does not know: a newer oncebox migrated it.
    #[error(
        "the database's schema is at migration {database}, newer than this binary knows \
         ({binary}): a newer oncebox migrated it. Run that newer oncebox, or — only if its \
         release notes say older binaries keep working — start this one with \
         --allow-newer-schema (docs/operations.md, \"Rolling upgrades\")"
    )]
    NewerSchema {
        /// The database's newest migration.
        database: i64,
        /// This binary's newest.
        binary: i64,
    },
}

/// Why a submit did not return an intent.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// A field is not acceptable; nothing was written. Never retry as is.
    #[error("invalid intent: {0}")]
    Invalid(#[from] InvalidIntent),
    /// The key is already used by this tenant for a different request; nothing was written.
    /// Never retry as is: choose another key, or resend the original request.
    #[error(
        "idempotency key {idempotency_key:?} already names intent {existing_id} with request hash \
         {existing_hash}; this request's hash is {submitted_hash}"
    )]
    KeyConflict {
        /// The key.
        idempotency_key: String,
        /// The id of the intent that owns the key.
        existing_id: i64,
        /// The request hash stored with that intent.
        existing_hash: String,
        /// The hash of the refused request.
        submitted_hash: String,
    },
    /// The database failed; the caller's transaction should be rolled back and may be retried.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for SubmitError {
    fn from(e: sqlx::Error) -> Self {
        SubmitError::Store(StoreError::Database(e))
    }
}

impl SubmitError {
    /// The field at fault, for invalid input.
    pub fn field(&self) -> Option<&str> {
        match self {
            SubmitError::Invalid(e) => Some(&e.field),
            SubmitError::KeyConflict { .. } => Some("idempotency_key"),
            SubmitError::Store(_) => None,
        }
    }
}
