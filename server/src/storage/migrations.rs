//! The schema's migrations (`migrations/sqlite`, `migrations/postgres`, embedded in the binary):
//! applied by a server at its start, only checked by the commands beside a server, and the
//! repair of the one migration that was edited after databases had applied it.
//!
//! The run is sqlx's own steps (its lock, table, dirty check, `apply`) driven from here, so that
//! the note names the migrations this process applied (two replicas starting together both
//! claimed them) and a database that cannot go on is refused in words, not sqlx's.

use sqlx::migrate::{Migrate, Migration, Migrator};
use sqlx::{AnyConnection, AnyPool, Connection, Executor};

use super::{Engine, StorageError};

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/postgres");

fn migrator(engine: Engine) -> &'static Migrator {
    match engine {
        Engine::Sqlite => &SQLITE_MIGRATIONS,
        Engine::Postgres => &POSTGRES_MIGRATIONS,
    }
}

/// What opening a database does to its schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Schema {
    /// Applies what is missing (a server's start).
    Upgrade,
    /// Leaves it as it is and refuses one that is not this arena's (the commands beside a
    /// server: an upgrade is the operator's step, taken with a backup).
    AsFound,
}

/// A migration whose file changed after some databases had applied it (it must not happen: a
/// test pins every migration's checksum, `migrations/checksums.txt`). Such a database carries
/// the old file's checksum; `repair` takes it to what the present file makes, after which its
/// checksum is the present one's.
struct EditedMigration {
    engine: Engine,
    version: i64,
    /// SHA-384 of the file as those databases applied it, in hex.
    applied_checksum: &'static str,
    repair: &'static [&'static str],
}

/// 0015 as e2f44e2 shipped it lacked `uncharged_runs` (bf22ded added it to the file, and on
/// PostgreSQL widened `server_faults`): databases that the three commits between them migrated.
const EDITED: [EditedMigration; 2] = [
    EditedMigration {
        engine: Engine::Sqlite,
        version: 15,
        applied_checksum: "279a6d36b13b40942e6a8da26351a082aefa95c09642abe43972695ca88be1f50979517425b8db7373372fdd4547f56b",
        repair: &["ALTER TABLE episodes ADD COLUMN uncharged_runs INTEGER NOT NULL DEFAULT 0"],
    },
    EditedMigration {
        engine: Engine::Postgres,
        version: 15,
        applied_checksum: "44291b10fbacf8ac93e3f4aa60a5138840bcb04b8397a1b2e8f15bad847c688bf25b0139d385e895636d0119bf3f975e",
        repair: &[
            "ALTER TABLE episodes ALTER COLUMN server_faults TYPE BIGINT",
            "ALTER TABLE episodes ADD COLUMN uncharged_runs BIGINT NOT NULL DEFAULT 0",
        ],
    },
];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Applies the migrations the database lacks (`Schema::Upgrade`) and says which, or checks that
/// it lacks none (`Schema::AsFound`). A database migrated by a newer arena, or whose applied
/// migration differs from this arena's file, is refused before anything changes.
pub(super) async fn bring_up_to_date(pool: &AnyPool, engine: Engine, schema: Schema) -> Result<(), StorageError> {
    let migrate = |cause| StorageError::Migrate { engine, cause };
    let mut pooled = pool.acquire().await.map_err(|e| migrate(e.into()))?;
    let conn: &mut AnyConnection = &mut pooled;
    let locks = schema == Schema::Upgrade;
    if locks {
        // Another replica migrating at the same time waits here (PostgreSQL; SQLite's writes
        // take turns anyway).
        conn.lock().await.map_err(migrate)?;
    }
    let outcome = run(conn, engine, schema).await;
    if locks {
        // The lock is the session's: a connection going back to the pool must not hold it.
        if let Err(e) = conn.unlock().await.map_err(migrate) {
            // It may still hold the lock: closed, not pooled.
            let _ = pooled.close().await;
            outcome?;
            return Err(e);
        }
    }
    let applied = outcome?;
    if !applied.is_empty() {
        let newest = migrator(engine).iter().map(|m| m.version).max().unwrap_or(0);
        let names: Vec<String> = applied.iter().map(|v| format!("{v:04}")).collect();
        eprintln!(
            "note: the database was upgraded to schema {newest} (migrations {} applied)",
            names.join(", ")
        );
        tracing::info!(
            "database upgraded to schema {newest}: migrations {} applied",
            names.join(", ")
        );
    }
    Ok(())
}

