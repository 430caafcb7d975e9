//! `arena serve`: the evaluation server, and the configuration flags it shares with `arena demo`.

use crate::app;
use crate::config::{ConfigError, ServerConfig};
use crate::state::{self, AppState};
use anyhow::Context;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Server settings: a TOML file (`--config`), overridden by `ARENA_*` variables, overridden by
/// these flags. Without any, the server runs on embedded defaults (SQLite in ./arena-data).
/// Two groups: where the data lives ([`StorageArgs`], all that `arena dataset` and `arena
/// audit` take) and how a running server serves ([`ServingArgs`]). The lanes' physics backend is
/// in [`LaneBackendArgs`], apart, because `arena audit` has a `--backend` of its own.
#[derive(Debug, Args, Clone, Default)]
pub struct ConfigArgs {
    #[command(flatten)]
    pub storage: StorageArgs,
    #[command(flatten)]
    pub serving: ServingArgs,
}

/// The configuration file, the data, the benchmarks and the object store.
#[derive(Debug, Args, Clone, Default)]
pub struct StorageArgs {
    /// TOML configuration file (keys as in docs/server.md).
    #[arg(long, env = "ARENA_CONFIG")]
    pub config: Option<PathBuf>,
    /// Folder for the database, trajectories and reports [default: arena-data].
    #[arg(long, env = "ARENA_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// sqlite://PATH or postgres://USER@HOST:PORT/DB [default: sqlite://<data-dir>/arena.db].
    #[arg(long, env = "ARENA_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Folder of benchmark files [default: the shipped benchmarks/, found from the binary upwards
    /// (an install's share/mimicarena/benchmarks or a checkout's benchmarks/), else ./benchmarks].
    #[arg(long, env = "ARENA_BENCHMARKS_DIR")]
    pub benchmarks_dir: Option<PathBuf>,
    /// Folder the benchmarks' motion paths are relative to [default: .].
    #[arg(long, env = "ARENA_MOTIONS_ROOT")]
    pub motions_root: Option<PathBuf>,
    /// Where trajectories, reports and exports go: file:///PATH or s3://BUCKET[/PREFIX]
    /// (credentials from AWS_*) [default: the data directory].
    #[arg(long, env = "ARENA_OBJECT_STORE")]
    pub object_store: Option<String>,
    /// Seconds a failing object store write keeps retrying [default: 120].
    #[arg(long, env = "ARENA_OBJECT_STORE_RETRY_S")]
    pub object_store_retry_s: Option<f64>,
    /// MB free on the data directory's file system below which the health checks report the
    /// server unavailable (0 = not looked at) [default: 64].
    #[arg(long, env = "ARENA_MIN_FREE_DISK_MB")]
    pub min_free_disk_mb: Option<u64>,
    /// With an s3:// store: MB of downloaded objects kept in the scratch folder's cache; the least
    /// recently used go first (0 = no limit) [default: 16384].
    #[arg(long, env = "ARENA_DOWNLOAD_CACHE_MB")]
    pub download_cache_mb: Option<u64>,
    /// Write part files through the page cache even where the filesystem takes O_DIRECT (for
    /// data directories on slow block storage); each is then written whole when its episode
    /// ends, none while it runs.
    #[arg(long, env = "ARENA_BUFFERED_PARTS", value_parser = clap::builder::FalseyValueParser::new())]
    pub buffered_parts: bool,
}

