//! The running server: shared state (configuration, storage, benchmark catalog, attached
//! sessions), start-up recovery, and the router (REST API, WebSocket and gRPC agent endpoints).

use crate::access::RateLimiter;
use crate::api;
use crate::catalog::Catalog;
use crate::config::ServerConfig;
use crate::gateway;
use crate::storage::Storage;
use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::extract::ws::WebSocketUpgrade;
use axum::response::Response;
use axum::routing::get;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Largest WebSocket frame accepted from an agent (a batch of 4096 actions is ~0.5 MB).
const MAX_FRAME_BYTES: usize = 16 << 20;

#[derive(Debug)]
pub struct AppState {
    pub config: ServerConfig,
    pub storage: Storage,
    pub catalog: Arc<Catalog>,
    /// Trajectories, reports and exports ([`crate::objects`]).
    pub objects: crate::objects::Objects,
    /// Submissions with a connected session.
    pub attached: Mutex<HashSet<String>>,
    /// Requests per team per minute (REST and Connects).
    pub rate_limiter: RateLimiter,
    /// Ranked leaderboards, until the storage's leaderboard generation moves.
    pub leaderboards: crate::leaderboard::LeaderboardCache,
    /// Held for the server's life: one server per data directory.
    _data_dir_lock: DataDirLock,
}

/// An exclusive lock on `<data dir>/arena.lock` (released when the process ends, however it
/// ends). A second server on the same folder would re-queue the first one's running episodes
/// and write the same files, so it is refused.
#[derive(Debug)]
struct DataDirLock {
    _file: std::fs::File,
}

impl DataDirLock {
    fn acquire(dir: &std::path::Path) -> anyhow::Result<Self> {
        use std::io::{Read, Seek, Write};
        let path = dir.join("arena.lock");
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
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
                anyhow::bail!(
                    "the data directory {} is in use by another arena server{who}; stop it or choose another --data-dir",
                    dir.display()
                );
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
        file.set_len(0)?;
        file.rewind()?;
        write!(file, "{}", std::process::id())?;
        Ok(DataDirLock { _file: file })
    }
}

/// How long a scratch file goes unwritten before a starting server treats it as abandoned.
const SCRATCH_IDLE: std::time::Duration = std::time::Duration::from_secs(600);

impl AppState {
    /// Connects the database (running migrations), creates the data folders and re-queues the
    /// episodes that were running when the server last stopped.
    pub async fn open(config: ServerConfig) -> anyhow::Result<Arc<Self>> {
        config.validate()?;
        std::fs::create_dir_all(&config.data_dir).with_context(|| format!("creating {}", config.data_dir.display()))?;
        // Before the database: recovery would re-queue another live server's episodes.
        let data_dir_lock = DataDirLock::acquire(&config.data_dir)?;
        let url = config.database_url();
        let storage = Storage::connect(&url)
            .await
            .with_context(|| format!("opening the database {}", redact(&url)))?
            .with_lease(config.replica_id(), config.lease());
        let unfinished = storage.recover_after_restart().await?;
        if !unfinished.is_empty() {
            tracing::info!(
                "{} unfinished submission(s) wait for their agents to reconnect: {}",
                unfinished.len(),
                unfinished.join(", ")
            );
        }
        backfill_summaries(&storage).await?;
        tokio::spawn(renew_leases(storage.clone()));
        let objects = config.objects()?;
        // Partial files of a killed run; a command still writing one (an export) keeps it fresh.
        let removed = objects.remove_abandoned_scratch(SCRATCH_IDLE);
        if removed > 0 {
            tracing::info!("removed {removed} abandoned file(s) from the scratch folder");
        }
        let catalog = Arc::new(Catalog::new(config.benchmarks_dir(), config.motions_root.clone()));
        let rate_limiter = RateLimiter::new(config.requests_per_minute);
        Ok(Arc::new(Self {
            config,
            storage,
            catalog,
            objects,
            attached: Mutex::new(HashSet::new()),
            rate_limiter,
            leaderboards: Default::default(),
            _data_dir_lock: data_dir_lock,
        }))
    }

    /// A local HDF5 file with a submission's trajectories once it is complete (None before, or
    /// when it has none).
    pub async fn trajectory_file(&self, submission: &str) -> Result<Option<PathBuf>, crate::objects::ObjectError> {
        crate::trajectory_store::submission_file(&self.objects, submission).await
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
        match storage.renew_leases().await {
            Ok(_) if failing => {
                tracing::info!("episode claims renewed again");
                failing = false;
            }
            Ok(_) => {}
            Err(e) => {
                if !failing {
                    tracing::warn!("cannot renew this server's episode claims (retrying): {e}");
                }
                failing = true;
            }
        }
    }
}

/// Leaderboard summaries for COMPLETED submissions stored before summaries existed (or whose
/// summary was not written): computed once from their reports. An unreadable report is logged
/// and left alone (that submission stays off the leaderboard, as before).
async fn backfill_summaries(storage: &Storage) -> anyhow::Result<()> {
    let missing = storage.reports_without_summary().await?;
    if !missing.is_empty() {
        tracing::info!("computing the leaderboard summaries of {} submissions", missing.len());
    }
    for (id, report) in missing {
        match crate::leaderboard::ReportSummary::of_json(&report) {
            Ok(summary) => storage.set_summary(&id, &serde_json::to_string(&summary)?).await?,
            Err(e) => tracing::warn!("submission {id}: unreadable report, no leaderboard summary: {e}"),
        }
    }
    Ok(())
}

/// A database URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &creds[..c], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// A new submission id: short, unguessable, URL-safe.
pub fn new_submission_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    format!("sub-{}", &u[..16])
}

/// The routes: the web pages (`/`, `/static/...`, `/vendor/three/...`), `/api/v1/...` REST, the
/// `/api/v1/agent` WebSocket, and the gRPC services
/// (`/arena.v1.AgentGateway/...`, `/grpc.health.v1.Health/...`) on the same port over HTTP/2.
pub async fn router(state: Arc<AppState>) -> Router {
    let grpc = gateway::grpc::routes(state.clone()).await;
    Router::new()
        .route("/api/v1/agent", get(agent_socket))
        .merge(api::routes())
        .merge(crate::web::routes())
        .with_state(state)
        .merge(grpc)
        .fallback(no_route)
}

/// A path no route serves: a gRPC call (content type `application/grpc…`) gets gRPC's
/// `unimplemented`; any other request a JSON 404 naming the method and path.
async fn no_route(request: axum::extract::Request) -> Response {
    let path = request.uri().path().to_string();
    let grpc = request
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        return tonic::Status::unimplemented(format!("no gRPC method {path}")).into_http::<axum::body::Body>();
    }
    let message = format!(
        "no route for {} {path}; the REST API lives under /api/v1 (docs/server.md)",
        request.method()
    );
    axum::response::IntoResponse::into_response(api::ApiError(crate::access::AccessError::not_found(message)))
}

async fn agent_socket(ws: WebSocketUpgrade, State(state): State<Arc<AppState>>) -> Response {
    ws.max_message_size(MAX_FRAME_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| gateway::ws::session(socket, state))
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    axum::serve(listener, router(state).await)
        .with_graceful_shutdown(shutdown)
        .await
        .context("serving HTTP")
}
