//! The GPU backend: the same G1 model stepped by MuJoCo MJX (MuJoCo 3.17.0's JAX port) or by
//! MuJoCo Warp 3.17.0 in a Python worker process that this handler starts and supervises. No
//! libpython is linked: the worker's Python files (`simulator/python/`) are embedded in the
//! binary, written once to a per-user cache folder and run with the configured interpreter.
//! Batched inputs and outputs live in a shared-memory file ([`super::gpu_layout`]); commands and
//! answers are lines on the worker's stdin and stdout.
//!
//! A worker that dies, hangs past its deadline or answers nonsense fails the episodes it was
//! running, with the reason, and is started again at the next reset: never a server crash.

use super::gpu_layout::{Array, OutputPrecision, PARAMS_WIDTH, ShmLayout};
use super::mujoco::check_layout;
use super::{
    DECIMATION, EnvHealth, Field, Handler, NQ, NV, PHYSICS_DT, PhysicsParams, check_env, check_feedforward,
    check_state, head_pos, head_vel, worker_pool,
};
use crate::SimError;
use crate::math::{self, Quat, Vec3};
use crate::robot::{NUM_BODIES, RobotConfig, TORSO_INDEX};
use arena_data::NUM_JOINTS;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The worker's files (name, source): `gpu_worker.py` is the script, the others its modules.
const WORKER_FILES: [(&str, &str); 5] = [
    ("gpu_worker.py", include_str!("../../python/gpu_worker.py")),
    ("worker_common.py", include_str!("../../python/worker_common.py")),
    ("mjx_physics.py", include_str!("../../python/mjx_physics.py")),
    ("warp_physics.py", include_str!("../../python/warp_physics.py")),
    ("stub_physics.py", include_str!("../../python/stub_physics.py")),
];
/// Lines of the worker's stderr kept for error messages.
const STDERR_TAIL: usize = 20;

/// Where JAX runs the worker's physics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GpuDevice {
    /// JAX's default device: the GPU when there is one, else the CPU.
    #[default]
    Auto,
    /// JAX's CPU backend (tests and CI: the same code, slowly).
    Cpu,
    /// A GPU; starting fails without one.
    Gpu,
}

impl GpuDevice {
    fn wire(self) -> &'static str {
        match self {
            GpuDevice::Auto => "auto",
            GpuDevice::Cpu => "cpu",
            GpuDevice::Gpu => "gpu",
        }
    }
}

impl std::str::FromStr for GpuDevice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(GpuDevice::Auto),
            "cpu" => Ok(GpuDevice::Cpu),
            "gpu" | "cuda" => Ok(GpuDevice::Gpu),
            other => Err(format!("unknown GPU backend device {other:?} (auto, cpu or gpu)")),
        }
    }
}

/// Which GPU MuJoCo steps the physics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GpuImpl {
    /// MuJoCo Warp where a CUDA device is present and the run is float32, else MJX's JAX
    /// implementation ([`GpuImpl::resolve`]).
    #[default]
    Auto,
    /// MJX's own JAX implementation.
    Jax,
    /// MuJoCo Warp, worlds batched by the library (needs `mujoco-warp` and `warp-lang` in the
    /// worker's Python; float32 only).
    Warp,
    /// No physics: the worker's host side and the Rust side alone (`arena sim bench`); joints
    /// jump to their targets, bodies stay at the rest pose. Never for scoring.
    Stub,
}

impl GpuImpl {
    fn wire(self) -> &'static str {
        match self {
            GpuImpl::Auto => "auto",
            GpuImpl::Jax => "jax",
            GpuImpl::Warp => "warp",
            GpuImpl::Stub => "stub",
        }
    }

    /// The implementation `Auto` stands for: MuJoCo Warp on a CUDA device (about 4.7× MJX's
    /// JAX path in the arena on an H100, `shared/notes/GPU_FACTS.md`), MJX where double
    /// precision is asked for (Warp computes in float32 only) or where the physics runs on a
    /// CPU device (the tests' and CI's configuration). Other values stand for themselves.
    pub fn resolve(self, device: GpuDevice, x64: bool, cuda_present: bool) -> GpuImpl {
        match self {
            GpuImpl::Auto if !x64 && device != GpuDevice::Cpu && cuda_present => GpuImpl::Warp,
            GpuImpl::Auto => GpuImpl::Jax,
            other => other,
        }
    }
}

