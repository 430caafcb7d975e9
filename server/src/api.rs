//! REST API v1 (JSON). Errors are `{"error": {"code": ..., "message": ...}}` with the matching
//! HTTP status. Access: `Authorization: Bearer <token>`; the admin token (configuration) manages
//! teams and sees everything; a team token creates and reads its own submissions; health,
//! benchmarks and leaderboards are public.

use crate::app::AppState;
use crate::leaderboard;
use crate::orchestrator::runner;
use crate::results;
use crate::storage::{NewSubmission, Submission, Team, hash_token};
use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/health", get(health))
        .route("/api/v1/benchmarks", get(list_benchmarks))
        .route("/api/v1/benchmarks/{name}", get(get_benchmark))
        .route("/api/v1/teams", post(create_team).get(list_teams))
        .route("/api/v1/submissions", post(create_submission).get(list_submissions))
        .route("/api/v1/submissions/{id}", get(get_submission))
        .route("/api/v1/submissions/{id}/results", get(get_results))
        .route("/api/v1/submissions/{id}/report", get(get_report))
        .route("/api/v1/submissions/{id}/trajectories", get(get_trajectories))
        .route("/api/v1/leaderboards/{benchmark}", get(get_leaderboard))
}

/// An API error: HTTP status, stable code, message.
#[derive(Debug)]
pub struct ApiError(StatusCode, &'static str, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({"error": {"code": self.1, "message": self.2}}))).into_response()
    }
}

impl<E: std::fmt::Display> From<E> for ApiError
where
    E: Into<anyhow::Error>,
{
    fn from(e: E) -> Self {
        tracing::error!("internal error: {e}");
        ApiError(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
    }
}

type ApiResult = Result<Response, ApiError>;

fn not_found(what: String) -> ApiError {
    ApiError(StatusCode::NOT_FOUND, "not_found", what)
}

fn bad_request(what: String) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, "bad_request", what)
}

/// Who is calling.
enum Caller {
    Admin,
    Team(Team),
}

async fn caller(state: &AppState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let unauthorized = |m: &str| ApiError(StatusCode::UNAUTHORIZED, "unauthorized", m.to_string());
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(unauthorized("missing Authorization: Bearer <token>"));
    };
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or_else(|| unauthorized("Authorization must be \"Bearer <token>\""))?;
    let admin = &state.config.admin_token;
    if !admin.is_empty() && constant_time_eq(token.as_bytes(), admin.as_bytes()) {
        return Ok(Caller::Admin);
    }
    match state.storage.team_by_token_hash(&hash_token(token)).await? {
        Some(team) => Ok(Caller::Team(team)),
        None => Err(unauthorized("unknown token")),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn require_admin(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    match caller(state, headers).await? {
        Caller::Admin => Ok(()),
        Caller::Team(_) => Err(ApiError(
            StatusCode::FORBIDDEN,
            "forbidden",
            "admin token required".into(),
        )),
    }
}

/// The submission if the caller may see it (its team or the admin); 404 otherwise, so ids of
/// other teams are not confirmed.
async fn visible_submission(state: &AppState, headers: &HeaderMap, id: &str) -> Result<Submission, ApiError> {
    let who = caller(state, headers).await?;
    match state.storage.submission(id).await? {
        Some(s) if matches!(&who, Caller::Admin) || matches!(&who, Caller::Team(t) if t.id == s.team_id) => Ok(s),
        _ => Err(not_found(format!("no submission {id:?}"))),
    }
}

async fn health(State(state): State<Arc<AppState>>) -> ApiResult {
    Ok(Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "protocol_version": arena_sdk::protocol::PROTOCOL_VERSION,
        "database": state.storage.engine(),
    }))
    .into_response())
}

async fn list_benchmarks(State(state): State<Arc<AppState>>) -> ApiResult {
    let rows: Vec<Value> = state
        .catalog
        .list()
        .into_iter()
        .filter_map(|(_, r)| r.ok())
        .map(|s| json!({"name": s.name, "version": s.version, "description": s.description, "primary_metric": s.ranking.primary}))
        .collect();
    Ok(Json(json!({ "benchmarks": rows })).into_response())
}

