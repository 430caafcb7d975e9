//! Server configuration: typed TOML, overridden by `ARENA_*` environment variables and then by
//! command-line flags; with no file at all it runs on embedded defaults (SQLite in `./arena-data`).

use arena_sim::SimBackend;
use arena_sim::handler::{GpuImpl, GpuOptions};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Seconds a `jsonl.gz` download waits for a place among `dataset_streams` before it is
/// answered 503 (busy) with a `Retry-After`.
pub const DATASET_STREAM_WAIT_S: u64 = 30;

/// The address to listen on: an IP address and port (`127.0.0.1:8080`, `[::1]:0`), or a host
/// name and port resolved now (`localhost:8080`: its IPv4 address when it has one, as the
/// default 127.0.0.1 is).
pub fn parse_bind(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let example = "an address and port, e.g. 127.0.0.1:8080, 0.0.0.0:8080, [::1]:8080 or localhost:8080";
    let addrs: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|e| format!("{text:?} is not {example} ({e})"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{text:?} resolves to no address; give {example}"))
}

fn bind_from_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    parse_bind(&text).map_err(serde::de::Error::custom)
}

/// Everything `arena serve` needs. Every key is optional in the file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address the HTTP/WebSocket server listens on (port 0 picks a free port); a host name
    /// (`localhost:8080`) is resolved once, at start ([`parse_bind`]).
    #[serde(deserialize_with = "bind_from_text")]
    pub bind: SocketAddr,
    /// Folder for the SQLite database, trajectory files and reports.
    pub data_dir: PathBuf,
    /// `sqlite://PATH` or `postgres://...`; empty = `sqlite://<data_dir>/arena.db`.
    pub database_url: String,
    /// Token of the administrator (creates teams); empty = admin endpoints disabled.
    pub admin_token: String,
    /// Folder of benchmark files; empty = the shipped `benchmarks/`.
    pub benchmarks_dir: PathBuf,
    /// Folder the benchmarks' motion paths are relative to.
    pub motions_root: PathBuf,
    /// Episodes per GetAction request.
    pub max_batch: u32,
    /// Batches of a session simulated side by side (GetAction requests in flight).
    pub lanes: u32,
    /// Simulation threads per lane; 0 = all cores.
    pub sim_threads: u32,
    /// Simulators kept started between sessions, for later lanes of the same shape (backend,
    /// robot, batch, threads) to take over: a GPU worker's start-up is seconds, MJX's first
    /// compilation minutes. 0 = every lane starts its own.
    pub warm_simulators: u32,
    /// GPU backend: worker processes kept started ahead of need, their physics library imported
    /// (MuJoCo Warp's also with the device initialised and the kernels loaded by a warm-up), for
    /// a lane with no kept simulator of its shape to take instead of starting its own (most of a
    /// Warp worker's three seconds of start-up on a GPU machine); each one taken is replaced
    /// once its lane's worker is ready. 0 = none. Ignored on the CPU backend.
    pub spare_simulators: u32,
    /// Benchmarks whose simulators are started with the server and kept (`warm_simulators`):
    /// one per lane of the shape a fresh submission of the benchmark gets (its episodes split
    /// over `lanes` batches of at most `max_batch`, the benchmark's own gains), so that the
    /// first session takes them over instead of waiting for their start-up.
    pub prewarm: Vec<String>,
    /// Physics backend of the lanes: `cpu` (MuJoCo on CPU threads) or `gpu` (MuJoCo MJX or MuJoCo
    /// Warp in a supervised Python worker per lane; docs/gpu-backend.md).
    pub sim_backend: String,
    /// GPU backend: where the physics runs (`auto`, `cpu`, `gpu`).
    pub gpu_device: String,
    /// GPU backend: physics implementation (`auto`: MuJoCo Warp where a CUDA device is present,
    /// else MuJoCo MJX; `jax`: MuJoCo MJX; `warp`: MuJoCo Warp, float32).
    pub gpu_impl: String,
    /// GPU backend: the Python with python/requirements-gpu.txt; empty = `ARENA_GPU_PYTHON`,
    /// else `python3`.
    pub gpu_python: PathBuf,
    /// GPU backend: lets `gpu_impl = "stub"` through: no physics (robots follow their targets,
    /// every score is meaningless), to measure what surrounds the physics at GPU sizes on any
    /// machine (`bench/gpu_eval_scale.py --gpu-impl stub`). Never on a server whose results count.
    pub gpu_allow_stub: bool,
    /// Seconds to wait for an Action; 0 = the benchmark's `limits.step_timeout_ms`. Hosted
    /// policies (issue 40) have the same deadline per step.
    pub step_timeout_s: f64,
    /// Hosted submissions this server evaluates at once (each runs its policy on one thread
    /// beside its lanes); more wait, claimed, for a free place. 0 = the number of cores.
    pub hosted_runs: u32,
    /// HDF5 dataset exports kept in the object store for the next download, at most this many
    /// MB in all; the least recently written go first (and are written again when asked for).
    /// 0 = no limit.
    pub export_cache_mb: u64,
    /// `jsonl.gz` dataset downloads streamed at once (each holds a thread, compressing as the
    /// client reads); more wait for a place, and after [`DATASET_STREAM_WAIT_S`] are answered
    /// 503 with a `Retry-After`. Stored HDF5 exports are written two at a time and then served
    /// as files.
    pub dataset_streams: u32,
    /// With a remote (`s3://`) store: MB of downloaded objects (trajectory files, policies) kept
    /// in `scratch/cache/` for the next read; the least recently used go first. 0 = no limit.
    pub download_cache_mb: u64,
    pub heartbeat_interval_s: f64,
    pub heartbeat_timeout_s: f64,
    /// Runs of an episode cut short by a lost agent connection before it is FAILED.
    pub max_attempts: u32,
    /// Requests per team per minute (REST calls and agent Connects); 0 = no limit.
    pub requests_per_minute: u32,
    /// Agent sessions a team runs at once on this server (`team_sessions.rs`); 0 = no limit.
    pub max_sessions_per_team: u32,
    /// Where trajectories, reports and dataset exports go: empty = the data directory,
    /// `file:///ABS/PATH` = a (shared) folder, `s3://BUCKET[/PREFIX]` = an S3-compatible store
    /// (credentials, region and endpoint from the `AWS_*` variables; docs/server.md).
    pub object_store: String,
    /// Seconds a write to the object store keeps retrying before the episode is re-queued.
    pub object_store_retry_s: f64,
    /// Below this many MB free on the data directory's file system the health checks say the
    /// server cannot serve (its writes are about to fail); 0 = not looked at.
    pub min_free_disk_mb: u64,
    /// Write each run's part file through the page cache even where the filesystem takes
    /// `O_DIRECT` (by default parts bypass it there): for data directories on block storage much
    /// slower than memory, where a part deleted after the merge may then never reach the disk.
    /// Each part is then written whole when its episode ends, none while it runs.
    pub buffered_parts: bool,
    /// This server's name in episode claims: replicas sharing a PostgreSQL database need
    /// distinct ids, and a restarted replica should keep its id (it then takes back its own
    /// unfinished episodes at once instead of waiting for their leases). Empty = host name and
    /// data directory.
    pub replica_id: String,
    /// Seconds an episode claim holds without renewal; a live server renews its claims three
    /// times per lease. When a replica dies, its episodes are claimed again after this long.
    pub lease_s: f64,
    /// Seconds an unfinished submission may go without an agent (no episode running, nothing
    /// finished) before it is ended as FAILED with the reason; 0 = never. Such a submission
    /// counts against its team's quota while it waits.
    pub idle_submission_expiry_s: f64,
    /// Seconds between a running server's looks for final submissions whose runs are still
    /// stored one file each, and how long ago such a submission must have ended to be merged
    /// then (a replica that stopped between a completion and its merge, a merge whose retries
    /// ran out); 0 = only at start. Longer than a failed merge's own retries (about 75 minutes)
    /// by default, so that the look never merges beside the server that ended it.
    pub unmerged_sweep_s: f64,
    /// Folder of the web pages (`index.html`, `static/`, `node_modules/three`); empty = the
    /// shipped `web/`.
    pub web_dir: PathBuf,
    /// Open connections in total; further ones are answered 503 and closed. Also kept below the
    /// process's file-descriptor limit (less 256 for files and the database), so the server
    /// never runs out of descriptors and stops answering.
    pub max_connections: u32,
    /// Open connections from one client address (a lab behind one NAT holds several teams, each
    /// with a few agent connections and browsers).
    pub max_connections_per_address: u32,
    /// Seconds a new connection has to send its first request, and any request to send its
    /// headers (no longer than the agent protocol's 30 s connect deadline by default).
    pub header_timeout_s: f64,
    /// Seconds a connection may go with no request in flight and no byte either way before it
    /// is closed (an upgraded agent WebSocket has the protocol's heartbeats instead).
    pub idle_timeout_s: f64,
    /// Load balancers whose connections may begin with a PROXY protocol header (HAProxy's
    /// `send-proxy` / `send-proxy-v2`), giving the client's address: comma-separated addresses
    /// and networks; empty = none (every connection is counted under its peer's address).
    pub proxy_protocol_from: String,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8080".parse().expect("valid address"),
            data_dir: PathBuf::from("arena-data"),
            database_url: String::new(),
            admin_token: String::new(),
            benchmarks_dir: PathBuf::new(),
            motions_root: PathBuf::from("."),
            max_batch: 16,
            lanes: 2,
            sim_threads: 0,
            warm_simulators: 2,
            spare_simulators: 1,
            prewarm: Vec::new(),
            sim_backend: "cpu".into(),
            gpu_device: "auto".into(),
            gpu_impl: "auto".into(),
            gpu_python: PathBuf::new(),
            gpu_allow_stub: false,
            step_timeout_s: 0.0,
            hosted_runs: 0,
            export_cache_mb: 16_384,
            dataset_streams: 16,
            download_cache_mb: 16_384,
            heartbeat_interval_s: 30.0,
            heartbeat_timeout_s: 60.0,
            max_attempts: 3,
            requests_per_minute: 600,
            max_sessions_per_team: 16,
            object_store: String::new(),
            object_store_retry_s: 120.0,
            min_free_disk_mb: 64,
            buffered_parts: false,
            replica_id: String::new(),
            lease_s: 30.0,
            idle_submission_expiry_s: 86_400.0,
            unmerged_sweep_s: 7_200.0,
            web_dir: PathBuf::new(),
            max_connections: 4096,
            max_connections_per_address: 256,
            header_timeout_s: 30.0,
            idle_timeout_s: 120.0,
            proxy_protocol_from: String::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{key}: {message}")]
    Value { key: String, message: String },
}

