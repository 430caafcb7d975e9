//! The storage layer's error type, and the mapping of sqlx errors onto it.

use super::*;

/// Everything that can go wrong in the storage layer; each message says what was being done and
/// includes the underlying error's text, so the underlying error is kept as a field (`cause`),
/// not exposed as `source()`: printers that walk the chain would print it twice.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A database operation failed.
    #[error("database: {context}: {cause}")]
    Database { context: String, cause: sqlx::Error },
    /// Applying the schema migrations failed.
    #[error("database: migrating the {engine:?} schema: {cause}")]
    Migrate {
        engine: Engine,
        cause: sqlx::migrate::MigrateError,
    },
    /// The database holds migrations this binary does not know: a newer `arena` migrated it.
    #[error(
        "this database was migrated by a newer arena (schema {found}; this arena knows up to {known}): run the \
         newer binary, or restore the backup taken before the upgrade"
    )]
    NewerSchema { found: i64, known: i64 },
    /// The database lacks migrations of this binary, and the command opening it does not
    /// upgrade (only `arena serve` does, at its start).
    #[error(
        "this database is at schema {found} and this arena's is {known}: `arena serve` of this arena upgrades it \
         at its start (back the database up first: an older arena cannot open it afterwards), or use the arena \
         that serves it now"
    )]
    OlderSchema { found: i64, known: i64 },
    /// A migration the database applied differs from this binary's file of it.
    #[error(
        "migration {version:04} ({description}) of this database differs from this arena's file of it: the file \
         changed after the database applied it, which a released arena never does; use the arena that migrated \
         the database, or restore the backup taken before it"
    )]
    ChangedMigration { version: i64, description: String },
    /// A file system operation (creating the SQLite file's directory) failed.
    #[error("storage: {context}: {cause}")]
    Io { context: String, cause: std::io::Error },
    /// The database URL names no supported engine.
    #[error("storage: unsupported database URL {0:?} (expected sqlite://PATH or postgres://...)")]
    UnsupportedUrl(String),
    /// The row already exists (duplicate team name or token, duplicate submission id) or is in a
    /// state that forbids the change.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The row to change does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The caller passed an argument the operation cannot accept.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A stored value could not be read back (unknown status, bad seed or metrics JSON).
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// A new submission's benchmark defines other rules or motions than the first submission of
    /// its version recorded: the file changed without a version bump; nothing was stored.
    #[error(
        "benchmark {benchmark}'s file changed since version {version} first ran a submission (its rules or motions \
         differ): results under one version must be comparable, so the organisers must bump its `version` (or \
         restore the file) before it takes new submissions"
    )]
    BenchmarkChanged { benchmark: String, version: u32 },
    /// A new submission's connect key already names a submission of its team (two connects
    /// with one key at once); nothing was stored.
    #[error("connect key {0:?} already names a submission of the team")]
    ConnectKeyTaken(String),
    /// A new submission would exceed a phase's quota ([`Quota`]); nothing was stored.
    #[error(
        "quota exceeded: {used} of {limit} submission(s) {}",
        if *.daily { "today (UTC)" } else { "in total" }
    )]
    QuotaExceeded {
        /// The limit that was reached.
        limit: u32,
        /// Submissions already counted against it.
        used: i64,
        /// The per-day limit (true) or the total one (false).
        daily: bool,
    },
}

impl StorageError {
    /// Whether trying again later may succeed: the database could not be reached, dropped the
    /// connection, or is shutting down or starting up (a PostgreSQL restart, a failover).
    pub fn is_transient(&self) -> bool {
        let StorageError::Database { cause, .. } = self else {
            return false;
        };
        match cause {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
            sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
            // SQLSTATE 08 (connection exception), 57P01-57P03 (admin shutdown, crash shutdown,
            // cannot connect now), 40001 and 40P01 (a serialization failure, a deadlock: the
            // transaction was rolled back and may be run again, as PostgreSQL asks); SQLite's
            // busy/locked come back as 5 and 6.
            sqlx::Error::Database(db) => db.code().is_some_and(|code| {
                code.starts_with("08")
                    || code.starts_with("57P")
                    || code == "40001"
                    || code == "40P01"
                    || code == "5"
                    || code == "6"
            }),
            _ => false,
        }
    }
}

/// Attaches "what was being done" to a sqlx error.
pub(super) trait Context<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, StorageError>;
}

impl<T> Context<T> for Result<T, sqlx::Error> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, StorageError> {
        self.map_err(|cause| StorageError::Database {
            context: context(),
            cause,
        })
    }
}

pub(super) fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error().is_some_and(|d| d.is_unique_violation())
}

pub(super) fn is_foreign_key_violation(e: &sqlx::Error) -> bool {
    e.as_database_error().is_some_and(|d| d.is_foreign_key_violation())
}
