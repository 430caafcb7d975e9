//! Turning each env's action into the simulator's command (on the env's threads): the checks,
//! the PD targets and feed-forward torques, the control delay, the push draws and the
//! recorded action. The handler's calls follow on the stepping thread (`TrackingEnv::step`).

use super::{ACTION_CLIP, ACTION_SCALE, ActionMode, EpisodeStatus, Slot, TARGET_RANGE_MARGIN, TrackingEnvConfig};
use crate::CONTROL_DT;
use crate::dr;
use arena_data::NUM_JOINTS;

/// Why a joint-position command (29 targets, 29 feed-forward torques) cannot be applied, naming
/// the joint, or `None` when it can.
pub(super) fn joint_command_error(
    a: &[f32],
    ranges: &[(f64, f64); NUM_JOINTS],
    effort: &[f64; NUM_JOINTS],
) -> Option<String> {
    let names = &crate::robot::JOINT_NAMES;
    for j in 0..NUM_JOINTS {
        let (lo, hi) = (ranges[j].0 - TARGET_RANGE_MARGIN, ranges[j].1 + TARGET_RANGE_MARGIN);
        let q = a[j] as f64;
        if !(lo..=hi).contains(&q) {
            return Some(format!(
                "{} target {q} rad is outside [{lo:.4}, {hi:.4}] (the joint's range widened by π)",
                names[j]
            ));
        }
        let tau = a[NUM_JOINTS + j] as f64;
        if tau.abs() > effort[j] {
            return Some(format!(
                "{} feed-forward torque {tau} N·m exceeds its effort limit {} N·m",
                names[j], effort[j]
            ));
        }
    }
    None
}

/// What preparing one env's command leaves for the handler, which only the stepping thread
/// may call.
pub(super) enum Prepared {
    /// Not running this step.
    Idle,
    /// Targets (and feed-forward torques) written; a push to apply before the step.
    Command { push: Option<([f64; 3], [f64; 3])> },
    /// The action is refused; the env fails with this reason.
    Failed(String),
}

/// One env's slot, targets and feed-forward torques, and its action.
pub(super) type CommandItem<'a> = ((&'a mut Slot, (&'a mut [f64], &'a mut [f64])), &'a [f32]);

/// What every env's command preparation reads.
pub(super) struct CommandContext<'a> {
    pub(super) config: &'a TrackingEnvConfig,
    pub(super) ranges: Option<&'a [(f64, f64); NUM_JOINTS]>,
}

impl CommandContext<'_> {
    /// Checks one env's action, turns it into PD targets (and feed-forward torques), applies the
    /// control delay, draws its push when one is due, and records the action.
    pub(super) fn prepare(&self, slot: &mut Slot, targets: &mut [f64], feedforward: &mut [f64], a: &[f32]) -> Prepared {
        if slot.status != EpisodeStatus::Running {
            return Prepared::Idle;
        }
        let robot = &self.config.robot;
        let mode = self.config.action_mode;
        if let Some(j) = a.iter().position(|v| !v.is_finite()) {
            let what = match j.checked_sub(NUM_JOINTS) {
                None => format!("joint {j}"),
                Some(k) => format!("feed-forward torque of joint {k}"),
            };
            let reason = format!("non-finite action at step {} ({what}: {})", slot.step, a[j]);
            slot.status = EpisodeStatus::Failed(reason.clone());
            return Prepared::Failed(reason);
        }
        let mut command = [0.0; 2 * NUM_JOINTS];
        match (mode, self.ranges) {
            (ActionMode::JointPosition, Some(ranges)) => {
                if let Some(why) = joint_command_error(a, ranges, &robot.effort) {
                    let reason = format!("action out of range at step {}: {why}", slot.step);
                    slot.status = EpisodeStatus::Failed(reason.clone());
                    return Prepared::Failed(reason);
                }
                for j in 0..NUM_JOINTS {
                    // A randomised default-joint offset acts as an encoder calibration error.
                    let offset = slot.defaults[j] - robot.default_pose[j];
                    command[j] = a[j] as f64 + offset;
                    command[NUM_JOINTS + j] = a[NUM_JOINTS + j] as f64;
                }
            }
            _ => {
                let mut a5 = [0.0; NUM_JOINTS];
                for j in 0..NUM_JOINTS {
                    a5[j] = (ACTION_CLIP * a[j] as f64).clamp(-ACTION_CLIP, ACTION_CLIP);
                    command[j] = slot.defaults[j] + a5[j] * ACTION_SCALE * robot.effort[j] / robot.kp[j];
                }
                slot.last_a5 = a5;
            }
        }
        // With a one-step control delay the robot executes the previous command.
        let applied = if slot.draw.control_delay > 0 {
            std::mem::replace(&mut slot.pending_command, command)
        } else {
            command
        };
        targets.copy_from_slice(&applied[..NUM_JOINTS]);
        feedforward.copy_from_slice(&applied[NUM_JOINTS..]);
        let mut push = None;
        if slot.step + 1 == slot.next_push_step {
            push = Some(dr::push_velocity(&mut slot.rng));
            slot.next_push_step += (dr::next_push_interval_s(&mut slot.rng) / CONTROL_DT).round() as usize;
        }
        if self.config.record {
            let rows = &mut slot.trajectory.rows;
            rows.actions.extend(a[..NUM_JOINTS].iter().map(|v| *v as f64));
            if mode == ActionMode::JointPosition {
                rows.feedforward.extend(a[NUM_JOINTS..].iter().map(|v| *v as f64));
            }
        }
        Prepared::Command { push }
    }
}
