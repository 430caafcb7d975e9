//! The GPU backend: the same G1 model stepped by MuJoCo MJX (MuJoCo 3.17.0's JAX port) or by
//! MuJoCo Warp 3.17.0 in a Python worker process that this handler starts and supervises. No
//! libpython is linked: the worker's Python files (`simulator/python/`) are embedded in the
//! binary, written once to a per-user cache folder and run with the configured interpreter.
//! Batched inputs and outputs live in a shared-memory file ([`super::gpu_layout`]); commands and
//! answers are lines on the worker's stdin and stdout.
//!
//! A worker that dies, hangs past its deadline or answers nonsense fails the episodes it was
//! running, with the reason, and is started again at the next reset: never a server crash.

use super::gpu_layout::{
    Array, INPUT_FEEDFORWARD, INPUT_GO, INPUT_PUSH, INPUT_TARGETS, PARAMS_WIDTH, Precision, ShmLayout,
};
use super::gpu_options::{GpuOptions, cuda_device_present};
use super::gpu_process::{NoAnswer, Worker, create_shared_file, worker_script};
use super::gpu_rows::{PhysicsRow, PhysicsRowsMut};
use super::gpu_spare::{self, SpareKey, WarmupFiles};
use super::mujoco::check_layout;
use super::{
    DECIMATION, EnvHealth, Field, Handler, NQ, NV, PHYSICS_DT, PhysicsParams, check_env, check_feedforward, check_rows,
    check_state, head_pos, head_vel, worker_pool,
};
use crate::SimError;
use crate::math::{self, Quat, Vec3};
use crate::robot::{NUM_BODIES, RobotConfig, TORSO_INDEX};
use arena_data::NUM_JOINTS;
use std::path::{Path, PathBuf};

/// The batched handler over the MJX worker.
pub struct GpuHandler {
    config: RobotConfig,
    options: GpuOptions,
    layout: ShmLayout,
    shm: memmap2::MmapMut,
    shm_path: PathBuf,
    /// The shared file, open for as long as the handler lives: its `flock` tells other
    /// processes' sweeps that the file is in use (`gpu_process::create_shared_file`).
    _shm_held: std::fs::File,
    worker: Option<Worker>,
    /// The device the last worker ran on, as it described it: what ran this handler's episodes,
    /// also after that worker failed (their results name it, [`Handler::describe`]).
    device: String,
    health: Vec<EnvHealth>,
    total_mass: f64,
    joint_ranges: [(f64, f64); NUM_JOINTS],
    pool: Option<rayon::ThreadPool>,
    /// Per-env inputs changed since the last command.
    dirty: bool,
    /// Envs whose `Inputs` row holds a push for the next command; cleared once it is sent.
    pushed: Vec<usize>,
    /// The command sent and not yet answered ([`Handler::step_begin`]).
    in_flight: Option<&'static str>,
    /// Workers lost ([`Handler::backend_failures`]).
    worker_failures: u64,
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

/// Why a worker did not become ready.
enum InitFailure {
    /// It ended before it answered its init.
    Lost(SimError),
    /// It answered, with an error or something else than its ready line, or not within the
    /// start-up timeout.
    Refused(SimError),
}

impl InitFailure {
    fn into_error(self) -> SimError {
        match self {
            InitFailure::Lost(e) | InitFailure::Refused(e) => e,
        }
    }
}

/// The worker's init line: `num_envs` envs of `config` on the shared file `shm`, the model in
/// `mjcf`.
pub(super) fn init_message(
    config: &RobotConfig,
    num_envs: usize,
    options: &GpuOptions,
    shm: &Path,
    mjcf: &Path,
) -> serde_json::Value {
    serde_json::json!({
        "shm": shm,
        "mjcf": mjcf,
        "num_envs": num_envs,
        "kp": config.kp,
        "kd": config.kd,
        "effort": config.effort,
        "decimation": DECIMATION,
        "timestep": PHYSICS_DT,
        "torso_body": TORSO_INDEX + 1,
        "device": options.device.wire(),
        "impl": options.implementation.wire(),
        "x64": options.x64,
        "contact_forces": options.contact_forces,
    })
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
        let precision = if options.x64 { Precision::F64 } else { Precision::F32 };
        let layout = ShmLayout::new(num_envs, precision);
        let (shm_path, file) = create_shared_file(layout.bytes() as u64).map_err(backend_error)?;
        // SAFETY: the file is ours (created above, unique name); only this handler and its
        // worker map it, and the worker writes only while we wait for its answer.
        let mapped = unsafe { memmap2::MmapMut::map_mut(&file) }
            .map_err(|e| backend_error(format!("mapping the shared file: {e}")))
            .and_then(|shm| worker_pool(threads).map(|pool| (shm, pool)));
        let (shm, pool) = match mapped {
            Ok(both) => both,
            Err(e) => {
                // Nothing else would remove it before this process ends.
                let _ = std::fs::remove_file(&shm_path);
                return Err(e);
            }
        };
        let mut handler = Self {
            config,
            options,
            layout,
            shm,
            shm_path,
            _shm_held: file,
            worker: None,
            device: String::new(),
            health: vec![EnvHealth::Idle; num_envs],
            total_mass,
            joint_ranges,
            pool,
            dirty: false,
            in_flight: None,
            worker_failures: 0,
            pushed: Vec::new(),
        };
        handler.fill(Array::Params, 0.0);
        for env in 0..num_envs {
            handler.write_params(env, &PhysicsParams::default());
        }
        let worker = handler.spawn()?;
        handler.device = worker.device.clone();
        handler.worker = Some(worker);
        Ok(handler)
    }