/// What only a running server uses: address, admin token, batching, timing, replicas, pages.
#[derive(Debug, Args, Clone, Default)]
pub struct ServingArgs {
    /// Address to listen on (port 0 picks a free port) [default: 127.0.0.1:8080 for `serve`,
    /// a free loopback port for `demo`].
    #[arg(long, env = "ARENA_BIND", value_parser = crate::config::parse_bind)]
    pub bind: Option<SocketAddr>,
    /// Administrator token (creates teams over the REST API).
    #[arg(long, env = "ARENA_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Episodes per GetAction request [default: 16].
    #[arg(long, env = "ARENA_MAX_BATCH")]
    pub max_batch: Option<u32>,
    /// Batches per session simulated side by side [default: 2].
    #[arg(long, env = "ARENA_LANES")]
    pub lanes: Option<u32>,
    /// Simulation threads per lane (0 = all cores) [default: 0].
    #[arg(long, env = "ARENA_SIM_THREADS")]
    pub sim_threads: Option<u32>,
    /// Simulators kept started between sessions for later lanes of the same shape (0 = none)
    /// [default: 2].
    #[arg(long, env = "ARENA_WARM_SIMULATORS")]
    pub warm_simulators: Option<u32>,
    /// GPU backend: worker processes started ahead, their libraries imported, for lanes that
    /// find no kept simulator of their shape (0 = none) [default: 1].
    #[arg(long, env = "ARENA_SPARE_SIMULATORS")]
    pub spare_simulators: Option<u32>,
    /// Benchmark whose lanes' simulators start with the server, for its first submission to
    /// take over (repeat, or separate with commas; needs lanes × benchmarks <= warm_simulators).
    #[arg(
        long = "prewarm",
        value_name = "BENCHMARK",
        env = "ARENA_PREWARM",
        value_delimiter = ','
    )]
    pub prewarm: Vec<String>,
    /// Seconds to wait for an Action (0 = the benchmark's limits.step_timeout_ms) [default: 0].
    #[arg(long, env = "ARENA_STEP_TIMEOUT_S")]
    pub step_timeout_s: Option<f64>,
    /// Hosted submissions (uploaded policies) evaluated at once; more wait their turn
    /// (0 = the number of cores) [default: 0].
    #[arg(long, env = "ARENA_HOSTED_RUNS")]
    pub hosted_runs: Option<u32>,
    /// MB of HDF5 dataset exports kept for later downloads; the oldest go first (0 = no limit)
    /// [default: 16384].
    #[arg(long, env = "ARENA_EXPORT_CACHE_MB")]
    pub export_cache_mb: Option<u64>,
    /// jsonl.gz dataset downloads streamed at once; more wait up to 30 s for a place, then are
    /// answered 503 with Retry-After (1-1024) [default: 16].
    #[arg(long, env = "ARENA_DATASET_STREAMS")]
    pub dataset_streams: Option<u32>,
    /// Heartbeat interval, seconds [default: 30].
    #[arg(long, env = "ARENA_HEARTBEAT_INTERVAL_S")]
    pub heartbeat_interval_s: Option<f64>,
    /// Silence that ends a session, seconds [default: 60].
    #[arg(long, env = "ARENA_HEARTBEAT_TIMEOUT_S")]
    pub heartbeat_timeout_s: Option<f64>,
    /// Runs of an episode cut by lost connections before it is FAILED; runs the server loses or
    /// gives back are not counted [default: 3].
    #[arg(long, env = "ARENA_MAX_ATTEMPTS")]
    pub max_attempts: Option<u32>,
    /// Requests per team per minute, REST calls and agent connects (0 = no limit) [default: 600].
    #[arg(long, env = "ARENA_REQUESTS_PER_MINUTE")]
    pub requests_per_minute: Option<u32>,
    /// Agent sessions a team may run at once on this server; past it a Connect is refused
    /// `rate_limited`, which the SDKs wait out (0 = no limit) [default: 16].
    #[arg(long, env = "ARENA_MAX_SESSIONS_PER_TEAM")]
    pub max_sessions_per_team: Option<u32>,
    /// This server's id in episode claims; replicas on one PostgreSQL need distinct ids
    /// [default: HOST:DATA_DIR].
    #[arg(long, env = "ARENA_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// Seconds an episode claim holds without renewal; a dead replica's episodes are claimed
    /// again after this long [default: 30].
    #[arg(long, env = "ARENA_LEASE_S")]
    pub lease_s: Option<f64>,
    /// Seconds an unfinished submission may wait without an agent before it ends as FAILED
    /// with the reason (0 = never) [default: 86400].
    #[arg(long, env = "ARENA_IDLE_SUBMISSION_EXPIRY_S")]
    pub idle_submission_expiry_s: Option<f64>,
    /// Seconds between looks for final submissions whose runs were never merged into one file
    /// (a replica that stopped after completing one, a merge that kept failing), merging those
    /// that ended at least this long ago (0 = only at start) [default: 7200].
    #[arg(long, env = "ARENA_UNMERGED_SWEEP_S")]
    pub unmerged_sweep_s: Option<f64>,
    /// Folder of the web pages served at / [default: the shipped web/].
    #[arg(long, env = "ARENA_WEB_DIR")]
    pub web_dir: Option<PathBuf>,
    /// Open connections in total; more are answered 503 and closed (kept below the file
    /// descriptor limit) [default: 4096].
    #[arg(long, env = "ARENA_MAX_CONNECTIONS")]
    pub max_connections: Option<u32>,
    /// Open connections from one client address [default: 256].
    #[arg(long, env = "ARENA_MAX_CONNECTIONS_PER_ADDRESS")]
    pub max_connections_per_address: Option<u32>,
    /// Seconds a connection has to send its first request and any request its headers
    /// [default: 30].
    #[arg(long, env = "ARENA_HEADER_TIMEOUT_S")]
    pub header_timeout_s: Option<f64>,
    /// Seconds with no request in flight and no traffic before a connection is closed
    /// [default: 120].
    #[arg(long, env = "ARENA_IDLE_TIMEOUT_S")]
    pub idle_timeout_s: Option<f64>,
    /// Load balancers whose connections may begin with a PROXY protocol header giving the
    /// client's address (HAProxy's send-proxy-v2): comma-separated addresses and networks, e.g.
    /// 10.0.0.0/8. Behind a TCP balancer without it, every client is the balancer's address to the
    /// per-address limits [default: none].
    #[arg(long, env = "ARENA_PROXY_PROTOCOL_FROM")]
    pub proxy_protocol_from: Option<String>,
}

