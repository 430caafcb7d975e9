//! The training configuration (TOML): the MDP (docs/ppo-tracker.md §1-8), PPO (§9), the
//! networks and the run. Every key has a default (the proposal of §11.2, which differs from the
//! recipe only where measured); unknown keys and bad values are refused naming the key.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct PpoTrainConfig {
    pub env: EnvConfig,
    pub rewards: RewardConfig,
    pub terminations: TerminationConfig,
    pub init: InitConfig,
    pub sampling: SamplingConfig,
    pub noise: NoiseConfig,
    pub dr: DrConfig,
    pub ppo: PpoConfig,
    pub network: NetworkConfig,
    pub run: RunConfig,
}

/// The benchmark whose motions are tracked and how the envs run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvConfig {
    /// Benchmark name (its motions are the training set; evaluation runs it as it is scored).
    pub benchmark: String,
    /// Folder of benchmark TOMLs (default: the shipped `benchmarks/`).
    pub benchmarks_dir: Option<PathBuf>,
    /// Root the benchmark's motion paths are relative to (`arena-ppo train --motions-root`,
    /// or `$ARENA_MOTIONS_ROOT`, wins; without either, the working folder).
    pub motions_root: Option<PathBuf>,
    pub num_envs: usize,
    /// Simulator worker threads (0 = all cores).
    pub threads: usize,
    /// Physics backend of the envs: `cpu` (MuJoCo on CPU threads; runs resume exactly) or `gpu`
    /// (the GPU worker: MuJoCo Warp or MJX, docs/gpu-backend.md; its Python from
    /// `ARENA_GPU_PYTHON`; not bit-deterministic on a GPU).
    pub sim_backend: String,
    /// GPU backend only: `auto` (MuJoCo Warp on a CUDA device, else MJX), `jax` or `warp`.
    pub gpu_impl: String,
    /// GPU backend only: where the physics runs, `auto`, `cpu` or `gpu`.
    pub gpu_device: String,
    /// Control steps per env in one rollout.
    pub steps_per_env: usize,
    /// Episode cap (s): the recipe's 10 s time-out.
    pub episode_length_s: f64,
    /// PD gains the policy's targets are tracked with: a preset of the `joint_position` action
    /// mode (`armature`, the recipe's; or `arena`, the normalized mode's gains).
    pub gains: String,
    /// Action scale per joint = `action_scale_factor`·effort/kp (the recipe's 0.25).
    pub action_scale_factor: f64,
    /// Lets `gpu_impl = "stub"` through (no physics: what the rest of training costs). Only code
    /// sets it (`examples/training_throughput.rs --stub-physics`); a configuration cannot.
    #[serde(skip)]
    pub allow_stub_physics: bool,
}

impl Default for EnvConfig {
    fn default() -> Self {
        Self {
            benchmark: "g1-smoke-robot".into(),
            benchmarks_dir: None,
            motions_root: None,
            num_envs: 128,
            threads: 2,
            sim_backend: "cpu".into(),
            gpu_impl: "auto".into(),
            gpu_device: "auto".into(),
            steps_per_env: 24,
            episode_length_s: 10.0,
            gains: "armature".into(),
            action_scale_factor: 0.25,
            allow_stub_physics: false,
        }
    }
}

/// Weights of the reward terms (per second: the step reward is Σ weight·term·0.02) and the σ of
/// the exponential kernels (§4.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RewardConfig {
    pub anchor_pos: f64,
    pub anchor_pos_std: f64,
    pub anchor_ori: f64,
    pub anchor_ori_std: f64,
    pub body_pos: f64,
    pub body_pos_std: f64,
    pub body_ori: f64,
    pub body_ori_std: f64,
    pub body_lin_vel: f64,
    pub body_lin_vel_std: f64,
    pub body_ang_vel: f64,
    pub body_ang_vel_std: f64,
    pub action_rate: f64,
    pub joint_limit: f64,
    pub undesired_contacts: f64,
}

impl Default for RewardConfig {
    fn default() -> Self {
        Self {
            anchor_pos: 0.5,
            anchor_pos_std: 0.3,
            anchor_ori: 0.5,
            anchor_ori_std: 0.4,
            body_pos: 1.0,
            body_pos_std: 0.3,
            body_ori: 1.0,
            body_ori_std: 0.4,
            body_lin_vel: 1.0,
            body_lin_vel_std: 1.0,
            body_ang_vel: 1.0,
            // The recipe's literal value, not π.
            #[allow(clippy::approx_constant)]
            body_ang_vel_std: 3.14,
            // The recipe's −0.1 with std 1 makes falling pay early (§11.1 pitfall 1).
            action_rate: -0.01,
            joint_limit: -10.0,
            undesired_contacts: -0.1,
        }
    }
}

