//! REST API v1 (JSON). Errors are `{"error": {"code": ..., "message": ...}}` with the matching
//! HTTP status (plus `limit`, `resets_at` and a `Retry-After` header for a used-up quota).
//! Access: `Authorization: Bearer <token>`; the admin token (configuration) manages challenges,
//! phases, teams and tokens and sees everything; a team token creates and reads its own
//! submissions; health, benchmarks, challenges, phases and public leaderboards need no token.
//! The rules themselves live in [`crate::access`].

mod datasets;
mod pages;

use crate::access::{self, AccessError, PhaseState, RunRequest};
use crate::app::AppState;
use crate::leaderboard;
use crate::orchestrator::runner;
use crate::results;
use crate::storage::{NewSubmission, Phase, StorageError, Submission, Team, Visibility, hash_token, now_ms};
use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/health", get(health))
        .route("/api/v1/whoami", get(whoami))
        .route("/api/v1/benchmarks", get(list_benchmarks))
        .route("/api/v1/benchmarks/{name}", get(get_benchmark))
        .route("/api/v1/challenges", post(create_challenge).get(list_challenges))
        .route("/api/v1/challenges/{id}", get(get_challenge))
        .route("/api/v1/challenges/{id}/phases", post(create_phase))
        .route("/api/v1/phases/{id}", get(get_phase).patch(update_phase))
        .route("/api/v1/phases/{id}/leaderboard", get(get_phase_leaderboard))
        .route("/api/v1/teams", post(create_team).get(list_teams))
        .route("/api/v1/teams/{id}", get(get_team))
        .route("/api/v1/teams/{id}/members", post(add_member))
        .route("/api/v1/teams/{id}/tokens", post(create_token).get(list_tokens))
        .route("/api/v1/teams/{id}/tokens/{token_id}", delete(revoke_token))
        .route("/api/v1/submissions", post(create_submission).get(list_submissions))
        .route(
            "/api/v1/submissions/{id}",
            get(get_submission).patch(pages::patch_submission),
        )
        .route("/api/v1/submissions/{id}/results", get(get_results))
        .route("/api/v1/submissions/{id}/report", get(get_report))
        .route("/api/v1/submissions/{id}/trajectories", get(get_trajectories))
        .route("/api/v1/leaderboards/{benchmark}", get(get_leaderboard))
        .merge(datasets::routes())
        .merge(pages::routes())
}

/// An API error: an [`AccessError`] rendered as the JSON error body.
#[derive(Debug)]
pub struct ApiError(pub AccessError);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let e = self.0;
        // Messages name tokens by id only, so refusals can be logged as they are.
        tracing::debug!(
            status = e.status.as_u16(),
            code = e.code,
            "request refused: {}",
            e.message
        );
        let mut body = json!({"code": e.code, "message": e.message});
        if let Some(limit) = e.limit {
            body["limit"] = json!(limit);
            body["resets_at"] = json!(e.resets_at_ms.map(access::rfc3339));
        }
        let mut response = (e.status, Json(json!({ "error": body }))).into_response();
        if let Some(at) = e.resets_at_ms {
            // Whole seconds, rounded up, so a client that waits that long is not refused again.
            let seconds = ((at - now_ms()).max(0) + 999) / 1000;
            if let Ok(v) = HeaderValue::from_str(&seconds.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        response
    }
}

impl From<AccessError> for ApiError {
    fn from(e: AccessError) -> Self {
        ApiError(e)
    }
}

impl<E: std::fmt::Display> From<E> for ApiError
where
    E: Into<anyhow::Error>,
{
    fn from(e: E) -> Self {
        tracing::error!("internal error: {e}");
        ApiError(AccessError::internal(e.to_string()))
    }
}

type ApiResult = Result<Response, ApiError>;

fn not_found(what: String) -> ApiError {
    ApiError(AccessError::not_found(what))
}

fn bad_request(what: String) -> ApiError {
    ApiError(AccessError::bad_request(what))
}

fn conflict(what: String) -> ApiError {
    ApiError(AccessError::new(StatusCode::CONFLICT, "conflict", what))
}

