//! Layer 1: batched physics of the G1 behind one trait, [`Handler`], with two backends:
//! [`MujocoHandler`] (MuJoCo on CPU threads, the reference) and [`GpuHandler`] (MuJoCo MJX or
//! MuJoCo Warp in a supervised Python worker, on a GPU or, for tests, on the library's CPU
//! device).
//!
//! Consumers read state through the MetaSim-style [`RobotState`] dict (general, by name) or
//! through per-env and batched structure-of-arrays accessors ([`Field`], the hot path).

mod gpu;
mod gpu_layout;
mod gpu_options;
mod gpu_process;
mod gpu_rows;
mod gpu_spare;
mod mujoco;

pub use gpu::GpuHandler;
pub use gpu_options::{GpuDevice, GpuImpl, GpuOptions, cuda_device_present};
pub use gpu_process::WorkerCheck;
pub use gpu_spare::{check_gpu_worker, keep_spare_workers, spare_worker_pids};
pub use mujoco::MujocoHandler;

use crate::SimError;
use crate::math::{self, Quat, Vec3};
use crate::robot::{BODY_NAMES, HEAD_NAME, HEAD_OFFSET, JOINT_NAMES, NUM_BODIES, NUM_BODIES_EXT, RobotConfig};
use arena_data::NUM_JOINTS;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Physics time step (200 Hz) and control decimation (50 Hz actions).
pub const PHYSICS_DT: f64 = 0.005;
pub const DECIMATION: usize = 4;
pub const CONTROL_DT: f64 = PHYSICS_DT * DECIMATION as f64;
/// Generalised coordinates of the G1: free root (7) + 29 hinges; velocities 6 + 29.
pub const NQ: usize = 7 + NUM_JOINTS;
pub const NV: usize = 6 + NUM_JOINTS;

/// Per-env physical parameters that domain randomisation may change (all 1 / 0 by default).
#[derive(Debug, Clone, PartialEq)]
pub struct PhysicsParams {
    /// Sliding friction of every geom (robot and floor); `None` keeps the model's values.
    pub friction: Option<f64>,
    /// Mass multiplier per real body (30, BODY_NAMES order).
    pub mass_scale: [f64; NUM_BODIES],
    /// Offset added to the torso's centre of mass (m, torso frame).
    pub torso_com_offset: Vec3,
    /// Multipliers of the PD gains.
    pub kp_scale: f64,
    pub kd_scale: f64,
}

impl Default for PhysicsParams {
    fn default() -> Self {
        Self {
            friction: None,
            mass_scale: [1.0; NUM_BODIES],
            torso_com_offset: [0.0; 3],
            kp_scale: 1.0,
            kd_scale: 1.0,
        }
    }
}

/// Whether an environment can be stepped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvHealth {
    Ok,
    /// The environment stopped; it is skipped by `step` until the next `set_qpos_qvel` / reset.
    Failed(String),
    /// No episode assigned: skipped by `step` until the next `set_qpos_qvel`.
    Idle,
}

/// Pose and velocity of one body (world frame; rotation wxyz).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BodyState {
    pub pos: Vec3,
    pub rot: Quat,
    pub vel: Vec3,
    pub ang_vel: Vec3,
}

/// MetaSim-style state dict of one robot. `dof_*` are keyed by joint name, `bodies` by body
/// name (30 real bodies plus the virtual `head_link`). Velocities are world-frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RobotState {
    pub pos: Vec3,
    pub rot: Quat,
    pub vel: Vec3,
    pub ang_vel: Vec3,
    pub dof_pos: BTreeMap<String, f64>,
    pub dof_vel: BTreeMap<String, f64>,
    pub dof_pos_target: BTreeMap<String, f64>,
    pub dof_torque: BTreeMap<String, f64>,
    pub bodies: BTreeMap<String, BodyState>,
}

/// Feed-forward torques come one per joint.
pub(crate) fn check_feedforward(torques: &[f64]) -> Result<(), SimError> {
    if torques.len() != NUM_JOINTS {
        return Err(SimError::Config(format!(
            "feed-forward torques need {NUM_JOINTS} values, got {}",
            torques.len()
        )));
    }
    Ok(())
}