/// Whether this machine has an NVIDIA CUDA device (the driver's control node), without loading
/// any GPU library.
pub fn cuda_device_present() -> bool {
    std::path::Path::new("/dev/nvidiactl").exists() || std::path::Path::new("/proc/driver/nvidia/version").exists()
}

impl std::str::FromStr for GpuImpl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(GpuImpl::Auto),
            "jax" => Ok(GpuImpl::Jax),
            "warp" => Ok(GpuImpl::Warp),
            "stub" => Ok(GpuImpl::Stub),
            other => Err(format!(
                "unknown GPU physics implementation {other:?} (auto, jax, warp, or stub for benchmarks)"
            )),
        }
    }
}

/// How to start the GPU worker.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuOptions {
    /// Python interpreter with `jax`, `mujoco` and `mujoco-mjx` (`python/requirements-gpu.txt`).
    pub python: PathBuf,
    pub device: GpuDevice,
    pub implementation: GpuImpl,
    /// Double precision in JAX (slower; for sim-to-sim comparisons).
    pub x64: bool,
    /// Compute per-body contact forces (the baseline's auxiliary rewards read them).
    pub contact_forces: bool,
    /// Deadline of start-up (JIT compilation included).
    pub startup_timeout: Duration,
    /// Deadline of one command (sync or step).
    pub step_timeout: Duration,
}

impl Default for GpuOptions {
    fn default() -> Self {
        Self {
            python: std::env::var_os("ARENA_GPU_PYTHON").map_or_else(|| PathBuf::from("python3"), PathBuf::from),
            device: GpuDevice::Auto,
            implementation: GpuImpl::Jax,
            x64: false,
            contact_forces: true,
            startup_timeout: Duration::from_secs(900),
            step_timeout: Duration::from_secs(120),
        }
    }
}

/// A running worker process.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    /// Answer lines from the stdout reader thread (a Mutex only to make the handler `Sync`).
    replies: Mutex<Receiver<String>>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// Closed when the stderr reader has read to the end (the worker's last words are in
    /// `stderr_tail` then).
    stderr_read: Mutex<Receiver<()>>,
    /// The worker's own description, e.g. `mujoco_warp on cuda:0 (mujoco-warp 3.17.0, warp
    /// 1.18.0, mujoco 3.17.0)`.
    device: String,
}

impl Worker {
    /// Whether the process is still there (its stderr reader ends when the process does), so
    /// that a worker that died while idle is not handed to a new env.
    fn is_alive(&self) -> bool {
        self.stderr_read
            .lock()
            .is_ok_and(|r| matches!(r.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty)))
    }

    fn stderr_tail(&self) -> String {
        let tail = self.stderr_tail.lock().map(|t| t.iter().cloned().collect::<Vec<_>>());
        tail.map(|t| t.join(" | ")).unwrap_or_default()
    }

    /// Sends one command line and waits for its answer.
    fn command(&mut self, line: &str, timeout: Duration) -> Result<String, String> {
        write_line_without_sigpipe(&mut self.stdin, line)
            .map_err(|e| format!("could not write to the worker ({e})"))?;
        let replies = self
            .replies
            .get_mut()
            .map_err(|_| "the answer channel was poisoned".to_string())?;
        match replies.recv_timeout(timeout) {
            Ok(reply) => Ok(reply),
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("no answer to `{line}` within {:.0} s", timeout.as_secs_f64()))
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                // Its stdout closed first: the error it printed may still be in the pipe.
                if let Ok(read) = self.stderr_read.get_mut() {
                    let _ = read.recv_timeout(Duration::from_secs(2));
                }
                Err(format!("the worker exited ({status}): {}", self.stderr_tail()))
            }
        }
    }
}

