//! The REST calls the web pages need beyond the core API (docs/server.md lists them): the robot's
//! geometry, an episode's error series and replay, the episodes table and one's submissions as
//! CSV, and the organiser's actions on a submission (baseline flag, re-score, cancel).

use super::extract::{ApiBody, episode_index};
use super::{
    ApiError, ApiPath, ApiQuery, ApiResult, Caller, bad_request, caller, check_motions_visible, check_results_visible,
    conflict, not_found, parse_body, require_admin, storage_error, stored_benchmark_error, visible_submission,
};
use crate::episode_views::{self, csv_field};
use crate::results;
use crate::state::AppState;
use crate::storage::{EpisodeState, SubmissionStatus};
use arena_data::trajectory_file::{self, EpisodeRecord};
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use std::sync::{Arc, OnceLock};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/robot", get(robot))
        .route("/api/v1/submissions.csv", get(submissions_csv))
        .route("/api/v1/submissions/{id}/episodes.csv", get(episodes_csv))
        .route("/api/v1/submissions/{id}/episodes/{idx}/series", get(series))
        .route("/api/v1/submissions/{id}/episodes/{idx}/replay", get(replay))
        .route("/api/v1/submissions/{id}/rescore", post(rescore))
        .route("/api/v1/submissions/{id}/cancel", post(cancel))
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    super::internal_error("the request", e)
}

/// The geometry is the same for every request: computed once.
fn geometry() -> Result<&'static arena_sim::geometry::RobotGeometry, ApiError> {
    static GEOMETRY: OnceLock<Result<arena_sim::geometry::RobotGeometry, String>> = OnceLock::new();
    GEOMETRY
        .get_or_init(|| {
            arena_sim::geometry::robot_geometry(&arena_sim::RobotConfig::default()).map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(internal)
}

async fn robot() -> ApiResult {
    Ok(Json(geometry()?).into_response())
}

/// One stored episode of a submission the caller may read.
async fn stored_episode(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    id: &str,
    idx: i64,
) -> Result<EpisodeRecord, ApiError> {
    let (who, s) = visible_submission(state, headers, id).await?;
    check_results_visible(state, &who, &s).await?;
    check_motions_visible(state, &who, &s).await?;
    if idx < 0 || idx >= s.episodes_total {
        return Err(not_found(format!(
            "submission {id} has episodes 0 to {}, not {idx}",
            s.episodes_total - 1
        )));
    }
    // Only a committed run is served: a part stored under the row's attempt but never counted
    // (its server stopped before the commit) would contradict the row and the results.
    let committed = state
        .storage
        .episodes(id)
        .await?
        .iter()
        .find(|r| r.idx == idx)
        .and_then(crate::trajectory_store::committed_attempt);
    let stored = crate::trajectory_store::episode_record(&state.objects, id, idx, committed)
        .await
        .map_err(|e| internal(format!("{e:#}")))?;
    let Some(record) = stored else {
        return Err(not_found(match committed {
            // Counted, so stored once: the store lost it (no "yet" about it).
            Some(_) => format!(
                "episode {idx} of submission {id} ran and its result counts, but its stored trajectory is missing \
                 from the object store (the organiser can restore it from a backup of the store)"
            ),
            None => format!("episode {idx} of submission {id} has no stored trajectory yet"),
        }));
    };
    if record.num_rows() == 0 {
        // A final episode given up on before its first step has an empty group.
        return Err(not_found(format!(
            "episode {idx} of submission {id} never ran a step: its trajectory is empty"
        )));
    }
    Ok(record)
}

#[derive(Deserialize)]
struct SeriesQuery {
    points: Option<String>,
}

async fn series(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath((id, idx)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<SeriesQuery>,
) -> ApiResult {
    let points = match q.points.as_deref() {
        None => 500,
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|p| (2..=100_000).contains(p))
            .ok_or_else(|| bad_request(format!("points: expected a whole number from 2 to 100000, got {raw:?}")))?,
    };
    let idx = episode_index(&idx)?;
    let record = stored_episode(&state, &headers, &id, idx).await?;
    let mut v = serde_json::to_value(episode_views::series(&record, points)).map_err(internal)?;
    v["episode"] = idx.into();
    v["motion"] = record.motion.clone().into();
    v["status"] = record.status.clone().into();
    Ok(Json(v).into_response())
}

async fn replay(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath((id, idx)): ApiPath<(String, String)>,
) -> ApiResult {
    let idx = episode_index(&idx)?;
    let record = stored_episode(&state, &headers, &id, idx).await?;
    let names = geometry()?.bodies.iter().map(|b| b.name.clone()).collect();
    let (motion, status, reason) = (record.motion.clone(), record.status.clone(), record.reason.clone());
    let replay = tokio::task::spawn_blocking(move || episode_views::replay(&record, names))
        .await
        .map_err(internal)?
        .map_err(internal)?;
    let mut v = serde_json::to_value(replay).map_err(internal)?;
    v["episode"] = idx.into();
    v["motion"] = motion.into();
    v["status"] = status.into();
    v["reason"] = reason.into();
    Ok(Json(v).into_response())
}

/// A submission by id, for the organiser's actions (no visibility rule: admin only).
async fn submission_or_404(state: &AppState, id: &str) -> Result<crate::storage::Submission, ApiError> {
    state
        .storage
        .submission(id)
        .await?
        .ok_or_else(|| not_found(format!("no submission {}", arena_sdk::protocol::quoted(id))))
}

fn csv_response(filename: &str, body: String) -> axum::response::Response {
    (
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{filename}\""),
            ),
        ],
        body,
    )
        .into_response()
}

