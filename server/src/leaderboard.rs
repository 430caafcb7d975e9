//! Leaderboards: a benchmark's completed submissions ranked by its primary metric and
//! tie-breakers, best submission per team.
//!
//! Order (docs/server.md, "Leaderboard ranking"): the success rate first when the benchmark
//! names a success metric (`ranking.success`; over every episode, so a fall, a failure or a
//! timeout counts as not successful: a robot on the floor cannot outrank one that stands, even
//! where its joint angles happen to match better), then more scored episodes (a failed or
//! timed-out episode has no metrics, so skipping hard episodes must not pay), then the mean time
//! to failure when the benchmark names it (`ranking.survival`: among agents that fall, the one
//! that stays up longer ranks higher), then the primary metric's mean in its direction, then
//! each tie-breaker's mean, then the earlier finish.
//!
//! Baselines (marked by an organiser) are rows of their own, placed by the same order but not
//! numbered and never a team's best (listed even with no scored episode); any other submission
//! with no scored episode is not ranked at all (listed apart, `unranked`), unless the team has
//! nothing better.

use crate::storage::{Storage, StorageError, Submission};
use arena_bench::aggregate::{REPORT_FORMAT_VERSION, Report};
use arena_bench::metrics::{SUCCESS_METRICS, metric_info};
use arena_bench::spec::{BenchmarkSpec, Direction};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// What a leaderboard needs of a report, stored with it (`summary_json`), so ranking thousands
/// of submissions reads a few hundred bytes each instead of whole reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportSummary {
    pub episodes: usize,
    pub scored: usize,
    pub failed: usize,
    /// Mean of every metric over scored episodes (`None`: NaN).
    pub means: BTreeMap<String, Option<f64>>,
    /// Rate of each 0/1 success metric over all episodes ([`success_rate`]).
    pub success_rates: BTreeMap<String, f64>,
    /// The report's `format_version`: how its episodes were scored. Absent in summaries stored
    /// before it was kept (a server's start computes those again from their reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format_version: Option<u32>,
}

impl ReportSummary {
    pub fn of(report: &Report) -> Self {
        Self {
            episodes: report.episodes.len(),
            scored: report.episodes.len() - report.failed_episodes.len(),
            failed: report.failed_episodes.len(),
            means: report
                .aggregated
                .iter()
                .map(|(m, s)| (m.clone(), Some(s.mean).filter(|v| !v.is_nan())))
                .collect(),
            success_rates: SUCCESS_METRICS
                .iter()
                .map(|m| (m.to_string(), success_rate(report, m)))
                .collect(),
            format_version: Some(report.format_version),
        }
    }

    /// Scored by an older arena's rules: its report's format is older than this arena's.
    pub fn is_older_format(&self) -> bool {
        self.format_version.is_some_and(|v| v < REPORT_FORMAT_VERSION)
    }

