//! The arena's PPO motion tracker as a plain-Rust agent (no libtorch): the actor of an
//! `arena-ppo` checkpoint (`policy.json` + `model.safetensors`) evaluated as the MLP it is, and
//! the agent that builds its 160 inputs from the robot-interface groups a joint-position
//! benchmark sends (docs/ppo-tracker.md §2, docs/protocol.md §5) and answers absolute joint
//! targets. `arena-ppo` evaluates and serves with it, and `arena demo` runs the committed tracker.

use crate::agent::{Agent, Batch};
use crate::layout::ObservationLayout;
use crate::protocol::{EpisodeEnd, EpisodeInfo, EpisodeSpec};
use arena_g1::Group;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

/// Joints of the G1.
pub const JOINTS: usize = arena_g1::NUM_JOINTS;
/// The actor's input size and terms (mjlab's `policy` group, in order).
pub const ACTOR_DIM: usize = 160;
pub const OBSERVATION_NAMES: [&str; 8] = [
    "command",
    "motion_anchor_pos_b",
    "motion_anchor_ori_b",
    "base_lin_vel",
    "base_ang_vel",
    "joint_pos",
    "joint_vel",
    "actions",
];
/// The robot-interface groups the inputs are built from.
pub const REQUIRED_GROUPS: [Group; 6] = [
    Group::MotionCommand,
    Group::MotionAnchorPosB,
    Group::MotionAnchorOriB,
    Group::BaseLinVel,
    Group::Imu,
    Group::Motors,
];
/// rsl_rl's normaliser epsilon: y = (x − μ)/(σ + 0.01).
pub const NORMALIZER_EPS: f32 = 1e-2;

/// `policy.json` of an `arena-ppo` checkpoint: what serving and exporting the actor need.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrackerCard {
    pub benchmark: String,
    pub gain_preset: String,
    pub joint_names: Vec<String>,
    pub joint_stiffness: Vec<f64>,
    pub joint_damping: Vec<f64>,
    pub default_joint_pos: Vec<f64>,
    pub action_scale: Vec<f64>,
    pub observation_names: Vec<String>,
    pub anchor_body_name: String,
    pub actor_hidden: Vec<i64>,
    pub critic_hidden: Vec<i64>,
    /// The range (rad) each joint's target is clamped into, as training clamps it (the joint's
    /// range widened by the arena's margin, less 1 mrad: a target the arena accepts). Empty in
    /// cards written before it: no clamp.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joint_target_range: Vec<[f64; 2]>,
}

impl TrackerCard {
    /// Joint `j`'s target for raw action `a`: default + scale·a, clamped into the trained range.
    pub fn target(&self, j: usize, a: f32) -> f64 {
        let q = self.default_joint_pos[j] + self.action_scale[j] * a as f64;
        match self.joint_target_range.get(j) {
            Some(&[lo, hi]) => q.clamp(lo, hi),
            None => q,
        }
    }
}

/// One dense layer, row-major weight `[out, in]`.
#[derive(Debug, Clone)]
pub struct Dense {
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
    pub input: usize,
    pub output: usize,
}

/// The actor: normaliser, then linear layers with ELU between them; the output is the mean
/// action (what the policy deploys).
#[derive(Debug, Clone)]
pub struct TrackerPolicy {
    pub card: TrackerCard,
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
    pub layers: Vec<Dense>,
}

fn elu(x: f32) -> f32 {
    if x > 0.0 { x } else { x.exp_m1() }
}

