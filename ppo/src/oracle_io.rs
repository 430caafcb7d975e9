//! One PPO update's inputs as the PyTorch oracle (`ppo/oracle/ppo_oracle.py`) reads them: a
//! model with non-trivial normaliser statistics and per-action std, a random rollout drawn from
//! it, and the files `init.safetensors`, `rollout.safetensors` and `config.json`. Shared by the
//! parity test (`ppo/tests/oracle_parity.rs`, small networks) and the update-throughput
//! benchmark (`ppo/examples/ppo_update_throughput.rs`, the training configuration's sizes).

use crate::config::{LrSchedule, PpoConfig};
use crate::policy::ActorCritic;
use crate::ppo::Rollout;
use arena_torch::tensors::write_tensors;
use std::path::Path;
use tch::{Kind, Tensor};

/// A model, a rollout of `steps` × `envs` drawn from it, the values after its last step and the
/// permutation of its samples, all from libtorch's CPU generator (seed it first).
#[derive(Debug)]
pub struct OracleCase {
    pub model: ActorCritic,
    pub rollout: Rollout,
    pub last_values: Tensor,
    pub permutation: Tensor,
    pub actor_hidden: Vec<i64>,
    pub critic_hidden: Vec<i64>,
}

/// Sizes of an [`OracleCase`].
#[derive(Debug, Clone)]
pub struct CaseSizes {
    pub steps: i64,
    pub envs: i64,
    pub obs_dim: i64,
    pub critic_dim: i64,
    pub act_dim: i64,
    pub actor_hidden: Vec<i64>,
    pub critic_hidden: Vec<i64>,
}

impl OracleCase {
    pub fn random(s: &CaseSizes) -> OracleCase {
        let (t, n) = (s.steps, s.envs);
        let mut model = ActorCritic::new(
            s.obs_dim,
            s.critic_dim,
            s.act_dim,
            &s.actor_hidden,
            &s.critic_hidden,
            0.8,
        );
        // Non-trivial normaliser statistics, a std that differs per action.
        model
            .actor_norm
            .update(&(Tensor::randn([64, s.obs_dim], tch::kind::FLOAT_CPU) * 2.0 + 0.5));
        model
            .actor_norm
            .update(&Tensor::randn([32, s.obs_dim], tch::kind::FLOAT_CPU));
        model
            .critic_norm
            .update(&(Tensor::randn([64, s.critic_dim], tch::kind::FLOAT_CPU) * 0.3 - 1.0));
        {
            let _g = tch::no_grad_guard();
            let mut std = model.std.shallow_clone();
            std.copy_(&(Tensor::rand([s.act_dim], tch::kind::FLOAT_CPU) * 0.5 + 0.6));
        }
        let obs = Tensor::randn([t, n, s.obs_dim], tch::kind::FLOAT_CPU);
        let critic_obs = Tensor::randn([t, n, s.critic_dim], tch::kind::FLOAT_CPU);
        let (mu, sigma, values) = {
            let _g = tch::no_grad_guard();
            let d = model.distribution(&obs);
            (d.mean, d.std, model.value(&critic_obs))
        };
        let actions = &mu + Tensor::randn([t, n, s.act_dim], tch::kind::FLOAT_CPU) * &sigma;
        let log_probs = {
            let _g = tch::no_grad_guard();
            model.distribution(&obs).log_prob(&actions)
        };
        let rollout = Rollout {
            rewards: Tensor::rand([t, n], tch::kind::FLOAT_CPU) * 0.1,
            dones: Tensor::rand([t, n], tch::kind::FLOAT_CPU).lt(0.15).to_kind(Kind::Float),
            obs,
            critic_obs,
            actions,
            values,
            log_probs,
            mu,
            sigma,
        };
        let last_values = Tensor::randn([n], tch::kind::FLOAT_CPU);
        let permutation = Tensor::randperm(t * n, (Kind::Int64, tch::Device::Cpu));
        OracleCase {
            model,
            rollout,
            last_values,
            permutation,
            actor_hidden: s.actor_hidden.clone(),
            critic_hidden: s.critic_hidden.clone(),
        }
    }

    /// Writes the oracle's three input files into `dir` (the model as it is now).
    pub fn write(&self, dir: &Path, config: &PpoConfig) -> anyhow::Result<()> {
        write_tensors(&dir.join("init.safetensors"), &self.model.tensors())?;
        let r = &self.rollout;
        let inputs: Vec<(String, Tensor)> = [
            ("obs", &r.obs),
            ("critic_obs", &r.critic_obs),
            ("actions", &r.actions),
            ("rewards", &r.rewards),
            ("dones", &r.dones),
            ("values", &r.values),
            ("log_probs", &r.log_probs),
            ("mu", &r.mu),
            ("sigma", &r.sigma),
            ("last_values", &self.last_values),
            ("permutation", &self.permutation),
        ]
        .into_iter()
        .map(|(name, t)| (name.to_string(), t.shallow_clone()))
        .collect();
        write_tensors(&dir.join("rollout.safetensors"), &inputs)?;
        let schedule = match config.schedule {
            LrSchedule::Adaptive => "adaptive",
            LrSchedule::Fixed => "fixed",
        };
        std::fs::write(
            dir.join("config.json"),
            serde_json::json!({
                "actor_hidden": self.actor_hidden, "critic_hidden": self.critic_hidden,
                "learning_rate": config.learning_rate, "schedule": schedule, "desired_kl": config.desired_kl,
                "epochs": config.num_learning_epochs, "mini_batches": config.num_mini_batches,
                "clip": config.clip_param, "gamma": config.gamma, "lam": config.lam,
                "value_loss_coef": config.value_loss_coef, "entropy_coef": config.entropy_coef,
                "max_grad_norm": config.max_grad_norm,
            })
            .to_string(),
        )?;
        Ok(())
    }
}
