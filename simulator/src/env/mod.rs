//! Layer 2: the batched TrackingEnv. Each env tracks one reference motion from a start time,
//! with its own seed and DR level; `step` applies N normalised actions, returns the
//! observation batch and per-env info, and records the trajectory into buffers preallocated
//! at reset.

use crate::dr::{self, DrDraw, DrLevel};
use crate::handler::{Handler, NQ, NV};
use crate::motion::{MotionLibrary, MotionState};
use crate::observation::{HISTORY_ACTOR_DIM, History, HistoryTiming, LAST_ACTION_DIM, PRIVILEGED_STATE_DIM, STATE_DIM};
use crate::robot::{NUM_BODIES_EXT, RobotConfig};
use crate::{CONTROL_DT, SimError};
use arena_data::NUM_JOINTS;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use std::sync::Arc;
use std::time::Instant;

mod command;
mod recording;
mod refresh;
mod types;

pub use types::*;

use command::{CommandContext, CommandItem, Prepared, joint_command_error};
use refresh::{EnvItem, ObsRows, RefreshContext, RefreshScratch};

/// Actions are clipped to this range after ×5 (BFM_ZERO_FACTS §1.3).
pub const ACTION_CLIP: f64 = 5.0;
/// Multiplier of the action after clipping: target offset = a5 · 0.25 · effort / kp.
pub const ACTION_SCALE: f64 = 0.25;
const BODY_W: usize = 3 * NUM_BODIES_EXT;
/// Stream id mixed into the episode seed for observation noise and pushes (DR draws use the
/// seed itself), so the two never share random numbers.
const RUNTIME_STREAM: u64 = 0x9E37_79B9_7F4A_7C15;

/// Per-env episode bookkeeping.
struct Slot {
    assignment: Option<EpisodeAssignment>,
    status: EpisodeStatus,
    step: usize,
    draw: DrDraw,
    rng: ChaCha8Rng,
    next_push_step: usize,
    defaults: [f64; NUM_JOINTS],
    last_a5: [f64; NUM_JOINTS],
    /// The command (PD targets, then feed-forward torques) waiting one step under a control delay.
    pending_command: [f64; 2 * NUM_JOINTS],
    history: History,
    trajectory: Trajectory,
    /// The row the last refresh read, until it is appended to `trajectory`.
    pending: recording::PendingRow,
}

/// Wall time a [`TrackingEnv`] has spent in each part of its work since it was made: the
/// breakdown of an evaluation's stepping (`arena serve` logs it per lane, bench/gpu_eval_scale.py
/// prints it).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EnvTimings {
    /// Resets: DR draws and reference states written to the backend, then its sync (on the GPU
    /// backend: the worker's params, `mj_setConst` per env and reset).
    pub reset_s: f64,
    /// The backend's control step (for the GPU backend, the round trip to the worker).
    pub physics_s: f64,
    /// Observations, infos and trajectory recording after steps and resets, and the history
    /// rows written while the backend steps (`write_rows_ahead`).
    pub refresh_s: f64,
    /// Commands: each env's action checked and turned into its targets (and feed-forward
    /// torques and pushes), then handed to the backend, before its step.
    pub command_s: f64,
    /// Recorded rows appended during the next step, while the backend simulates it
    /// ([`TrackingEnv::record_behind_physics`]; on the GPU backend this overlaps `physics_s`).
    pub record_s: f64,
    pub steps: u64,
    pub resets: u64,
}

/// Trajectory rows reserved per episode at its reset (a minute at 50 Hz); see `reset_one`.
const MAX_RESERVED_ROWS: usize = 3001;
/// How many envs ahead a refresh asks for an env's memory ([`RefreshAhead`]).
const PREFETCH_AHEAD: usize = 2;

/// Where a refresh finds each env's memory, as addresses for prefetch hints only (never
/// dereferenced; plain numbers, so the per-env closure stays `Sync`): its slot, its observation
/// rows and, through the handler, its simulator state.
struct RefreshAhead {
    slots: usize,
    state: usize,
    privileged: usize,
    history: usize,
    privileged_bytes: usize,
    history_bytes: usize,
    /// Whether the refresh writes the slot's recorded row.
    recording: bool,
    envs: usize,
}

