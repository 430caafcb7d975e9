//! Metadata storage: teams (members, hashed tokens), challenges and their phases, submissions
//! and their episodes in SQL, on embedded SQLite or on PostgreSQL, behind one API.
//!
//! One set of SQL strings (with `$1, $2, ...` placeholders, which both engines accept) runs through
//! sqlx's `Any` driver; the schema lives in `migrations/sqlite` and `migrations/postgres` (same
//! logical schema, one dialect each), embedded in the binary and applied by [`Storage::connect`].
//! Columns use only types the `Any` driver maps on both engines: `i64` (INTEGER / BIGINT), `f64`
//! (REAL / DOUBLE PRECISION) and `String` (TEXT); times are unix milliseconds ([`now_ms`]), seeds
//! (`u64`) are decimal text, metrics are a JSON object in which non-finite values are written as
//! the strings `"NaN"`, `"inf"` and `"-inf"` so that they survive the round trip.
//!
//! Episode state changes are guarded by the state they leave (`PENDING → RUNNING`,
//! `RUNNING → final`), so an episode is never claimed or counted twice, even with several
//! writers. A phase's submission quota is checked in the transaction that inserts the
//! submission, after locking the team's row, so concurrent requests cannot exceed it.
//!
//! This file connects and keeps the leaderboard generation; `migrations.rs` brings a
//! database's schema up to date. The rest of [`Storage`]'s methods are split by subject:
//! `teams.rs` (teams, members, tokens), `challenges.rs` (challenges and phases),
//! `submissions.rs`, `sessions.rs` (each submission's agent sessions), `hosted.rs` (the uploaded
//! policies of hosted submissions) and `episodes.rs` (the episode lifecycle); `records.rs` holds
//! the record types, `rows.rs` their decoding from rows and `error.rs` the error type.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{AnyPool, ConnectOptions, Connection, Executor, Row};

mod challenges;
mod clock;
mod episodes;
mod error;
mod hosted;
mod migrations;
mod records;
mod rows;
mod sessions;
mod submissions;
mod teams;

pub use episodes::{
    AGENT_ATTEMPTS, Expired, LEASE_EXPIRED, Lease, MAX_SERVER_FAULTS, SERVER_RESTARTED, SERVER_STOPPED,
};
pub use error::StorageError;
use error::*;
pub use hosted::HostedPolicy;
use migrations::Schema;
pub use records::*;
use rows::*;
pub use sessions::{SERVER_LOST, SessionRecord};

// Cargo notices edits to existing migration files only: after ADDING one, touch this file
// (last: 0019).
/// How long [`Storage::connect`] waits for a database that refuses connections.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Episodes inserted per statement by [`Storage::create_submission`] (9 parameters each).
const INSERT_CHUNK: usize = 100;

/// Removes the passwords from a URL for error messages: the userinfo's, and a `password`
/// parameter's in the query (libpq takes both).
pub fn redact_url(url: &str) -> String {
    let Some(s) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[s + 3..];
    // The userinfo ends at the last `@` before the query: a password may hold `/`, `#` or `@`
    // itself (not percent-encoded), which a split at the first `/` printed in clear, and a
    // query's own `@` is no userinfo's. A password holding `?` leaves no `@` before the first
    // `?`: then the last `@` of all, where a `:` before that `?` starts a userinfo (the host
    // may go unshown; the password never shows).
    let query_at = rest.find('?').unwrap_or(rest.len());
    let at = rest[..query_at]
        .rfind('@')
        .or_else(|| rest[..query_at].contains(':').then(|| rest.rfind('@')).flatten());
    let (head, tail) = match at {
        Some(at) => match rest[..at].find(':') {
            Some(c) => (format!("{}{}:***", &url[..s + 3], &rest[..c]), &rest[at..]),
            None => (url[..s + 3 + at].to_string(), &rest[at..]),
        },
        None => (url[..s + 3].to_string(), rest),
    };
    let Some(q) = tail.find('?') else {
        return head + tail;
    };
    let params: Vec<String> = tail[q + 1..]
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => p.to_string(),
        })
        .collect();
    format!("{head}{}?{}", &tail[..q], params.join("&"))
}

