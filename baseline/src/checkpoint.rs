//! Checkpoints in the released BFM-Zero layout (BFM_ZERO_FACTS §8):
//! ```text
//! DIR/model/model.safetensors   every tensor of the model under its §5.2 name
//! DIR/model/config.json         the model configuration (sizes, z, actor std, normaliser rates)
//! DIR/model/init_kwargs.json    {"obs_space": {group: [dim]}, "action_dim": A}
//! DIR/optimizers.safetensors    Adam moments, `<optimizer>.<parameter>.exp_avg|exp_avg_sq`
//! DIR/buffers.safetensors       online and z buffers (trainer, when train.save_buffer)
//! DIR/train_status.json         counters of the run (written by the trainer)
//! DIR/config.json               the whole training configuration (trainer)
//! ```
//! Loading checks every name and shape and says which one is wrong; a file without target
//! copies (an inference export) gets targets equal to the online networks.
//!
//! An export ([`save_export`]) holds only some networks (by default what the agent needs: the
//! actor, B and the observation normaliser); its `config.json` lists them under `networks`. It
//! is small enough to bring back from a GPU machine, it is what `arena-bfm eval` and `agent`
//! load, and it can initialise a new training run ([`init_from`]).

use crate::config::{AgentConfig, ModelConfig};
use crate::model::{ACTOR, AUX_CRITIC, BACKWARD, CRITIC, DISCRIMINATOR, FORWARD, FbCprAuxModel, TARGET_PAIRS};
use crate::update::Learner;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use tch::{Device, Tensor};

pub use arena_torch::tensors::{CheckpointError, file_err, read_tensors};

/// `model/config.json`: what fixes the shapes, plus the normaliser rates.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedModelConfig {
    pub model: ModelConfig,
    pub obs_norm_momentum: f64,
    pub aux_reward_ema: f64,
    /// The networks an export holds ([`NETWORKS`] names); absent in a whole checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networks: Option<Vec<String>>,
}

/// The networks of a checkpoint by name, with their tensor prefixes (target copies are not
/// networks of their own: they follow their online network).
pub const NETWORKS: [(&str, &str); 8] = [
    ("actor", ACTOR),
    ("forward", FORWARD),
    ("backward", BACKWARD),
    ("critic", CRITIC),
    ("aux_critic", AUX_CRITIC),
    ("discriminator", DISCRIMINATOR),
    ("obs_normalizer", "_obs_normalizer."),
    ("aux_reward_normalizer", "_aux_reward_normalizer."),
];

/// What the tracking agent needs (§6.1): the actor, B for z, and the observation normaliser.
pub const AGENT_NETWORKS: [&str; 3] = ["actor", "backward", "obs_normalizer"];

/// The tensor prefix of a network name, or an error listing the names.
fn network_prefix(name: &str) -> Result<&'static str, String> {
    NETWORKS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| *p)
        .ok_or_else(|| {
            let names: Vec<&str> = NETWORKS.iter().map(|(n, _)| *n).collect();
            format!("unknown network {name:?} (one of {})", names.join(", "))
        })
}

/// The network a tensor belongs to (target copies belong to their online network).
fn network_of(tensor: &str) -> Option<&'static str> {
    let online = TARGET_PAIRS
        .iter()
        .find(|(_, target)| tensor.starts_with(target))
        .map_or(tensor.to_string(), |(online, target)| {
            format!("{online}{}", &tensor[target.len()..])
        });
    NETWORKS.iter().find(|(_, p)| online.starts_with(p)).map(|(n, _)| *n)
}

impl SavedModelConfig {
    /// Whether every network of `needed` is in this checkpoint.
    pub fn require(&self, needed: &[&str], what: &str) -> Result<(), String> {
        let Some(held) = &self.networks else { return Ok(()) };
        let missing: Vec<&str> = needed
            .iter()
            .copied()
            .filter(|n| !held.iter().any(|h| h == n))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(format!(
            "this export holds {} but {what} also needs {}",
            held.join(", "),
            missing.join(", ")
        ))
    }
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<(), CheckpointError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| file_err(path, e))?;
    std::fs::write(path, text + "\n").map_err(|e| file_err(path, e))
}

fn to_cpu(tensors: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    tensors
        .into_iter()
        .map(|(n, t)| (n, t.to_device(Device::Cpu).contiguous()))
        .collect()
}

