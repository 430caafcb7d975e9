//! The training configuration file (TOML): a model preset (or explicit sizes), the agent's
//! hyper-parameters and the run's settings, validated with errors that name the key.

use crate::config::{AgentConfig, ModelConfig, PRESETS};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The run: environment, schedule, evaluation and checkpoints (BFM_ZERO_FACTS §8 defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    pub seed: u64,
    /// Benchmark whose motions are trained on and whose episodes evaluate the agent.
    pub benchmark: String,
    /// Folder of benchmark files (default: the shipped `benchmarks/`).
    pub benchmarks_dir: Option<PathBuf>,
    /// Root that file-based motion sets resolve against.
    pub motions_root: Option<PathBuf>,
    pub num_envs: usize,
    /// Simulation threads (0 = one per core).
    pub threads: usize,
    /// Physics backend: `cpu` (MuJoCo) or `gpu` (MuJoCo MJX worker; `ARENA_GPU_PYTHON`,
    /// docs/gpu-backend.md). Exact resume holds on `cpu`.
    pub sim_backend: String,
    pub num_env_steps: u64,
    /// Uniform random actions and no updates for the first steps.
    pub num_seed_steps: u64,
    /// Env steps between rounds of updates, and updates per round.
    pub update_agent_every: u64,
    pub num_agent_updates: usize,
    /// Online buffer capacity in transitions (rounded down to whole env steps).
    pub buffer_size: u64,
    pub episode_length_s: f64,
    /// Share of episode starts lying down (root at 0.5 m turned ±90° about world x, §4.4).
    pub lie_down_probability: f64,
    /// Domain-randomisation level 0-3 of training episodes.
    pub dr_level: u8,
    /// Keep the PD-gain randomisation (levels 2, 3) and the control delay (level 3) of the
    /// arena's levels; off by default, as in BFM-Zero's training.
    pub dr_gains_and_delay: bool,
    pub update_z_every_step: u64,
    pub rollout_expert_trajectories: bool,
    pub rollout_expert_length: usize,
    pub rollout_expert_fraction: f64,
    /// Reference rows averaged into a tracking z (rollouts and evaluation).
    pub tracking_window: usize,
    pub eval_every_steps: u64,
    pub checkpoint_every_steps: u64,
    pub log_every_steps: u64,
    /// EMD-prioritised motion sampling after each evaluation (§7.4, exp mode).
    pub prioritization: bool,
    /// Save the online and z buffers with each checkpoint (needed for an exact resume).
    pub save_buffer: bool,
    /// Envs of the evaluation runs.
    pub eval_batch: usize,
    /// A checkpoint or export folder (holding `model/`) whose networks initialise a new run; the
    /// networks it lacks start from the seed (`arena-bfm export` makes one small enough to bring
    /// back from a GPU machine). Not used when resuming: the run's checkpoint has everything.
    pub init_from: Option<PathBuf>,
}

impl RunConfig {
    /// The physics backend `sim_backend` names (GPU options from the environment).
    pub fn backend(&self) -> arena_sim::SimBackend {
        match self.sim_backend.as_str() {
            "gpu" => arena_sim::SimBackend::Gpu(arena_sim::handler::GpuOptions::default()),
            _ => arena_sim::SimBackend::Cpu,
        }
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            seed: 4728,
            benchmark: "g1-smoke".into(),
            benchmarks_dir: None,
            motions_root: None,
            num_envs: 1024,
            threads: 0,
            sim_backend: "cpu".into(),
            num_env_steps: 384_000_000,
            num_seed_steps: 10_240,
            update_agent_every: 1024,
            num_agent_updates: 16,
            buffer_size: 5_120_000,
            episode_length_s: 10.0,
            lie_down_probability: 0.3,
            dr_level: 3,
            dr_gains_and_delay: false,
            update_z_every_step: 100,
            rollout_expert_trajectories: true,
            rollout_expert_length: 250,
            rollout_expert_fraction: 0.5,
            tracking_window: 8,
            eval_every_steps: 9_600_000,
            checkpoint_every_steps: 9_600_000,
            log_every_steps: 384_000,
            prioritization: true,
            save_buffer: true,
            eval_batch: 16,
            init_from: None,
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// `paper`, `small` or `tiny`; `[model]` replaces it when present.
    #[serde(default = "default_preset")]
    pub preset: String,
    #[serde(default)]
    pub model: Option<ModelConfig>,
    #[serde(default)]
    pub agent: AgentConfig,
    #[serde(default)]
    pub train: RunConfig,
}

fn default_preset() -> String {
    "paper".into()
}

impl TrainConfig {
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let config: TrainConfig = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        config.validate().map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(config)
    }

