//! The CPU backend: one compiled G1 model, N environments, each with its own `MjData`, stepped
//! in parallel with rayon. Environments with nominal physics share one model; an environment
//! whose episode randomises masses, friction or CoM gets a private copy, so domain
//! randomisation never leaks between environments. Sharing matters for speed: with a copy per
//! env, 16 or more envs per thread spill the caches and MuJoCo itself runs about 10 % slower.
//!
//! Every environment is independent, so results are bit-for-bit identical whatever the thread
//! count and across runs.
//!
//! Each substep is MuJoCo's `mj_step` cut in its two documented halves: `mj_step2` (actuation,
//! constraint solve, integration) and then `mj_step1` (position and velocity stages of the new
//! state). Together they do exactly `mj_step`'s work, and the second half leaves the body poses
//! and velocities of the state the robot is in now, which observations read, so a control step
//! needs no separate kinematics refresh (that refresh cost about 2 % of a step). Contact forces
//! belong to the solve of the last substep: they are kept per body before its `mj_step1`.

use super::{
    DECIMATION, EnvHealth, Field, Handler, MAX_FIELD_WIDTH, NQ, NV, PhysicsParams, batch_width, check_env,
    check_feedforward, check_state, head_pos, head_vel, worker_pool,
};
use crate::SimError;
use crate::math::{self, Quat, Vec3};
use crate::robot::{BODY_NAMES, JOINT_NAMES, NUM_BODIES, NUM_BODIES_EXT, RobotConfig, TORSO_INDEX};
use arena_data::NUM_JOINTS;
use mujoco_rs::mujoco_c::mjtWarning;
use mujoco_rs::prelude::{MjData, MjModel, MjtObjBase};
use rayon::prelude::*;
use std::sync::Arc;

struct EnvSlot {
    /// The env's state, on the shared nominal model or on the env's own randomised copy.
    data: MjData<Arc<MjModel>>,
    target: [f64; NUM_JOINTS],
    torque: [f64; NUM_JOINTS],
    /// Feed-forward torques added before the effort clip (joint-position action mode).
    feedforward: [f64; NUM_JOINTS],
    kp: [f64; NUM_JOINTS],
    kd: [f64; NUM_JOINTS],
    health: EnvHealth,
    /// Whether `data` holds the position and velocity stages (`mj_step1`) of its current
    /// qpos/qvel, checked for divergence, so that the next substep can start at `mj_step2`.
    /// Anything that edits the state or the model clears it.
    stages_current: bool,
    /// Per-body contact forces of the last constraint solve (world frame, N), head row last.
    contact_force: [f64; 3 * NUM_BODIES_EXT],
    /// Per-substep torques since the last reset, when logging is on (benchmark replays).
    torque_log: Option<Vec<f64>>,
    /// The PD loop's inputs since the last reset, when logging is on ([`Handler::command_log`]).
    command_log: Option<Vec<f64>>,
}

/// Nominal model values that domain randomisation scales from.
struct Nominal {
    body_mass: Vec<f64>,
    body_ipos: Vec<[f64; 3]>,
    geom_friction: Vec<[f64; 3]>,
}

/// The batched MuJoCo handler.
pub struct MujocoHandler {
    config: RobotConfig,
    envs: Vec<EnvSlot>,
    nominal: Nominal,
    /// The compiled model, shared by every env with nominal physics.
    nominal_model: Arc<MjModel>,
    /// Where randomised models are made: parameters written to its model, then MuJoCo's
    /// `mj_setConst` (which needs a data to work in) derives the dependent constants.
    randomiser: MjData<Box<MjModel>>,
    /// Worker pool; `None` with one thread, where work runs inline (handing every step to a
    /// single pool thread costs two context switches per dispatch).
    pool: Option<rayon::ThreadPool>,
}

impl std::fmt::Debug for MujocoHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MujocoHandler")
            .field("num_envs", &self.envs.len())
            .finish()
    }
}