impl TrackerPolicy {
    /// Checks the sizes against the card; names what is wrong.
    pub fn new(card: TrackerCard, mean: Vec<f32>, std: Vec<f32>, layers: Vec<Dense>) -> Result<Self, String> {
        if card.observation_names != OBSERVATION_NAMES {
            return Err(format!(
                "observation terms {:?}, expected {:?}",
                card.observation_names, OBSERVATION_NAMES
            ));
        }
        for (key, v) in [
            ("joint_stiffness", &card.joint_stiffness),
            ("joint_damping", &card.joint_damping),
            ("default_joint_pos", &card.default_joint_pos),
            ("action_scale", &card.action_scale),
        ] {
            if v.len() != JOINTS {
                return Err(format!("{key} has {} values, expected {JOINTS}", v.len()));
            }
            if let Some(j) = v.iter().position(|x| !x.is_finite()) {
                return Err(format!("{key} of joint {j} is {}: expected a finite number", v[j]));
            }
        }
        // Targets are default + scale · action, and an export's action bounds divide by the
        // scale: a scale of zero or below would make those bounds hold one value, or none.
        if let Some(j) = card.action_scale.iter().position(|s| *s <= 0.0) {
            return Err(format!(
                "action_scale of joint {j} is {}: expected a positive number",
                card.action_scale[j]
            ));
        }
        let ranges = &card.joint_target_range;
        if !ranges.is_empty() && ranges.len() != JOINTS {
            return Err(format!(
                "joint_target_range has {} ranges, expected {JOINTS} (or none)",
                ranges.len()
            ));
        }
        if let Some(j) = ranges
            .iter()
            .position(|[lo, hi]| !(lo.is_finite() && hi.is_finite() && lo < hi))
        {
            return Err(format!(
                "joint_target_range of joint {j} is {:?}: expected finite bounds, lower below upper",
                ranges[j]
            ));
        }
        if mean.len() != ACTOR_DIM || std.len() != ACTOR_DIM {
            return Err(format!(
                "normaliser of {} / {} values, expected {ACTOR_DIM}",
                mean.len(),
                std.len()
            ));
        }
        let mut width = ACTOR_DIM;
        for (k, l) in layers.iter().enumerate() {
            if l.input != width || l.weight.len() != l.input * l.output || l.bias.len() != l.output {
                return Err(format!("layer {k}: shapes do not chain (input {width})"));
            }
            width = l.output;
        }
        if width != JOINTS || layers.is_empty() {
            return Err(format!("the actor ends with {width} outputs, expected {JOINTS}"));
        }
        Ok(TrackerPolicy {
            card,
            mean,
            std,
            layers,
        })
    }

    /// Loads `policy.json` and the actor of `model.safetensors` from a checkpoint folder.
    pub fn load(dir: &Path) -> Result<Self, String> {
        let card_path = dir.join("policy.json");
        let text = std::fs::read_to_string(&card_path).map_err(|e| {
            // A run folder given for its checkpoint: point at the checkpoint.
            let inner = dir.join("checkpoint");
            let hint = match inner.join("policy.json").is_file() {
                true => format!(" (a run folder? its checkpoint is {})", inner.display()),
                false => String::new(),
            };
            format!("{}: {e}{hint}", card_path.display())
        })?;
        let card: TrackerCard = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", card_path.display()))?;
        let path = dir.join("model.safetensors");
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let tensors = safetensors::SafeTensors::deserialize(&bytes)
            .map_err(|e| format!("{}: not a safetensors file ({e:?})", path.display()))?;
        let read = |name: &str| -> Result<(Vec<f32>, Vec<usize>), String> {
            let t = tensors
                .tensor(name)
                .map_err(|_| format!("{}: tensor {name} is missing", path.display()))?;
            if t.dtype() != safetensors::Dtype::F32 {
                return Err(format!(
                    "{}: tensor {name} is {:?}, expected F32",
                    path.display(),
                    t.dtype()
                ));
            }
            let values = t
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            Ok((values, t.shape().to_vec()))
        };
        let (mean, _) = read("actor_obs_normalizer._mean")?;
        let (std, _) = read("actor_obs_normalizer._std")?;
        let mut layers = Vec::new();
        for k in 0..=card.actor_hidden.len() {
            let (weight, shape) = read(&format!("actor.{}.weight", 2 * k))?;
            let (bias, _) = read(&format!("actor.{}.bias", 2 * k))?;
            if shape.len() != 2 {
                return Err(format!("{}: actor.{}.weight is not a matrix", path.display(), 2 * k));
            }
            layers.push(Dense {
                weight,
                bias,
                input: shape[1],
                output: shape[0],
            });
        }
        Self::new(card, mean, std, layers).map_err(|e| format!("{}: {e}", dir.display()))
    }