/// Per-joint rows of every env (N×29) with a flag per env.
pub(crate) fn check_rows(what: &str, rows: &[f64], envs: &[bool]) -> Result<(), SimError> {
    if rows.len() != envs.len() * NUM_JOINTS {
        return Err(SimError::Config(format!(
            "{what} must be N×{NUM_JOINTS} = {} values for {} envs, got {}",
            envs.len() * NUM_JOINTS,
            envs.len(),
            rows.len()
        )));
    }
    Ok(())
}

/// A generalised state must be whole (qpos 36, qvel 35) and finite.
pub(crate) fn check_state(qpos: &[f64], qvel: &[f64]) -> Result<(), SimError> {
    if qpos.len() != NQ || qvel.len() != NV {
        return Err(SimError::Config(format!(
            "state needs qpos of {NQ} and qvel of {NV} values, got {} and {}",
            qpos.len(),
            qvel.len()
        )));
    }
    if qpos.iter().chain(qvel).any(|v| !v.is_finite()) {
        return Err(SimError::Config("state contains non-finite values".into()));
    }
    Ok(())
}

/// Batched quantities, each read for all N environments into one contiguous array
/// (structure of arrays; row `env` holds `Field::width()` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// MuJoCo qpos (36: root xyz, root quaternion wxyz, 29 joints).
    Qpos,
    /// MuJoCo qvel (35: root linear velocity world, root angular velocity local, 29 joints).
    Qvel,
    DofPos,
    DofVel,
    DofTorque,
    DofPosTarget,
    RootPos,
    RootRot,
    /// World-frame root linear / angular velocity.
    RootVel,
    RootAngVel,
    /// 31 bodies (30 + virtual head), ×3 or ×4, world frame.
    BodyPos,
    BodyRot,
    BodyVel,
    BodyAngVel,
    /// 31 bodies × 3: net world-frame contact force on each body from the last physics
    /// substep's contacts (the virtual head's is 0). Auxiliary rewards read the feet and the
    /// penalised bodies (BFM_ZERO_FACTS §4.2).
    BodyContactForce,
    /// The accelerometers of the two IMU sites (pelvis xyz, then torso xyz; m/s², site frame,
    /// specific force: +9.81 on z at rest), as MuJoCo's `accelerometer` sensor computed them in
    /// the last physics substep. Only models compiled with [`RobotConfig::imu_sensors`] have
    /// them (NaN otherwise).
    ImuAccelerometer,
}

/// The widest [`Field`] row (31 body quaternions).
pub(crate) const MAX_FIELD_WIDTH: usize = 4 * NUM_BODIES_EXT;

/// [`Handler::read_env_body_into`] by reading the whole row.
pub(crate) fn read_one_body_of_the_row<H: Handler + ?Sized>(
    handler: &H,
    env: usize,
    field: Field,
    body: usize,
    out: &mut [f64],
) {
    let mut row = [0.0; MAX_FIELD_WIDTH];
    let row = &mut row[..field.width()];
    handler.read_env_into(env, field, row);
    let w = out.len();
    out.copy_from_slice(&row[w * body..w * (body + 1)]);
}

impl Field {
    pub fn width(self) -> usize {
        match self {
            Field::Qpos => NQ,
            Field::Qvel => NV,
            Field::DofPos | Field::DofVel | Field::DofTorque | Field::DofPosTarget => NUM_JOINTS,
            Field::RootPos | Field::RootVel | Field::RootAngVel => 3,
            Field::RootRot => 4,
            Field::BodyPos | Field::BodyVel | Field::BodyAngVel | Field::BodyContactForce => 3 * NUM_BODIES_EXT,
            Field::BodyRot => 4 * NUM_BODIES_EXT,
            Field::ImuAccelerometer => 6,
        }
    }
}

/// Which backend simulates the envs (server config `sim_backend`, `--backend` on the CLIs).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum SimBackend {
    /// MuJoCo on CPU threads.
    #[default]
    Cpu,
    /// MuJoCo MJX or MuJoCo Warp in a supervised Python worker.
    Gpu(GpuOptions),
}

