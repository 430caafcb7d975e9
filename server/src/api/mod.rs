//! REST API v1 (JSON). Errors are `{"error": {"code": ..., "message": ...}}` with the matching
//! HTTP status (plus `limit`, `resets_at` and a `Retry-After` header for a used-up quota).
//! Access: `Authorization: Bearer <token>`; the admin token (configuration) manages challenges,
//! phases, teams and tokens and sees everything; a team token creates and reads its own
//! submissions; health, benchmarks, challenges, phases and public leaderboards need no token.
//! The rules themselves live in [`crate::access`].

mod challenges;
mod datasets;
mod download;
mod extract;
mod hosted;
mod pages;
mod submissions;
mod teams;

use crate::access::{self, AccessError, PhaseState, RunRequest};
use crate::catalog::{Availability, CatalogError, ClientLoadError};
use crate::leaderboard;
use crate::orchestrator::runner;
use crate::results;
use crate::state::AppState;
use crate::storage::{NewSubmission, Phase, StorageError, Submission, Team, Visibility, hash_token, now_ms};
use arena_sdk::protocol::codes;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;

use challenges::*;
use extract::{ApiBody, ApiPath, ApiQuery};
use submissions::*;
use teams::*;

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
        .route("/api/v1/submissions/{id}/policy", get(get_policy))
        .route("/api/v1/leaderboards/{benchmark}", get(get_leaderboard))
        .merge(datasets::routes())
        .merge(pages::routes())
        // Said explicitly (axum's default) so that `ApiBody`'s 413 message names the limit.
        .layer(axum::extract::DefaultBodyLimit::max(extract::MAX_BODY_BYTES))
        // Policy files are larger than REST bodies: a limit of their own.
        .merge(hosted::routes())
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
        internal_error("the request", e)
    }
}

/// An internal failure: the details, which may name server files or the object store's
/// location, go to the log; the caller is told what failed and where to look.
fn internal_error(doing: &str, e: impl std::fmt::Display) -> ApiError {
    tracing::error!("{doing}: {e}");
    ApiError(AccessError::internal(format!(
        "{doing} failed on the server (its log has the details)"
    )))
}

type ApiResult = Result<Response, ApiError>;

fn not_found(what: String) -> ApiError {
    ApiError(AccessError::not_found(what))
}

/// A benchmark that cannot be read or loaded: 404 when there is none of that name, 503
/// `benchmark_unavailable` when it exists but cannot be loaded (the details are logged; the
/// answer names no server file), the code an agent's connect gets for it.
fn benchmark_error(requested: &str, e: &CatalogError) -> ApiError {
    match e.for_client(requested) {
        ClientLoadError::Unknown(message) => not_found(message),
        ClientLoadError::Unavailable(message) => unavailable(message),
    }
}

/// [`benchmark_error`] for a benchmark a stored phase or submission names: that the server
/// finds no file of that name (deleted, renamed, or no longer valid) is the organisers' problem,
/// not an unknown name in the request, so it is no 404.
fn stored_benchmark_error(requested: &str, e: &CatalogError) -> ApiError {
    match e.for_client(requested) {
        ClientLoadError::Unknown(_) => {
            tracing::error!(benchmark = %requested, "a stored phase or submission names a benchmark this server cannot find: {e}");
            unavailable(format!(
                "benchmark {requested} cannot be loaded on the server (a configuration problem; the organisers have the details in the server log)"
            ))
        }
        ClientLoadError::Unavailable(message) => unavailable(message),
    }
}

fn unavailable(message: String) -> ApiError {
    ApiError(AccessError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        codes::BENCHMARK_UNAVAILABLE,
        message,
    ))
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