/// Checks that the compiled model has the layout the handler indexes by position: joints and
/// actuators in G1 order after the free joint, bodies in BFM-Zero order after the world.
pub(crate) fn check_layout(model: &MjModel) -> Result<(), SimError> {
    let m = model.ffi();
    if m.nq as usize != NQ || m.nv as usize != NV || m.nu as usize != NUM_JOINTS {
        return Err(SimError::Model(format!(
            "expected nq={NQ}, nv={NV}, nu={NUM_JOINTS}; model has nq={}, nv={}, nu={}",
            m.nq, m.nv, m.nu
        )));
    }
    for (j, name) in JOINT_NAMES.iter().enumerate() {
        if model.name_to_id(MjtObjBase::mjOBJ_JOINT, name) != Some(j + 1) {
            return Err(SimError::Model(format!(
                "joint {name} is not joint {} of the model",
                j + 1
            )));
        }
    }
    for (b, name) in BODY_NAMES.iter().enumerate() {
        if model.name_to_id(MjtObjBase::mjOBJ_BODY, name) != Some(b + 1) {
            return Err(SimError::Model(format!(
                "body {name} is not body {} of the model",
                b + 1
            )));
        }
    }
    Ok(())
}

impl MujocoHandler {
    /// Compiles the G1 for `config` and creates `num_envs` environments stepped on `threads`
    /// worker threads (0 = rayon's default).
    pub fn new(config: RobotConfig, num_envs: usize, threads: usize) -> Result<Self, SimError> {
        let model = config.compile()?;
        check_layout(&model)?;
        let nominal = Nominal {
            body_mass: model.body_mass().to_vec(),
            body_ipos: model.body_ipos().to_vec(),
            geom_friction: model.geom_friction().to_vec(),
        };
        let randomiser = MjData::try_new(Box::new(model.clone())).map_err(|e| SimError::Model(e.to_string()))?;
        let nominal_model = Arc::new(model);
        let mut envs = Vec::with_capacity(num_envs);
        for _ in 0..num_envs {
            let mut data = MjData::try_new(nominal_model.clone()).map_err(|e| SimError::Model(e.to_string()))?;
            data.forward();
            let contact_force = body_contact_forces(&data);
            envs.push(EnvSlot {
                data,
                target: config.default_pose,
                torque: [0.0; NUM_JOINTS],
                feedforward: [0.0; NUM_JOINTS],
                kp: config.kp,
                kd: config.kd,
                health: EnvHealth::Ok,
                stages_current: false,
                contact_force,
                torque_log: None,
                command_log: None,
            });
        }
        let pool = worker_pool(threads)?;
        Ok(Self {
            config,
            envs,
            nominal,
            nominal_model,
            randomiser,
            pool,
        })
    }

    /// A copy of the nominal model with `p`'s masses, torso CoM and friction, and the constants
    /// MuJoCo derives from them (`mj_setConst`: subtree masses, inverse weights, ...).
    fn randomised_model(randomiser: &mut MjData<Box<MjModel>>, nominal: &Nominal, p: &PhysicsParams) -> MjModel {
        // SAFETY: only parameter values change (never sizes or addresses), so the scratch data
        // allocated for this model stays valid.
        let model = unsafe { randomiser.model_mut() };
        let mass = model.body_mass_mut();
        for b in 0..NUM_BODIES {
            mass[b + 1] = nominal.body_mass[b + 1] * p.mass_scale[b];
        }
        let ipos = model.body_ipos_mut();
        ipos.copy_from_slice(&nominal.body_ipos);
        for k in 0..3 {
            ipos[TORSO_INDEX + 1][k] += p.torso_com_offset[k];
        }
        let friction = model.geom_friction_mut();
        friction.copy_from_slice(&nominal.geom_friction);
        if let Some(mu) = p.friction {
            for f in friction.iter_mut() {
                f[0] = mu;
            }
        }
        randomiser.set_const();
        randomiser.model().clone()
    }

    fn check_env(&self, env: usize) -> Result<(), SimError> {
        check_env(env, self.envs.len())
    }

    /// Sets one env's qpos and qvel and computes only what body poses and velocities need
    /// (kinematics, centres of mass, com-based velocities): a recorded state's observation terms
    /// read this way equal the ones read after a step. Forces, contacts, time and the env's
    /// health are left as they are, so the env must not be stepped from such a state.
    pub fn set_kinematic_state(&mut self, env: usize, qpos: &[f64], qvel: &[f64]) -> Result<(), SimError> {
        self.check_env(env)?;
        check_state(qpos, qvel)?;
        let slot = &mut self.envs[env];
        slot.stages_current = false;
        let data = &mut slot.data;
        data.qpos_mut().copy_from_slice(qpos);
        data.qvel_mut().copy_from_slice(qvel);
        data.kinematics();
        data.com_pos();
        data.com_vel();
        Ok(())
    }

