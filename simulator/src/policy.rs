//! Built-in policies that need no network: the open-loop `replay` floor and `zero`.

use crate::CONTROL_DT;
use crate::env::{ACTION_CLIP, ACTION_SCALE, EpisodeStatus, TrackingEnv};
use arena_data::NUM_JOINTS;
use rayon::prelude::*;

/// Something that maps the env batch to an action batch (N×29, normalised).
pub trait Policy {
    fn act(&mut self, env: &TrackingEnv, actions: &mut [f32]);
}

/// All-zero actions: PD targets at the default pose.
#[derive(Debug, Default)]
pub struct ZeroPolicy;

impl Policy for ZeroPolicy {
    fn act(&mut self, _env: &TrackingEnv, actions: &mut [f32]) {
        actions.fill(0.0);
    }
}

/// Open-loop reference replay: the action whose PD target is the reference joint position one
/// control step ahead, a = (q_ref(t + dt) − q0) / (5 · 0.25 · effort / kp), clipped to [−1, 1].
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
        let act_env = |(e, out): (usize, &mut [f32])| {
            let (Some(a), EpisodeStatus::Running) = (env.assignment(e), &env.infos()[e].status) else {
                out.fill(0.0);
                return;
            };
            let t = env.infos()[e].motion_time + CONTROL_DT;
            let mut q_ref = [0.0; NUM_JOINTS];
            env.library().motions[a.motion].joint_pos_at(t, &mut q_ref);
            Self::action_for(&q_ref, robot, out);
        };
        match env.handler().pool() {
            Some(pool) => pool.install(|| actions.par_chunks_exact_mut(NUM_JOINTS).enumerate().for_each(act_env)),
            None => actions.chunks_exact_mut(NUM_JOINTS).enumerate().for_each(act_env),
        }
    }
}