/// Storage errors a request can cause (duplicate, missing row) keep their meaning; the rest are
/// internal.
fn storage_error(e: StorageError) -> ApiError {
    match e {
        StorageError::Conflict(m) => conflict(m),
        StorageError::NotFound(m) => not_found(format!("no {m}")),
        other => other.into(),
    }
}

/// Parses a JSON request body; a syntax error, a wrong type or an unknown key is a 400 naming it.
fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| bad_request(format!("body: {e}")))
}

/// Who is calling.
enum Caller {
    Admin,
    Team(Team),
}

impl Caller {
    fn is_admin(&self) -> bool {
        matches!(self, Caller::Admin)
    }
}

/// The caller of an endpoint that needs a token.
async fn caller(state: &AppState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    match optional_caller(state, headers).await? {
        Some(c) => Ok(c),
        None => Err(ApiError(AccessError::unauthorized(
            "missing Authorization: Bearer <token>",
        ))),
    }
}

/// The caller of a public endpoint: anonymous without an Authorization header; a header that is
/// there must hold a valid token (a refused token is never silently ignored).
async fn optional_caller(state: &AppState, headers: &HeaderMap) -> Result<Option<Caller>, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or_else(|| ApiError(AccessError::unauthorized("Authorization must be \"Bearer <token>\"")))?;
    let admin = &state.config.admin_token;
    if !admin.is_empty() && constant_time_eq(token.as_bytes(), admin.as_bytes()) {
        return Ok(Some(Caller::Admin));
    }
    let now = now_ms();
    let team = access::authenticate(&state.storage, token, now).await?;
    state.rate_limiter.check(&team, now)?;
    Ok(Some(Caller::Team(team)))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn require_admin(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    match caller(state, headers).await? {
        Caller::Admin => Ok(()),
        Caller::Team(_) => Err(ApiError(AccessError::forbidden("admin token required"))),
    }
}

/// The submission if the caller may see it (its team or the admin); 404 otherwise, so ids of
/// other teams are not confirmed.
async fn visible_submission(state: &AppState, headers: &HeaderMap, id: &str) -> Result<(Caller, Submission), ApiError> {
    let who = caller(state, headers).await?;
    match state.storage.submission(id).await? {
        Some(s) if matches!(&who, Caller::Admin) || matches!(&who, Caller::Team(t) if t.id == s.team_id) => {
            Ok((who, s))
        }
        _ => Err(not_found(format!("no submission {id:?}"))),
    }
}