/// Writes `model/` (weights, config, init kwargs).
pub fn save_model(model: &FbCprAuxModel, agent: &AgentConfig, dir: &Path) -> Result<(), CheckpointError> {
    let tensors = to_cpu(
        model
            .store
            .iter()
            .map(|(n, e)| (n.clone(), e.tensor.detach()))
            .collect(),
    );
    let saved = SavedModelConfig {
        model: model.config.clone(),
        obs_norm_momentum: agent.obs_norm_momentum,
        aux_reward_ema: agent.aux_reward_ema,
        networks: None,
    };
    write_model_files(model, &saved, &tensors, dir)
}

/// Writes an export of `networks` (names of [`NETWORKS`]) of `model` to `dir/model/`: their
/// tensors (no target copies), `config.json` listing them, `init_kwargs.json`.
pub fn save_export(
    model: &FbCprAuxModel,
    saved: &SavedModelConfig,
    networks: &[String],
    dir: &Path,
) -> Result<(), CheckpointError> {
    let model_dir = dir.join("model");
    let prefixes = networks
        .iter()
        .map(|n| network_prefix(n))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(&model_dir, e))?;
    let tensors = to_cpu(
        model
            .store
            .iter()
            .filter(|(n, _)| prefixes.iter().any(|p| n.starts_with(p)))
            .map(|(n, e)| (n.clone(), e.tensor.detach()))
            .collect(),
    );
    let saved = SavedModelConfig {
        networks: Some(networks.to_vec()),
        ..saved.clone()
    };
    write_model_files(model, &saved, &tensors, dir)
}

fn write_model_files(
    model: &FbCprAuxModel,
    saved: &SavedModelConfig,
    tensors: &[(String, Tensor)],
    dir: &Path,
) -> Result<(), CheckpointError> {
    let model_dir = dir.join("model");
    std::fs::create_dir_all(&model_dir).map_err(|e| file_err(&model_dir, e))?;
    let path = model_dir.join("model.safetensors");
    Tensor::write_safetensors(tensors, &path).map_err(|e| file_err(&path, e))?;
    write_json(&model_dir.join("config.json"), saved)?;
    let o = &model.config.obs;
    let kwargs = serde_json::json!({
        "obs_space": {
            "state": [o.state],
            "privileged_state": [o.privileged_state],
            "last_action": [o.last_action],
            "history_actor": [o.history_actor],
        },
        "action_dim": model.config.action_dim,
    });
    write_json(&model_dir.join("init_kwargs.json"), &kwargs)
}

/// The tensors and configuration of `dir/model/`. When `model/config.json` is not ours (a
/// checkpoint released by BFM-Zero's own code), the sizes are read off the tensors' shapes.
fn read_model_files(dir: &Path) -> Result<(HashMap<String, Tensor>, SavedModelConfig, PathBuf), CheckpointError> {
    let model_dir = dir.join("model");
    let path = model_dir.join("model.safetensors");
    if !path.is_file() {
        let hint = if dir.join("checkpoint").join("model").is_dir() {
            format!(
                " (a run folder? its checkpoint is {})",
                dir.join("checkpoint").display()
            )
        } else {
            String::new()
        };
        return Err(file_err(
            dir,
            format!("not a checkpoint or export: there is no model/model.safetensors{hint}"),
        ));
    }
    let tensors = read_tensors(&path, "missing")?;
    let config_path = model_dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|e| file_err(&config_path, e))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| file_err(&config_path, e))?;
    let saved: SavedModelConfig = if json.get("model").is_some() {
        serde_json::from_value(json).map_err(|e| file_err(&config_path, e))?
    } else {
        // Not our schema (no `model` key): a checkpoint of BFM-Zero's own code.
        let model = infer_model_config(&tensors).map_err(|e| file_err(&path, e))?;
        tracing::warn!(
            "{}: not an arena-bfm model config; the sizes are read from the tensors",
            config_path.display()
        );
        SavedModelConfig {
            model,
            obs_norm_momentum: 0.01,
            aux_reward_ema: 0.99,
            networks: None,
        }
    };
    saved.model.validate().map_err(|e| file_err(&config_path, e))?;
    if let Some(networks) = &saved.networks {
        for n in networks {
            network_prefix(n).map_err(|e| file_err(&config_path, e))?;
        }
    }
    Ok((tensors, saved, path))
}