/// Writes `line` and a newline to the worker. A worker that has died makes this an `EPIPE`
/// error, never a SIGPIPE: the one-shot commands (`arena eval`, `sim bench`, `audit`) restore
/// SIGPIPE's default so that `arena … | head` ends quietly, and there it would kill the process
/// before the worker's own error could be reported. SIGPIPE is blocked in this thread for the
/// write, and the one the write raised is taken off the pending set before unblocking.
fn write_line_without_sigpipe(stdin: &mut ChildStdin, line: &str) -> std::io::Result<()> {
    // SAFETY: signal-mask calls on this thread only, with sets initialised by sigemptyset.
    unsafe {
        let mut pipe: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old);
        let result = writeln!(stdin, "{line}").and_then(|_| stdin.flush());
        if matches!(&result, Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe) {
            let now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            libc::sigtimedwait(&pipe, std::ptr::null_mut(), &now);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        result
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = write_line_without_sigpipe(&mut self.stdin, "close");
        // A worker that does not close promptly is killed; its reader threads end with it.
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The batched handler over the MJX worker.
pub struct GpuHandler {
    config: RobotConfig,
    options: GpuOptions,
    layout: ShmLayout,
    shm: memmap2::MmapMut,
    shm_path: PathBuf,
    worker: Option<Worker>,
    health: Vec<EnvHealth>,
    total_mass: f64,
    joint_ranges: [(f64, f64); NUM_JOINTS],
    pool: Option<rayon::ThreadPool>,
    /// Per-env inputs changed since the last command.
    dirty: bool,
}

impl std::fmt::Debug for GpuHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuHandler")
            .field("num_envs", &self.health.len())
            .field("options", &self.options)
            .finish()
    }
}

fn backend_error(message: impl Into<String>) -> SimError {
    SimError::Backend(message.into())
}

