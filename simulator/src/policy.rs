//! Built-in policies that need no network: the open-loop `replay` floor and `zero`.

use crate::CONTROL_DT;
use crate::env::{ACTION_CLIP, ACTION_SCALE, EpisodeStatus, TrackingEnv};
use crate::handler::NQ;
use crate::robot::NUM_BODIES_EXT;
use arena_data::NUM_JOINTS;

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
#[derive(Debug)]
pub struct ReplayPolicy {
    qpos: [f64; NQ],
    body_pos: Vec<f64>,
}

impl Default for ReplayPolicy {
    fn default() -> Self {
        Self {
            qpos: [0.0; NQ],
            body_pos: vec![0.0; 3 * NUM_BODIES_EXT],
        }
    }
}

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
        for (e, out) in actions.chunks_exact_mut(NUM_JOINTS).enumerate() {
            let (Some(a), EpisodeStatus::Running) = (env.assignment(e), &env.infos()[e].status) else {
                out.fill(0.0);
                continue;
            };
            let t = env.infos()[e].motion_time + CONTROL_DT;
            env.library().motions[a.motion].pose_at(t, &mut self.qpos, &mut self.body_pos);
            Self::action_for(&self.qpos[7..], robot, out);
        }
    }
}