impl SimBackend {
    /// `cpu` or `gpu`, as configs and reports name it.
    pub fn name(&self) -> &'static str {
        match self {
            SimBackend::Cpu => "cpu",
            SimBackend::Gpu(_) => "gpu",
        }
    }

    /// Creates `num_envs` envs of `config` on this backend (`threads` = CPU worker threads for
    /// the physics or, on the GPU backend, for the per-env observation work; 0 = rayon's default).
    pub fn create(&self, config: RobotConfig, num_envs: usize, threads: usize) -> Result<Box<dyn Handler>, SimError> {
        Ok(match self {
            SimBackend::Cpu => Box::new(MujocoHandler::new(config, num_envs, threads)?),
            SimBackend::Gpu(options) => Box::new(GpuHandler::new(config, num_envs, threads, options.clone())?),
        })
    }
}

/// Layer-1 interface of both backends. Per-env writes (states, parameters, pushes, targets) may
/// be buffered by a backend until [`Handler::sync`] or [`Handler::step`]; reads see the state
/// as of the last of those.
pub trait Handler: Send + Sync {
    /// Which backend this is, for reports (`cpu`, `gpu (mjx on cuda:0 (mujoco-mjx 3.17.0, jax 0.10.2, mujoco 3.17.0))`, ...).
    fn describe(&self) -> String;
    fn num_envs(&self) -> usize;
    fn config(&self) -> &RobotConfig;
    /// The worker pool for per-env work, or `None` when that work runs on the calling thread;
    /// callers with per-env work of their own use it so everything runs on the same threads.
    fn pool(&self) -> Option<&rayon::ThreadPool>;
    fn num_threads(&self) -> usize {
        self.pool().map_or(1, |p| p.current_num_threads())
    }
    /// Whether a new env may take this simulator over ([`crate::env::TrackingEnv::with_handler`]):
    /// false once it cannot step any more (a GPU worker that stopped).
    fn is_reusable(&self) -> bool {
        true
    }
    /// Sets one env's generalised state (qpos 36, qvel 35), clears its failure; time restarts at
    /// 0 and the PD targets become the state's joint positions.
    fn set_qpos_qvel(&mut self, env: usize, qpos: &[f64], qvel: &[f64]) -> Result<(), SimError>;
    /// Sets one env's PD targets (29), kept until the next step's targets.
    fn set_joint_targets(&mut self, env: usize, targets: &[f64]) -> Result<(), SimError>;
    /// Applies domain-randomised physical parameters to one env (from the nominal model).
    fn set_physics_params(&mut self, env: usize, params: &PhysicsParams) -> Result<(), SimError>;
    /// Sets one env's feed-forward torques (29, N·m), added to the PD torque before the effort
    /// clip at every substep until changed; a reset sets them to 0 (the joint-position action
    /// mode's τ_ff). Not every backend has them.
    fn supports_feedforward(&self) -> bool {
        false
    }
    fn set_feedforward(&mut self, env: usize, _torques: &[f64]) -> Result<(), SimError> {
        Err(SimError::Config(format!(
            "env {env}: feed-forward torques are not supported by the {} backend",
            self.describe()
        )))
    }
    /// [`Handler::set_feedforward`] for every env flagged in `envs`, from N×29 `torques`; a
    /// backend that keeps them in one block writes them in one pass.
    fn set_feedforward_rows(&mut self, torques: &[f64], envs: &[bool]) -> Result<(), SimError> {
        check_rows("feed-forward torques", torques, envs)?;
        for (env, rows) in torques.chunks_exact(NUM_JOINTS).enumerate() {
            if envs[env] {
                self.set_feedforward(env, rows)?;
            }
        }
        Ok(())
    }
    /// Adds a velocity impulse to the root (world-frame linear, world-frame angular): a push.
    fn push_root(&mut self, env: usize, dv: Vec3, dw_world: Vec3) -> Result<(), SimError>;
    /// Marks an env failed (e.g. a non-finite action): it is not stepped until reset.
    fn mark_failed(&mut self, env: usize, reason: String);
    /// Marks an env idle (not stepped) until its next reset.
    fn mark_idle(&mut self, env: usize);
    fn health(&self, env: usize) -> &EnvHealth;
    /// How many times the backend as a whole failed (a GPU worker that died), failing every env
    /// it ran: not the episodes' doing, unlike one env's instability. A caller that compares it
    /// across a step tells the two apart. Backends that run each env on its own never do.
    fn backend_failures(&self) -> u64 {
        0
    }
    /// Applies buffered per-env writes so reads see them (a no-op where writes are immediate).
    fn sync(&mut self) -> Result<(), SimError> {
        Ok(())
    }
    /// Sets each env's joint position targets (N×29, radians) and advances it by one control
    /// step (DECIMATION physics steps of the PD loop). Failed and idle envs are skipped.
    fn step(&mut self, targets: &[f64]) -> Result<(), SimError>;
    /// [`Handler::step`] in two halves, for a caller with host work to do while a backend
    /// that simulates elsewhere (the GPU worker) runs the step: this starts it, and
    /// [`Handler::step_finish`] waits for it. Between the two the caller must not touch the
    /// handler. A backend that steps on the calling thread does the whole step here.
    fn step_begin(&mut self, targets: &[f64]) -> Result<(), SimError> {
        self.step(targets)
    }
    /// Waits for the step [`Handler::step_begin`] started (nothing when it did the whole step).
    fn step_finish(&mut self) -> Result<(), SimError> {
        Ok(())
    }
    /// Reads `field` of one env into `out` (`field.width()` values).
    fn read_env_into(&self, env: usize, field: Field, out: &mut [f64]);
    /// A hint that `env`'s state is read soon (after a step, env after env): a backend whose
    /// state another process has just written asks the CPU to load it ahead. No effect on any
    /// value; an env out of range is ignored.
    fn prefetch_env(&self, _env: usize) {}
    /// One body's values of a per-body field ([`Field::BodyPos`], `BodyRot`, `BodyVel`,
    /// `BodyAngVel`, `BodyContactForce`; `out` holds one body's 3 or 4): what
    /// [`Handler::read_env_into`] gives at body `body`'s place. A backend whose rows hold each
    /// body apart overrides this to read the one body (the tracking command's groups need the
    /// anchor's pose, not all 31 bodies').
    fn read_env_body_into(&self, env: usize, field: Field, body: usize, out: &mut [f64]) {
        read_one_body_of_the_row(self, env, field, body, out);
    }
    /// Reads one env's [`Field::BodyVel`] and [`Field::BodyAngVel`] together; a backend that
    /// derives both from one computation per body overrides this to do it once.
    fn read_body_velocities_into(&self, env: usize, linear: &mut [f64], angular: &mut [f64]) {
        self.read_env_into(env, Field::BodyVel, linear);
        self.read_env_into(env, Field::BodyAngVel, angular);
    }
    /// Total mass of the robot (nominal model, kg).
    fn total_mass(&self) -> f64;
    /// Position range (lower, upper) of each of the 29 joints, from the compiled model.
    fn joint_ranges(&self) -> [(f64, f64); NUM_JOINTS];
    /// Turns on (or off) logging of every physics substep's torques per env, restarted at each
    /// reset: replays of identical physics in other simulators need it. Not every backend can.
    fn set_torque_logging(&mut self, on: bool) -> Result<(), SimError>;
    /// The torques logged for one env since its last reset (substeps × 29).
    fn torque_log(&self, env: usize) -> Option<&[f64]>;
    /// What drove those torques, logged with them: the gains kp (29) and kd (29) in force at
    /// the first control step after the reset, then per control step the PD targets (29, rad)
    /// and the feed-forward torques (29, N·m). A replay that runs its own PD loop (MuJoCo Warp
    /// on the arena's workload, bench/gpu_throughput.py) needs these rather than the torques.
    fn command_log(&self, _env: usize) -> Option<&[f64]> {
        None
    }
    /// The process that runs the physics when it is not this one (the GPU worker), for
    /// monitoring and fault tests.
    fn worker_pid(&self) -> Option<u32> {
        None
    }
    /// Where the running worker's start-up went (the GPU worker's phases in seconds, as its
    /// ready line and this side timed them, and `spare_worker`: whether it was a spare started
    /// ahead), or `None` for a backend without a worker or before one runs.
    fn worker_startup(&self) -> Option<&serde_json::Map<String, serde_json::Value>> {
        None
    }
    /// Where the worker's commands spent their time, summed since it started (the GPU
    /// worker's `stats` reply: command counts and seconds per phase), or `None` for a backend
    /// without a worker or before one runs.
    fn worker_timings(&mut self) -> Result<Option<serde_json::Map<String, serde_json::Value>>, SimError> {
        Ok(None)
    }

