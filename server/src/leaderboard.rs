//! Leaderboards: a benchmark's completed submissions ranked by its primary metric and
//! tie-breakers, best submission per team.
//!
//! Order: more scored episodes first (a failed or timed-out episode has no metrics, so skipping
//! hard episodes must not pay), then the primary metric's mean in its direction, then each
//! tie-breaker's mean, then the earlier finish.

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
    /// Mean of the primary metric over scored episodes.
    pub score: Option<f64>,
    /// (metric, mean) of each tie-breaker.
    pub tie_breakers: Vec<(String, Option<f64>)>,
    pub scored_episodes: usize,
    pub failed_episodes: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Leaderboard {
    pub benchmark: String,
    pub primary: String,
    /// "lower" or "higher" is better.
    pub direction: String,
    pub entries: Vec<Entry>,
}

fn direction_of(metric: &str, explicit: Option<Direction>) -> Direction {
    explicit
        .or_else(|| metric_info(metric).map(|m| m.direction))
        .unwrap_or(Direction::Lower)
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

/// Ranks the completed submissions of `spec`'s benchmark.
pub fn rank(spec: &BenchmarkSpec, submissions: &[Submission]) -> Leaderboard {
    let primary = &spec.ranking.primary;
    let primary_direction = direction_of(primary, spec.ranking.direction);
    let mean = |report: &Report, metric: &str| report.aggregated.get(metric).map(|s| s.mean);
    let mut entries: Vec<Entry> = submissions
        .iter()
        .filter_map(|s| {
            let report: Report = serde_json::from_str(s.report_json.as_deref()?).ok()?;
            Some(Entry {
                rank: 0,
                submission_id: s.id.clone(),
                team: s.team_name.clone(),
                agent_name: s.agent_name.clone(),
                finished_at: s.finished_at,
                score: mean(&report, primary),
                tie_breakers: spec
                    .ranking
                    .tie_breakers
                    .iter()
                    .map(|t| (t.clone(), mean(&report, t)))
                    .collect(),
                scored_episodes: report.episodes.len() - report.failed_episodes.len(),
                failed_episodes: report.failed_episodes.len(),
            })
        })
        .collect();
    entries.sort_by(|a, b| {
        b.scored_episodes
            .cmp(&a.scored_episodes)
            .then_with(|| compare(a.score, b.score, primary_direction))
            .then_with(|| {
                a.tie_breakers
                    .iter()
                    .zip(&b.tie_breakers)
                    .map(|((name, x), (_, y))| compare(*x, *y, direction_of(name, None)))
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
        primary: primary.clone(),
        direction: match primary_direction {
            Direction::Lower => "lower".into(),
            Direction::Higher => "higher".into(),
        },
        entries,
    }
}
