//! The server's shared state, which the router, the REST API and the gateway all depend on (and
//! not on each other): configuration, storage, benchmark catalog, object store, attached
//! sessions, rate limits and cached leaderboards; how a server opens it (locks on the data
//! directory and the SQLite file, start-up recovery, completion of finished runs) and the
//! background tasks that live with it (lease renewal, expiry of abandoned submissions).

use crate::access::RateLimiter;
use crate::catalog::Catalog;
use crate::config::ServerConfig;
use crate::replica_lock::ReplicaLock;
use crate::storage::Storage;
use anyhow::Context;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

#[derive(Debug)]
pub struct AppState {
    pub config: ServerConfig,
    pub storage: Storage,
    pub catalog: Arc<Catalog>,
    /// Trajectories, reports and exports ([`crate::objects`]).
    pub objects: crate::objects::Objects,
    /// Submissions with a connected session ([`crate::attachments`]).
    pub attached: Arc<crate::attachments::Attachments>,
    /// Hosted submissions this server runs now, or holds waiting for a place (`crate::hosted`).
    pub hosted_runs: Mutex<HashSet<String>>,
    /// Places for hosted runs: `config.hosted_runs()` at once.
    pub hosted_places: Arc<tokio::sync::Semaphore>,
    /// Turns for checking uploaded policy files ([`crate::upload_checks`]: two at once, one per
    /// team): a check takes memory many times the file's size and up to a minute.
    pub upload_checks: crate::upload_checks::UploadChecks,
    /// Who writes which stored dataset export, and how many at once.
    pub export_writers: crate::datasets::writing::ExportWriters,
    /// Places for `jsonl.gz` downloads: `config.dataset_streams` at once, a quarter per team.
    pub dataset_streams: crate::datasets::streams::DatasetStreams,
    /// Requests per team per minute (REST and Connects).
    pub rate_limiter: RateLimiter,
    /// Agent sessions each team runs now (`max_sessions_per_team`).
    pub team_sessions: Arc<crate::team_sessions::TeamSessions>,
    /// WebSocket first frames being read ([`crate::connections::Openings`]).
    pub openings: crate::connections::Openings,
    /// The health check's last look at the database, and when (`GET /api/v1/health`): one look
    /// a second, whoever asks, so that callers cannot keep the pool's connections busy.
    pub health_probe: tokio::sync::Mutex<crate::health::Look>,
    /// Ranked leaderboards, until the storage's leaderboard generation moves.
    pub leaderboards: crate::leaderboard::LeaderboardCache,
    /// Lanes' simulators kept started between sessions (`warm_simulators`).
    pub warm_simulators: Arc<crate::orchestrator::warm::WarmSimulators>,
    /// The server's stop as its agent sessions see it, and their open connections.
    pub session_stop: crate::session_stop::SessionStop,
    /// Held for the server's life: one server per data directory, per SQLite database, and per
    /// replica id on PostgreSQL.
    locks: (ServerLock, Option<DatabaseLock>, Option<ReplicaLock>),
}

/// An exclusive lock on a file, held for the server's life (released when the process ends,
/// however it ends); the file holds the holder's pid. Two locks guard a server's state:
/// `<data dir>/arena.lock` (a second server on the same folder would re-queue the first one's
/// running episodes and write the same files) and, for SQLite, `<database>.lock` (a second
/// server on the same database file from another data directory would re-queue and run the
/// first one's episodes again, issue 30). Replicas share a PostgreSQL database under leases.
#[derive(Debug)]
struct ServerLock {
    _file: std::fs::File,
}

impl ServerLock {
    /// Locks `path`; when another process holds it, `in_use(" (pid N)")` is the error.
    fn acquire(path: &std::path::Path, in_use: impl FnOnce(&str) -> String) -> anyhow::Result<Self> {
        use std::io::{Read, Seek, Write};
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let who = if holder.is_empty() {
                    String::new()
                } else {
                    format!(" (pid {holder})")
                };
                anyhow::bail!(in_use(&who));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
        let written = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| write!(file, "{}", std::process::id()));
        written.with_context(|| format!("writing this server's pid into {}", path.display()))?;
        Ok(ServerLock { _file: file })
    }

    fn data_dir(dir: &std::path::Path) -> anyhow::Result<Self> {
        Self::acquire(&dir.join("arena.lock"), |who| {
            format!(
                "the data directory {} is in use by another arena server{who}; stop it or choose another --data-dir",
                dir.display()
            )
        })
    }
}