    /// The file as float64 values: the reset and params inputs and the per-env scalars after
    /// the outputs lie on it.
    fn values(&self) -> &[f64] {
        // SAFETY: the map is page-aligned and `layout.bytes()` long; the view stops at its last
        // whole 8 bytes (with float32 physics and an odd number of envs the file ends 4 bytes
        // later, inside `Inputs`, which is never read as float64).
        unsafe { std::slice::from_raw_parts(self.shm.as_ptr().cast::<f64>(), self.shm.len() / 8) }
    }

    fn values_mut(&mut self) -> &mut [f64] {
        // SAFETY: as in `values`; `&mut self` makes this the only view on our side.
        unsafe { std::slice::from_raw_parts_mut(self.shm.as_mut_ptr().cast::<f64>(), self.shm.len() / 8) }
    }

    /// One env's row of a float64 array (a reset or params input, or a per-env scalar the
    /// worker writes).
    fn row(&self, array: Array, env: usize) -> &[f64] {
        debug_assert!(!array.in_physics_precision(), "{array:?} is read with physics_row");
        &self.values()[self.layout.row(array, env)]
    }

    fn row_mut(&mut self, array: Array, env: usize) -> &mut [f64] {
        debug_assert!(!array.in_physics_precision(), "{array:?} is in the physics' precision");
        let range = self.layout.row(array, env);
        &mut self.values_mut()[range]
    }

