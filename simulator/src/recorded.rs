//! Observations of recorded states: the `privileged_state` rows of a stored trajectory,
//! recomputed from its qpos and qvel with the simulator's own kinematics, so trajectory files
//! need not store the 463 values per step that a dataset export hands out.
//!
//! `privileged_state` reads body poses and velocities. MuJoCo reports a body's linear velocity
//! at its centre of mass, and domain randomisation (level 1 and up) moves the torso's, so each
//! episode's rows are recomputed under that episode's own draw (`dr::draw(level, seed)`, the
//! same function the env applied); masses, friction and gains do not enter.

use crate::SimError;
use crate::dr::{self, DrLevel};
use crate::handler::{Field, Handler, MujocoHandler, NQ, NV};
use crate::observation::{self, PRIVILEGED_STATE_DIM};
use crate::robot::{NUM_BODIES_EXT, RobotConfig};

/// Recomputes observation rows from recorded (qpos, qvel) rows on a private one-env handler.
pub struct RecordedObserver {
    handler: MujocoHandler,
    pos: Vec<f64>,
    rot: Vec<f64>,
    vel: Vec<f64>,
    ang_vel: Vec<f64>,
}

impl std::fmt::Debug for RecordedObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordedObserver")
    }
}

impl RecordedObserver {
    pub fn new(config: RobotConfig) -> Result<Self, SimError> {
        Ok(Self {
            handler: MujocoHandler::new(config, 1, 1)?,
            pos: vec![0.0; 3 * NUM_BODIES_EXT],
            rot: vec![0.0; 4 * NUM_BODIES_EXT],
            vel: vec![0.0; 3 * NUM_BODIES_EXT],
            ang_vel: vec![0.0; 3 * NUM_BODIES_EXT],
        })
    }

    /// `privileged_state` (463 per row) of each row of `qpos` (36 per row, quaternion wxyz) and
    /// `qvel` (35 per row) of an episode run at `dr_level` with `seed`, into `out`. A row with
    /// non-finite values is an error naming it.
    pub fn privileged_states(
        &mut self,
        dr_level: DrLevel,
        seed: u64,
        qpos: &[f64],
        qvel: &[f64],
        out: &mut [f32],
    ) -> Result<(), SimError> {
        let rows = qpos.len() / NQ;
        if qpos.len() != rows * NQ || qvel.len() != rows * NV || out.len() != rows * PRIVILEGED_STATE_DIM {
            return Err(SimError::Config(format!(
                "recorded states: {} qpos, {} qvel and {} output values do not make whole rows of {NQ}, {NV} and {PRIVILEGED_STATE_DIM}",
                qpos.len(),
                qvel.len(),
                out.len()
            )));
        }
        self.handler.set_physics_params(0, &dr::draw(dr_level, seed).physics)?;
        for k in 0..rows {
            self.handler
                .set_kinematic_state(0, &qpos[k * NQ..(k + 1) * NQ], &qvel[k * NV..(k + 1) * NV])
                .map_err(|e| SimError::Config(format!("recorded state row {k}: {e}")))?;
            self.handler.read_env_into(0, Field::BodyPos, &mut self.pos);
            self.handler.read_env_into(0, Field::BodyRot, &mut self.rot);
            self.handler.read_env_into(0, Field::BodyVel, &mut self.vel);
            self.handler.read_env_into(0, Field::BodyAngVel, &mut self.ang_vel);
            observation::privileged_state(
                &observation::bodies3(&self.pos),
                &observation::bodies4(&self.rot),
                &observation::bodies3(&self.vel),
                &observation::bodies3(&self.ang_vel),
                &mut out[k * PRIVILEGED_STATE_DIM..(k + 1) * PRIVILEGED_STATE_DIM],
            );
        }
        Ok(())
    }
}