impl GpuHandler {
    /// Starts the worker for `num_envs` envs of `config` and waits until it has compiled its
    /// step (minutes on a CPU). `threads` is for the per-env observation work on this side.
    pub fn new(config: RobotConfig, num_envs: usize, threads: usize, options: GpuOptions) -> Result<Self, SimError> {
        if num_envs == 0 {
            return Err(SimError::Config("num_envs must be at least 1".into()));
        }
        if config.imu_sensors {
            return Err(SimError::Config(
                "the GPU backend does not simulate the IMU accelerometers yet (the `imu` and `imu_torso` \
                 observation groups): run such benchmarks on the cpu backend"
                    .into(),
            ));
        }
        let mut options = options;
        options.implementation = options
            .implementation
            .resolve(options.device, options.x64, cuda_device_present());
        // The nominal model, compiled here as the CPU backend compiles it: the same layout
        // checks, and the constants (mass, joint ranges) the worker need not be asked for.
        let model = config.compile()?;
        check_layout(&model)?;
        let total_mass = model.body_mass().iter().sum();
        let mut joint_ranges = [(f64::NEG_INFINITY, f64::INFINITY); NUM_JOINTS];
        for (j, r) in joint_ranges.iter_mut().enumerate() {
            let range = model.jnt_range()[j + 1];
            *r = (range[0], range[1]);
        }
        // MJX with x64 computes in float64; everything else in float32.
        let precision = if options.x64 {
            OutputPrecision::F64
        } else {
            OutputPrecision::F32
        };
        let layout = ShmLayout::new(num_envs, precision);
        let shm_path = shared_file_path();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&shm_path)
            .map_err(|e| backend_error(format!("creating the shared file {}: {e}", shm_path.display())))?;
        file.set_len(layout.bytes() as u64)
            .map_err(|e| backend_error(format!("sizing the shared file: {e}")))?;
        // SAFETY: the file is ours (created above, unique name); only this handler and its
        // worker map it, and the worker writes only while we wait for its answer.
        let shm = unsafe { memmap2::MmapMut::map_mut(&file) }
            .map_err(|e| backend_error(format!("mapping the shared file: {e}")))?;
        let pool = worker_pool(threads)?;
        let mut handler = Self {
            config,
            options,
            layout,
            shm,
            shm_path,
            worker: None,
            health: vec![EnvHealth::Idle; num_envs],
            total_mass,
            joint_ranges,
            pool,
            dirty: false,
        };
        handler.fill(Array::Params, 0.0);
        for env in 0..num_envs {
            handler.write_params(env, &PhysicsParams::default());
        }
        handler.worker = Some(handler.spawn()?);
        Ok(handler)
    }

    /// The file as float64 values: the inputs and the per-env scalars at the end lie on it.
    fn values(&self) -> &[f64] {
        // SAFETY: the map is page-aligned and `layout.bytes()` long, a multiple of 8 bytes.
        unsafe { std::slice::from_raw_parts(self.shm.as_ptr().cast::<f64>(), self.shm.len() / 8) }
    }

    fn values_mut(&mut self) -> &mut [f64] {
        // SAFETY: as in `values`; `&mut self` makes this the only view on our side.
        unsafe { std::slice::from_raw_parts_mut(self.shm.as_mut_ptr().cast::<f64>(), self.shm.len() / 8) }
    }

    /// One env's row of a float64 array (an input, or a per-env scalar the worker writes).
    fn row(&self, array: Array, env: usize) -> &[f64] {
        debug_assert!(!array.is_device_output(), "{array:?} is read with output_row");
        &self.values()[self.layout.row(array, env)]
    }

    fn row_mut(&mut self, array: Array, env: usize) -> &mut [f64] {
        debug_assert!(!array.is_device_output(), "{array:?} is written by the worker");
        let range = self.layout.row(array, env);
        &mut self.values_mut()[range]
    }

    /// One env's row of a device output, in the physics' precision.
    fn output_row(&self, array: Array, env: usize) -> OutputRow<'_> {
        let range = self.layout.row(array, env);
        match self.layout.precision() {
            OutputPrecision::F64 => OutputRow::F64(&self.values()[range]),
            OutputPrecision::F32 => {
                // SAFETY: as in `values`, viewed as float32 values (4-byte aligned, a whole
                // number of them); the worker writes only while we wait for its answer.
                let all = unsafe { std::slice::from_raw_parts(self.shm.as_ptr().cast::<f32>(), self.shm.len() / 4) };
                OutputRow::F32(&all[range])
            }
        }
    }

    fn fill(&mut self, array: Array, value: f64) {
        let range = self.layout.range(array);
        self.values_mut()[range].fill(value);
    }

    fn write_params(&mut self, env: usize, p: &PhysicsParams) {
        let row = self.row_mut(Array::Params, env);
        row[..NUM_BODIES].copy_from_slice(&p.mass_scale);
        row[NUM_BODIES..NUM_BODIES + 3].copy_from_slice(&p.torso_com_offset);
        row[NUM_BODIES + 3] = p.friction.unwrap_or(f64::NAN);
        row[NUM_BODIES + 4] = p.kp_scale;
        row[NUM_BODIES + 5] = p.kd_scale;
        debug_assert_eq!(NUM_BODIES + 6, PARAMS_WIDTH);
        self.row_mut(Array::ParamsFlag, env)[0] = 1.0;
    }

    /// Starts a worker on the shared file and waits for it to be ready.
    fn spawn(&mut self) -> Result<Worker, SimError> {
        let python = &self.options.python;
        let mjcf_path = self.shm_path.with_extension("xml");
        std::fs::write(&mjcf_path, self.config.mjcf())
            .map_err(|e| backend_error(format!("writing the model for the worker: {e}")))?;
        let mut command = Command::new(python);
        // JAX keeps compiled steps on disk, so a restarted worker (or the next lane of the same
        // size) loads them instead of compiling again.
        if std::env::var_os("JAX_COMPILATION_CACHE_DIR").is_none() {
            command.env("JAX_COMPILATION_CACHE_DIR", compilation_cache_dir());
        }
        let script = match worker_script() {
            Ok(script) => script,
            Err(e) => {
                let _ = std::fs::remove_file(&mjcf_path);
                return Err(backend_error(e));
            }
        };
        let started = command
            .arg(&script)
            .arg("--shm")
            .arg(&self.shm_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match started {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_file(&mjcf_path);
                return Err(backend_error(format!(
                    "could not start the GPU worker with {} ({e}); set ARENA_GPU_PYTHON (or `gpu_python`) to a Python with python/requirements-gpu.txt installed (`make deps-gpu`)",
                    python.display()
                )));
            }
        };
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (tx, replies) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail = stderr_tail.clone();
        let (stderr_done, stderr_read) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let _done = stderr_done; // dropped at the end of the stream
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                tracing::debug!(target: "arena_sim::gpu_worker", "{line}");
                if let Ok(mut t) = tail.lock() {
                    if t.len() == STDERR_TAIL {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
            }
        });
        let mut worker = Worker {
            child,
            stdin,
            replies: Mutex::new(replies),
            stderr_tail,
            stderr_read: Mutex::new(stderr_read),
            device: String::new(),
        };
        let c = &self.config;
        let init = serde_json::json!({
            "mjcf": mjcf_path,
            "num_envs": self.health.len(),
            "kp": c.kp,
            "kd": c.kd,
            "effort": c.effort,
            "decimation": DECIMATION,
            "timestep": PHYSICS_DT,
            "torso_body": TORSO_INDEX + 1,
            "device": self.options.device.wire(),
            "impl": self.options.implementation.wire(),
            "x64": self.options.x64,
            "contact_forces": self.options.contact_forces,
        });
        tracing::info!(
            "starting the GPU simulator worker ({} envs, {} on {}); the first start compiles for minutes",
            self.health.len(),
            self.options.implementation.wire(),
            self.options.device.wire()
        );
        let reply = worker.command(&init.to_string(), self.options.startup_timeout);
        let _ = std::fs::remove_file(&mjcf_path);
        // A start that fails inside Python (a missing package, no GPU) names the interpreter
        // too: the usual fix is another ARENA_GPU_PYTHON.
        let with_python = |what: String| {
            backend_error(format!(
                "{what} (worker Python: {}; set ARENA_GPU_PYTHON or `gpu_python` to one with python/requirements-gpu.txt)",
                python.display()
            ))
        };
        let reply = reply.map_err(|e| with_python(format!("the GPU worker did not start: {e}")))?;
        let ready: serde_json::Value = serde_json::from_str(&reply)
            .map_err(|_| backend_error(format!("the GPU worker answered {reply:?} instead of its ready line")))?;
        if let Some(error) = ready.get("error").and_then(|e| e.as_str()) {
            return Err(with_python(format!("the GPU worker could not start: {error}")));
        }
        let field = |k: &str| ready.get(k).and_then(|v| v.as_str()).unwrap_or("?").to_string();
        worker.device = format!(
            "{} on {} ({}, mujoco {})",
            field("backend"),
            field("device"),
            field("library"),
            field("mujoco")
        );
        tracing::info!(
            "GPU simulator worker ready: {} after {:.1} s of compilation (start-up {})",
            worker.device,
            ready.get("compile_s").and_then(|v| v.as_f64()).unwrap_or(f64::NAN),
            ready.get("startup").map(|v| v.to_string()).unwrap_or_default()
        );
        Ok(worker)
    }

    /// Runs `sync` or `step` on the worker. A worker failure fails every env that was running
    /// (with the reason) and drops the worker; the next reset starts a new one.
    fn run(&mut self, op: &str) -> Result<(), SimError> {
        let pending_reset = self.values()[self.layout.range(Array::ResetFlag)]
            .iter()
            .any(|f| *f != 0.0);
        if self.worker.is_none() {
            if !pending_reset {
                return Ok(());
            }
            // Every env not being reset was failed when the old worker went.
            let worker = self.spawn()?;
            self.worker = Some(worker);
            for env in 0..self.health.len() {
                self.row_mut(Array::ParamsFlag, env)[0] = 1.0;
            }
        }
        let timeout = self.options.step_timeout;
        let worker = self.worker.as_mut().expect("started above");
        let outcome = match worker.command(op, timeout) {
            Ok(reply) if reply == "ok" => Ok(()),
            Ok(reply) => Err(match reply.strip_prefix("error ") {
                Some(message) => message.to_string(),
                None => format!("unexpected answer {reply:?}"),
            }),
            Err(e) => Err(e),
        };
        self.dirty = false;
        if let Err(why) = outcome {
            let reason = format!("GPU simulator worker failed: {why}");
            tracing::error!("{reason}");
            self.worker = None;
            for h in &mut self.health {
                if *h == EnvHealth::Ok {
                    *h = EnvHealth::Failed(reason.clone());
                }
            }
            self.fill(Array::Active, 0.0);
        }
        Ok(())
    }

    /// Reads the worker's failure codes into env health.
    fn collect_failures(&mut self) {
        let codes = self.layout.range(Array::Failed);
        let failed: Vec<(usize, f64)> = self.values()[codes]
            .iter()
            .enumerate()
            .filter(|(env, code)| **code != 0.0 && self.health[*env] == EnvHealth::Ok)
            .map(|(env, code)| (env, *code))
            .collect();
        for (env, code) in failed {
            let label = match code as i64 {
                1 => "bad qpos",
                2 => "bad qvel",
                _ => "bad qacc",
            };
            let t = self.row(Array::FailedTime, env)[0].max(0.0);
            self.health[env] = EnvHealth::Failed(format!("MuJoCo instability ({label}) at t = {t:.3} s"));
            self.row_mut(Array::Active, env)[0] = 0.0;
        }
    }

    fn check_env(&self, env: usize) -> Result<(), SimError> {
        check_env(env, self.health.len())
    }
}

