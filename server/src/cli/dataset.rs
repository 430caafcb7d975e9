//! `arena dataset export`: a trajectory dataset written from a server's data directory and
//! database, with the same filters and formats as `GET /api/v1/datasets/...` (the organiser's
//! view: every completed submission is readable).

use super::serve::StorageArgs;
use crate::catalog::Catalog;
use crate::datasets::{self, DatasetFilter, ExportFormat, Scope};
use crate::storage::now_ms;
use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum DatasetCommand {
    /// Export the episodes of a benchmark or a phase: HDF5 in BFM-Zero's replay-buffer layout
    /// (`observation-state`, `observation-privileged_state`, `action`, `qpos`, `qvel`,
    /// `terminated`, `truncated`, and `/episodes` start/stop/id), gzip JSON lines (one episode
    /// per line), or the dataset card alone. Reads the server's database and trajectory files;
    /// a running server may stay up.
    Export(ExportArgs),
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Every completed submission of this benchmark (or give --phase).
    #[arg(long, conflicts_with = "phase")]
    pub benchmark: Option<String>,
    /// The completed submissions of this challenge phase.
    #[arg(long)]
    pub phase: Option<String>,
    /// hdf5, jsonl.gz or card.
    #[arg(long, default_value = "hdf5")]
    pub format: String,
    /// Output file (written beside it, then renamed into place); `-` writes to stdout
    /// (jsonl.gz and card only).
    #[arg(long)]
    pub out: PathBuf,
    /// Also write the dataset card (JSON) here.
    #[arg(long)]
    pub card: Option<PathBuf>,
    /// Episode states, comma-separated: completed, fell, failed, timeout [default: completed,fell].
    #[arg(long)]
    pub status: Option<String>,
    /// Only successful (true) or unsuccessful (false) episodes, by the benchmark's success metric.
    #[arg(long)]
    pub success: Option<String>,
    /// A metric bound such as 'emd<=0.9' or 'mpjpe_g>120' (repeatable; all must hold).
    #[arg(long = "metric")]
    pub metrics: Vec<String>,
    /// Team names, comma-separated.
    #[arg(long)]
    pub team: Option<String>,
    /// Submission ids, comma-separated.
    #[arg(long)]
    pub submission: Option<String>,
    /// Motion names, comma-separated.
    #[arg(long)]
    pub motion: Option<String>,
    /// Submissions created at or after: RFC 3339, YYYY-MM-DD or unix milliseconds.
    #[arg(long)]
    pub since: Option<String>,
    /// Submissions created before: RFC 3339, YYYY-MM-DD or unix milliseconds.
    #[arg(long)]
    pub until: Option<String>,
    /// Print the counts as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub server: StorageArgs,
}

impl ExportArgs {
    fn filter(&self) -> Result<DatasetFilter, String> {
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for (key, value) in [
            ("status", &self.status),
            ("success", &self.success),
            ("team", &self.team),
            ("submission", &self.submission),
            ("motion", &self.motion),
            ("since", &self.since),
            ("until", &self.until),
        ] {
            if let Some(v) = value {
                pairs.push((key, v));
            }
        }
        pairs.extend(self.metrics.iter().map(|m| ("metric", m.as_str())));
        DatasetFilter::from_pairs(pairs)
    }
}

pub fn run(c: DatasetCommand) -> anyhow::Result<()> {
    match c {
        DatasetCommand::Export(a) => export(a),
    }
}

