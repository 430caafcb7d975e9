//! MetricsAggregator: per-episode results in, statistics and the report JSON out.
//!
//! Results stream in one episode at a time (`add_episode` / `add_failure`); statistics can be
//! read at any moment (live progress) and at the end. The report follows the seed's result
//! format: benchmark, timestamp, config, episodes[], aggregated{metric: stats},
//! failed_episodes[]; we add `groups` (the same statistics per motion category).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// How an episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EpisodeStatus {
    /// Ran to the end of its window.
    Completed,
    /// Ended early by the benchmark's fall rule (scored on the frames it has).
    Fell,
    /// Simulator or agent failure (not scored).
    Failed,
    /// The agent missed its deadline (not scored).
    Timeout,
}

/// The same lower-case word as in reports: `completed`, `fell`, `failed`, `timeout`.
impl std::fmt::Display for EpisodeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EpisodeStatus::Completed => "completed",
            EpisodeStatus::Fell => "fell",
            EpisodeStatus::Failed => "failed",
            EpisodeStatus::Timeout => "timeout",
        })
    }
}

impl EpisodeStatus {
    /// Scored episodes enter the statistics; the others are listed as failed.
    pub fn is_scored(self) -> bool {
        matches!(self, EpisodeStatus::Completed | EpisodeStatus::Fell)
    }
}

/// The version of the report format. 2: scoring stops at the break of the benchmark's success
/// rule (episodes carry `scored_until_s`), errors after a break are scored falls, and the
/// mjlab metrics exist. 3: mjlab's metrics run to mjlab's own first termination whatever rule
/// ranks the benchmark (in 2 they stopped at PHC's break on PHC-ranked benchmarks), and a
/// scored fall's failure times are capped at its last recorded row. 4: a metric not defined on
/// an episode's frames (an acceleration error along time on an episode scored to its first
/// step) is absent from that episode's `metrics` (it read 0 in 3), and its
/// statistics' `count` is over the episodes that have it.
pub const REPORT_FORMAT_VERSION: u32 = 4;

fn report_format_v1() -> u32 {
    1
}

/// One episode's result, as it appears in the report's `episodes` list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeResult {
    pub episode_id: String,
    pub motion: String,
    pub category: String,
    pub status: EpisodeStatus,
    pub metrics: BTreeMap<String, f64>,
    pub num_steps: usize,
    pub start_s: f64,
    pub duration_s: f64,
    pub seed: u64,
    pub dr_level: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where scoring stopped, seconds from the episode's start: the first frame that broke the
    /// benchmark's success rule (or the fall), when that came before the episode's end
    /// ([`crate::metrics::scored_until`]); absent when the whole episode was scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scored_until_s: Option<f64>,
}

/// An entry of `failed_episodes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedEpisode {
    pub episode_id: String,
    pub motion: String,
    pub reason: String,
}

/// Summary statistics of one metric. Quantiles interpolate linearly between order statistics
/// (NumPy's default); `std` is the population standard deviation (ddof 0, as NumPy's default).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Statistics {
    pub mean: f64,
    pub std: f64,
    pub min: f64,
    pub max: f64,
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub count: usize,
}

impl Statistics {
    /// Statistics of `values` (None when empty).
    pub fn of(values: &[f64]) -> Option<Statistics> {
        if values.is_empty() {
            return None;
        }
        // Sums over the sorted values: the same bits whatever order the episodes arrived in
        // (which depends on batching and threads).
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = values.len() as f64;
        let mean = sorted.iter().sum::<f64>() / n;
        let var = sorted.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        Some(Statistics {
            mean,
            std: var.sqrt(),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            p10: quantile(&sorted, 0.1),
            p50: quantile(&sorted, 0.5),
            p90: quantile(&sorted, 0.9),
            count: values.len(),
        })
    }
}

/// Linear-interpolation quantile of sorted values, q in [0, 1].
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// The report, in the seed's format plus per-category groups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`REPORT_FORMAT_VERSION`] of the writer (1 when absent: reports before it was added).
    #[serde(default = "report_format_v1")]
    pub format_version: u32,
    pub benchmark: String,
    /// RFC 3339, UTC.
    pub timestamp: String,
    pub config: serde_json::Value,
    pub episodes: Vec<EpisodeResult>,
    pub aggregated: BTreeMap<String, Statistics>,
    /// The unit of each aggregated metric (the registry's, docs/metrics.md).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub units: BTreeMap<String, String>,
    /// category → metric → statistics.
    pub groups: BTreeMap<String, BTreeMap<String, Statistics>>,
    /// category → its episodes, and how many of them `groups` is over (absent from reports
    /// written before it was added).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub group_counts: BTreeMap<String, GroupCounts>,
    pub failed_episodes: Vec<FailedEpisode>,
}