/// The longest step deadline and heartbeat silence: a day is far beyond any use, and the
/// bound keeps `Duration::from_secs_f64` (which panics past u64 seconds) safe.
const MAX_WAIT_S: f64 = 86_400.0;

/// The shortest connection timeout: below it a timer is a busy loop (and one that rounds to zero
/// panics where it is made).
const MIN_WAIT_S: f64 = 0.01;

/// The shortest step deadline.
const MIN_STEP_S: f64 = 0.001;

/// The shortest heartbeat interval.
const MIN_HEARTBEAT_S: f64 = 0.1;

/// The longest idle-submission expiry, for the same reason.
const MAX_EXPIRY_S: f64 = 365.0 * 86_400.0;

impl ServerConfig {
    /// The listener's limits ([`crate::connections`]), with the total kept below the file
    /// descriptors this process may open.
    /// The load balancers believed when a connection begins with a PROXY header (checked by
    /// [`ServerConfig::validate`]; none if it does not parse).
    pub fn trusted_proxies(&self) -> crate::proxy_protocol::TrustedProxies {
        crate::proxy_protocol::TrustedProxies::parse(&self.proxy_protocol_from).unwrap_or_default()
    }

    pub fn connection_limits(&self) -> crate::connections::ConnectionLimits {
        let descriptors = crate::connections::raise_descriptor_limit();
        let mut max_connections = self.max_connections as usize;
        if let Some(n) = descriptors {
            let usable = (n as usize).saturating_sub(256).max(16);
            if usable < max_connections {
                tracing::warn!(
                    "max_connections {max_connections} exceeds what {n} file descriptors allow: serving at most {usable} connections (raise the limit, e.g. `ulimit -n`)"
                );
                max_connections = usable;
            }
        }
        crate::connections::ConnectionLimits {
            max_connections,
            max_per_address: (self.max_connections_per_address as usize).min(max_connections),
            header_timeout: std::time::Duration::from_secs_f64(self.header_timeout_s),
            idle_timeout: std::time::Duration::from_secs_f64(self.idle_timeout_s),
        }
    }

