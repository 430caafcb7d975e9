//! Model and agent configuration (BFM_ZERO_FACTS §5.2 and §5.7), with named presets.
//!
//! `paper` is exactly the published architecture; `small` and `tiny` keep every structural
//! feature (ensembles, residual blocks, both embeddings) at sizes for short runs and tests.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Widths of the observation groups the networks read (BFM_ZERO_FACTS §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObsDims {
    pub state: i64,
    pub privileged_state: i64,
    pub last_action: i64,
    pub history_actor: i64,
}

/// The widest layer or input a model may have (BFM-Zero's widest is 2048): a square layer of
/// this width is 1 GiB of float32.
pub const MAX_WIDTH: i64 = 16_384;
/// The most members a network ensemble may have (BFM-Zero's have 2).
pub const MAX_ENSEMBLE: i64 = 64;
/// The most layers a network's trunk or embedding may have (BFM-Zero's have 2 to 6).
pub const MAX_LAYERS: usize = 32;

impl Default for ObsDims {
    fn default() -> Self {
        ObsDims {
            state: 64,
            privileged_state: 463,
            last_action: 29,
            history_actor: 372,
        }
    }
}

impl ObsDims {
    /// Actor input: state | last_action | history_actor.
    pub fn actor(&self) -> i64 {
        self.state + self.last_action + self.history_actor
    }
    /// Forward map and critics: state | privileged_state | last_action | history_actor.
    pub fn critic(&self) -> i64 {
        self.state + self.privileged_state + self.last_action + self.history_actor
    }
    /// Backward map and discriminator: state | privileged_state.
    pub fn goal(&self) -> i64 {
        self.state + self.privileged_state
    }
}