/// One category's episodes: what its statistics are over and what they leave out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupCounts {
    /// The category's episodes the aggregator was given (a report: all of them; a running
    /// submission's `/results`: those that have ended).
    pub episodes: usize,
    /// Completed or fell: the episodes its statistics are over.
    pub scored: usize,
    /// Failed or timed out (an error before any break of the success rule): left out of its
    /// statistics, listed in `failed_episodes`.
    pub unscored: usize,
}

impl Report {
    /// The share of ALL the report's episodes that succeeded by success metric `metric` (a
    /// value ≥ 0.5): failed and timed-out episodes count as failures, as on the leaderboard,
    /// where the statistics' mean is over the scored episodes only. 0 for no episodes.
    pub fn success_rate(&self, metric: &str) -> f64 {
        if self.episodes.is_empty() {
            return 0.0;
        }
        let successes = self
            .episodes
            .iter()
            .filter(|e| e.status.is_scored() && e.metrics.get(metric).is_some_and(|v| *v >= 0.5))
            .count();
        successes as f64 / self.episodes.len() as f64
    }

    /// Writes the report as pretty JSON, gzip-compressed when the path ends in `.gz`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        let file = std::fs::File::create(path)?;
        if path.extension().is_some_and(|e| e == "gz") {
            let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
            gz.write_all(&json)?;
            gz.finish()?.sync_all()
        } else {
            let mut f = std::io::BufWriter::new(file);
            f.write_all(&json)?;
            f.flush()
        }
    }

    /// Reads a report written by [`Report::write`] (gzip detected by the `.gz` extension).
    pub fn read(path: &Path) -> std::io::Result<Report> {
        let file = std::fs::File::open(path)?;
        let reader: Box<dyn std::io::Read> = if path.extension().is_some_and(|e| e == "gz") {
            Box::new(flate2::read::GzDecoder::new(file))
        } else {
            Box::new(std::io::BufReader::new(file))
        };
        serde_json::from_reader(reader).map_err(std::io::Error::other)
    }
}

/// Collects episode results and computes statistics overall and per category.
#[derive(Debug, Clone, Default)]
pub struct MetricsAggregator {
    episodes: Vec<EpisodeResult>,
    failed: Vec<FailedEpisode>,
    /// metric → values of scored episodes, in arrival order.
    values: BTreeMap<String, Vec<f64>>,
    /// category → metric → values.
    grouped: BTreeMap<String, BTreeMap<String, Vec<f64>>>,
    /// category → its episodes, scored and not.
    counts: BTreeMap<String, GroupCounts>,
}

