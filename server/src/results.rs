//! Results of a submission as stored rows become reports, per-episode tables and leaderboard
//! entries. Failed and timed-out episodes are listed with their reason and excluded from the
//! statistics; the leaderboard shows how many episodes were scored, so a team cannot gain by
//! failing hard episodes (ranking puts fewer scored episodes after more, see `leaderboard`).

use crate::storage::{EpisodeRow, EpisodeState, Submission};
use arena_bench::aggregate::{EpisodeResult, EpisodeStatus, MetricsAggregator, Report};
use arena_bench::spec::BenchmarkSpec;

/// The stored state of a final episode status.
pub fn episode_state(status: EpisodeStatus) -> EpisodeState {
    match status {
        EpisodeStatus::Completed => EpisodeState::Completed,
        EpisodeStatus::Fell => EpisodeState::Fell,
        EpisodeStatus::Failed => EpisodeState::Failed,
        EpisodeStatus::Timeout => EpisodeState::Timeout,
    }
}

/// The report's status of a stored episode; `None` while it is not final.
pub fn episode_status(state: EpisodeState) -> Option<EpisodeStatus> {
    match state {
        EpisodeState::Completed => Some(EpisodeStatus::Completed),
        EpisodeState::Fell => Some(EpisodeStatus::Fell),
        EpisodeState::Failed => Some(EpisodeStatus::Failed),
        EpisodeState::Timeout => Some(EpisodeStatus::Timeout),
        EpisodeState::Pending | EpisodeState::Running => None,
    }
}

/// The aggregator over a submission's final episodes; `success_rule` (the benchmark's
/// `ranking.success`) says where each episode's scoring stopped.
pub fn aggregate(rows: &[EpisodeRow], success_rule: Option<&str>) -> MetricsAggregator {
    let mut aggregator = MetricsAggregator::new();
    for row in rows {
        let Some(status) = episode_status(row.status) else {
            continue;
        };
        aggregator.add_episode(EpisodeResult {
            episode_id: format!("ep{:04}", row.idx),
            motion: row.motion.clone(),
            category: row.category.clone(),
            status,
            metrics: row.metrics.clone(),
            num_steps: row.steps.max(0) as usize,
            start_s: row.start_s,
            duration_s: row.duration_s,
            seed: row.seed,
            dr_level: row.dr_level.clamp(0, 3) as u8,
            reason: row.reason.clone(),
            scored_until_s: arena_bench::metrics::scored_until(success_rule, &row.metrics),
        });
    }
    aggregator
}

/// What is named for runs stored before the server recorded the engine of each.
pub const ENGINE_NOT_RECORDED: &str = "not recorded (stored before the server recorded engines)";

/// Whether a final episode has a stored run: scored ones always (those committed before the
/// server recorded who committed them too); a FAILED or TIMEOUT one when a server committed its
/// run (not when it was given up on after its attempts).
pub fn stored_a_run(e: &EpisodeRow) -> bool {
    match e.status {
        EpisodeState::Completed | EpisodeState::Fell => true,
        _ => e.committed_by.is_some(),
    }
}

/// The engines that ran the stored runs among `rows` ([`stored_a_run`]), each with how many,
/// most first: as each episode's row recorded it at its commit (`Handler::describe`).
pub fn engine_counts<'a>(rows: impl IntoIterator<Item = &'a EpisodeRow>) -> Vec<(&'a str, usize)> {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for e in rows.into_iter().filter(|e| stored_a_run(e)) {
        *counts
            .entry(e.engine.as_deref().unwrap_or(ENGINE_NOT_RECORDED))
            .or_default() += 1;
    }
    let mut engines: Vec<(&str, usize)> = counts.into_iter().collect();
    engines.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    engines
}

/// [`engine_counts`] as JSON: `[{"engine", "episodes"}]`.
pub fn engines_json(counts: &[(&str, usize)]) -> serde_json::Value {
    counts
        .iter()
        .map(|(engine, episodes)| serde_json::json!({"engine": engine, "episodes": episodes}))
        .collect()
}

/// The submission's report in the seed's format (benchmark, timestamp, config, episodes,
/// aggregated, groups, failed_episodes).
pub fn report(spec: &BenchmarkSpec, submission: &Submission, rows: &[EpisodeRow]) -> Report {
    let config = serde_json::json!({
        "benchmark": spec,
        "submission": {
            "id": submission.id,
            "team": submission.team_name,
            "agent_name": submission.agent_name,
            "created_at_ms": submission.created_at,
        },
        "arena_version": env!("CARGO_PKG_VERSION"),
        // The simulators that produced its numbers, as its episodes recorded them.
        "engines": engines_json(&engine_counts(rows)),
    });
    aggregate(rows, spec.ranking.success.as_deref()).report(&spec.name, config)
}