/// Copies the checkpoint's tensors into `model`: every tensor of the networks the checkpoint
/// holds (all of them, or an export's `networks`) must be there with the model's shape, and no
/// tensor may be foreign to the model. Target copies the file lacks are left alone. Returns
/// the online networks that were loaded.
fn copy_into(
    model: &FbCprAuxModel,
    tensors: &HashMap<String, Tensor>,
    saved: &SavedModelConfig,
    path: &Path,
) -> Result<Vec<&'static str>, CheckpointError> {
    let tensor_err = |name: &str, message: String| CheckpointError::Tensor {
        path: path.to_path_buf(),
        name: name.to_string(),
        message,
    };
    if let Some(extra) = tensors.keys().find(|n| model.store.get(n).is_none()) {
        return Err(tensor_err(extra, "not part of this model".into()));
    }
    let held = |network: &str| {
        saved
            .networks
            .as_ref()
            .is_none_or(|list| list.iter().any(|n| n == network))
    };
    let _guard = tch::no_grad_guard();
    let mut loaded = Vec::new();
    for (name, entry) in model.store.iter() {
        let network = network_of(name);
        let Some(t) = tensors.get(name) else {
            let target = TARGET_PAIRS.iter().any(|(_, target)| name.starts_with(target));
            if target || network.is_some_and(|n| !held(n)) {
                continue;
            }
            return Err(tensor_err(name, "missing".into()));
        };
        if t.size() != entry.tensor.size() {
            return Err(tensor_err(
                name,
                format!(
                    "shape {:?}, the configuration needs {:?}",
                    t.size(),
                    entry.tensor.size()
                ),
            ));
        }
        entry.tensor.shallow_clone().copy_(t);
        if let Some(n) = network
            && !loaded.contains(&n)
        {
            loaded.push(n);
        }
    }
    Ok(loaded)
}

/// Sets the target copy of each loaded online network that the file did not hold to the online
/// network itself.
fn fill_targets(model: &FbCprAuxModel, tensors: &HashMap<String, Tensor>) {
    for (online, target) in TARGET_PAIRS {
        let has_online = tensors.keys().any(|n| n.starts_with(online));
        let has_target = tensors.keys().any(|n| n.starts_with(target));
        if has_online && !has_target {
            model.copy_target(online, target);
        }
    }
}

/// Reads `model/` into a new model on `device`. An export loads too: the networks it does not
/// hold keep their initial values (callers check what they need with
/// [`SavedModelConfig::require`]).
pub fn load_model(dir: &Path, device: Device) -> Result<(FbCprAuxModel, SavedModelConfig), CheckpointError> {
    let (tensors, saved, path) = read_model_files(dir)?;
    let model = FbCprAuxModel::new(&saved.model, saved.obs_norm_momentum, saved.aux_reward_ema, device);
    copy_into(&model, &tensors, &saved, &path)?;
    fill_targets(&model, &tensors);
    Ok((model, saved))
}

/// Initialises `model` (a new run's) from the checkpoint or export in `dir`: the networks it
/// holds are copied in (their targets set equal to them), the others keep their initial
/// values. The model sizes must be the same. Returns the networks loaded.
pub fn init_from(model: &FbCprAuxModel, dir: &Path) -> Result<Vec<&'static str>, CheckpointError> {
    let (tensors, saved, path) = read_model_files(dir)?;
    if saved.model != model.config {
        let json = |m: &ModelConfig| serde_json::to_value(m).unwrap_or_default();
        let which = arena_torch::cli::json_differences(&json(&saved.model), &json(&model.config), "model");
        return Err(file_err(
            &dir.join("model").join("config.json"),
            format!(
                "its model sizes differ from this run's configuration: {}",
                which.join("; ")
            ),
        ));
    }
    let loaded = copy_into(model, &tensors, &saved, &path)?;
    fill_targets(model, &tensors);
    Ok(loaded)
}

