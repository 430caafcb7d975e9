//! Checkpoints: a saved and reloaded learner continues bit for bit (N updates, save, load, M
//! more equals N + M straight), and bad checkpoints are refused with the file and tensor named.

use arena_bfm::checkpoint::{self, CheckpointError};
use arena_bfm::config::{AgentConfig, ModelConfig};
use arena_bfm::model::FbCprAuxModel;
use arena_bfm::oracle_io::random_obs;
use arena_bfm::update::{ExpertBatch, Learner, TrainBatch};
use std::collections::BTreeMap;
use tch::{Device, Kind, Tensor};

/// torch's generator is process-global: tests that seed it must not interleave.
static TORCH_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn agent() -> AgentConfig {
    AgentConfig {
        batch_size: 32,
        seq_length: 8,
        ..AgentConfig::default()
    }
}

/// The k-th batch, the same whenever it is asked for.
fn batch(cfg: &ModelConfig, k: i64) -> (TrainBatch, ExpertBatch) {
    tch::manual_seed(1000 + k);
    let n = agent().batch_size;
    let f = (Kind::Float, Device::Cpu);
    let train = TrainBatch {
        obs: random_obs(cfg, n, 0.0, Device::Cpu),
        action: Tensor::rand([n, cfg.action_dim], f) * 2.0 - 1.0,
        next_obs: random_obs(cfg, n, 0.0, Device::Cpu),
        terminated: Tensor::zeros([n, 1], f),
        z: Tensor::randn([n, cfg.z_dim], f),
        aux_reward: Tensor::randn([n, 1], f),
    };
    let (e, e2) = (
        random_obs(cfg, n, 0.0, Device::Cpu),
        random_obs(cfg, n, 0.0, Device::Cpu),
    );
    let expert = ExpertBatch {
        state: e.state,
        privileged_state: e.privileged_state,
        next_state: e2.state,
        next_privileged_state: e2.privileged_state,
    };
    (train, expert)
}

fn run(learner: &mut Learner, from: i64, to: i64) {
    let cfg = learner.model.config.clone();
    for k in from..to {
        let (t, e) = batch(&cfg, k);
        let (metrics, _) = learner.update(&t, &e, 42);
        assert!(metrics.values().all(|v| v.is_finite()), "{metrics:?}");
    }
}

fn snapshot(learner: &Learner) -> BTreeMap<String, Tensor> {
    learner
        .model
        .store
        .iter()
        .map(|(n, e)| (n.clone(), e.tensor.detach().copy()))
        .collect()
}

#[test]
fn resumed_training_equals_straight_training_bit_for_bit() {
    let _serial = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = ModelConfig::tiny();
    tch::manual_seed(3);
    let mut straight = Learner::new(FbCprAuxModel::new(&cfg, 0.01, 0.99, Device::Cpu), agent());
    tch::manual_seed(3);
    let mut first = Learner::new(FbCprAuxModel::new(&cfg, 0.01, 0.99, Device::Cpu), agent());
    run(&mut straight, 0, 5);
    run(&mut first, 0, 3);

    let dir = tempfile::tempdir().unwrap();
    checkpoint::save_model(&first.model, &first.agent, dir.path()).unwrap();
    let steps = checkpoint::save_optimizers(&first, dir.path()).unwrap();
    drop(first);
    let (model, saved) = checkpoint::load_model(dir.path(), Device::Cpu).unwrap();
    assert_eq!(saved.model, cfg);
    let mut resumed = Learner::new(model, agent());
    checkpoint::load_optimizers(&mut resumed, dir.path(), &steps).unwrap();
    assert_eq!(resumed.updates(), 3);
    run(&mut resumed, 3, 5);

    let (a, b) = (snapshot(&straight), snapshot(&resumed));
    assert_eq!(a.len(), b.len());
    for (name, t) in &a {
        assert!(t.equal(&b[name]), "{name} differs after resume");
    }
    // Not vacuous: training moved the parameters.
    tch::manual_seed(3);
    let fresh = FbCprAuxModel::new(&cfg, 0.01, 0.99, Device::Cpu);
    assert!(
        !fresh
            .store
            .get("_actor.policy.0.mlp.1.weight")
            .unwrap()
            .equal(&a["_actor.policy.0.mlp.1.weight"])
    );
}

