//! The run's CSV logs: `train_log.csv` (means of the update metrics and rollout aux terms per
//! logging period, FPS, simulation/update shares) and `eval_log.csv` (one row per evaluation
//! episode), with fixed headers so rows before the first update keep every column.

use crate::aux_rewards::TERMS;
use std::collections::BTreeMap;

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

/// Columns of `eval_log.csv`: one row per evaluation episode, its metrics empty when it failed
/// unscored (`status` `failed` or `timeout`).
pub(crate) const EVAL_COLUMNS: [&str; 8] = [
    "timestep",
    "motion",
    "status",
    "emd",
    "mpjpe_l",
    "success",
    "failure_time_s",
    "mjlab_success",
];

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