/// The body of [`bring_up_to_date`], under its lock: the versions this process applied (none on
/// a fresh database, which is no upgrade, or with `Schema::AsFound`).
async fn run(conn: &mut AnyConnection, engine: Engine, schema: Schema) -> Result<Vec<i64>, StorageError> {
    let migrate = |cause| StorageError::Migrate { engine, cause };
    let migrator = migrator(engine);
    let known: Vec<&Migration> = migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .collect();
    let newest_known = known.iter().map(|m| m.version).max().unwrap_or(0);
    if schema == Schema::Upgrade {
        conn.ensure_migrations_table().await.map_err(migrate)?;
    } else if !has_migrations_table(conn).await? {
        return Err(StorageError::OlderSchema {
            found: 0,
            known: newest_known,
        });
    }
    if let Some(version) = conn.dirty_version().await.map_err(migrate)? {
        return Err(migrate(sqlx::migrate::MigrateError::Dirty(version)));
    }
    let mut applied = conn.list_applied_migrations().await.map_err(migrate)?;
    if let Some(found) = applied
        .iter()
        .map(|a| a.version)
        .filter(|v| !known.iter().any(|m| m.version == *v))
        .max()
    {
        return Err(StorageError::NewerSchema {
            found,
            known: newest_known,
        });
    }
    // A migration edited after release: repaired on an upgrade, else refused (its columns differ).
    for edit in EDITED.iter().filter(|e| e.engine == engine) {
        let Some(at) = applied
            .iter_mut()
            .find(|a| a.version == edit.version && hex(&a.checksum) == edit.applied_checksum)
        else {
            continue;
        };
        let present = known
            .iter()
            .find(|m| m.version == edit.version)
            .expect("an edited migration is known");
        if schema == Schema::AsFound {
            return Err(StorageError::OlderSchema {
                found: edit.version - 1,
                known: newest_known,
            });
        }
        let mut tx = conn.begin().await.map_err(|e| migrate(e.into()))?;
        for statement in edit.repair {
            tx.execute(*statement).await.map_err(|e| migrate(e.into()))?;
        }
        sqlx::query("UPDATE _sqlx_migrations SET checksum = $1 WHERE version = $2")
            .bind(present.checksum.to_vec())
            .bind(edit.version)
            .execute(&mut *tx)
            .await
            .map_err(|e| migrate(e.into()))?;
        tx.commit().await.map_err(|e| migrate(e.into()))?;
        eprintln!(
            "note: migration {:04} of this database was brought to its present file (it was applied as an earlier draft of it)",
            edit.version
        );
        at.checksum = present.checksum.clone();
    }
    for a in &applied {
        let m = known.iter().find(|m| m.version == a.version).expect("checked above");
        if m.checksum != a.checksum {
            return Err(StorageError::ChangedMigration {
                version: a.version,
                description: m.description.to_string(),
            });
        }
    }
    let missing: Vec<&&Migration> = known
        .iter()
        .filter(|m| !applied.iter().any(|a| a.version == m.version))
        .collect();
    if schema == Schema::AsFound {
        return match missing.is_empty() {
            true => Ok(Vec::new()),
            false => Err(StorageError::OlderSchema {
                found: applied.iter().map(|a| a.version).max().unwrap_or(0),
                known: newest_known,
            }),
        };
    }
    for m in &missing {
        conn.apply(m).await.map_err(migrate)?;
    }
    Ok(match applied.is_empty() {
        true => Vec::new(),
        false => missing.iter().map(|m| m.version).collect(),
    })
}

async fn has_migrations_table(conn: &mut AnyConnection) -> Result<bool, StorageError> {
    match sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM _sqlx_migrations")
        .fetch_one(&mut *conn)
        .await
    {
        Ok(_) => Ok(true),
        Err(sqlx::Error::Database(e)) if e.message().contains("_sqlx_migrations") => Ok(false),
        Err(cause) => Err(StorageError::Database {
            context: "reading the applied migrations".into(),
            cause,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A migration a database has applied never changes (sqlx refuses a database whose applied
    /// migration's checksum differs from the file's; 0015 was edited once and needs
    /// [`EDITED`]): every file's checksum is pinned in `migrations/checksums.txt`. A new
    /// migration adds its line (`sha384sum`), a changed one is a new migration instead.
    #[test]
    fn released_migrations_never_change() {
        let pinned = include_str!("../../../migrations/checksums.txt");
        let pinned: Vec<(&str, &str)> = pinned
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| l.split_once("  ").expect("`CHECKSUM  DIALECT/FILE` lines"))
            .collect();
        for (dialect, engine) in [("sqlite", Engine::Sqlite), ("postgres", Engine::Postgres)] {
            for m in migrator(engine).iter() {
                let file = format!("{dialect}/{:04}_{}.sql", m.version, m.description.replace(' ', "_"));
                let found = pinned.iter().find(|(_, f)| *f == file).map(|(c, _)| *c);
                assert_eq!(
                    found,
                    Some(hex(&m.checksum).as_str()),
                    "migrations/{file} differs from its line in migrations/checksums.txt: a released \
                     migration must not change (write a new one); a new migration adds its line"
                );
            }
        }
        assert_eq!(
            pinned.len(),
            SQLITE_MIGRATIONS.iter().count() + POSTGRES_MIGRATIONS.iter().count(),
            "migrations/checksums.txt names a file that is not a migration"
        );
    }

    /// The repair's checksum is what the file was at e2f44e2 (pinned here, as its databases carry it).
    #[test]
    fn the_edited_migration_is_known_by_its_old_checksum() {
        for edit in &EDITED {
            assert_eq!(edit.applied_checksum.len(), 96);
            let present = migrator(edit.engine)
                .iter()
                .find(|m| m.version == edit.version)
                .unwrap();
            assert_ne!(hex(&present.checksum), edit.applied_checksum);
        }
    }
}
