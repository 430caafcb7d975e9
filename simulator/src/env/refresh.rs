//! Reading each env's state after a step or reset (on the env's threads): its status, the
//! observation rows, the recorded trajectory row and the fall rule.

use super::{ActionMode, BODY_W, EpisodeStatus, FallRule, Slot, StepInfo, TrackingEnvConfig};
use crate::CONTROL_DT;
use crate::handler::{EnvHealth, Field, Handler, NQ, NV};
use crate::motion::MotionLibrary;
use crate::observation::{self, HistoryTiming, ProprioFrame, TRAINING_NOISE};
use crate::robot::NUM_BODIES_EXT;
use arena_data::NUM_JOINTS;
use rand::Rng;

/// What one env's refresh reads from the handler and the motion, in buffers one thread reuses
/// env after env (`for_each_init`): zeroing 4 kB of fresh arrays per env and step was a tenth
/// of the refresh. Every buffer a step uses is overwritten whole before it is read.
pub(super) struct RefreshScratch {
    qpos: [f64; NQ],
    qvel: [f64; NV],
    root_ang_vel: [f64; 3],
    body_pos: [f64; BODY_W],
    body_rot: [f64; 4 * NUM_BODIES_EXT],
    body_vel: [f64; BODY_W],
    body_ang_vel: [f64; BODY_W],
    ref_qpos: [f64; NQ],
    ref_body_pos: [f64; BODY_W],
}

impl Default for RefreshScratch {
    fn default() -> Self {
        RefreshScratch {
            qpos: [0.0; NQ],
            qvel: [0.0; NV],
            root_ang_vel: [0.0; 3],
            body_pos: [0.0; BODY_W],
            body_rot: [0.0; 4 * NUM_BODIES_EXT],
            body_vel: [0.0; BODY_W],
            body_ang_vel: [0.0; BODY_W],
            ref_qpos: [0.0; NQ],
            ref_body_pos: [0.0; BODY_W],
        }
    }
}

/// One env's mutable pieces in the refresh loop: (index, slot, info and its observation rows).
pub(super) type EnvItem<'a> = (
    usize,
    (
        (
            (((&'a mut Slot, &'a mut StepInfo), &'a mut [f32]), &'a mut [f32]),
            &'a mut [f32],
        ),
        &'a mut [f32],
    ),
);

pub(super) struct ObsRows<'a> {
    pub(super) state: &'a mut [f32],
    pub(super) privileged: &'a mut [f32],
    pub(super) last_action: &'a mut [f32],
    pub(super) history: &'a mut [f32],
}

pub(super) struct RefreshContext<'a> {
    pub(super) library: &'a MotionLibrary,
    pub(super) config: &'a TrackingEnvConfig,
    pub(super) handler: &'a dyn Handler,
    /// The envs were just reset; otherwise they were just stepped (and a running env's step
    /// count goes up).
    pub(super) after_reset: bool,
    /// Whether a running env's recorded row waits for the next step (see `recording.rs`).
    pub(super) record_behind: bool,
}

