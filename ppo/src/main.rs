//! `arena-ppo`: train the PPO motion tracker, evaluate it, serve it to an arena server, export it
//! as ONNX. docs/ppo-tracker.md explains the MDP, the configuration and the costs.

use anyhow::Context;
use arena_bench::metrics::metric_names;
use arena_bench::spec::{self, BenchmarkSpec, MOTIONS_ROOT_ENV};
use arena_data::MotionClip;
use arena_ppo::config::PpoTrainConfig;
use arena_ppo::train::{Trainer, evaluate_policy, load_model};
use arena_sdk::tracker::{TrackerAgent, TrackerPolicy};
use arena_sim::RobotConfig;
use arena_torch::cli::{parse_device, parse_minutes};
use arena_torch::run_dir::RunPaths;
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "arena-ppo",
    version,
    about = "PPO motion tracker (BeyondMimic recipe, as mjlab reimplements it) for MimicArena",
    long_about = "Trains a PPO policy that tracks the G1 reference motions of a joint-position \
benchmark (g1-smoke-robot by default) on the arena's own simulator, with the robot-interface \
observations the server sends, so the trained policy is served with no extra code. \
`train` writes a run folder (checkpoint/, train_log.csv, and eval_log.csv when the run evaluates: \
run.eval_every > 0); `eval` scores a \
checkpoint exactly as a submission is scored; `agent` connects it to a server; `export` writes \
the actor as ONNX in the mjlab convention (for `arena-agent onnx` and the field's deploy tools). \
docs/ppo-tracker.md has the details."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a tracker (or resume a run with --resume).
    #[command(
        override_usage = "arena-ppo train --config <CONFIG> --out <OUT> [OPTIONS]\n       arena-ppo train --resume --out <OUT> [OPTIONS]"
    )]
    Train(TrainArgs),
    /// Score a checkpoint on a benchmark with the arena's metrics (no server needed).
    Eval(EvalArgs),
    /// Connect a checkpoint to an arena server as a participant's agent.
    ///
    /// A scored submission of the benchmark the policy was trained on (unless --benchmark or
    /// --phase), named arena-ppo (unless --name); --practice runs motions unscored and
    /// --submission resumes one. The session options are the SDK's (arena_sdk::cli).
    Agent(AgentArgs),
    /// Write a checkpoint's actor as ONNX (mjlab's inputs, outputs and metadata).
    Export(ExportArgs),
}

#[derive(clap::Args)]
struct TrainArgs {
    /// Training configuration (TOML; ppo/configs/ has examples). Not needed with --resume,
    /// which takes the checkpoint's own (with --set for what a resume may change).
    #[arg(long, required_unless_present = "resume", conflicts_with = "resume")]
    config: Option<PathBuf>,
    /// Run folder: checkpoint/, train_log.csv, and eval_log.csv once an evaluation has run
    /// (run.eval_every > 0).
    #[arg(long)]
    out: PathBuf,
    /// Continue the run in --out from its checkpoint (exactly, see docs/ppo-tracker.md).
    #[arg(long)]
    resume: bool,
    /// `section.key=value` overrides of the configuration (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Physics backend of the envs (sets `env.sim_backend`): cpu (MuJoCo on CPU threads, exact
    /// resume) or gpu (the GPU worker: MuJoCo Warp on a CUDA device, else MJX;
    /// docs/gpu-backend.md).
    #[arg(long, value_parser = ["cpu", "gpu"])]
    backend: Option<String>,
    /// Where the networks and the PPO update run: cpu, or cuda (a CUDA build of arena-ppo,
    /// `ARENA_PPO_CUDA=1`, on a machine with a GPU). Exact resume holds on the CPU.
    #[arg(long, default_value = "cpu", value_parser = parse_device)]
    device: tch::Device,
    /// Stop at the first checkpoint boundary after this many minutes, with a checkpoint.
    #[arg(long, value_name = "MINUTES", value_parser = parse_minutes)]
    time_limit: Option<f64>,
    /// Folder that file-based motion sets resolve against (wins over the configuration's
    /// `env.motions_root`; without either, the working folder).
    #[arg(long, env = MOTIONS_ROOT_ENV)]
    motions_root: Option<PathBuf>,
    /// No progress bar (logs only).
    #[arg(long)]
    quiet: bool,
}

#[derive(clap::Args)]
struct EvalArgs {
    /// Checkpoint folder (a run's checkpoint/ or a committed one).
    checkpoint: PathBuf,
    /// Benchmark to score on, a name or a file (default: the one the policy was trained on).
    #[arg(long)]
    benchmark: Option<String>,
    /// Folder of benchmark files (default: the shipped benchmarks/).
    #[arg(long, env = "ARENA_BENCHMARKS_DIR")]
    benchmarks_dir: Option<PathBuf>,
    /// Folder the benchmark's motion paths are relative to (g1-moves clips live outside the repo).
    #[arg(long, env = MOTIONS_ROOT_ENV, default_value = ".")]
    motions_root: PathBuf,
    /// Simulator threads (0 = one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Print the means as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct AgentArgs {
    /// Checkpoint folder (a run's checkpoint/ or a committed one).
    checkpoint: PathBuf,
    #[command(flatten)]
    session: arena_sdk::cli::SessionArgs,
}