/// The lock of a SQLite database, held for the server's life: on the database file's identity
/// (device and inode), so no other spelling of it (a symbolic link, a hard link, `..` in the
/// path) gets a second server in (issue 39). Two locks:
/// - `flock` on the database file itself, which every name of the file shares. SQLite locks
///   with POSIX `fcntl` locks, which on Linux neither see nor release an `flock`: SQLite closing
///   its own descriptors cannot drop this one.
/// - `<resolved path>.lock` holding the holder's pid, for the message (symbolic links resolve to
///   the same file; a hard link is caught by the first lock, without a pid).
#[derive(Debug)]
struct DatabaseLock {
    _database: std::fs::File,
    _pid_file: ServerLock,
}

impl DatabaseLock {
    /// The lock of a SQLite database file (None for PostgreSQL and in-memory SQLite). Creates
    /// the (empty) database file when missing: SQLite takes an empty file as a new database.
    fn acquire(url: &str) -> anyhow::Result<Option<Self>> {
        let Some(path) = sqlite_file(url) else {
            return Ok(None);
        };
        let in_use = |who: &str| {
            format!(
                "the SQLite database {} is in use by another arena server{who}; two servers on one SQLite file would run the same episodes twice (stop it, or share a PostgreSQL database between replicas: docs/server.md)",
                path.display()
            )
        };
        let database = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening the SQLite database {}", path.display()))?;
        let resolved = std::fs::canonicalize(&path).with_context(|| format!("resolving {}", path.display()))?;
        let mut pid_file = resolved.clone().into_os_string();
        pid_file.push(".lock");
        let pid_file = ServerLock::acquire(std::path::Path::new(&pid_file), in_use)?;
        match database.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                anyhow::bail!(in_use(" (under another name of the same file: a hard link)"))
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
        Ok(Some(DatabaseLock {
            _database: database,
            _pid_file: pid_file,
        }))
    }
}

/// The file of a `sqlite://PATH[?options]` URL, as the driver opens it (percent-decoded: the
/// lock must be on the same file); None for other engines and in-memory databases.
fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let path = rest.trim_start_matches("//").split('?').next().unwrap_or_default();
    if path.is_empty() || path == ":memory:" || url.contains("mode=memory") {
        return None;
    }
    let options: sqlx::sqlite::SqliteConnectOptions = url.parse().ok()?;
    Some(options.get_filename().to_path_buf())
}

/// How long a starting server waits for a remote object store's first answer.
const STORE_CHECK_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a scratch file goes unwritten before a starting server treats it as abandoned.
const SCRATCH_IDLE: std::time::Duration = std::time::Duration::from_secs(600);

impl AppState {
    /// Resolves, with why, once another server has taken this server's replica id (on
    /// PostgreSQL, while this one's lock connection was down: [`ReplicaLock::taken`]); never on
    /// SQLite, whose file lock cannot be lost.
    pub async fn replica_id_taken(&self) -> String {
        match &self.locks.2 {
            Some(lock) => lock.taken().await,
            None => std::future::pending().await,
        }
    }

