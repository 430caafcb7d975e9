//! `arena eval`: run a whole benchmark in-process with a built-in policy, or an exported ONNX
//! policy run as the server runs a hosted one (`arena_onnx`, with the gains its metadata
//! declares).

use crate::backend::BackendArgs;
use crate::bench::BenchDirArg;
use crate::evaluation::{self, EvalOptions};
use crate::sim::BuiltinPolicy;
use anyhow::{Context, bail};
use arena_bench::metrics::metric_names;
use arena_bench::spec::{self, MOTIONS_ROOT_ENV};
use arena_sim::RobotConfig;
use clap::{ArgGroup, Args};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("agent").required(true).args(["policy", "onnx"])))]
pub struct EvalArgs {
    /// Benchmark name (see `arena bench list`) or path to a benchmark file.
    #[arg(long)]
    benchmark: String,
    /// Built-in policy to evaluate (or give --onnx).
    #[arg(long, value_enum)]
    policy: Option<BuiltinPolicy>,
    /// An exported policy (ONNX with mjlab / BeyondMimic or holosoma metadata) to evaluate
    /// instead, on a joint-position benchmark, as the server evaluates an uploaded one: the same
    /// engine and observation terms, the gains its metadata declares (checked against the
    /// benchmark's bounds). docs/bring-your-policy.md.
    #[arg(long, value_name = "FILE")]
    onnx: Option<PathBuf>,
    /// With --onnx: the benchmark's gain preset the policy was trained with, for a file that
    /// holds no PD gains (one without either is refused, as a hosted upload is).
    #[arg(long, requires = "onnx", value_name = "NAME")]
    gain_preset: Option<String>,
    /// Folder that the benchmark's motion paths are relative to.
    #[arg(long, env = MOTIONS_ROOT_ENV, default_value = ".")]
    motions_root: PathBuf,
    #[command(flatten)]
    dir: BenchDirArg,
    /// Episodes simulated together.
    #[arg(long, default_value_t = 32, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    batch: usize,
    /// Simulation threads (0 = one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    #[command(flatten)]
    backend: BackendArgs,
    /// Write the report JSON here (gzip-compressed when the name ends in .gz).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Print the report JSON on stdout instead of tables.
    #[arg(long)]
    json: bool,
}