impl RefreshAhead {
    /// (offset, bytes) of the slot fields a refresh reads when nothing is recorded (the
    /// recording's fields are most of a slot).
    const SLOT_FIELDS: [(usize, usize); 8] = [
        (
            std::mem::offset_of!(Slot, assignment),
            std::mem::size_of::<Option<EpisodeAssignment>>(),
        ),
        (std::mem::offset_of!(Slot, status), std::mem::size_of::<EpisodeStatus>()),
        (std::mem::offset_of!(Slot, step), 8),
        (
            std::mem::offset_of!(Slot, draw) + std::mem::offset_of!(DrDraw, obs_noise),
            1,
        ),
        (std::mem::offset_of!(Slot, rng), std::mem::size_of::<ChaCha8Rng>()),
        (std::mem::offset_of!(Slot, defaults), 8 * NUM_JOINTS),
        (std::mem::offset_of!(Slot, last_a5), 8 * NUM_JOINTS),
        (std::mem::offset_of!(Slot, history), std::mem::size_of::<History>()),
    ];

    fn prefetch(&self, handler: &dyn Handler, e: usize) {
        if e >= self.envs {
            return;
        }
        handler.prefetch_env(e);
        let slot = self.slots + e * std::mem::size_of::<Slot>();
        if self.recording {
            crate::prefetch::for_read(slot as *const u8, std::mem::size_of::<Slot>());
        } else {
            for (offset, bytes) in Self::SLOT_FIELDS {
                crate::prefetch::for_read((slot + offset) as *const u8, bytes);
            }
        }
        crate::prefetch::for_write((self.state + e * 4 * STATE_DIM) as *const u8, 4 * STATE_DIM);
        let (p, h) = (self.privileged_bytes, self.history_bytes);
        crate::prefetch::for_write((self.privileged + e * p) as *const u8, p);
        crate::prefetch::for_write((self.history + e * h) as *const u8, h);
    }
}

/// Where a command's preparation finds an env's slot, for prefetch hints only (see
/// [`RefreshAhead`]): the lines of the fields `CommandContext::prepare` reads, scattered over a
/// slot of several kB (a cache miss each at 4096 envs, where the slots no longer fit in cache).
struct CommandAhead {
    slots: usize,
    envs: usize,
}

impl CommandAhead {
    /// (offset, bytes) of the fields a command reads (the rng only when a push is due, rarely).
    const FIELDS: [(usize, usize); 6] = [
        (std::mem::offset_of!(Slot, status), std::mem::size_of::<EpisodeStatus>()),
        (std::mem::offset_of!(Slot, step), 8),
        (std::mem::offset_of!(Slot, next_push_step), 8),
        (std::mem::offset_of!(Slot, defaults), 8 * NUM_JOINTS),
        (std::mem::offset_of!(Slot, last_a5), 8 * NUM_JOINTS),
        (
            std::mem::offset_of!(Slot, draw) + std::mem::offset_of!(DrDraw, control_delay),
            8,
        ),
    ];

    fn prefetch(&self, e: usize, delayed: bool) {
        if e >= self.envs {
            return;
        }
        let slot = self.slots + e * std::mem::size_of::<Slot>();
        for (offset, bytes) in Self::FIELDS {
            crate::prefetch::for_write((slot + offset) as *const u8, bytes);
        }
        if delayed {
            let offset = std::mem::offset_of!(Slot, pending_command);
            crate::prefetch::for_write((slot + offset) as *const u8, 16 * NUM_JOINTS);
        }
    }
}

pub struct TrackingEnv {
    timings: EnvTimings,
    config: TrackingEnvConfig,
    handler: Box<dyn Handler>,
    library: Arc<MotionLibrary>,
    slots: Vec<Slot>,
    obs: ObservationBatch,
    infos: Vec<StepInfo>,
    targets: Vec<f64>,
    /// The feed-forward torques of the joint-position mode's commands (N × 29).
    feedforward: Vec<f64>,
    /// Per-env flags of the envs the current reset/step touches (reused, no per-step allocation).
    selected: Vec<bool>,
    /// Per-env flags of the envs whose command this step applies (reused like `selected`).
    commanded: Vec<bool>,
    /// Whether running envs' recorded rows are appended during the next step (see
    /// [`TrackingEnv::record_behind_physics`]).
    record_behind: bool,
    /// Whether some env holds a row not yet appended.
    rows_pending: bool,
}

impl std::fmt::Debug for TrackingEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackingEnv")
            .field("num_envs", &self.slots.len())
            .finish()
    }
}

impl TrackingEnv {
    pub fn new(config: TrackingEnvConfig, library: Arc<MotionLibrary>) -> Result<Self, SimError> {
        if config.num_envs == 0 {
            return Err(SimError::Config("num_envs must be at least 1".into()));
        }
        let handler = config
            .backend
            .create(config.robot.clone(), config.num_envs, config.threads)?;
        Self::with_handler(config, library, handler)
    }