impl Drop for GpuHandler {
    fn drop(&mut self) {
        self.worker = None;
        let _ = std::fs::remove_file(&self.shm_path);
    }
}

/// Where the worker's JAX keeps compiled code: `$XDG_CACHE_HOME/arena/jax`, else
/// `~/.cache/arena/jax`, else the temporary folder.
fn compilation_cache_dir() -> PathBuf {
    cache_base().join("arena").join("jax")
}

/// `$XDG_CACHE_HOME`, else `~/.cache`, else the temporary folder.
fn cache_base() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
}

/// The worker script, written with its modules to `<cache>/arena/gpu-worker-<hash of the
/// sources>/`: per user, and a binary with other sources gets another folder. Checked at each
/// start (files read and compared, rewritten when missing or different), so a cleaned cache only
/// costs a rewrite. Each file is written beside its final name and renamed into place, so
/// processes starting workers at the same time never see a partial file.
fn worker_script() -> Result<PathBuf, String> {
    // FNV-1a: stable across builds and Rust versions (std's hasher is not).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, source) in WORKER_FILES {
        for byte in name.bytes().chain(source.bytes()) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    let dir = cache_base().join("arena").join(format!("gpu-worker-{hash:016x}"));
    let fail = |e: std::io::Error| format!("writing the GPU worker's files to {}: {e}", dir.display());
    std::fs::create_dir_all(&dir).map_err(fail)?;
    for (name, source) in WORKER_FILES {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).is_ok_and(|existing| existing == source) {
            continue;
        }
        let partial = dir.join(format!(".{name}.{}", std::process::id()));
        std::fs::write(&partial, source).map_err(fail)?;
        std::fs::rename(&partial, &path).map_err(fail)?;
    }
    Ok(dir.join(WORKER_FILES[0].0))
}