/// A connection goes back to the pool only outside any transaction. When the database ends a
/// transaction on its own (SQLite may on SQLITE_FULL, IOERR, BUSY or NOMEM), sqlx's rollback at
/// the `Transaction`'s drop fails and sqlx still counts the connection inside it: its next
/// transaction would be a savepoint whose rollback leaves the database's transaction open, and
/// every later write on the connection would be answered and never committed (the operator
/// walkthrough: a disk full for a moment lost the teams created after it, and the open write
/// lock had every other connection's writes fail `database is locked` until a restart). A
/// rollback queued at a `Transaction`'s drop is let run first (the ping); a connection still
/// inside one is closed, a fresh one takes its place. (On PostgreSQL sqlx counts a dropped
/// transaction's rollback at once, so the hook finds none there.)
fn no_connection_back_inside_a_transaction(options: AnyPoolOptions) -> AnyPoolOptions {
    options.after_release(|conn, _meta| {
        Box::pin(async move {
            if !conn.is_in_transaction() {
                return Ok(true);
            }
            conn.ping().await?;
            if conn.is_in_transaction() {
                tracing::warn!("a database connection was left inside a transaction: closed, a new one replaces it");
                return Ok(false);
            }
            Ok(true)
        })
    })
}

/// Opens a pool. A refused connection is retried until [`CONNECT_TIMEOUT`] (the database may be
/// starting, e.g. next to the server in docker compose); the error then says why the last try failed.
async fn pool_connect(options: AnyPoolOptions, url: &str, shown: &str) -> Result<AnyPool, StorageError> {
    // An in-memory database lives in its one connection: closing it would lose the database.
    let in_memory = url.contains(":memory:") || url.contains("mode=memory");
    let options = match in_memory {
        true => options,
        false => no_connection_back_inside_a_transaction(options),
    };
    // Say at once when nothing listens, rather than waiting out the timeout in silence.
    if let Err(sqlx::Error::Io(e)) = sqlx::AnyConnection::connect(url).await
        && e.kind() == std::io::ErrorKind::ConnectionRefused
    {
        eprintln!("note: {shown} refused the connection ({e}); waiting up to {CONNECT_TIMEOUT:?} for it to start");
    }
    match options.connect(url).await {
        Ok(pool) => Ok(pool),
        Err(sqlx::Error::PoolTimedOut) => {
            let last = match sqlx::AnyConnection::connect(url).await {
                Ok(conn) => {
                    conn.close().await.ok();
                    "none (it answers now)".to_string()
                }
                Err(e) => e.to_string(),
            };
            Err(StorageError::Database {
                context: format!("connecting to {shown} (gave up after {CONNECT_TIMEOUT:?}; last error: {last})"),
                cause: sqlx::Error::PoolTimedOut,
            })
        }
        Err(e) => Err(e).ctx(|| format!("connecting to {shown}")),
    }
}

/// Milliseconds on a clock that only goes forward (from this process's first call, plus one, so
/// that 0 can mean "never"): what a grace is measured on, whatever the wall clock does.
fn monotonic_ms() -> i64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_millis() as i64 + 1
}

/// Bumps a leaderboard generation when dropped ([`Storage::leaderboard_generation`]).
struct GenerationBump<'a>(&'a AtomicU64);

impl Drop for GenerationBump<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Handle on the metadata database (cheap to clone: it wraps a connection pool).
#[derive(Debug, Clone)]
pub struct Storage {
    pool: AnyPool,
    engine: Engine,
    /// Bumped by every write that can change a leaderboard (a submission finishing, its summary,
    /// report or baseline flag), so derived views can be cached until it moves. Counts this
    /// process's writes; on PostgreSQL, where replicas share the database, the same writes also
    /// move the `counters` row that [`Storage::leaderboard_generation`] adds in.
    leaderboard_generation: Arc<AtomicU64>,
    /// The claims this handle makes (all clones share it).
    lease: Arc<Lease>,
    /// The episodes this handle claimed and has not committed or given back, by submission,
    /// each with the attempt of its claim: the ones [`Storage::renew_leases`] renews. An episode
    /// dropped from here (a commit given up on) is no longer renewed, so its lease runs out and
    /// it is claimed again. Releases name the attempt: a stale run's cleanup (its lease ran
    /// out and this server claimed the episode again) must not drop the newer claim.
    held: Arc<std::sync::Mutex<Held>>,
    /// The database's clock, which the times of claims follow ([`clock`]).
    clock: Arc<clock::DatabaseClock>,
    /// When (on [`monotonic_ms`]) the database last came back after this server found it
    /// unreachable; 0: never unreachable; `i64::MAX`: unreachable now
    /// ([`Storage::note_database_unreachable`]).
    back_at_ms: Arc<std::sync::atomic::AtomicI64>,
}