/// Failure thresholds (§5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TerminationConfig {
    /// |z_ref − z_robot| of the anchor (m).
    pub anchor_height: f64,
    /// |g_z,ref − g_z,robot| of the anchor's projected gravity.
    pub anchor_ori: f64,
    /// |z_ref − z_robot| of any end effector (m).
    pub end_effector_height: f64,
}

impl Default for TerminationConfig {
    fn default() -> Self {
        Self {
            anchor_height: 0.25,
            anchor_ori: 0.8,
            end_effector_height: 0.25,
        }
    }
}

/// Reference-state initialisation noise (§6.1), as multiples of the recipe's ranges
/// (0 = the reference state exactly).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InitConfig {
    pub pose_noise: f64,
    pub velocity_noise: f64,
    pub joint_noise: f64,
}

impl Default for InitConfig {
    fn default() -> Self {
        Self {
            pose_noise: 1.0,
            velocity_noise: 1.0,
            joint_noise: 1.0,
        }
    }
}

/// Adaptive sampling of start times by failure rate (§6.2), over one histogram of one-second
/// bins of every motion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SamplingConfig {
    pub adaptive: bool,
    /// EMA rate of the failure histogram per control step.
    pub alpha: f64,
    /// Uniform share at the recipe's 4096 envs; scaled by num_envs/4096 (§11.2).
    pub uniform_ratio: f64,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self {
            adaptive: true,
            alpha: 0.001,
            uniform_ratio: 0.1,
        }
    }
}

/// Observation noise on the actor's input during training (§2), as a multiple of the recipe's
/// ranges (0 = none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NoiseConfig {
    pub scale: f64,
}

impl Default for NoiseConfig {
    fn default() -> Self {
        Self { scale: 0.0 }
    }
}

/// Domain randomisation: the simulator's levels (`simulator/src/dr.rs`; 0 = none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct DrConfig {
    pub level: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LrSchedule {
    Fixed,
    /// rsl_rl's rule: per minibatch, ÷1.5 above 2·desired_kl, ×1.5 below desired_kl/2.
    Adaptive,
}

/// PPO (rsl_rl's names and defaults unless the comment says otherwise).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PpoConfig {
    pub learning_rate: f64,
    pub schedule: LrSchedule,
    pub desired_kl: f64,
    pub num_learning_epochs: usize,
    pub num_mini_batches: usize,
    pub clip_param: f64,
    pub gamma: f64,
    pub lam: f64,
    pub value_loss_coef: f64,
    pub entropy_coef: f64,
    pub max_grad_norm: f64,
    pub use_clipped_value_loss: bool,
    pub init_noise_std: f64,
}

impl Default for PpoConfig {
    fn default() -> Self {
        Self {
            // The recipe's adaptive 1e-3 sat at its floor on 128 envs (§11.1 pitfall 2).
            learning_rate: 3e-4,
            schedule: LrSchedule::Fixed,
            desired_kl: 0.01,
            num_learning_epochs: 5,
            num_mini_batches: 4,
            clip_param: 0.2,
            gamma: 0.99,
            lam: 0.95,
            value_loss_coef: 1.0,
            entropy_coef: 0.005,
            max_grad_norm: 1.0,
            use_clipped_value_loss: true,
            init_noise_std: 1.0,
        }
    }
}

/// Hidden layer sizes (ELU between them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    pub actor_hidden: Vec<i64>,
    pub critic_hidden: Vec<i64>,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            actor_hidden: vec![256, 128, 64],
            critic_hidden: vec![256, 128, 64],
        }
    }
}

/// Counting, logging, evaluation and checkpoints (in PPO iterations).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    pub seed: u64,
    /// Stop after this many iterations (0 = no limit; `--time-limit` stops earlier).
    pub max_iterations: u64,
    /// A train_log.csv row every this many iterations (a divisor of `checkpoint_every`, so that
    /// a resumed run's rows cover the windows of an uninterrupted one).
    pub log_every: u64,
    /// Checkpoint every this many iterations; every env starts a new episode there, which
    /// makes a resumed run continue exactly.
    pub checkpoint_every: u64,
    /// Evaluate (every episode of the benchmark) every this many iterations (0 = never during
    /// training).
    pub eval_every: u64,
    /// Start from the weights and normaliser statistics of this checkpoint (same network sizes;
    /// the optimiser starts fresh), e.g. a g1-smoke tracker for a dance run.
    pub init_from: Option<PathBuf>,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            seed: 42,
            max_iterations: 0,
            log_every: 1,
            checkpoint_every: 50,
            eval_every: 200,
            init_from: None,
        }
    }
}

