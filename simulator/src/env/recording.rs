//! One env's recorded row between the refresh that reads it and its place in the trajectory.
//!
//! The refresh after a step reads what a row needs from the handler into the env's
//! [`PendingRow`] (a few kilobytes it reuses every step); [`PendingRow::append`] writes the row
//! into the trajectory and adds the reference (the motion's pose, velocities and reference
//! state at the row's time), which depends on nothing the physics computes. Appending is most of
//! a recording's cost: the trajectory's rows are memory touched for the first time (page
//! faults), and the reference is computed per row. With [`super::TrackingEnv::record_behind_physics`]
//! a running env's row is appended during its next step, while the GPU worker simulates it;
//! every other way the row is appended at once.

use super::{BODY_W, Trajectory};
use crate::handler::{NQ, NV};
use crate::motion::Motion;
use crate::observation::{self, STATE_DIM};
use crate::robot::RobotConfig;
use arena_data::NUM_JOINTS;

/// A row read from the handler, not yet in the trajectory.
pub(super) struct PendingRow {
    /// Whether it holds a row to append.
    pub(super) filled: bool,
    pub(super) motion_time: f64,
    pub(super) qpos: [f64; NQ],
    pub(super) qvel: [f64; NV],
    pub(super) body_pos: [f64; BODY_W],
    pub(super) targets: [f64; NUM_JOINTS],
    pub(super) torques: [f64; NUM_JOINTS],
    /// The `state` observation row the agent got (noise included).
    pub(super) state: [f32; STATE_DIM],
}

impl Default for PendingRow {
    fn default() -> Self {
        PendingRow {
            filled: false,
            motion_time: 0.0,
            qpos: [0.0; NQ],
            qvel: [0.0; NV],
            body_pos: [0.0; BODY_W],
            targets: [0.0; NUM_JOINTS],
            torques: [0.0; NUM_JOINTS],
            state: [0.0; STATE_DIM],
        }
    }
}

impl PendingRow {
    /// Appends the row, with the reference of `motion` at its time, to `trajectory`; nothing
    /// when it holds none.
    pub(super) fn append(&mut self, trajectory: &mut Trajectory, motion: &Motion, robot: &RobotConfig) {
        if !std::mem::take(&mut self.filled) {
            return;
        }
        let (mut ref_qpos, mut ref_body_pos) = ([0.0; NQ], [0.0; BODY_W]);
        motion.pose_at(self.motion_time, &mut ref_qpos, &mut ref_body_pos);
        let (mut dof_vel, mut root_ang_vel) = ([0.0; NUM_JOINTS], [0.0; 3]);
        motion.velocities_at(self.motion_time, &mut dof_vel, &mut root_ang_vel);
        let mut ref_state = [0.0f32; STATE_DIM];
        observation::reference_state_row_from(&ref_qpos, &dof_vel, &root_ang_vel, robot, &mut ref_state);
        let rows = &mut trajectory.rows;
        rows.times.push(self.motion_time);
        rows.qpos.extend_from_slice(&self.qpos);
        rows.qvel.extend_from_slice(&self.qvel);
        rows.body_pos.extend_from_slice(&self.body_pos);
        rows.ref_qpos.extend_from_slice(&ref_qpos);
        rows.ref_body_pos.extend_from_slice(&ref_body_pos);
        rows.targets.extend_from_slice(&self.targets);
        rows.torques.extend_from_slice(&self.torques);
        rows.state.extend(self.state.iter().map(|v| *v as f64));
        rows.ref_state.extend(ref_state.iter().map(|v| *v as f64));
    }
}