/// A fresh name for the shared file: in /dev/shm where it exists (memory, not disk).
fn shared_file_path() -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = PathBuf::from("/dev/shm");
    let dir = if dir.is_dir() { dir } else { std::env::temp_dir() };
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("arena-gpu-{}-{n}.f64", std::process::id()))
}

impl Handler for GpuHandler {
    fn describe(&self) -> String {
        match &self.worker {
            Some(w) => format!("gpu ({})", w.device),
            None => "gpu (worker stopped)".into(),
        }
    }

    fn num_envs(&self) -> usize {
        self.health.len()
    }

    fn config(&self) -> &RobotConfig {
        &self.config
    }

    fn pool(&self) -> Option<&rayon::ThreadPool> {
        self.pool.as_ref()
    }

    fn set_qpos_qvel(&mut self, env: usize, qpos: &[f64], qvel: &[f64]) -> Result<(), SimError> {
        self.check_env(env)?;
        check_state(qpos, qvel)?;
        self.row_mut(Array::ResetQpos, env).copy_from_slice(qpos);
        self.row_mut(Array::ResetQvel, env).copy_from_slice(qvel);
        self.row_mut(Array::ResetFlag, env)[0] = 1.0;
        self.row_mut(Array::PushFlag, env)[0] = 0.0;
        self.row_mut(Array::Push, env).fill(0.0);
        self.row_mut(Array::Targets, env).copy_from_slice(&qpos[7..]);
        self.row_mut(Array::Feedforward, env).fill(0.0);
        self.row_mut(Array::Active, env)[0] = 1.0;
        self.health[env] = EnvHealth::Ok;
        self.dirty = true;
        Ok(())
    }

    fn set_joint_targets(&mut self, env: usize, targets: &[f64]) -> Result<(), SimError> {
        self.check_env(env)?;
        if targets.len() != NUM_JOINTS {
            return Err(SimError::Config(format!(
                "targets need {NUM_JOINTS} values, got {}",
                targets.len()
            )));
        }
        self.row_mut(Array::Targets, env).copy_from_slice(targets);
        Ok(())
    }

    fn supports_feedforward(&self) -> bool {
        true
    }

    fn set_feedforward(&mut self, env: usize, torques: &[f64]) -> Result<(), SimError> {
        self.check_env(env)?;
        check_feedforward(torques)?;
        self.row_mut(Array::Feedforward, env).copy_from_slice(torques);
        Ok(())
    }

