//! `arena audit`: re-runs a submission's stored episodes (their seeds, DR draws and recorded
//! actions, open loop) on a chosen physics backend and reports, per episode, how the new
//! trajectory and its metrics differ from the stored ones. On the backend that recorded them
//! the re-run is bit-exact; on the other it measures sim-to-sim divergence on real episodes.

use super::backend::BackendArgs;
use super::serve::StorageArgs;
use crate::catalog::Catalog;
use anyhow::{Context, bail};
use arena_data::trajectory_file;
use arena_runner::audit::{self, CHECKPOINTS, EpisodeAudit};
use clap::Args;

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Submission id.
    pub submission: String,
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Only these episode indices, comma-separated [default: all stored episodes].
    #[arg(long, value_delimiter = ',')]
    pub episodes: Vec<u32>,
    /// Episodes re-run side by side.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Simulation threads (0 = all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Fail (exit status 1) unless every episode re-runs bit-exact (a check of the same backend).
    #[arg(long)]
    pub require_exact: bool,
    /// Print the audit as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub server: StorageArgs,
}

pub fn run(a: AuditArgs) -> anyhow::Result<()> {
    let config = a.server.resolve()?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let submission = runtime.block_on(async {
        let storage = super::open_existing_storage(&config).await?;
        storage
            .submission(&a.submission)
            .await?
            .with_context(|| format!("no submission {:?}", a.submission))
    })?;
    let catalog = Catalog::new(config.benchmarks_dir(), config.motions_root.clone());
    let benchmark = catalog
        .load(&submission.benchmark)
        .with_context(|| format!("loading benchmark {} of the submission", submission.benchmark))?;
    let objects = config.objects()?;
    let path = crate::trajectory_store::submission_path_blocking(&objects, &submission.id);
    if !path.exists() {
        bail!(
            "submission {} has no merged trajectory file ({} is missing; it is written when the submission completes)",
            submission.id,
            path.display()
        );
    }
    let mut names = trajectory_file::episode_names(&path).with_context(|| format!("reading {}", path.display()))?;
    if !a.episodes.is_empty() {
        let wanted: Vec<String> = a
            .episodes
            .iter()
            .map(|e| trajectory_file::episode_group_name(*e))
            .collect();
        if let Some(missing) = wanted.iter().find(|w| !names.contains(w)) {
            bail!("--episodes: {missing} is not stored for submission {}", submission.id);
        }
        names = wanted;
    }
    let records = names
        .iter()
        .map(|n| trajectory_file::read_episode(&path, n).with_context(|| format!("reading {n} of {}", path.display())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let backend = a.backend.backend();
    let bar = indicatif::ProgressBar::new(records.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} episodes re-run")
            .expect("valid template"),
    );
    let audits = audit::audit(
        &benchmark.spec,
        &benchmark.library,
        &records,
        &backend,
        a.batch,
        a.threads,
        &mut |done, _| bar.set_position(done as u64),
    )?;
    bar.finish_and_clear();
    let exact = audits.iter().filter(|e| e.bit_exact).count();
    if a.json {
        let out = serde_json::json!({
            "submission": submission.id,
            "benchmark": submission.benchmark,
            "backend": backend.name(),
            "episodes": audits,
            "bit_exact": exact,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_table(&audits);
        println!(
            "{} of {} episodes re-ran bit-exact on the {} backend",
            exact,
            audits.len(),
            backend.name()
        );
    }
    if a.require_exact && (exact != audits.len() || audits.is_empty()) {
        bail!(
            "--require-exact: {} of {} episodes did not re-run bit-exact",
            audits.len() - exact,
            audits.len()
        );
    }
    Ok(())
}

fn print_table(audits: &[EpisodeAudit]) {
    let metric_names: Vec<&String> = audits.first().map(|a| a.metrics.keys().collect()).unwrap_or_default();
    let mut header = format!(
        "{:>7} {:<16} {:<22} {:>5} {:>5}",
        "episode", "motion", "status (stored→re-run)", "rows", "exact"
    );
    for c in CHECKPOINTS {
        header.push_str(&format!(" {:>10}", format!("Δqpos@{c}")));
    }
    header.push_str(&format!(" {:>10}", "Δbody max"));
    for m in &metric_names {
        header.push_str(&format!(" {:>10}", format!("Δ{m}")));
    }
    println!("{header}");
    for e in audits {
        if let Some(error) = &e.error {
            println!("{:>7} {:<16} not re-run: {error}", e.episode, e.motion);
            continue;
        }
        let status = format!(
            "{}→{}",
            e.recorded_status,
            e.rerun_status.split(':').next().unwrap_or_default()
        );
        let mut line = format!(
            "{:>7} {:<16} {:<22} {:>5} {:>5}",
            e.episode,
            e.motion,
            status,
            e.rerun_rows,
            if e.bit_exact { "yes" } else { "no" }
        );
        for c in CHECKPOINTS {
            match e.qpos_divergence.get(&c) {
                Some(d) => line.push_str(&format!(" {d:>10.2e}")),
                None => line.push_str(&format!(" {:>10}", "-")),
            }
        }
        line.push_str(&format!(" {:>10.2e}", e.max_body_pos));
        for m in &metric_names {
            let (stored, again) = e.metrics[*m];
            line.push_str(&format!(" {:>10.2e}", again - stored));
        }
        println!("{line}");
    }
}