/// The model sizes implied by the tensors of a checkpoint in the released naming (§5.2).
pub fn infer_model_config(tensors: &HashMap<String, Tensor>) -> Result<ModelConfig, String> {
    let shape = |name: &str| {
        tensors
            .get(name)
            .map(Tensor::size)
            .ok_or_else(|| format!("tensor {name} is missing"))
    };
    // Number of numbered children `prefix.K.` (K = 0, 1, ...).
    let count = |prefix: &str| {
        (0..)
            .take_while(|k| tensors.keys().any(|n| n.starts_with(&format!("{prefix}.{k}."))))
            .count()
    };
    let norm = |key: &str| -> Result<i64, String> {
        Ok(shape(&format!("_obs_normalizer._normalizers.{key}._normalizer.running_mean"))?[0])
    };
    let obs = crate::config::ObsDims {
        state: norm("state")?,
        privileged_state: norm("privileged_state")?,
        last_action: norm("last_action")?,
        history_actor: norm("history_actor")?,
    };
    let b_out = shape("_backward_map.net.3.weight")?;
    let residual = |net: &str| -> Result<crate::config::ResidualArch, String> {
        let w = shape(&format!("{net}.embed_z.0.mlp.1.weight"))?;
        if w.len() != 3 {
            return Err(format!(
                "{net}.embed_z.0.mlp.1.weight: expected an ensemble weight [P, in, out], got {w:?}"
            ));
        }
        Ok(crate::config::ResidualArch {
            hidden_dim: w[2],
            hidden_layers: count(&format!("{net}.embed_z")),
            ensemble: w[0],
        })
    };
    let actor_w = shape("_actor.embed_z.0.mlp.1.weight")?;
    let policy_layers = count("_actor.policy");
    if policy_layers < 2 {
        return Err("the actor's policy trunk has fewer than 2 layers".into());
    }
    let action = shape(&format!("_actor.policy.{}.mlp.1.weight", policy_layers - 1))?;
    let disc = shape("_discriminator.trunk.0.weight")?;
    let disc_linears = (0..)
        .take_while(|k| tensors.contains_key(&format!("_discriminator.trunk.{}.weight", 3 + 2 * k)))
        .count();
    Ok(ModelConfig {
        obs,
        action_dim: action[0],
        z_dim: b_out[0],
        norm_z: true,
        forward: residual("_forward_map")?,
        critic: residual("_critic")?,
        aux_critic: residual("_aux_critic")?,
        actor: crate::config::ActorArch {
            hidden_dim: actor_w[0],
            hidden_layers: policy_layers - 1,
            embedding_layers: count("_actor.embed_z"),
        },
        backward: crate::config::BackwardArch { hidden_dim: b_out[1] },
        discriminator: crate::config::DiscriminatorArch {
            hidden_dim: disc[0],
            hidden_layers: disc_linears.saturating_sub(1),
        },
        actor_std: 0.05,
    })
}

/// Writes `optimizers.safetensors`; returns the step count of each optimiser (for the status).
pub fn save_optimizers(learner: &Learner, dir: &Path) -> Result<BTreeMap<String, i64>, CheckpointError> {
    let mut tensors = Vec::new();
    let mut steps = BTreeMap::new();
    for (name, opt) in learner.optimizers() {
        tensors.extend(opt.state_tensors(&format!("{name}.")));
        steps.insert(name.to_string(), opt.step);
    }
    let path = dir.join("optimizers.safetensors");
    Tensor::write_safetensors(&to_cpu(tensors), &path).map_err(|e| file_err(&path, e))?;
    Ok(steps)
}

/// Restores the Adam moments written by [`save_optimizers`].
pub fn load_optimizers(
    learner: &mut Learner,
    dir: &Path,
    steps: &BTreeMap<String, i64>,
) -> Result<(), CheckpointError> {
    let path = dir.join("optimizers.safetensors");
    let device = learner.model.device;
    let tensors = read_tensors(
        &path,
        "missing: the checkpoint lacks its optimiser state (an export? start a run from it with train.init_from)",
    )?;
    let lookup = |k: &str| tensors.get(k).map(|t| t.to_device(device));
    for (name, opt) in learner.optimizers_mut() {
        let step = *steps
            .get(name)
            .ok_or_else(|| file_err(&path, format!("no step count for optimizer {name}")))?;
        opt.load_state(&format!("{name}."), step, &lookup)
            .map_err(|e| file_err(&path, e))?;
    }
    Ok(())
}