    /// `Inputs` of every env, in the physics' precision, for writing.
    fn inputs_mut(&mut self) -> PhysicsRowsMut<'_> {
        let range = self.layout.range(Array::Inputs);
        match self.layout.precision() {
            Precision::F64 => PhysicsRowsMut::F64(&mut self.values_mut()[range]),
            Precision::F32 => {
                // SAFETY: as in `values_mut`, viewed as float32 values (4-byte aligned, the
                // file a whole number of them).
                let all =
                    unsafe { std::slice::from_raw_parts_mut(self.shm.as_mut_ptr().cast::<f32>(), self.shm.len() / 4) };
                PhysicsRowsMut::F32(&mut all[range])
            }
        }
    }

    /// One env's `Inputs` row, for writing.
    fn input_row_mut(&mut self, env: usize) -> PhysicsRowsMut<'_> {
        self.inputs_mut().row(env)
    }

    /// One env's row of an array in the physics' precision (a device output, or `Inputs` as
    /// the worker took it).
    fn physics_row(&self, array: Array, env: usize) -> PhysicsRow<'_> {
        let range = self.layout.row(array, env);
        match self.layout.precision() {
            Precision::F64 => PhysicsRow::F64(&self.values()[range]),
            Precision::F32 => {
                // SAFETY: as in `values`, viewed as float32 values (4-byte aligned, a whole
                // number of them); the worker writes only while we wait for its answer.
                let all = unsafe { std::slice::from_raw_parts(self.shm.as_ptr().cast::<f32>(), self.shm.len() / 4) };
                PhysicsRow::F32(&all[range])
            }
        }
    }

    fn fill(&mut self, array: Array, value: f64) {
        let range = self.layout.range(array);
        self.values_mut()[range].fill(value);
    }

    /// No env advances on the next `step` until its go flag is set again (a reset, or `step`
    /// itself for a healthy env).
    fn stop_all(&mut self) {
        self.inputs_mut().set_in_every_row(INPUT_GO, 0.0);
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

    /// Starts a worker on the shared file and waits for it to be ready: a spare of a server's
    /// if one is kept for these options, else a new one.
    fn spawn(&mut self) -> Result<Worker, SimError> {
        let began = std::time::Instant::now();
        let python = self.options.python.clone();
        let mjcf_path = self.shm_path.with_extension("xml");
        std::fs::write(&mjcf_path, self.config.mjcf())
            .map_err(|e| backend_error(format!("writing the model for the worker: {e}")))?;
        let key = SpareKey::new(&self.options);
        let mut started = None;
        if let Some(spare) = gpu_spare::take(&key) {
            match self.init_worker(spare.worker, Some(spare.warmup), &mjcf_path, began) {
                Ok(worker) => {
                    gpu_spare::taken_spare(&key, false);
                    started = Some(Ok(worker))
                }
                // A spare that died before or during its init (its warm-up failed, or it was
                // killed): this start goes on with a worker of its own, as without spares.
                Err(InitFailure::Lost(e)) => {
                    tracing::warn!("the spare GPU worker taken was lost ({e}); starting a new one");
                    gpu_spare::taken_spare(&key, true);
                }
                Err(InitFailure::Refused(e)) => started = Some(Err(e)),
            }
        }
        let started = started.unwrap_or_else(|| {
            let worker = worker_script().and_then(|script| {
                Worker::start(&python, &script, key.preload).map_err(|e| {
                    format!(
                        "could not start the GPU worker with {} ({e}); set ARENA_GPU_PYTHON (or `gpu_python`) to a Python with python/requirements-gpu.txt installed (`make deps-gpu`)",
                        python.display()
                    )
                })
            });
            match worker {
                Ok(worker) => self.init_worker(worker, None, &mjcf_path, began).map_err(InitFailure::into_error),
                Err(e) => Err(backend_error(e)),
            }
        });
        let _ = std::fs::remove_file(&mjcf_path);
        // The spare taken (or one that died) is replaced now, after this start rather than
        // beside it.
        gpu_spare::replenish(&key);
        started
    }

    /// Sends `worker` its init (a spare's warm-up files are kept until it has answered, having
    /// read them by then) and waits for its ready line; `warmup` is `Some` for a spare.
    fn init_worker(
        &self,
        mut worker: Worker,
        warmup: Option<Option<WarmupFiles>>,
        mjcf_path: &Path,
        began: std::time::Instant,
    ) -> Result<Worker, InitFailure> {
        let from_spare = warmup.is_some();
        let python = &self.options.python;
        let init = init_message(
            &self.config,
            self.health.len(),
            &self.options,
            &self.shm_path,
            mjcf_path,
        );
        tracing::info!(
            "starting the GPU simulator worker ({} envs, {} on {}{}); the first start compiles for minutes",
            self.health.len(),
            self.options.implementation.wire(),
            self.options.device.wire(),
            if from_spare { ", a spare started ahead" } else { "" }
        );
        let reply = worker
            .send(&init.to_string())
            .map_err(NoAnswer::Ended)
            .and_then(|()| worker.await_answer("its init", self.options.startup_timeout));
        drop(warmup);
        // A start that fails inside Python (a missing package, no GPU) names the interpreter
        // too: the usual fix is another ARENA_GPU_PYTHON.
        let with_python = |what: String| {
            backend_error(format!(
                "{what} (worker Python: {}; set ARENA_GPU_PYTHON or `gpu_python` to one with python/requirements-gpu.txt)",
                python.display()
            ))
        };
        let reply = reply.map_err(|e| match e {
            // Still running after the whole start-up timeout: a new worker would wait as long.
            NoAnswer::TimedOut(e) => InitFailure::Refused(with_python(format!("the GPU worker did not start: {e}"))),
            // Ended first (for a spare: its warm-up failed, or it was killed): a spare's taker
            // starts a worker of its own.
            NoAnswer::Ended(e) => InitFailure::Lost(with_python(format!("the GPU worker did not start: {e}"))),
        })?;
        let refused = |e: SimError| InitFailure::Refused(e);
        let ready: serde_json::Value = serde_json::from_str(&reply).map_err(|_| {
            refused(backend_error(format!(
                "the GPU worker answered {reply:?} instead of its ready line"
            )))
        })?;
        if let Some(error) = ready.get("error").and_then(|e| e.as_str()) {
            return Err(refused(with_python(format!("the GPU worker could not start: {error}"))));
        }
        if ready.get("ready") != Some(&serde_json::Value::Bool(true)) {
            return Err(refused(backend_error(format!(
                "the GPU worker answered {reply:?} instead of its ready line"
            ))));
        }
        let field = |k: &str| ready.get(k).and_then(|v| v.as_str()).unwrap_or("?").to_string();
        worker.device = format!(
            "{} on {} ({}, mujoco {})",
            field("backend"),
            field("device"),
            field("library"),
            field("mujoco")
        );
        // The worker times its phases (what it did before its init line, `preload_s` and a
        // spare's `warmup_s`, then from the init line on); the whole start as seen from here goes
        // with them, and the rest of it: for a worker started here the interpreter's own start,
        // the init line's way there and the ready line's way back; for a spare, whose preload
        // and warm-up were done before it was taken (`spare_worker`), the init line's and the
        // ready line's ways and whatever of them was still left (`waiting_s`).
        let mut startup = ready.get("startup").cloned().unwrap_or_else(|| serde_json::json!({}));
        if let Some(phases) = startup.as_object_mut() {
            let whole = began.elapsed().as_secs_f64();
            let timed: f64 = phases
                .iter()
                .filter(|(k, _)| !(from_spare && ["preload_s", "warmup_s"].contains(&k.as_str())))
                .filter_map(|(_, v)| v.as_f64())
                .sum();
            let rest = if from_spare { "waiting_s" } else { "interpreter_start_s" };
            phases.insert("spawn_to_ready_s".into(), serde_json::json!(whole));
            phases.insert(rest.into(), serde_json::json!(whole - timed));
            phases.insert("spare_worker".into(), serde_json::json!(from_spare));
            worker.startup = phases.clone();
        }
        tracing::info!(
            "GPU simulator worker ready: {} after {:.1} s of compilation (start-up {})",
            worker.device,
            ready.get("compile_s").and_then(|v| v.as_f64()).unwrap_or(f64::NAN),
            startup
        );
        Ok(worker)
    }

    /// Runs `sync` or `step` on the worker. A worker failure fails every env that was running
    /// (with the reason) and drops the worker; the next reset starts a new one.
    fn run(&mut self, op: &'static str) -> Result<(), SimError> {
        self.run_begin(op)?;
        self.run_finish();
        Ok(())
    }

    /// Sends `op` to the worker (starting one first where a reset needs it); [`Self::run_finish`]
    /// takes its answer. A command still in flight is answered first.
    fn run_begin(&mut self, op: &'static str) -> Result<(), SimError> {
        self.settle();
        let pending_reset = self.values()[self.layout.range(Array::ResetFlag)]
            .iter()
            .any(|f| *f != 0.0);
        if self.worker.is_none() {
            if !pending_reset {
                return Ok(());
            }
            // Every env not being reset was failed when the old worker went.
            let worker = match self.spawn() {
                Ok(worker) => worker,
                Err(e) => {
                    // The envs being reset fail with the reason, and their resets are taken
                    // back: none is left to start (or to retry the start) at the next command.
                    let reason = format!("GPU simulator worker failed: {e}");
                    self.worker_failures += 1;
                    for env in 0..self.health.len() {
                        if self.row(Array::ResetFlag, env)[0] != 0.0 {
                            self.row_mut(Array::ResetFlag, env)[0] = 0.0;
                            self.health[env] = EnvHealth::Failed(reason.clone());
                        }
                    }
                    return Err(e);
                }
            };
            self.device = worker.device.clone();
            self.worker = Some(worker);
            for env in 0..self.health.len() {
                self.row_mut(Array::ParamsFlag, env)[0] = 1.0;
            }
        }
        let worker = self.worker.as_mut().expect("started above");
        match worker.send(op) {
            Ok(()) => self.in_flight = Some(op),
            Err(why) => self.end_command(Err(why)),
        }
        Ok(())
    }

    /// Waits for the answer to the command in flight, if any, and applies it (failure codes
    /// are read by the caller).
    fn run_finish(&mut self) {
        let Some(op) = self.in_flight.take() else {
            return;
        };
        let timeout = self.options.step_timeout;
        let Some(worker) = self.worker.as_mut() else {
            return;
        };
        let outcome = match worker.answer(op, timeout) {
            Ok(reply) if reply == "ok" => Ok(()),
            Ok(reply) => Err(match reply.strip_prefix("error ") {
                Some(message) => message.to_string(),
                None => format!("unexpected answer {reply:?}"),
            }),
            Err(e) => Err(e),
        };
        self.end_command(outcome);
    }

    /// What follows a command's answer (or its failure to be sent).
    fn end_command(&mut self, outcome: Result<(), String>) {
        self.dirty = false;
        // A push goes with one command, as the CPU backend applies it once.
        for env in std::mem::take(&mut self.pushed) {
            self.input_row_mut(env).fill(INPUT_PUSH, 0.0);
        }
        if let Err(why) = outcome {
            self.worker_failed(&why);
        }
    }

    /// The worker is dropped (the next reset starts another) and every env it ran fails with
    /// `why`: after a command that went wrong, its answers can no longer be matched to
    /// commands.
    fn worker_failed(&mut self, why: &str) {
        let reason = format!("GPU simulator worker failed: {why}");
        tracing::error!("{reason}");
        self.worker = None;
        self.worker_failures += 1;
        for h in &mut self.health {
            if *h == EnvHealth::Ok {
                *h = EnvHealth::Failed(reason.clone());
            }
        }
        self.stop_all();
    }

    /// Takes the answer to a step still in flight (a caller that skipped
    /// [`Handler::step_finish`] before touching the handler again) and its failure codes.
    fn settle(&mut self) {
        if self.in_flight.is_some() {
            self.run_finish();
            self.collect_failures();
        }
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
            let t = self.row(Array::FailedTime, env)[0].max(0.0);
            self.health[env] = EnvHealth::Failed(failure_reason(code as i64, t));
            self.input_row_mut(env).set(INPUT_GO, 0.0);
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

impl Handler for GpuHandler {
    /// The same while a failed worker awaits its successor: the episodes it failed ran there.
    fn describe(&self) -> String {
        format!("gpu ({})", self.device)
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
        self.settle();
        self.check_env(env)?;
        check_state(qpos, qvel)?;
        self.row_mut(Array::ResetQpos, env).copy_from_slice(qpos);
        self.row_mut(Array::ResetQvel, env).copy_from_slice(qvel);
        self.row_mut(Array::ResetFlag, env)[0] = 1.0;
        let mut inputs = self.input_row_mut(env);
        inputs.fill(INPUT_PUSH, 0.0);
        inputs.write(INPUT_TARGETS, &qpos[7..]);
        inputs.fill(INPUT_FEEDFORWARD, 0.0);
        inputs.set(INPUT_GO, 1.0);
        self.health[env] = EnvHealth::Ok;
        self.dirty = true;
        Ok(())
    }

    fn set_joint_targets(&mut self, env: usize, targets: &[f64]) -> Result<(), SimError> {
        self.settle();
        self.check_env(env)?;
        if targets.len() != NUM_JOINTS {
            return Err(SimError::Config(format!(
                "targets need {NUM_JOINTS} values, got {}",
                targets.len()
            )));
        }
        self.input_row_mut(env).write(INPUT_TARGETS, targets);
        Ok(())
    }

    fn supports_feedforward(&self) -> bool {
        true
    }

    fn set_feedforward(&mut self, env: usize, torques: &[f64]) -> Result<(), SimError> {
        self.settle();
        self.check_env(env)?;
        check_feedforward(torques)?;
        self.input_row_mut(env).write(INPUT_FEEDFORWARD, torques);
        Ok(())
    }

    fn set_feedforward_rows(&mut self, torques: &[f64], envs: &[bool]) -> Result<(), SimError> {
        self.settle();
        if envs.len() != self.health.len() {
            return Err(SimError::Config(format!(
                "feed-forward torques: {} env flags for {} envs",
                envs.len(),
                self.health.len()
            )));
        }
        check_rows("feed-forward torques", torques, envs)?;
        // One pass over the inputs block in the physics' precision, on the envs' threads.
        let pool = self.pool.take();
        self.inputs_mut().for_each_row(pool.as_ref(), |env, mut row| {
            if envs[env] {
                row.write(INPUT_FEEDFORWARD, &torques[env * NUM_JOINTS..(env + 1) * NUM_JOINTS]);
            }
        });
        self.pool = pool;
        Ok(())
    }

    fn set_physics_params(&mut self, env: usize, params: &PhysicsParams) -> Result<(), SimError> {
        self.settle();
        self.check_env(env)?;
        self.write_params(env, params);
        self.dirty = true;
        Ok(())
    }

    fn push_root(&mut self, env: usize, dv: Vec3, dw_world: Vec3) -> Result<(), SimError> {
        self.settle();
        self.check_env(env)?;
        let mut row = self.input_row_mut(env);
        for k in 0..3 {
            row.add(INPUT_PUSH.start + k, dv[k]);
            row.add(INPUT_PUSH.start + 3 + k, dw_world[k]);
        }
        if !self.pushed.contains(&env) {
            self.pushed.push(env);
        }
        self.dirty = true;
        Ok(())
    }

    fn mark_failed(&mut self, env: usize, reason: String) {
        self.settle();
        if env < self.health.len() {
            self.health[env] = EnvHealth::Failed(reason);
            self.input_row_mut(env).set(INPUT_GO, 0.0);
        }
    }

    fn mark_idle(&mut self, env: usize) {
        self.settle();
        if env < self.health.len() {
            self.health[env] = EnvHealth::Idle;
            self.input_row_mut(env).set(INPUT_GO, 0.0);
        }
    }

    fn health(&self, env: usize) -> &EnvHealth {
        &self.health[env]
    }

    fn backend_failures(&self) -> u64 {
        self.worker_failures
    }

    fn is_reusable(&self) -> bool {
        self.worker.as_ref().is_some_and(Worker::is_alive)
    }

    fn sync(&mut self) -> Result<(), SimError> {
        self.settle();
        if !self.dirty {
            return Ok(());
        }
        self.run("sync")?;
        self.collect_failures();
        Ok(())
    }

    fn step(&mut self, targets: &[f64]) -> Result<(), SimError> {
        self.step_begin(targets)?;
        self.step_finish()
    }

    fn step_finish(&mut self) -> Result<(), SimError> {
        self.settle();
        Ok(())
    }

    fn step_begin(&mut self, targets: &[f64]) -> Result<(), SimError> {
        self.settle();
        let n = self.health.len();
        if targets.len() != n * NUM_JOINTS {
            return Err(SimError::Config(format!(
                "targets must be N×{NUM_JOINTS} = {} values, got {}",
                n * NUM_JOINTS,
                targets.len()
            )));
        }
        // Every env's targets and go flag, in the physics' precision, on the envs' threads.
        let (health, pool) = (std::mem::take(&mut self.health), self.pool.take());
        self.inputs_mut().for_each_row(pool.as_ref(), |env, mut row| {
            row.write(INPUT_TARGETS, &targets[env * NUM_JOINTS..(env + 1) * NUM_JOINTS]);
            row.set(INPUT_GO, if health[env] == EnvHealth::Ok { 1.0 } else { 0.0 });
        });
        (self.health, self.pool) = (health, pool);
        self.run_begin("step")
    }

    fn prefetch_env(&self, env: usize) {
        if env >= self.health.len() || self.in_flight.is_some() {
            return;
        }
        // What every refresh reads; the body rotations and velocities when it computes
        // privileged_state (the worker's block is fresh in memory after each step, and 10 rows
        // per env in separate arrays outrun the hardware's stream prefetch).
        for array in [
            Array::Qpos,
            Array::Qvel,
            Array::BodyPos,
            Array::BodyQuat,
            Array::BodyLinVel,
            Array::BodyAngVel,
        ] {
            self.physics_row(array, env).prefetch();
        }
    }

    fn read_env_into(&self, env: usize, field: Field, out: &mut [f64]) {
        debug_assert!(self.in_flight.is_none(), "read between step_begin and step_finish");
        let row = |array: Array| self.physics_row(array, env);
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
            // As the physics took them (float32 on every implementation but MJX with x64).
            Field::DofPosTarget => row(Array::Inputs).sub(INPUT_TARGETS).copy_into(out),
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

    fn read_env_body_into(&self, env: usize, field: Field, body: usize, out: &mut [f64]) {
        debug_assert!(self.in_flight.is_none(), "read between step_begin and step_finish");
        let array = match field {
            Field::BodyPos => Some(Array::BodyPos),
            Field::BodyRot => Some(Array::BodyQuat),
            Field::BodyVel => Some(Array::BodyLinVel),
            Field::BodyAngVel => Some(Array::BodyAngVel),
            Field::BodyContactForce => Some(Array::ContactForce),
            _ => None,
        };
        match array {
            // The worker's 30 bodies lie in its rows as read_env_into copies them.
            Some(array) if body < NUM_BODIES => {
                let w = out.len();
                self.physics_row(array, env)
                    .sub(w * body..w * (body + 1))
                    .copy_into(out);
            }
            // The virtual head is derived from the torso; anything else is read whole.
            _ => super::read_one_body_of_the_row(self, env, field, body, out),
        }
    }

    fn total_mass(&self) -> f64 {
        self.total_mass
    }

    fn joint_ranges(&self) -> [(f64, f64); NUM_JOINTS] {
        self.joint_ranges
    }

    fn set_torque_logging(&mut self, on: bool) -> Result<(), SimError> {
        self.settle();
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

    fn worker_startup(&self) -> Option<&serde_json::Map<String, serde_json::Value>> {
        self.worker.as_ref().map(|w| &w.startup)
    }

    fn worker_timings(&mut self) -> Result<Option<serde_json::Map<String, serde_json::Value>>, SimError> {
        self.settle();
        let timeout = self.options.step_timeout;
        let Some(worker) = self.worker.as_mut() else {
            return Ok(None);
        };
        let answered = worker.command("stats", timeout);
        let parsed = answered.as_ref().ok().and_then(|reply| {
            reply
                .strip_prefix("stats ")
                .and_then(|json| serde_json::from_str::<serde_json::Value>(json).ok())
        });
        let why = match (parsed, answered) {
            (Some(serde_json::Value::Object(map)), _) => return Ok(Some(map)),
            (_, Ok(reply)) => format!("unexpected answer {reply:?} to stats"),
            (_, Err(why)) => format!("stats: {why}"),
        };
        // A late or stray answer would be read as the next command's: the worker goes.
        self.worker_failed(&why);
        Err(SimError::Backend(format!("GPU simulator worker's {why}")))
    }
}

/// Why the worker failed an env, from its failure code (worker_common's: 1 to 3 a bad state
/// after a substep, 4 to 7 a command input that was not finite, found by the physics before it
/// used it) and the env's time then.
fn failure_reason(code: i64, t: f64) -> String {
    let input = match code {
        1 => return format!("MuJoCo instability (bad qpos) at t = {t:.3} s"),
        2 => return format!("MuJoCo instability (bad qvel) at t = {t:.3} s"),
        4 => "push",
        5 => "go flag",
        6 => "PD target",
        7 => "feed-forward torque",
        3 => return format!("MuJoCo instability (bad qacc) at t = {t:.3} s"),
        _ => return format!("failed by the worker with code {code} at t = {t:.3} s"),
    };
    // The arena's own numbers (an agent's actions are checked before they become targets).
    format!("the physics was given a non-finite {input} at t = {t:.3} s")
}

// The shared rows are sized for the model's layout.
const _: () = assert!(NQ == 36 && NV == 35);
