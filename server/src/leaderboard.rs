//! Leaderboards: a benchmark's completed submissions ranked by its primary metric and
//! tie-breakers, best submission per team.
//!
//! Order (docs/server.md, "Leaderboard ranking"): the success rate first when the benchmark
//! names a success metric (`ranking.success`; over every episode, so a fall, a failure or a
//! timeout counts as not successful: a robot on the floor cannot outrank one that stands, even
//! where its joint angles happen to match better), then more scored episodes (a failed or
//! timed-out episode has no metrics, so skipping hard episodes must not pay), then the primary
//! metric's mean in its direction, then each tie-breaker's mean, then the earlier finish.

use crate::storage::Submission;
use arena_bench::aggregate::Report;
use arena_bench::metrics::metric_info;
use arena_bench::spec::{BenchmarkSpec, Direction};
use serde::Serialize;
use std::cmp::Ordering;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Entry {
    pub rank: usize,
    pub submission_id: String,
    pub team: String,
    pub agent_name: String,
    pub finished_at: Option<i64>,
    /// Share of all the submission's episodes that succeeded by `ranking.success` (`None` when
    /// the benchmark ranks by the primary metric alone).
    pub success_rate: Option<f64>,
    /// Mean of the primary metric over scored episodes.
    pub score: Option<f64>,
    /// (metric, mean) of each tie-breaker.
    pub tie_breakers: Vec<(String, Option<f64>)>,
    pub scored_episodes: usize,
    pub failed_episodes: usize,
    /// Marked by an organiser as a baseline.
    pub baseline: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Leaderboard {
    pub benchmark: String,
    /// The success metric ranked first, if any (`ranking.success`).
    pub success_metric: Option<String>,
    pub primary: String,
    /// "lower" or "higher" is better.
    pub direction: String,
    pub entries: Vec<Entry>,
}

fn direction_of(metric: &str) -> Direction {
    metric_info(metric).map(|m| m.direction).unwrap_or(Direction::Lower)
}

/// Compares two optional means; a missing or NaN value ranks last whatever the direction.
fn compare(a: Option<f64>, b: Option<f64>, direction: Direction) -> Ordering {
    let a = a.filter(|v| !v.is_nan());
    let b = b.filter(|v| !v.is_nan());
    match (a, b) {
        (Some(x), Some(y)) => match direction {
            Direction::Lower => x.total_cmp(&y),
            Direction::Higher => y.total_cmp(&x),
        },
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Successful episodes / all episodes of the report. An episode counts as successful when its
/// `metric` is 1; unscored (failed, timed-out) episodes and episodes without the metric do not.
pub fn success_rate(report: &Report, metric: &str) -> f64 {
    if report.episodes.is_empty() {
        return 0.0;
    }
    let successes = report
        .episodes
        .iter()
        .filter(|e| e.status.is_scored() && e.metrics.get(metric).is_some_and(|v| *v >= 0.5))
        .count();
    successes as f64 / report.episodes.len() as f64
}

/// Ranks the completed submissions of `spec`'s benchmark.
pub fn rank(spec: &BenchmarkSpec, submissions: &[Submission]) -> Leaderboard {
    let primary = &spec.ranking.primary;
    let primary_direction = spec.ranking.primary_direction();
    let mean = |report: &Report, metric: &str| report.aggregated.get(metric).map(|s| s.mean);
    let mut entries: Vec<Entry> = submissions
        .iter()
        .filter_map(|s| {
            let report: Report = serde_json::from_str(s.report_json.as_deref()?).ok()?;
            let success_rate = spec.ranking.success.as_deref().map(|m| success_rate(&report, m));
            Some(Entry {
                rank: 0,
                submission_id: s.id.clone(),
                team: s.team_name.clone(),
                agent_name: s.agent_name.clone(),
                finished_at: s.finished_at,
                success_rate,
                score: mean(&report, primary),
                tie_breakers: spec
                    .ranking
                    .tie_breakers
                    .iter()
                    .map(|t| (t.clone(), mean(&report, t)))
                    .collect(),
                scored_episodes: report.episodes.len() - report.failed_episodes.len(),
                failed_episodes: report.failed_episodes.len(),
                baseline: s.baseline,
            })
        })
        .collect();
    entries.sort_by(|a, b| {
        compare(a.success_rate, b.success_rate, Direction::Higher)
            .then_with(|| b.scored_episodes.cmp(&a.scored_episodes))
            .then_with(|| compare(a.score, b.score, primary_direction))
            .then_with(|| {
                a.tie_breakers
                    .iter()
                    .zip(&b.tie_breakers)
                    .map(|((name, x), (_, y))| compare(*x, *y, direction_of(name)))
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            })
            .then_with(|| a.finished_at.cmp(&b.finished_at))
    });
    // Best submission per team.
    let mut seen = std::collections::HashSet::new();
    entries.retain(|e| seen.insert(e.team.clone()));
    for (i, e) in entries.iter_mut().enumerate() {
        e.rank = i + 1;
    }
    Leaderboard {
        benchmark: spec.name.clone(),
        success_metric: spec.ranking.success.clone(),
        primary: primary.clone(),
        direction: match primary_direction {
            Direction::Lower => "lower".into(),
            Direction::Higher => "higher".into(),
        },
        entries,
    }
}