/// The physics backend of a running server's lanes (`sim_backend` and the `gpu_*` keys).
#[derive(Debug, Args, Clone, Default)]
pub struct LaneBackendArgs {
    /// Physics backend of the lanes: cpu or gpu (MuJoCo MJX or MuJoCo Warp) [default: cpu].
    #[arg(long = "backend", env = "ARENA_SIM_BACKEND")]
    pub sim_backend: Option<String>,
    /// GPU backend: auto, cpu (JAX's or Warp's CPU device) or gpu [default: auto].
    #[arg(long, env = "ARENA_GPU_DEVICE")]
    pub gpu_device: Option<String>,
    /// GPU backend: physics implementation, auto (MuJoCo Warp where a CUDA device is present and
    /// --gpu-device is not cpu, else MuJoCo MJX), jax (MuJoCo MJX) or warp (MuJoCo Warp)
    /// [default: auto].
    #[arg(long, env = "ARENA_GPU_IMPL")]
    pub gpu_impl: Option<String>,
    /// GPU backend: Python with python/requirements-gpu.txt [default: $ARENA_GPU_PYTHON, else python3].
    #[arg(long, env = "ARENA_GPU_PYTHON")]
    pub gpu_python: Option<PathBuf>,
    /// GPU backend: lets --gpu-impl stub through (no physics, meaningless scores): for measuring
    /// what surrounds the physics at GPU sizes, never for results that count.
    #[arg(long, env = "ARENA_GPU_ALLOW_STUB", value_parser = clap::builder::FalseyValueParser::new())]
    pub gpu_allow_stub: bool,
}

impl StorageArgs {
    /// The configuration of a command that reads a server's data and runs no server: the file,
    /// then environment and these flags on top; every other key is the file's.
    pub fn resolve(&self) -> anyhow::Result<ServerConfig> {
        ConfigArgs {
            storage: self.clone(),
            serving: ServingArgs::default(),
        }
        .resolve_with(&LaneBackendArgs::default())
    }
}