/// 403 `hidden` when the submission's results are hidden from this caller now (a team, in a
/// private phase that has not ended).
async fn check_results_visible(state: &AppState, who: &Caller, s: &Submission) -> Result<(), ApiError> {
    if who.is_admin() {
        return Ok(());
    }
    let Some(phase_id) = &s.phase_id else { return Ok(()) };
    let Some(phase) = state.storage.phase(phase_id).await? else {
        return Ok(());
    };
    if access::results_hidden(&phase, now_ms()) {
        return Err(ApiError(AccessError::hidden(format!(
            "the results of submission {} are hidden until private phase {} ends at {}",
            s.id,
            phase.id,
            access::rfc3339(phase.ends_at)
        ))));
    }
    Ok(())
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

/// Who the Authorization header names: `{"role": "anonymous"}` without one, `{"role": "admin"}`,
/// or `{"role": "team", "team": Team}`; a refused token is 401 as everywhere (the pages use this
/// to choose what to show, without provoking a 403 from an admin endpoint).
async fn whoami(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    Ok(Json(match optional_caller(&state, &headers).await? {
        None => json!({"role": "anonymous"}),
        Some(Caller::Admin) => json!({"role": "admin"}),
        Some(Caller::Team(t)) => json!({"role": "team", "team": t}),
    })
    .into_response())
}

async fn list_benchmarks(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    optional_caller(&state, &headers).await?;
    let rows: Vec<Value> = state
        .catalog
        .list()
        .into_iter()
        .filter_map(|(_, r)| r.ok())
        .map(|s| json!({"name": s.name, "version": s.version, "description": s.description, "primary_metric": s.ranking.primary}))
        .collect();
    Ok(Json(json!({ "benchmarks": rows })).into_response())
}

/// The benchmark file as JSON, plus what a page shows of it: the ranking rule in words, each
/// metric's description, units and direction, and the motions (`motion_list`; `null` with
/// `motions_error` when the clips cannot be loaded here).
async fn get_benchmark(State(state): State<Arc<AppState>>, headers: HeaderMap, Path(name): Path<String>) -> ApiResult {
    optional_caller(&state, &headers).await?;
    let spec = state.catalog.spec(&name).map_err(|e| not_found(e.to_string()))?;
    let mut v = json!(spec);
    v["ranking_rule"] = spec.ranking.describe().into();
    v["metric_info"] = spec
        .metrics
        .list
        .iter()
        .filter_map(|m| arena_bench::metrics::metric_info(m))
        .map(|m| {
            json!({"name": m.name, "description": m.description, "formula": m.formula, "units": m.units,
                   "direction": m.direction})
        })
        .collect::<Vec<_>>()
        .into();
    let catalog = state.catalog.clone();
    let loaded = tokio::task::spawn_blocking(move || catalog.load(&name))
        .await
        .map_err(|e| ApiError(AccessError::internal(e.to_string())))?;
    match loaded {
        Ok(b) => {
            v["motion_list"] = b
                .library
                .motions
                .iter()
                .map(|m| json!({"name": m.name, "category": m.category, "duration_s": m.length_s}))
                .collect::<Vec<_>>()
                .into();
        }
        Err(e) => {
            v["motion_list"] = Value::Null;
            v["motions_error"] = e.to_string().into();
        }
    }
    Ok(Json(v).into_response())
}

// ---------------------------------------------------------------------------------------------
// Challenges and phases

/// A JSON value that is present in the body, even as `null` (absent keys stay `None`), so a
/// PATCH can tell "clear this limit" from "leave it".
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A time field: an RFC 3339 UTC string or unix milliseconds.
fn time_field(field: &str, v: &Value) -> Result<i64, ApiError> {
    match v {
        Value::String(s) => access::parse_rfc3339(s).map_err(|e| bad_request(format!("{field}: {e}"))),
        Value::Number(n) if n.as_i64().is_some_and(|ms| ms >= 0) => Ok(n.as_i64().unwrap_or_default()),
        other => Err(bad_request(format!(
            "{field}: expected an RFC 3339 UTC time such as \"2026-05-01T00:00:00Z\" or unix milliseconds, got {other}"
        ))),
    }
}

/// A submission limit: a positive integer, or `null` for none.
fn limit_field(field: &str, v: &Value) -> Result<Option<u32>, ApiError> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) if n.as_u64().is_some_and(|x| (1..=u64::from(u32::MAX)).contains(&x)) => {
            Ok(n.as_u64().map(|x| x as u32))
        }
        other => Err(bad_request(format!(
            "{field}: expected a positive integer, or null for no limit, got {other}"
        ))),
    }
}

fn visibility_field(v: &Value) -> Result<Visibility, ApiError> {
    match v {
        Value::String(s) => s.parse().map_err(|e| bad_request(format!("leaderboard: {e}"))),
        other => Err(bad_request(format!(
            "leaderboard: expected \"public\" or \"private\", got {other}"
        ))),
    }
}

