//! Built-in policies that need no network: the open-loop `replay` floor and `zero`.

use crate::CONTROL_DT;
use crate::env::{ACTION_CLIP, ACTION_SCALE, ActionMode, EpisodeStatus, TrackingEnv};
use arena_data::NUM_JOINTS;
use rayon::prelude::*;

/// Something that maps the env batch to an action batch in the env's action mode
/// (N × [`TrackingEnv::action_width`]: 29 normalised values per env, or in the joint-position
/// mode 29 targets then 29 feed-forward torques).
pub trait Policy {
    fn act(&mut self, env: &TrackingEnv, actions: &mut [f32]);
}

/// All-zero actions: PD targets at the default pose (in the joint-position mode the default
/// pose's angles themselves, with no feed-forward torque).
#[derive(Debug, Default)]
pub struct ZeroPolicy;

impl Policy for ZeroPolicy {
    fn act(&mut self, env: &TrackingEnv, actions: &mut [f32]) {
        actions.fill(0.0);
        if env.action_mode() == ActionMode::JointPosition {
            let pose = &env.handler().config().default_pose;
            for row in actions.chunks_exact_mut(2 * NUM_JOINTS) {
                for (a, q) in row.iter_mut().zip(pose) {
                    *a = *q as f32;
                }
            }
        }
    }
}

/// Open-loop reference replay: the action whose PD target is the reference joint position one
/// control step ahead, a = (q_ref(t + dt) − q0) / (5 · 0.25 · effort / kp), clipped to [−1, 1]
/// (in the joint-position mode q_ref(t + dt) itself, with no feed-forward torque).
/// Each env's action depends on that env alone, so they are computed on the env's threads.
#[derive(Debug, Default)]
pub struct ReplayPolicy;

impl ReplayPolicy {
    /// The replay action for reference joint positions `q_ref` (29).
    pub fn action_for(q_ref: &[f64], robot: &crate::RobotConfig, out: &mut [f32]) {
        for j in 0..NUM_JOINTS {
            let scale = ACTION_CLIP * ACTION_SCALE * robot.effort[j] / robot.kp[j];
            out[j] = ((q_ref[j] - robot.default_pose[j]) / scale).clamp(-1.0, 1.0) as f32;
        }
    }
}

impl Policy for ReplayPolicy {
    fn act(&mut self, env: &TrackingEnv, actions: &mut [f32]) {
        let robot = env.handler().config();
        let targets = env.action_mode() == ActionMode::JointPosition;
        let act_env = |(e, out): (usize, &mut [f32])| {
            out.fill(0.0);
            let (Some(a), EpisodeStatus::Running) = (env.assignment(e), &env.infos()[e].status) else {
                return;
            };
            let t = env.infos()[e].motion_time + CONTROL_DT;
            let mut q_ref = [0.0; NUM_JOINTS];
            env.library().motions[a.motion].joint_pos_at(t, &mut q_ref);
            match targets {
                true => out[..NUM_JOINTS]
                    .iter_mut()
                    .zip(&q_ref)
                    .for_each(|(o, q)| *o = *q as f32),
                false => Self::action_for(&q_ref, robot, out),
            }
        };
        let width = env.action_width();
        match env.handler().pool() {
            Some(pool) => pool.install(|| actions.par_chunks_exact_mut(width).enumerate().for_each(act_env)),
            None => actions.chunks_exact_mut(width).enumerate().for_each(act_env),
        }
    }
}