impl ConfigArgs {
    /// The configuration of a server: file, then environment and flags (these and the lanes'
    /// backend) on top.
    pub fn resolve_with(&self, lane_backend: &LaneBackendArgs) -> anyhow::Result<ServerConfig> {
        // Checked whole once flags and the environment are applied: `--lanes 2` mends a file's
        // `lanes = 0`.
        let mut c = match &self.storage.config {
            Some(path) => ServerConfig::parse_file(path)?,
            None => ServerConfig::default(),
        };
        macro_rules! set {
            ($group:ident: $($field:ident),*) => { $( if let Some(v) = &$group.$field { c.$field = v.clone(); } )* };
        }
        let (storage, serving) = (&self.storage, &self.serving);
        set!(storage: data_dir, database_url, benchmarks_dir, motions_root, object_store, object_store_retry_s, min_free_disk_mb, download_cache_mb);
        if storage.buffered_parts {
            c.buffered_parts = true;
        }
        set!(
            serving: bind,
            admin_token,
            max_batch,
            lanes,
            sim_threads,
            warm_simulators,
            spare_simulators,
            step_timeout_s,
            hosted_runs,
            export_cache_mb,
            dataset_streams,
            heartbeat_interval_s,
            heartbeat_timeout_s,
            max_attempts,
            requests_per_minute,
            max_sessions_per_team,
            replica_id,
            lease_s,
            idle_submission_expiry_s,
            unmerged_sweep_s,
            web_dir,
            max_connections,
            max_connections_per_address,
            header_timeout_s,
            idle_timeout_s,
            proxy_protocol_from
        );
        if !serving.prewarm.is_empty() {
            c.prewarm = serving.prewarm.iter().map(|n| n.trim().to_string()).collect();
        }
        set!(lane_backend: sim_backend, gpu_device, gpu_impl, gpu_python);
        if lane_backend.gpu_allow_stub {
            c.gpu_allow_stub = true;
        }
        c.validate().map_err(|e| match (&e, &self.storage.config) {
            (ConfigError::Value { key, .. }, file) => {
                let file = file
                    .as_ref()
                    .map(|p| format!("`{key}` in {}, ", p.display()))
                    .unwrap_or_default();
                // The flags are the keys' names, but for the backend's.
                let flag = match key.as_str() {
                    "sim_backend" => "backend".to_string(),
                    other => other.replace('_', "-"),
                };
                let var = format!("ARENA_{}", key.to_uppercase());
                // Where it was set, when a flag or the environment set it (later sources win);
                // else where it can be, as the value may be the default.
                let typed = std::env::args().any(|a| a == format!("--{flag}") || a.starts_with(&format!("--{flag}=")));
                let said = match (typed, std::env::var_os(&var).is_some()) {
                    (true, _) => format!("{e} (given with --{flag})"),
                    (false, true) => format!("{e} (given with the environment variable {var})"),
                    (false, false) => format!("{e} (set by {file}--{flag} or {var})"),
                };
                // A configuration that cannot run exits 2, as a command line clap refuses.
                anyhow::Error::new(arena_sdk::cli::UsageError(said))
            }
            _ => anyhow::Error::new(arena_sdk::cli::UsageError(e.to_string())),
        })?;
        Ok(c)
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub lane_backend: LaneBackendArgs,
}

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    for warning in unknown_arena_variables::<ServeArgs>(std::env::vars_os().map(|(k, _)| k)) {
        eprintln!("warning: {warning}");
    }
    if let Some(warning) = admin_token_on_command_line(
        a.config.serving.admin_token.as_deref(),
        std::env::var("ARENA_ADMIN_TOKEN").ok().as_deref(),
    ) {
        eprintln!("warning: {warning}");
    }
    let config = a.config.resolve_with(&a.lane_backend)?;
    let benchmarks = config.benchmarks_dir();
    if !benchmarks.is_dir() {
        // A server offering no benchmark at all is a mistyped path, not a choice.
        anyhow::bail!(
            "benchmarks_dir: {} is not a folder (--benchmarks-dir / ARENA_BENCHMARKS_DIR)",
            benchmarks.display()
        );
    }
    if !config.motions_root.is_dir() {
        // Every benchmark that reads motion files would fail at its first session instead.
        anyhow::bail!(
            "motions_root: {} is not a folder (--motions-root / ARENA_MOTIONS_ROOT)",
            config.motions_root.display()
        );
    }
    let (offered, problems) = crate::catalog::Catalog::new(benchmarks.clone(), config.motions_root.clone()).survey();
    for problem in &problems {
        eprintln!("warning: {problem}");
    }
    if offered.is_empty() {
        eprintln!("warning: {} offers no benchmark", benchmarks.display());
    }
    if let Some(name) = config.prewarm.iter().find(|n| !offered.iter().any(|s| &s.name == *n)) {
        let mut names: Vec<&str> = offered.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        anyhow::bail!(
            "prewarm: {} offers no benchmark {name:?} (offered: {})",
            benchmarks.display(),
            names.join(", ")
        );
    }
    let web = config.web_dir();
    if !web.join("index.html").is_file() {
        // Said now, not at the first page request; the API and agents work without the pages.
        eprintln!(
            "warning: web_dir {} has no index.html: the web pages will not load (--web-dir / ARENA_WEB_DIR)",
            web.display()
        );
    } else if !web.join("node_modules/three").is_dir() {
        eprintln!(
            "warning: web_dir {} lacks node_modules/three: the 3-D replay will not draw (run `make`, which runs npm ci in web/)",
            web.display()
        );
    }
    if let Some(checked) = check_gpu_worker(&config)? {
        println!("arena serve: {checked}");
    }
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let result = runtime.block_on(async move {
        if config.admin_token.is_empty() {
            eprintln!("note: no admin token (ARENA_ADMIN_TOKEN / --admin-token): team management is disabled");
        } else if config.admin_token == PLACEHOLDER_ADMIN_TOKEN {
            // A server started with the documented placeholder is an open one: whoever read
            // the docs runs the competition.
            return Err(arena_sdk::cli::UsageError(format!(
                "the admin token is the placeholder `{PLACEHOLDER_ADMIN_TOKEN}`: give a secret of 16 or more random \
                 characters (ARENA_ADMIN_TOKEN, e.g. `openssl rand -hex 24`)"
            ))
            .into());
        } else if let Some(why) = weak_admin_token(&config.admin_token) {
            eprintln!(
                "warning: the admin token {why}: anyone who guesses it runs the competition; give one of 16 or more \
                 random characters (ARENA_ADMIN_TOKEN / --admin-token)"
            );
        }
        // The port first: a second server started on a port in use stops here, before its
        // start-up re-queues the episodes claimed under its replica id (which, with the same
        // id, are the running server's). Connections wait in the backlog meanwhile.
        let listener = tokio::net::TcpListener::bind(config.bind)
            .await
            .with_context(|| format!("listening on {}", config.bind))?;
        if let Some(warning) = sqlite_beside_another_database(&config) {
            eprintln!("warning: {warning}");
        }
        let state = AppState::open(config.clone()).await?;
        for warning in state::unloadable_phases(&state).await? {
            eprintln!("warning: {warning}");
        }
        // Every other benchmark offered, behind the start (a large catalog takes a while).
        let checking = state.clone();
        tokio::spawn(async move {
            for warning in state::unloadable_benchmarks(&checking).await {
                tracing::warn!("{warning}");
            }
        });
        let addr = listener.local_addr()?;
        // Both signals are listened for from here on, before the line that tells scripts the
        // server is up (a signal sent on seeing it stops the server the usual way rather than
        // killing it), and kept for the forced exit below rather than registered anew after
        // the first. (Two sent at the same instant arrive as one: the kernel and tokio merge a
        // pending signal with the next.)
        let mut signals = StopSignals::listen();
        // Once the server can serve: a start that fails leaves no worker behind.
        crate::orchestrator::warm::keep_spares(&state.config);
        crate::orchestrator::warm::prewarm(&state);
        // Tests and scripts read this line to find the port.
        println!("arena serve: listening on http://{addr} (agents: ws://{addr}/api/v1/agent or gRPC at {addr})");
        println!(
            "arena serve: database {}, data in {}, objects in {}, replica {}",
            crate::storage::redact_url(&config.database_url()),
            config.data_dir.display(),
            state.objects.shown(),
            state.storage.lease().replica
        );
        use std::io::Write;
        std::io::stdout().flush().ok();
        // Why the server stopped on its own, as its exit's error.
        let taken = std::sync::Arc::new(std::sync::Mutex::new(None));
        let stopped = {
            let (state, taken) = (state.clone(), taken.clone());
            async move {
                let why = tokio::select! {
                    signal = signals.recv() => Ok(signal),
                    why = state.replica_id_taken() => Err(why),
                };
                // An operator who does not want to wait for the bounded stop below signals
                // (again): the process ends at once, and the next start (or another replica,
                // once the leases run out) takes back what it ran.
                let when = if why.is_ok() { "again" } else { "while stopping" };
                tokio::spawn(async move {
                    // A hangup comes twice when a terminal closes (the kernel's, then the
                    // shell's to its jobs): only an operator's signal cuts the stop short.
                    let signal = loop {
                        match signals.recv().await {
                            "SIGHUP" => continue,
                            other => break other,
                        }
                    };
                    say(&format!(
                        "arena serve: {signal} {when}: exiting now; running episodes are re-queued at the next start"
                    ));
                    // 128 + the signal's number, as a shell reports a process it killed.
                    std::process::exit(if signal == "SIGINT" { 130 } else { 143 });
                });
                match why {
                    Ok(signal) => {
                        // Told to stop (a deploy, an operator): what runs here goes back to the
                        // queue now, charged to nobody; should the database refuse, the next
                        // start (or another replica, once the leases run out) takes it back.
                        // Bounded: an unreachable database must not hold the stop.
                        let give_back = state.storage.give_back_on_stop();
                        match tokio::time::timeout(std::time::Duration::from_secs(5), give_back).await {
                            Ok(Ok(n)) => say(&format!(
                                "arena serve: {signal}: stopping; {n} running episode(s) went back to the queue"
                            )),
                            Ok(Err(e)) => say(&format!(
                                "arena serve: {signal}: stopping; giving back the running episodes failed ({e}): they are re-queued at the next start"
                            )),
                            Err(_) => say(&format!(
                                "arena serve: {signal}: stopping; the database did not answer within 5 s: running episodes are re-queued at the next start"
                            )),
                        }
                    }
                    Err(why) => {
                        // Its claims are the other server's now: nothing to give back, and
                        // nothing more to claim.
                        state.storage.stop_claiming();
                        say(&format!("arena serve: stopping: {why}"));
                        *taken.lock().expect("stop reason") = Some(why);
                    }
                }
            }
        };
        let storage = state.storage.clone();
        let served = app::serve(listener, state, stopped).await;
        // Spares mid-import or mid-warm-up would run on after the server, and their scratch
        // files would stay until another start's sweep.
        crate::orchestrator::warm::end_spares(&config);
        // SQLite: what the write-ahead log holds goes into the database file, so that the file
        // alone is the whole database once the server has stopped (an operator's "stop, then
        // copy arena.db" had copied an empty or older database). Bounded, as the stop is.
        // Within `docker stop`'s 10 s with the give-back's 5 and the connections' 3.
        let checkpoint = tokio::time::timeout(std::time::Duration::from_millis(1500), storage.checkpoint());
        match checkpoint.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => say(&format!("arena serve: writing the database's log into its file: {e}")),
            Err(_) => say("arena serve: writing the database's log into its file took over 1.5 s: left to the next start"),
        }
        served?;
        match taken.lock().expect("stop reason").take() {
            Some(why) => Err(anyhow::anyhow!(why)),
            None => Ok(()),
        }
    });
    // Lane and committer threads may still be inside `block_on` on this runtime: dropping it
    // now would make their timers panic ("the runtime is being shut down"). The process ends
    // right after this, which stops them like any kill, so the runtime is left running.
    std::mem::forget(runtime);
    result
}