    /// The simulation time of one env (seconds since its last reset).
    pub fn time(&self, env: usize) -> f64 {
        self.envs[env].data.ffi().time
    }

    /// Steps one env by one control step: DECIMATION substeps of the PD loop
    /// τ = kp(q_tgt − q) − kd·q̇ + τ_ff, clipped to the effort limit, written to the motors.
    fn step_slot(slot: &mut EnvSlot, effort: &[f64; NUM_JOINTS]) {
        if slot.health != EnvHealth::Ok {
            return;
        }
        if !slot.stages_current {
            let now = slot.data.ffi().time;
            slot.data.step1();
            if let Some(reason) = instability(&slot.data, now) {
                slot.health = EnvHealth::Failed(reason);
                return;
            }
        }
        if let Some(log) = &mut slot.command_log {
            if log.is_empty() {
                // The gains in force for the episode (set with its parameters, after the reset).
                log.extend_from_slice(&slot.kp);
                log.extend_from_slice(&slot.kd);
            }
            log.extend_from_slice(&slot.target);
            log.extend_from_slice(&slot.feedforward);
        }
        for substep in 0..DECIMATION {
            // The time this substep's state reaches: what a failure names (MuJoCo's reset of
            // a diverged state sets the data's own time back to 0), as the GPU worker does.
            let substep_end = slot.data.ffi().time + slot.data.model().ffi().opt.timestep;
            {
                let (qpos, qvel) = (slot.data.qpos(), slot.data.qvel());
                for j in 0..NUM_JOINTS {
                    let tau =
                        slot.kp[j] * (slot.target[j] - qpos[7 + j]) - slot.kd[j] * qvel[6 + j] + slot.feedforward[j];
                    slot.torque[j] = tau.clamp(-effort[j], effort[j]);
                }
            }
            slot.data.ctrl_mut().copy_from_slice(&slot.torque);
            if let Some(log) = &mut slot.torque_log {
                log.extend_from_slice(&slot.torque);
            }
            slot.data.step2();
            if substep + 1 == DECIMATION {
                slot.contact_force = body_contact_forces(&slot.data);
            }
            // The next substep's first half, which also brings body poses and velocities up to
            // the new state and checks it for divergence.
            slot.data.step1();
            slot.stages_current = true;
            if let Some(reason) = instability(&slot.data, substep_end) {
                slot.health = EnvHealth::Failed(reason);
                slot.stages_current = false;
                return;
            }
        }
    }

    fn set_targets(&mut self, targets: &[f64]) -> Result<(), SimError> {
        if targets.len() != self.envs.len() * NUM_JOINTS {
            return Err(SimError::Config(format!(
                "targets must be N×{NUM_JOINTS} = {} values, got {}",
                self.envs.len() * NUM_JOINTS,
                targets.len()
            )));
        }
        for (slot, t) in self.envs.iter_mut().zip(targets.chunks_exact(NUM_JOINTS)) {
            slot.target.copy_from_slice(t);
        }
        Ok(())
    }

    /// World-frame velocity of body `b` (1-based MuJoCo id): (linear at the body's centre of mass,
    /// as `mj_objectVelocity` reports it, angular).
    fn body_velocity(data: &MjData<Arc<MjModel>>, body_id: usize) -> (Vec3, Vec3) {
        let v = data.object_velocity(MjtObjBase::mjOBJ_BODY, body_id, false);
        ([v[3], v[4], v[5]], [v[0], v[1], v[2]])
    }

    /// Linear and/or angular world-frame velocities of every body, head row last, from one
    /// `mj_objectVelocity` per body.
    fn body_velocities(data: &MjData<Arc<MjModel>>, mut linear: Option<&mut [f64]>, mut angular: Option<&mut [f64]>) {
        let mut put = |row: usize, v: &Vec3, w: &Vec3| {
            if let Some(out) = linear.as_deref_mut() {
                out[3 * row..3 * row + 3].copy_from_slice(v);
            }
            if let Some(out) = angular.as_deref_mut() {
                out[3 * row..3 * row + 3].copy_from_slice(w);
            }
        };
        let mut torso = ([0.0; 3], [0.0; 3]);
        for b in 0..NUM_BODIES {
            let (v, w) = Self::body_velocity(data, b + 1);
            put(b, &v, &w);
            if b == TORSO_INDEX {
                torso = (v, w);
            }
        }
        let (v, w) = torso;
        put(NUM_BODIES, &head_vel(&v, &w), &w);
    }