impl PpoTrainConfig {
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let config: Self = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        config.validate().map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(config)
    }

    /// Applies every `section.key=value` override, then validates the result once: rules across
    /// keys (`run.log_every` divides `run.checkpoint_every`) hold for the whole set, whatever
    /// the order the overrides are given in.
    pub fn set_all<S: AsRef<str>>(&mut self, assignments: &[S]) -> Result<(), String> {
        let mut updated = self.clone();
        for assignment in assignments {
            updated = arena_torch::cli::apply_override(&updated, assignment.as_ref())?;
        }
        if !assignments.is_empty() {
            updated.validate().map_err(|e| format!("with the overrides: {e}"))?;
        }
        *self = updated;
        Ok(())
    }

    /// Applies one `section.key=value` override and validates the result.
    pub fn set(&mut self, assignment: &str) -> Result<(), String> {
        let updated: Self = arena_torch::cli::apply_override(self, assignment)?;
        updated
            .validate()
            .map_err(|e| format!("override `{assignment}`: {e}"))?;
        *self = updated;
        Ok(())
    }

    /// The envs' physics backend (`env.sim_backend`, `env.gpu_impl`, `env.gpu_device`).
    pub fn sim_backend(&self) -> Result<arena_sim::SimBackend, String> {
        use arena_sim::handler::{GpuDevice, GpuImpl, GpuOptions};
        let e = &self.env;
        match e.sim_backend.as_str() {
            "cpu" => Ok(arena_sim::SimBackend::Cpu),
            "gpu" => {
                let implementation: GpuImpl = e.gpu_impl.parse().map_err(|m| format!("env.gpu_impl: {m}"))?;
                if implementation == GpuImpl::Stub && !e.allow_stub_physics {
                    return Err("env.gpu_impl: \"stub\" has no physics; use auto, jax or warp".into());
                }
                let device: GpuDevice = e.gpu_device.parse().map_err(|m| format!("env.gpu_device: {m}"))?;
                Ok(arena_sim::SimBackend::Gpu(GpuOptions {
                    implementation,
                    device,
                    ..GpuOptions::default()
                }))
            }
            other => Err(format!("env.sim_backend must be \"cpu\" or \"gpu\", got {other:?}")),
        }
    }

    /// Samples per rollout.
    pub fn batch_size(&self) -> usize {
        self.env.num_envs * self.env.steps_per_env
    }

    pub fn validate(&self) -> Result<(), String> {
        let e = &self.env;
        for (key, v) in [
            ("env.num_envs", e.num_envs),
            ("env.steps_per_env", e.steps_per_env),
            ("ppo.num_learning_epochs", self.ppo.num_learning_epochs),
            ("ppo.num_mini_batches", self.ppo.num_mini_batches),
        ] {
            if v == 0 {
                return Err(format!("{key} must be > 0"));
            }
        }
        for (key, v) in [
            ("run.log_every", self.run.log_every),
            ("run.checkpoint_every", self.run.checkpoint_every),
        ] {
            if v == 0 {
                return Err(format!("{key} must be > 0"));
            }
        }
        if !self.run.checkpoint_every.is_multiple_of(self.run.log_every) {
            // A resume starts a log row's window at its checkpoint: with a row across it, the
            // resumed run's row would cover another window than the uninterrupted run's.
            return Err(format!(
                "run.log_every ({}) must divide run.checkpoint_every ({})",
                self.run.log_every, self.run.checkpoint_every
            ));
        }
        if self.batch_size() < self.ppo.num_mini_batches {
            return Err(format!(
                "ppo.num_mini_batches ({}) exceeds the rollout's {} samples",
                self.ppo.num_mini_batches,
                self.batch_size()
            ));
        }
        self.sim_backend()?;
        if !matches!(e.gains.as_str(), "armature" | "arena") {
            return Err(format!(
                "env.gains must be \"armature\" or \"arena\", got {:?}",
                e.gains
            ));
        }
        let r = &self.rewards;
        let t = &self.terminations;
        let positive = [
            ("env.episode_length_s", e.episode_length_s),
            ("env.action_scale_factor", e.action_scale_factor),
            ("rewards.anchor_pos_std", r.anchor_pos_std),
            ("rewards.anchor_ori_std", r.anchor_ori_std),
            ("rewards.body_pos_std", r.body_pos_std),
            ("rewards.body_ori_std", r.body_ori_std),
            ("rewards.body_lin_vel_std", r.body_lin_vel_std),
            ("rewards.body_ang_vel_std", r.body_ang_vel_std),
            ("terminations.anchor_height", t.anchor_height),
            ("terminations.anchor_ori", t.anchor_ori),
            ("terminations.end_effector_height", t.end_effector_height),
            ("ppo.learning_rate", self.ppo.learning_rate),
            ("ppo.desired_kl", self.ppo.desired_kl),
            ("ppo.clip_param", self.ppo.clip_param),
            ("ppo.max_grad_norm", self.ppo.max_grad_norm),
            ("ppo.init_noise_std", self.ppo.init_noise_std),
            ("sampling.alpha", self.sampling.alpha),
        ];
        for (key, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{key} must be a positive number, got {v}"));
            }
        }
        let finite = [
            ("rewards.anchor_pos", r.anchor_pos),
            ("rewards.anchor_ori", r.anchor_ori),
            ("rewards.body_pos", r.body_pos),
            ("rewards.body_ori", r.body_ori),
            ("rewards.body_lin_vel", r.body_lin_vel),
            ("rewards.body_ang_vel", r.body_ang_vel),
            ("rewards.action_rate", r.action_rate),
            ("rewards.joint_limit", r.joint_limit),
            ("rewards.undesired_contacts", r.undesired_contacts),
            ("ppo.value_loss_coef", self.ppo.value_loss_coef),
            ("ppo.entropy_coef", self.ppo.entropy_coef),
        ];
        for (key, v) in finite {
            if !v.is_finite() {
                return Err(format!("{key} must be a finite number, got {v}"));
            }
        }
        let unit = [
            ("ppo.gamma", self.ppo.gamma),
            ("ppo.lam", self.ppo.lam),
            ("sampling.alpha", self.sampling.alpha),
            ("sampling.uniform_ratio", self.sampling.uniform_ratio),
        ];
        for (key, v) in unit {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{key} must lie in [0, 1], got {v}"));
            }
        }
        let scales = [
            ("init.pose_noise", self.init.pose_noise),
            ("init.velocity_noise", self.init.velocity_noise),
            ("init.joint_noise", self.init.joint_noise),
            ("noise.scale", self.noise.scale),
        ];
        for (key, v) in scales {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{key} must be ≥ 0, got {v}"));
            }
        }
        if self.dr.level > 3 {
            return Err(format!("dr.level must be 0-3, got {}", self.dr.level));
        }
        for (key, sizes) in [
            ("network.actor_hidden", &self.network.actor_hidden),
            ("network.critic_hidden", &self.network.critic_hidden),
        ] {
            if sizes.is_empty() || sizes.iter().any(|&h| h <= 0) {
                return Err(format!("{key} must list one or more positive sizes, got {sizes:?}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_key() {
        let mut c = PpoTrainConfig::default();
        c.validate().unwrap();
        assert!(c.set("ppo.gamma=1.5").unwrap_err().contains("ppo.gamma"));
        assert!(c.set("env.num_envs=0").unwrap_err().contains("env.num_envs"));
        assert!(c.set("env.gains=stiff").unwrap_err().contains("env.gains"));
        assert!(c.set("ppo.no_such_key=1").unwrap_err().contains("no_such_key"));
        assert!(
            c.set("run.log_every=3")
                .unwrap_err()
                .contains("must divide run.checkpoint_every")
        );
        c.set("run.log_every=5").unwrap();
        // Together, in any order: the rules across keys hold for the whole set.
        c.set_all(&["run.checkpoint_every=1", "run.log_every=1"]).unwrap();
        let err = c.set_all(&["run.checkpoint_every=4", "run.log_every=3"]).unwrap_err();
        assert!(err.contains("must divide"), "{err}");
        assert_eq!(
            (c.run.checkpoint_every, c.run.log_every),
            (1, 1),
            "a refused set changes nothing"
        );
        c.set("ppo.schedule=adaptive").unwrap();
        assert_eq!(c.ppo.schedule, LrSchedule::Adaptive);
        let err = toml::from_str::<PpoTrainConfig>("[env]\nnum_env = 3\n").unwrap_err();
        assert!(err.to_string().contains("num_env"), "{err}");
    }
}