/// `ARENA_*` variables arena reads besides the settings' own (`A`'s flags): the log filter,
/// the GPU worker's Python, the clients' and trainers' variables, and the test suite's.
const OTHER_ARENA_VARIABLES: [&str; 17] = [
    "ARENA_LOG",
    "ARENA_GPU_PYTHON",
    "ARENA_SERVER",
    "ARENA_TOKEN",
    "ARENA_ADMIN_TOKEN",
    "ARENA_POLICY_CHECKER",
    "ARENA_PPO_CUDA",
    "ARENA_BFM_CUDA",
    "ARENA_TORCH_DEVICE",
    "ARENA_BENCHMARK",
    "ARENA_BLESS",
    "ARENA_BIN",
    "ARENA_PPO_BIN",
    "ARENA_PYTHON",
    "ARENA_S3S_BIN",
    "ARENA_PG_PORT",
    "ARENA_PYTORCH_MKL_AS_IS",
];

/// A warning for each `ARENA_*` variable in `names` that arena does not read (a typo such as
/// `ARENA_LANSE` was ignored in silence, the setting left at its default), with the nearest
/// name it does read. `A`: the command's arguments, whose `env` names are settings.
pub(crate) fn unknown_arena_variables<A: clap::Args>(names: impl Iterator<Item = std::ffi::OsString>) -> Vec<String> {
    let command = A::augment_args(clap::Command::new("arena"));
    let mut known: Vec<String> = command
        .get_arguments()
        .filter_map(|arg| arg.get_env())
        .map(|env| env.to_string_lossy().into_owned())
        .chain(OTHER_ARENA_VARIABLES.iter().map(|v| v.to_string()))
        .collect();
    known.sort();
    let mut unknown: Vec<String> = names
        .filter_map(|name| name.into_string().ok())
        .filter(|name| name.starts_with("ARENA_") && known.binary_search(name).is_err())
        // The test suite's switches and the container scripts' ports.
        .filter(|name| {
            !["ARENA_TEST_", "ARENA_REQUIRE_", "ARENA_PODMAN_"]
                .iter()
                .any(|p| name.starts_with(p))
        })
        .collect();
    unknown.sort();
    unknown
        .into_iter()
        .map(|name| {
            let nearest = known.iter().min_by_key(|k| edit_distance(k, &name));
            match nearest.filter(|k| edit_distance(k, &name) <= 3) {
                Some(k) => format!("{name} is not a variable arena reads (did you mean {k}?): it is ignored"),
                None => {
                    format!("{name} is not a variable arena reads: it is ignored (docs/server.md lists the settings)")
                }
            }
        })
        .collect()
}