pub fn run(a: EvalArgs) -> anyhow::Result<()> {
    // Refuse an unwritable report path now, not after the whole benchmark has run.
    if let Some(out) = &a.report {
        crate::check_writable(out)?;
    }
    let known = metric_names();
    let (path, spec) = spec::find_benchmark(&a.benchmark, &a.dir.dir(), &known)?;
    if let Some(out) = &a.report {
        let inputs = std::iter::once(&path).chain(a.onnx.as_ref());
        if let Some(input) = inputs.into_iter().find(|input| crate::same_file(out, input)) {
            bail!(
                "--report {} is an input of the run ({}): choose another path",
                out.display(),
                input.display()
            );
        }
    }
    let robot = RobotConfig::default();
    let clips = arena_runner::episode::benchmark_clips(&spec, &a.motions_root, &robot)
        .with_context(|| format!("loading the motions of {} ({})", spec.name, path.display()))?;
    let threads = if a.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        a.threads
    };
    let (mut agent, gains, policy_name) = match (&a.onnx, a.policy) {
        (Some(file), _) => {
            let (agent, gains) = onnx_agent(file, a.gain_preset.as_deref(), &spec)?;
            (agent, gains, format!("onnx {}", file.display()))
        }
        (None, Some(builtin)) => (builtin.agent(), None, format!("{builtin:?}").to_lowercase()),
        (None, None) => anyhow::bail!("give --policy or --onnx"),
    };
    let options = EvalOptions {
        batch: a.batch,
        threads,
        backend: a.backend.scoring_backend()?,
        gains,
    };
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} episodes  {msg}")
            .expect("valid template"),
    );
    // Until the first episode ends the bar would stand still: the GPU worker's start (MJX
    // compiles its step for the batch, a minute or more on a CPU) said in words, and ticking.
    bar.set_message(match &options.backend {
        arena_sim::SimBackend::Gpu(_) => "starting the simulator (a GPU worker: MJX compiles its step first)",
        _ => "starting the simulator",
    });
    bar.enable_steady_tick(std::time::Duration::from_millis(500));
    // The bar draws on a terminal only: anywhere else (a log, a pipe) a line per finished
    // episode on stderr says that the run goes on, where it said nothing until the end.
    let lines = !std::io::IsTerminal::is_terminal(&std::io::stderr());
    if lines {
        eprintln!(
            "{} v{}: {policy_name}, batch {}, {threads} thread{}: running (a line per finished episode)",
            spec.name,
            spec.version,
            options.batch,
            if threads == 1 { "" } else { "s" }
        );
    }
    let ran = evaluation::run_benchmark(&spec, &clips, agent.as_mut(), &options, &mut |done, total, r| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(format!("{} {}", r.motion, r.status));
        if lines {
            eprintln!("[{done}/{total}] {} {}", r.motion, r.status);
        }
    })?;
    bar.finish_and_clear();
    let run = serde_json::json!({
        "policy": policy_name,
        "motions_root": a.motions_root,
        "benchmark_file": path,
        "threads": threads,
        "batch": options.batch,
        "backend": options.backend.name(),
    });
    let report = evaluation::report(&spec, &ran, run);
    if let Some(out) = &a.report {
        crate::write_replacing(out, |to| {
            report.write(to).with_context(|| format!("writing {}", out.display()))
        })?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    // The table shows the ranking metrics first (success rule, survival, primary, tie
    // breakers), then the other success rule and the body-position errors in mm. Each column
    // says its unit on the second header line.
    let mut shown: Vec<&str> = spec.ranking.success.as_deref().into_iter().collect();
    shown.extend(spec.ranking.survival.as_deref());
    shown.push(spec.ranking.primary.as_str());
    shown.extend(spec.ranking.tie_breakers.iter().map(String::as_str));
    for extra in ["success", "mjlab_success", "mpjpe_g", "mpjpe_rr"] {
        if spec.metrics.list.iter().any(|m| m == extra) && !shown.contains(&extra) {
            shown.push(extra);
        }
    }
    let unit = |m: &str| arena_bench::metrics::metric_info(m).map_or("", |i| i.units);
    println!(
        "{} v{}: {} policy, {} episodes, on {}",
        spec.name,
        spec.version,
        policy_name,
        report.episodes.len(),
        ran.engine
    );
    print!("{:<8} {:<28} {:>6} {:<10}", "episode", "motion", "steps", "status");
    for m in &shown {
        print!(" {m:>14}");
    }
    println!();
    print!("{:<8} {:<28} {:>6} {:<10}", "", "", "", "");
    for m in &shown {
        print!(" {:>14}", unit(m));
    }
    println!();
    for e in &report.episodes {
        print!(
            "{:<8} {:<28} {:>6} {:<10}",
            e.episode_id,
            e.motion,
            e.num_steps,
            e.status.to_string()
        );
        for m in &shown {
            match e.metrics.get(*m) {
                Some(v) => print!(" {v:>14.4}"),
                None => print!(" {:>14}", "-"),
            }
        }
        println!();
    }
    let scored = report.episodes.iter().filter(|e| e.status.is_scored()).count();
    println!(
        "\naggregates over the {scored} scored of {} episodes ({} failed unscored, left out; \
         the leaderboard's success rate counts them as failures):",
        report.episodes.len(),
        report.episodes.len() - scored
    );
    println!(
        "{:<20} {:>12} {:>12} {:>12} {:>12} {:>12}  unit",
        "metric", "mean", "std", "p10", "p50", "p90"
    );
    for (name, s) in &report.aggregated {
        println!(
            "{:<20} {:>12.4} {:>12.4} {:>12.4} {:>12.4} {:>12.4}  {}",
            name,
            s.mean,
            s.std,
            s.p10,
            s.p50,
            s.p90,
            unit(name)
        );
    }
    // A metric undefined on some episodes (a time difference on an episode scored to its first
    // step) is over fewer: say so rather than let its mean pass as one over all scored.
    for (name, s) in report.aggregated.iter().filter(|(_, s)| s.count < scored) {
        println!(
            "{name}: over {} of the {scored} scored episodes ({} too short to compute it)",
            s.count,
            scored - s.count
        );
    }
    // One that no scored episode has is absent from the statistics altogether: named, not lost.
    if scored > 0 {
        for name in spec.metrics.list.iter().filter(|m| !report.aggregated.contains_key(*m)) {
            println!("{name}: over none of the {scored} scored episodes (every one too short to compute it)");
        }
    }
    // The success metrics' means above are over the scored episodes; the rates a leaderboard
    // ranks are over all of them.
    let rates: Vec<String> = arena_bench::metrics::SUCCESS_METRICS
        .iter()
        .filter(|m| report.aggregated.contains_key(**m))
        .map(|m| format!("{m} {:.4}", report.success_rate(m)))
        .collect();
    if !rates.is_empty() {
        println!(
            "success rates over all {} episodes (failed ones count as failures, as on the leaderboard): {}",
            report.episodes.len(),
            rates.join(", ")
        );
    }
    if !report.failed_episodes.is_empty() {
        println!("\nfailed episodes:");
        for f in &report.failed_episodes {
            println!("  {} {}: {}", f.episode_id, f.motion, f.reason);
        }
    }
    if let Some(out) = &a.report {
        println!("\nreport: {}", out.display());
    }
    Ok(())
}

/// The agent of an exported policy and the gains its session runs with (those its metadata
/// declares, or the preset named, checked against the benchmark's bounds; neither is refused).
fn onnx_agent(
    file: &std::path::Path,
    gain_preset: Option<&str>,
    spec: &arena_bench::spec::BenchmarkSpec,
) -> anyhow::Result<(Box<dyn arena_sdk::Agent>, Option<arena_runner::gains::SessionGains>)> {
    let policy = arena_onnx::OnnxPolicy::load(
        file,
        &arena_onnx::PolicyOverrides::default(),
        arena_onnx::Supply::FileOnly,
    )?;
    anyhow::ensure!(
        spec.action.mode == arena_bench::spec::ActionMode::JointPosition,
        "benchmark {} takes normalized actions; an exported policy runs on a joint-position benchmark (e.g. g1-smoke-robot)",
        spec.name
    );
    let pose = arena_runner::pose::default_pose_problems(&policy.config.to_g1(&policy.config.default_joint_pos));
    anyhow::ensure!(pose.is_empty(), "{}: {}", file.display(), pose.join("; "));
    let gains = arena_runner::gains::declared_by_policy(policy.config.gains_g1(), gain_preset, &spec.action)
        .and_then(|declared| arena_runner::gains::resolve(&spec.action, &declared))
        .map_err(|why| anyhow::anyhow!("{}: the policy's gains: {why}", file.display()))?;
    Ok((Box::new(arena_onnx::OnnxAgent::new(policy)), Some(gains)))
}
