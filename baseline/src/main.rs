//! `arena-bfm`: train the BFM-Zero baseline, evaluate a checkpoint locally, or serve it to an
//! arena server as a participant's agent.

use anyhow::{Context, bail};
use arena_bench::metrics::metric_names;
use arena_bench::spec::{self, MOTIONS_ROOT_ENV};
use arena_bfm::agent::{SATURATED_ABOVE, TrackingAgent, check_layout};
use arena_bfm::checkpoint;
use arena_bfm::config::{ModelConfig, PRESETS, ParameterCounts};
use arena_bfm::train::{Motions, RunPaths, Trainer};
use arena_bfm::train_config::TrainConfig;
use arena_runner::local::{LocalOptions, run_local};
use arena_sim::RobotConfig;
use arena_torch::cli::parse_minutes;
use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tch::Device;

/// The BFM-Zero (FB-CPR-Aux) baseline of MimicArena: trainer, local evaluation, and agent.
///
/// Training runs on the arena's own simulator (the TrackingEnv that scores participants);
/// checkpoints use BFM-Zero's released layout (model/model.safetensors, config.json,
/// init_kwargs.json). See docs/baseline.md.
#[derive(Debug, Parser)]
#[command(name = "arena-bfm", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Train from a TOML config (baseline/configs/*.toml), or resume a run in --out.
    Train(TrainArgs),
    /// Run a checkpoint through a whole benchmark locally and print its scores.
    Eval(EvalArgs),
    /// Serve a checkpoint as a participant's agent: one scored submission on a server.
    ///
    /// Of g1-smoke (unless --benchmark or --phase), named bfm-zero-baseline (unless --name);
    /// --practice runs motions unscored and --submission resumes one. The session options are
    /// the SDK's (arena_sdk::cli).
    Agent(AgentArgs),
    /// Write some networks of a checkpoint (by default what the agent needs) to a new folder:
    /// small enough to bring back from a GPU machine, loadable by eval, agent and
    /// train --init-from.
    Export(ExportArgs),
    /// List the model presets with their parameter counts.
    Presets {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum DeviceArg {
    Cpu,
    Cuda,
}

impl DeviceArg {
    fn device(self) -> anyhow::Result<Device> {
        match self {
            DeviceArg::Cpu => Ok(Device::Cpu),
            DeviceArg::Cuda if tch::Cuda::is_available() => Ok(Device::Cuda(0)),
            DeviceArg::Cuda => bail!("--device cuda: libtorch finds no CUDA device on this machine"),
        }
    }
}

#[derive(Debug, clap::Args)]
struct TrainArgs {
    /// Training configuration (TOML: preset, [model], [agent], [train]); not with --resume,
    /// which continues with the configuration saved in the checkpoint.
    #[arg(long, required_unless_present = "resume", conflicts_with = "resume")]
    config: Option<PathBuf>,
    /// Run folder: checkpoint/, train_log.csv, eval_log.csv.
    #[arg(long)]
    out: PathBuf,
    /// Override a config value, e.g. `--set train.num_env_steps=20000` (repeatable).
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    overrides: Vec<String>,
    /// Continue the run checkpointed in --out (its config.json is used; --set still applies).
    #[arg(long)]
    resume: bool,
    #[arg(long, value_enum, default_value = "cpu")]
    device: DeviceArg,
    /// Physics backend of the training envs, cpu or gpu (the GPU worker, with the Python that
    /// ARENA_GPU_PYTHON names: MuJoCo Warp on a CUDA device, else MuJoCo MJX; sets
    /// train.sim_backend).
    #[arg(long, value_parser = ["cpu", "gpu"])]
    backend: Option<String>,
    /// Start a new run with the networks of this checkpoint or export folder (sets
    /// train.init_from); the networks it lacks start from the seed.
    #[arg(long, conflicts_with = "resume")]
    init_from: Option<PathBuf>,
    /// Stop after this many minutes of training (at the end of an iteration) and write the
    /// checkpoint, even before train.num_env_steps; --resume continues the run later.
    #[arg(long, value_name = "MINUTES", value_parser = parse_minutes)]
    time_limit: Option<f64>,
    /// Folder that file-based motion sets resolve against (overrides train.motions_root).
    #[arg(long, env = MOTIONS_ROOT_ENV)]
    motions_root: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct EvalArgs {
    /// Checkpoint folder (the one holding model/).
    #[arg(long)]
    checkpoint: PathBuf,
    /// Benchmark name or file.
    #[arg(long, default_value = "g1-smoke")]
    benchmark: String,
    /// Folder of benchmark files (default: the shipped benchmarks/).
    #[arg(long, env = "ARENA_BENCHMARKS_DIR")]
    benchmarks_dir: Option<PathBuf>,
    /// Folder the benchmark's motion paths are relative to (g1-moves clips live outside the repo).
    #[arg(long, env = MOTIONS_ROOT_ENV, default_value = ".")]
    motions_root: PathBuf,
    /// Episodes simulated together (scores depend slightly on it: compare at one --batch).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    batch: u32,
    /// Future reference rows averaged into z (capped by the benchmark's reference_goal_horizon).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    window: u32,
    /// Where the networks run: cpu, or cuda with a CUDA libtorch and GPU.
    #[arg(long, value_enum, default_value = "cpu")]
    device: DeviceArg,
    /// Print the report JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ExportArgs {
    /// Checkpoint folder (the one holding model/), e.g. RUN/checkpoint.
    #[arg(long)]
    checkpoint: PathBuf,
    /// New folder for the export (its model/ is written).
    #[arg(long)]
    out: PathBuf,
    /// Networks to keep, comma-separated: actor, forward, backward, critic, aux_critic,
    /// discriminator, obs_normalizer, aux_reward_normalizer.
    #[arg(long, value_delimiter = ',', default_value = "actor,backward,obs_normalizer")]
    networks: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct AgentArgs {
    /// Checkpoint or export folder (the one holding model/), e.g. RUN/checkpoint.
    #[arg(long)]
    checkpoint: PathBuf,
    #[command(flatten)]
    session: arena_sdk::cli::SessionArgs,
    /// Future reference rows averaged into z (capped by the benchmark's reference_goal_horizon).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    window: u32,
    /// Where the networks run: cpu, or cuda with a CUDA libtorch and GPU.
    #[arg(long, value_enum, default_value = "cpu")]
    device: DeviceArg,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("ARENA_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli: Cli = arena_sdk::cli::parse();
    let result = match cli.command {
        Command::Train(a) => train(a),
        Command::Eval(a) => eval(a),
        Command::Agent(a) => agent(a),
        Command::Export(a) => export(a),
        Command::Presets { json } => {
            // `arena-bfm presets | head` ends quietly, as Unix tools do (Rust ignores SIGPIPE,
            // so `println!` would panic on the closed pipe); only this one-shot printer.
            // SAFETY: resets one signal's disposition before this command starts a thread.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            }
            presets(json)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            // 2 for options that cannot run together, as for those clap refuses.
            arena_sdk::cli::exit_code(&e)
        }
    }
}

fn load_benchmark(name: &str, dir: Option<&Path>, motions_root: &Path) -> anyhow::Result<Motions> {
    let dir = dir.map(Path::to_path_buf).unwrap_or_else(spec::shipped_dir);
    let (path, spec) = spec::find_benchmark(name, &dir, &metric_names())?;
    let clips = arena_runner::episode::benchmark_clips(&spec, motions_root, &RobotConfig::default())
        .with_context(|| format!("loading the motions of {} ({})", spec.name, path.display()))?;
    Ok(Motions { spec, clips })
}

fn train(a: TrainArgs) -> anyhow::Result<()> {
    let paths = RunPaths { dir: a.out.clone() };
    if let Some(what) = paths.recover_interrupted_save()? {
        eprintln!("note: {what}");
    }
    let mut config = if a.resume {
        let saved = paths.checkpoint().join("config.json");
        // An export holds `model/` and no run configuration: say what it is, not that nothing
        // is there.
        if !saved.exists() && paths.checkpoint().join("model").is_dir() {
            bail!(
                "--resume: {}: an export, not a run's checkpoint; start a run from it with train.init_from (--init-from)",
                paths.checkpoint().display()
            );
        }
        let text = std::fs::read_to_string(&saved)
            .with_context(|| format!("--resume: no checkpoint in {} ({})", a.out.display(), saved.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", saved.display()))?
    } else {
        TrainConfig::load(a.config.as_deref().expect("clap requires --config without --resume"))
            .map_err(anyhow::Error::msg)?
    };
    for o in &a.overrides {
        config.set(o).map_err(anyhow::Error::msg)?;
    }
    if let Some(root) = &a.motions_root {
        config.train.motions_root = Some(root.clone());
    }
    if let Some(backend) = &a.backend {
        config.train.sim_backend = backend.clone();
    }
    if let Some(dir) = &a.init_from {
        config.train.init_from = Some(dir.clone());
    }
    if !a.resume {
        paths.check_free_for_new_run()?;
    }
    let root = config.train.motions_root.clone().unwrap_or_else(|| PathBuf::from("."));
    let motions = load_benchmark(&config.train.benchmark, config.train.benchmarks_dir.as_deref(), &root)?;
    let device = a.device.device()?;
    let mut trainer = Trainer::new(config, motions, paths, device, a.resume)?;
    trainer.time_limit = a.time_limit.map(|m| std::time::Duration::from_secs_f64(m * 60.0));
    if trainer.status.time >= trainer.config.train.num_env_steps {
        // A resumed run already at its end: say so rather than print a finished bar.
        println!(
            "the run in {} has trained {} env steps, train.num_env_steps is {}: nothing to do \
             (to train further: --resume --set train.num_env_steps=N with a larger N)",
            a.out.display(),
            trainer.status.time,
            trainer.config.train.num_env_steps
        );
        return Ok(());
    }
    let bar = ProgressBar::new(trainer.config.train.num_env_steps);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} env steps (eta {eta})  {msg}")
            .expect("valid template"),
    );
    bar.set_position(trainer.status.time);
    trainer.run(&mut |done, _total, row| {
        bar.set_position(done);
        if let Some(row) = row {
            // A loss before the first update is "-" (the CSV leaves it empty), not NaN.
            let get = |k: &str| {
                row.get(k)
                    .copied()
                    .filter(|v| v.is_finite())
                    .map_or("-".to_string(), |v| format!("{v:.3}"))
            };
            bar.set_message(format!(
                "fb_loss {}  actor_loss {}  FPS {}",
                get("fb_loss"),
                get("actor_loss"),
                row.get("FPS").map_or("-".to_string(), |v| format!("{v:.0}"))
            ));
        }
    })?;
    bar.finish_and_clear();
    let early = trainer.status.time < trainer.config.train.num_env_steps;
    let wall = trainer.status.wall_time_s;
    println!(
        "trained {} env steps ({} updates) in {} over the run's sessions{}; checkpoint: {}",
        trainer.status.time,
        trainer.status.updates,
        if wall < 60.0 {
            format!("{wall:.1} s")
        } else {
            format!("{:.1} min", wall / 60.0)
        },
        if early { ", stopped by --time-limit" } else { "" },
        a.out.join("checkpoint").display()
    );
    Ok(())
}

/// Loads a checkpoint or export for the tracking agent.
fn load_agent_model(dir: &Path, device: Device) -> anyhow::Result<arena_bfm::model::FbCprAuxModel> {
    let (model, saved) = checkpoint::load_model(dir, device)?;
    saved
        .require(&checkpoint::AGENT_NETWORKS, "the agent")
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    Ok(model)
}

fn eval(a: EvalArgs) -> anyhow::Result<()> {
    let device = a.device.device()?;
    let model = load_agent_model(&a.checkpoint, device)?;
    let motions = load_benchmark(&a.benchmark, a.benchmarks_dir.as_deref(), &a.motions_root)?;
    check_layout(&arena_runner::episode::observation_layout(&motions.spec))
        .map_err(|e| anyhow::anyhow!("{}: {e}", motions.spec.name))?;
    let mut agent = TrackingAgent::new(model, a.window as usize);
    let options = LocalOptions {
        batch: a.batch as usize,
        threads: 0,
        ..Default::default()
    };
    let bar = ProgressBar::new(0);
    let aggregator = run_local(
        &motions.spec,
        &motions.clips,
        &mut agent,
        &options,
        &mut |done, total, r| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            bar.set_message(format!("{} {}", r.motion, r.status));
        },
    )?;
    bar.finish_and_clear();
    if let Some(e) = &agent.error {
        bail!("{}: {e}", motions.spec.name);
    }
    let stats = agent.stats;
    let report = aggregator.report(
        &motions.spec.name,
        serde_json::json!({
            "checkpoint": a.checkpoint,
            // The window the agent used: the requested one, capped by the benchmark's horizon.
            "window": a.window.min(motions.spec.observations.reference_goal_horizon),
            "action_mean_abs": stats.mean_abs(),
            "action_saturated_share": stats.saturated_share(),
        }),
    );
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "{:<28} {:>9} {:>6} {:>9} {:>9}",
        "motion", "status", "steps", "emd", "success"
    );
    for e in aggregator.episodes() {
        let m = |k: &str| e.metrics.get(k).map_or("-".to_string(), |v| format!("{v:.4}"));
        println!(
            "{:<28} {:>9} {:>6} {:>9} {:>9}",
            e.motion,
            e.status.to_string(),
            e.num_steps,
            m("emd"),
            m("success")
        );
    }
    let episodes = report.episodes.len();
    let scored = report.episodes.iter().filter(|e| e.status.is_scored()).count();
    println!(
        "{episodes} episodes, {scored} scored, {} failed unscored (left out of the means; the success rate is over all {episodes})",
        episodes - scored
    );
    for key in ["emd", "success", "failure_time_s", "mpjpe_l"] {
        if let Some(s) = report.aggregated.get(key) {
            if arena_bench::metrics::SUCCESS_METRICS.contains(&key) {
                // An unscored failure is no success: over every episode, as the leaderboard.
                println!(
                    "success rate {key}: {:.4} (of all {episodes} episodes)",
                    report.success_rate(key)
                );
            } else {
                println!(
                    "mean {key}: {:.4} (std {:.4}, over {} scored episodes)",
                    s.mean, s.std, s.count
                );
            }
        }
    }
    println!(
        "actions: mean |a| {:.3}, {:.1} % of {} components beyond ±{SATURATED_ABOVE} (saturated)",
        stats.mean_abs(),
        100.0 * stats.saturated_share(),
        stats.components
    );
    Ok(())
}

fn agent(a: AgentArgs) -> anyhow::Result<()> {
    let device = a.device.device()?;
    let model = load_agent_model(&a.checkpoint, device)?;
    let mut agent = TrackingAgent::new(model, a.window as usize);
    let config = a.session.client_config("g1-smoke", "bfm-zero-baseline")?;
    // The client's error says what the server made of it (a refused layout: the submission's
    // fate); it carries the agent's own reason.
    arena_sdk::cli::run(&config, &mut agent).map_err(anyhow::Error::msg)?;
    if let Some(e) = &agent.error {
        bail!("{e}");
    }
    Ok(())
}

fn export(a: ExportArgs) -> anyhow::Result<()> {
    if a.out.join("model").exists() {
        bail!("{} already holds a model/; choose another --out", a.out.display());
    }
    let (model, saved) = checkpoint::load_model(&a.checkpoint, Device::Cpu)?;
    let wanted: Vec<&str> = a.networks.iter().map(String::as_str).collect();
    saved
        .require(&wanted, "this export")
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.checkpoint.display()))?;
    checkpoint::save_export(&model, &saved, &a.networks, &a.out)?;
    let path = a.out.join("model").join("model.safetensors");
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "exported {} to {} ({:.1} MB)",
        a.networks.join(", "),
        path.display(),
        bytes as f64 / 1e6
    );
    Ok(())
}

fn presets(json: bool) -> anyhow::Result<()> {
    let rows: Vec<(String, ParameterCounts)> = PRESETS
        .iter()
        .map(|p| {
            (
                p.to_string(),
                ParameterCounts::of(&ModelConfig::preset(p).expect("listed preset")),
            )
        })
        .collect();
    if json {
        let map: serde_json::Map<String, serde_json::Value> = rows
            .iter()
            .map(|(p, c)| {
                (
                    p.clone(),
                    serde_json::json!({"counts": c, "total": c.total(), "model": ModelConfig::preset(p)}),
                )
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&map)?);
        return Ok(());
    }
    println!(
        "{:<6} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10} {:>13}",
        "preset", "F", "Q_D", "Q_aux", "actor", "B", "D", "total"
    );
    for (p, c) in rows {
        println!(
            "{:<6} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10} {:>13}",
            p,
            c.forward,
            c.critic,
            c.aux_critic,
            c.actor,
            c.backward,
            c.discriminator,
            c.total()
        );
    }
    Ok(())
}