/// Levenshtein distance of two ASCII names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// On the GPU backend, whether its worker can start here (the Python, its libraries, the
/// device), before anything is served: a server that started without would say it is healthy
/// and fail every session with an internal error (a GPU operator's walkthrough).
/// Returns what it found, in words (`None` on the CPU backend).
pub(crate) fn check_gpu_worker(config: &ServerConfig) -> anyhow::Result<Option<String>> {
    let Ok(arena_sim::SimBackend::Gpu(options)) = config.backend() else {
        return Ok(None);
    };
    let checked = arena_sim::handler::check_gpu_worker(&options).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Some(format!(
        "GPU worker checked: {} on {} ({}), {:.1} s",
        checked.implementation, checked.device, checked.library, checked.seconds
    )))
}

/// A line on stderr that cannot fail the stop: after a hangup the terminal answers writes with
/// an error, which `eprintln!` turns into a panic.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// SIGINT (Ctrl-C), SIGTERM (what `docker stop` and systemd send) and SIGHUP (the terminal
/// closed, or a "reload" sent by habit: this server has nothing to reload, and the signal's
/// default action killed it at once, each running episode a server fault; not when the server
/// was started ignoring it, `nohup arena serve &`, which must outlive the terminal), registered once: a
/// signal that arrives while an earlier one is being handled waits for the next
/// [`StopSignals::recv`]. (`tokio::signal::ctrl_c` registers on each call, so a second Ctrl-C
/// sent before that call would be missed.)
struct StopSignals {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
    hangup: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    /// Within the runtime. A signal that cannot be listened for is never received (the process
    /// then keeps its default action for it).
    fn listen() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        StopSignals {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
            hangup: (!ignored(libc::SIGHUP))
                .then(|| signal(SignalKind::hangup()).ok())
                .flatten(),
        }
    }

    /// The next stop signal's name.
    async fn recv(&mut self) -> &'static str {
        async fn next(signal: &mut Option<tokio::signal::unix::Signal>) {
            match signal.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            _ = next(&mut self.interrupt) => "SIGINT",
            _ = next(&mut self.terminate) => "SIGTERM",
            _ = next(&mut self.hangup) => "SIGHUP",
        }
    }
}

