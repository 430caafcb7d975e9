//! Parity with an independent PyTorch oracle (`baseline/oracle/fb_cpr_aux_oracle.py`, written
//! from BFM_ZERO_FACTS.md alone): at the `tiny` size and a fixed batch, the forward outputs,
//! every loss term, every gradient and every tensor after one complete update agree within
//! 1e-5 (normwise relative error).
//!
//! The parameters after the update are checked as one fresh-Adam step from the Rust gradients
//! (`--after-from-their-grads`), while the gradients themselves are checked against the oracle's:
//! Adam's first step is about lr*sign(g), so an element whose gradient is at fp32 round-off can
//! move by 2*lr on one machine and not on another (3.4e-5 on one actor tensor on CI's CPUs, with
//! every gradient agreeing to 0 or 1e-7). Comparing the step on the same gradients keeps the
//! optimiser check exact without depending on the sign of round-off.
//!
//! Needs Python with torch (third_party/pytorch, installed by `make deps-torch`); without it the test says
//! so and skips, unless ARENA_REQUIRE_TORCH_ORACLE=1 (set by `make test`) makes that a failure.

use arena_bfm::config::{AgentConfig, ModelConfig};
use arena_bfm::model::FbCprAuxModel;
use arena_bfm::oracle_io::{model_tensors, random_batches, random_obs, write_update_inputs};
use arena_bfm::update::{Learner, UpdateNoise};
use std::path::{Path, PathBuf};
use std::process::Command;
use tch::{Device, Kind, Tensor};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn one_update_matches_the_pytorch_oracle() {
    let Some((python, pythonpath)) = arena_torch::python::oracle_python_or_skip(&repo_root()) else {
        return;
    };
    tch::manual_seed(20261123);
    let cfg = ModelConfig::tiny();
    let agent = AgentConfig {
        batch_size: 64,
        seq_length: 8,
        ..AgentConfig::default()
    };
    let mut model = FbCprAuxModel::new(&cfg, agent.obs_norm_momentum, agent.aux_reward_ema, Device::Cpu);
    // Non-trivial running statistics and aux-reward history before the update under test.
    model.update_normalizer(&random_obs(&cfg, 256, 0.3, Device::Cpu));
    let _ = model
        .aux_reward_normalizer
        .update_and_normalize(&(Tensor::randn([64, 1], (Kind::Float, Device::Cpu)) - 1.0));
    let (train, expert) = random_batches(&model, &agent);
    let noise = UpdateNoise::draw(&agent, &cfg, Device::Cpu);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_update_inputs(d, &model, &agent, &train, &expert, &noise).unwrap();

    let outputs = tch::no_grad(|| {
        let obs = model.normalize(&train.obs);
        let next_obs = model.normalize(&train.next_obs);
        vec![
            (
                "out.forward",
                model.forward_map.forward(&obs.critic_input(), &train.z, &train.action),
            ),
            ("out.backward", model.backward_map.forward(&next_obs.goal_input())),
            ("out.actor_mean", model.actor.mean(&obs.actor_input(), &train.z)),
            (
                "out.critic",
                model.critic.forward(&obs.critic_input(), &train.z, &train.action),
            ),
            (
                "out.aux_critic",
                model.aux_critic.forward(&obs.critic_input(), &train.z, &train.action),
            ),
            (
                "out.disc_logits",
                model.discriminator.logits(&obs.goal_input(), &train.z),
            ),
        ]
    });
    Tensor::write_safetensors(&outputs, d.join("outputs.safetensors")).unwrap();

    let mut learner = Learner::new(model, agent);
    learner.capture_grads = true;
    let (metrics, _) = learner.update_with_noise(&train, &expert, &noise);
    for (name, v) in &metrics {
        assert!(v.is_finite(), "{name} = {v}");
    }
    let grads: Vec<(String, Tensor)> = learner
        .last_grads
        .iter()
        .map(|(n, g)| (format!("grad.{n}"), g.shallow_clone()))
        .collect();
    let trainable = learner.model.store.iter().filter(|(_, e)| e.trainable).count();
    assert_eq!(grads.len(), trainable, "a gradient for every trainable tensor");
    Tensor::write_safetensors(&grads, d.join("grads.safetensors")).unwrap();
    Tensor::write_safetensors(&model_tensors(&learner.model), d.join("after.safetensors")).unwrap();
    std::fs::write(d.join("metrics.json"), serde_json::to_string_pretty(&metrics).unwrap()).unwrap();

    let oracle = repo_root().join("baseline/oracle/fb_cpr_aux_oracle.py");
    let out = Command::new(&python)
        .arg(&oracle)
        .arg(d)
        .args(["--tol", "1e-5", "--json", "--after-from-their-grads"])
        .env("PYTHONPATH", &pythonpath)
        .output()
        .expect("run the oracle");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("report.json")).expect("the oracle writes report.json"))
            .unwrap();
    let compared = report["compared"].as_u64().unwrap();
    assert!(
        compared as usize > 2 * trainable,
        "the oracle compared only {compared} tensors"
    );
    assert!(
        out.status.success(),
        "oracle parity failed: worst {} on {}",
        report["worst"],
        report["worst_name"]
    );
}