fn export(a: ExportArgs) -> anyhow::Result<()> {
    if a.benchmark.is_none() && a.phase.is_none() {
        return Err(arena_sdk::cli::UsageError("give --benchmark NAME or --phase ID".into()).into());
    }
    let filter = a.filter().map_err(arena_sdk::cli::UsageError)?;
    let format = match a.format.as_str() {
        "card" => None,
        f => Some(ExportFormat::parse(f).map_err(|_| {
            arena_sdk::cli::UsageError(format!("--format: expected hdf5, jsonl.gz or card, got {f:?}"))
        })?),
    };
    let to_stdout = a.out.as_os_str() == "-";
    let device = !to_stdout && a.out.exists() && !a.out.is_file();
    if (to_stdout || device) && format == Some(ExportFormat::Hdf5) {
        bail!(
            "--out {}: HDF5 needs a file (it is not written front to back); give a path",
            a.out.display()
        );
    }
    // Check the outputs before any work.
    for path in std::iter::once(&a.out).filter(|_| !to_stdout).chain(&a.card) {
        super::check_writable(path)?;
    }
    let config = a.server.resolve()?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let catalog = Catalog::new(config.benchmarks_dir(), config.motions_root.clone());
    let (selection, spec) = runtime.block_on(async {
        let storage = super::open_existing_storage(&config).await?;
        let scope = match (&a.benchmark, &a.phase) {
            (Some(b), _) => Scope::Benchmark(catalog.spec(b)?.name),
            (None, Some(id)) => {
                let phase = storage
                    .phase(id)
                    .await?
                    .with_context(|| format!("--phase: no phase {id:?}"))?;
                Scope::Phase {
                    id: phase.id,
                    benchmark: phase.benchmark,
                }
            }
            (None, None) => bail!("give --benchmark NAME or --phase ID"),
        };
        // A mistyped team name selected nothing and wrote an empty dataset, exit 0.
        if !filter.team.is_empty() {
            let teams: Vec<String> = storage.teams().await?.into_iter().map(|t| t.name).collect();
            if let Some(unknown) = filter.team.iter().find(|name| !teams.contains(name)) {
                bail!(
                    "--team: no team named {unknown:?} in this database (teams: {})",
                    match teams.is_empty() {
                        true => "none".to_string(),
                        false => teams.join(", "),
                    }
                );
            }
        }
        let spec = catalog.spec(scope.benchmark())?;
        let selection = datasets::select(&storage, &spec, scope, filter, |_| true).await?;
        anyhow::Ok((selection, spec))
    })?;
    let objects = config.objects()?;
    let mut selection = selection;
    runtime.block_on(datasets::leave_out_missing_runs(&objects, &mut selection))?;
    if selection.in_scope.missing_runs > 0 {
        eprintln!(
            "warning: {} episode(s) left out: their stored runs are missing from the object store (the card's missing_runs lists them)",
            selection.in_scope.missing_runs
        );
    }
    let card = datasets::card(&selection, &spec, now_ms());
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_message(format!(
        "exporting {} episodes ({} rows)",
        selection.episodes(),
        selection.rows()
    ));
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let stored = crate::trajectory_store::StoredEpisodes::new(&objects)?;
    let episodes = |s: &str, row: &crate::storage::EpisodeRow| stored.read(s, row);
    let counts = match format {
        None => {
            let text = serde_json::to_string_pretty(&card)?;
            if to_stdout {
                println!("{text}");
            } else {
                write_replacing(&a.out, |f| Ok(std::io::Write::write_all(f, text.as_bytes())?))?;
            }
            None
        }
        Some(ExportFormat::JsonlGz) if to_stdout => Some(datasets::export_jsonl_gz(
            &selection,
            &episodes,
            std::io::stdout().lock(),
        )?),
        Some(ExportFormat::JsonlGz) => {
            let mut counts = None;
            write_replacing(&a.out, |f| {
                counts = Some(datasets::export_jsonl_gz(&selection, &episodes, f)?);
                Ok(())
            })?;
            counts
        }
        Some(ExportFormat::Hdf5) => {
            let mut counts = None;
            arena_tools::write_replacing(&a.out, |to| {
                counts = Some(datasets::export_hdf5(&selection, &episodes, to, &card)?);
                Ok(())
            })
            .map_err(|e| e.context(format!("writing {}", a.out.display())))?;
            counts
        }
    };
    bar.finish_and_clear();
    // After the export: a card describes a file that was written (a failed export leaves none).
    if let Some(path) = &a.card {
        write_replacing(path, |f| Ok(serde_json::to_writer_pretty(f, &card)?))?;
    }
    if to_stdout {
        return Ok(());
    }
    let summary = serde_json::json!({
        "out": a.out,
        "format": a.format,
        "submissions": selection.parts.len(),
        "episodes": counts.map_or(selection.episodes(), |c| c.episodes),
        "rows": counts.map_or(selection.rows(), |c| c.rows),
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        let count = |key: &str, one: &str| match summary[key].as_u64().unwrap_or(0) {
            1 => format!("1 {one}"),
            n => format!("{n} {one}s"),
        };
        println!(
            "wrote {}: {}, {} from {}",
            a.out.display(),
            count("episodes", "episode"),
            count("rows", "row"),
            count("submissions", "submission")
        );
    }
    Ok(())
}

/// Writes `path` through a buffered file, by [`arena_tools::write_replacing`]: beside it and
/// renamed into place once `write` succeeded; a device or pipe (`/dev/null`) in place.
fn write_replacing(
    path: &std::path::Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    arena_tools::write_replacing(path, |to| {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(to)
            .with_context(|| format!("creating {}", to.display()))?;
        let mut w = std::io::BufWriter::new(file);
        write(&mut w).and_then(|_| Ok(std::io::Write::flush(&mut w)?))
    })
    .map_err(|e| e.context(format!("writing {}", path.display())))
}