/// [`Storage`]'s claims in hand, and whether it still makes any.
#[derive(Debug, Default)]
struct Held {
    /// By submission: episode index → the attempt of its claim.
    claims: std::collections::HashMap<String, std::collections::BTreeMap<i64, i64>>,
    /// Set when the server is told to stop ([`Storage::give_back_on_stop`]): no new claims.
    stopping: bool,
    /// Submissions with claims in hand that ended meanwhile (cancelled here, or found final
    /// at a renewal): their lanes stop the episodes they run ([`Storage::submission_ended`]).
    /// An entry goes with the submission's last claim.
    ended: std::collections::HashSet<String>,
}

impl Storage {
    /// The current leaderboard generation ([`Storage`]'s field, plus the shared counter, which
    /// other replicas move too): read it before reading the rows a cached view is built from.
    pub async fn leaderboard_generation(&self) -> Result<u64, StorageError> {
        let local = self.leaderboard_generation.load(Ordering::SeqCst);
        let shared = self.board_counter().await?;
        Ok(local.wrapping_add(shared as u64))
    }

    /// When a server of this database last said it was alive (unix ms, its own clock; `None`
    /// before any did): the idle expiry's mark, so a starting server knows how long the fleet
    /// was down ([`Storage::mark_fleet_alive`]).
    pub async fn fleet_alive_at(&self) -> Result<Option<i64>, StorageError> {
        let row = sqlx::query("SELECT value FROM counters WHERE name = 'fleet_alive_at'")
            .fetch_optional(&self.pool)
            .await
            .ctx(|| "reading when a server was last alive".to_string())?;
        row.map(|r| get(&r, "value", "the fleet's last alive time")).transpose()
    }