/// A residual F-style network (forward map, critics): embeddings and trunk of `hidden_layers`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResidualArch {
    pub hidden_dim: i64,
    pub hidden_layers: usize,
    /// Ensemble members P.
    pub ensemble: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActorArch {
    pub hidden_dim: i64,
    pub hidden_layers: usize,
    pub embedding_layers: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackwardArch {
    pub hidden_dim: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscriminatorArch {
    pub hidden_dim: i64,
    /// Number of Linear → ReLU layers after the first Linear → LN → tanh.
    pub hidden_layers: usize,
}

/// Everything that fixes the shapes of the model's tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub obs: ObsDims,
    pub action_dim: i64,
    pub z_dim: i64,
    pub norm_z: bool,
    pub forward: ResidualArch,
    pub critic: ResidualArch,
    pub aux_critic: ResidualArch,
    pub actor: ActorArch,
    pub backward: BackwardArch,
    pub discriminator: DiscriminatorArch,
    /// Fixed std of the actor's truncated normal.
    pub actor_std: f64,
}

/// Names of the built-in sizes.
pub const PRESETS: [&str; 3] = ["paper", "small", "tiny"];

impl ModelConfig {
    /// The published sizes (BFM_ZERO_FACTS §5.2).
    pub fn paper() -> Self {
        let residual = ResidualArch {
            hidden_dim: 2048,
            hidden_layers: 6,
            ensemble: 2,
        };
        ModelConfig {
            obs: ObsDims::default(),
            action_dim: 29,
            z_dim: 256,
            norm_z: true,
            forward: residual,
            critic: residual,
            aux_critic: residual,
            actor: ActorArch {
                hidden_dim: 2048,
                hidden_layers: 6,
                embedding_layers: 2,
            },
            backward: BackwardArch { hidden_dim: 256 },
            discriminator: DiscriminatorArch {
                hidden_dim: 1024,
                hidden_layers: 2,
            },
            actor_std: 0.05,
        }
    }

    /// About 1/60 of the paper's parameters: CPU training runs of hours.
    pub fn small() -> Self {
        let residual = ResidualArch {
            hidden_dim: 512,
            hidden_layers: 3,
            ensemble: 2,
        };
        ModelConfig {
            z_dim: 128,
            forward: residual,
            critic: residual,
            aux_critic: residual,
            actor: ActorArch {
                hidden_dim: 512,
                hidden_layers: 3,
                embedding_layers: 2,
            },
            backward: BackwardArch { hidden_dim: 256 },
            discriminator: DiscriminatorArch {
                hidden_dim: 512,
                hidden_layers: 2,
            },
            ..Self::paper()
        }
    }

    /// Tests and smoke runs: every structure present, seconds per thousand updates.
    pub fn tiny() -> Self {
        let residual = ResidualArch {
            hidden_dim: 64,
            hidden_layers: 3,
            ensemble: 2,
        };
        ModelConfig {
            z_dim: 16,
            forward: residual,
            critic: residual,
            aux_critic: residual,
            actor: ActorArch {
                hidden_dim: 64,
                hidden_layers: 2,
                embedding_layers: 2,
            },
            backward: BackwardArch { hidden_dim: 32 },
            discriminator: DiscriminatorArch {
                hidden_dim: 64,
                hidden_layers: 2,
            },
            ..Self::paper()
        }
    }

    pub fn preset(name: &str) -> Option<Self> {
        match name {
            "paper" => Some(Self::paper()),
            "small" => Some(Self::small()),
            "tiny" => Some(Self::tiny()),
            _ => None,
        }
    }

    /// Shape rules the networks rely on (and bounds on every size, `MAX_WIDTH`, `MAX_ENSEMBLE`
    /// and `MAX_LAYERS`), with a message naming the key.
    pub fn validate(&self) -> Result<(), String> {
        let residuals = [
            ("forward", self.forward),
            ("critic", self.critic),
            ("aux_critic", self.aux_critic),
        ];
        for (key, arch) in residuals {
            if arch.hidden_layers < 2 {
                return Err(format!(
                    "model.{key}.hidden_layers must be >= 2 (its embeddings use it), got {}",
                    arch.hidden_layers
                ));
            }
            if arch.ensemble < 1 {
                return Err(format!("model.{key}.ensemble must be >= 1, got {}", arch.ensemble));
            }
            if arch.hidden_dim < 2 || arch.hidden_dim % 2 != 0 {
                return Err(format!(
                    "model.{key}.hidden_dim must be even and >= 2, got {}",
                    arch.hidden_dim
                ));
            }
        }
        if self.actor.embedding_layers < 2 {
            return Err(format!(
                "model.actor.embedding_layers must be >= 2, got {}",
                self.actor.embedding_layers
            ));
        }
        if self.actor.hidden_dim < 2 || self.actor.hidden_dim % 2 != 0 {
            return Err(format!(
                "model.actor.hidden_dim must be even and >= 2, got {}",
                self.actor.hidden_dim
            ));
        }
        for (key, v) in [
            ("z_dim", self.z_dim),
            ("action_dim", self.action_dim),
            ("backward.hidden_dim", self.backward.hidden_dim),
            ("discriminator.hidden_dim", self.discriminator.hidden_dim),
        ] {
            if v < 1 {
                return Err(format!("model.{key} must be >= 1, got {v}"));
            }
        }
        // Upper bounds, so that sizes read off a checkpoint's tensors (where a zero-element
        // tensor can name any width) are refused before they are allocated.
        let widths = [
            ("forward.hidden_dim", self.forward.hidden_dim),
            ("critic.hidden_dim", self.critic.hidden_dim),
            ("aux_critic.hidden_dim", self.aux_critic.hidden_dim),
            ("actor.hidden_dim", self.actor.hidden_dim),
            ("z_dim", self.z_dim),
            ("action_dim", self.action_dim),
            ("backward.hidden_dim", self.backward.hidden_dim),
            ("discriminator.hidden_dim", self.discriminator.hidden_dim),
            ("obs.state", self.obs.state),
            ("obs.privileged_state", self.obs.privileged_state),
            ("obs.last_action", self.obs.last_action),
            ("obs.history_actor", self.obs.history_actor),
        ];
        for (key, v) in widths {
            if v > MAX_WIDTH {
                return Err(format!(
                    "model.{key} is {v}, more than the {MAX_WIDTH} a layer may have"
                ));
            }
        }
        let layers = [
            ("forward.hidden_layers", self.forward.hidden_layers),
            ("critic.hidden_layers", self.critic.hidden_layers),
            ("aux_critic.hidden_layers", self.aux_critic.hidden_layers),
            ("actor.hidden_layers", self.actor.hidden_layers),
            ("actor.embedding_layers", self.actor.embedding_layers),
        ];
        for (key, v) in layers {
            if v > MAX_LAYERS {
                return Err(format!("model.{key} is {v}, more than {MAX_LAYERS}"));
            }
        }
        for (key, v) in [
            ("forward.ensemble", self.forward.ensemble),
            ("critic.ensemble", self.critic.ensemble),
            ("aux_critic.ensemble", self.aux_critic.ensemble),
        ] {
            if v > MAX_ENSEMBLE {
                return Err(format!("model.{key} is {v}, more than {MAX_ENSEMBLE}"));
            }
        }
        if !(self.actor_std > 0.0 && self.actor_std.is_finite()) {
            return Err(format!(
                "model.actor_std must be a positive number, got {}",
                self.actor_std
            ));
        }
        Ok(())
    }
}

/// Coefficients c_k of the auxiliary reward terms (BFM_ZERO_FACTS §4.2).
pub fn default_aux_reward_coefs() -> BTreeMap<String, f64> {
    [
        ("penalty_action_rate", -0.1),
        ("penalty_feet_ori", -0.4),
        ("penalty_ankle_roll", -4.0),
        ("limits_dof_pos", -10.0),
        ("penalty_slippage", -2.0),
        ("penalty_undesired_contact", -1.0),
        ("penalty_torques", 0.0),
        ("limits_torque", 0.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Optimisation hyper-parameters, the train.py values of BFM_ZERO_FACTS §5.7.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    pub batch_size: i64,
    pub seq_length: i64,
    pub discount: f64,
    pub lr_f: f64,
    pub lr_b: f64,
    pub lr_actor: f64,
    pub lr_critic: f64,
    pub lr_aux_critic: f64,
    pub lr_discriminator: f64,
    pub fb_target_tau: f64,
    pub critic_target_tau: f64,
    pub ortho_coef: f64,
    pub train_goal_ratio: f64,
    pub expert_asm_ratio: f64,
    pub relabel_ratio: f64,
    pub fb_pessimism: f64,
    pub actor_pessimism: f64,
    pub critic_pessimism: f64,
    pub aux_critic_pessimism: f64,
    pub stddev_clip: f64,
    pub reg_coeff: f64,
    pub reg_coeff_aux: f64,
    pub scale_reg: bool,
    pub grad_penalty_discriminator: f64,
    pub z_buffer_size: usize,
    /// Momentum of the observation normaliser's running statistics.
    pub obs_norm_momentum: f64,
    /// EMA rate τ of the aux-reward scale normaliser.
    pub aux_reward_ema: f64,
    /// Overrides of the §4.2 coefficients; terms left out keep their defaults (0 turns one off).
    #[serde(deserialize_with = "coefs_over_defaults")]
    pub aux_reward_coefs: BTreeMap<String, f64>,
}

fn coefs_over_defaults<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, f64>, D::Error> {
    let given = BTreeMap::<String, f64>::deserialize(d)?;
    let mut coefs = default_aux_reward_coefs();
    coefs.extend(given);
    Ok(coefs)
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            batch_size: 1024,
            seq_length: 8,
            discount: 0.98,
            lr_f: 3e-4,
            lr_b: 1e-5,
            lr_actor: 3e-4,
            lr_critic: 3e-4,
            lr_aux_critic: 3e-4,
            lr_discriminator: 1e-5,
            fb_target_tau: 0.01,
            critic_target_tau: 0.005,
            ortho_coef: 100.0,
            train_goal_ratio: 0.2,
            expert_asm_ratio: 0.6,
            relabel_ratio: 0.8,
            fb_pessimism: 0.0,
            actor_pessimism: 0.5,
            critic_pessimism: 0.5,
            aux_critic_pessimism: 0.5,
            stddev_clip: 0.3,
            reg_coeff: 0.05,
            reg_coeff_aux: 0.02,
            scale_reg: true,
            grad_penalty_discriminator: 10.0,
            z_buffer_size: 8192,
            obs_norm_momentum: 0.01,
            aux_reward_ema: 0.99,
            aux_reward_coefs: default_aux_reward_coefs(),
        }
    }
}

impl AgentConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.batch_size < 2 {
            return Err(format!("agent.batch_size must be >= 2, got {}", self.batch_size));
        }
        if self.seq_length < 1 || self.batch_size % self.seq_length != 0 {
            return Err(format!(
                "agent.batch_size ({}) must be a multiple of agent.seq_length ({})",
                self.batch_size, self.seq_length
            ));
        }
        let ratios = [
            ("train_goal_ratio", self.train_goal_ratio),
            ("expert_asm_ratio", self.expert_asm_ratio),
            ("relabel_ratio", self.relabel_ratio),
        ];
        for (key, v) in ratios {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("agent.{key} must lie in [0, 1], got {v}"));
            }
        }
        if self.train_goal_ratio + self.expert_asm_ratio > 1.0 + 1e-12 {
            return Err("agent.train_goal_ratio + agent.expert_asm_ratio must be <= 1".into());
        }
        if !(0.0..1.0).contains(&self.discount) {
            return Err(format!("agent.discount must lie in [0, 1), got {}", self.discount));
        }
        for (key, lr) in [
            ("lr_f", self.lr_f),
            ("lr_b", self.lr_b),
            ("lr_actor", self.lr_actor),
            ("lr_critic", self.lr_critic),
            ("lr_aux_critic", self.lr_aux_critic),
            ("lr_discriminator", self.lr_discriminator),
        ] {
            if !(lr >= 0.0 && lr.is_finite()) {
                return Err(format!("agent.{key} must be a finite number >= 0, got {lr}"));
            }
        }
        let within = |key: &str, v: f64, lo: f64, hi: f64, open_hi: bool| {
            let ok = v >= lo && if open_hi { v < hi } else { v <= hi };
            if ok {
                Ok(())
            } else {
                let close = if open_hi { ")" } else { "]" };
                Err(format!("agent.{key} must lie in [{lo}, {hi}{close}, got {v}"))
            }
        };
        within("fb_target_tau", self.fb_target_tau, 0.0, 1.0, false)?;
        within("critic_target_tau", self.critic_target_tau, 0.0, 1.0, false)?;
        within("aux_reward_ema", self.aux_reward_ema, 0.0, 1.0, true)?;
        if !(self.obs_norm_momentum > 0.0 && self.obs_norm_momentum <= 1.0) {
            return Err(format!(
                "agent.obs_norm_momentum must lie in (0, 1], got {}",
                self.obs_norm_momentum
            ));
        }
        for (key, v) in [
            ("ortho_coef", self.ortho_coef),
            ("fb_pessimism", self.fb_pessimism),
            ("actor_pessimism", self.actor_pessimism),
            ("critic_pessimism", self.critic_pessimism),
            ("aux_critic_pessimism", self.aux_critic_pessimism),
            ("stddev_clip", self.stddev_clip),
            ("reg_coeff", self.reg_coeff),
            ("reg_coeff_aux", self.reg_coeff_aux),
            ("grad_penalty_discriminator", self.grad_penalty_discriminator),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(format!("agent.{key} must be a finite number >= 0, got {v}"));
            }
        }
        if self.z_buffer_size < 1 {
            return Err("agent.z_buffer_size must be >= 1, got 0".into());
        }
        let known = default_aux_reward_coefs();
        for (key, v) in &self.aux_reward_coefs {
            if !v.is_finite() {
                return Err(format!("agent.aux_reward_coefs.{key} must be a finite number, got {v}"));
            }
        }
        for key in self.aux_reward_coefs.keys() {
            if !known.contains_key(key) {
                let names: Vec<&str> = known.keys().map(String::as_str).collect();
                return Err(format!(
                    "agent.aux_reward_coefs.{key}: unknown term (known: {})",
                    names.join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// Parameter counts per network, from the shapes alone (no allocation): what a preset costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ParameterCounts {
    pub forward: i64,
    pub critic: i64,
    pub aux_critic: i64,
    pub actor: i64,
    pub backward: i64,
    pub discriminator: i64,
}

impl ParameterCounts {
    pub fn of(c: &ModelConfig) -> Self {
        let linear = |i: i64, o: i64| i * o + o;
        let block = |i: i64, o: i64| 2 * i + linear(i, o);
        let embed = |i: i64, h: i64, l: usize| block(i, h) + (l as i64 - 2) * block(h, h) + block(h, h / 2);
        let trunk = |h: i64, l: usize, out: i64| l as i64 * block(h, h) + block(h, out);
        let residual = |r: ResidualArch, out: i64| {
            let obs = c.obs.critic();
            r.ensemble
                * (embed(obs + c.z_dim, r.hidden_dim, r.hidden_layers)
                    + embed(obs + c.action_dim, r.hidden_dim, r.hidden_layers)
                    + trunk(r.hidden_dim, r.hidden_layers, out))
        };
        let a = c.actor;
        let d = c.discriminator;
        let goal = c.obs.goal();
        ParameterCounts {
            forward: residual(c.forward, c.z_dim),
            critic: residual(c.critic, 1),
            aux_critic: residual(c.aux_critic, 1),
            actor: embed(c.obs.actor() + c.z_dim, a.hidden_dim, a.embedding_layers)
                + embed(c.obs.actor(), a.hidden_dim, a.embedding_layers)
                + trunk(a.hidden_dim, a.hidden_layers, c.action_dim),
            backward: linear(goal, c.backward.hidden_dim)
                + 2 * c.backward.hidden_dim
                + linear(c.backward.hidden_dim, c.z_dim),
            discriminator: linear(c.z_dim + goal, d.hidden_dim)
                + 2 * d.hidden_dim
                + d.hidden_layers as i64 * linear(d.hidden_dim, d.hidden_dim)
                + linear(d.hidden_dim, 1),
        }
    }

    pub fn total(&self) -> i64 {
        self.forward + self.critic + self.aux_critic + self.actor + self.backward + self.discriminator
    }
}