impl MetricsAggregator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one episode. Scored episodes (completed, fell) feed the statistics; failed and
    /// timed-out ones go to the failed list with their reason.
    pub fn add_episode(&mut self, result: EpisodeResult) {
        let counts = self.counts.entry(result.category.clone()).or_default();
        counts.episodes += 1;
        if result.status.is_scored() {
            counts.scored += 1;
        } else {
            counts.unscored += 1;
        }
        if result.status.is_scored() {
            for (name, &v) in &result.metrics {
                self.values.entry(name.clone()).or_default().push(v);
                self.grouped
                    .entry(result.category.clone())
                    .or_default()
                    .entry(name.clone())
                    .or_default()
                    .push(v);
            }
        } else {
            self.failed.push(FailedEpisode {
                episode_id: result.episode_id.clone(),
                motion: result.motion.clone(),
                reason: result
                    .reason
                    .clone()
                    .unwrap_or_else(|| format!("{:?}", result.status).to_lowercase()),
            });
        }
        self.episodes.push(result);
    }

    pub fn episodes(&self) -> &[EpisodeResult] {
        &self.episodes
    }

    pub fn failed(&self) -> &[FailedEpisode] {
        &self.failed
    }

    /// Statistics per metric over the scored episodes so far.
    pub fn aggregated(&self) -> BTreeMap<String, Statistics> {
        self.values
            .iter()
            .filter_map(|(k, v)| Statistics::of(v).map(|s| (k.clone(), s)))
            .collect()
    }

    /// Statistics per category, then per metric.
    pub fn by_category(&self) -> BTreeMap<String, BTreeMap<String, Statistics>> {
        self.grouped
            .iter()
            .map(|(g, metrics)| {
                let stats = metrics
                    .iter()
                    .filter_map(|(k, v)| Statistics::of(v).map(|s| (k.clone(), s)))
                    .collect();
                (g.clone(), stats)
            })
            .collect()
    }

    /// Per category: its episodes, how many are scored (what [`Self::by_category`] is over)
    /// and how many are not.
    pub fn category_counts(&self) -> &BTreeMap<String, GroupCounts> {
        &self.counts
    }

    /// Statistics grouped by any key of an episode (a tag, the DR level, ...).
    pub fn group_by(&self, key: impl Fn(&EpisodeResult) -> String) -> BTreeMap<String, BTreeMap<String, Statistics>> {
        let mut groups: BTreeMap<String, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
        for e in self.episodes.iter().filter(|e| e.status.is_scored()) {
            let g = groups.entry(key(e)).or_default();
            for (name, &v) in &e.metrics {
                g.entry(name.clone()).or_default().push(v);
            }
        }
        groups
            .into_iter()
            .map(|(g, m)| {
                let stats = m
                    .into_iter()
                    .filter_map(|(k, v)| Statistics::of(&v).map(|s| (k, s)))
                    .collect();
                (g, stats)
            })
            .collect()
    }

    /// The report, stamped with the current time.
    /// The report, its episodes and failed episodes in benchmark order ([`episode_order`]),
    /// whatever order they finished in.
    pub fn report(&self, benchmark: &str, config: serde_json::Value) -> Report {
        let mut episodes = self.episodes.clone();
        episodes.sort_by(|a, b| episode_order(&a.episode_id, &b.episode_id));
        let mut failed_episodes = self.failed.clone();
        failed_episodes.sort_by(|a, b| episode_order(&a.episode_id, &b.episode_id));
        Report {
            format_version: REPORT_FORMAT_VERSION,
            benchmark: benchmark.to_string(),
            timestamp: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            config,
            episodes,
            aggregated: self.aggregated(),
            units: self
                .values
                .keys()
                .filter_map(|m| crate::metrics::metric_info(m).map(|i| (m.clone(), i.units.to_string())))
                .collect(),
            groups: self.by_category(),
            group_counts: self.counts.clone(),
            failed_episodes,
        }
    }
}

/// The means a training run's evaluation prints and logs, with the counts they are over:
/// `episodes`, `scored` and `failed_unscored` (an agent or simulator error before any fall,
/// which has no metrics). A success metric's mean is over **all** episodes (an unscored
/// failure is no success, as [`Report::success_rate`] and the leaderboard count it); every
/// other metric's mean is over the scored episodes, whose number `scored` gives (an
/// acceleration error, undefined on an episode scored to its first step, over those that have it).
pub fn honest_means(episodes: &[EpisodeResult]) -> BTreeMap<String, f64> {
    let mut sums: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    let scored: Vec<&EpisodeResult> = episodes.iter().filter(|e| e.status.is_scored()).collect();
    for ep in &scored {
        for (k, v) in &ep.metrics {
            let s = sums.entry(k.clone()).or_default();
            s.0 += *v;
            s.1 += 1;
        }
    }
    let mut means: BTreeMap<String, f64> = sums
        .into_iter()
        .map(|(k, (sum, n))| {
            let over = if crate::metrics::SUCCESS_METRICS.contains(&k.as_str()) {
                episodes.len()
            } else {
                n
            };
            (k, sum / over.max(1) as f64)
        })
        .collect();
    means.insert("episodes".into(), episodes.len() as f64);
    means.insert("scored".into(), scored.len() as f64);
    means.insert("failed_unscored".into(), (episodes.len() - scored.len()) as f64);
    means
}