#[test]
fn bad_checkpoints_are_refused_with_the_tensor_named() {
    let _serial = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = ModelConfig::tiny();
    let model = FbCprAuxModel::new(&cfg, 0.01, 0.99, Device::Cpu);
    let dir = tempfile::tempdir().unwrap();
    checkpoint::save_model(&model, &agent(), dir.path()).unwrap();
    let weights = dir.path().join("model/model.safetensors");

    // A tensor of the wrong shape.
    let mut tensors = Tensor::read_safetensors(&weights).unwrap();
    for (name, t) in tensors.iter_mut() {
        if name == "_backward_map.net.0.weight" {
            *t = Tensor::zeros([3, 3], (Kind::Float, Device::Cpu));
        }
    }
    Tensor::write_safetensors(&tensors, &weights).unwrap();
    let err = checkpoint::load_model(dir.path(), Device::Cpu).unwrap_err();
    assert!(
        matches!(&err, CheckpointError::Tensor { name, .. } if name == "_backward_map.net.0.weight"),
        "{err}"
    );
    assert!(err.to_string().contains("shape [3, 3]"), "{err}");

    // A missing online tensor; missing targets are rebuilt from the online networks.
    let kept: Vec<(String, Tensor)> = tensors
        .into_iter()
        .filter(|(n, _)| {
            !n.starts_with("_target_") && n != "_actor.policy.0.mlp.1.bias" && n != "_backward_map.net.0.weight"
        })
        .collect();
    Tensor::write_safetensors(&kept, &weights).unwrap();
    let err = checkpoint::load_model(dir.path(), Device::Cpu).unwrap_err();
    assert!(
        err.to_string().contains("_actor.policy.0.mlp.1.bias: missing") || err.to_string().contains("missing"),
        "{err}"
    );

    // A config of ours with an impossible value is refused, naming the file and the key.
    checkpoint::save_model(&model, &agent(), dir.path()).unwrap();
    let config_path = dir.path().join("model/config.json");
    let text =
        std::fs::read_to_string(&config_path)
            .unwrap()
            .replacen("\"hidden_layers\": 3", "\"hidden_layers\": 1", 1);
    std::fs::write(&config_path, text).unwrap();
    let err = checkpoint::load_model(dir.path(), Device::Cpu).unwrap_err();
    assert!(
        err.to_string().contains("config.json") && err.to_string().contains("hidden_layers must be >= 2"),
        "{err}"
    );

    // A width past any layer's bound (as a zero-element tensor of a released checkpoint can
    // name) is refused before anything of that width is allocated.
    checkpoint::save_model(&model, &agent(), dir.path()).unwrap();
    let text = std::fs::read_to_string(&config_path).unwrap();
    let at = text.find("\"hidden_dim\": ").unwrap() + "\"hidden_dim\": ".len();
    let end = at + text[at..].find(|c: char| !c.is_ascii_digit()).unwrap();
    std::fs::write(&config_path, format!("{}1099511627776{}", &text[..at], &text[end..])).unwrap();
    let err = checkpoint::load_model(dir.path(), Device::Cpu).unwrap_err();
    assert!(err.to_string().contains("more than the 16384"), "{err}");

    // Not JSON at all: refused, naming the file.
    std::fs::write(&config_path, "{ not json").unwrap();
    let err = checkpoint::load_model(dir.path(), Device::Cpu).unwrap_err();
    assert!(err.to_string().contains("config.json"), "{err}");

    // A folder that is not a checkpoint says so in words; a run folder gets a pointer to its
    // checkpoint.
    let run = tempfile::tempdir().unwrap();
    let err = checkpoint::load_model(run.path(), Device::Cpu).unwrap_err().to_string();
    assert!(
        err.contains("not a checkpoint or export") && !err.contains("IoError"),
        "{err}"
    );
    checkpoint::save_model(&model, &agent(), &run.path().join("checkpoint")).unwrap();
    let err = checkpoint::load_model(run.path(), Device::Cpu).unwrap_err().to_string();
    assert!(err.contains("its checkpoint is"), "{err}");
}

#[test]
fn an_inference_export_without_targets_loads() {
    let _serial = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = ModelConfig::tiny();
    let model = FbCprAuxModel::new(&cfg, 0.01, 0.99, Device::Cpu);
    let dir = tempfile::tempdir().unwrap();
    checkpoint::save_model(&model, &agent(), dir.path()).unwrap();
    let weights = dir.path().join("model/model.safetensors");
    let kept: Vec<(String, Tensor)> = Tensor::read_safetensors(&weights)
        .unwrap()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("_target_"))
        .collect();
    Tensor::write_safetensors(&kept, &weights).unwrap();
    let (loaded, _) = checkpoint::load_model(dir.path(), Device::Cpu).unwrap();
    let a = loaded.store.get("_forward_map.Fs.0.mlp.1.weight").unwrap();
    let b = loaded.store.get("_target_forward_map.Fs.0.mlp.1.weight").unwrap();
    assert!(a.equal(b));
    assert!(a.equal(model.store.get("_forward_map.Fs.0.mlp.1.weight").unwrap()));
}

#[test]
fn a_checkpoint_with_a_foreign_config_loads_by_its_tensor_shapes() {
    let _serial = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    // A checkpoint written by BFM-Zero's own code has the same tensor names but its own
    // config.json: the sizes must come from the shapes.
    for cfg in [ModelConfig::tiny(), ModelConfig::small()] {
        let model = FbCprAuxModel::new(&cfg, 0.01, 0.99, Device::Cpu);
        let dir = tempfile::tempdir().unwrap();
        checkpoint::save_model(&model, &agent(), dir.path()).unwrap();
        std::fs::write(
            dir.path().join("model/config.json"),
            r#"{"archi": {"z_dim": 16}, "obs_normalizer": {}}"#,
        )
        .unwrap();
        let (loaded, saved) = checkpoint::load_model(dir.path(), Device::Cpu).unwrap();
        assert_eq!(saved.model, cfg);
        let a = model.store.get("_actor.policy.0.mlp.1.weight").unwrap();
        assert!(a.equal(loaded.store.get("_actor.policy.0.mlp.1.weight").unwrap()));
    }
}