#[derive(clap::Args)]
struct ExportArgs {
    /// Checkpoint folder (a run's checkpoint/ or a committed one).
    checkpoint: PathBuf,
    /// Output file (.onnx).
    #[arg(long)]
    out: PathBuf,
    /// Also write a JSON of random actor inputs and the actions the trained (libtorch) actor
    /// gives them, to check the ONNX file's actions against (e.g. with onnxruntime).
    #[arg(long, value_name = "FILE")]
    probe: Option<PathBuf>,
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

fn load_benchmark(
    name: &str,
    dir: Option<&Path>,
    motions_root: &Path,
) -> anyhow::Result<(BenchmarkSpec, Vec<MotionClip>)> {
    let dir = dir.map(Path::to_path_buf).unwrap_or_else(spec::shipped_dir);
    let (path, spec) = spec::find_benchmark(name, &dir, &metric_names())?;
    let clips = arena_runner::episode::benchmark_clips(&spec, motions_root, &RobotConfig::default())
        .with_context(|| format!("loading the motions of {} ({})", spec.name, path.display()))?;
    Ok((spec, clips))
}

fn train(a: TrainArgs) -> anyhow::Result<()> {
    let paths = RunPaths { dir: a.out.clone() };
    // Before anything reads the checkpoint: a stop between a save's two renames leaves it as
    // `checkpoint.old` and `checkpoint.tmp`.
    if let Some(what) = paths.recover_interrupted_save()? {
        eprintln!("note: {what}");
    }
    let mut config = if a.resume {
        let path = paths.checkpoint().join("config.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("--resume: no checkpoint in {} ({})", a.out.display(), path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
    } else {
        PpoTrainConfig::load(a.config.as_deref().expect("clap requires --config without --resume"))
            .map_err(anyhow::Error::msg)?
    };
    config.set_all(&a.overrides).map_err(anyhow::Error::msg)?;
    if let Some(backend) = &a.backend {
        config
            .set(&format!("env.sim_backend={backend}"))
            .map_err(anyhow::Error::msg)?;
    }
    if !a.resume {
        paths.check_free_for_new_run()?;
    }
    let motions_root = (a.motions_root.clone())
        .or_else(|| config.env.motions_root.clone())
        .unwrap_or_else(|| PathBuf::from("."));
    let (spec, clips) = load_benchmark(
        &config.env.benchmark,
        config.env.benchmarks_dir.as_deref(),
        &motions_root,
    )?;
    let mut trainer = Trainer::new_on(config, spec, clips, paths, a.resume, a.device)?;
    let max = trainer.config.run.max_iterations;
    if max > 0 && trainer.status.iteration >= max {
        // A resumed run already at its end runs no iteration (only an evaluation it owes).
        eprintln!(
            "the run in {} is at iteration {}, run.max_iterations is {max}: no iteration to train \
             (to train further: --resume --set run.max_iterations=N with a larger N)",
            a.out.display(),
            trainer.status.iteration
        );
    }
    let bar = if a.quiet {
        ProgressBar::hidden()
    } else if max > 0 {
        ProgressBar::new(max)
    } else {
        ProgressBar::new_spinner()
    };
    // Without a last iteration (max_iterations = 0: the run ends at --time-limit) there is no
    // length: "16/16" would read as finished.
    let template = if max > 0 {
        "{spinner} [{elapsed_precise}] {pos}/{len} iterations {msg}"
    } else {
        "{spinner} [{elapsed_precise}] iteration {pos} {msg}"
    };
    bar.set_style(ProgressStyle::with_template(template).expect("template"));
    bar.set_position(trainer.status.iteration);
    let started = std::time::Instant::now();
    let early = trainer.run(a.time_limit.map(|m| m * 60.0), &mut |it, _, row| {
        bar.set_position(it);
        if let Some(r) = row {
            bar.set_message(format!(
                "| {:.0} steps/s | episode {:.0} steps | reward {:.4}",
                r.get("FPS").copied().unwrap_or(0.0),
                r.get("episode_length").copied().unwrap_or(0.0),
                r.get("mean_reward").copied().unwrap_or(0.0)
            ));
        }
    })?;
    bar.finish_and_clear();
    eprintln!(
        "trained to iteration {} ({} env steps) in {:.1} min this session{}; checkpoint: {}",
        trainer.status.iteration,
        trainer.status.env_steps,
        started.elapsed().as_secs_f64() / 60.0,
        if early { ", stopped by --time-limit" } else { "" },
        trainer.paths.checkpoint().display()
    );
    Ok(())
}

/// The tracker of a checkpoint and the benchmark to run it on (default: its own).
fn load_policy(
    dir: &Path,
    benchmark: Option<&str>,
    benchmarks_dir: Option<&Path>,
    motions_root: &Path,
) -> anyhow::Result<(TrackerPolicy, BenchmarkSpec, Vec<MotionClip>)> {
    let policy = TrackerPolicy::load(dir).map_err(anyhow::Error::msg)?;
    let name = benchmark.unwrap_or(&policy.card.benchmark).to_string();
    let (spec, clips) = load_benchmark(&name, benchmarks_dir, motions_root)?;
    Ok((policy, spec, clips))
}

fn eval(a: EvalArgs) -> anyhow::Result<()> {
    let (policy, spec, clips) = load_policy(
        &a.checkpoint,
        a.benchmark.as_deref(),
        a.benchmarks_dir.as_deref(),
        &a.motions_root,
    )?;
    let threads = match a.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let means = evaluate_policy(policy, &spec, &clips, threads)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&means)?);
    } else {
        let count = |k: &str| means.get(k).copied().unwrap_or(0.0) as usize;
        println!(
            "{}: {} episodes, {} scored, {} failed unscored (left out of the means; success rates are over all {})",
            spec.name,
            count("episodes"),
            count("scored"),
            count("failed_unscored"),
            count("episodes")
        );
        // The benchmark's ranking metrics first, then the rest by name.
        let ranking: Vec<&str> = spec
            .ranking
            .success
            .iter()
            .chain(&spec.ranking.survival)
            .chain([&spec.ranking.primary])
            .chain(&spec.ranking.tie_breakers)
            .map(String::as_str)
            .collect();
        let rest = means
            .keys()
            .map(String::as_str)
            .filter(|k| !ranking.contains(k) && !matches!(*k, "episodes" | "scored" | "failed_unscored"));
        for k in ranking.iter().copied().chain(rest) {
            let Some(v) = means.get(k) else { continue };
            let unit = arena_bench::metrics::metric_info(k).map_or("", |i| i.units);
            let mark = if ranking.contains(&k) { "*" } else { " " };
            println!("{mark} {k:24} {v:>12.4} {unit}");
        }
        println!("(* ranks the leaderboard, in this order)");
    }
    Ok(())
}

