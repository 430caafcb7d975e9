//! Example agents: the all-zero floor and open-loop reference replay.

use crate::agent::{Agent, Batch};
use crate::episode::REFERENCE_GROUP;
use crate::protocol::{EpisodeInfo, EpisodeSpec};
use arena_data::NUM_JOINTS;
use arena_sim::RobotConfig;
use arena_sim::policy::ReplayPolicy;

/// All-zero actions: PD targets at the default pose.
#[derive(Debug, Default)]
pub struct ZeroAgent;

impl Agent for ZeroAgent {
    fn reset(&mut self, _episodes: &[EpisodeInfo]) {}

    fn act(&mut self, _batch: &Batch<'_>, actions: &mut [f32]) {
        actions.fill(0.0);
    }
}

/// Open-loop replay: targets the next reference frame (the first frame of the `reference`
/// observation group), the same action as the simulator's built-in replay policy.
#[derive(Debug)]
pub struct ReplayAgent {
    robot: RobotConfig,
    q_ref: Vec<f64>,
}

impl ReplayAgent {
    pub fn new() -> Self {
        Self {
            robot: RobotConfig::default(),
            q_ref: vec![0.0; NUM_JOINTS],
        }
    }
}

impl Default for ReplayAgent {
    fn default() -> Self {
        Self::new()
    }
}

impl Agent for ReplayAgent {
    fn configure(&mut self, spec: &EpisodeSpec) {
        if !spec.observations.iter().any(|g| g.name == REFERENCE_GROUP) {
            tracing::warn!("the benchmark sends no `reference` observation; replay falls back to zero actions");
        }
    }

    fn reset(&mut self, _episodes: &[EpisodeInfo]) {}

    fn act(&mut self, batch: &Batch<'_>, actions: &mut [f32]) {
        let Some(reference) = batch.layout.group(REFERENCE_GROUP) else {
            actions.fill(0.0);
            return;
        };
        for (i, out) in actions.chunks_exact_mut(NUM_JOINTS).enumerate() {
            // Frame 1 of the horizon: root position (3), quaternion (4), then the 29 joints.
            let joints = &batch.observation(i)[reference.start + 7..reference.start + 7 + NUM_JOINTS];
            for (q, v) in self.q_ref.iter_mut().zip(joints) {
                *q = *v as f64;
            }
            ReplayPolicy::action_for(&self.q_ref, &self.robot, out);
        }
    }
}