    /// The mean action of one input row.
    pub fn act(&self, input: &[f32]) -> [f32; JOINTS] {
        let mut x: Vec<f32> = input
            .iter()
            .zip(self.mean.iter().zip(&self.std))
            .map(|(v, (m, s))| (v - m) / (s + NORMALIZER_EPS))
            .collect();
        let last = self.layers.len() - 1;
        for (k, l) in self.layers.iter().enumerate() {
            let mut y = l.bias.clone();
            for (o, yo) in y.iter_mut().enumerate() {
                let row = &l.weight[o * l.input..(o + 1) * l.input];
                *yo += row.iter().zip(&x).map(|(w, v)| w * v).sum::<f32>();
            }
            if k < last {
                y.iter_mut().for_each(|v| *v = elu(*v));
            }
            x = y;
        }
        x.try_into().expect("the last layer has 29 outputs")
    }
}

/// The tracker behind the SDK's [`Agent`] trait.
#[derive(Debug)]
pub struct TrackerAgent {
    policy: TrackerPolicy,
    ranges: HashMap<&'static str, Range<usize>>,
    action_size: usize,
    last_action: HashMap<u32, [f32; JOINTS]>,
}

impl TrackerAgent {
    pub fn new(policy: TrackerPolicy) -> Self {
        TrackerAgent {
            policy,
            ranges: HashMap::new(),
            action_size: JOINTS,
            last_action: HashMap::new(),
        }
    }

    pub fn policy(&self) -> &TrackerPolicy {
        &self.policy
    }

    /// The actor's input for one observation row of the session's layout.
    pub fn actor_input(&self, row: &[f32], last: &[f32; JOINTS], out: &mut [f32]) {
        let g = |name: &str| &row[self.ranges[name].clone()];
        let j = JOINTS;
        out[..2 * j].copy_from_slice(g("motion_command"));
        out[2 * j..2 * j + 3].copy_from_slice(g("motion_anchor_pos_b"));
        out[2 * j + 3..2 * j + 9].copy_from_slice(g("motion_anchor_ori_b"));
        out[2 * j + 9..2 * j + 12].copy_from_slice(g("base_lin_vel"));
        out[2 * j + 12..2 * j + 15].copy_from_slice(&g("imu")[4..7]);
        let motors = g("motors");
        let o = 2 * j + 15;
        for k in 0..j {
            out[o + k] = motors[k] - self.policy.card.default_joint_pos[k] as f32;
        }
        out[o + j..o + 2 * j].copy_from_slice(&motors[j..2 * j]);
        out[o + 2 * j..o + 3 * j].copy_from_slice(last);
    }
}

impl Agent for TrackerAgent {
    fn configure(&mut self, spec: &EpisodeSpec) {
        let layout = ObservationLayout::from_spec(spec);
        self.ranges = REQUIRED_GROUPS
            .iter()
            .filter_map(|g| layout.group(g.name()).map(|r| (g.name(), r)))
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
            .map(|g| g.name())
            .filter(|g| !self.ranges.contains_key(g))
            .collect();
        if !missing.is_empty() {
            return Err(format!("the benchmark does not send {}", missing.join(", ")));
        }
        for g in REQUIRED_GROUPS {
            let announced = self.ranges[g.name()].len();
            if announced != g.size() {
                return Err(format!(
                    "the session announces {} values of {}, the G1's group has {}",
                    announced,
                    g.name(),
                    g.size()
                ));
            }
        }
        if self.action_size != JOINTS && self.action_size != 2 * JOINTS {
            return Err(format!("action size {} (expected 29 or 58)", self.action_size));
        }
        let card = &self.policy.card;
        for (what, announced, trained) in [
            ("stiffness", &spec.joint_stiffness, &card.joint_stiffness),
            ("damping", &spec.joint_damping, &card.joint_damping),
        ] {
            if announced.len() != JOINTS {
                return Err(format!("the server announced {} joint {what} values", announced.len()));
            }
            for j in 0..JOINTS {
                if (announced[j] - trained[j]).abs() > 1e-6 * trained[j].abs().max(1.0) {
                    return Err(format!(
                        "{}: the session's {what} is {}, the policy was trained with {}",
                        card.joint_names.get(j).map_or("?", String::as_str),
                        announced[j],
                        trained[j]
                    ));
                }
            }
        }
        Ok(())
    }

