//! An exported tracking policy as an arena agent: it builds the policy's observation from the
//! arena's robot-interface groups, keeps each episode's previous action, runs the model, and
//! answers with absolute joint targets in the G1 order (joint-position mode). The Rust twin of
//! the Python SDK's `TrackingPolicyAgent` + `OnnxPolicy`, for evaluating a file in the server.

use crate::config::{PolicyConfig, PolicyOverrides, Supply, UnsupportedPolicy};
use crate::engine::Engine;
use crate::terms::ObservationBuilder;
use arena_g1::{JOINT_NAMES, NUM_JOINTS};
use arena_sdk::protocol::{EpisodeEnd, EpisodeInfo, EpisodeSpec};
use arena_sdk::{Agent, Batch, ObservationLayout};
use std::collections::HashMap;
use std::path::Path;

/// The session's action mode whose actions are absolute joint targets.
pub const JOINT_POSITION_MODE: &str = "joint_position";

/// A loaded policy: its engine and what the arena needs to run it.
#[derive(Debug)]
pub struct OnnxPolicy {
    pub engine: Engine,
    pub config: PolicyConfig,
}

impl OnnxPolicy {
    /// Loads the file and reads its metadata with `overrides`; every problem at once, what the
    /// file lacks hinted at as `supply` takes it.
    pub fn load(path: &Path, overrides: &PolicyOverrides, supply: Supply) -> Result<Self, UnsupportedPolicy> {
        let what = path.display().to_string();
        let engine = Engine::load(path).map_err(|e| UnsupportedPolicy {
            what: what.clone(),
            problems: e.problems,
        })?;
        let mut problems = Vec::new();
        let config = match PolicyConfig::from_metadata(engine.metadata(), overrides, supply, &what) {
            Ok(c) => Some(c),
            Err(e) => {
                problems = e.problems;
                None
            }
        };
        if let Some(c) = &config
            && c.observation_size() != engine.obs_size()
        {
            let sizes: Vec<String> = c
                .observation_terms
                .iter()
                .map(|t| format!("{} {}", t.name, t.size()))
                .collect();
            problems.push(format!(
                "the model takes {} observation values; the policy's terms make {} ({})",
                engine.obs_size(),
                c.observation_size(),
                sizes.join(", ")
            ));
        }
        if engine.action_size() != NUM_JOINTS {
            problems.push(format!(
                "the model gives {} values per row, expected {NUM_JOINTS}",
                engine.action_size()
            ));
        }
        match config {
            Some(config) if problems.is_empty() => Ok(OnnxPolicy { engine, config }),
            _ => Err(UnsupportedPolicy { what, problems }),
        }
    }

    /// How the policy maps onto the arena, as JSON (what `arena-agent onnx --show` prints):
    /// the model's inputs, each observation term's columns and the arena source it is built
    /// from, the joint order, the anchor body, and the per-joint values in the G1 order.
    pub fn mapping(&self) -> serde_json::Value {
        let config = &self.config;
        let mut column = 0;
        let terms: Vec<serde_json::Value> = config
            .observation_terms
            .iter()
            .map(|t| {
                let columns = [column, column + t.size()];
                column += t.size();
                serde_json::json!({
                    "columns": columns,
                    "name": t.name,
                    "source": t.source.description,
                    "scale": (!t.scale.is_empty()).then_some(&t.scale),
                    "clip": t.clip.map(|(lo, hi)| [lo, hi]),
                })
            })
            .collect();
        let reordered = config
            .joint_names
            .iter()
            .map(String::as_str)
            .ne(JOINT_NAMES.iter().copied());
        let (kp, kd) = config.gains_g1().unzip();
        serde_json::json!({
            "convention": if config.convention.is_empty() { "none (overrides only)" } else { config.convention.as_str() },
            "model": {
                "observation_size": self.engine.obs_size(),
                "time_step_input": self.engine.takes_time_step(),
                "batch": if self.engine.batched() { "dynamic (one call per batch)" } else { "1 (one call per episode)" },
            },
            "joint_order": if reordered { "differs from the G1 order (mapped by name)" } else { "the G1 order" },
            "terms": terms,
            "anchor_body": config.anchor_body,
            "joint_stiffness": kp,
            "joint_damping": kd,
            "default_joint_pos": config.to_g1(&config.default_joint_pos),
            "action_scale": config.to_g1(&config.action_scale),
            "action_clip": config.action_clip,
            "targets": "q* = default_joint_pos + action_scale * action (joint_position mode)",
        })
    }
}

/// Runs an [`OnnxPolicy`]; targets q* = default + scale · action, in the G1 order.
#[derive(Debug)]
pub struct OnnxAgent {
    policy: OnnxPolicy,
    builder: ObservationBuilder,
    policy_to_g1: Vec<usize>,
    /// Episode id → the policy's last raw action (its own `actions` term).
    previous: HashMap<u32, [f32; NUM_JOINTS]>,
    /// Why the model could not run: [`Agent::failure`] reports it, and the client stops before
    /// it sends the step's actions (NaN, in case an agent loop ignores the failure).
    pub error: Option<String>,
    obs: Vec<f32>,
}

