//! The files an independent implementation reads to replay one update (the PyTorch oracle of
//! the parity test and the throughput benchmark): `config.json`, `init.safetensors` (every model
//! tensor by checkpoint name) and `batch.safetensors` (raw batch and the update's noise).

use crate::config::{AgentConfig, ModelConfig};
use crate::model::{FbCprAuxModel, Obs};
use crate::update::{ExpertBatch, TrainBatch, UpdateNoise};
use std::path::Path;
use tch::{Device, Kind, Tensor};

/// A random raw observation batch with non-trivial scales per group.
pub fn random_obs(cfg: &ModelConfig, n: i64, offset: f64, device: Device) -> Obs {
    let f = (Kind::Float, device);
    let o = cfg.obs;
    Obs {
        state: Tensor::randn([n, o.state], f) * 1.5 + offset,
        privileged_state: Tensor::randn([n, o.privileged_state], f) * 0.7 - offset,
        last_action: Tensor::rand([n, o.last_action], f) * 10.0 - 5.0,
        history_actor: Tensor::randn([n, o.history_actor], f) * 2.0,
    }
}

/// A random train batch (20 % terminal rows) and expert batch of `agent.batch_size` rows.
pub fn random_batches(model: &FbCprAuxModel, agent: &AgentConfig) -> (TrainBatch, ExpertBatch) {
    let cfg = &model.config;
    let (n, device) = (agent.batch_size, model.device);
    let f = (Kind::Float, device);
    let train = TrainBatch {
        obs: random_obs(cfg, n, 0.2, device),
        action: Tensor::rand([n, cfg.action_dim], f) * 2.0 - 1.0,
        next_obs: random_obs(cfg, n, 0.25, device),
        terminated: Tensor::rand([n, 1], f).lt(0.2).to_kind(Kind::Float),
        z: model.project_z(&Tensor::randn([n, cfg.z_dim], f)),
        aux_reward: Tensor::randn([n, 1], f) * 0.3 - 0.8,
    };
    let (e, e2) = (random_obs(cfg, n, -0.1, device), random_obs(cfg, n, -0.05, device));
    let expert = ExpertBatch {
        state: e.state,
        privileged_state: e.privileged_state,
        next_state: e2.state,
        next_privileged_state: e2.privileged_state,
    };
    (train, expert)
}

fn obs_tensors(prefix: &str, o: &Obs) -> Vec<(String, Tensor)> {
    [
        ("state", &o.state),
        ("privileged_state", &o.privileged_state),
        ("last_action", &o.last_action),
        ("history_actor", &o.history_actor),
    ]
    .into_iter()
    .map(|(k, t)| (format!("{prefix}.{k}"), t.to_device(Device::Cpu)))
    .collect()
}

/// Every tensor of the model by name, copied to the CPU.
pub fn model_tensors(model: &FbCprAuxModel) -> Vec<(String, Tensor)> {
    model
        .store
        .iter()
        .map(|(n, e)| (n.clone(), e.tensor.detach().to_device(Device::Cpu).copy()))
        .collect()
}

/// Writes config.json, init.safetensors and batch.safetensors into `dir`.
pub fn write_update_inputs(
    dir: &Path,
    model: &FbCprAuxModel,
    agent: &AgentConfig,
    train: &TrainBatch,
    expert: &ExpertBatch,
    noise: &UpdateNoise,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let config = serde_json::json!({"model": model.config, "agent": agent});
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&config)?)?;
    Tensor::write_safetensors(&model_tensors(model), dir.join("init.safetensors"))?;
    let mut batch = obs_tensors("train.obs", &train.obs);
    batch.extend(obs_tensors("train.next_obs", &train.next_obs));
    for (name, t) in [
        ("train.action", &train.action),
        ("train.terminated", &train.terminated),
        ("train.z", &train.z),
        ("train.aux_reward", &train.aux_reward),
        ("expert.state", &expert.state),
        ("expert.privileged_state", &expert.privileged_state),
        ("expert.next_state", &expert.next_state),
        ("expert.next_privileged_state", &expert.next_privileged_state),
    ] {
        batch.push((name.to_string(), t.to_device(Device::Cpu)));
    }
    for (name, t) in noise.named() {
        batch.push((format!("noise.{name}"), t.to_device(Device::Cpu)));
    }
    Tensor::write_safetensors(&batch, dir.join("batch.safetensors"))?;
    Ok(())
}
