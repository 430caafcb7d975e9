//! `arena metrics emd|track|list`: metrics on files, outside a benchmark run.

use crate::evaluation;
use crate::sim::ROLLOUT_HEADER;
use anyhow::{Context, bail};
use arena_bench::emd;
use arena_bench::metrics::{self, METRICS, MetricConfig};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};

#[derive(Debug, Subcommand)]
pub enum MetricsCommand {
    /// Exact EMD between the frame sets (rows) of two CSV files.
    Emd(EmdArgs),
    /// Every tracking metric between a rollout (`arena sim rollout`) and the motion it tracked,
    /// over every row of the rollout: unlike a benchmark's evaluation (`arena eval`, the
    /// server), which stops scoring where its success rule first breaks (a fall), so a rollout
    /// that falls scores worse here (docs/metrics.md, "Where scoring stops").
    Track(TrackArgs),
    /// List the registered metrics with formula, units and direction.
    List(ListArgs),
}

#[derive(Debug, Args)]
pub struct EmdArgs {
    /// First frame set: a CSV file, one frame per row (lines starting with `#` are skipped).
    #[arg(long)]
    a: PathBuf,
    /// Second frame set.
    #[arg(long)]
    b: PathBuf,
    /// Columns LO:HI (half-open) that make a frame. Default: the 29 joint angles, i.e. 7:36 for
    /// a G1 motion CSV and 8:37 for an `arena sim rollout` file (recognised by its header).
    #[arg(long, value_parser = parse_columns)]
    columns: Option<(usize, usize)>,
    /// Print JSON (value, sizes, solver statistics and solve time).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct TrackArgs {
    /// Rollout written by `arena sim rollout` (time, then 36 qpos values per row).
    #[arg(long)]
    sim: PathBuf,
    /// The reference motion that was tracked: G1 CSV (needs --fps) or NPZ.
    #[arg(long = "ref")]
    reference: PathBuf,
    /// Frame rate of a CSV reference file (an NPZ carries its own).
    #[arg(long)]
    fps: Option<f64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn parse_columns(s: &str) -> Result<(usize, usize), String> {
    let (lo, hi) = s.split_once(':').ok_or_else(|| format!("expected LO:HI, got {s:?}"))?;
    let lo: usize = lo.trim().parse().map_err(|_| format!("bad LO in {s:?}"))?;
    let hi: usize = hi.trim().parse().map_err(|_| format!("bad HI in {s:?}"))?;
    if lo >= hi {
        return Err(format!("empty column range {s:?} (need LO < HI)"));
    }
    Ok((lo, hi))
}

/// A numeric CSV: rows of equal width; `#` lines skipped; the first `#` line returned.
struct NumericCsv {
    header: Option<String>,
    width: usize,
    values: Vec<f64>,
}

fn read_numeric_csv(path: &Path) -> anyhow::Result<NumericCsv> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = NumericCsv {
        header: None,
        width: 0,
        values: Vec::new(),
    };
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('#') {
            if out.header.is_none() {
                out.header = Some(line.to_string());
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        let mut n = 0;
        for (j, field) in line.split(',').enumerate() {
            let v: f64 = field.trim().parse().map_err(|_| {
                anyhow::anyhow!(
                    "{}:{}:{}: expected a number, found {:?}",
                    path.display(),
                    i + 1,
                    j + 1,
                    field.trim()
                )
            })?;
            if !v.is_finite() {
                bail!("{}:{}:{}: non-finite value {v}", path.display(), i + 1, j + 1);
            }
            out.values.push(v);
            n += 1;
        }
        if out.width == 0 {
            out.width = n;
        } else if n != out.width {
            bail!(
                "{}:{}: {n} columns, but earlier rows have {}",
                path.display(),
                i + 1,
                out.width
            );
        }
    }
    if out.width == 0 {
        bail!("{}: no data rows", path.display());
    }
    Ok(out)
}

fn is_rollout(csv: &NumericCsv) -> bool {
    csv.header.as_deref() == Some(ROLLOUT_HEADER)
}

fn select_columns(csv: &NumericCsv, path: &Path, columns: Option<(usize, usize)>) -> anyhow::Result<Vec<f64>> {
    let (lo, hi) = columns.unwrap_or(if is_rollout(csv) { (8, 37) } else { (7, 36) });
    if hi > csv.width {
        bail!(
            "{}: columns {lo}:{hi} need {hi} columns, the file has {} (choose others with --columns LO:HI)",
            path.display(),
            csv.width
        );
    }
    Ok(csv
        .values
        .chunks_exact(csv.width)
        .flat_map(|r| r[lo..hi].iter().copied())
        .collect())
}

pub fn run(c: MetricsCommand) -> anyhow::Result<()> {
    match c {
        MetricsCommand::Emd(a) => {
            let (ca, cb) = (read_numeric_csv(&a.a)?, read_numeric_csv(&a.b)?);
            let (xa, xb) = (
                select_columns(&ca, &a.a, a.columns)?,
                select_columns(&cb, &a.b, a.columns)?,
            );
            let dim = a.columns.map(|(lo, hi)| hi - lo).unwrap_or(29);
            let start = std::time::Instant::now();
            let result = emd::emd_with(&xa, &xb, dim, emd::DEFAULT_NEIGHBOURS)?;
            let seconds = start.elapsed().as_secs_f64();
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "emd": result.value,
                        "frames_a": xa.len() / dim,
                        "frames_b": xb.len() / dim,
                        "dim": dim,
                        "solve_seconds": seconds,
                        "solver": if result.stats.dense { "dense" } else { "sparse" },
                        "rounds": result.stats.rounds,
                        "edges": result.stats.edges,
                        "augmentations": result.stats.augmentations,
                    }))?
                );
            } else {
                println!("{:.12}", result.value);
            }
            Ok(())
        }
        MetricsCommand::Track(a) => {
            let sim = read_numeric_csv(&a.sim)?;
            if sim.width != 37 {
                bail!(
                    "{}: a rollout has 37 columns (time, 36 qpos), this file has {}",
                    a.sim.display(),
                    sim.width
                );
            }
            let times: Vec<f64> = sim.values.chunks_exact(37).map(|r| r[0]).collect();
            let qpos: Vec<f64> = sim
                .values
                .chunks_exact(37)
                .flat_map(|r| r[1..].iter().copied())
                .collect();
            let reference = crate::read_motion_file(&a.reference, a.fps)?;
            // The reference is held at its last frame past its end: say so, since a wrong --fps
            // or a rollout of another clip would otherwise score silently.
            let (last, length) = (times.last().copied().unwrap_or(0.0), reference.duration_s());
            if last > length + 0.02 + 1e-9 {
                eprintln!(
                    "warning: the rollout runs to {last:.2} s, past the reference's {length:.2} s at {} fps: its later frames are compared with the reference's last frame",
                    reference.fps
                );
            }
            let names: Vec<String> = metrics::metric_names().iter().map(|s| s.to_string()).collect();
            let values = evaluation::track_metrics(&times, &qpos, &reference, &names, &MetricConfig::default())?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&values)?);
            } else {
                println!(
                    "{} frames of {} vs {}",
                    times.len(),
                    a.sim.display(),
                    a.reference.display()
                );
                for m in METRICS {
                    println!("  {:<20} {:>14.6} {}", m.name, values[m.name], m.units);
                }
            }
            Ok(())
        }
        MetricsCommand::List(a) => {
            if a.json {
                let rows: Vec<_> = METRICS
                    .iter()
                    .map(|m| {
                        serde_json::json!({"name": m.name, "description": m.description, "formula": m.formula,
                            "units": m.units, "direction": m.direction})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                for m in METRICS {
                    println!(
                        "{:<20} [{}; {:?} is better] {}",
                        m.name, m.units, m.direction, m.description
                    );
                }
            }
            Ok(())
        }
    }
}