    fn read_env(slot: &EnvSlot, field: Field, out: &mut [f64]) {
        let data = &slot.data;
        let qpos = data.qpos();
        let qvel = data.qvel();
        let root_rot: Quat = qpos[3..7].try_into().expect("4");
        match field {
            Field::Qpos => out.copy_from_slice(qpos),
            Field::Qvel => out.copy_from_slice(qvel),
            Field::DofPos => out.copy_from_slice(&qpos[7..]),
            Field::DofVel => out.copy_from_slice(&qvel[6..]),
            Field::DofTorque => out.copy_from_slice(&slot.torque),
            Field::DofPosTarget => out.copy_from_slice(&slot.target),
            Field::RootPos => out.copy_from_slice(&qpos[..3]),
            Field::RootRot => out.copy_from_slice(&root_rot),
            Field::RootVel => out.copy_from_slice(&qvel[..3]),
            Field::RootAngVel => {
                let w = math::rotate(&root_rot, &[qvel[3], qvel[4], qvel[5]]);
                out.copy_from_slice(&w);
            }
            Field::BodyPos => {
                let xpos = data.xpos();
                for b in 0..NUM_BODIES {
                    out[3 * b..3 * b + 3].copy_from_slice(&xpos[b + 1]);
                }
                let torso_rot = data.xquat()[TORSO_INDEX + 1];
                let head = head_pos(&xpos[TORSO_INDEX + 1], &torso_rot);
                out[3 * NUM_BODIES..].copy_from_slice(&head);
            }
            Field::BodyRot => {
                let xquat = data.xquat();
                for b in 0..NUM_BODIES {
                    out[4 * b..4 * b + 4].copy_from_slice(&xquat[b + 1]);
                }
                out[4 * NUM_BODIES..].copy_from_slice(&xquat[TORSO_INDEX + 1]);
            }
            Field::BodyVel => Self::body_velocities(data, Some(out), None),
            Field::BodyAngVel => Self::body_velocities(data, None, Some(out)),
            Field::BodyContactForce => out.copy_from_slice(&slot.contact_force),
            Field::ImuAccelerometer => {
                let sensors = data.sensordata();
                if sensors.len() >= 6 {
                    out.copy_from_slice(&sensors[..6]);
                } else {
                    out.fill(f64::NAN);
                }
            }
        }
    }
}

/// Per-body sums of the contact forces of `data`'s last constraint solve (world frame), in the
/// layout of [`Field::BodyContactForce`]; the head row stays zero (it is not a body).
fn body_contact_forces(data: &MjData<Arc<MjModel>>) -> [f64; 3 * NUM_BODIES_EXT] {
    let mut out = [0.0; 3 * NUM_BODIES_EXT];
    let geom_body = data.model().geom_bodyid();
    for (i, contact) in data.contact().iter().enumerate() {
        let f = data.contact_force(i);
        // Contact frame rows: normal (geom1 → geom2), tangent 1, tangent 2; the force acts on
        // geom2 and, opposite, on geom1.
        let fr = &contact.frame;
        let world: Vec3 = std::array::from_fn(|k| fr[k] * f[0] + fr[3 + k] * f[1] + fr[6 + k] * f[2]);
        for (geom, sign) in [(contact.geom[0], -1.0), (contact.geom[1], 1.0)] {
            let body = geom_body[geom as usize] as usize;
            if (1..=NUM_BODIES).contains(&body) {
                for k in 0..3 {
                    out[3 * (body - 1) + k] += sign * world[k];
                }
            }
        }
    }
    out
}

/// MuJoCo resets a diverged `MjData` and counts a warning; report that, or non-finite state,
/// at `time` (the time of the state that failed: the reset has set the data's own to 0).
fn instability(data: &MjData<Arc<MjModel>>, time: f64) -> Option<String> {
    let w = &data.ffi().warning;
    for (kind, label) in [
        (mjtWarning::mjWARN_BADQPOS, "bad qpos"),
        (mjtWarning::mjWARN_BADQVEL, "bad qvel"),
        (mjtWarning::mjWARN_BADQACC, "bad qacc"),
    ] {
        if w[kind as usize].number > 0 {
            return Some(format!("MuJoCo instability ({label}) at t = {:.3} s", time.max(0.0)));
        }
    }
    if data.qpos().iter().chain(data.qvel()).any(|v| !v.is_finite()) {
        return Some(format!("non-finite simulator state at t = {:.3} s", time.max(0.0)));
    }
    None
}