    /// Connects the database (running migrations), creates the data folders and re-queues the
    /// episodes that were running when the server last stopped.
    pub async fn open(config: ServerConfig) -> anyhow::Result<Arc<Self>> {
        config.validate()?;
        if config.data_dir.exists() && !config.data_dir.is_dir() {
            anyhow::bail!(
                "data_dir: {} is not a folder (--data-dir / ARENA_DATA_DIR)",
                config.data_dir.display()
            );
        }
        create_private_dir(&config.data_dir).with_context(|| format!("creating {}", config.data_dir.display()))?;
        // Before the database: recovery would re-queue another live server's episodes.
        let data_dir_lock = ServerLock::data_dir(&config.data_dir)?;
        let url = config.database_url();
        if let Some(parent) = sqlite_file(&url).as_deref().and_then(std::path::Path::parent) {
            // The lock file lies beside the database, whose folder SQLite would create.
            if !parent.as_os_str().is_empty() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating the directory {} of the SQLite database", parent.display()))?;
            }
        }
        let database_lock = DatabaseLock::acquire(&url)?;
        // The connection first: it waits for a database still starting (a refused connection
        // is tried again for 30 s), which the lock's own connection did not, so a replica
        // started beside its database stopped at once.
        let storage = Storage::connect(&url)
            .await
            .with_context(|| format!("opening the database {}", crate::storage::redact_url(&url)))?
            .with_lease(config.replica_id(), config.lease());
        // Before recovery: it takes back every running episode claimed under this id.
        let replica_lock = ReplicaLock::acquire(&url, &crate::storage::redact_url(&url), &config.replica_id()).await?;
        let unfinished = storage.recover_after_restart().await?;
        if !unfinished.is_empty() {
            // Hosted ones have no agent: the server takes them up itself (`hosted::supervise`).
            let hosted: HashSet<String> = storage
                .unfinished_hosted_policies()
                .await?
                .into_iter()
                .map(|p| p.submission_id)
                .collect();
            let (own, remote): (Vec<&String>, Vec<&String>) = unfinished.iter().partition(|id| hosted.contains(*id));
            if !remote.is_empty() {
                tracing::info!(
                    "{} unfinished submission(s) wait for their agents to reconnect: {}",
                    remote.len(),
                    remote.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                );
            }
            if !own.is_empty() {
                tracing::info!(
                    "{} unfinished hosted submission(s) run again as places for them free (here or on another replica): {}",
                    own.len(),
                    own.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                );
            }
        }
        backfill_summaries(&storage).await?;
        tokio::spawn(renew_leases(storage.clone()));
        let objects = config.objects()?;
        objects.check_reachable(STORE_CHECK_WITHIN).await?;
        // Partial files of a killed run; a command still writing one (an export) keeps it fresh.
        let removed = objects.remove_abandoned_scratch(SCRATCH_IDLE);
        if removed > 0 {
            tracing::info!("removed {removed} abandoned file(s) from the scratch folder");
        }
        let removed = objects.remove_abandoned_staged(SCRATCH_IDLE);
        if removed > 0 {
            tracing::info!("removed {removed} abandoned staged cop(ies) from the object store's folders");
        }
        let mut catalog = Catalog::new(config.benchmarks_dir(), config.motions_root.clone());
        if config.sim_backend == "gpu" {
            catalog = catalog.with_backend_check(crate::catalog::runs_on_gpu);
        }
        let catalog = Arc::new(catalog);
        backfill_benchmark_versions(&storage, &catalog).await?;
        complete_finished_runs(&storage, &objects, &catalog, &unfinished).await;
        tokio::spawn(merge_leftovers(storage.clone(), objects.clone(), None));
        let rate_limiter = RateLimiter::new(config.requests_per_minute);
        let config_sessions = config.max_sessions_per_team;
        let hosted_places = Arc::new(tokio::sync::Semaphore::new(config.hosted_runs()));
        let dataset_streams = crate::datasets::streams::DatasetStreams::new(config.dataset_streams as usize);
        let warm_simulators = Arc::new(crate::orchestrator::warm::WarmSimulators::new(
            config.warm_simulators as usize,
        ));
        let state = Arc::new(Self {
            warm_simulators,
            config,
            storage,
            catalog,
            objects,
            attached: Default::default(),
            hosted_runs: Mutex::new(HashSet::new()),
            hosted_places,
            upload_checks: Default::default(),
            export_writers: Default::default(),
            dataset_streams,
            rate_limiter,
            team_sessions: crate::team_sessions::TeamSessions::new(config_sessions),
            openings: Default::default(),
            health_probe: Default::default(),
            leaderboards: Default::default(),
            session_stop: Default::default(),
            locks: (data_dir_lock, database_lock, replica_lock),
        });
        // Also without an expiry: its loop marks the fleet alive, so that an expiry turned on
        // later counts no time before as downtime.
        tokio::spawn(expire_idle_submissions(Arc::downgrade(&state)));
        if state.config.unmerged_sweep_s > 0.0 {
            tokio::spawn(sweep_unmerged(Arc::downgrade(&state)));
        }
        // Hosted submissions that were running or waiting when the server (or another replica)
        // stopped go on here: no agent will reconnect for them.
        tokio::spawn(crate::hosted::supervise(Arc::downgrade(&state)));
        tokio::spawn(crate::memory::trim_when_idle(Arc::downgrade(&state)));
        Ok(state)
    }

    /// A local HDF5 file with a submission's trajectories once they are merged (None before, or
    /// when it has none); this server's merge of it, if one runs, is waited for.
    pub async fn trajectory_file(&self, submission: &str) -> Result<Option<PathBuf>, crate::objects::ObjectError> {
        let key = crate::objects::trajectory_key(submission);
        let waits = self.objects.writes_in_flight();
        waits.wait(&key, crate::trajectory_store::MERGE_WAIT).await;
        crate::trajectory_store::submission_file(&self.objects, submission).await
    }
}