    /// Reads `field` for all envs into `out` (N × field.width()).
    fn read_batch(&self, field: Field, out: &mut [f64]) -> Result<(), SimError> {
        let w = batch_width(self.num_envs(), field, out.len())?;
        for (env, row) in out.chunks_mut(w).enumerate() {
            self.read_env_into(env, field, row);
        }
        Ok(())
    }

    /// The same in single precision: the layout observation batches and remote agents use.
    fn read_batch_f32(&self, field: Field, out: &mut [f32]) -> Result<(), SimError> {
        let w = batch_width(self.num_envs(), field, out.len())?;
        let mut wide = [0.0f64; MAX_FIELD_WIDTH];
        for (env, row) in out.chunks_mut(w).enumerate() {
            self.read_env_into(env, field, &mut wide[..w]);
            for (o, v) in row.iter_mut().zip(&wide[..w]) {
                *o = *v as f32;
            }
        }
        Ok(())
    }

    /// Every env's state as a [`RobotState`].
    fn get_states(&self) -> Vec<RobotState> {
        (0..self.num_envs()).map(|env| robot_state(self, env)).collect()
    }

    /// Writes root and joint state (and targets) of every env; body entries are derived from
    /// those and are ignored, as is `dof_torque` (computed by the PD loop). Every joint must be
    /// named in `dof_pos` and `dof_vel`; `dof_pos_target` entries that are missing keep the
    /// joint's position as target.
    fn set_states(&mut self, states: &[RobotState]) -> Result<(), SimError> {
        if states.len() != self.num_envs() {
            return Err(SimError::Config(format!(
                "set_states needs {} states, got {}",
                self.num_envs(),
                states.len()
            )));
        }
        for (env, s) in states.iter().enumerate() {
            let mut qpos = [0.0; NQ];
            let mut qvel = [0.0; NV];
            qpos[..3].copy_from_slice(&s.pos);
            qpos[3..7].copy_from_slice(&math::quat_normalize(&s.rot));
            qvel[..3].copy_from_slice(&s.vel);
            qvel[3..6].copy_from_slice(&math::rotate_inv(&qpos[3..7].try_into().expect("4"), &s.ang_vel));
            for (j, name) in JOINT_NAMES.iter().enumerate() {
                let get = |m: &BTreeMap<String, f64>, what: &str| {
                    m.get(*name)
                        .copied()
                        .ok_or_else(|| SimError::Config(format!("env {env}: {what} has no entry for joint {name}")))
                };
                qpos[7 + j] = get(&s.dof_pos, "dof_pos")?;
                qvel[6 + j] = get(&s.dof_vel, "dof_vel")?;
            }
            self.set_qpos_qvel(env, &qpos, &qvel)?;
            let mut targets = [0.0; NUM_JOINTS];
            for (j, name) in JOINT_NAMES.iter().enumerate() {
                targets[j] = s.dof_pos_target.get(*name).copied().unwrap_or(qpos[7 + j]);
            }
            self.set_joint_targets(env, &targets)?;
        }
        self.sync()
    }
}