    fn reset(&mut self, episodes: &[EpisodeInfo]) {
        for e in episodes {
            self.last_action.insert(e.episode_id, [0.0; JOINTS]);
        }
    }

    fn act(&mut self, batch: &Batch<'_>, actions: &mut [f32]) {
        let card = &self.policy.card;
        let w = self.action_size;
        let mut input = [0.0f32; ACTOR_DIM];
        for i in 0..batch.len() {
            let id = batch.episodes[i];
            let last = self.last_action.get(&id).copied().unwrap_or([0.0; JOINTS]);
            self.actor_input(batch.observation(i), &last, &mut input);
            let a = self.policy.act(&input);
            let row = &mut actions[i * w..(i + 1) * w];
            row.fill(0.0);
            for j in 0..JOINTS {
                row[j] = card.target(j, a[j]) as f32;
            }
            self.last_action.insert(id, a);
        }
    }

    fn end(&mut self, end: &EpisodeEnd) {
        self.last_action.remove(&end.episode_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(ranges: Vec<[f64; 2]>) -> TrackerCard {
        TrackerCard {
            benchmark: "g1-smoke-robot".into(),
            gain_preset: "armature".into(),
            joint_names: (0..JOINTS).map(|j| format!("joint{j}")).collect(),
            joint_stiffness: vec![40.0; JOINTS],
            joint_damping: vec![2.0; JOINTS],
            default_joint_pos: vec![0.1; JOINTS],
            action_scale: vec![0.5; JOINTS],
            observation_names: OBSERVATION_NAMES.iter().map(|s| s.to_string()).collect(),
            anchor_body_name: "torso_link".into(),
            actor_hidden: vec![],
            critic_hidden: vec![],
            joint_target_range: ranges,
        }
    }

    fn one_layer() -> Vec<Dense> {
        vec![Dense {
            weight: vec![0.0; ACTOR_DIM * JOINTS],
            bias: vec![0.0; JOINTS],
            input: ACTOR_DIM,
            output: JOINTS,
        }]
    }

    #[test]
    fn targets_are_clamped_into_the_trained_ranges_when_the_card_has_them() {
        let clamped = card(vec![[-1.0, 1.0]; JOINTS]);
        assert_eq!(clamped.target(3, 0.5), 0.1 + 0.25);
        assert_eq!(clamped.target(3, 10.0), 1.0);
        assert_eq!(clamped.target(3, -10.0), -1.0);
        // A card written before the ranges existed: no clamp.
        let json = serde_json::to_string(&card(Vec::new())).unwrap();
        assert!(!json.contains("joint_target_range"), "{json}");
        let old: TrackerCard = serde_json::from_str(&json).unwrap();
        assert_eq!(old.target(3, 10.0), 0.1 + 5.0);
    }

    #[test]
    fn a_card_with_bad_ranges_is_refused_naming_them() {
        let layers = one_layer();
        let new = |ranges| TrackerPolicy::new(card(ranges), vec![0.0; ACTOR_DIM], vec![1.0; ACTOR_DIM], layers.clone());
        assert!(new(vec![[-1.0, 1.0]; JOINTS]).is_ok());
        let err = new(vec![[-1.0, 1.0]; 3]).unwrap_err();
        assert!(err.contains("joint_target_range has 3 ranges, expected 29"), "{err}");
        let mut ranges = vec![[-1.0, 1.0]; JOINTS];
        ranges[7] = [1.0, -1.0];
        let err = new(ranges).unwrap_err();
        assert!(err.contains("joint_target_range of joint 7"), "{err}");
        // The export divides the action bounds by the scale: zero or below is refused, as is a
        // value that is not a number.
        for (value, words) in [
            (0.0, "expected a positive number"),
            (-0.5, "expected a positive number"),
            (f64::NAN, "expected a finite number"),
        ] {
            let mut bad = card(Vec::new());
            bad.action_scale[4] = value;
            let err = TrackerPolicy::new(bad, vec![0.0; ACTOR_DIM], vec![1.0; ACTOR_DIM], layers.clone()).unwrap_err();
            assert!(err.contains("action_scale of joint 4") && err.contains(words), "{err}");
        }
    }
}