fn agent(a: AgentArgs) -> anyhow::Result<()> {
    let policy = TrackerPolicy::load(&a.checkpoint).map_err(anyhow::Error::msg)?;
    // The server has the motions: only the benchmark's name is needed here.
    let mut config = a.session.client_config(&policy.card.benchmark, "arena-ppo")?;
    if policy.card.gain_preset.is_empty() {
        config.joint_stiffness = policy.card.joint_stiffness.clone();
        config.joint_damping = policy.card.joint_damping.clone();
    } else {
        config.gain_preset = policy.card.gain_preset.clone();
    }
    let mut agent = TrackerAgent::new(policy);
    arena_sdk::cli::run(&config, &mut agent).map_err(anyhow::Error::msg)
}

fn export(a: ExportArgs) -> anyhow::Result<()> {
    let (model, card) = load_model(&a.checkpoint)?;
    // The card's checks (its per-joint vectors' lengths, its ranges), as every other reader of
    // the checkpoint makes them.
    arena_ppo::train::tracker_policy(&model, card.clone())
        .with_context(|| format!("{}: policy.json", a.checkpoint.display()))?;
    arena_ppo::onnx::export(&model, &card, &a.out)?;
    eprintln!("wrote {}", a.out.display());
    if let Some(path) = &a.probe {
        tch::manual_seed(0);
        let _guard = tch::no_grad_guard();
        // Rows around the normaliser's statistics, where the policy's inputs live.
        let noise = tch::Tensor::randn([16, arena_ppo::mdp::ACTOR_DIM as i64], tch::kind::FLOAT_CPU);
        let obs = &model.actor_norm.mean + noise * (&model.actor_norm.std * 2.0 + 0.1);
        let mut actions = model.act_inference(&obs);
        if let Some((lower, upper)) = arena_ppo::onnx::action_bounds(&card) {
            // The exported graph's clamp (what a runtime acts with).
            actions = actions
                .maximum(&tch::Tensor::from_slice(&lower))
                .minimum(&tch::Tensor::from_slice(&upper));
        }
        let rows =
            |t: &tch::Tensor| -> anyhow::Result<Vec<Vec<f32>>> { Ok(Vec::<Vec<f32>>::try_from(t.contiguous())?) };
        let probe = serde_json::json!({"obs": rows(&obs)?, "actions": rows(&actions)?});
        std::fs::write(path, probe.to_string()).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {} (16 inputs and the libtorch actor's actions)", path.display());
    }
    Ok(())
}
