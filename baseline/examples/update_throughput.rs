//! Gradient updates per second of one FB-CPR-Aux update at a preset size, on a fixed random
//! batch, for `baseline/bench/update_throughput.py` (which runs the PyTorch oracle on the same
//! inputs and reports the ratio).
//!
//! `cargo run --release -p arena-bfm --example update_throughput -- --preset small --batch 1024
//!  --updates 10 [--dump DIR] [--device cpu|cuda]` prints one JSON line.

use arena_bfm::config::{AgentConfig, ModelConfig};
use arena_bfm::model::FbCprAuxModel;
use arena_bfm::oracle_io::{random_batches, write_update_inputs};
use arena_bfm::update::{Learner, UpdateNoise};
use clap::Parser;
use std::path::PathBuf;
use std::time::Instant;
use tch::Device;

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, default_value = "small")]
    preset: String,
    #[arg(long, default_value_t = 1024)]
    batch: i64,
    /// Timed updates (after one untimed warm-up update).
    #[arg(long, default_value_t = 10)]
    updates: usize,
    /// Also write the inputs for the PyTorch side here.
    #[arg(long)]
    dump: Option<PathBuf>,
    #[arg(long, default_value = "cpu")]
    device: String,
    #[arg(long, default_value_t = 0)]
    seed: i64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let device = match args.device.as_str() {
        "cpu" => Device::Cpu,
        "cuda" => Device::Cuda(0),
        other => anyhow::bail!("--device {other}: expected cpu or cuda"),
    };
    let cfg = ModelConfig::preset(&args.preset).ok_or_else(|| anyhow::anyhow!("unknown preset {}", args.preset))?;
    let agent = AgentConfig {
        batch_size: args.batch,
        ..AgentConfig::default()
    };
    agent.validate().map_err(anyhow::Error::msg)?;
    tch::manual_seed(args.seed);
    let model = FbCprAuxModel::new(&cfg, agent.obs_norm_momentum, agent.aux_reward_ema, device);
    let (train, expert) = random_batches(&model, &agent);
    let noise = UpdateNoise::draw(&agent, &cfg, device);
    if let Some(dir) = &args.dump {
        write_update_inputs(dir, &model, &agent, &train, &expert, &noise)?;
    }
    let mut learner = Learner::new(model, agent);
    let _ = learner.update_with_noise(&train, &expert, &noise);
    let sync = || {
        if let Device::Cuda(_) = device {
            tch::Cuda::synchronize(0);
        }
    };
    sync();
    let start = Instant::now();
    for _ in 0..args.updates {
        let (metrics, _) = learner.update_with_noise(&train, &expert, &noise);
        anyhow::ensure!(metrics.values().all(|v| v.is_finite()), "non-finite loss: {metrics:?}");
    }
    sync();
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "impl": "arena-bfm",
            "preset": args.preset,
            "batch": args.batch,
            "updates": args.updates,
            "seconds": seconds,
            "updates_per_s": args.updates as f64 / seconds,
            "threads": tch::get_num_threads(),
        })
    );
    Ok(())
}