impl OnnxAgent {
    pub fn new(policy: OnnxPolicy) -> Self {
        let policy_to_g1 = policy.config.policy_to_g1();
        let builder = ObservationBuilder::new(
            policy.config.observation_terms.clone(),
            policy_to_g1.clone(),
            &policy.config.default_joint_pos,
        );
        Self {
            policy,
            builder,
            policy_to_g1,
            previous: HashMap::new(),
            error: None,
            obs: Vec::new(),
        }
    }

    pub fn policy(&self) -> &OnnxPolicy {
        &self.policy
    }

    /// Why this policy cannot run on a session with `spec` (empty: it can).
    pub fn problems(&self, spec: &EpisodeSpec) -> Vec<String> {
        session_problems(&self.policy.config, spec)
    }

    /// The observation rows of a batch (the model's input), for tests and diagnostics.
    pub fn observations(&self, batch: &Batch<'_>) -> Vec<f32> {
        let n = self.builder.size();
        let mut out = vec![0.0; batch.len() * n];
        for i in 0..batch.len() {
            let previous = self.previous_action(batch.episodes[i], batch.episode_steps[i]);
            self.builder
                .build_row(batch.observation(i), &previous, &mut out[i * n..(i + 1) * n]);
        }
        out
    }

    fn previous_action(&self, episode: u32, step: u32) -> [f32; NUM_JOINTS] {
        // Zeros at an episode's start, as in training.
        match self.previous.get(&episode) {
            Some(p) if step > 0 => *p,
            _ => [0.0; NUM_JOINTS],
        }
    }
}

impl Agent for OnnxAgent {
    fn configure(&mut self, spec: &EpisodeSpec) {
        self.builder.bind(&ObservationLayout::from_spec(spec));
        self.previous.clear();
    }

    fn check(&self, spec: &EpisodeSpec) -> Result<(), String> {
        let problems = self.problems(spec);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    fn reset(&mut self, episodes: &[EpisodeInfo]) {
        for e in episodes {
            self.previous.remove(&e.episode_id);
        }
    }

    fn act(&mut self, batch: &Batch<'_>, actions: &mut [f32]) {
        let n = batch.len();
        self.obs = self.observations(batch);
        // mjlab's time_step is the command's frame, one ahead of the robot: the episode step + 1.
        let times: Vec<f32> = batch.episode_steps.iter().map(|s| (*s + 1) as f32).collect();
        let raw = match self.policy.engine.run(&self.obs, &times, n) {
            Ok(raw) => raw,
            Err(e) => {
                // The problems without the file's path (a hosted run's is the server's).
                self.error = Some(e.problems.join("; "));
                actions.fill(f32::NAN);
                return;
            }
        };
        let config = &self.policy.config;
        for i in 0..n {
            let mut row = [0.0f32; NUM_JOINTS];
            row.copy_from_slice(&raw[i * NUM_JOINTS..(i + 1) * NUM_JOINTS]);
            if let Some(c) = config.action_clip {
                let c = c as f32;
                row.iter_mut().for_each(|a| *a = a.clamp(-c, c));
            }
            self.previous.insert(batch.episodes[i], row);
            let out = &mut actions[i * NUM_JOINTS..(i + 1) * NUM_JOINTS];
            for (p, g) in self.policy_to_g1.iter().enumerate() {
                out[*g] = config.default_joint_pos[p] as f32 + config.action_scale[p] as f32 * row[p];
            }
        }
    }

    fn end(&mut self, end: &EpisodeEnd) {
        self.previous.remove(&end.episode_id);
    }

    fn failure(&self) -> Option<String> {
        self.error.clone()
    }
}

/// Why a policy of `config` cannot run on a session with `spec` (empty: it can): the action
/// mode and size, the anchor body, and the groups its terms read.
pub fn session_problems(config: &PolicyConfig, spec: &EpisodeSpec) -> Vec<String> {
    let mut problems = Vec::new();
    if spec.action_mode != JOINT_POSITION_MODE {
        let mode = if spec.action_mode.is_empty() {
            "normalized"
        } else {
            &spec.action_mode
        };
        problems.push(format!(
            "the benchmark's action mode is '{mode}'; the policy's absolute joint targets need '{JOINT_POSITION_MODE}'"
        ));
    }
    if spec.action_size as usize != NUM_JOINTS {
        problems.push(format!(
            "the benchmark's actions have {} values, the policy gives {NUM_JOINTS}",
            spec.action_size
        ));
    }
    // "" from servers that do not say: torso_link.
    let anchor = if spec.anchor_body.is_empty() {
        "torso_link"
    } else {
        &spec.anchor_body
    };
    let own = &config.anchor_body;
    if !own.is_empty() && own != anchor {
        problems.push(format!(
            "the policy's anchor body is '{own}'; the benchmark's motion_anchor_* groups are relative to '{anchor}'"
        ));
    }
    let builder = ObservationBuilder::new(
        config.observation_terms.clone(),
        config.policy_to_g1(),
        &config.default_joint_pos,
    );
    problems.extend(builder.check(spec));
    problems
}