/// Benchmark order of episode ids (`ep0042`): by the number after the prefix, so `ep10000`
/// follows `ep9999` (ids are zero-padded to four digits only); other ids by their text.
pub fn episode_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn split(id: &str) -> (&str, Option<u64>) {
        let digits = id.len() - id.bytes().rev().take_while(u8::is_ascii_digit).count();
        let (prefix, number) = id.split_at(digits);
        (prefix, number.parse().ok())
    }
    let ((pa, na), (pb, nb)) = (split(a), split(b));
    pa.cmp(pb).then(na.cmp(&nb)).then(a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn episode(id: &str, category: &str, status: EpisodeStatus, emd: f64) -> EpisodeResult {
        EpisodeResult {
            episode_id: id.into(),
            motion: format!("motion-{id}"),
            category: category.into(),
            status,
            metrics: BTreeMap::from([("emd".to_string(), emd)]),
            num_steps: 10,
            start_s: 0.0,
            duration_s: 0.2,
            seed: 1,
            dr_level: 0,
            reason: (status == EpisodeStatus::Failed).then(|| "simulator unstable at step 3".into()),
            scored_until_s: None,
        }
    }

    #[test]
    fn quantiles_match_numpy_linear() {
        // numpy.quantile([1, 2, 3, 4], [0.1, 0.5, 0.9]) = [1.3, 2.5, 3.7]
        let s = Statistics::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert!((s.p10 - 1.3).abs() < 1e-12 && (s.p50 - 2.5).abs() < 1e-12 && (s.p90 - 3.7).abs() < 1e-12);
        assert_eq!((s.min, s.max, s.count), (1.0, 4.0, 4));
        assert!((s.mean - 2.5).abs() < 1e-12);
        // Population std of 1..4 = sqrt(1.25).
        assert!((s.std - 1.25f64.sqrt()).abs() < 1e-12);
        // The same bits whatever the arrival order (these six sum to different doubles left to
        // right and right to left).
        let values = [
            0.13436424411240122,
            0.8474337369372327,
            0.763774618976614,
            0.2550690257394217,
            0.49543508709194095,
            0.4494910647887381,
        ];
        let reversed: Vec<f64> = values.iter().rev().copied().collect();
        assert_ne!(values.iter().sum::<f64>(), reversed.iter().sum::<f64>());
        let forward = Statistics::of(&values).unwrap();
        let backward = Statistics::of(&reversed).unwrap();
        assert_eq!(forward.mean.to_bits(), backward.mean.to_bits());
        assert_eq!(forward.std.to_bits(), backward.std.to_bits());
        let one = Statistics::of(&[7.0]).unwrap();
        assert_eq!((one.p10, one.p90, one.std), (7.0, 7.0, 0.0));
        assert!(Statistics::of(&[]).is_none());
    }

    #[test]
    fn failed_episodes_are_listed_not_averaged() {
        let mut agg = MetricsAggregator::new();
        agg.add_episode(episode("0", "dance", EpisodeStatus::Completed, 1.0));
        agg.add_episode(episode("1", "dance", EpisodeStatus::Fell, 3.0));
        agg.add_episode(episode("2", "walk", EpisodeStatus::Completed, 5.0));
        agg.add_episode(episode("3", "walk", EpisodeStatus::Failed, 100.0));
        agg.add_episode(episode("4", "walk", EpisodeStatus::Timeout, 100.0));
        let all = agg.aggregated();
        assert_eq!(all["emd"].count, 3);
        assert!((all["emd"].mean - 3.0).abs() < 1e-12);
        let groups = agg.by_category();
        assert!((groups["dance"]["emd"].mean - 2.0).abs() < 1e-12);
        assert_eq!(groups["walk"]["emd"].count, 1);
        assert_eq!(agg.failed().len(), 2);
        assert_eq!(agg.failed()[0].reason, "simulator unstable at step 3");
        assert_eq!(agg.failed()[1].reason, "timeout");
        let by_status = agg.group_by(|e| format!("{:?}", e.status));
        assert_eq!(by_status["Fell"]["emd"].count, 1);
        // Each category's statistics say what they leave out.
        let counts = |episodes, scored, unscored| GroupCounts {
            episodes,
            scored,
            unscored,
        };
        assert_eq!(agg.category_counts()["dance"], counts(2, 2, 0));
        assert_eq!(agg.category_counts()["walk"], counts(3, 1, 2));
        let report = agg.report("g1-test", serde_json::json!({}));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            json["group_counts"]["walk"],
            serde_json::json!({"episodes": 3, "scored": 1, "unscored": 2})
        );
        // A report written before the counts reads back without them.
        let mut older = json.clone();
        older.as_object_mut().unwrap().remove("group_counts");
        let read: Report = serde_json::from_value(older).unwrap();
        assert!(read.group_counts.is_empty());
    }

    #[test]
    fn a_report_lists_episodes_in_benchmark_order_past_ten_thousand() {
        let mut agg = MetricsAggregator::new();
        for id in ["ep10000", "ep1001", "ep9999", "ep0002"] {
            agg.add_episode(episode(id, "dance", EpisodeStatus::Completed, 1.0));
        }
        for id in ["ep10001", "ep0003"] {
            agg.add_episode(episode(id, "dance", EpisodeStatus::Failed, 0.0));
        }
        let report = agg.report("g1-test", serde_json::json!({}));
        let ids: Vec<&str> = report.episodes.iter().map(|e| e.episode_id.as_str()).collect();
        assert_eq!(ids, ["ep0002", "ep0003", "ep1001", "ep9999", "ep10000", "ep10001"]);
        let failed: Vec<&str> = report.failed_episodes.iter().map(|e| e.episode_id.as_str()).collect();
        assert_eq!(failed, ["ep0003", "ep10001"]);
        assert_eq!(episode_order("a", "b"), std::cmp::Ordering::Less);
        assert_eq!(
            episode_order("ep2", "ep02"),
            std::cmp::Ordering::Greater,
            "a total order"
        );
    }

    /// A success rate is over every episode: a failed one counts as a failure, where the
    /// success metric's mean is over the scored ones.
    #[test]
    fn success_rates_count_every_episode() {
        let mut agg = MetricsAggregator::new();
        let with_success = |id, status, success| EpisodeResult {
            metrics: BTreeMap::from([("success".to_string(), success)]),
            ..episode(id, "dance", status, 0.0)
        };
        agg.add_episode(with_success("0", EpisodeStatus::Completed, 1.0));
        agg.add_episode(with_success("1", EpisodeStatus::Completed, 1.0));
        agg.add_episode(with_success("2", EpisodeStatus::Fell, 0.0));
        agg.add_episode(with_success("3", EpisodeStatus::Failed, 1.0));
        let report = agg.report("g1-test", serde_json::json!({}));
        assert!((report.aggregated["success"].mean - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(report.success_rate("success"), 0.5);
        assert_eq!(report.success_rate("mjlab_success"), 0.0);
        assert_eq!(
            MetricsAggregator::new()
                .report("none", serde_json::json!({}))
                .success_rate("success"),
            0.0
        );
    }

    /// A training run's means: success over every episode, the rest over the scored ones,
    /// with the counts beside them.
    #[test]
    fn honest_means_say_what_they_are_over() {
        let with = |id, status, success: Option<f64>, emd| EpisodeResult {
            metrics: match success {
                Some(s) => BTreeMap::from([("success".to_string(), s), ("emd".to_string(), emd)]),
                None => BTreeMap::new(),
            },
            ..episode(id, "dance", status, emd)
        };
        let episodes = [
            with("0", EpisodeStatus::Completed, Some(1.0), 0.1),
            with("1", EpisodeStatus::Fell, Some(0.0), 0.3),
            with("2", EpisodeStatus::Failed, None, 0.0),
            with("3", EpisodeStatus::Timeout, None, 0.0),
        ];
        let means = honest_means(&episodes);
        assert_eq!(means["success"], 0.25);
        assert!((means["emd"] - 0.2).abs() < 1e-12);
        assert_eq!(
            (means["episodes"], means["scored"], means["failed_unscored"]),
            (4.0, 2.0, 2.0)
        );
        let none = honest_means(&[]);
        assert_eq!(
            (none["episodes"], none["scored"], none.get("success")),
            (0.0, 0.0, None)
        );
    }

    #[test]
    fn report_has_the_seed_fields_and_round_trips_through_gzip() {
        let mut agg = MetricsAggregator::new();
        agg.add_episode(episode("0", "dance", EpisodeStatus::Completed, 1.5));
        agg.add_episode(episode("1", "dance", EpisodeStatus::Failed, 0.0));
        let report = agg.report("g1-test", serde_json::json!({"policy": "zero"}));
        let json = serde_json::to_value(&report).unwrap();
        for key in [
            "benchmark",
            "timestamp",
            "config",
            "episodes",
            "aggregated",
            "failed_episodes",
        ] {
            assert!(json.get(key).is_some(), "missing {key}");
        }
        assert_eq!(json["aggregated"]["emd"]["count"], 1);
        assert_eq!(json["episodes"][0]["status"], "completed");
        assert!(json["timestamp"].as_str().unwrap().ends_with('Z'));
        let dir = std::env::temp_dir().join(format!("arena-bench-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["r.json", "r.json.gz"] {
            let path = dir.join(name);
            report.write(&path).unwrap();
            assert_eq!(Report::read(&path).unwrap(), report);
        }
        let raw = std::fs::read(dir.join("r.json.gz")).unwrap();
        assert_eq!(&raw[..2], &[0x1f, 0x8b], "gzip magic");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