/// Whether the process was started ignoring `signal` (`nohup` ignores SIGHUP): listening for
/// it would replace that.
fn ignored(signal: libc::c_int) -> bool {
    // SAFETY: sigaction(2) with no new action only reads the current one into `old`.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    let read = unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) };
    read == 0 && old.sa_sigaction == libc::SIG_IGN
}

/// A warning when the admin token came from `--admin-token` (clap's value, not the variable's):
/// a server's command line stays readable by every user of the machine (`ps`,
/// `/proc/PID/cmdline`) while it runs.
fn admin_token_on_command_line(given: Option<&str>, variable: Option<&str>) -> Option<&'static str> {
    match given {
        Some(token) if !token.is_empty() && variable != Some(token) => Some(
            "--admin-token is readable by every user of this machine while the server runs (ps, \
             /proc/PID/cmdline): give it in ARENA_ADMIN_TOKEN or the config file's admin_token instead",
        ),
        _ => None,
    }
}

/// A server given another database whose data folder holds an SQLite one (a competition moved
/// to PostgreSQL, or a `database_url` set by mistake): it started with empty boards, in silence.
fn sqlite_beside_another_database(config: &crate::config::ServerConfig) -> Option<String> {
    let file = config.data_dir.join("arena.db");
    (!config.database_url.is_empty() && !config.database_url.starts_with("sqlite:") && file.is_file()).then(|| {
        format!(
            "{} holds an SQLite database that this server does not read: it serves {} (database_url); if the \
             competition is in arena.db, move it first (docs/server.md, moving from SQLite to PostgreSQL)",
            file.display(),
            crate::storage::redact_url(&config.database_url)
        )
    })
}