    /// Records that a server is alive at `now_ms` (the later of it and the mark already there:
    /// replicas' clocks differ a little, and the mark never goes back).
    pub async fn mark_fleet_alive(&self, now_ms: i64) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO counters (name, value) VALUES ('fleet_alive_at', $1) ON CONFLICT (name) DO UPDATE \
             SET value = CASE WHEN excluded.value > counters.value THEN excluded.value ELSE counters.value END",
        )
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .ctx(|| "marking this server alive".to_string())?;
        Ok(())
    }

    /// The shared leaderboard counter: the last stamp of [`Storage::stamp_board_change_on`].
    pub async fn board_counter(&self) -> Result<i64, StorageError> {
        let row = sqlx::query("SELECT value FROM counters WHERE name = 'leaderboard'")
            .fetch_one(&self.pool)
            .await
            .ctx(|| "reading the leaderboard generation".to_string())?;
        get(&row, "value", "the leaderboard generation")
    }

    /// Within the transaction of a write that can change a leaderboard (submission `id`
    /// finished, its summary, report or baseline flag): moves the shared counter, so every
    /// replica's cached boards go stale, and stamps the submission with the new value
    /// (`board_seq`), so a cached board re-reads only the submissions stamped since it was
    /// read. In the write's own transaction, so no write commits unstamped (a crash between
    /// the two left a change that replicas which had cached the row never re-read); the
    /// counter's row lock orders the stamps as their commits.
    async fn stamp_board_change_on(&self, conn: &mut sqlx::AnyConnection, id: &str) -> Result<(), StorageError> {
        let context = || format!("stamping a leaderboard change of submission {id}");
        match self.engine {
            Engine::Postgres => {
                sqlx::query(
                    "WITH c AS (UPDATE counters SET value = value + 1 WHERE name = 'leaderboard' RETURNING value) \
                     UPDATE submissions SET board_seq = (SELECT value FROM c) WHERE id = $1",
                )
                .bind(id)
                .execute(&mut *conn)
                .await
                .ctx(context)?;
            }
            Engine::Sqlite => {
                sqlx::query("UPDATE counters SET value = value + 1 WHERE name = 'leaderboard'")
                    .execute(&mut *conn)
                    .await
                    .ctx(context)?;
                sqlx::query(
                    "UPDATE submissions SET board_seq = (SELECT value FROM counters WHERE name = 'leaderboard') WHERE id = $1",
                )
                .bind(id)
                .execute(&mut *conn)
                .await
                .ctx(context)?;
            }
        }
        Ok(())
    }

    /// This handle's claims: who holds them and for how long without renewal.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The same database, claiming as a new process of replica `replica` with leases of
    /// `duration` (a server sets its replica id here; tests make two "replicas" on one database
    /// this way).
    pub fn with_lease(mut self, replica: impl Into<String>, duration: Duration) -> Self {
        self.lease = Arc::new(Lease::of_replica(replica.into(), duration));
        self.held = Default::default();
        self.back_at_ms = Default::default();
        self
    }

    /// Bumps the generation when the returned guard drops, at the end of the write: a reader
    /// that read the old generation and then the new rows only caches them under the old one.
    fn leaderboards_changed(&self) -> GenerationBump<'_> {
        GenerationBump(&self.leaderboard_generation)
    }

    /// Opens the database and applies the migrations. `url`: "sqlite://PATH" (file and directory
    /// created if missing; journal_mode=WAL, synchronous=NORMAL, foreign_keys=ON, busy_timeout
    /// 5 s; "sqlite::memory:" keeps one private in-memory database) or "postgres://...".
    pub async fn connect(url: &str) -> Result<Storage, StorageError> {
        Self::connect_with(url, Schema::Upgrade).await
    }

    /// Opens a database for a command beside the server (`arena dataset export`, `arena audit`)
    /// and leaves its schema as it is: one that lacks migrations is refused in words (an upgrade
    /// is `arena serve`'s, after a backup: a newer binary's export upgraded the database of a
    /// live older server, which then refused it at its next start).
    pub async fn connect_as_found(url: &str) -> Result<Storage, StorageError> {
        Self::connect_with(url, Schema::AsFound).await
    }

    async fn connect_with(url: &str, schema: Schema) -> Result<Storage, StorageError> {
        sqlx::any::install_default_drivers();
        let shown = redact_url(url);
        let (engine, pool) = if url.starts_with("sqlite:") {
            (Engine::Sqlite, Self::connect_sqlite(url, &shown).await?)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options = AnyPoolOptions::new()
                .max_connections(10)
                .acquire_timeout(CONNECT_TIMEOUT);
            (Engine::Postgres, pool_connect(options, url, &shown).await?)
        } else {
            return Err(StorageError::UnsupportedUrl(shown));
        };
        migrations::bring_up_to_date(&pool, engine, schema).await?;
        let storage = Storage {
            pool,
            engine,
            leaderboard_generation: Arc::new(AtomicU64::new(0)),
            lease: Arc::new(Lease::for_this_process()),
            held: Default::default(),
            clock: Default::default(),
            back_at_ms: Default::default(),
        };
        storage.sync_clock().await?;
        Ok(storage)
    }

    /// Measures again how far the database's clock is from this machine's (the server does at
    /// every lease renewal); the offset, milliseconds.
    pub async fn sync_clock(&self) -> Result<i64, StorageError> {
        self.clock.sync(&self.pool, self.engine).await
    }

    /// This server found the database unreachable (its lease renewal failed). Until a lease has
    /// gone by since it is back ([`Storage::note_database_answers`]), this server settles no
    /// other server's claim as expired: nobody could renew through the outage, and the others
    /// renew theirs within a third of a lease once it is back (after a PostgreSQL outage longer
    /// than a lease, a replica with nothing left to claim took a healthy one's running episodes
    /// at once, each a server fault).
    pub fn note_database_unreachable(&self) {
        self.back_at_ms.store(i64::MAX, Ordering::SeqCst);
    }

    /// The database answered this server's lease renewal: it is back, if it was not.
    pub fn note_database_answers(&self) {
        let _ = self
            .back_at_ms
            .compare_exchange(i64::MAX, monotonic_ms(), Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Whether the database is unreachable, or a lease has not gone by since it came back.
    fn just_reconnected(&self) -> bool {
        match self.back_at_ms.load(Ordering::SeqCst) {
            0 => false,
            i64::MAX => true,
            at => monotonic_ms().saturating_sub(at) < self.lease.duration.as_millis() as i64,
        }
    }

    /// The database's clock less this machine's, milliseconds, as last measured.
    pub fn clock_offset_ms(&self) -> i64 {
        self.clock.offset_ms()
    }

    /// Now on the database's clock (unix ms): the time of every claim's lease.
    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Now on the clock of claims' leases (the database's), for comparing with a lease's expiry.
    pub fn now_for_leases(&self) -> i64 {
        self.now()
    }

    /// The same database, seen from a machine whose clock is `skew_ms` off (tests: a replica
    /// with a wrong clock); the offset is measured again.
    #[doc(hidden)]
    pub async fn with_local_clock_skew(mut self, skew_ms: i64) -> Result<Self, StorageError> {
        self.clock = Arc::new(clock::DatabaseClock::skewed(skew_ms));
        self.sync_clock().await?;
        Ok(self)
    }

    /// SQLite: one native connection creates the file and switches it to WAL (a persistent
    /// setting); the pooled `Any` connections then get sqlx's defaults (foreign_keys=ON,
    /// busy_timeout 5 s) plus synchronous=NORMAL, which is per connection.
    async fn connect_sqlite(url: &str, shown: &str) -> Result<AnyPool, StorageError> {
        let path = url.trim_start_matches("sqlite:").trim_start_matches("//");
        if path.split('?').next().unwrap_or_default().is_empty() {
            // sqlx would open a private temporary database per connection: no shared schema.
            return Err(StorageError::UnsupportedUrl(format!("{shown} (no file path)")));
        }
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let options = SqliteConnectOptions::from_str(url)
            .ctx(|| format!("parsing the SQLite URL {shown}"))?
            .create_if_missing(true)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5))
            .synchronous(SqliteSynchronous::Normal);
        let mut pool_options = AnyPoolOptions::new()
            .acquire_timeout(CONNECT_TIMEOUT)
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    conn.execute("PRAGMA synchronous = NORMAL").await?;
                    Ok(())
                })
            });
        if in_memory {
            // Every new connection to ":memory:" would open its own empty database: keep one.
            pool_options = pool_options
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
        } else {
            let path = options.get_filename();
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|cause| StorageError::Io {
                    context: format!("creating the directory {} for the SQLite database", dir.display()),
                    cause,
                })?;
            }
            let conn = options
                .journal_mode(SqliteJournalMode::Wal)
                .connect()
                .await
                .ctx(|| format!("opening {shown} (creating it if missing, WAL journal)"))?;
            conn.close()
                .await
                .ctx(|| format!("closing the set-up connection to {shown}"))?;
            pool_options = pool_options.max_connections(8);
        }
        pool_connect(pool_options, url, shown).await
    }

    /// The engine behind this storage.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// SQLite: writes what its write-ahead log holds into the database file and empties the
    /// log (`arena serve` does as it stops, so that the file alone is the whole database).
    /// Nothing to do on PostgreSQL.
    pub async fn checkpoint(&self) -> Result<(), StorageError> {
        if self.engine != Engine::Sqlite {
            return Ok(());
        }
        // SQLite answers (busy, log frames, checkpointed frames); busy when a reader or a
        // writer kept it from finishing, which is no error of the statement's.
        let row = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .fetch_one(&self.pool)
            .await
            .ctx(|| "writing the write-ahead log into the database file".into())?;
        let busy: i64 = row.try_get(0).unwrap_or(0);
        if busy != 0 {
            return Err(StorageError::Invalid(
                "the write-ahead log was in use and is not all in the database file yet (the next start takes it in)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Whether the database answers a trivial query within `within` (`GET /api/v1/health`).
    pub async fn ping(&self, within: std::time::Duration) -> Result<(), String> {
        match tokio::time::timeout(within, sqlx::query("SELECT 1").execute(&self.pool)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {within:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transaction SQLite ends on its own (it may on SQLITE_FULL, IOERR, BUSY, NOMEM; here a
    /// conflict under `OR ROLLBACK`) left sqlx believing the connection still in it: the next
    /// transaction on that connection became a savepoint, its rollback left SQLite's transaction
    /// open, and every later write on the connection was answered and never committed (the
    /// operator walkthrough: teams created after a disk-full moment, gone at the restart).
    #[tokio::test]
    async fn a_transaction_sqlite_ended_itself_leaves_no_connection_inside_one() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let storage = Storage::connect(&url).await.unwrap();
        let pool = &storage.pool;
        sqlx::query("CREATE TABLE probe (k INTEGER PRIMARY KEY)")
            .execute(pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO probe VALUES (1)").execute(pool).await.unwrap();
        {
            let mut tx = pool.begin().await.unwrap();
            let refused = sqlx::query("INSERT OR ROLLBACK INTO probe VALUES (1)")
                .execute(&mut *tx)
                .await;
            assert!(refused.is_err());
        }
        for k in 2..20 {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query("INSERT INTO probe VALUES ($1)")
                .bind(k)
                .execute(&mut *tx)
                .await
                .unwrap();
            tx.rollback().await.unwrap();
            sqlx::query("INSERT INTO probe VALUES ($1)")
                .bind(1000 + k)
                .execute(pool)
                .await
                .unwrap();
        }
        // Every write that was answered is in the file, as a connection of its own reads it.
        let mut fresh = sqlx::AnyConnection::connect(&url).await.unwrap();
        let kept: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM probe WHERE k > 1000")
            .fetch_one(&mut fresh)
            .await
            .unwrap();
        assert_eq!(kept, 18);
    }

    /// A database a newer binary migrated is refused in words, and left as it was (the
    /// operator walkthrough: sqlx's "migration 20 was previously applied but is missing").
    #[tokio::test]
    async fn a_database_of_a_newer_arena_is_refused_in_words() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let storage = Storage::connect(&url).await.unwrap();
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (9999, 'from the future', TRUE, X'00', 1)",
        )
        .execute(&storage.pool)
        .await
        .unwrap();
        storage.pool.close().await;
        let refused = Storage::connect(&url).await.unwrap_err().to_string();
        assert!(
            refused.starts_with("this database was migrated by a newer arena (schema 9999; this arena knows up to")
                && refused.contains("restore the backup taken before the upgrade"),
            "{refused}"
        );
    }

    #[test]
    fn metrics_keep_non_finite_values() {
        let metrics: BTreeMap<String, f64> = [
            ("a".into(), 1.5),
            ("b".into(), f64::NAN),
            ("c".into(), f64::INFINITY),
            ("d".into(), f64::NEG_INFINITY),
        ]
        .into_iter()
        .collect();
        let back = metrics_from_json(&metrics_to_json(&metrics)).unwrap();
        assert_eq!(back["a"], 1.5);
        assert!(back["b"].is_nan());
        assert_eq!(back["c"], f64::INFINITY);
        assert_eq!(back["d"], f64::NEG_INFINITY);
        assert!(metrics_from_json(r#"{"x": null}"#).unwrap()["x"].is_nan());
        assert!(metrics_from_json(r#"{"x": "oops"}"#).is_err());
    }

    #[test]
    fn urls_lose_their_password() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        // Unencoded `/`, `#` and `@` in the password (the operator walkthrough printed them).
        assert_eq!(
            redact_url("postgres://u:pa/ss#x@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_url("postgres://u:p@ss/w0rd@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact_url("sqlite://a/b.db"), "sqlite://a/b.db");
        // A query's `@` is no userinfo's: the host stays shown, the password hidden.
        assert_eq!(
            redact_url("postgres://u:pw@h:5432/db?application_name=a@b"),
            "postgres://u:***@h:5432/db?application_name=a@b"
        );
        assert_eq!(
            redact_url("postgres://h/db?user=u&password=s3cret&sslmode=require"),
            "postgres://h/db?user=u&password=***&sslmode=require"
        );
        assert_eq!(redact_url("postgres://u:p?w@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact_url("postgres://u:p?w@h/db?x=a@b"), "postgres://u:***@b");
        // No userinfo, an `@` in the query: the query's password is hidden all the same.
        assert_eq!(
            redact_url("postgres://h/db?user=u&password=s3cret&application_name=svc@web1"),
            "postgres://h/db?user=u&password=***&application_name=svc@web1"
        );
        assert_eq!(
            redact_url("postgres://h/db?password=p@ss"),
            "postgres://h/db?password=***"
        );
    }

    #[test]
    fn statuses_round_trip() {
        for s in [
            SubmissionStatus::Pending,
            SubmissionStatus::Running,
            SubmissionStatus::Completed,
            SubmissionStatus::Failed,
        ] {
            assert_eq!(s.as_str().parse::<SubmissionStatus>().unwrap(), s);
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{}\"", s.as_str()));
        }
        for s in [
            EpisodeState::Pending,
            EpisodeState::Running,
            EpisodeState::Completed,
            EpisodeState::Fell,
            EpisodeState::Failed,
            EpisodeState::Timeout,
        ] {
            assert_eq!(s.as_str().parse::<EpisodeState>().unwrap(), s);
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{}\"", s.as_str()));
        }
        assert_eq!(serde_json::to_string(&Engine::Postgres).unwrap(), "\"postgres\"");
        assert_eq!(hash_token("abc").len(), 64);
    }

    #[test]
    fn a_database_error_reads_once_whoever_prints_it() {
        let e = StorageError::Database {
            context: "reading the teams".into(),
            cause: sqlx::Error::PoolTimedOut,
        };
        let cause = sqlx::Error::PoolTimedOut.to_string();
        for text in [e.to_string(), format!("{:#}", anyhow::Error::from(e))] {
            assert_eq!(text.matches(&cause).count(), 1, "{text}");
            assert!(text.starts_with("database: reading the teams: "), "{text}");
        }
    }
}