    /// A new env on a simulator an earlier env gave back ([`TrackingEnv::into_handler`]): made
    /// for the same robot and number of envs on the backend and threads `config` names (the
    /// caller keys it so; a GPU worker taken over saves its start-up). Every env starts idle,
    /// and each reset sets its env's physical parameters and state, so nothing of the earlier
    /// env's episodes carries over.
    pub fn with_handler(
        config: TrackingEnvConfig,
        library: Arc<MotionLibrary>,
        handler: Box<dyn Handler>,
    ) -> Result<Self, SimError> {
        let n = config.num_envs;
        if n == 0 {
            return Err(SimError::Config("num_envs must be at least 1".into()));
        }
        if handler.num_envs() != n || handler.config() != &config.robot {
            return Err(SimError::Config(format!(
                "the simulator handed over ({}, {} envs) is not one for {n} envs of this robot",
                handler.describe(),
                handler.num_envs()
            )));
        }
        if !handler.is_reusable() {
            return Err(SimError::Config(format!(
                "the simulator handed over ({}) cannot step any more",
                handler.describe()
            )));
        }
        if config.action_mode == ActionMode::JointPosition && !handler.supports_feedforward() {
            return Err(SimError::Config(format!(
                "the {} backend has no feed-forward torques: joint-position benchmarks run on the cpu backend",
                config.backend.name()
            )));
        }
        let slots = (0..n)
            .map(|_| Slot {
                assignment: None,
                status: EpisodeStatus::Idle,
                step: 0,
                draw: dr::draw(DrLevel::L0, 0),
                rng: ChaCha8Rng::seed_from_u64(0),
                next_push_step: usize::MAX,
                defaults: config.robot.default_pose,
                last_a5: [0.0; NUM_JOINTS],
                pending_command: [0.0; 2 * NUM_JOINTS],
                history: History::default(),
                trajectory: Trajectory::default(),
                pending: Default::default(),
            })
            .collect();
        let mut env = Self {
            timings: EnvTimings::default(),
            handler,
            library,
            slots,
            obs: ObservationBatch::new(n),
            infos: vec![
                StepInfo {
                    step: 0,
                    motion_time: 0.0,
                    status: EpisodeStatus::Idle,
                };
                n
            ],
            targets: vec![0.0; n * NUM_JOINTS],
            feedforward: vec![0.0; n * NUM_JOINTS],
            selected: vec![false; n],
            commanded: vec![false; n],
            record_behind: false,
            rows_pending: false,
            config,
        };
        for e in 0..n {
            env.handler.mark_idle(e);
        }
        Ok(env)
    }

    /// Gives the simulator back, for a later env of the same shape ([`TrackingEnv::with_handler`]).
    pub fn into_handler(self) -> Box<dyn Handler> {
        self.handler
    }

    pub fn num_envs(&self) -> usize {
        self.slots.len()
    }

    pub fn library(&self) -> &MotionLibrary {
        &self.library
    }

    /// The robot the envs simulate (its default pose is the `q0` of every `state` row).
    pub fn robot(&self) -> &RobotConfig {
        &self.config.robot
    }

    /// Logs every physics substep's torques per env (see [`Handler::set_torque_logging`]).
    pub fn set_torque_logging(&mut self, on: bool) -> Result<(), SimError> {
        self.handler.set_torque_logging(on)
    }

    pub fn handler(&self) -> &dyn Handler {
        self.handler.as_ref()
    }

    /// Why one env's action row (29 targets, then 29 feed-forward torques; missing torques are
    /// zero) cannot be applied in the joint-position mode, naming the joint, or `None` when it
    /// can (and always in the normalized mode). `step` fails such an env with this reason; a
    /// server checks first to report it in the protocol's form.
    pub fn joint_command_error(&self, action: &[f32]) -> Option<String> {
        if self.config.action_mode != ActionMode::JointPosition {
            return None;
        }
        let mut row = [0.0f32; 2 * NUM_JOINTS];
        let n = action.len().min(row.len());
        row[..n].copy_from_slice(&action[..n]);
        joint_command_error(&row, &self.handler.joint_ranges(), &self.config.robot.effort)
    }

    /// Where this env's time went so far.
    pub fn timings(&self) -> EnvTimings {
        self.timings
    }

    pub fn observations(&self) -> &ObservationBatch {
        &self.obs
    }

    pub fn infos(&self) -> &[StepInfo] {
        &self.infos
    }

    /// An env's recording. Complete for an env that is not running; for a running env under
    /// [`TrackingEnv::record_behind_physics`] the last row is added by the next step, reset,
    /// [`TrackingEnv::stop`] or [`TrackingEnv::flush_recording`].
    pub fn trajectory(&self, env: usize) -> &Trajectory {
        &self.slots[env].trajectory
    }

    /// Moves an episode's recording out, complete (the env's next reset records into a new
    /// one): cheaper than cloning thousands of them when a batch ends together.
    pub fn take_trajectory(&mut self, env: usize) -> Trajectory {
        self.flush_env(env);
        std::mem::take(&mut self.slots[env].trajectory)
    }

