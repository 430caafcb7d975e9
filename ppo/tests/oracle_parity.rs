//! Parity with an independent PyTorch oracle (`ppo/oracle/ppo_oracle.py`, written from the
//! algorithm's definition in docs/ppo-tracker.md §9 with torch's own Adam, `clip_grad_norm_` and
//! `Normal`): on a fixed rollout, the returns and advantages, every minibatch's losses, the first
//! minibatch's gradients, the learning rate and every tensor after one whole update (5 epochs × 4
//! minibatches, KL-adaptive learning rate) agree within 1e-5.

use arena_ppo::config::{LrSchedule, PpoConfig};
use arena_ppo::oracle_io::{CaseSizes, OracleCase};
use arena_ppo::ppo::{self, UpdateTrace};
use arena_torch::optim::Adam;
use arena_torch::tensors::read_tensors;
use std::path::{Path, PathBuf};
use std::process::Command;
use tch::{Kind, Tensor};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Normwise relative error ‖a − b‖ / max(‖b‖, 1e-6).
fn rel(a: &Tensor, b: &Tensor) -> f64 {
    let d = (a.to_kind(Kind::Double) - b.to_kind(Kind::Double))
        .norm()
        .double_value(&[]);
    d / b.to_kind(Kind::Double).norm().double_value(&[]).max(1e-6)
}

#[test]
fn one_update_matches_the_pytorch_oracle() {
    let Some((python, pythonpath)) = arena_torch::python::oracle_python_or_skip(&repo_root()) else {
        return;
    };
    tch::manual_seed(20261126);
    let case = OracleCase::random(&CaseSizes {
        steps: 6,
        envs: 16,
        obs_dim: 160,
        critic_dim: 286,
        act_dim: 29,
        actor_hidden: vec![32, 16],
        critic_hidden: vec![24, 12],
    });
    let config = PpoConfig {
        schedule: LrSchedule::Adaptive,
        learning_rate: 1e-3,
        desired_kl: 0.002,
        ..PpoConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    case.write(dir.path(), &config).unwrap();
    let OracleCase {
        model,
        rollout,
        last_values,
        permutation,
        ..
    } = case;

    let (returns, advantages) = ppo::compute_returns(&rollout, &last_values, config.gamma, config.lam);
    let mut adam = Adam::new(model.parameters(), config.learning_rate);
    let mut trace = UpdateTrace::default();
    let batch = ppo::UpdateBatch {
        rollout: &rollout,
        returns: &returns,
        advantages: &advantages,
        permutation: &permutation,
    };
    let metrics = ppo::update(&model, &mut adam, &batch, &config, Some(&mut trace));
    assert_eq!(trace.losses.len(), 20);

    let script = repo_root().join("ppo/oracle/ppo_oracle.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(dir.path())
        .env("PYTHONPATH", &pythonpath)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "oracle failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let oracle = read_tensors(&dir.path().join("oracle.safetensors"), "missing").unwrap();
    let get = |k: &str| oracle.get(k).unwrap_or_else(|| panic!("oracle wrote no {k}"));
    let mut worst: Vec<(String, f64)> = vec![
        ("returns".into(), rel(&returns, get("returns"))),
        ("advantages".into(), rel(&advantages, get("advantages"))),
    ];
    let losses = Tensor::from_slice(&trace.losses.iter().flatten().copied().collect::<Vec<f64>>()).view([20, 4]);
    worst.push(("losses".into(), rel(&losses, get("losses"))));
    for (name, g) in &trace.first_grads {
        worst.push((format!("grad.{name}"), rel(g, get(&format!("grad.{name}")))));
    }
    for (name, p) in model.tensors() {
        worst.push((format!("after.{name}"), rel(&p, get(&format!("after.{name}")))));
    }
    let lr = get("learning_rate").double_value(&[]);
    worst.push(("learning_rate".into(), (metrics["learning_rate"] - lr).abs() / lr));
    assert!(
        (metrics["learning_rate"] - config.learning_rate).abs() > 1e-9,
        "the adaptive rule never moved the learning rate: the test does not exercise it"
    );
    let bad: Vec<&(String, f64)> = worst.iter().filter(|(_, e)| e.is_nan() || *e >= 1e-5).collect();
    let max = worst.iter().map(|w| w.1).fold(0.0, f64::max);
    eprintln!(
        "{} quantities compared, largest relative error {max:.2e}; learning rate {} → {}",
        worst.len(),
        config.learning_rate,
        metrics["learning_rate"]
    );
    assert!(bad.is_empty(), "differ from the oracle: {bad:?}");
}