/// A time field: an RFC 3339 string (an offset is converted to UTC) or unix milliseconds.
fn time_field(field: &str, v: &Value) -> Result<i64, ApiError> {
    match v {
        Value::String(s) => access::parse_rfc3339(s).map_err(|e| bad_request(format!("{field}: {e}"))),
        Value::Number(n) if n.is_i64() => {
            access::check_given_ms(n.as_i64().unwrap_or_default()).map_err(|e| bad_request(format!("{field}: {e}")))
        }
        other => Err(bad_request(format!(
            "{field}: expected an RFC 3339 time such as \"2026-05-01T00:00:00Z\" or unix milliseconds, got {other}"
        ))),
    }
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

/// The token of an `Authorization: Bearer <token>` value; the scheme's name is
/// case-insensitive (RFC 9110 §11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
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
        .and_then(bearer_token)
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
    if state.config.admin_token.is_empty() {
        // Said as it is: "unknown token" sent operators retyping a token the server has none of.
        return Err(ApiError(AccessError::forbidden(
            "this server has no admin token (admin_token / ARENA_ADMIN_TOKEN / --admin-token): its admin endpoints are disabled",
        )));
    }
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
        _ => Err(not_found(format!("no submission {}", arena_sdk::protocol::quoted(id)))),
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

/// Why the submission's benchmark hides its motions from this caller now, if it does
/// ([`access::motions_hidden`]; admins see everything).
async fn motions_hidden_from(state: &AppState, who: &Caller, s: &Submission) -> Result<Option<String>, ApiError> {
    if who.is_admin() {
        return Ok(None);
    }
    let spec = state
        .catalog
        .spec(&s.benchmark)
        .map_err(|e| stored_benchmark_error(&s.benchmark, &e))?;
    Ok(access::motions_hidden(&state.storage, &spec, now_ms()).await?)
}

/// Whether `spec`'s motions are hidden from teams at `now` ([`access::motions_hidden`]), looked
/// up once per benchmark in `known`: a list of many submissions asks for few benchmarks.
async fn motions_hidden_once(
    state: &AppState,
    known: &mut std::collections::HashMap<String, bool>,
    spec: &arena_bench::spec::BenchmarkSpec,
    now: i64,
) -> Result<bool, ApiError> {
    if let Some(hidden) = known.get(&spec.name) {
        return Ok(*hidden);
    }
    let hidden = access::motions_hidden(&state.storage, spec, now).await?.is_some();
    known.insert(spec.name.clone(), hidden);
    Ok(hidden)
}

/// 403 `hidden` when the submission's per-episode details (its motions: reports, trajectories,
/// replays, episode CSV) are hidden from this caller: its benchmark is a hidden test set.
async fn check_motions_visible(state: &AppState, who: &Caller, s: &Submission) -> Result<(), ApiError> {
    match motions_hidden_from(state, who, s).await? {
        Some(why) => Err(ApiError(AccessError::hidden(format!(
            "the episodes of submission {} name hidden motions: {why} (its scores are in /results)",
            s.id
        )))),
        None => Ok(()),
    }
}

/// `ok` with 200 while the server can serve (`crate::health`: its database answers, its disk
/// has room), `unavailable` with 503 when it cannot (a load balancer's check then sends agents
/// and browsers to another replica). The admin also sees what the server runs now, and why it
/// cannot serve.
async fn health(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    let health = crate::health::check(&state).await;
    // A token that is sent must be valid, as on every public endpoint (a monitor with a
    // mistyped admin token learns it); a database that cannot check a team's is the check's
    // own answer below.
    let admin = match optional_caller(&state, &headers).await {
        Ok(caller) => matches!(caller, Some(Caller::Admin)),
        Err(e) if e.0.status == StatusCode::UNAUTHORIZED => return Err(e),
        Err(_) => false,
    };
    let mut body = json!({
        "status": if health.is_ok() { "ok" } else { "unavailable" },
        "version": env!("CARGO_PKG_VERSION"),
        "protocol_version": arena_sdk::protocol::PROTOCOL_VERSION,
        "database": state.storage.engine(),
    });
    if let Err(why) = &health {
        body["error"] = json!(match admin {
            true => why.detail.clone(),
            false => why.public.to_string(),
        });
    }
    if admin {
        let hosted = state.hosted_runs.lock().unwrap_or_else(|e| e.into_inner()).len();
        // Those holding a place run; the rest wait for one.
        let running = state
            .config
            .hosted_runs()
            .saturating_sub(state.hosted_places.available_permits())
            .min(hosted);
        body["load"] = json!({
            "agent_connections": state.session_stop.open_connections(),
            "submission_sessions": state.attached.len(),
            "hosted_runs": running,
            "hosted_runs_waiting": hosted - running,
        });
    }
    let status = if health.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    Ok((status, Json(body)).into_response())
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
    let mut rows = Vec::new();
    for s in state.catalog.offered() {
        let mut row = json!({"name": s.name, "version": s.version, "description": s.description,
                             "primary_metric": s.ranking.primary});
        // Whether it runs here, as its last load found (every benchmark is loaded behind the
        // server's start): a benchmark whose motions are missing is listed, not chosen.
        row["available"] = match state.catalog.availability(&s.name) {
            Availability::Loaded => true.into(),
            Availability::Unavailable(message) => {
                row["unavailable"] = message.into();
                false.into()
            }
            Availability::Unchecked => Value::Null,
        };
        // Loaded, but its file changed since its version first ran: new submissions to it are
        // refused (results under one version must be comparable) until it is restored or its
        // version raised.
        // The version and definition this process runs (the file may have been edited since
        // it loaded them); a database that does not answer leaves the row as its load found it.
        let recorded = match state.catalog.loaded_definition(&s.name) {
            Some((version, current)) => match state.storage.benchmark_definition(&s.name, version).await {
                Ok(recorded) => recorded.map(|r| (version, r, current)),
                Err(e) => {
                    tracing::warn!(benchmark = %s.name, "reading its recorded definition: {e}");
                    None
                }
            },
            None => None,
        };
        if let Some((version, recorded, current)) = recorded
            && crate::catalog::changed_since(&recorded, &current)
        {
            row["available"] = false.into();
            row["unavailable"] = crate::storage::StorageError::BenchmarkChanged {
                benchmark: s.name.clone(),
                version,
            }
            .to_string()
            .into();
        }
        rows.push(row);
    }
    Ok(Json(json!({ "benchmarks": rows })).into_response())
}

/// The benchmark file as JSON, plus what a page shows of it: the ranking rule in words, each
/// metric's description, units and direction, and the motions (`motion_list`; `null` with
/// `motions_error` when the clips cannot be loaded here).
async fn get_benchmark(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(name): ApiPath<String>,
) -> ApiResult {
    let who = optional_caller(&state, &headers).await?;
    let spec = state.catalog.spec(&name).map_err(|e| benchmark_error(&name, &e))?;
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
    // A hidden test set shows teams and visitors no motion: no names, durations or sources.
    if !who.as_ref().is_some_and(Caller::is_admin)
        && let Some(why) = access::motions_hidden(&state.storage, &spec, now_ms()).await?
    {
        v["motions"] = json!({"hidden": true, "attribution": spec.motions.attribution});
        v["motion_list"] = Value::Null;
        v["motions_hidden"] = why.into();
        return Ok(Json(v).into_response());
    }
    let catalog = state.catalog.clone();
    let loaded = tokio::task::spawn_blocking(move || catalog.load(&name))
        .await
        .map_err(|e| internal_error("loading the benchmark", e))?;
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
            let (ClientLoadError::Unknown(message) | ClientLoadError::Unavailable(message)) = e.for_client(&spec.name);
            v["motion_list"] = Value::Null;
            v["motions_error"] = message.into();
        }
    }
    Ok(Json(v).into_response())
}