    /// The model sizes: `[model]` if given, else the preset.
    pub fn model_config(&self) -> Result<ModelConfig, String> {
        match &self.model {
            Some(m) => Ok(m.clone()),
            None => ModelConfig::preset(&self.preset).ok_or_else(|| {
                format!(
                    "preset: unknown preset `{}` (known: {})",
                    self.preset,
                    PRESETS.join(", ")
                )
            }),
        }
    }

    /// Applies one `section.key=value` override (the value in TOML syntax).
    /// A `model.*` key on a config without `[model]` changes the preset's sizes (the override
    /// alone would be a `[model]` of one key, refused for the keys it lacks).
    pub fn set(&mut self, assignment: &str) -> Result<(), String> {
        let mut base = self.clone();
        if assignment.trim_start().starts_with("model.") && base.model.is_none() {
            base.model = Some(
                self.model_config()
                    .map_err(|e| format!("override `{assignment}`: {e}"))?,
            );
        }
        let updated: TrainConfig = arena_torch::cli::apply_override(&base, assignment)?;
        updated
            .validate()
            .map_err(|e| format!("override `{assignment}`: {e}"))?;
        *self = updated;
        Ok(())
    }

    pub fn validate(&self) -> Result<(), String> {
        let model = self.model_config()?;
        model.validate()?;
        self.agent.validate()?;
        let t = &self.train;
        let positive = [
            ("num_envs", t.num_envs as u64),
            ("update_agent_every", t.update_agent_every),
            ("eval_every_steps", t.eval_every_steps),
            ("checkpoint_every_steps", t.checkpoint_every_steps),
            ("log_every_steps", t.log_every_steps),
            ("update_z_every_step", t.update_z_every_step),
            ("rollout_expert_length", t.rollout_expert_length as u64),
            ("tracking_window", t.tracking_window as u64),
            ("eval_batch", t.eval_batch as u64),
        ];
        for (key, v) in positive {
            if v == 0 {
                return Err(format!("train.{key} must be > 0"));
            }
        }
        if t.buffer_size < 2 * t.num_envs as u64 {
            return Err(format!(
                "train.buffer_size ({}) must hold at least 2 steps of train.num_envs ({})",
                t.buffer_size, t.num_envs
            ));
        }
        if !matches!(t.sim_backend.as_str(), "cpu" | "gpu") {
            return Err(format!(
                "train.sim_backend must be \"cpu\" or \"gpu\", got {:?}",
                t.sim_backend
            ));
        }
        if t.dr_level > 3 {
            return Err(format!("train.dr_level must be 0-3, got {}", t.dr_level));
        }
        if !(t.episode_length_s > 0.0 && t.episode_length_s.is_finite()) {
            return Err(format!(
                "train.episode_length_s must be > 0, got {}",
                t.episode_length_s
            ));
        }
        if !(0.0..=1.0).contains(&t.lie_down_probability) {
            return Err(format!(
                "train.lie_down_probability must lie in [0, 1], got {}",
                t.lie_down_probability
            ));
        }
        if !(0.0..=1.0).contains(&t.rollout_expert_fraction) {
            return Err(format!(
                "train.rollout_expert_fraction must lie in [0, 1], got {}",
                t.rollout_expert_fraction
            ));
        }
        Ok(())
    }
}
