//! The trained tracker as an arena agent: it reads the robot-interface groups a joint-position
//! benchmark sends (docs/protocol.md §5), builds the actor's 160 inputs exactly as training does
//! and answers absolute joint targets (plus zero feed-forward torques).

use crate::envs::ActionInterface;
use crate::mdp::{ACTOR_DIM, POLICY_DEFAULT_POSE};
use crate::policy::ActorCritic;
use arena_data::NUM_JOINTS;
use arena_sdk::agent::{Agent, Batch};
use arena_sdk::protocol::{EpisodeEnd, EpisodeInfo, EpisodeSpec};
use std::collections::HashMap;
use std::ops::Range;
use tch::{Kind, Tensor};

/// The groups the policy reads.
pub const REQUIRED_GROUPS: [&str; 6] = [
    "motion_command",
    "motion_anchor_pos_b",
    "motion_anchor_ori_b",
    "base_lin_vel",
    "imu",
    "motors",
];

pub struct PolicyAgent {
    model: ActorCritic,
    interface: ActionInterface,
    ranges: HashMap<&'static str, Range<usize>>,
    action_size: usize,
    last_action: HashMap<u32, [f32; NUM_JOINTS]>,
}

impl std::fmt::Debug for PolicyAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyAgent").finish()
    }
}

impl PolicyAgent {
    pub fn new(model: ActorCritic, interface: ActionInterface) -> Self {
        PolicyAgent {
            model,
            interface,
            ranges: HashMap::new(),
            action_size: 2 * NUM_JOINTS,
            last_action: HashMap::new(),
        }
    }

    /// The actor's input of one observation row (ACTOR_DIM values).
    fn actor_row(&self, row: &[f32], last: &[f32; NUM_JOINTS], out: &mut [f32]) {
        let g = |name: &str| &row[self.ranges[name].clone()];
        let j = NUM_JOINTS;
        out[..2 * j].copy_from_slice(g("motion_command"));
        out[2 * j..2 * j + 3].copy_from_slice(g("motion_anchor_pos_b"));
        out[2 * j + 3..2 * j + 9].copy_from_slice(g("motion_anchor_ori_b"));
        out[2 * j + 9..2 * j + 12].copy_from_slice(g("base_lin_vel"));
        out[2 * j + 12..2 * j + 15].copy_from_slice(&g("imu")[4..7]);
        let motors = g("motors");
        let o = 2 * j + 15;
        for k in 0..j {
            out[o + k] = motors[k] - POLICY_DEFAULT_POSE[k] as f32;
        }
        out[o + j..o + 2 * j].copy_from_slice(&motors[j..2 * j]);
        out[o + 2 * j..o + 3 * j].copy_from_slice(last);
    }
}

impl Agent for PolicyAgent {
    fn configure(&mut self, spec: &EpisodeSpec) {
        let layout = arena_sdk::layout::ObservationLayout::from_spec(spec);
        self.ranges = REQUIRED_GROUPS
            .iter()
            .filter_map(|g| layout.group(g).map(|r| (*g, r)))
            .collect();
        self.action_size = spec.action_size as usize;
    }

    fn check(&self, spec: &EpisodeSpec) -> Result<(), String> {
        if spec.action_mode != "joint_position" {
            return Err(format!(
                "the tracker answers joint_position actions; this benchmark takes {:?}",
                spec.action_mode
            ));
        }
        let missing: Vec<&str> = REQUIRED_GROUPS
            .iter()
            .filter(|g| !self.ranges.contains_key(**g))
            .copied()
            .collect();
        if !missing.is_empty() {
            return Err(format!("the benchmark does not send {}", missing.join(", ")));
        }
        if spec.action_size as usize != NUM_JOINTS && spec.action_size as usize != 2 * NUM_JOINTS {
            return Err(format!("action size {} (expected 29 or 58)", spec.action_size));
        }
        let names = &arena_sim::robot::JOINT_NAMES;
        for (what, announced, trained) in [
            ("stiffness", &spec.joint_stiffness, &self.interface.gains.kp),
            ("damping", &spec.joint_damping, &self.interface.gains.kd),
        ] {
            if announced.len() != NUM_JOINTS {
                return Err(format!("the server announced {} joint {what} values", announced.len()));
            }
            for j in 0..NUM_JOINTS {
                if (announced[j] - trained[j]).abs() > 1e-6 * trained[j].abs().max(1.0) {
                    return Err(format!(
                        "{}: the session's {what} is {}, the policy was trained with {}",
                        names[j], announced[j], trained[j]
                    ));
                }
            }
        }
        Ok(())
    }

    fn reset(&mut self, episodes: &[EpisodeInfo]) {
        for e in episodes {
            self.last_action.insert(e.episode_id, [0.0; NUM_JOINTS]);
        }
    }

    fn act(&mut self, batch: &Batch<'_>, actions: &mut [f32]) {
        let n = batch.len();
        let mut input = vec![0.0f32; n * ACTOR_DIM];
        for i in 0..n {
            let last = self
                .last_action
                .get(&batch.episodes[i])
                .copied()
                .unwrap_or([0.0; NUM_JOINTS]);
            self.actor_row(
                batch.observation(i),
                &last,
                &mut input[i * ACTOR_DIM..(i + 1) * ACTOR_DIM],
            );
        }
        let raw: Vec<f32> = {
            let _guard = tch::no_grad_guard();
            let obs = Tensor::from_slice(&input).view([n as i64, ACTOR_DIM as i64]);
            let a = self.model.act_inference(&obs).to_kind(Kind::Float).contiguous();
            Vec::<f32>::try_from(a.view([-1])).expect("f32 actions")
        };
        let w = self.action_size;
        for i in 0..n {
            let a: [f32; NUM_JOINTS] = raw[i * NUM_JOINTS..(i + 1) * NUM_JOINTS].try_into().expect("29");
            let row = &mut actions[i * w..(i + 1) * w];
            row.fill(0.0);
            for j in 0..NUM_JOINTS {
                row[j] = self.interface.target(j, a[j]) as f32;
            }
            self.last_action.insert(batch.episodes[i], a);
        }
    }

    fn end(&mut self, end: &EpisodeEnd) {
        self.last_action.remove(&end.episode_id);
    }
}
