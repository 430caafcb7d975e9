//! One live server per replica id on a PostgreSQL database.
//!
//! A replica's id names its claims (`lease_owner`): a server takes back at once the episodes
//! its id holds when it starts (`Storage::recover_after_restart`) and renews them all. Two live
//! servers under one id would take each other's running episodes and renew each other's
//! leases, so an episode could run twice and a dead one's episodes never expire. SQLite is
//! guarded by its file lock (`state.rs`); on PostgreSQL each server holds a session-level
//! advisory lock keyed by its id on a connection of its own for as long as it runs. PostgreSQL
//! releases it when that connection ends, so a killed replica's lock goes with its process
//! (its socket closes), and a replica restarted at once under its id still starts at once:
//! [`ReplicaLock::acquire`] waits up to [`RELEASE_WAIT`] for the old connection to be gone
//! before it refuses. Advisory locks are per database, and need a direct connection (not a
//! transaction-pooling proxy, which would hand the session to others).

use sha2::{Digest, Sha256};
use sqlx::Connection;
use sqlx::postgres::PgConnection;
use std::time::Duration;

/// How long a starting server tries for its id's lock before it refuses to start: long enough
/// for PostgreSQL to end the session of a process that was just killed.
pub const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// How often the lock's connection is checked, and retaken after a lost connection.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// The advisory lock of a replica id on PostgreSQL, held until dropped.
#[derive(Debug)]
pub struct ReplicaLock {
    keeper: tokio::task::JoinHandle<()>,
}

impl Drop for ReplicaLock {
    fn drop(&mut self) {
        // The connection closes with the task, and PostgreSQL releases the lock.
        self.keeper.abort();
    }
}

/// Why a server could not take its replica id.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaLockError {
    #[error(
        "replica_id {0:?} is in use by another live arena server on this PostgreSQL database: two servers under one id would run the same episodes twice. Give each replica its own `replica_id` (--replica-id / ARENA_REPLICA_ID); a replica restarted under its id starts once the old process is gone"
    )]
    InUse(String),
    #[error("taking the lock of replica_id {id:?} on the database {url}: {cause}")]
    Database {
        id: String,
        url: String,
        cause: sqlx::Error,
    },
}

/// The advisory lock key of a replica id: the first 8 bytes of SHA-256 over a prefix and the
/// id (the prefix keeps the project's keys apart from other users of advisory locks).
pub fn lock_key(replica_id: &str) -> i64 {
    let digest = Sha256::digest(format!("mimicarena replica_id {replica_id}"));
    i64::from_be_bytes(digest[..8].try_into().expect("SHA-256 has 32 bytes"))
}

impl ReplicaLock {
    /// Takes the lock of `replica_id` on the PostgreSQL database at `url` (None for SQLite, whose
    /// file lock already allows one server), trying for [`RELEASE_WAIT`]. `shown`: the URL as
    /// messages may print it (password removed).
    pub async fn acquire(url: &str, shown: &str, replica_id: &str) -> Result<Option<Self>, ReplicaLockError> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Ok(None);
        }
        let key = lock_key(replica_id);
        let failed = |cause| ReplicaLockError::Database {
            id: replica_id.to_string(),
            url: shown.to_string(),
            cause,
        };
        let mut conn = PgConnection::connect(url).await.map_err(failed)?;
        let deadline = tokio::time::Instant::now() + RELEASE_WAIT;
        while !try_lock(&mut conn, key).await.map_err(failed)? {
            if tokio::time::Instant::now() >= deadline {
                return Err(ReplicaLockError::InUse(replica_id.to_string()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let keeper = tokio::spawn(keep(conn, url.to_string(), replica_id.to_string(), key));
        Ok(Some(ReplicaLock { keeper }))
    }
}

async fn try_lock(conn: &mut PgConnection, key: i64) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(key)
        .fetch_one(conn)
        .await
}

/// Holds the lock's connection; when it is lost (PostgreSQL restarted, the network cut), the
/// lock went with it: connects again and retakes it. Another server that took the id meanwhile
/// is reported on every try, as an error: the operator must stop one of them.
async fn keep(conn: PgConnection, url: String, replica_id: String, key: i64) {
    let mut held = Some(conn);
    let mut reported = false;
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        if let Some(conn) = held.as_mut() {
            if conn.ping().await.is_ok() {
                continue;
            }
            held = None;
            tracing::warn!("lost the database connection holding replica_id {replica_id:?}'s lock; retaking it");
        }
        let retaken = async {
            let mut conn = PgConnection::connect(&url).await?;
            let got = try_lock(&mut conn, key).await?;
            Ok::<_, sqlx::Error>(got.then_some(conn))
        }
        .await;
        match retaken {
            Ok(Some(conn)) => {
                tracing::info!("retook replica_id {replica_id:?}'s lock");
                held = Some(conn);
                reported = false;
            }
            Ok(None) => tracing::error!(
                "{} (it was taken while this server's lock connection was down: stop one of them)",
                ReplicaLockError::InUse(replica_id.clone())
            ),
            Err(e) if !reported => {
                tracing::warn!("retaking replica_id {replica_id:?}'s lock: {e} (trying again)");
                reported = true;
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys are stable (a restarted server must compute the same) and differ between ids.
    #[test]
    fn keys_are_stable_and_distinct() {
        assert_eq!(lock_key("r1"), lock_key("r1"));
        assert_ne!(lock_key("r1"), lock_key("r2"));
        assert_ne!(lock_key(""), lock_key("r1"));
    }
}
