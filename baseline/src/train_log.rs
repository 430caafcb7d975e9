//! The run's CSV logs: `train_log.csv` (means of the update metrics and rollout aux terms per
//! logging period, FPS, simulation/update shares) and `eval_log.csv` (one row per evaluation
//! episode), with fixed headers so rows before the first update keep every column.

use crate::aux_rewards::TERMS;
use anyhow::Context;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Means of the update metrics and rollout aux terms since the last log row.
#[derive(Debug, Default)]
pub(crate) struct LogAccumulator {
    sums: BTreeMap<String, f64>,
    updates: u64,
    aux_sums: [f64; TERMS.len()],
    aux_count: u64,
    pub(crate) failed: u64,
    pub(crate) sim_s: f64,
    pub(crate) update_s: f64,
    last_time: u64,
    last_elapsed: f64,
}

impl LogAccumulator {
    pub(crate) fn update(&mut self, metrics: &BTreeMap<&'static str, f64>) {
        for (k, v) in metrics {
            *self.sums.entry(k.to_string()).or_default() += v;
        }
        self.updates += 1;
    }

    pub(crate) fn rollout(&mut self, terms: &[f64], n: usize) {
        let k = TERMS.len();
        for e in 0..n {
            for i in 0..k {
                self.aux_sums[i] += terms[e * k + i];
            }
        }
        self.aux_count += n as u64;
    }

    /// Nothing happened since the last row (no env step, no update).
    pub(crate) fn is_empty(&self) -> bool {
        self.updates == 0 && self.aux_count == 0
    }

    pub(crate) fn row(&mut self, time: u64, elapsed_s: f64) -> BTreeMap<String, f64> {
        let mut row: BTreeMap<String, f64> = self
            .sums
            .iter()
            .map(|(k, v)| (k.clone(), v / self.updates.max(1) as f64))
            .collect();
        for (i, t) in TERMS.iter().enumerate() {
            row.insert(format!("aux_rew/{t}"), self.aux_sums[i] / self.aux_count.max(1) as f64);
        }
        let dt = (elapsed_s - self.last_elapsed).max(1e-9);
        row.insert("timestep".into(), time as f64);
        row.insert("duration [minutes]".into(), elapsed_s / 60.0);
        row.insert("FPS".into(), (time - self.last_time) as f64 / dt);
        row.insert("failed_episodes".into(), self.failed as f64);
        let busy = (self.sim_s + self.update_s).max(1e-9);
        row.insert("sim_share".into(), self.sim_s / busy);
        row.insert("update_share".into(), self.update_s / busy);
        row.insert("updates".into(), self.updates as f64);
        *self = LogAccumulator {
            last_time: time,
            last_elapsed: elapsed_s,
            ..Default::default()
        };
        row
    }
}

/// Keeps the header and the rows whose first cell (the timestep) satisfies `keep`.
pub(crate) fn truncate_log(path: &Path, keep: impl Fn(f64) -> bool) -> anyhow::Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let mut lines = text.lines();
    let mut out: Vec<&str> = lines.next().into_iter().collect();
    out.extend(lines.filter(|l| {
        l.split(',')
            .next()
            .and_then(|c| c.parse::<f64>().ok())
            .is_some_and(&keep)
    }));
    std::fs::write(path, out.join("\n") + "\n").with_context(|| format!("rewriting {}", path.display()))
}

/// Columns of `eval_log.csv`: one row per evaluation episode.
pub(crate) const EVAL_COLUMNS: [&str; 6] = ["timestep", "motion", "emd", "mpjpe_l", "success", "failure_time_s"];

/// Columns of `train_log.csv` (docs/baseline.md explains each).
pub fn train_log_columns() -> Vec<String> {
    let mut cols: Vec<String> = [
        "timestep",
        "duration [minutes]",
        "FPS",
        "updates",
        "sim_share",
        "update_share",
        "failed_episodes",
    ]
    .map(String::from)
    .to_vec();
    cols.extend(crate::update::METRIC_NAMES.iter().map(|s| s.to_string()));
    cols.extend(TERMS.iter().map(|t| format!("aux_rew/{t}")));
    cols
}

/// One CSV cell.
#[derive(Debug, Clone)]
pub(crate) enum CsvValue {
    Num(f64),
    Text(String),
}

pub(crate) fn append_csv(path: &Path, columns: &[String], row: &BTreeMap<String, f64>) -> anyhow::Result<()> {
    let values: BTreeMap<String, CsvValue> = row.iter().map(|(k, v)| (k.clone(), CsvValue::Num(*v))).collect();
    append_csv_values(path, columns, &values)
}

/// Appends a row under a fixed header (written with the first row; an existing file keeps its
/// own, e.g. a resumed run's); cells the row lacks stay empty.
pub(crate) fn append_csv_values(
    path: &Path,
    columns: &[String],
    row: &BTreeMap<String, CsvValue>,
) -> anyhow::Result<()> {
    let header: Vec<String> = if path.exists() {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        text.lines()
            .next()
            .unwrap_or_default()
            .split(',')
            .map(str::to_string)
            .collect()
    } else {
        let mut f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        writeln!(f, "{}", columns.join(","))?;
        columns.to_vec()
    };
    let cells: Vec<String> = header
        .iter()
        .map(|k| match row.get(k) {
            Some(CsvValue::Num(v)) => format!("{v}"),
            Some(CsvValue::Text(s)) => s.replace(',', ";"),
            None => String::new(),
        })
        .collect();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "{}", cells.join(","))?;
    Ok(())
}