    fn set_physics_params(&mut self, env: usize, params: &PhysicsParams) -> Result<(), SimError> {
        self.check_env(env)?;
        self.write_params(env, params);
        self.dirty = true;
        Ok(())
    }

    fn push_root(&mut self, env: usize, dv: Vec3, dw_world: Vec3) -> Result<(), SimError> {
        self.check_env(env)?;
        let row = self.row_mut(Array::Push, env);
        for k in 0..3 {
            row[k] += dv[k];
            row[3 + k] += dw_world[k];
        }
        self.row_mut(Array::PushFlag, env)[0] = 1.0;
        self.dirty = true;
        Ok(())
    }

    fn mark_failed(&mut self, env: usize, reason: String) {
        if env < self.health.len() {
            self.health[env] = EnvHealth::Failed(reason);
            self.row_mut(Array::Active, env)[0] = 0.0;
        }
    }

    fn mark_idle(&mut self, env: usize) {
        if env < self.health.len() {
            self.health[env] = EnvHealth::Idle;
            self.row_mut(Array::Active, env)[0] = 0.0;
        }
    }

    fn health(&self, env: usize) -> &EnvHealth {
        &self.health[env]
    }

    fn is_reusable(&self) -> bool {
        self.worker.as_ref().is_some_and(Worker::is_alive)
    }

    fn sync(&mut self) -> Result<(), SimError> {
        if !self.dirty {
            return Ok(());
        }
        self.run("sync")?;
        self.collect_failures();
        Ok(())
    }

    fn step(&mut self, targets: &[f64]) -> Result<(), SimError> {
        let n = self.health.len();
        if targets.len() != n * NUM_JOINTS {
            return Err(SimError::Config(format!(
                "targets must be N×{NUM_JOINTS} = {} values, got {}",
                n * NUM_JOINTS,
                targets.len()
            )));
        }
        let (targets_at, active_at) = (self.layout.range(Array::Targets), self.layout.range(Array::Active));
        self.values_mut()[targets_at].copy_from_slice(targets);
        let health = std::mem::take(&mut self.health);
        for (flag, h) in self.values_mut()[active_at].iter_mut().zip(&health) {
            *flag = if *h == EnvHealth::Ok { 1.0 } else { 0.0 };
        }
        self.health = health;
        self.run("step")?;
        self.collect_failures();
        Ok(())
    }

    fn read_env_into(&self, env: usize, field: Field, out: &mut [f64]) {
        let row = |array: Array| self.output_row(array, env);
        let qpos = row(Array::Qpos);
        let qvel = row(Array::Qvel);
        // Built only by the fields that need them (this runs several times per env and step).
        let root_rot = || -> Quat { std::array::from_fn(|k| qpos.get(3 + k)) };
        let torso3 = |array: Array| -> Vec3 { std::array::from_fn(|k| row(array).get(3 * TORSO_INDEX + k)) };
        let torso_rot = || -> Quat { std::array::from_fn(|k| row(Array::BodyQuat).get(4 * TORSO_INDEX + k)) };
        // The 30 bodies, then the virtual head.
        let bodies3 = |array: Array, out: &mut [f64], head: Vec3| {
            row(array).copy_into(&mut out[..3 * NUM_BODIES]);
            out[3 * NUM_BODIES..].copy_from_slice(&head);
        };
        match field {
            Field::Qpos => qpos.copy_into(out),
            Field::Qvel => qvel.copy_into(out),
            Field::DofPos => qpos.sub(7..NQ).copy_into(out),
            Field::DofVel => qvel.sub(6..NV).copy_into(out),
            Field::DofTorque => row(Array::Torque).copy_into(out),
            Field::DofPosTarget => out.copy_from_slice(self.row(Array::Targets, env)),
            Field::RootPos => qpos.sub(0..3).copy_into(out),
            Field::RootRot => out.copy_from_slice(&root_rot()),
            Field::RootVel => qvel.sub(0..3).copy_into(out),
            Field::RootAngVel => {
                let w = [qvel.get(3), qvel.get(4), qvel.get(5)];
                out.copy_from_slice(&math::rotate(&root_rot(), &w));
            }
            Field::BodyPos => bodies3(Array::BodyPos, out, head_pos(&torso3(Array::BodyPos), &torso_rot())),
            Field::BodyRot => {
                row(Array::BodyQuat).copy_into(&mut out[..4 * NUM_BODIES]);
                out[4 * NUM_BODIES..].copy_from_slice(&torso_rot());
            }
            Field::BodyVel => {
                let head = head_vel(&torso3(Array::BodyLinVel), &torso3(Array::BodyAngVel));
                bodies3(Array::BodyLinVel, out, head);
            }
            Field::BodyAngVel => bodies3(Array::BodyAngVel, out, torso3(Array::BodyAngVel)),
            Field::BodyContactForce => bodies3(Array::ContactForce, out, [0.0; 3]),
            // Refused at construction: the worker simulates no IMU sensors.
            Field::ImuAccelerometer => out.fill(f64::NAN),
        }
    }