fn number(v: Option<f64>) -> String {
    v.filter(|x| x.is_finite()).map(|x| x.to_string()).unwrap_or_default()
}

async fn episodes_csv(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    let (who, s) = visible_submission(&state, &headers, &id).await?;
    check_results_visible(&state, &who, &s).await?;
    check_motions_visible(&state, &who, &s).await?;
    let rows = state.storage.episodes(&id).await?;
    let mut metrics: Vec<&String> = rows.iter().flat_map(|r| r.metrics.keys()).collect();
    metrics.sort();
    metrics.dedup();
    let mut out = String::from(
        "idx,motion,category,start_s,duration_s,seed,dr_level,status,attempts,server_faults,uncharged_runs,steps,reason",
    );
    for m in &metrics {
        out.push(',');
        out.push_str(&csv_field(m));
    }
    out.push('\n');
    for r in &rows {
        let fields = [
            r.idx.to_string(),
            csv_field(&r.motion),
            csv_field(&r.category),
            r.start_s.to_string(),
            r.duration_s.to_string(),
            r.seed.to_string(),
            r.dr_level.to_string(),
            r.status.word().to_string(),
            r.attempts.to_string(),
            r.server_faults.to_string(),
            r.uncharged_runs.to_string(),
            r.steps.to_string(),
            csv_field(r.reason.as_deref().unwrap_or("")),
        ];
        out.push_str(&fields.join(","));
        for m in &metrics {
            out.push(',');
            out.push_str(&number(r.metrics.get(*m).copied()));
        }
        out.push('\n');
    }
    Ok(csv_response(&format!("{id}-episodes.csv"), out))
}