    /// The physics backend the keys `sim_backend` and `gpu_*` name.
    pub fn backend(&self) -> Result<SimBackend, String> {
        match self.sim_backend.as_str() {
            "cpu" => Ok(SimBackend::Cpu),
            "gpu" => {
                let implementation: GpuImpl = self.gpu_impl.parse()?;
                if implementation == GpuImpl::Stub && !self.gpu_allow_stub {
                    return Err(
                        "\"stub\" has no physics (a benchmark of `arena sim bench`); a server needs auto, jax or warp (gpu_allow_stub lets it through for measurements)"
                            .into(),
                    );
                }
                let mut options = GpuOptions {
                    device: self.gpu_device.parse()?,
                    implementation,
                    // Nothing an evaluation computes reads them (training's rewards do).
                    contact_forces: false,
                    ..GpuOptions::default()
                };
                if !self.gpu_python.as_os_str().is_empty() {
                    options.python = self.gpu_python.clone();
                }
                Ok(SimBackend::Gpu(options))
            }
            other => Err(format!("expected \"cpu\" or \"gpu\", got {other:?}")),
        }
    }

    /// Reads a TOML file; unknown keys and wrong types are errors naming the file and key, and
    /// so are values out of range.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let config = Self::parse_file(path)?;
        config.validate().map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(config)
    }

    /// Reads a TOML file without checking ranges: for a configuration that flags and the
    /// environment complete before it is checked whole.
    pub fn parse_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            message: format!("cannot read: {e}"),
        })?;
        let config: Self = toml::from_str(&text).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            // Kept on several lines: toml points at the column under a copy of the line.
            message: e.to_string().trim_end().to_string(),
        })?;
        Ok(config)
    }

    /// Checks ranges that serde cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: String| {
            Err(ConfigError::Value {
                key: key.into(),
                message,
            })
        };
        if self.max_batch == 0 || self.max_batch as usize > arena_sdk::protocol::MAX_BATCH {
            return bad(
                "max_batch",
                format!("expected 1-{}, got {}", arena_sdk::protocol::MAX_BATCH, self.max_batch),
            );
        }
        for (key, v) in [
            ("max_connections", self.max_connections),
            ("max_connections_per_address", self.max_connections_per_address),
        ] {
            if v == 0 {
                return bad(key, "expected at least 1".into());
            }
        }
        // Below a hundredth of a second a timer is a busy loop, and one that rounds to zero
        // nanoseconds panics where it is made.
        for (key, v) in [
            ("header_timeout_s", self.header_timeout_s),
            ("idle_timeout_s", self.idle_timeout_s),
        ] {
            if !(MIN_WAIT_S..=86_400.0).contains(&v) {
                return bad(key, format!("expected seconds {MIN_WAIT_S}-86400, got {v}"));
            }
        }
        if let Err(why) = crate::proxy_protocol::TrustedProxies::parse(&self.proxy_protocol_from) {
            return bad("proxy_protocol_from", why);
        }
        if self.admin_token.chars().any(|c| !c.is_ascii_graphic()) {
            // Clients send it in an HTTP header, trimmed: a space, a line end (a CRLF .env
            // file) or a non-ASCII letter would make every admin call fail as unauthorised.
            return bad(
                "admin_token",
                "expected visible ASCII characters only (no spaces, line ends or other letters)".into(),
            );
        }
        if self.hosted_runs > 1024 {
            return bad(
                "hosted_runs",
                format!("expected 0-1024 (0 = the number of cores), got {}", self.hosted_runs),
            );
        }
        if self.dataset_streams == 0 || self.dataset_streams > 1024 {
            return bad(
                "dataset_streams",
                format!("expected 1-1024, got {}", self.dataset_streams),
            );
        }
        if self.sim_threads > 1024 {
            return bad(
                "sim_threads",
                format!("expected 0-1024 (0 = the number of cores), got {}", self.sim_threads),
            );
        }
        if self.lanes == 0 || self.lanes > 64 {
            return bad("lanes", format!("expected 1-64, got {}", self.lanes));
        }
        if self.warm_simulators > 64 {
            return bad(
                "warm_simulators",
                format!("expected 0-64, got {}", self.warm_simulators),
            );
        }
        if self.spare_simulators > 16 {
            return bad(
                "spare_simulators",
                format!("expected 0-16, got {}", self.spare_simulators),
            );
        }
        let prewarmed = self.prewarm.len() * self.lanes as usize;
        if prewarmed > self.warm_simulators as usize {
            return bad(
                "prewarm",
                format!(
                    "{} benchmark(s) × {} lane(s) need {prewarmed} kept simulators; warm_simulators is {}",
                    self.prewarm.len(),
                    self.lanes,
                    self.warm_simulators
                ),
            );
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(name) = self
            .prewarm
            .iter()
            .find(|n| n.trim().is_empty() || !seen.insert(n.as_str()))
        {
            return bad(
                "prewarm",
                format!("expected distinct benchmark names, got {name:?} twice or empty"),
            );
        }
        // A step deadline of a millisecond is a (harsh) rule; below it, a timer's rounding.
        let step = self.step_timeout_s;
        if !(step == 0.0 || (MIN_STEP_S..=MAX_WAIT_S).contains(&step)) {
            return bad(
                "step_timeout_s",
                format!("expected 0 (the benchmark's) or seconds {MIN_STEP_S}-{MAX_WAIT_S} (a day), got {step}"),
            );
        }
        // A heartbeat more often than ten times a second floods every session for nothing.
        if !(self.heartbeat_interval_s >= MIN_HEARTBEAT_S && self.heartbeat_interval_s < MAX_WAIT_S) {
            return bad(
                "heartbeat_interval_s",
                format!(
                    "expected seconds {MIN_HEARTBEAT_S}-{MAX_WAIT_S} (below heartbeat_timeout_s), got {}",
                    self.heartbeat_interval_s
                ),
            );
        }
        if !(self.heartbeat_timeout_s > self.heartbeat_interval_s && self.heartbeat_timeout_s <= MAX_WAIT_S) {
            return bad(
                "heartbeat_timeout_s",
                format!(
                    "expected more than heartbeat_interval_s ({}) and at most {MAX_WAIT_S} (a day), got {}",
                    self.heartbeat_interval_s, self.heartbeat_timeout_s
                ),
            );
        }
        // A typo in a gpu_* key is an error even while the CPU backend runs: otherwise it would
        // surface only on the day someone switches to the GPU.
        if let Err(message) = self.gpu_device.parse::<arena_sim::handler::GpuDevice>() {
            return bad("gpu_device", message);
        }
        if let Err(message) = self.gpu_impl.parse::<arena_sim::handler::GpuImpl>() {
            return bad("gpu_impl", message);
        }
        if let Err(message) = self.backend() {
            let key = if matches!(self.sim_backend.as_str(), "cpu" | "gpu") {
                if message.contains("device") {
                    "gpu_device"
                } else {
                    "gpu_impl"
                }
            } else {
                "sim_backend"
            };
            return bad(key, message);
        }
        let store = &self.object_store;
        if !(store.is_empty() || store.starts_with("file:///") || store.starts_with("s3://")) {
            return bad(
                "object_store",
                format!("expected file:///ABSOLUTE/PATH or s3://BUCKET[/PREFIX], got {store:?}"),
            );
        }
        if !(self.object_store_retry_s >= 0.0 && self.object_store_retry_s <= 3600.0) {
            return bad(
                "object_store_retry_s",
                format!("expected 0-3600 seconds, got {}", self.object_store_retry_s),
            );
        }
        if !(self.idle_submission_expiry_s >= 0.0 && self.idle_submission_expiry_s <= MAX_EXPIRY_S) {
            return bad(
                "idle_submission_expiry_s",
                format!(
                    "expected seconds 0-{MAX_EXPIRY_S} (a year; 0 = never), got {}",
                    self.idle_submission_expiry_s
                ),
            );
        }
        let sweep = self.unmerged_sweep_s;
        if !(sweep == 0.0 || (1.0..=MAX_EXPIRY_S).contains(&sweep)) {
            return bad(
                "unmerged_sweep_s",
                format!("expected 0 (only at start) or seconds 1-{MAX_EXPIRY_S} (a year), got {sweep}"),
            );
        }
        if !(self.lease_s >= 0.5 && self.lease_s <= 3600.0) {
            return bad("lease_s", format!("expected 0.5-3600 seconds, got {}", self.lease_s));
        }
        if self.replica_id.len() > 200 || self.replica_id.chars().any(char::is_control) {
            return bad("replica_id", "expected at most 200 printable characters".to_string());
        }
        if self.max_attempts == 0 {
            return bad("max_attempts", "expected at least 1".into());
        }
        let url = &self.database_url;
        if !(url.is_empty()
            || url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://"))
        {
            return bad(
                "database_url",
                format!("expected sqlite://PATH or postgres://..., got {url:?}"),
            );
        }
        Ok(())
    }

    /// The database URL actually used.
    pub fn database_url(&self) -> String {
        if self.database_url.is_empty() {
            // The driver percent-decodes the path: what would read as an escape, the options
            // or a fragment is escaped.
            let path = self.data_dir.join("arena.db").display().to_string();
            let path = path.replace('%', "%25").replace('?', "%3F").replace('#', "%23");
            format!("sqlite://{path}")
        } else {
            self.database_url.clone()
        }
    }

    pub fn benchmarks_dir(&self) -> PathBuf {
        if self.benchmarks_dir.as_os_str().is_empty() {
            arena_bench::spec::shipped_dir()
        } else {
            self.benchmarks_dir.clone()
        }
    }

    pub fn web_dir(&self) -> PathBuf {
        if self.web_dir.as_os_str().is_empty() {
            arena_bench::install::beside_binary("web", "index.html").unwrap_or_else(|| PathBuf::from("web"))
        } else {
            self.web_dir.clone()
        }
    }

    /// The replica id actually used: `replica_id`, else "HOST:DATA_DIR" (stable across restarts
    /// of one server on one data directory, and unique: the data directory lock allows one
    /// server per folder).
    pub fn replica_id(&self) -> String {
        if !self.replica_id.is_empty() {
            return self.replica_id.clone();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into());
        let dir = std::fs::canonicalize(&self.data_dir).unwrap_or_else(|_| self.data_dir.clone());
        format!("{host}:{}", dir.display())
    }

    /// How many hosted submissions run at once: `hosted_runs`, else the number of cores.
    pub fn hosted_runs(&self) -> usize {
        match self.hosted_runs {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n as usize,
        }
    }

    /// How long an episode claim holds without renewal.
    pub fn lease(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.lease_s)
    }

    /// The object store the keys `object_store` and `object_store_retry_s` name.
    pub fn objects(&self) -> anyhow::Result<crate::objects::Objects> {
        crate::objects::Objects::open(
            &self.object_store,
            &self.data_dir,
            std::time::Duration::from_secs_f64(self.object_store_retry_s),
        )
        .map(|objects| {
            objects
                .with_direct_parts(!self.buffered_parts)
                .with_download_cache_mb(self.download_cache_mb)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_default_to_where_the_server_listens_by_default() {
        let bind = ServerConfig::default().bind.to_string();
        assert_eq!(arena_sdk::client::DEFAULT_SERVER, format!("http://{bind}"));
    }

    #[test]
    fn the_bind_address_may_name_a_host() {
        assert_eq!(parse_bind("localhost:0").unwrap(), "127.0.0.1:0".parse().unwrap());
        assert_eq!(parse_bind("[::1]:9").unwrap(), "[::1]:9".parse().unwrap());
        for bad in ["localhost", "127.0.0.1", ":8080"] {
            let e = parse_bind(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?} is not an address and port")), "{e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bind.toml");
        std::fs::write(&path, "bind = \"localhost:8081\"\n").unwrap();
        assert_eq!(
            ServerConfig::from_file(&path).unwrap().bind,
            "127.0.0.1:8081".parse().unwrap()
        );
    }

    #[test]
    fn parts_bypass_the_page_cache_unless_the_key_says_buffered() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = ServerConfig {
            data_dir: dir.path().to_path_buf(),
            ..ServerConfig::default()
        };
        assert!(c.objects().unwrap().direct_parts());
        let path = dir.path().join("a.toml");
        std::fs::write(&path, "buffered_parts = true\n").unwrap();
        c.buffered_parts = ServerConfig::from_file(&path).unwrap().buffered_parts;
        assert!(!c.objects().unwrap().direct_parts());
    }

    #[test]
    fn defaults_validate_and_files_name_bad_keys() {
        ServerConfig::default().validate().unwrap();
        let dir = std::env::temp_dir().join(format!("arena-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.toml");
        std::fs::write(&path, "max_batch = 8\nlanes = 1\n").unwrap();
        let c = ServerConfig::from_file(&path).unwrap();
        assert_eq!((c.max_batch, c.lanes, c.max_attempts), (8, 1, 3));
        std::fs::write(&path, "max_bach = 8\n").unwrap();
        let e = ServerConfig::from_file(&path).unwrap_err().to_string();
        assert!(e.contains("a.toml") && e.contains("max_bach"), "{e}");
        std::fs::write(&path, "lanes = \"two\"\n").unwrap();
        let e = ServerConfig::from_file(&path).unwrap_err().to_string();
        assert!(e.contains("lanes"), "{e}");
        // A syntax error keeps toml's picture of the line, caret under the column.
        std::fs::write(&path, "bind = 127.0.0.1:0\n").unwrap();
        let e = ServerConfig::from_file(&path).unwrap_err().to_string();
        assert!(
            e.contains("line 1, column 13\n") && e.contains("\n1 | bind = 127.0.0.1:0\n"),
            "{e}"
        );
        std::fs::write(&path, "max_batch = 0\n").unwrap();
        let e = ServerConfig::from_file(&path).unwrap_err().to_string();
        assert!(e.contains("max_batch") && e.contains("1-4096"), "{e}");
        // Finite but beyond what a Duration holds: refused, not a panic when a session starts.
        for (line, want) in [
            (
                "step_timeout_s = 1e20",
                "step_timeout_s: expected 0 (the benchmark's) or seconds 0.001-86400 (a day)",
            ),
            ("heartbeat_timeout_s = 1e20", "heartbeat_timeout_s: expected more than"),
            ("heartbeat_timeout_s = inf", "at most 86400 (a day)"),
            (
                "idle_submission_expiry_s = 1e20",
                "idle_submission_expiry_s: expected seconds 0-31536000",
            ),
            (
                "unmerged_sweep_s = 0.001",
                "unmerged_sweep_s: expected 0 (only at start)",
            ),
            ("unmerged_sweep_s = -1", "unmerged_sweep_s: expected 0 (only at start)"),
        ] {
            std::fs::write(&path, format!("{line}\n")).unwrap();
            let e = ServerConfig::from_file(&path).unwrap_err().to_string();
            assert!(e.contains(want), "{line}: {e}");
        }
        std::fs::write(&path, "database_url = \"mysql://x\"\n").unwrap();
        assert!(
            ServerConfig::from_file(&path)
                .unwrap_err()
                .to_string()
                .contains("database_url")
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Values a timer cannot use (it would panic at zero nanoseconds, or spin), a token no
    /// client can send, and a PostgreSQL URL the driver refuses are each refused naming the
    /// key they are wrong in.
    #[test]
    fn values_that_would_fail_later_are_refused_naming_their_key() {
        let check = |f: &dyn Fn(&mut ServerConfig)| {
            let mut c = ServerConfig::default();
            f(&mut c);
            c.validate().map_err(|e| e.to_string())
        };
        let refused = [
            (
                check(&|c| c.heartbeat_interval_s = 1e-10),
                "heartbeat_interval_s: expected seconds 0.1-",
            ),
            (check(&|c| c.heartbeat_interval_s = 0.001), "heartbeat_interval_s:"),
            (
                check(&|c| c.heartbeat_timeout_s = 20.0),
                "heartbeat_timeout_s: expected more than heartbeat_interval_s (30)",
            ),
            (check(&|c| c.step_timeout_s = 1e-12), "step_timeout_s:"),
            (check(&|c| c.step_timeout_s = -1.0), "step_timeout_s:"),
            (
                check(&|c| c.header_timeout_s = 1e-12),
                "header_timeout_s: expected seconds 0.01-86400",
            ),
            (check(&|c| c.idle_timeout_s = f64::NAN), "idle_timeout_s:"),
            (
                check(&|c| c.max_connections_per_address = 0),
                "max_connections_per_address: expected at least 1",
            ),
            (
                check(&|c| c.max_connections = 0),
                "max_connections: expected at least 1",
            ),
            (
                check(&|c| c.admin_token = "s3cret ".into()),
                "admin_token: expected visible ASCII",
            ),
            (check(&|c| c.admin_token = "geheim\r".into()), "admin_token:"),
            (check(&|c| c.admin_token = "geheim-ü".into()), "admin_token:"),
            (check(&|c| c.database_url = "postgres:arena".into()), "database_url:"),
            (
                check(&|c| c.spare_simulators = 17),
                "spare_simulators: expected 0-16, got 17",
            ),
        ];
        for (result, want) in refused {
            let e = result.unwrap_err();
            assert!(e.starts_with(want), "{e}");
        }
        check(&|c| {
            c.heartbeat_interval_s = 0.1;
            c.heartbeat_timeout_s = 0.2;
            c.step_timeout_s = 0.0;
            c.admin_token = "A-b_c.9~!".into();
            c.database_url = "postgresql://u@h:5432/db".into();
            c.spare_simulators = 0;
        })
        .unwrap();
    }

    #[test]
    fn the_backend_keys_name_what_is_wrong() {
        let with = |f: &dyn Fn(&mut ServerConfig)| {
            let mut c = ServerConfig::default();
            f(&mut c);
            c.validate().map(|_| c.backend().unwrap()).map_err(|e| e.to_string())
        };
        assert_eq!(with(&|_| {}), Ok(SimBackend::Cpu));
        let gpu = with(&|c| {
            c.sim_backend = "gpu".into();
            c.gpu_device = "cpu".into();
            c.gpu_python = "/opt/py/bin/python".into();
        })
        .unwrap();
        let SimBackend::Gpu(options) = gpu else {
            panic!("{gpu:?}")
        };
        assert_eq!(options.device, arena_sim::handler::GpuDevice::Cpu);
        assert_eq!(options.python, PathBuf::from("/opt/py/bin/python"));
        assert!(
            !options.contact_forces,
            "an evaluation's worker computes no contact forces"
        );
        let e = with(&|c| c.sim_backend = "tpu".into()).unwrap_err();
        assert!(e.starts_with("sim_backend:") && e.contains("\"tpu\""), "{e}");
        let e = with(&|c| {
            c.sim_backend = "gpu".into();
            c.gpu_device = "npu".into();
        })
        .unwrap_err();
        assert!(e.starts_with("gpu_device:") && e.contains("npu"), "{e}");
        let e = with(&|c| {
            c.sim_backend = "gpu".into();
            c.gpu_impl = "cuda".into();
        })
        .unwrap_err();
        assert!(e.starts_with("gpu_impl:") && e.contains("cuda"), "{e}");
        // The stub (no physics) only where a measurement asks for it by name.
        let stub = |allow: bool| {
            with(&|c| {
                c.sim_backend = "gpu".into();
                c.gpu_impl = "stub".into();
                c.gpu_allow_stub = allow;
            })
        };
        let e = stub(false).unwrap_err();
        assert!(e.starts_with("gpu_impl:") && e.contains("no physics"), "{e}");
        assert!(stub(true).is_ok());
        let e = with(&|c| c.gpu_device = "x".into()).unwrap_err();
        assert!(e.starts_with("gpu_device:"), "the CPU backend checks it too: {e}");
    }
}