    fn total_mass(&self) -> f64 {
        self.total_mass
    }

    fn joint_ranges(&self) -> [(f64, f64); NUM_JOINTS] {
        self.joint_ranges
    }

    fn set_torque_logging(&mut self, on: bool) -> Result<(), SimError> {
        if on {
            return Err(SimError::Config(
                "torque logging (replays in other simulators) needs the cpu backend".into(),
            ));
        }
        Ok(())
    }

    fn torque_log(&self, _env: usize) -> Option<&[f64]> {
        None
    }

    fn worker_pid(&self) -> Option<u32> {
        self.worker.as_ref().map(|w| w.child.id())
    }

    fn worker_timings(&mut self) -> Result<Option<serde_json::Map<String, serde_json::Value>>, SimError> {
        let timeout = self.options.step_timeout;
        let Some(worker) = self.worker.as_mut() else {
            return Ok(None);
        };
        let reply = worker
            .command("stats", timeout)
            .map_err(|why| SimError::Backend(format!("GPU simulator worker's stats: {why}")))?;
        let parsed = reply
            .strip_prefix("stats ")
            .and_then(|json| serde_json::from_str::<serde_json::Value>(json).ok());
        match parsed {
            Some(serde_json::Value::Object(map)) => Ok(Some(map)),
            _ => Err(SimError::Backend(format!(
                "GPU simulator worker's stats: unexpected answer {reply:?}"
            ))),
        }
    }
}

/// One env's row of a device output as the worker wrote it.
#[derive(Clone, Copy)]
enum OutputRow<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
}

impl OutputRow<'_> {
    fn get(self, i: usize) -> f64 {
        match self {
            OutputRow::F32(v) => f64::from(v[i]),
            OutputRow::F64(v) => v[i],
        }
    }

    fn sub(self, range: std::ops::Range<usize>) -> Self {
        match self {
            OutputRow::F32(v) => OutputRow::F32(&v[range]),
            OutputRow::F64(v) => OutputRow::F64(&v[range]),
        }
    }

    /// Widens into `out` (float32 values are exact in float64), which must be as long.
    fn copy_into(self, out: &mut [f64]) {
        match self {
            OutputRow::F32(v) => {
                assert_eq!(v.len(), out.len(), "output row length");
                for (o, x) in out.iter_mut().zip(v) {
                    *o = f64::from(*x);
                }
            }
            OutputRow::F64(v) => out.copy_from_slice(v),
        }
    }
}

// The shared rows are sized for the model's layout.
const _: () = assert!(NQ == 36 && NV == 35);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_warp_only_on_a_cuda_device_in_float32() {
        use GpuDevice::{Auto, Cpu, Gpu};
        for (device, x64, cuda, expected) in [
            (Auto, false, true, GpuImpl::Warp),
            (Gpu, false, true, GpuImpl::Warp),
            (Auto, true, true, GpuImpl::Jax),
            (Cpu, false, true, GpuImpl::Jax),
            (Auto, false, false, GpuImpl::Jax),
            (Gpu, false, false, GpuImpl::Jax),
        ] {
            assert_eq!(
                GpuImpl::Auto.resolve(device, x64, cuda),
                expected,
                "{device:?} x64={x64} cuda={cuda}"
            );
        }
        for explicit in [GpuImpl::Jax, GpuImpl::Warp, GpuImpl::Stub] {
            assert_eq!(explicit.resolve(Auto, true, true), explicit);
        }
        assert_eq!(GpuImpl::default(), GpuImpl::Auto);
        assert_eq!("stub".parse::<GpuImpl>(), Ok(GpuImpl::Stub));
        assert!("cuda".parse::<GpuImpl>().unwrap_err().contains("auto, jax, warp"));
    }
}