/// Completes the unfinished submissions whose episodes are all final: a server stopped after the
/// last episode was committed and before the submission was (issue 30), which left it RUNNING
/// until an agent reconnected. Failures are logged; the next session's end completes it then.
async fn complete_finished_runs(
    storage: &Storage,
    objects: &crate::objects::Objects,
    catalog: &Catalog,
    ids: &[String],
) {
    for id in ids {
        let done = async {
            let (pending, running, _) = storage.episode_counts(id).await?;
            if pending > 0 || running > 0 {
                return Ok::<_, anyhow::Error>(None);
            }
            let Some(submission) = storage.submission(id).await? else {
                return Ok(None);
            };
            let spec = catalog.spec(&submission.benchmark)?;
            let merging = objects.writes_in_flight().begin(&crate::objects::trajectory_key(id));
            let done = crate::orchestrator::committer::complete_submission(storage, objects, &spec, id).await?;
            Ok(done.map(|done| (done, spec.name.clone(), merging)))
        };
        match done.await {
            Ok(Some((done, benchmark, merging))) => {
                tracing::info!(
                    "submission {id}: every episode was final when the server stopped; now {}",
                    done.status.as_str()
                );
                if done.completed_now {
                    // In the background, as after a session: a large merge takes a while.
                    let (storage, objects, id) = (storage.clone(), objects.clone(), id.clone());
                    tokio::spawn(async move {
                        crate::orchestrator::committer::merge_completed(&storage, &objects, &benchmark, &id, None)
                            .await;
                        drop(merging);
                    });
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("submission {id}: completing it at start failed (its next session will): {e:#}"),
        }
    }
}

/// Merges the runs of final submissions whose episode parts are still in the store and that
/// have no merged file: a submission is merged in the background after it completes or fails,
/// and a server that stopped meanwhile (or a store that was down longer than the retries) left
/// it unmerged, with nothing that would try again. In the background: a large one takes
/// minutes. A COMPLETED submission's leftover parts beside its merged file (a server stopped
/// between the merge and their deletion) are deleted. `ended_before` (unix ms): only
/// submissions that ended before it (a running server's look: not one another replica may be
/// merging right now).
async fn merge_leftovers(storage: Storage, objects: crate::objects::Objects, ended_before: Option<i64>) {
    let keys = match objects.list("trajectories").await {
        Ok(k) => k,
        Err(e) => {
            tracing::warn!("listing the stored trajectories for unmerged submissions: {e}");
            return;
        }
    };
    // Parts are `trajectories/<submission>/…`; merged files `trajectories/<submission>.h5`.
    let mut with_parts: Vec<String> = keys
        .iter()
        .filter_map(|k| {
            k.strip_prefix("trajectories/")?
                .split_once('/')
                .map(|(id, _)| id.to_string())
        })
        .collect();
    with_parts.sort();
    with_parts.dedup();
    for id in with_parts {
        let (status, benchmark) = match storage.submission(&id).await {
            Ok(Some(s)) if ended_before.is_none_or(|t| s.finished_at.is_some_and(|f| f < t)) => (s.status, s.benchmark),
            _ => continue,
        };
        let merged_key = crate::objects::trajectory_key(&id);
        if status == crate::storage::SubmissionStatus::Completed {
            // Not while this server merges it (completed as it started).
            let Some(_merging) = objects.writes_in_flight().try_begin(&merged_key) else {
                continue;
            };
            let rows = match storage.episodes(&id).await {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!("submission {id}: reading its episodes to merge its runs: {e}");
                    continue;
                }
            };
            let holds_all =
                keys.contains(&merged_key) && crate::trajectory_store::merged_is_current(&objects, &id, &rows).await;
            if holds_all {
                // Its merged file was stored (and synced) before its parts were deleted: the
                // parts a stopped server (or a failed deletion) left behind only take room.
                crate::orchestrator::committer::remove_merged_parts(&objects, &id).await;
                tracing::info!("submission {id}: removed the per-episode files its merged file holds");
            } else {
                // Completed, then stopped (or failed to store the file) before its merge; or a
                // file of the one-file layout that holds only the episodes run before an upgrade.
                if ended_before.is_some() {
                    // A running server's look, itself repeated: no retries of its own.
                    crate::orchestrator::committer::merge_completed_once(&storage, &objects, &benchmark, &id).await;
                } else {
                    crate::orchestrator::committer::merge_completed(&storage, &objects, &benchmark, &id, None).await;
                }
                if objects.exists(&merged_key).await.unwrap_or(false) {
                    tracing::info!("submission {id}: the runs of this completed submission are merged now");
                }
            }
            continue;
        }
        if status != crate::storage::SubmissionStatus::Failed {
            continue;
        }
        match crate::trajectory_store::settle_failed(&storage, &objects, &id).await {
            Ok(()) => tracing::info!("submission {id}: the runs of this failed submission are merged now"),
            Err(e) => tracing::warn!("submission {id}: merging the runs of a failed submission: {e:#}"),
        }
    }
}

/// While the server lives, every `unmerged_sweep_s`: [`merge_leftovers`] for the submissions
/// that ended at least that long ago. The start's sweep covers a server that stopped; this one
/// a replica that stopped while the others went on, and a merge whose retries ran out.
async fn sweep_unmerged(state: std::sync::Weak<AppState>) {
    let every = match state.upgrade() {
        Some(s) => std::time::Duration::from_secs_f64(s.config.unmerged_sweep_s),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(state) = state.upgrade() else { return };
        let (storage, objects) = (state.storage.clone(), state.objects.clone());
        // Not held across the sweep: a server that shuts down meanwhile is not kept alive.
        drop(state);
        let ended_before = crate::storage::now_ms() - every.as_millis() as i64;
        merge_leftovers(storage, objects, Some(ended_before)).await;
    }
}

/// Ends the submissions that nobody has run for `idle_submission_expiry_s` (an agent that
/// crashed or refused its session, and never came back) as FAILED with the reason, so they stop
/// looking like a stalled server; their unfinished episodes fail with the same reason. Checks a
/// few times per expiry period (at most once a minute), while the server lives. With no expiry
/// (0) it only marks the fleet alive, once a minute.
async fn expire_idle_submissions(state: std::sync::Weak<AppState>) {
    let expiry = match state.upgrade() {
        Some(s) => std::time::Duration::from_secs_f64(s.config.idle_submission_expiry_s),
        None => return,
    };
    let expires = !expiry.is_zero();
    let period = (if expires {
        expiry / 4
    } else {
        std::time::Duration::from_secs(60)
    })
    .clamp(
        std::time::Duration::from_millis(250),
        std::time::Duration::from_secs(60),
    );
    // The servers' own downtime is not their agents' idleness: an agent waiting for a restart
    // (the SDKs keep trying) was abandoned at the first look after a start. Each look marks the
    // fleet alive; a starting server adds the time since the last mark (none of the servers
    // was up, as far as any said) to the expiry, for as long as it runs.
    let downtime = match state.upgrade() {
        Some(s) => match s.storage.fleet_alive_at().await {
            Ok(at) => at.map_or(0, |at| (crate::storage::now_ms() - at).max(0)),
            Err(e) => {
                tracing::warn!("reading when a server was last alive (the idle expiry counts no downtime): {e}");
                0
            }
        },
        None => return,
    };
    if downtime > 0 && expires {
        tracing::info!(
            "the idle expiry leaves out the {} without a server before this start",
            humantime::format_duration(std::time::Duration::from_secs((downtime / 1000) as u64))
        );
    }
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(state) = state.upgrade() else { return };
        if let Err(e) = state.storage.mark_fleet_alive(crate::storage::now_ms()).await {
            tracing::warn!("marking this server alive for the idle expiry: {e}");
        }
        if !expires {
            continue;
        }
        let idle_since = crate::storage::now_ms() - expiry.as_millis() as i64 - downtime;
        let idle = match state.storage.idle_submissions(idle_since).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!("looking for idle submissions: {e}");
                continue;
            }
        };
        for id in idle {
            if state.attached.contains(&id) {
                continue; // connected here, between two episodes
            }
            // Every episode ran: its completion failed (a full disk, a store down longer than
            // the retries) and no session came back to try again. Completed now, never
            // "abandoned"; a completion that fails again is tried at the next tick.
            if let Ok((0, 0, _)) = state.storage.episode_counts(&id).await {
                complete_finished_runs(
                    &state.storage,
                    &state.objects,
                    &state.catalog,
                    std::slice::from_ref(&id),
                )
                .await;
                continue;
            }
            let reason = format!(
                "abandoned: no agent ran it for {} (the server's idle_submission_expiry_s); resuming is no longer possible",
                humantime::format_duration(std::time::Duration::from_secs(expiry.as_secs()))
            );
            match state.storage.expire_idle_submission(&id, &reason, idle_since).await {
                Ok(true) => {
                    tracing::info!("submission {id}: {reason}");
                    if let Err(e) = crate::trajectory_store::settle_failed(&state.storage, &state.objects, &id).await {
                        tracing::warn!("submission {id}: merging the runs of an abandoned submission: {e:#}");
                    }
                }
                Ok(false) => {} // finished, or taken up again, meanwhile
                Err(e) => tracing::warn!("ending idle submission {id}: {e}"),
            }
        }
    }
}