    /// Appends a running env's recorded row during the env's next step rather than in the
    /// refresh that reads it, so that on a backend that simulates elsewhere (the GPU worker)
    /// the recording's cost (the rows' fresh memory, the reference's poses) overlaps the
    /// physics instead of adding to each control step. The recorded values are the same; only
    /// [`TrackingEnv::trajectory`] of a running env lags a row behind until then. Off by
    /// default.
    pub fn record_behind_physics(&mut self, on: bool) {
        if !on {
            self.flush_recording();
        }
        self.record_behind = on;
    }

    /// Appends every recorded row still waiting (see [`TrackingEnv::record_behind_physics`]).
    pub fn flush_recording(&mut self) {
        if !std::mem::take(&mut self.rows_pending) {
            return;
        }
        let started = Instant::now();
        let (library, robot) = (&self.library, &self.config.robot);
        let append = |slot: &mut Slot| {
            if let (true, Some(a)) = (slot.pending.filled, slot.assignment) {
                slot.pending
                    .append(&mut slot.trajectory, &library.motions[a.motion], robot);
            }
        };
        match self.handler.pool() {
            Some(pool) => pool.install(|| self.slots.par_iter_mut().for_each(append)),
            None => self.slots.iter_mut().for_each(append),
        }
        self.timings.record_s += started.elapsed().as_secs_f64();
    }

    /// Appends env `env`'s waiting row, if any.
    fn flush_env(&mut self, env: usize) {
        if let Some(slot) = self.slots.get_mut(env)
            && let (true, Some(a)) = (slot.pending.filled, slot.assignment)
        {
            slot.pending.append(
                &mut slot.trajectory,
                &self.library.motions[a.motion],
                &self.config.robot,
            );
        }
    }

    /// Resets the listed envs to the reference state at their start time (root pose and
    /// velocities, joint positions and velocities), with their DR draw. Other envs keep going.
    /// Every assignment is validated before any env changes, so a bad one resets nothing.
    pub fn reset(&mut self, assignments: &[(usize, EpisodeAssignment)]) -> Result<&ObservationBatch, SimError> {
        let starts: Vec<(usize, EpisodeAssignment, Option<LieDown>)> =
            assignments.iter().map(|&(e, a)| (e, a, None)).collect();
        self.reset_with_starts(&starts)
    }

    /// [`TrackingEnv::reset`] for episodes that must fail alone: the envs that cannot start are
    /// returned with the reason, and the others start. It tries one batched reset first (on the
    /// GPU backend every reset is a round trip to the worker). When that is refused, each
    /// assignment is retried on its own to find the bad ones — except when the simulator itself
    /// failed ([`SimError::Backend`]: a GPU worker that cannot start), which fails every env of
    /// the call, since retrying one by one would start the worker once per env.
    pub fn reset_isolating_failures(&mut self, assignments: &[(usize, EpisodeAssignment)]) -> Vec<(usize, SimError)> {
        if assignments.is_empty() {
            return Vec::new();
        }
        match self.reset(assignments) {
            Ok(_) => Vec::new(),
            Err(SimError::Backend(why)) => assignments
                .iter()
                .map(|&(env, _)| (env, SimError::Backend(why.clone())))
                .collect(),
            Err(_) => assignments
                .iter()
                .filter_map(|&(env, a)| self.reset(&[(env, a)]).err().map(|e| (env, e)))
                .collect(),
        }
    }

    /// [`TrackingEnv::reset`] where some envs start lying down instead of in the reference
    /// pose (BFM-Zero's training resets, §4.4): the reference state with the root at
    /// [`LieDown::HEIGHT`] and its rotation turned by ±90° about world x.
    pub fn reset_with_starts(
        &mut self,
        starts: &[(usize, EpisodeAssignment, Option<LieDown>)],
    ) -> Result<&ObservationBatch, SimError> {
        self.reset_batch(starts, &[])
    }

    /// Replaces the start state of envs that were just reset and have not stepped yet (a
    /// trainer's perturbed reference-state initialisation: pose and velocity noise around the
    /// reference). Every state is checked before any env changes; the observations are rebuilt.
    pub fn set_start_states(
        &mut self,
        states: &[(usize, [f64; NQ], [f64; NV])],
    ) -> Result<&ObservationBatch, SimError> {
        self.flush_recording();
        for (env, qpos, qvel) in states {
            let slot = self
                .slots
                .get(*env)
                .ok_or_else(|| SimError::Config(format!("env {env} out of range (have {})", self.slots.len())))?;
            if slot.status != EpisodeStatus::Running || slot.step != 0 {
                return Err(SimError::Config(format!(
                    "env {env}: a start state can replace only a reset that has not stepped"
                )));
            }
            crate::handler::check_state(qpos, qvel)?;
        }
        self.selected.fill(false);
        for (env, qpos, qvel) in states {
            self.put_start_state(*env, qpos, qvel)?;
        }
        self.handler.sync()?;
        self.refresh(true);
        Ok(&self.obs)
    }

