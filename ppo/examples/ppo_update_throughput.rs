//! PPO updates per second of arena-ppo at a training configuration's sizes (the policy's
//! networks, envs × steps per rollout, epochs × minibatches): GAE and one whole update, on a
//! random rollout drawn from a model with non-trivial statistics ([`OracleCase`]), timed over
//! `--updates` updates after one warm-up. With `--dump DIR` it also writes the PyTorch oracle's
//! input files there, so that `ppo/bench/update_throughput.py` times the oracle on the same
//! update (issue 41 §3: how much of a training iteration the update takes, against the peer).
//! Prints one JSON line: {"updates_per_s", "updates", "samples", "threads", ...}.
//!
//! `cargo run --release -p arena-ppo --example ppo_update_throughput -- --updates 10`

use arena_ppo::config::PpoTrainConfig;
use arena_ppo::mdp::{ACTOR_DIM, CRITIC_DIM};
use arena_ppo::oracle_io::{CaseSizes, OracleCase};
use arena_ppo::ppo::{self, UpdateBatch};
use arena_torch::optim::Adam;
use clap::Parser;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// Training configuration whose sizes are measured.
    #[arg(long, default_value = "ppo/configs/g1-smoke.toml")]
    config: PathBuf,
    /// Timed updates (after one warm-up).
    #[arg(long, default_value_t = 10)]
    updates: usize,
    /// Also write the oracle's input files (init, rollout, config) into this folder.
    #[arg(long)]
    dump: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if a.updates == 0 {
        anyhow::bail!("--updates must be at least 1");
    }
    let config = PpoTrainConfig::load(&a.config).map_err(anyhow::Error::msg)?;
    tch::manual_seed(20261127);
    let sizes = CaseSizes {
        steps: config.env.steps_per_env as i64,
        envs: config.env.num_envs as i64,
        obs_dim: ACTOR_DIM as i64,
        critic_dim: CRITIC_DIM as i64,
        act_dim: arena_data::NUM_JOINTS as i64,
        actor_hidden: config.network.actor_hidden.clone(),
        critic_hidden: config.network.critic_hidden.clone(),
    };
    let case = OracleCase::random(&sizes);
    if let Some(dir) = &a.dump {
        std::fs::create_dir_all(dir)?;
        case.write(dir, &config.ppo)?;
    }
    let c = &config.ppo;
    let mut adam = Adam::new(case.model.parameters(), c.learning_rate);
    let mut one_update = || {
        let (returns, advantages) = ppo::compute_returns(&case.rollout, &case.last_values, c.gamma, c.lam);
        let batch = UpdateBatch {
            rollout: &case.rollout,
            returns: &returns,
            advantages: &advantages,
            permutation: &case.permutation,
        };
        ppo::update(&case.model, &mut adam, &batch, c, None);
    };
    one_update();
    let started = Instant::now();
    for _ in 0..a.updates {
        one_update();
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "updates_per_s": a.updates as f64 / secs, "updates": a.updates, "seconds": secs,
            "samples": sizes.steps * sizes.envs, "epochs": c.num_learning_epochs,
            "mini_batches": c.num_mini_batches, "actor_hidden": sizes.actor_hidden,
            "critic_hidden": sizes.critic_hidden, "threads": tch::get_num_threads(),
        })
    );
    Ok(())
}