/// Renews this server's episode claims three times per lease, for the life of the process. A
/// failed renewal is logged and retried at the next tick: a database outage shorter than two
/// thirds of a lease loses no claim.
async fn renew_leases(storage: Storage) {
    let period = storage.lease().duration / 3;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        // Claims' times follow the database's clock: its offset from this machine's, kept
        // fresh (a clock stepped by NTP, a VM resumed from a pause). Asked of the database
        // whether this server holds claims or not, it also tells an outage.
        let started = tokio::time::Instant::now();
        let synced = storage.sync_clock().await;
        match storage.renew_leases().await {
            Ok(_) if synced.is_err() => {
                storage.note_database_unreachable();
                if !failing {
                    let e = synced.err().map(|e| e.to_string()).unwrap_or_default();
                    tracing::warn!("cannot read the database's clock (retrying): {e}");
                }
                failing = true;
            }
            Ok(_) => {
                // A round the database kept waiting past a third of a lease (the pool waits up
                // to 30 s for a connection): an outage all the same, though nothing failed.
                if failing || started.elapsed() > period {
                    storage.note_database_unreachable();
                }
                storage.note_database_answers();
                if failing {
                    tracing::info!("episode claims renewed again");
                    failing = false;
                }
            }
            Err(e) => {
                storage.note_database_unreachable();
                if !failing {
                    tracing::warn!("cannot renew this server's episode claims (retrying): {e}");
                }
                failing = true;
            }
        }
    }
}