    /// [`TrackingEnv::reset`] of `assignments`, then [`TrackingEnv::set_start_states`] of
    /// `states` (each for an env among the assignments), in one: the same state with one sync of
    /// the simulator instead of two (on the GPU backend one round trip to the worker, whose
    /// reset runs the forward dynamics of every world). Everything is checked before any env
    /// changes.
    pub fn reset_with_start_states(
        &mut self,
        assignments: &[(usize, EpisodeAssignment)],
        states: &[(usize, [f64; NQ], [f64; NV])],
    ) -> Result<&ObservationBatch, SimError> {
        let starts: Vec<(usize, EpisodeAssignment, Option<LieDown>)> =
            assignments.iter().map(|&(e, a)| (e, a, None)).collect();
        self.reset_batch(&starts, states)
    }

    /// Every reset: checks all starts and start states (each for an env among the starts)
    /// before any env changes, resets the envs, puts the start states, syncs the simulator
    /// once and rebuilds the reset envs' observations.
    fn reset_batch(
        &mut self,
        starts: &[(usize, EpisodeAssignment, Option<LieDown>)],
        states: &[(usize, [f64; NQ], [f64; NV])],
    ) -> Result<&ObservationBatch, SimError> {
        self.flush_recording();
        for (env, a, _) in starts {
            self.validate(*env, a)?;
        }
        if !states.is_empty() {
            let mut resetting = vec![false; self.slots.len()];
            for (env, _, _) in starts {
                resetting[*env] = true;
            }
            for (env, qpos, qvel) in states {
                if !resetting.get(*env).copied().unwrap_or(false) {
                    return Err(SimError::Config(format!(
                        "env {env}: a start state needs a reset of that env in the same call"
                    )));
                }
                crate::handler::check_state(qpos, qvel)?;
            }
        }
        let started = Instant::now();
        // Each env's start state (the last given for it), put in its reset: setting the
        // reference state first would run the backend's forward dynamics twice.
        let mut state_of: Vec<Option<usize>> = Vec::new();
        if !states.is_empty() {
            state_of.resize(self.slots.len(), None);
            for (k, (env, _, _)) in states.iter().enumerate() {
                state_of[*env] = Some(k);
            }
        }
        for &(env, a, lie) in starts {
            let state = state_of
                .get(env)
                .copied()
                .flatten()
                .map(|k| (&states[k].1, &states[k].2));
            self.reset_one(env, a, lie, state)?;
        }
        self.handler.sync()?;
        self.timings.reset_s += started.elapsed().as_secs_f64();
        self.timings.resets += starts.len() as u64;
        self.selected.fill(false);
        for (env, _, _) in starts {
            self.selected[*env] = true;
        }
        self.refresh(true);
        Ok(&self.obs)
    }

    /// Puts a checked start state into an env that was just reset: the handler's state, the
    /// held joint targets, and a fresh history and trajectory.
    fn put_start_state(&mut self, env: usize, qpos: &[f64; NQ], qvel: &[f64; NV]) -> Result<(), SimError> {
        self.handler.set_qpos_qvel(env, qpos, qvel)?;
        let slot = &mut self.slots[env];
        if self.config.action_mode == ActionMode::JointPosition {
            slot.pending_command[..NUM_JOINTS].copy_from_slice(&qpos[7..]);
        }
        slot.history.clear();
        if self.config.record
            && let Some(a) = slot.assignment
        {
            let length = self.library.motions[a.motion].length_s;
            slot.trajectory
                .reset(&a, ((length - a.start_time) / CONTROL_DT).ceil() as usize + 1);
        }
        self.selected[env] = true;
        Ok(())
    }

    fn validate(&self, env: usize, a: &EpisodeAssignment) -> Result<(), SimError> {
        if env >= self.slots.len() {
            return Err(SimError::Config(format!(
                "env {env} out of range (have {})",
                self.slots.len()
            )));
        }
        let motion = self.library.motions.get(a.motion).ok_or_else(|| {
            SimError::Config(format!(
                "motion {} out of range (library has {})",
                a.motion,
                self.library.len()
            ))
        })?;
        if !(a.start_time.is_finite() && a.start_time >= 0.0 && a.start_time < motion.length_s) {
            return Err(SimError::Config(format!(
                "start time {} outside motion {} (length {:.3} s)",
                a.start_time, motion.name, motion.length_s
            )));
        }
        Ok(())
    }

