//! The database's clock, as this server reads it: the times of episode claims (when a lease
//! runs out, when one ran out) are the database's, not each replica's own, so that a replica
//! whose wall clock is off (a VM resumed from a pause, a container on a host without NTP) neither
//! takes live claims from the others as expired nor writes claims the others take at once. A
//! replicas walkthrough: a replica 120 s ahead settled a healthy replica's running episode as
//! `lease expired`, throwing away its run.
//!
//! The offset between the two clocks is measured at connection and again at every lease renewal
//! (a round trip's midpoint against the database's `clock_timestamp()`, or SQLite's `'now'`),
//! and added to this machine's clock wherever a claim's time is written or compared.

use super::{Context, Engine, StorageError, now_ms};
use sqlx::AnyPool;
use std::sync::atomic::{AtomicI64, Ordering};

/// An offset beyond which the server says its clock is off (milliseconds).
const SAID_FROM_MS: i64 = 1_000;

/// How long a reading may wait for a connection, and then for its answer.
const READ_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The longest round trip whose reading is kept (milliseconds).
const KEPT_UP_TO_MS: i64 = 1_000;

#[derive(Debug, Default)]
pub(super) struct DatabaseClock {
    /// The database's clock less this machine's, milliseconds, as last measured.
    offset_ms: AtomicI64,
    /// Added to this machine's clock: a clock that is off, for tests only
    /// ([`super::Storage::with_local_clock_skew`]).
    skew_ms: i64,
    /// Whether an offset beyond [`SAID_FROM_MS`] has been logged (said once, and again once
    /// it went back under).
    said: std::sync::atomic::AtomicBool,
}

impl DatabaseClock {
    pub(super) fn skewed(skew_ms: i64) -> Self {
        DatabaseClock {
            skew_ms,
            ..Default::default()
        }
    }

    /// This machine's clock (unix ms).
    fn local_ms(&self) -> i64 {
        now_ms().saturating_add(self.skew_ms)
    }

    /// Now on the database's clock (unix ms), by the last measured offset.
    pub(super) fn now_ms(&self) -> i64 {
        self.local_ms().saturating_add(self.offset_ms.load(Ordering::Relaxed))
    }

    /// The last measured offset (the database's clock less this machine's, ms).
    pub(super) fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }

    /// Measures the offset again; logs it when it is more than a second.
    pub(super) async fn sync(&self, pool: &AnyPool, engine: Engine) -> Result<i64, StorageError> {
        let sql = match engine {
            Engine::Postgres => "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
            Engine::Sqlite => "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
        };
        // The query alone is timed, on a connection already in hand: a wait for the pool, or a
        // database that hangs, would put the midpoint far from the database's reading (a 30 s
        // wait, 15 s of error). A reading whose round trip took over a second is not kept.
        let mut conn = tokio::time::timeout(READ_WITHIN, pool.acquire())
            .await
            .map_err(|_| too_slow("no connection"))?
            .ctx(|| "reading the database's clock".to_string())?;
        let before = self.local_ms();
        let database: i64 = tokio::time::timeout(READ_WITHIN, sqlx::query_scalar(sql).fetch_one(&mut *conn))
            .await
            .map_err(|_| too_slow("no answer"))?
            .ctx(|| "reading the database's clock".to_string())?;
        let after = self.local_ms();
        if after - before > KEPT_UP_TO_MS {
            return Ok(self.offset_ms());
        }
        let offset = database - before / 2 - after / 2;
        self.offset_ms.store(offset, Ordering::Relaxed);
        let off = offset.abs() > SAID_FROM_MS;
        if off != self.said.swap(off, Ordering::Relaxed) {
            if off {
                tracing::warn!(
                    "this machine's clock is {:.1} s {} the database's: episode claims follow the database's clock; \
                     the times this server shows follow its own",
                    offset.abs() as f64 / 1000.0,
                    if offset < 0 { "ahead of" } else { "behind" }
                );
            } else {
                tracing::info!("this machine's clock agrees with the database's again");
            }
        }
        Ok(offset)
    }
}

/// A clock reading that waited longer than [`READ_WITHIN`] for `what` (a connection, an answer).
fn too_slow(what: &str) -> StorageError {
    StorageError::Database {
        context: format!("reading the database's clock: {what} within {READ_WITHIN:?}"),
        cause: sqlx::Error::PoolTimedOut,
    }
}