/// The caller's submissions (a team's own; the admin's: all) as CSV, with each finished one's
/// success rate and primary metric mean (empty while results are hidden).
async fn submissions_csv(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    let who = caller(&state, &headers).await?;
    let team = match &who {
        Caller::Admin => None,
        Caller::Team(t) => Some(t.id),
    };
    let mut out = String::from(
        "id,team,benchmark,phase,agent_name,status,episodes_total,created_at,finished_at,baseline,success_rate,primary_metric,primary_mean,error\n",
    );
    // One read of each benchmark's file per request (a benchmark not loaded yet is parsed from
    // its file on every `spec` call).
    let mut specs: std::collections::HashMap<String, Option<arena_bench::spec::BenchmarkSpec>> =
        std::collections::HashMap::new();
    let mut motions_hidden: std::collections::HashMap<String, bool> = std::collections::HashMap::new();
    for s in state.storage.submissions(team).await? {
        let visible = check_results_visible(&state, &who, &s).await.is_ok();
        let (mut rate, mut primary, mut mean) = (None, String::new(), None);
        let spec = specs
            .entry(s.benchmark.clone())
            .or_insert_with(|| state.catalog.spec(&s.benchmark).ok());
        // A hidden test set's means in seconds stay withheld from teams here too.
        let motions_hidden = match (team, spec.as_ref()) {
            (Some(_), Some(spec)) => {
                super::motions_hidden_once(&state, &mut motions_hidden, spec, crate::storage::now_ms()).await?
            }
            _ => false,
        };
        if let (true, Some(json), Some(spec)) = (visible, &s.summary_json, spec.as_ref())
            && let Ok(summary) = serde_json::from_str::<crate::leaderboard::ReportSummary>(json)
        {
            rate = spec
                .ranking
                .success
                .as_deref()
                .and_then(|m| summary.success_rates.get(m).copied());
            mean = summary
                .means
                .get(&spec.ranking.primary)
                .copied()
                .flatten()
                .filter(|_| !(motions_hidden && crate::leaderboard::in_seconds(&spec.ranking.primary)));
            primary = spec.ranking.primary.clone();
        }
        let fields = [
            csv_field(&s.id),
            csv_field(&s.team_name),
            csv_field(&s.benchmark),
            csv_field(s.phase_id.as_deref().unwrap_or("")),
            csv_field(&s.agent_name),
            s.status.to_string(),
            s.episodes_total.to_string(),
            crate::access::rfc3339(s.created_at),
            s.finished_at.map(crate::access::rfc3339).unwrap_or_default(),
            s.baseline.to_string(),
            number(rate),
            csv_field(&primary),
            number(mean),
            csv_field(s.error.as_deref().unwrap_or("")),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    Ok(csv_response("submissions.csv", out))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmissionPatch {
    baseline: bool,
}

/// `PATCH /api/v1/submissions/{id}` (admin): `{"baseline": true|false}`.
pub(super) async fn patch_submission(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> ApiResult {
    require_admin(&state, &headers).await?;
    let patch: SubmissionPatch = parse_body(&body)?;
    if !state.storage.set_baseline(&id, patch.baseline).await? {
        return Err(not_found(format!("no submission {}", arena_sdk::protocol::quoted(&id))));
    }
    let s = submission_or_404(&state, &id).await?;
    Ok(Json(s).into_response())
}

/// `POST /api/v1/submissions/{id}/cancel` (admin): a PENDING or RUNNING submission becomes FAILED
/// ("cancelled by the organiser"), its unfinished episodes too; a connected agent is told when its
/// lanes run dry.
async fn cancel(State(state): State<Arc<AppState>>, headers: HeaderMap, ApiPath(id): ApiPath<String>) -> ApiResult {
    require_admin(&state, &headers).await?;
    state
        .storage
        .cancel_submission(&id, "cancelled by the organiser")
        .await
        .map_err(|e| match e {
            crate::storage::StorageError::NotFound(_) => {
                not_found(format!("no submission {}", arena_sdk::protocol::quoted(&id)))
            }
            crate::storage::StorageError::Conflict(m) => conflict(m),
            other => storage_error(other),
        })?;
    // What it committed is merged into its file in the background (a large submission takes a
    // while; the answer does not wait for it).
    let (settle_state, settle_id) = (state.clone(), id.clone());
    tokio::spawn(async move {
        if let Err(e) =
            crate::trajectory_store::settle_failed(&settle_state.storage, &settle_state.objects, &settle_id).await
        {
            tracing::warn!("submission {settle_id}: merging the runs of a cancelled submission: {e:#}");
        }
    });
    let s = submission_or_404(&state, &id).await?;
    Ok(Json(s).into_response())
}

/// `POST /api/v1/submissions/{id}/rescore` (admin): scores every stored COMPLETED / FELL episode
/// of a COMPLETED submission again from its trajectory with the current metric code, then
/// rebuilds the report. The host's "re-run": the agent is the participant's, so what the server
/// can run again is the scoring.
async fn rescore(State(state): State<Arc<AppState>>, headers: HeaderMap, ApiPath(id): ApiPath<String>) -> ApiResult {
    require_admin(&state, &headers).await?;
    let s = submission_or_404(&state, &id).await?;
    if s.status != SubmissionStatus::Completed {
        return Err(conflict(format!(
            "submission {id} is {}; only a COMPLETED one can be re-scored",
            s.status
        )));
    }
    let spec = state
        .catalog
        .spec(&s.benchmark)
        .map_err(|e| stored_benchmark_error(&s.benchmark, &e))?;
    let rows = state.storage.episodes(&id).await?;
    let path = state.trajectory_file(&id).await.map_err(internal)?.ok_or_else(|| {
        conflict(format!(
            "submission {id} is COMPLETED but its trajectories are not merged into one file yet (in the background; a merge that could not finish is done again at the server's next start): try again later"
        ))
    })?;
    let scored: Vec<(i64, EpisodeState)> = rows
        .iter()
        .filter(|r| matches!(r.status, EpisodeState::Completed | EpisodeState::Fell))
        .map(|r| (r.idx, r.status))
        .collect();
    // Scored from another submission's file (one restored under this name), the board would
    // rank that one's results as this one's.
    let header_path = path.clone();
    let (of_submission, _) = tokio::task::spawn_blocking(move || trajectory_file::read_header(&header_path))
        .await
        .map_err(internal)?
        .map_err(internal)?;
    if of_submission != id {
        return Err(conflict(format!(
            "the stored trajectory file of submission {id} is submission {}'s (restored under the wrong name?): nothing re-scored",
            arena_sdk::protocol::quoted(&of_submission)
        )));
    }
    let spec_for_scoring = spec.clone();
    let rescored = tokio::task::spawn_blocking(
        move || -> anyhow::Result<Vec<(i64, std::collections::BTreeMap<String, f64>)>> {
            let config = arena_runner::episode::metric_config(&spec_for_scoring);
            let mut out = Vec::new();
            for (idx, status) in scored {
                let record = trajectory_file::read_episode(&path, &trajectory_file::episode_group_name(idx as u32))?;
                let status = if status == EpisodeState::Fell {
                    arena_bench::aggregate::EpisodeStatus::Fell
                } else {
                    arena_bench::aggregate::EpisodeStatus::Completed
                };
                let (_, metrics, reason) = arena_runner::episode::score_finished(
                    &record.rows,
                    status,
                    None,
                    &spec_for_scoring.metrics.list,
                    &config,
                );
                if let Some(reason) = reason {
                    anyhow::bail!("episode {idx}: {reason}");
                }
                out.push((idx, metrics));
            }
            Ok(out)
        },
    )
    .await
    .map_err(internal)?
    .map_err(|e| super::internal_error(&format!("re-scoring submission {id}"), format!("{e:#}")))?;
    for (idx, metrics) in &rescored {
        state.storage.set_episode_metrics(&id, *idx, metrics).await?;
    }
    let rows = state.storage.episodes(&id).await?;
    let mut report = results::report(&spec, &s, &rows);
    // The report keeps when the submission was evaluated and says when, by which arena and from
    // which report format it was scored again (a rescored report read like a new evaluation).
    let before = s
        .report_json
        .as_deref()
        .and_then(|j| serde_json::from_str::<arena_bench::aggregate::Report>(j).ok());
    let mut stamp = serde_json::json!({
        "at": report.timestamp,
        "arena_version": env!("CARGO_PKG_VERSION"),
    });
    if let Some(before) = before {
        stamp["format_version_before"] = before.format_version.into();
        // How many times, and when first (one stamp, not one nested in another per rescore).
        let earlier = before.config.get("rescored");
        let times = earlier.and_then(|e| e["times"].as_u64()).unwrap_or(0) + 1;
        stamp["times"] = times.into();
        stamp["first_at"] = earlier
            .and_then(|e| e.get("first_at"))
            .cloned()
            .unwrap_or_else(|| stamp["at"].clone());
        report.timestamp = before.timestamp;
    }
    report.config["rescored"] = stamp;
    let json = serde_json::to_string(&report).map_err(internal)?;
    let pretty = serde_json::to_vec_pretty(&report).map_err(internal)?;
    state
        .objects
        .put(&crate::objects::report_key(&id), pretty)
        .await
        .map_err(internal)?;
    let summary = serde_json::to_string(&crate::leaderboard::ReportSummary::of(&report)).map_err(internal)?;
    state.storage.replace_report_and_summary(&id, &json, &summary).await?;
    let s = submission_or_404(&state, &id).await?;
    let mut v = serde_json::to_value(s).map_err(internal)?;
    v["rescored_episodes"] = rescored.len().into();
    Ok(Json(v).into_response())
}