impl Handler for MujocoHandler {
    fn describe(&self) -> String {
        format!("cpu (MuJoCo {})", mujoco_version())
    }

    fn num_envs(&self) -> usize {
        self.envs.len()
    }

    fn config(&self) -> &RobotConfig {
        &self.config
    }

    /// The worker pool, or `None` when the handler runs on the calling thread; callers with
    /// per-env work of their own use it so everything runs on the same threads.
    fn pool(&self) -> Option<&rayon::ThreadPool> {
        self.pool.as_ref()
    }

    /// Sets one env's generalised state (qpos 36, qvel 35), recomputes derived quantities,
    /// clears its failure and MuJoCo's warning counters. Time restarts at 0.
    fn set_qpos_qvel(&mut self, env: usize, qpos: &[f64], qvel: &[f64]) -> Result<(), SimError> {
        self.check_env(env)?;
        check_state(qpos, qvel)?;
        let slot = &mut self.envs[env];
        slot.data.reset();
        slot.data.qpos_mut().copy_from_slice(qpos);
        slot.data.qvel_mut().copy_from_slice(qvel);
        slot.torque = [0.0; NUM_JOINTS];
        slot.feedforward = [0.0; NUM_JOINTS];
        slot.target.copy_from_slice(&qpos[7..]);
        slot.health = EnvHealth::Ok;
        if let Some(log) = &mut slot.torque_log {
            log.clear();
        }
        if let Some(log) = &mut slot.command_log {
            log.clear();
        }
        slot.data.forward();
        slot.contact_force = body_contact_forces(&slot.data);
        // `mj_forward` skips the divergence checks that open `mj_step1`: the first step runs it.
        slot.stages_current = false;
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
        self.envs[env].target.copy_from_slice(targets);
        Ok(())
    }

    fn supports_feedforward(&self) -> bool {
        true
    }

    fn set_feedforward(&mut self, env: usize, torques: &[f64]) -> Result<(), SimError> {
        self.check_env(env)?;
        check_feedforward(torques)?;
        self.envs[env].feedforward.copy_from_slice(torques);
        Ok(())
    }

    /// Applies domain-randomised physical parameters to one env (from the nominal model).
    fn set_physics_params(&mut self, env: usize, p: &PhysicsParams) -> Result<(), SimError> {
        self.check_env(env)?;
        let slot = &mut self.envs[env];
        for j in 0..NUM_JOINTS {
            slot.kp[j] = self.config.kp[j] * p.kp_scale;
            slot.kd[j] = self.config.kd[j] * p.kd_scale;
        }
        let nominal_physics =
            p.friction.is_none() && p.mass_scale.iter().all(|&s| s == 1.0) && p.torso_com_offset == [0.0; 3];
        let model = if nominal_physics {
            self.nominal_model.clone()
        } else {
            Arc::new(Self::randomised_model(&mut self.randomiser, &self.nominal, p))
        };
        slot.stages_current = false;
        // The new model is a copy of the one the data was made for: same sizes and addresses.
        slot.data
            .try_swap_model(model)
            .map_err(|e| SimError::Model(format!("domain randomisation: {e}")))?;
        Ok(())
    }

    /// Adds a velocity impulse to the root (world-frame linear, world-frame angular): a push.
    fn push_root(&mut self, env: usize, dv: Vec3, dw_world: Vec3) -> Result<(), SimError> {
        self.check_env(env)?;
        let slot = &mut self.envs[env];
        slot.stages_current = false;
        let data = &mut slot.data;
        let rot: Quat = data.qpos()[3..7].try_into().expect("4 values");
        let dw_local = math::rotate_inv(&rot, &dw_world);
        let qvel = data.qvel_mut();
        for k in 0..3 {
            qvel[k] += dv[k];
            qvel[3 + k] += dw_local[k];
        }
        Ok(())
    }

    /// Marks an env failed (e.g. a non-finite action): it is not stepped until reset.
    fn mark_failed(&mut self, env: usize, reason: String) {
        if let Some(slot) = self.envs.get_mut(env) {
            slot.health = EnvHealth::Failed(reason);
        }
    }

