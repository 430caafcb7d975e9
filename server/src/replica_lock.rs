//! One live server per replica id on a PostgreSQL database.
//!
//! A replica's id names its claims (`lease_owner`, with a nonce per process): a server takes
//! back at once the episodes its id holds when it starts (`Storage::recover_after_restart`) and
//! renews its own. Two live
//! servers under one id would take each other's running episodes and renew each other's
//! leases, so an episode could run twice and a dead one's episodes never expire. SQLite is
//! guarded by its file lock (`state.rs`); on PostgreSQL each server holds a session-level
//! advisory lock keyed by its id on a connection of its own for as long as it runs. PostgreSQL
//! releases it when that connection ends, so a killed replica's lock goes with its process
//! (its socket closes), and a replica restarted at once under its id still starts at once:
//! [`ReplicaLock::acquire`] waits up to [`RELEASE_WAIT`] for the old connection to be gone
//! before it refuses. A replica whose machine died or whose network was cut sends nothing, so
//! PostgreSQL learns of it from TCP keepalives, which each lock connection sets short for its
//! own session ([`KEEPALIVE`]: gone within about 11 s instead of the system's two hours);
//! [`RELEASE_WAIT`] outlasts that. Advisory locks are per database, and need a direct connection
//! (not a transaction-pooling proxy, which would hand the session to others).
//!
//! A server that loses its lock connection retakes the lock. Should another server have taken
//! the id meanwhile (started while the connection was down), the two would run the same
//! episodes: the one that lost it stops ([`ReplicaLock::taken`], awaited by `arena serve`).

use sha2::{Digest, Sha256};
use sqlx::Connection;
use sqlx::postgres::PgConnection;
use std::time::Duration;

/// How long a starting server tries for its id's lock before it refuses to start, and how long
/// a server that lost its lock connection is refused it before it concludes another server has
/// the id: longer than PostgreSQL takes to end the session of a process that was killed (at
/// once) or whose machine went silent ([`KEEPALIVE`]).
pub const RELEASE_WAIT: Duration = Duration::from_secs(15);

/// The lock session's TCP keepalives on PostgreSQL's side (idle seconds, interval, probes), set
/// by the lock's connection for itself: a peer that went silent is dropped after about
/// 5 + 2 × 3 = 11 s. Ignored over a Unix socket, where a dead peer's socket closes anyway.
const KEEPALIVE: (u32, u32, u32) = (5, 2, 3);

/// How often the lock's connection is checked, and retaken after a lost connection.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// How long a check of the lock's connection may take: a database that vanished (a failover,
/// a cut network) leaves the check waiting on TCP's retransmissions for many minutes.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The advisory lock of a replica id on PostgreSQL, held until dropped.
#[derive(Debug)]
pub struct ReplicaLock {
    keeper: tokio::task::JoinHandle<()>,
    /// Set (with why) once another server holds the id after this one lost its lock.
    taken: tokio::sync::watch::Receiver<Option<String>>,
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
        let mut conn = lock_connection(url).await.map_err(failed)?;
        let deadline = tokio::time::Instant::now() + RELEASE_WAIT;
        while !try_lock(&mut conn, key).await.map_err(failed)? {
            if tokio::time::Instant::now() >= deadline {
                return Err(ReplicaLockError::InUse(replica_id.to_string()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (taken_tx, taken) = tokio::sync::watch::channel(None);
        let keeper = tokio::spawn(keep(conn, url.to_string(), replica_id.to_string(), key, taken_tx));
        Ok(Some(ReplicaLock { keeper, taken }))
    }

    /// Resolves, with why, once another server holds this server's id: it took the lock while
    /// this one's connection was down, and this one was refused it for [`RELEASE_WAIT`] since.
    pub async fn taken(&self) -> String {
        let mut taken = self.taken.clone();
        let why = taken
            .wait_for(Option::is_some)
            .await
            .map(|why| why.clone().unwrap_or_default());
        match why {
            Ok(why) => why,
            // The keeper ended without a word (never, short of a panic): nothing to wait for.
            Err(_) => std::future::pending().await,
        }
    }
}

/// A connection for the lock, its session's keepalives set short ([`KEEPALIVE`]). A server that
/// refuses them (an old or restricted one) keeps its own: logged, not fatal.
async fn lock_connection(url: &str) -> Result<PgConnection, sqlx::Error> {
    let mut conn = PgConnection::connect(url).await?;
    let (idle, interval, count) = KEEPALIVE;
    let set = sqlx::query(
        "SELECT set_config('tcp_keepalives_idle', $1, false), \
                set_config('tcp_keepalives_interval', $2, false), \
                set_config('tcp_keepalives_count', $3, false)",
    )
    .bind(idle.to_string())
    .bind(interval.to_string())
    .bind(count.to_string())
    .execute(&mut conn)
    .await;
    if let Err(e) = set {
        tracing::warn!(
            "the replica lock's connection keeps the database's TCP keepalives ({e}): a replica whose machine dies holds its id until they notice"
        );
    }
    Ok(conn)
}

async fn try_lock(conn: &mut PgConnection, key: i64) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(key)
        .fetch_one(conn)
        .await
}

/// Holds the lock's connection; when it is lost (PostgreSQL restarted, the network cut), the
/// lock went with it: connects again and retakes it. Refused for [`RELEASE_WAIT`] on end (this
/// server's own lost session would be gone by then), another server has the id: says so on
/// `taken` and ends.
async fn keep(
    conn: PgConnection,
    url: String,
    replica_id: String,
    key: i64,
    taken: tokio::sync::watch::Sender<Option<String>>,
) {
    let mut held = Some(conn);
    let mut reported = false;
    // Since when the lock has been refused without a break.
    let mut refused_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        if let Some(conn) = held.as_mut() {
            let checked = tokio::time::timeout(CHECK_TIMEOUT, conn.ping()).await;
            if matches!(checked, Ok(Ok(()))) {
                continue;
            }
            held = None;
            tracing::warn!("lost the database connection holding replica_id {replica_id:?}'s lock; retaking it");
        }
        let retaken = tokio::time::timeout(CHECK_TIMEOUT, async {
            let mut conn = lock_connection(&url).await?;
            let got = try_lock(&mut conn, key).await?;
            Ok::<_, sqlx::Error>(got.then_some(conn))
        })
        .await
        .map_err(|_| format!("no answer within {} s", CHECK_TIMEOUT.as_secs()))
        .and_then(|r| r.map_err(|e| e.to_string()));
        match retaken {
            Ok(Some(conn)) => {
                tracing::info!("retook replica_id {replica_id:?}'s lock");
                held = Some(conn);
                reported = false;
                refused_since = None;
            }
            Ok(None) => {
                let since = *refused_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= RELEASE_WAIT {
                    let why = format!(
                        "{} (it took the id while this server's lock connection was down, {:.0} s ago): this server stops so that no episode runs twice",
                        ReplicaLockError::InUse(replica_id.clone()),
                        since.elapsed().as_secs_f64()
                    );
                    tracing::error!("{why}");
                    let _ = taken.send(Some(why));
                    return;
                }
                tracing::warn!(
                    "replica_id {replica_id:?}'s lock is held by another session: this server's lost one, or another server (trying again)"
                );
            }
            Err(e) => {
                // Unreachable: a refusal counts from when it answers again.
                refused_since = None;
                if !reported {
                    tracing::warn!("retaking replica_id {replica_id:?}'s lock: {e} (trying again)");
                    reported = true;
                }
            }
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