fn groups_field(v: &Value) -> Result<Option<Vec<String>>, ApiError> {
    match v {
        Value::Null => Ok(None),
        Value::Array(items) => items
            .iter()
            .map(|g| {
                g.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad_request(format!("observation_groups: expected group names, got {g}")))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        other => Err(bad_request(format!(
            "observation_groups: expected a list of group names, or null for the benchmark's, got {other}"
        ))),
    }
}

/// A phase as served: its stored fields plus `state` (upcoming, open, closed) now.
fn phase_json(phase: &Phase, now: i64) -> Value {
    let mut v = json!(phase);
    v["state"] = json!(PhaseState::of(phase, now).as_str());
    v
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewChallengeBody {
    id: String,
    title: String,
    #[serde(default)]
    description: String,
}

async fn create_challenge(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult {
    require_admin(&state, &headers).await?;
    let new: NewChallengeBody = parse_body(&body)?;
    access::check_slug("id", &new.id)?;
    let title = new.title.trim();
    if title.is_empty() || title.len() > 200 {
        return Err(bad_request("title: expected 1-200 bytes of UTF-8 text".into()));
    }
    let challenge = state
        .storage
        .create_challenge(&new.id, title, &new.description)
        .await
        .map_err(storage_error)?;
    Ok((StatusCode::CREATED, Json(challenge)).into_response())
}

async fn list_challenges(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    optional_caller(&state, &headers).await?;
    Ok(Json(json!({"challenges": state.storage.challenges().await?})).into_response())
}

async fn get_challenge(State(state): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult {
    optional_caller(&state, &headers).await?;
    let Some(challenge) = state.storage.challenge(&id).await? else {
        return Err(not_found(format!("no challenge {id:?}")));
    };
    let now = now_ms();
    let phases: Vec<Value> = state
        .storage
        .phases_of_challenge(&id)
        .await?
        .iter()
        .map(|p| phase_json(p, now))
        .collect();
    let mut v = json!(challenge);
    v["phases"] = json!(phases);
    Ok(Json(v).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewPhaseBody {
    id: String,
    benchmark: String,
    starts_at: Value,
    ends_at: Value,
    #[serde(default)]
    leaderboard: Option<Value>,
    #[serde(default)]
    max_submissions_per_day: Option<Value>,
    #[serde(default)]
    max_submissions_total: Option<Value>,
    #[serde(default)]
    observation_groups: Option<Value>,
}

async fn create_phase(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(challenge): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    require_admin(&state, &headers).await?;
    let new: NewPhaseBody = parse_body(&body)?;
    access::check_slug("id", &new.id)?;
    if state.storage.challenge(&challenge).await?.is_none() {
        return Err(not_found(format!("no challenge {challenge:?}")));
    }
    let spec = state
        .catalog
        .spec(&new.benchmark)
        .map_err(|e| bad_request(format!("benchmark: {e}")))?;
    let null = Value::Null;
    let phase = Phase {
        id: new.id,
        challenge_id: challenge,
        benchmark: spec.name.clone(),
        starts_at: time_field("starts_at", &new.starts_at)?,
        ends_at: time_field("ends_at", &new.ends_at)?,
        leaderboard: match &new.leaderboard {
            Some(v) => visibility_field(v)?,
            None => Visibility::Public,
        },
        max_per_day: limit_field(
            "max_submissions_per_day",
            new.max_submissions_per_day.as_ref().unwrap_or(&null),
        )?,
        max_total: limit_field(
            "max_submissions_total",
            new.max_submissions_total.as_ref().unwrap_or(&null),
        )?,
        observation_groups: groups_field(new.observation_groups.as_ref().unwrap_or(&null))?,
        created_at: now_ms(),
    };
    access::validate_phase(&phase, &spec)?;
    let phase = state.storage.create_phase(&phase).await.map_err(storage_error)?;
    Ok((StatusCode::CREATED, Json(phase_json(&phase, now_ms()))).into_response())
}

async fn get_phase(State(state): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult {
    optional_caller(&state, &headers).await?;
    match state.storage.phase(&id).await? {
        Some(p) => Ok(Json(phase_json(&p, now_ms())).into_response()),
        None => Err(not_found(format!("no phase {id:?}"))),
    }
}

/// PATCH body: every key optional; `null` clears a limit or the group restriction.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PhasePatch {
    #[serde(default, deserialize_with = "present")]
    starts_at: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    ends_at: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    leaderboard: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    max_submissions_per_day: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    max_submissions_total: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    observation_groups: Option<Value>,
}

async fn update_phase(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    require_admin(&state, &headers).await?;
    let patch: PhasePatch = parse_body(&body)?;
    let Some(mut phase) = state.storage.phase(&id).await? else {
        return Err(not_found(format!("no phase {id:?}")));
    };
    if let Some(v) = &patch.starts_at {
        phase.starts_at = time_field("starts_at", v)?;
    }
    if let Some(v) = &patch.ends_at {
        phase.ends_at = time_field("ends_at", v)?;
    }
    if let Some(v) = &patch.leaderboard {
        phase.leaderboard = visibility_field(v)?;
    }
    if let Some(v) = &patch.max_submissions_per_day {
        phase.max_per_day = limit_field("max_submissions_per_day", v)?;
    }
    if let Some(v) = &patch.max_submissions_total {
        phase.max_total = limit_field("max_submissions_total", v)?;
    }
    if let Some(v) = &patch.observation_groups {
        phase.observation_groups = groups_field(v)?;
    }
    let spec = state
        .catalog
        .spec(&phase.benchmark)
        .map_err(|e| ApiError(AccessError::internal(format!("phase {id}: {e}"))))?;
    access::validate_phase(&phase, &spec)?;
    let phase = state.storage.update_phase(&phase).await.map_err(storage_error)?;
    tracing::info!(phase = %phase.id, "phase updated");
    Ok(Json(phase_json(&phase, now_ms())).into_response())
}

async fn get_phase_leaderboard(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult {
    let who = optional_caller(&state, &headers).await?;
    let Some(phase) = state.storage.phase(&id).await? else {
        return Err(not_found(format!("no phase {id:?}")));
    };
    let admin = who.as_ref().is_some_and(Caller::is_admin);
    if !admin && access::results_hidden(&phase, now_ms()) {
        return Err(ApiError(AccessError::hidden(format!(
            "the leaderboard of private phase {} is hidden until the phase ends at {}",
            phase.id,
            access::rfc3339(phase.ends_at)
        ))));
    }
    let spec = state
        .catalog
        .spec(&phase.benchmark)
        .map_err(|e| not_found(e.to_string()))?;
    let generation = state.storage.leaderboard_generation().await?;
    let key = format!("phase {} {:?}", phase.id, spec.ranking);
    let board = match state.leaderboards.get(&key, generation) {
        Some(board) => board,
        None => {
            let json = state
                .storage
                .leaderboard_json(&phase.benchmark, Some(&phase.id))
                .await?;
            let rows: Vec<leaderboard::RankRow> = serde_json::from_str(&json)
                .map_err(|e| ApiError(AccessError::internal(format!("leaderboard rows: {e}"))))?;
            state
                .leaderboards
                .put(key, generation, leaderboard::rank_rows(&spec, rows))
        }
    };
    let mut v = json!(board.as_ref());
    v["phase"] = json!(phase.id);
    Ok(Json(v).into_response())
}

// ---------------------------------------------------------------------------------------------
// Teams, members, tokens

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberBody {
    name: String,
    email: String,
}

impl MemberBody {
    /// Trimmed (name, email), checked.
    fn checked(&self, field: &str) -> Result<(String, String), ApiError> {
        let name = self.name.trim();
        if name.is_empty() || name.len() > 128 {
            return Err(bad_request(format!("{field}.name: expected 1-128 bytes of UTF-8 text")));
        }
        let email = self.email.trim();
        let valid = email.len() <= 254
            && !email.chars().any(char::is_whitespace)
            && email
                .split_once('@')
                .is_some_and(|(local, domain)| !local.is_empty() && !domain.is_empty() && !domain.contains('@'));
        if !valid {
            return Err(bad_request(format!(
                "{field}.email: expected an address like name@example.org, got {email:?}"
            )));
        }
        Ok((name.to_string(), email.to_string()))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewTeamBody {
    name: String,
    #[serde(default)]
    members: Vec<MemberBody>,
}

/// A new bearer token: 256 random bits; only its hash is stored.
fn new_token() -> String {
    format!("at_{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

async fn create_team(State(state): State<Arc<AppState>>, headers: HeaderMap, body: axum::body::Bytes) -> ApiResult {
    require_admin(&state, &headers).await?;
    let new: NewTeamBody = parse_body(&body)?;
    let name = new.name.trim();
    if name.is_empty() || name.len() > 64 {
        return Err(bad_request("name: expected 1-64 bytes of UTF-8 text".into()));
    }
    let members = new
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| m.checked(&format!("members[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let token = new_token();
    let (team, info) = state
        .storage
        .create_team_with(name, &members, &hash_token(&token))
        .await
        .map_err(storage_error)?;
    let members = state.storage.members(team.id).await?;
    tracing::info!(team = team.id, token = %info.id, "team created");
    Ok((
        StatusCode::CREATED,
        Json(json!({"team": team, "members": members, "token": token, "token_info": info})),
    )
        .into_response())
}

async fn list_teams(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    require_admin(&state, &headers).await?;
    Ok(Json(json!({"teams": state.storage.teams().await?})).into_response())
}

/// The team named by a path segment (its numeric id); 404 if there is none.
async fn team_by_path(state: &AppState, id: &str) -> Result<Team, ApiError> {
    let team = match id.parse::<i64>() {
        Ok(n) => state.storage.team(n).await?,
        Err(_) => None,
    };
    team.ok_or_else(|| {
        not_found(format!(
            "no team with id {id:?} (teams are addressed by their numeric id; GET /api/v1/teams lists them)"
        ))
    })
}

async fn get_team(State(state): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult {
    require_admin(&state, &headers).await?;
    let team = team_by_path(&state, &id).await?;
    let members = state.storage.members(team.id).await?;
    let tokens = state.storage.tokens(team.id).await?;
    Ok(Json(json!({"team": team, "members": members, "tokens": tokens})).into_response())
}

async fn add_member(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    require_admin(&state, &headers).await?;
    let team = team_by_path(&state, &id).await?;
    let member: MemberBody = parse_body(&body)?;
    let (name, email) = member.checked("body")?;
    let member = state
        .storage
        .add_member(team.id, &name, &email)
        .await
        .map_err(storage_error)?;
    Ok((StatusCode::CREATED, Json(member)).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewTokenBody {
    #[serde(default)]
    label: String,
    #[serde(default)]
    expires_at: Option<Value>,
}

async fn create_token(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult {
    require_admin(&state, &headers).await?;
    let team = team_by_path(&state, &id).await?;
    let new: NewTokenBody = if body.is_empty() {
        NewTokenBody {
            label: String::new(),
            expires_at: None,
        }
    } else {
        parse_body(&body)?
    };
    let label = new.label.trim();
    if label.len() > 64 {
        return Err(bad_request("label: expected at most 64 characters".into()));
    }
    let expires_at = match &new.expires_at {
        None | Some(Value::Null) => None,
        Some(v) => Some(time_field("expires_at", v)?),
    };
    if let Some(at) = expires_at
        && at <= now_ms()
    {
        return Err(bad_request(format!(
            "expires_at: {} is not in the future",
            access::rfc3339(at)
        )));
    }
    let token = new_token();
    let info = state
        .storage
        .create_token(team.id, &hash_token(&token), label, expires_at)
        .await
        .map_err(storage_error)?;
    tracing::info!(team = team.id, token = %info.id, "team token created");
    Ok((StatusCode::CREATED, Json(json!({"token": token, "token_info": info}))).into_response())
}

async fn list_tokens(State(state): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult {
    require_admin(&state, &headers).await?;
    let team = team_by_path(&state, &id).await?;
    Ok(Json(json!({"tokens": state.storage.tokens(team.id).await?})).into_response())
}

async fn revoke_token(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path((id, token_id)): Path<(String, String)>,
) -> ApiResult {
    require_admin(&state, &headers).await?;
    let team = team_by_path(&state, &id).await?;
    let info = state
        .storage
        .revoke_token(team.id, &token_id, now_ms())
        .await
        .map_err(storage_error)?;
    tracing::info!(team = team.id, token = %info.id, "team token revoked");
    Ok(Json(json!({"token_info": info})).into_response())
}

// ---------------------------------------------------------------------------------------------
// Submissions and leaderboards

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewSubmissionBody {
    #[serde(default)]
    benchmark: String,
    #[serde(default)]
    phase: String,
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
    let new: NewSubmissionBody = parse_body(&body)?;
    let now = now_ms();
    let request = RunRequest {
        benchmark: &new.benchmark,
        phase: &new.phase,
        practice: false,
    };
    let plan = access::resolve_run(&state.storage, request, now).await?;
    let catalog = state.catalog.clone();
    let name = plan.benchmark.clone();
    let benchmark = tokio::task::spawn_blocking(move || catalog.load(&name))
        .await?
        .map_err(|e| not_found(e.to_string()))?;
    let submission = access::create_submission(
        &state.storage,
        &team,
        &NewSubmission {
            id: crate::app::new_submission_id(),
            team_id: team.id,
            benchmark: benchmark.spec.name.clone(),
            agent_name: new.agent_name,
            phase_id: plan.phase.as_ref().map(|p| p.id.clone()),
        },
        &runner::new_episodes(&benchmark),
        plan.phase.as_ref(),
        now,
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
    // Status and progress counts only: no metrics, so this is safe for hidden results too.
    let (_, s) = visible_submission(&state, &headers, &id).await?;
    let (pending, running, finished) = state.storage.episode_counts(&id).await?;
    let mut v = serde_json::to_value(&s)?;
    v["progress"] = json!({"pending": pending, "running": running, "finished": finished});
    Ok(Json(v).into_response())
}

async fn get_results(State(state): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult {
    let (who, s) = visible_submission(&state, &headers, &id).await?;
    check_results_visible(&state, &who, &s).await?;
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
    let (who, s) = visible_submission(&state, &headers, &id).await?;
    check_results_visible(&state, &who, &s).await?;
    if let Some(json) = &s.report_json {
        return Ok(([(header::CONTENT_TYPE, "application/json")], json.clone()).into_response());
    }
    // Not finished yet: the report so far.
    let spec = state.catalog.spec(&s.benchmark).map_err(|e| not_found(e.to_string()))?;
    let rows = state.storage.episodes(&id).await?;
    Ok(Json(results::report(&spec, &s, &rows)).into_response())
}

async fn get_trajectories(State(state): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult {
    let (who, s) = visible_submission(&state, &headers, &id).await?;
    check_results_visible(&state, &who, &s).await?;
    // Streamed from the object store as it is read (a completed submission's merged file).
    let found = state
        .objects
        .stream(&crate::objects::trajectory_key(&s.id))
        .await
        .map_err(|e| ApiError(AccessError::internal(e.to_string())))?;
    let Some((size, chunks)) = found else {
        let why = if s.status.is_final() {
            "has no trajectories"
        } else {
            "has no trajectory file yet (it is written when the submission completes)"
        };
        return Err(not_found(format!("submission {id} {why}")));
    };
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-hdf5".to_string()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{id}.h5\"")),
            (header::CONTENT_LENGTH, size.to_string()),
        ],
        axum::body::Body::from_stream(futures_util::StreamExt::map(chunks, |c| {
            c.map_err(std::io::Error::other)
        })),
    )
        .into_response())
}

/// A benchmark's leaderboard over all its completed submissions, except (for everyone but the
/// admin) those of private phases that have not ended: they appear once their phase ends.
async fn get_leaderboard(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(benchmark): Path<String>,
) -> ApiResult {
    let who = optional_caller(&state, &headers).await?;
    let spec = state.catalog.spec(&benchmark).map_err(|e| not_found(e.to_string()))?;
    let generation = state.storage.leaderboard_generation().await?;
    let mut hidden: Vec<String> = Vec::new();
    if !who.as_ref().is_some_and(Caller::is_admin) {
        let now = now_ms();
        hidden = state
            .storage
            .phases_of_benchmark(&spec.name)
            .await?
            .into_iter()
            .filter(|p| access::results_hidden(p, now))
            .map(|p| p.id)
            .collect();
        hidden.sort();
    }
    let key = format!("benchmark {} {:?} hiding {hidden:?}", spec.name, spec.ranking);
    if let Some(board) = state.leaderboards.get(&key, generation) {
        return Ok(Json(board.as_ref()).into_response());
    }
    let hidden: HashSet<String> = hidden.into_iter().collect();
    let rows: Vec<leaderboard::RankRow> =
        serde_json::from_str(&state.storage.leaderboard_json(&spec.name, None).await?)
            .map_err(|e| ApiError(AccessError::internal(format!("leaderboard rows: {e}"))))?;
    let rows = rows
        .into_iter()
        .filter(|s| !s.phase_id.as_ref().is_some_and(|p| hidden.contains(p)))
        .collect();
    let ranked = leaderboard::rank_rows(&spec, rows);
    let board = state.leaderboards.put(key, generation, ranked);
    Ok(Json(board.as_ref()).into_response())
}