/// The admin token examples once showed (and docker/compose.yaml defaulted to): refused.
const PLACEHOLDER_ADMIN_TOKEN: &str = "change-me";

/// Why an admin token is easy to guess, if it is: short.
fn weak_admin_token(token: &str) -> Option<String> {
    let n = token.chars().count();
    (n < 16).then(|| format!("has only {n} characters"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_sqlite_database_beside_another_one_is_warned_of() {
        let dir = std::env::temp_dir().join(format!("arena-beside-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut config = crate::config::ServerConfig {
            data_dir: dir.clone(),
            database_url: "postgres://arena:secret@db/arena".into(),
            ..Default::default()
        };
        assert_eq!(sqlite_beside_another_database(&config), None, "no arena.db there");
        std::fs::write(dir.join("arena.db"), b"").unwrap();
        let warning = sqlite_beside_another_database(&config).expect("warned");
        assert!(
            warning.contains("arena.db") && warning.contains("arena:***@db") && !warning.contains("secret"),
            "{warning}"
        );
        config.database_url = format!("sqlite://{}", dir.join("arena.db").display());
        assert_eq!(sqlite_beside_another_database(&config), None, "it is the database");
        config.database_url.clear();
        assert_eq!(sqlite_beside_another_database(&config), None, "the default is arena.db");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// The configuration is checked whole, after the flags and the environment: a flag mends a
    /// file's value out of range, and an error says where the value may have come from.
    #[test]
    fn flags_mend_the_file_before_it_is_checked() {
        let dir = std::env::temp_dir().join(format!("arena-config-merge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("server.toml");
        std::fs::write(&file, "lanes = 0\n").unwrap();
        let mut args = ConfigArgs::default();
        args.storage.config = Some(file.clone());
        let e = args.resolve_with(&LaneBackendArgs::default()).unwrap_err().to_string();
        assert!(
            e.contains("lanes: expected 1-64, got 0")
                && e.contains("`lanes` in")
                && e.contains("--lanes or ARENA_LANES"),
            "{e}"
        );
        args.serving.lanes = Some(2);
        assert_eq!(args.resolve_with(&LaneBackendArgs::default()).unwrap().lanes, 2);
        args.serving.sim_threads = Some(100_000);
        let e = args.resolve_with(&LaneBackendArgs::default()).unwrap_err().to_string();
        assert!(e.contains("sim_threads: expected 0-1024"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn an_arena_variable_arena_does_not_read_is_warned_of() {
        let names = [
            "ARENA_LANSE",
            "ARENA_LANES",
            "ARENA_LOG",
            "ARENA_TEST_DATABASE_URL",
            "ARENA_ZZZZZZZZZ",
            "HOME",
        ];
        let warnings = unknown_arena_variables::<ServeArgs>(names.iter().map(std::ffi::OsString::from));
        assert_eq!(
            warnings,
            [
                "ARENA_LANSE is not a variable arena reads (did you mean ARENA_LANES?): it is ignored",
                "ARENA_ZZZZZZZZZ is not a variable arena reads: it is ignored (docs/server.md lists the settings)",
            ]
        );
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn an_admin_token_on_the_command_line_is_warned_of() {
        assert!(admin_token_on_command_line(Some("k2P9-x7Qw_4mZr8Ls"), None).is_some());
        assert!(admin_token_on_command_line(Some("k2P9-x7Qw_4mZr8Ls"), Some("other")).is_some());
        assert_eq!(
            admin_token_on_command_line(Some("k2P9-x7Qw_4mZr8Ls"), Some("k2P9-x7Qw_4mZr8Ls")),
            None
        );
        assert_eq!(admin_token_on_command_line(None, None), None);
    }

    #[test]
    fn a_guessable_admin_token_is_warned_of() {
        assert_eq!(weak_admin_token("s3cret").unwrap(), "has only 6 characters");
        assert_eq!(weak_admin_token("k2P9-x7Qw_4mZr8Ls"), None);
    }
}