async fn get_benchmark(State(state): State<Arc<AppState>>, Path(name): Path<String>) -> ApiResult {
    match state.catalog.spec(&name) {
        Ok(spec) => Ok(Json(spec).into_response()),
        Err(e) => Err(not_found(e.to_string())),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewTeam {
    name: String,
}

async fn create_team(State(state): State<Arc<AppState>>, headers: HeaderMap, body: axum::body::Bytes) -> ApiResult {
    require_admin(&state, &headers).await?;
    let new: NewTeam = serde_json::from_slice(&body).map_err(|e| bad_request(format!("body: {e}")))?;
    let name = new.name.trim();
    if name.is_empty() || name.len() > 64 {
        return Err(bad_request("name: expected 1-64 characters".into()));
    }
    let token = format!("at_{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    match state.storage.create_team(name, &hash_token(&token)).await {
        Ok(team) => Ok((StatusCode::CREATED, Json(json!({"team": team, "token": token}))).into_response()),
        Err(crate::storage::StorageError::Conflict(m)) => Err(ApiError(StatusCode::CONFLICT, "conflict", m)),
        Err(e) => Err(e.into()),
    }
}

async fn list_teams(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    require_admin(&state, &headers).await?;
    Ok(Json(json!({"teams": state.storage.teams().await?})).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewSubmissionBody {
    benchmark: String,
    #[serde(default)]
    agent_name: String,
}

async fn create_submission(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult {
    let Caller::Team(team) = caller(&state, &headers).await? else {
        return Err(bad_request("submissions belong to teams: use a team token".into()));
    };
    let new: NewSubmissionBody = serde_json::from_slice(&body).map_err(|e| bad_request(format!("body: {e}")))?;
    let catalog = state.catalog.clone();
    let name = new.benchmark.clone();
    let benchmark = tokio::task::spawn_blocking(move || catalog.load(&name))
        .await?
        .map_err(|e| not_found(e.to_string()))?;
    let submission = state
        .storage
        .create_submission(
            &NewSubmission {
                id: crate::app::new_submission_id(),
                team_id: team.id,
                benchmark: benchmark.spec.name.clone(),
                agent_name: new.agent_name,
            },
            &runner::new_episodes(&benchmark),
        )
        .await?;
    Ok((StatusCode::CREATED, Json(submission)).into_response())
}

async fn list_submissions(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    let team = match caller(&state, &headers).await? {
        Caller::Admin => None,
        Caller::Team(t) => Some(t.id),
    };
    Ok(Json(json!({"submissions": state.storage.submissions(team).await?})).into_response())
}

async fn get_submission(State(state): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult {
    let s = visible_submission(&state, &headers, &id).await?;
    let (pending, running, finished) = state.storage.episode_counts(&id).await?;
    let mut v = serde_json::to_value(&s)?;
    v["progress"] = json!({"pending": pending, "running": running, "finished": finished});
    Ok(Json(v).into_response())
}

async fn get_results(State(state): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult {
    let s = visible_submission(&state, &headers, &id).await?;
    let rows = state.storage.episodes(&id).await?;
    let aggregator = results::aggregate(&rows);
    Ok(Json(json!({
        "submission": s,
        "aggregated": aggregator.aggregated(),
        "groups": aggregator.by_category(),
        "episodes": rows,
        "failed_episodes": aggregator.failed(),
    }))
    .into_response())
}

async fn get_report(State(state): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult {
    let s = visible_submission(&state, &headers, &id).await?;
    if let Some(json) = &s.report_json {
        return Ok(([(header::CONTENT_TYPE, "application/json")], json.clone()).into_response());
    }
    // Not finished yet: the report so far.
    let spec = state.catalog.spec(&s.benchmark).map_err(|e| not_found(e.to_string()))?;
    let rows = state.storage.episodes(&id).await?;
    Ok(Json(results::report(&spec, &s, &rows)).into_response())
}

async fn get_trajectories(State(state): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult {
    let s = visible_submission(&state, &headers, &id).await?;
    let path = state.trajectory_path(&s.id);
    let bytes = match tokio::fs::read(&path).await {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(not_found(format!("submission {id} has no trajectories yet")));
        }
        Err(e) => return Err(e.into()),
    };
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-hdf5".to_string()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{id}.h5\"")),
        ],
        bytes,
    )
        .into_response())
}

async fn get_leaderboard(State(state): State<Arc<AppState>>, Path(benchmark): Path<String>) -> ApiResult {
    let spec = state.catalog.spec(&benchmark).map_err(|e| not_found(e.to_string()))?;
    let submissions = state.storage.completed_submissions(&spec.name).await?;
    Ok(Json(leaderboard::rank(&spec, &submissions)).into_response())
}