/// Leaderboard summaries for COMPLETED submissions stored before summaries existed, or before
/// they kept their report's `format_version` (or whose summary was not written): computed once
/// from their reports. An unreadable report is logged and left alone (that submission stays off
/// the leaderboard, as before). Then the reports an older arena scored by older rules are
/// named, with what scores them again ([`warn_of_older_report_formats`]).
async fn backfill_summaries(storage: &Storage) -> anyhow::Result<()> {
    let missing = storage.reports_without_summary().await?;
    if !missing.is_empty() {
        // Said on stderr as the migration note is: on a large database this takes a while
        // before the server listens (an operator saw nothing for it, a health check may kill it).
        eprintln!(
            "note: computing the leaderboard summaries of {} submission(s) an older arena stored…",
            missing.len()
        );
        tracing::info!("computing the leaderboard summaries of {} submissions", missing.len());
    }
    for id in missing {
        let Some(report) = storage.report_json(&id).await? else {
            continue;
        };
        match crate::leaderboard::ReportSummary::of_json(&report) {
            Ok(summary) => storage.set_summary(&id, &serde_json::to_string(&summary)?).await?,
            Err(e) => tracing::warn!("submission {id}: unreadable report, no leaderboard summary: {e}"),
        }
    }
    let older: Vec<(String, u32)> = storage
        .completed_summaries()
        .await?
        .into_iter()
        .filter_map(|(id, json)| {
            let summary: crate::leaderboard::ReportSummary = serde_json::from_str(&json).ok()?;
            summary
                .is_older_format()
                .then(|| (id, summary.format_version.unwrap_or(1)))
        })
        .collect();
    warn_of_older_report_formats(&older);
    Ok(())
}