    /// The summary of a report given as JSON text.
    pub fn of_json(report_json: &str) -> Result<Self, serde_json::Error> {
        Ok(Self::of(&serde_json::from_str(report_json)?))
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Entry {
    /// 1, 2, ... for the teams' best submissions; `None` for baselines and unranked rows.
    pub rank: Option<usize>,
    pub submission_id: String,
    pub team: String,
    pub agent_name: String,
    pub finished_at: Option<i64>,
    /// Share of all the submission's episodes that succeeded by `ranking.success` (`None` when
    /// the benchmark ranks by the primary metric alone).
    pub success_rate: Option<f64>,
    /// Share of all episodes that succeeded by the other success rule
    /// ([`Leaderboard::other_success_metric`]), shown beside the ranked one, not ranked (`None`
    /// when the submission's report does not have that metric).
    pub other_success_rate: Option<f64>,
    /// Mean time to failure over scored episodes (`ranking.survival`; `None` when the benchmark
    /// does not rank by it).
    pub survival: Option<f64>,
    /// Mean of the primary metric over scored episodes.
    pub score: Option<f64>,
    /// (metric, mean) of each tie-breaker.
    pub tie_breakers: Vec<(String, Option<f64>)>,
    pub scored_episodes: usize,
    pub failed_episodes: usize,
    /// Marked by an organiser as a baseline.
    pub baseline: bool,
    /// The `format_version` of the report its numbers come from (`None`: not known); below
    /// [`REPORT_FORMAT_VERSION`], an older arena scored it by older rules
    /// ([`Leaderboard::older_report_format`]).
    pub report_format_version: Option<u32>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Leaderboard {
    pub benchmark: String,
    /// The success metric ranked first, if any (`ranking.success`).
    pub success_metric: Option<String>,
    /// The other success rule (PHC's `success` beside mjlab's `mjlab_success`, or the reverse),
    /// shown beside the ranked one and not ranked.
    pub other_success_metric: Option<String>,
    /// The time-to-failure metric ranked after the success rate, if any (`ranking.survival`).
    pub survival_metric: Option<String>,
    pub primary: String,
    /// "lower" or "higher" is better.
    pub direction: String,
    /// Each team's best submission (numbered) and every baseline (not numbered), in order.
    pub entries: Vec<Entry>,
    /// The teams' submissions with no scored episode (every episode failed or timed out), for
    /// teams with nothing ranked: shown apart, never numbered.
    pub unranked: Vec<Entry>,
    /// The benchmark file's `version`: only submissions created under it are ranked.
    pub version: u32,
    /// Completed submissions of earlier (or other) versions of the benchmark, left off: a bump
    /// of `version` says their results are not comparable.
    pub other_versions: usize,
    /// Completed submissions of the current version (before the best per team is kept) whose
    /// report has no value at all for a metric the ranking reads (the
    /// primary, the survival or a tie-breaker; not a NaN mean): scored before the benchmark file
    /// asked for it, an edit without a `version` bump. They rank as if the mean were missing
    /// until `arena admin submissions rescore` scores them again.
    pub scored_without_ranking_metrics: usize,
    /// Completed submissions of the current version (before the best per team is kept) whose
    /// report an older arena wrote under an older `format_version`, scored by older rules (a
    /// format-1 report scored whole episodes where later ones stop at the success rule's break):
    /// they rank beside the others, marked, until `arena admin submissions rescore` scores them
    /// by the current rules. A server's start lists them on stderr.
    pub older_report_format: usize,
    /// This arena's [`REPORT_FORMAT_VERSION`], which each entry's `report_format_version` is
    /// compared with.
    pub report_format_version: u32,
    /// The means in seconds are withheld ([`Leaderboard::without_seconds`]): a `null` survival
    /// or score is hidden, not missing.
    pub seconds_withheld: bool,
}

/// Whether a metric is a time in seconds (a survival time: where nothing broke, the episode's
/// length), which a hidden test set withholds from teams.
pub fn in_seconds(metric: &str) -> bool {
    metric_info(metric).is_some_and(|m| m.units == "s")
}

impl Leaderboard {
    /// The board as a team sees it while the benchmark's motions are hidden
    /// ([`crate::access::motions_hidden`]): every mean in seconds withheld (`null`), since the
    /// mean survival time of a submission where nothing broke is the mean clip length. The
    /// order stays the one ranked on the values.
    pub fn without_seconds(mut self) -> Self {
        self.seconds_withheld = true;
        let primary = in_seconds(&self.primary);
        for entry in self.entries.iter_mut().chain(self.unranked.iter_mut()) {
            entry.survival = None;
            if primary {
                entry.score = None;
            }
            for (metric, value) in &mut entry.tie_breakers {
                if in_seconds(metric) {
                    *value = None;
                }
            }
        }
        self
    }
}

/// The success rule a benchmark does not rank by, shown beside the one it does.
fn other_success_metric(spec: &BenchmarkSpec) -> Option<&'static str> {
    match spec.ranking.success.as_deref()? {
        "mjlab_success" => Some("success"),
        _ => Some("mjlab_success"),
    }
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

/// The numbers a submission's leaderboard row shows, for lists (the team page, the organiser's
/// submissions, `arena admin submissions`): episode counts, the success rule's rate over all
/// episodes, the survival and primary means over the scored ones, each with its metric's name.
/// With `motions_hidden` (a hidden test set, for a team) the means in seconds are `null`, as on
/// the leaderboard ([`Leaderboard::without_seconds`]).
pub fn list_scores(spec: &BenchmarkSpec, summary: &ReportSummary, motions_hidden: bool) -> serde_json::Value {
    let mean = |m: &str| {
        summary
            .means
            .get(m)
            .copied()
            .flatten()
            .filter(|_| !(motions_hidden && in_seconds(m)))
    };
    serde_json::json!({
        "episodes": summary.episodes,
        "scored": summary.scored,
        "failed": summary.failed,
        "success_metric": spec.ranking.success,
        "success_rate": spec.ranking.success.as_deref().map(|m| summary.success_rates.get(m).copied().unwrap_or(0.0)),
        "survival_metric": spec.ranking.survival,
        "survival": spec.ranking.survival.as_deref().and_then(mean),
        "primary": spec.ranking.primary,
        "score": mean(&spec.ranking.primary),
        "primary_units": metric_info(&spec.ranking.primary).map(|i| i.units),
    })
}

/// Successful episodes / all episodes of the report ([`Report::success_rate`]): unscored
/// (failed, timed-out) episodes and episodes without the metric count as failures.
pub fn success_rate(report: &Report, metric: &str) -> f64 {
    report.success_rate(metric)
}

/// What ranking reads of one COMPLETED submission ([`crate::storage::Storage::leaderboard_json`]).
#[derive(Debug, Clone, Deserialize)]
pub struct RankRow {
    pub id: String,
    pub team_name: String,
    pub agent_name: String,
    pub finished_at: Option<i64>,
    /// 0 or 1.
    pub baseline: i64,
    pub phase_id: Option<String>,
    /// Absent until stored (an older submission before the server's start-up backfill), or
    /// when the stored text does not read as a summary: that row is left off (logged), the rest
    /// of the board stands. Read from the stored text, one row at a time.
    #[serde(default, deserialize_with = "summary_from_text")]
    pub summary: Option<ReportSummary>,
    /// The submission's status, when read by [`Storage::leaderboard_json_since`] (which also
    /// returns rows that left the board); absent means COMPLETED.
    #[serde(default)]
    pub status: Option<String>,
    /// The benchmark file's `version` it was created under (None: before versions were kept).
    #[serde(default)]
    pub benchmark_version: Option<i64>,
}

/// A row's `summary_json` as stored (text, or null), parsed on its own.
fn summary_from_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<ReportSummary>, D::Error> {
    let text: Option<String> = Option::deserialize(d)?;
    Ok(text.and_then(|text| match serde_json::from_str(&text) {
        Ok(summary) => Some(summary),
        Err(e) => {
            tracing::warn!("a stored leaderboard summary does not read ({e}); that submission is left off the board");
            None
        }
    }))
}

impl RankRow {
    /// The row of a stored submission (its `summary_json` parsed; unreadable = absent).
    pub fn of(s: &Submission) -> Self {
        Self {
            id: s.id.clone(),
            team_name: s.team_name.clone(),
            agent_name: s.agent_name.clone(),
            finished_at: s.finished_at,
            baseline: i64::from(s.baseline),
            phase_id: s.phase_id.clone(),
            summary: s.summary_json.as_deref().and_then(|j| serde_json::from_str(j).ok()),
            status: Some(s.status.as_str().to_string()),
            benchmark_version: s.benchmark_version,
        }
    }
}

/// Ranks the completed submissions of `spec`'s benchmark.
pub fn rank(spec: &BenchmarkSpec, submissions: &[Submission]) -> Leaderboard {
    rank_rows(spec, submissions.iter().map(RankRow::of))
}

/// Ranks `rows` (a benchmark's or a phase's completed submissions) by `spec`'s rule.
pub fn rank_rows<R: std::borrow::Borrow<RankRow>>(
    spec: &BenchmarkSpec,
    rows: impl IntoIterator<Item = R>,
) -> Leaderboard {
    let primary = &spec.ranking.primary;
    let primary_direction = spec.ranking.primary_direction();
    let mean = |summary: &ReportSummary, metric: &str| summary.means.get(metric).copied().flatten();
    let other_rule = other_success_metric(spec);
    let mut other_versions = 0;
    let ranked_by: Vec<&String> = std::iter::once(primary)
        .chain(spec.ranking.survival.as_ref())
        .chain(&spec.ranking.tie_breakers)
        .collect();
    let mut without_ranking_metrics = 0;
    let mut older_report_format = 0;
    let mut entries: Vec<Entry> = rows
        .into_iter()
        .filter_map(|row| {
            let s = row.borrow();
            // A submission of another version of the file is not comparable (that is what a
            // bump says); one stored before versions were kept counts as the current one.
            if s.benchmark_version.is_some_and(|v| v != i64::from(spec.version)) {
                other_versions += usize::from(s.summary.is_some());
                return None;
            }
            // A submission without a summary (none stored yet) is left off, not guessed.
            let summary = s.summary.as_ref()?;
            // An episode-less report has no means at all: that is no ranking edit.
            if summary.scored > 0 && ranked_by.iter().any(|m| !summary.means.contains_key(*m)) {
                without_ranking_metrics += 1;
            }
            older_report_format += usize::from(summary.is_older_format());
            let success_rate = spec
                .ranking
                .success
                .as_deref()
                .map(|m| summary.success_rates.get(m).copied().unwrap_or(0.0));
            Some(Entry {
                rank: None,
                submission_id: s.id.clone(),
                team: s.team_name.clone(),
                agent_name: s.agent_name.clone(),
                finished_at: s.finished_at,
                success_rate,
                // With no scored episode there are no means to tell an old report by: every
                // episode failed, so by either rule none succeeded.
                other_success_rate: other_rule.and_then(|m| {
                    (summary.scored == 0 || summary.means.contains_key(m))
                        .then(|| summary.success_rates.get(m).copied().unwrap_or(0.0))
                }),
                survival: spec.ranking.survival.as_deref().and_then(|m| mean(summary, m)),
                score: mean(summary, primary),
                tie_breakers: spec
                    .ranking
                    .tie_breakers
                    .iter()
                    .map(|t| (t.clone(), mean(summary, t)))
                    .collect(),
                scored_episodes: summary.scored,
                failed_episodes: summary.failed,
                baseline: s.baseline != 0,
                report_format_version: summary.format_version,
            })
        })
        .collect();
    entries.sort_by(|a, b| {
        compare(a.success_rate, b.success_rate, Direction::Higher)
            .then_with(|| b.scored_episodes.cmp(&a.scored_episodes))
            .then_with(|| compare(a.survival, b.survival, Direction::Higher))
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
            .then_with(|| a.submission_id.cmp(&b.submission_id))
    });
    // Best ranked submission per team; every baseline; unranked rows of teams with none ranked.
    let mut ranked_teams = std::collections::HashSet::new();
    let mut unranked_teams = std::collections::HashSet::new();
    let (mut board, mut unranked) = (Vec::new(), Vec::new());
    let mut next_rank = 1;
    for mut e in entries {
        if e.baseline {
            board.push(e);
        } else if e.scored_episodes == 0 {
            unranked.push(e);
        } else if ranked_teams.insert(e.team.clone()) {
            e.rank = Some(next_rank);
            next_rank += 1;
            board.push(e);
        }
    }
    // Sorted by finish among themselves (no scored episode: nothing else to order them by).
    unranked.retain(|e| !ranked_teams.contains(&e.team) && unranked_teams.insert(e.team.clone()));
    Leaderboard {
        benchmark: spec.name.clone(),
        success_metric: spec.ranking.success.clone(),
        other_success_metric: other_rule.map(str::to_string),
        survival_metric: spec.ranking.survival.clone(),
        primary: primary.clone(),
        direction: match primary_direction {
            Direction::Lower => "lower".into(),
            Direction::Higher => "higher".into(),
        },
        entries: board,
        unranked,
        version: spec.version,
        other_versions,
        scored_without_ranking_metrics: without_ranking_metrics,
        older_report_format,
        report_format_version: REPORT_FORMAT_VERSION,
        seconds_withheld: false,
    }
}

/// Ranked leaderboards kept until the storage's leaderboard generation moves, keyed by what
/// they were ranked from (scope, ranking rule, hidden phases). Ranking thousands of submissions
/// reads thousands of rows; a page asks for the same board again and again.
#[derive(Debug, Default)]
pub struct LeaderboardCache {
    boards: std::sync::Mutex<std::collections::HashMap<String, (u64, std::sync::Arc<Leaderboard>)>>,
    /// The rows of each scope (a benchmark, or a phase), kept up to date incrementally: after a
    /// write, only the submissions stamped since are read (one or a few rows, not thousands).
    /// Refreshes of all scopes take turns (the lock is held across the read), so an older read
    /// never overwrites a newer one.
    rows: tokio::sync::Mutex<std::collections::HashMap<String, ScopeRows>>,
}

/// A scope's leaderboard rows as of the board counter `seq`, by submission id.
#[derive(Debug, Default)]
struct ScopeRows {
    seq: i64,
    rows: std::collections::HashMap<String, std::sync::Arc<RankRow>>,
}

impl LeaderboardCache {
    /// The COMPLETED submissions' rows of `benchmark` (or of its `phase`), as of now: the first
    /// call reads them all, later ones only what was stamped since
    /// ([`Storage::leaderboard_json_since`]).
    pub async fn rows(
        &self,
        storage: &Storage,
        benchmark: &str,
        phase: Option<&str>,
    ) -> Result<Vec<std::sync::Arc<RankRow>>, RowsError> {
        let key = format!("{benchmark}\u{0}{}", phase.unwrap_or(""));
        let mut scopes = self.rows.lock().await;
        let scope = scopes.entry(key).or_insert_with(|| ScopeRows {
            seq: -1,
            rows: Default::default(),
        });
        // The counter first: every stamp up to it is committed, so the read below has them all.
        let seq = storage.board_counter().await?;
        if seq != scope.seq {
            let json = storage.leaderboard_json_since(benchmark, phase, scope.seq).await?;
            let changed: Vec<RankRow> = serde_json::from_str(&json).map_err(RowsError::Decode)?;
            for row in changed {
                if row.status.as_deref().is_none_or(|s| s == "COMPLETED") {
                    scope.rows.insert(row.id.clone(), std::sync::Arc::new(row));
                } else {
                    scope.rows.remove(&row.id);
                }
            }
            scope.seq = seq;
        }
        Ok(scope.rows.values().cloned().collect())
    }

    /// The board cached under `key` at `generation`, if any.
    pub fn get(&self, key: &str, generation: u64) -> Option<std::sync::Arc<Leaderboard>> {
        let boards = self.boards.lock().expect("leaderboard cache lock");
        boards
            .get(key)
            .filter(|(g, _)| *g == generation)
            .map(|(_, b)| b.clone())
    }

    /// Keeps `board`, ranked from rows read after `generation` was read.
    pub fn put(&self, key: String, generation: u64, board: Leaderboard) -> std::sync::Arc<Leaderboard> {
        let board = std::sync::Arc::new(board);
        let mut boards = self.boards.lock().expect("leaderboard cache lock");
        // A board of an older generation is never useful again.
        boards.retain(|_, (g, _)| *g == generation);
        boards.insert(key, (generation, board.clone()));
        board
    }
}

/// Why a scope's rows could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RowsError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("leaderboard rows: {0}")]
    Decode(serde_json::Error),
}