/// The worker pool for `threads` threads (0 = rayon's default); `None` for one thread, where
/// work runs inline (handing every step to a single pool thread costs two context switches).
pub(crate) fn worker_pool(threads: usize) -> Result<Option<rayon::ThreadPool>, SimError> {
    let threads = if threads == 0 {
        rayon::current_num_threads()
    } else {
        threads
    };
    if threads <= 1 {
        return Ok(None);
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map(Some)
        .map_err(|e| SimError::Config(format!("thread pool: {e}")))
}

/// An env index must name one of `num_envs` envs.
pub(crate) fn check_env(env: usize, num_envs: usize) -> Result<(), SimError> {
    if env >= num_envs {
        return Err(SimError::Config(format!("env {env} out of range (have {num_envs})")));
    }
    Ok(())
}

/// Row width of `field`, after checking that a batch buffer of `len` values fits `num_envs` envs.
pub(crate) fn batch_width(num_envs: usize, field: Field, len: usize) -> Result<usize, SimError> {
    let w = field.width();
    if len != num_envs * w {
        return Err(SimError::Config(format!(
            "{field:?} needs {} values, buffer has {len}",
            num_envs * w
        )));
    }
    Ok(w)
}

/// The head is a virtual body on the torso (BFM-Zero's `head_link`): its position from the
/// torso's pose (world frame).
pub(crate) fn head_pos(torso_pos: &Vec3, torso_rot: &Quat) -> Vec3 {
    math::add(torso_pos, &math::rotate(torso_rot, &HEAD_OFFSET))
}

/// The head's linear velocity from the torso's (at its centre of mass, and angular). It uses
/// the unrotated offset in ω × r (BFM_ZERO_FACTS §2.3 quirk).
pub(crate) fn head_vel(torso_vel: &Vec3, torso_ang_vel: &Vec3) -> Vec3 {
    math::add(torso_vel, &math::cross3(torso_ang_vel, &HEAD_OFFSET))
}

fn named(values: &[f64]) -> BTreeMap<String, f64> {
    JOINT_NAMES
        .iter()
        .zip(values)
        .map(|(n, v)| (n.to_string(), *v))
        .collect()
}

/// One env's [`RobotState`], read through the per-env accessor.
fn robot_state<H: Handler + ?Sized>(handler: &H, env: usize) -> RobotState {
    let mut qpos = [0.0; NQ];
    let mut qvel = [0.0; NV];
    let mut target = [0.0; NUM_JOINTS];
    let mut torque = [0.0; NUM_JOINTS];
    let mut bp = [0.0; 3 * NUM_BODIES_EXT];
    let mut br = [0.0; 4 * NUM_BODIES_EXT];
    let mut bv = [0.0; 3 * NUM_BODIES_EXT];
    let mut bw = [0.0; 3 * NUM_BODIES_EXT];
    let mut root = [0.0; 3];
    handler.read_env_into(env, Field::Qpos, &mut qpos);
    handler.read_env_into(env, Field::Qvel, &mut qvel);
    handler.read_env_into(env, Field::DofPosTarget, &mut target);
    handler.read_env_into(env, Field::DofTorque, &mut torque);
    handler.read_env_into(env, Field::BodyPos, &mut bp);
    handler.read_env_into(env, Field::BodyRot, &mut br);
    handler.read_env_into(env, Field::BodyVel, &mut bv);
    handler.read_env_into(env, Field::BodyAngVel, &mut bw);
    handler.read_env_into(env, Field::RootAngVel, &mut root);
    let names = BODY_NAMES.iter().copied().chain(std::iter::once(HEAD_NAME));
    let bodies = names
        .enumerate()
        .map(|(b, n)| {
            let s = BodyState {
                pos: bp[3 * b..3 * b + 3].try_into().expect("3"),
                rot: br[4 * b..4 * b + 4].try_into().expect("4"),
                vel: bv[3 * b..3 * b + 3].try_into().expect("3"),
                ang_vel: bw[3 * b..3 * b + 3].try_into().expect("3"),
            };
            (n.to_string(), s)
        })
        .collect();
    RobotState {
        pos: qpos[..3].try_into().expect("3"),
        rot: qpos[3..7].try_into().expect("4"),
        vel: qvel[..3].try_into().expect("3"),
        ang_vel: root,
        dof_pos: named(&qpos[7..]),
        dof_vel: named(&qvel[6..]),
        dof_pos_target: named(&target),
        dof_torque: named(&torque),
        bodies,
    }
}