/// Says on stderr which completed submissions an older arena scored by older rules (their
/// report's `format_version` is below this arena's): they rank beside the others, marked on the
/// boards (`older_report_format`), until they are scored again. Said at every start while any
/// is left.
fn warn_of_older_report_formats(older: &[(String, u32)]) {
    if older.is_empty() {
        return;
    }
    const NAMED: usize = 20;
    let names: Vec<String> = older
        .iter()
        .take(NAMED)
        .map(|(id, v)| format!("{id} (format {v})"))
        .collect();
    let more = older.len().saturating_sub(NAMED);
    eprintln!(
        "warning: {} completed submission(s) were scored by an older arena's rules (report format below {}): \
         their leaderboard rows are marked and not comparable with the others until \
         `arena admin submissions rescore ID` scores each again: {}{}",
        older.len(),
        arena_bench::aggregate::REPORT_FORMAT_VERSION,
        names.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    );
}

/// Submissions stored before versions were kept (migration 0013) get the version their
/// benchmark's file has now, once: the version they ran under is most likely that one, and a
/// later bump then leaves them off the board as it does every other earlier submission.
async fn backfill_benchmark_versions(storage: &Storage, catalog: &Catalog) -> anyhow::Result<()> {
    for spec in catalog.offered() {
        let set = storage.set_missing_benchmark_versions(&spec.name, spec.version).await?;
        if set > 0 {
            // Once and for good (it decides which board they rank on): said where the operator
            // sees it, as the migration note.
            eprintln!(
                "note: benchmark {}: {set} submission(s) stored before versions were kept are taken as version {} \
                 (its file's version now; docs/server.md, backups and upgrades)",
                spec.name, spec.version
            );
            tracing::info!(
                "benchmark {}: {set} submission(s) stored before versions were kept taken as version {}",
                spec.name,
                spec.version
            );
        }
    }
    Ok(())
}

/// A new submission id: short, unguessable, URL-safe.
pub fn new_submission_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    format!("sub-{}", &u[..16])
}

/// A line for each phase that has not ended whose benchmark this server cannot load (motions
/// missing under the motions root, a broken file): `arena serve` prints them at start, so the
/// organiser hears of it before the participants are refused. Loading also warms the catalog.
pub async fn unloadable_phases(state: &Arc<AppState>) -> anyhow::Result<Vec<String>> {
    let phases = state.storage.phases_not_ended(crate::storage::now_ms()).await?;
    let mut warnings = Vec::new();
    let mut checked: std::collections::HashMap<String, Option<String>> = std::collections::HashMap::new();
    for phase in phases {
        if !checked.contains_key(&phase.benchmark) {
            let catalog = state.catalog.clone();
            let name = phase.benchmark.clone();
            let problem = match tokio::task::spawn_blocking(move || catalog.load(&name)).await? {
                Ok(_) => None,
                // The server's own log: its folders named as they are.
                Err(e) => Some(e.to_string()),
            };
            checked.insert(phase.benchmark.clone(), problem);
        }
        if let Some(Some(problem)) = checked.get(&phase.benchmark) {
            warnings.push(format!(
                "phase {} (challenge {}) runs benchmark {}, which cannot be loaded here, so its participants are refused (benchmark_unavailable): {problem}",
                phase.id, phase.challenge_id, phase.benchmark
            ));
        }
    }
    Ok(warnings)
}