    /// Resets one env to `a`'s start: the reference state (turned to lie down with `lie`), or
    /// `state` (qpos, qvel) where one is given.
    fn reset_one(
        &mut self,
        env: usize,
        a: EpisodeAssignment,
        lie: Option<LieDown>,
        state: Option<(&[f64; NQ], &[f64; NV])>,
    ) -> Result<(), SimError> {
        let motion = &self.library.motions[a.motion];
        let mut draw = dr::draw(a.dr_level, a.seed);
        if !self.config.dr_gains_and_delay {
            draw = draw.without_gains_and_delay();
        }
        self.handler.set_physics_params(env, &draw.physics)?;
        let slot = &mut self.slots[env];
        let mut reference = MotionState::default();
        motion.state_at(a.start_time, &mut reference);
        let mut qpos = reference.qpos;
        if let Some(lie) = lie {
            let turn = crate::math::quat_from_axis_angle(&[1.0, 0.0, 0.0], lie.sign() * std::f64::consts::FRAC_PI_2);
            let rot: crate::math::Quat = qpos[3..7].try_into().expect("4");
            qpos[2] = LieDown::HEIGHT;
            qpos[3..7].copy_from_slice(&crate::math::quat_normalize(&crate::math::quat_mul(&turn, &rot)));
        }
        if let Some((start_qpos, start_qvel)) = state {
            qpos = *start_qpos;
            self.handler.set_qpos_qvel(env, &qpos, start_qvel)?;
        } else {
            self.handler.set_qpos_qvel(env, &qpos, &reference.qvel())?;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(a.seed ^ RUNTIME_STREAM);
        slot.next_push_step = if draw.pushes {
            (dr::next_push_interval_s(&mut rng) / CONTROL_DT).round() as usize
        } else {
            usize::MAX
        };
        for j in 0..NUM_JOINTS {
            slot.defaults[j] = self.config.robot.default_pose[j] + draw.joint_offset[j];
        }
        slot.rng = rng;
        slot.draw = draw;
        slot.assignment = Some(a);
        slot.status = EpisodeStatus::Running;
        slot.step = 0;
        slot.last_a5 = [0.0; NUM_JOINTS];
        // What a delayed first step executes: a = 0 (the default pose) in the normalized mode,
        // holding the start pose in the joint-position mode; no feed-forward torque.
        slot.pending_command = [0.0; 2 * NUM_JOINTS];
        match self.config.action_mode {
            ActionMode::Normalized => slot.pending_command[..NUM_JOINTS].copy_from_slice(&slot.defaults),
            ActionMode::JointPosition => slot.pending_command[..NUM_JOINTS].copy_from_slice(&qpos[7..]),
        }
        slot.history.clear();
        // Reserved for the rest of the motion, up to a minute: the env does not know the
        // episode's window, and a short window at the start of an hour-long clip would reserve
        // gigabytes per env (address space, which strict overcommit refuses). Longer episodes
        // grow their rows as they go.
        let rows = (((motion.length_s - a.start_time) / CONTROL_DT).ceil() as usize + 1).min(MAX_RESERVED_ROWS);
        if self.config.record {
            slot.trajectory.reset(&a, rows);
        }
        Ok(())
    }

    /// Values per env in the action batch [`TrackingEnv::step`] takes (29 normalised values, or
    /// 29 targets and 29 feed-forward torques in the joint-position mode).
    pub fn action_width(&self) -> usize {
        self.config.action_mode.width()
    }

    /// How this env's actions become PD targets (its config's).
    pub fn action_mode(&self) -> ActionMode {
        self.config.action_mode
    }

    /// Applies one action per env (N × [`TrackingEnv::action_width`]) and advances every running
    /// env by one control step. Normalized mode: values in [-1, 1] (beyond, the ×5 clip
    /// saturates). Joint-position mode: absolute targets (rad) within [`TARGET_RANGE_MARGIN`] of
    /// the joint's range and feed-forward torques within the effort limits.
    ///
    /// A wrong-sized action batch is an error (nothing is stepped). A non-finite or
    /// out-of-range action fails only its env ("non-finite action at step k", "action out of
    /// range at step k: ..."); nothing of it enters MuJoCo.
    pub fn step(&mut self, actions: &[f32]) -> Result<(&ObservationBatch, &[StepInfo]), SimError> {
        let n = self.slots.len();
        let width = self.action_width();
        if actions.len() != n * width {
            return Err(SimError::Config(format!(
                "actions must be {n}×{width} = {} values, got {}",
                n * width,
                actions.len()
            )));
        }
        let ranges = match self.config.action_mode {
            ActionMode::JointPosition => Some(self.handler.joint_ranges()),
            ActionMode::Normalized => None,
        };
        // Every env's command on the env's threads; then what needs the handler, in env order.
        let commands_started = Instant::now();
        let ctx = CommandContext {
            config: &self.config,
            ranges: ranges.as_ref(),
        };
        let ahead = CommandAhead {
            slots: self.slots.as_ptr() as usize,
            envs: self.slots.len(),
        };
        let (slots, targets, feedforward) = (&mut self.slots, &mut self.targets, &mut self.feedforward);
        let prepare = |(e, ((slot, (targets, feedforward)), a)): (usize, CommandItem<'_>)| {
            // Whether the env ahead has a control delay is in its slot, not read yet: this env's
            // stands in for it (a guess; the hint changes no value either way).
            ahead.prefetch(e + PREFETCH_AHEAD, slot.draw.control_delay > 0);
            ctx.prepare(slot, targets, feedforward, a)
        };
        let prepared: Vec<Prepared> = match self.handler.pool() {
            Some(pool) => pool.install(|| {
                slots
                    .par_iter_mut()
                    .zip(
                        targets
                            .par_chunks_mut(NUM_JOINTS)
                            .zip(feedforward.par_chunks_mut(NUM_JOINTS)),
                    )
                    .zip(actions.par_chunks_exact(width))
                    .enumerate()
                    .map(prepare)
                    .collect()
            }),
            None => slots
                .iter_mut()
                .zip(targets.chunks_mut(NUM_JOINTS).zip(feedforward.chunks_mut(NUM_JOINTS)))
                .zip(actions.chunks_exact(width))
                .enumerate()
                .map(prepare)
                .collect(),
        };
        // Envs running before this step (every env with a command, or refused one) get stepped,
        // refreshed and their info updated. Read off `prepared`, not the slots: a pass over
        // 4096 slots of a few kB each costs a cache miss per env.
        let flags = self.selected.iter_mut().zip(&mut self.commanded);
        for ((env, p), (selected, commanded)) in prepared.into_iter().enumerate().zip(flags) {
            *selected = !matches!(p, Prepared::Idle);
            *commanded = false;
            match p {
                Prepared::Idle => {}
                Prepared::Failed(reason) => self.handler.mark_failed(env, reason),
                Prepared::Command { push } => {
                    *commanded = true;
                    if let Some((dv, dw)) = push {
                        self.handler.push_root(env, dv, dw)?;
                    }
                }
            }
        }
        if self.config.action_mode == ActionMode::JointPosition {
            // In one pass over the backend's rows, not a call per env.
            self.handler.set_feedforward_rows(&self.feedforward, &self.commanded)?;
        }
        self.timings.command_s += commands_started.elapsed().as_secs_f64();
        // The rows the last refresh left waiting are appended while the backend steps.
        let started = Instant::now();
        self.handler.step_begin(&self.targets)?;
        let begun = started.elapsed();
        self.write_rows_ahead();
        self.flush_recording();
        let started = Instant::now();
        let finished = self.handler.step_finish();
        self.timings.physics_s += (begun + started.elapsed()).as_secs_f64();
        finished?;
        self.timings.steps += 1;
        // Each running env's step count goes up in its refresh.
        self.refresh(false);
        // Finished episodes stop consuming physics until their env is reset.
        for e in (0..n).filter(|&e| self.selected[e]) {
            if matches!(self.infos[e].status, EpisodeStatus::Truncated | EpisodeStatus::Fell) {
                self.handler.mark_idle(e);
            }
        }
        Ok((&self.obs, &self.infos))
    }

    /// Writes, while the backend simulates the step, the observation rows that the step cannot
    /// change: the history frames from before it (all four under the training convention, the
    /// older three when the history includes the current frame; see
    /// [`History::write_older_after_push`]). The refresh after the step writes the rest. On the
    /// GPU worker this work overlaps the physics; counted with the refresh (`refresh_s`).
    fn write_rows_ahead(&mut self) {
        if !self.config.compute_history {
            return;
        }
        let started = Instant::now();
        let include_current = self.config.history == HistoryTiming::IncludeCurrent;
        let commanded = &self.commanded;
        // Only the envs with a command step. One whose step then fails in the physics gets its
        // row written again from the frames it completed (`refresh_env`).
        let write = |(e, (slot, row)): (usize, (&Slot, &mut [f32]))| match (commanded[e], include_current) {
            (false, _) => {}
            (true, true) => slot.history.write_older_after_push(row),
            (true, false) => slot.history.write(row),
        };
        let (slots, rows) = (&self.slots, &mut self.obs.history_actor);
        match self.handler.pool() {
            Some(pool) => pool.install(|| {
                slots
                    .par_iter()
                    .zip(rows.par_chunks_mut(HISTORY_ACTOR_DIM))
                    .enumerate()
                    .for_each(write)
            }),
            None => slots
                .iter()
                .zip(rows.chunks_mut(HISTORY_ACTOR_DIM))
                .enumerate()
                .for_each(write),
        }
        self.timings.refresh_s += started.elapsed().as_secs_f64();
    }

    /// Rebuilds observations, info and recordings of the envs flagged in `selected` (just reset
    /// when `after_reset`), reading each from the handler.
    fn refresh(&mut self, after_reset: bool) {
        let started = Instant::now();
        self.refresh_envs(after_reset);
        self.timings.refresh_s += started.elapsed().as_secs_f64();
    }

    fn refresh_envs(&mut self, after_reset: bool) {
        let selected = &self.selected;
        let ctx = RefreshContext {
            library: &self.library,
            config: &self.config,
            handler: self.handler.as_ref(),
            after_reset,
            record_behind: self.record_behind,
        };
        self.rows_pending |= self.record_behind && self.config.record;
        let obs = &mut self.obs;
        let ahead = RefreshAhead {
            slots: self.slots.as_ptr() as usize,
            state: obs.state.as_ptr() as usize,
            privileged: obs.privileged_state.as_ptr() as usize,
            history: obs.history_actor.as_ptr() as usize,
            privileged_bytes: if self.config.compute_privileged_state {
                4 * PRIVILEGED_STATE_DIM
            } else {
                0
            },
            // After a step, the training convention's history row was written ahead.
            history_bytes: if self.config.compute_history
                && (after_reset || self.config.history == HistoryTiming::IncludeCurrent)
            {
                4 * HISTORY_ACTOR_DIM
            } else {
                0
            },
            recording: self.config.record,
            envs: self.slots.len(),
        };
        let per_env =
            |scratch: &mut RefreshScratch,
             (e, (((((slot, info), state), privileged), last_action), history)): EnvItem<'_>| {
                if selected[e] {
                    ahead.prefetch(ctx.handler, e + PREFETCH_AHEAD);
                    let rows = ObsRows {
                        state,
                        privileged,
                        last_action,
                        history,
                    };
                    ctx.refresh_env(scratch, e, slot, info, rows);
                }
            };
        let (slots, infos) = (&mut self.slots, &mut self.infos);
        match self.handler.pool() {
            Some(pool) => pool.install(|| {
                slots
                    .par_iter_mut()
                    .zip(infos.par_iter_mut())
                    .zip(obs.state.par_chunks_mut(STATE_DIM))
                    .zip(obs.privileged_state.par_chunks_mut(PRIVILEGED_STATE_DIM))
                    .zip(obs.last_action.par_chunks_mut(LAST_ACTION_DIM))
                    .zip(obs.history_actor.par_chunks_mut(HISTORY_ACTOR_DIM))
                    .enumerate()
                    .for_each_init(RefreshScratch::default, per_env)
            }),
            None => {
                let mut scratch = RefreshScratch::default();
                slots
                    .iter_mut()
                    .zip(infos.iter_mut())
                    .zip(obs.state.chunks_mut(STATE_DIM))
                    .zip(obs.privileged_state.chunks_mut(PRIVILEGED_STATE_DIM))
                    .zip(obs.last_action.chunks_mut(LAST_ACTION_DIM))
                    .zip(obs.history_actor.chunks_mut(HISTORY_ACTOR_DIM))
                    .enumerate()
                    .for_each(|item| per_env(&mut scratch, item))
            }
        }
    }

    /// Where the simulator's worker spent its time since it started (see
    /// [`Handler::worker_timings`]); `None` on the CPU backend.
    pub fn worker_timings(&mut self) -> Result<Option<serde_json::Map<String, serde_json::Value>>, SimError> {
        self.handler.worker_timings()
    }

    /// Ends a running episode as truncated (its window is over before the motion is) and
    /// stops simulating the env until it is reset.
    pub fn stop(&mut self, env: usize) {
        self.flush_env(env);
        if let Some(slot) = self.slots.get_mut(env)
            && slot.status == EpisodeStatus::Running
        {
            slot.status = EpisodeStatus::Truncated;
            self.infos[env].status = EpisodeStatus::Truncated;
            self.handler.mark_idle(env);
        }
    }

    /// Statuses of all envs.
    pub fn statuses(&self) -> Vec<EpisodeStatus> {
        self.slots.iter().map(|s| s.status.clone()).collect()
    }

    /// The assignment an env is running (or last ran).
    pub fn assignment(&self, env: usize) -> Option<EpisodeAssignment> {
        self.slots[env].assignment
    }
}