impl RefreshContext<'_> {
    pub(super) fn refresh_env(
        &self,
        scratch: &mut RefreshScratch,
        e: usize,
        slot: &mut Slot,
        info: &mut StepInfo,
        rows: ObsRows<'_>,
    ) {
        if !self.after_reset && slot.status == EpisodeStatus::Running {
            // A refresh that is not a reset's follows a step: the env has advanced.
            slot.step += 1;
        }
        let Some(a) = slot.assignment else { return };
        let motion = &self.library.motions[a.motion];
        let motion_time = a.start_time + slot.step as f64 * CONTROL_DT;
        info.step = slot.step;
        info.motion_time = motion_time;
        if let EnvHealth::Failed(reason) = self.handler.health(e) {
            // The step pushed no frame, but one that failed in the physics had its row written
            // ahead as if it would (`TrackingEnv::write_rows_ahead`), and a refused one not at
            // all: the row is the frames the env completed, newest first, either way. (A failed
            // env is refreshed only by the step or reset that failed it.)
            if self.config.compute_history {
                slot.history.write(rows.history);
            }
            if slot.status == EpisodeStatus::Running {
                slot.status = EpisodeStatus::Failed(reason.clone());
                // The step that failed produced no row: its action goes too, so the recording
                // keeps one action per row.
                if self.config.record {
                    let rows = slot.trajectory.rows.times.len();
                    slot.trajectory.rows.actions.truncate(rows * NUM_JOINTS);
                    if !slot.trajectory.rows.feedforward.is_empty() {
                        slot.trajectory.rows.feedforward.truncate(rows * NUM_JOINTS);
                    }
                }
            }
            info.status = slot.status.clone();
            return;
        }
        if slot.status != EpisodeStatus::Running {
            info.status = slot.status.clone();
            return;
        }
        let RefreshScratch {
            qpos,
            qvel,
            root_ang_vel: w,
            body_pos,
            body_rot,
            body_vel,
            body_ang_vel,
            ref_qpos,
            ref_body_pos,
        } = scratch;
        // A recorded row keeps the state it was observed from: read straight into it.
        let (qpos, qvel, body_pos) = match self.config.record {
            true => (
                &mut slot.pending.qpos,
                &mut slot.pending.qvel,
                &mut slot.pending.body_pos,
            ),
            false => (qpos, qvel, body_pos),
        };
        self.handler.read_env_into(e, Field::Qpos, qpos);
        self.handler.read_env_into(e, Field::Qvel, qvel);
        self.handler.read_env_into(e, Field::RootAngVel, w);
        let (qpos, qvel) = (&*qpos, &*qvel);
        let root_rot = [qpos[3], qpos[4], qpos[5], qpos[6]];
        let noise_on = slot.draw.obs_noise;
        let rng = &mut slot.rng;
        let mut noise = |sigma: f64| {
            if noise_on {
                rng.random_range(-1.0..1.0) * sigma
            } else {
                0.0
            }
        };
        let frame = ProprioFrame::from_robot(
            &qpos[7..],
            &qvel[6..],
            &root_rot,
            &[w[0], w[1], w[2]],
            &slot.defaults,
            &mut noise,
            &TRAINING_NOISE,
        );
        frame.write_state(rows.state);
        for j in 0..NUM_JOINTS {
            rows.last_action[j] = slot.last_a5[j] as f32;
        }
        if self.config.compute_history {
            // After a step, what the step could not change was written while it ran
            // (`TrackingEnv::write_rows_ahead`).
            match (self.config.history, self.after_reset) {
                (HistoryTiming::IncludeCurrent, true) => {
                    slot.history.push(&frame, &slot.last_a5);
                    slot.history.write(rows.history);
                }
                (HistoryTiming::IncludeCurrent, false) => {
                    slot.history.push(&frame, &slot.last_a5);
                    slot.history.write_newest(rows.history);
                }
                // Training convention: history at t holds t−1…t−4; an explicit reset pushes nothing.
                (HistoryTiming::Previous, true) => slot.history.write(rows.history),
                (HistoryTiming::Previous, false) => slot.history.push(&frame, &slot.last_a5),
            }
        }
        // The reference pose is for the body-deviation fall rule (the recording adds its own).
        let deviation_rule = matches!(self.config.fall_rule, Some(FallRule::MaxBodyDeviation(_)));
        let bodies_needed = self.config.record || deviation_rule || self.config.compute_privileged_state;
        if bodies_needed {
            self.handler.read_env_into(e, Field::BodyPos, body_pos);
        }
        let bp = &*body_pos;
        if self.config.compute_privileged_state {
            self.handler.read_env_into(e, Field::BodyRot, body_rot);
            self.handler.read_body_velocities_into(e, body_vel, body_ang_vel);
            observation::privileged_state(
                bp.as_chunks().0,
                body_rot.as_chunks().0,
                body_vel.as_chunks().0,
                body_ang_vel.as_chunks().0,
                rows.privileged,
            );
        }
        if deviation_rule {
            motion.pose_at(motion_time, ref_qpos, ref_body_pos);
        }
        let ref_body_pos = &*ref_body_pos;
        if self.config.record {
            if self.after_reset {
                let t = &mut slot.trajectory;
                t.rows.actions.extend_from_slice(&[0.0; NUM_JOINTS]);
                if self.config.action_mode == ActionMode::JointPosition {
                    t.rows.feedforward.extend_from_slice(&[0.0; NUM_JOINTS]);
                }
            }
            slot.pending.motion_time = motion_time;
            self.handler
                .read_env_into(e, Field::DofPosTarget, &mut slot.pending.targets);
            self.handler
                .read_env_into(e, Field::DofTorque, &mut slot.pending.torques);
            slot.pending.state.copy_from_slice(rows.state);
            slot.pending.filled = true;
        }
        // Not on the reset row: as in mjlab, terminations are looked at after a step, so an
        // episode always has a step of the agent's to score (a start below `min_root_height`,
        // a crawl clip's, would otherwise end as a fall with the reset row alone, which the
        // mjlab metrics cannot score).
        let fell = !self.after_reset
            && match self.config.fall_rule {
                None => false,
                Some(FallRule::MinRootHeight(h)) => qpos[2] < h,
                Some(FallRule::MaxBodyDeviation(d)) => (0..NUM_BODIES_EXT).any(|b| {
                    let p = &bp[3 * b..3 * b + 3];
                    let q = &ref_body_pos[3 * b..3 * b + 3];
                    ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2)).sqrt() > d
                }),
            };
        if fell {
            slot.status = EpisodeStatus::Fell;
        } else if motion_time >= motion.length_s - 1e-9 {
            slot.status = EpisodeStatus::Truncated;
        }
        info.status = slot.status.clone();
        // Only a running env's row may wait: an ended episode's trajectory is complete.
        if !(self.record_behind && slot.status == EpisodeStatus::Running) {
            slot.pending.append(&mut slot.trajectory, motion, &self.config.robot);
        }
    }
}