/// A line for each benchmark the server offers that it cannot load (its connects are refused
/// `benchmark_unavailable`, its REST submissions with the same reason): the benchmarks no phase
/// runs, which [`unloadable_phases`] leaves out. Loading warms the catalog too.
pub async fn unloadable_benchmarks(state: &Arc<AppState>) -> Vec<String> {
    let catalog = state.catalog.clone();
    let offered = match tokio::task::spawn_blocking(move || catalog.offered()).await {
        Ok(specs) => specs,
        Err(e) => return vec![format!("listing the benchmarks: {e}")],
    };
    let mut warnings = Vec::new();
    for spec in offered {
        let catalog = state.catalog.clone();
        let name = spec.name.clone();
        match tokio::task::spawn_blocking(move || catalog.load(&name)).await {
            Ok(Err(e)) => warnings.push(format!(
                "benchmark {} cannot be loaded here, so its submissions are refused (benchmark_unavailable): {e}",
                spec.name
            )),
            Ok(Ok(loaded)) => {
                let recorded = state.storage.benchmark_definition(&spec.name, spec.version).await;
                if let Ok(Some(recorded)) = recorded
                    && crate::catalog::changed_since(&recorded, &loaded.definition)
                {
                    warnings.push(format!(
                        "benchmark {}'s file changed since version {} first ran a submission (its rules or motions \
                         differ), so its new submissions are refused (benchmark_unavailable): bump its `version`, or \
                         restore the file",
                        spec.name, spec.version
                    ));
                }
            }
            Err(_) => {}
        }
    }
    warnings
}

/// Creates the data folder (or a `file://` object store's), readable by this user only when this
/// call makes it (the database holds members' emails and token hashes, the folders every team's
/// policies and trajectories and the hidden test sets' results); a folder that exists keeps the
/// permissions its operator gave it.
pub(crate) fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

#[cfg(test)]
mod tests {
    #[cfg(unix)]
    #[test]
    fn a_data_folder_made_by_the_server_is_its_users_alone() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("arena-private-dir-{}", std::process::id()));
        let made = root.join("competition/data");
        super::create_private_dir(&made).unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&made), 0o700);
        // One that exists keeps what its operator gave it.
        let given = root.join("given");
        std::fs::create_dir(&given).unwrap();
        std::fs::set_permissions(&given, std::fs::Permissions::from_mode(0o750)).unwrap();
        super::create_private_dir(&given).unwrap();
        assert_eq!(mode(&given), 0o750);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn sqlite_files_of_urls() {
        use std::path::PathBuf;
        assert_eq!(
            super::sqlite_file("sqlite:///d/arena.db"),
            Some(PathBuf::from("/d/arena.db"))
        );
        assert_eq!(
            super::sqlite_file("sqlite://rel/a.db?mode=rwc"),
            Some(PathBuf::from("rel/a.db"))
        );
        assert_eq!(super::sqlite_file("sqlite::memory:"), None);
        assert_eq!(super::sqlite_file("sqlite://x.db?mode=memory"), None);
        assert_eq!(super::sqlite_file("postgres://u@h/db"), None);
        // As the driver opens it: percent-decoded.
        assert_eq!(
            super::sqlite_file("sqlite:///srv/my%20db/arena.db"),
            Some(PathBuf::from("/srv/my db/arena.db"))
        );
        // A data directory with URL characters in its name round-trips.
        let config = crate::config::ServerConfig {
            data_dir: PathBuf::from("/srv/50% off?#/data"),
            ..Default::default()
        };
        assert_eq!(
            super::sqlite_file(&config.database_url()),
            Some(PathBuf::from("/srv/50% off?#/data/arena.db"))
        );
    }
}
