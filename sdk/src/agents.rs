//! Example agents: the all-zero floor and open-loop reference replay.

use crate::agent::{Agent, Batch};
use crate::layout::REFERENCE_GROUP;
use crate::protocol::{EpisodeInfo, EpisodeSpec};

/// All-zero actions: PD targets at the default pose (in the joint-position action mode, the
/// default pose's angles themselves).
#[derive(Debug, Default)]
pub struct ZeroAgent {
    /// Joint-position mode: the default pose, sent as the targets.
    hold: Option<Vec<f32>>,
}

impl Agent for ZeroAgent {
    fn configure(&mut self, spec: &EpisodeSpec) {
        self.hold =
            (spec.action_mode == "joint_position").then(|| spec.default_joint_pos.iter().map(|q| *q as f32).collect());
    }

    fn reset(&mut self, _episodes: &[EpisodeInfo]) {}

    fn act(&mut self, _batch: &Batch<'_>, actions: &mut [f32]) {
        match &self.hold {
            Some(pose) if !pose.is_empty() => {
                for row in actions.chunks_exact_mut(pose.len()) {
                    row.copy_from_slice(pose);
                }
            }
            _ => actions.fill(0.0),
        }
    }
}

/// Open-loop replay: targets the next reference frame (the first frame of the `reference`
/// observation group) through the session's announced action mapping,
/// a = clip((q_ref − default_joint_pos) / action_scale, −1, 1). In the joint-position action
/// mode the reference angles are the targets themselves (from `reference`, else from
/// `motion_command`, else the default pose).
#[derive(Debug, Default)]
pub struct ReplayAgent {
    default_joint_pos: Vec<f64>,
    action_scale: Vec<f64>,
    joint_position: bool,
}

impl ReplayAgent {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Agent for ReplayAgent {
    fn configure(&mut self, spec: &EpisodeSpec) {
        self.default_joint_pos = spec.default_joint_pos.clone();
        self.action_scale = spec.action_scale.clone();
        self.joint_position = spec.action_mode == "joint_position";
    }

    fn check(&self, spec: &EpisodeSpec) -> Result<(), String> {
        let n = spec.action_size as usize;
        if spec.default_joint_pos.len() != n || spec.action_scale.len() != n {
            return Err(format!(
                "replay needs the action mapping for {n} joints; the server sent {} default positions and {} scales",
                spec.default_joint_pos.len(),
                spec.action_scale.len()
            ));
        }
        let has = |name: &str| spec.observations.iter().any(|g| g.name == name);
        if self.joint_position && !has(REFERENCE_GROUP) && has("motion_command") {
            tracing::info!("replay targets the `motion_command` joint positions (no `reference` group)");
        } else if !has(REFERENCE_GROUP) {
            tracing::warn!("the benchmark sends no `reference` observation; replay falls back to zero actions");
        }
        Ok(())
    }

    fn reset(&mut self, _episodes: &[EpisodeInfo]) {}

    fn act(&mut self, batch: &Batch<'_>, actions: &mut [f32]) {
        let n = self.action_scale.len();
        if self.joint_position {
            // Frame 1 of `reference`: root position (3), quaternion (4), then the joints;
            // `motion_command` starts with the joints.
            let joints_at = batch
                .layout
                .group(REFERENCE_GROUP)
                .map(|r| r.start + 7)
                .or_else(|| batch.layout.group("motion_command").map(|r| r.start));
            for (i, out) in actions.chunks_exact_mut(n).enumerate() {
                for (j, a) in out.iter_mut().enumerate() {
                    *a = match joints_at {
                        Some(at) => batch.observation(i)[at + j],
                        None => self.default_joint_pos[j] as f32,
                    };
                }
            }
            return;
        }
        let Some(reference) = batch.layout.group(REFERENCE_GROUP) else {
            actions.fill(0.0);
            return;
        };
        for (i, out) in actions.chunks_exact_mut(n).enumerate() {
            // Frame 1 of the horizon: root position (3), quaternion (4), then the joints.
            let joints = &batch.observation(i)[reference.start + 7..reference.start + 7 + n];
            for (j, a) in out.iter_mut().enumerate() {
                let q = joints[j] as f64;
                *a = ((q - self.default_joint_pos[j]) / self.action_scale[j]).clamp(-1.0, 1.0) as f32;
            }
        }
    }
}