#[cfg(test)]
mod bearer_tests {
    #[test]
    fn the_scheme_is_case_insensitive() {
        for value in ["Bearer tok-1", "bearer tok-1", "BEARER  tok-1 ", " Bearer tok-1"] {
            assert_eq!(super::bearer_token(value), Some("tok-1"), "{value:?}");
        }
        for value in ["Basic tok-1", "Bearertok-1", "tok-1", ""] {
            assert_eq!(super::bearer_token(value), None, "{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_fields_are_refused_where_rfc3339_cannot_write_them() {
        assert_eq!(time_field("ends_at", &json!(0)).unwrap(), 0);
        // Seconds (`date +%s`) are refused, saying what they read as.
        let e = time_field("ends_at", &json!(1_796_000_000i64)).unwrap_err().0;
        assert!(
            e.message.contains("reads as 1970-01-21") && e.message.contains("seconds × 1000"),
            "{}",
            e.message
        );
        assert_eq!(
            time_field("ends_at", &json!(1_796_000_000_000i64)).unwrap(),
            1_796_000_000_000
        );
        assert_eq!(
            time_field("ends_at", &json!(access::MAX_TIME_MS)).unwrap(),
            access::MAX_TIME_MS
        );
        // Stored, year 11476 would panic every later leaderboard that prints it.
        for bad in [
            json!(-1),
            json!(300_000_000_000_000i64),
            json!("9999-12-31T23:00:00-02:00"),
        ] {
            let e = time_field("ends_at", &bad).unwrap_err().0;
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
            assert!(
                e.message.starts_with("ends_at: ") && e.message.contains("9999-12-31"),
                "{bad}: {}",
                e.message
            );
        }
    }
}
