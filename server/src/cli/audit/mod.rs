//! `arena audit`: re-runs a submission's stored episodes (their seeds, DR draws and recorded
//! actions, open loop) on a chosen physics backend and reports, per episode, how the new
//! trajectory and its metrics differ from the stored ones. On the backend that recorded them
//! the re-run is bit-exact; on the other it measures sim-to-sim divergence on real episodes.
//! Whatever the backend, it checks that what the server publishes (each episode's row, the
//! report, the leaderboard's summary) is the result of the stored file ([`published`]).

mod published;

use super::serve::StorageArgs;
use crate::catalog::Catalog;
use anyhow::{Context, bail};
use arena_data::trajectory_file;
use arena_runner::audit::{self, CHECKPOINTS, EpisodeAudit};
use arena_tools::backend::BackendArgs;
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
    #[arg(long, default_value_t = 16, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub batch: usize,
    /// Simulation threads (0 = all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Fail (exit status 1) unless every episode re-runs bit-exact and scores exactly what the
    /// server publishes (a check of the same backend). Without it the audit fails only when the
    /// published results disagree with the stored file.
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
    let (submission, gains, rows, report_copy, objects) = runtime.block_on(async {
        let storage = super::open_existing_storage(&config).await?;
        // After the database: a data folder that is none is refused before anything is made.
        let objects = config.objects()?;
        let submission = storage
            .submission(&a.submission)
            .await?
            .with_context(|| format!("no submission {:?}", a.submission))?;
        let gains = storage.joint_gains(&submission.id).await?;
        let rows = storage.episodes(&submission.id).await?;
        // The copy of the report the object store keeps beside the trajectories.
        let report_copy = objects.get(&crate::objects::report_key(&submission.id)).await?;
        anyhow::Ok((submission, gains, rows, report_copy, objects))
    })?;
    let gains = gains
        .map(|g| arena_runner::gains::SessionGains::from_json(&g).map_err(anyhow::Error::msg))
        .transpose()?;
    let catalog = Catalog::new(config.benchmarks_dir(), config.motions_root.clone());
    let benchmark = catalog
        .load(&submission.benchmark)
        .with_context(|| format!("loading benchmark {} of the submission", submission.benchmark))?;
    let path = crate::trajectory_store::submission_path_blocking(&objects, &submission.id);
    if !path.exists() {
        bail!(
            "submission {} has no merged trajectory file ({} is missing; it is written just after the submission completes, tried again while its server lives when that fails, and at the server's next start)",
            submission.id,
            path.display()
        );
    }
    // A file restored from another submission's (a mixed-up backup) re-runs perfectly well:
    // its identity is checked first.
    let (of_submission, _) =
        trajectory_file::read_header(&path).with_context(|| format!("reading {}", path.display()))?;
    if of_submission != submission.id {
        bail!(
            "{} is the trajectory file of submission {}, not of {}: the store holds another submission's file under its name",
            path.display(),
            arena_sdk::protocol::quoted(&of_submission),
            submission.id
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
    let mut records = names
        .iter()
        .map(|n| trajectory_file::read_episode(&path, n).with_context(|| format!("reading {n} of {}", path.display())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut disagreements = published::file_against_rows(&records, &rows, &a.episodes);
    // Episodes that never ran a step (given up on before their first action) have empty groups:
    // there is nothing to re-run.
    let unplayed = records.iter().filter(|r| r.num_rows() == 0).count();
    if unplayed > 0 {
        eprintln!("note: {unplayed} stored episodes never ran a step (empty groups): not re-run");
        records.retain(|r| r.num_rows() > 0);
    }
    let changed = changed_since_run(&benchmark, &records, &rows);
    for (episode, what) in changed.iter().take(5) {
        eprintln!(
            "note: the benchmark file now defines episode {episode} differently ({what}); the audit re-runs the stored episode"
        );
    }
    if changed.len() > 5 {
        eprintln!(
            "note: and {} more episodes differ from the benchmark file",
            changed.len() - 5
        );
    }
    let backend = a.backend.scoring_backend()?;
    let bar = indicatif::ProgressBar::new(records.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} episodes re-run")
            .expect("valid template"),
    );
    let mut audits = audit::audit(
        &benchmark.spec,
        gains.as_ref(),
        &benchmark.library,
        &records,
        &backend,
        a.batch,
        a.threads,
        &mut |done, _| bar.set_position(done as u64),
    )?;
    bar.finish_and_clear();
    let names = &benchmark.spec.metrics.list;
    // Today's benchmark file may not be the one the submission ran under (a version bump: other
    // motions, other rules), and an older arena may have scored it by older rules: then the
    // reference and the metrics cannot be compared with it, and the audit says so instead.
    let ran_under = submission.benchmark_version.map(|v| v as u32);
    let other_version = ran_under.filter(|v| *v != benchmark.spec.version);
    let older_scoring =
        published::report_format(&submission).filter(|f| *f < arena_bench::aggregate::REPORT_FORMAT_VERSION);
    let mut notes = Vec::new();
    if let Some(v) = other_version {
        notes.push(format!(
            "the submission ran under version {v} of benchmark {}, and its file is now version {}: its reference and metrics are not compared with today's",
            benchmark.spec.name, benchmark.spec.version
        ));
    }
    let (metric_disagreements, metric_notes) = published::scored_file_against_rows(
        &mut audits,
        &rows,
        names,
        other_version.is_none() && older_scoring.is_none(),
    );
    disagreements.extend(metric_disagreements);
    notes.extend(metric_notes);
    if other_version.is_none() {
        for e in audits.iter().filter(|e| {
            e.error.is_none() && (e.reference_max_diff.is_nan() || e.reference_max_diff > published::SAME_WITHIN)
        }) {
            disagreements.push(format!(
                "episode {}: the stored reference is not what the benchmark's motion {} gives (by {:.3e}: the motion's file changed since the run, or the trajectory file was altered)",
                e.episode, e.motion, e.reference_max_diff
            ));
        }
    }
    if a.episodes.is_empty() {
        disagreements.extend(published::report_against_rows(&submission, &rows, names));
        disagreements.extend(published::report_copy_against_database(
            &submission,
            report_copy.as_deref(),
        ));
    }
    for note in &notes {
        eprintln!("note: {note}");
    }
    let exact = audits.iter().filter(|e| e.bit_exact).count();
    // Re-run metrics equal to the published ones (after the swap above, `metrics[m].0`).
    let scores_published = audits
        .iter()
        .filter(|e| {
            e.error.is_none()
                && e.metrics
                    .values()
                    .all(|(p, r)| p.to_bits() == r.to_bits() || (p.is_nan() && r.is_nan()))
        })
        .count();
    if a.json {
        let out = serde_json::json!({
            "submission": submission.id,
            "benchmark": submission.benchmark,
            "backend": backend.name(),
            "episodes": audits,
            "bit_exact": exact,
            "scores_published": scores_published,
            "disagreements": disagreements,
            "notes": notes,
            "benchmark_changed_episodes": changed.iter().map(|(e, _)| e).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_table(&audits);
        println!(
            "{} of {} episodes re-ran bit-exact on the {} backend; {} scored what the server publishes",
            exact,
            audits.len(),
            backend.name(),
            scores_published
        );
    }
    if !disagreements.is_empty() {
        const SHOWN: usize = 20;
        eprintln!(
            "the published results of submission {} disagree with its stored trajectory file:",
            submission.id
        );
        for d in disagreements.iter().take(SHOWN) {
            eprintln!("  {d}");
        }
        if disagreements.len() > SHOWN {
            eprintln!(
                "  and {} more (all of them in --json's `disagreements`)",
                disagreements.len() - SHOWN
            );
        }
        bail!(
            "{} disagreement(s) between what the server publishes and the stored trajectory file (listed above)",
            disagreements.len()
        );
    }
    if a.require_exact && (exact != audits.len() || scores_published != audits.len() || audits.is_empty()) {
        bail!(
            "--require-exact: of {} episodes, {} did not re-run bit-exact and {} did not score what the server publishes",
            audits.len(),
            audits.len() - exact,
            audits.len() - scores_published
        );
    }
    Ok(())
}

/// Stored episodes whose motion, window, seed or DR level the benchmark file no longer gives
/// them (the file was edited after the run), with what differs. The audit re-runs what was
/// stored either way; this says why a re-score under today's file would differ. An episode whose
/// file disagrees with the database's seed is left to [`published::file_against_rows`]: the
/// file, not the benchmark, changed.
fn changed_since_run(
    benchmark: &crate::catalog::LoadedBenchmark,
    records: &[trajectory_file::EpisodeRecord],
    rows: &[crate::storage::EpisodeRow],
) -> Vec<(u32, String)> {
    let dr_level = u32::from(benchmark.spec.episodes.dr_level);
    records
        .iter()
        .filter(|r| {
            !rows
                .iter()
                .any(|row| row.idx == i64::from(r.episode) && row.seed != r.seed)
        })
        .filter_map(|r| {
            let Some(now) = benchmark.episodes.get(r.episode as usize) else {
                return Some((r.episode, "it is no longer in the list".to_string()));
            };
            let mut diffs = Vec::new();
            let motion = benchmark.motion_name(now);
            if motion != r.motion {
                diffs.push(format!("motion {} → {motion}", r.motion));
            }
            if (now.start_s - r.start_s).abs() > 1e-9 || (now.duration_s - r.duration_s).abs() > 1e-9 {
                diffs.push(format!(
                    "window {:.3}+{:.3} s → {:.3}+{:.3} s",
                    r.start_s, r.duration_s, now.start_s, now.duration_s
                ));
            }
            if now.seed != r.seed {
                diffs.push(format!("seed {} → {}", r.seed, now.seed));
            }
            if dr_level != r.dr_level {
                diffs.push(format!("DR level {} → {dr_level}", r.dr_level));
            }
            (!diffs.is_empty()).then(|| (r.episode, diffs.join(", ")))
        })
        .collect()
}

fn print_table(audits: &[EpisodeAudit]) {
    // Columns from an episode that was re-run (one not re-run has no metrics).
    let metric_names: Vec<&String> = audits
        .iter()
        .find(|a| a.error.is_none())
        .map(|a| a.metrics.keys().collect())
        .unwrap_or_default();
    let mut header = format!(
        "{:>7} {:<16} {:<22} {:>9} {:>5}",
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
        // One number when both runs have as many rows, else stored→re-run.
        let rows = if e.recorded_rows == e.rerun_rows {
            e.rerun_rows.to_string()
        } else {
            format!("{}→{}", e.recorded_rows, e.rerun_rows)
        };
        let mut line = format!(
            "{:>7} {:<16} {:<22} {:>9} {:>5}",
            e.episode,
            e.motion,
            status,
            rows,
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
            match e.metrics.get(*m) {
                // Absent from both (undefined on so few frames): nothing to compare.
                Some((stored, again)) if !(stored.is_nan() && again.is_nan()) => {
                    line.push_str(&format!(" {:>10.2e}", again - stored))
                }
                _ => line.push_str(&format!(" {:>10}", "-")),
            }
        }
        println!("{line}");
    }
}