    /// Marks an env idle (not stepped) until its next reset.
    fn mark_idle(&mut self, env: usize) {
        if let Some(slot) = self.envs.get_mut(env) {
            slot.health = EnvHealth::Idle;
        }
    }

    fn health(&self, env: usize) -> &EnvHealth {
        &self.envs[env].health
    }

    fn step(&mut self, targets: &[f64]) -> Result<(), SimError> {
        self.set_targets(targets)?;
        let effort = self.config.effort;
        let envs = &mut self.envs;
        match &self.pool {
            Some(pool) => pool.install(|| envs.par_iter_mut().for_each(|slot| Self::step_slot(slot, &effort))),
            None => envs.iter_mut().for_each(|slot| Self::step_slot(slot, &effort)),
        }
        Ok(())
    }

    /// Reads `field` of one env into `out` (`field.width()` values); the per-env form of
    /// [`Handler::read_batch`] for callers that process envs in their own parallel loop.
    fn read_env_into(&self, env: usize, field: Field, out: &mut [f64]) {
        Self::read_env(&self.envs[env], field, out)
    }

    fn read_body_velocities_into(&self, env: usize, linear: &mut [f64], angular: &mut [f64]) {
        Self::body_velocities(&self.envs[env].data, Some(linear), Some(angular))
    }

    /// Total mass of the robot (nominal model, kg).
    fn total_mass(&self) -> f64 {
        self.nominal.body_mass.iter().sum()
    }

    /// Position range (lower, upper) of each of the 29 joints, from the compiled model.
    fn joint_ranges(&self) -> [(f64, f64); NUM_JOINTS] {
        let model = self.envs.first().map(|slot| slot.data.model());
        let mut out = [(f64::NEG_INFINITY, f64::INFINITY); NUM_JOINTS];
        if let Some(model) = model {
            let range = model.jnt_range();
            for (j, r) in out.iter_mut().enumerate() {
                *r = (range[j + 1][0], range[j + 1][1]);
            }
        }
        out
    }

    /// Turns on (or off) logging of every physics substep's torques per env; the log restarts
    /// at each reset. Used to replay identical physics in other simulators.
    fn set_torque_logging(&mut self, on: bool) -> Result<(), SimError> {
        for slot in &mut self.envs {
            slot.torque_log = on.then(Vec::new);
            slot.command_log = on.then(Vec::new);
        }
        Ok(())
    }

    /// The torques logged for one env since its last reset (substeps × 29).
    fn torque_log(&self, env: usize) -> Option<&[f64]> {
        self.envs[env].torque_log.as_deref()
    }

    fn command_log(&self, env: usize) -> Option<&[f64]> {
        self.envs[env].command_log.as_deref()
    }

    fn read_batch(&self, field: Field, out: &mut [f64]) -> Result<(), SimError> {
        let w = batch_width(self.envs.len(), field, out.len())?;
        let envs = &self.envs;
        match &self.pool {
            Some(pool) => pool.install(|| {
                out.par_chunks_mut(w)
                    .zip(envs.par_iter())
                    .for_each(|(row, slot)| Self::read_env(slot, field, row))
            }),
            None => out
                .chunks_mut(w)
                .zip(envs.iter())
                .for_each(|(row, slot)| Self::read_env(slot, field, row)),
        }
        Ok(())
    }

    fn read_batch_f32(&self, field: Field, out: &mut [f32]) -> Result<(), SimError> {
        let w = batch_width(self.envs.len(), field, out.len())?;
        let convert = |(row, slot): (&mut [f32], &EnvSlot)| {
            let mut wide = [0.0f64; MAX_FIELD_WIDTH];
            Self::read_env(slot, field, &mut wide[..w]);
            for (o, v) in row.iter_mut().zip(&wide[..w]) {
                *o = *v as f32;
            }
        };
        match &self.pool {
            Some(pool) => pool.install(|| out.par_chunks_mut(w).zip(self.envs.par_iter()).for_each(convert)),
            None => out.chunks_mut(w).zip(self.envs.iter()).for_each(convert),
        }
        Ok(())
    }
}

/// MuJoCo's version string ("3.17.0").
fn mujoco_version() -> String {
    // SAFETY: mj_versionString returns a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(mujoco_rs::mujoco_c::mj_versionString()) }
        .to_string_lossy()
        .into_owned()
}
