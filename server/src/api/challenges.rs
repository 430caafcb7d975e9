//! Challenges and their phases: creation and updates (admin), reads, a phase's leaderboard.

use super::*;

/// A JSON value that is present in the body, even as `null` (absent keys stay `None`), so a
/// PATCH can tell "clear this limit" from "leave it".
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
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

fn hosted_only_field(v: &Value) -> Result<bool, ApiError> {
    v.as_bool()
        .ok_or_else(|| bad_request(format!("hosted_only: expected true or false, got {v}")))
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

pub(super) async fn create_challenge(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiBody(body): ApiBody,
) -> ApiResult {
    require_admin(&state, &headers).await?;
    let new: NewChallengeBody = parse_body(&body)?;
    access::check_slug("id", &new.id)?;
    let title = access::check_name("title", &new.title, 200, false)?;
    let description = access::check_text("description", &new.description, 20_000)?;
    let challenge = state
        .storage
        .create_challenge(&new.id, &title, &description)
        .await
        .map_err(storage_error)?;
    Ok((StatusCode::CREATED, Json(challenge)).into_response())
}

pub(super) async fn list_challenges(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    optional_caller(&state, &headers).await?;
    Ok(Json(json!({"challenges": state.storage.challenges().await?})).into_response())
}

pub(super) async fn get_challenge(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    optional_caller(&state, &headers).await?;
    let Some(challenge) = state.storage.challenge(&id).await? else {
        return Err(not_found(format!("no challenge {}", arena_sdk::protocol::quoted(&id))));
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
    #[serde(default)]
    hosted_only: Option<Value>,
}

pub(super) async fn create_phase(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(challenge): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> ApiResult {
    require_admin(&state, &headers).await?;
    let new: NewPhaseBody = parse_body(&body)?;
    access::check_slug("id", &new.id)?;
    if state.storage.challenge(&challenge).await?.is_none() {
        return Err(not_found(format!(
            "no challenge {}",
            arena_sdk::protocol::quoted(&challenge)
        )));
    }
    let spec = state.catalog.spec(&new.benchmark).map_err(|e| {
        let (ClientLoadError::Unknown(message) | ClientLoadError::Unavailable(message)) = e.for_client(&new.benchmark);
        bad_request(format!("benchmark: {message}"))
    })?;
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
        hosted_only: match &new.hosted_only {
            Some(v) => hosted_only_field(v)?,
            None => false,
        },
        created_at: now_ms(),
    };
    access::validate_phase(&phase, &spec)?;
    // A phase on a benchmark this server cannot run would be listed as open while every
    // participant is refused (issue 30): its motions are loaded (and cached) first.
    let catalog = state.catalog.clone();
    let name = spec.name.clone();
    match tokio::task::spawn_blocking(move || catalog.load(&name)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            return Err(bad_request(format!(
                "benchmark: {} cannot be run on this server, so no phase can open on it: {} (install the motions under the server's motions root, or choose another benchmark)",
                spec.name,
                state.catalog.organiser_message(&e)
            )));
        }
        Err(e) => {
            return Err(ApiError(AccessError::internal(format!(
                "loading benchmark {}: {e}",
                spec.name
            ))));
        }
    }
    let mut warnings = if phase.leaderboard == Visibility::Private {
        shared_clip_warnings(&state, &spec.name).await?
    } else {
        Vec::new()
    };
    warnings.extend(same_benchmark_warnings(&state, &phase).await?);
    let phase = state.storage.create_phase(&phase).await.map_err(storage_error)?;
    for w in &warnings {
        tracing::warn!(phase = %phase.id, "{w}");
    }
    let mut body = phase_json(&phase, now_ms());
    body["warnings"] = json!(warnings);
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// A private and a public phase on the same benchmark run the same episodes (the benchmark's
/// list, the same seeds), so the public one's results, shown to the teams episode by episode,
/// are the private one's hidden scores: named whichever of the two is created (or made private
/// or public) second, so that the organiser learns it before anyone runs either.
async fn same_benchmark_warnings(state: &AppState, phase: &Phase) -> Result<Vec<String>, ApiError> {
    let others = state.storage.phases_of_benchmark(&phase.benchmark).await?;
    let window = |p: &Phase| format!("{} to {}", access::rfc3339(p.starts_at), access::rfc3339(p.ends_at));
    let now = crate::storage::now_ms();
    Ok(others
        .iter()
        .filter(|other| other.id != phase.id && other.leaderboard != phase.leaderboard)
        // A private phase that has ended hides nothing any more: its results are public.
        .filter(|other| {
            let private: &Phase = if phase.leaderboard == Visibility::Private { phase } else { other };
            private.ends_at > now
        })
        .map(|other| {
            let (private, public) = match phase.leaderboard {
                Visibility::Private => (phase, other),
                Visibility::Public => (other, phase),
            };
            format!(
                "benchmark {} also runs in {} phase {} ({}): public phase {} shows the teams their results on the same episodes (the same clips, windows and seeds) that private phase {} hides, so its hidden scores can be read there; give the private phase a benchmark of its own (other clips, or another split), or make both phases private; and from now until private phase {} ends ({}), the benchmark is its test set: its motions are hidden from every team in every phase, {} included (no practice, no motion names, no times to failure on its boards)",
                phase.benchmark,
                if other.leaderboard == Visibility::Private { "private" } else { "public" },
                other.id,
                window(other),
                public.id,
                private.id,
                private.id,
                access::rfc3339(private.ends_at),
                public.id
            )
        })
        .collect())
}

/// Issue 40 §3: a private phase's clips that participants can reach elsewhere, named, so an
/// organiser learns that its test set is not private before anyone runs it. Another benchmark's
/// clips reach the teams whenever an agent of theirs may run it: an agent is sent each
/// episode's reference frame by frame, whatever the results show (a hidden test set's or a
/// private phase's hide scores and names, not observations). Only a benchmark bound to phases
/// (so not run on its own) that all take uploaded files only keeps its clips from every team's
/// process.
async fn shared_clip_warnings(state: &AppState, benchmark: &str) -> Result<Vec<String>, ApiError> {
    let mut reachable = Vec::new();
    for other in state.catalog.offered() {
        if state.catalog.spec(&other.name).is_err() {
            continue; // not loadable now: nobody can run it either
        }
        let phases = state.storage.phases_of_benchmark(&other.name).await?;
        let sealed = !phases.is_empty() && phases.iter().all(|p| p.hosted_only);
        if !sealed {
            reachable.push(other.name);
        }
    }
    let catalog = state.catalog.clone();
    let name = benchmark.to_string();
    let shared = tokio::task::spawn_blocking(move || catalog.shared_clips(&name, &reachable))
        .await
        .map_err(|e| ApiError(AccessError::internal(format!("comparing clips: {e}"))))?
        .map_err(|e| {
            ApiError(AccessError::internal(format!(
                "comparing clips: {}",
                state.catalog.organiser_message(&e)
            )))
        })?;
    Ok(shared
        .into_iter()
        .map(|(other, clips)| {
            format!(
                "{} of this private phase's clips also appear in benchmark {other}, whose episodes participants' agents can run (and are sent the references of): {} (its motions are not private; use clips of their own, make every phase of {other} take uploaded files only, or take {other} out of the benchmarks folder)",
                clips.len(),
                clips.join(", ")
            )
        })
        .collect())
}

pub(super) async fn get_phase(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    optional_caller(&state, &headers).await?;
    match state.storage.phase(&id).await? {
        Some(p) => Ok(Json(phase_json(&p, now_ms())).into_response()),
        None => Err(not_found(format!("no phase {}", arena_sdk::protocol::quoted(&id)))),
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
    #[serde(default, deserialize_with = "present")]
    hosted_only: Option<Value>,
}

pub(super) async fn update_phase(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> ApiResult {
    require_admin(&state, &headers).await?;
    let patch: PhasePatch = parse_body(&body)?;
    // The benchmark's rules first (a phase's benchmark never changes), so the transaction
    // below holds the row for no file read.
    let Some(stored) = state.storage.phase(&id).await? else {
        return Err(not_found(format!("no phase {}", arena_sdk::protocol::quoted(&id))));
    };
    let spec = state.catalog.spec(&stored.benchmark).map_err(|e| {
        // The folders the server reads are its own business, as in `create_phase`.
        ApiError(AccessError::internal(format!(
            "phase {id}: {}",
            state.catalog.organiser_message(&e)
        )))
    })?;
    // Applied to the phase as stored when the update holds it: two organisers' updates at once
    // both land, each checked against the other's result.
    let updated = state
        .storage
        .update_phase_with(&id, |phase| apply_phase_patch(phase, &patch, &spec))
        .await
        .map_err(storage_error)?;
    let phase = updated?;
    // Made private (or public) now: the same warnings as at creation.
    let mut warnings = if phase.leaderboard == Visibility::Private && patch.leaderboard.is_some() {
        shared_clip_warnings(&state, &spec.name).await?
    } else {
        Vec::new()
    };
    if patch.leaderboard.is_some() {
        warnings.extend(same_benchmark_warnings(&state, &phase).await?);
    }
    if phase.observation_groups != stored.observation_groups {
        warnings.extend(queued_hosted_warning(&state, &phase).await?);
    }
    tracing::info!(phase = %phase.id, "phase updated");
    for w in &warnings {
        tracing::warn!(phase = %phase.id, "{w}");
    }
    let mut body = phase_json(&phase, now_ms());
    body["warnings"] = json!(warnings);
    Ok(Json(body).into_response())
}

/// Uploaded policies of the phase that have not finished were checked against the groups it
/// sent when they were uploaded: each is checked again when its run starts, and fails then if
/// it needs a group the phase no longer sends (an organiser changing groups should know).
async fn queued_hosted_warning(state: &AppState, phase: &Phase) -> Result<Option<String>, ApiError> {
    let waiting = state.storage.unfinished_hosted_in_phase(&phase.id).await?;
    if waiting.is_empty() {
        return Ok(None);
    }
    const NAMED: usize = 10;
    let mut named = waiting.iter().take(NAMED).cloned().collect::<Vec<_>>().join(", ");
    if waiting.len() > NAMED {
        named.push_str(&format!(" and {} more", waiting.len() - NAMED));
    }
    Ok(Some(format!(
        "{} hosted submission(s) of phase {} have not finished ({named}): they were checked against the observation groups of their upload; each run that starts from now on gets the new groups, and one whose policy needs a group no longer sent fails then, saying so",
        waiting.len(),
        phase.id
    )))
}

/// A PATCH's fields on `phase`, then the phase's rules checked against its benchmark's `spec`.
fn apply_phase_patch(
    phase: &mut Phase,
    patch: &PhasePatch,
    spec: &arena_bench::spec::BenchmarkSpec,
) -> Result<(), ApiError> {
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
    if let Some(v) = &patch.hosted_only {
        phase.hosted_only = hosted_only_field(v)?;
    }
    access::validate_phase(phase, spec)?;
    Ok(())
}

pub(super) async fn get_phase_leaderboard(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    let who = optional_caller(&state, &headers).await?;
    let Some(phase) = state.storage.phase(&id).await? else {
        return Err(not_found(format!("no phase {}", arena_sdk::protocol::quoted(&id))));
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
        .map_err(|e| stored_benchmark_error(&phase.benchmark, &e))?;
    let generation = state.storage.leaderboard_generation().await?;
    // The benchmark may be a hidden test set (its flag, or another private phase running it):
    // no time in seconds on the board then, as on the benchmark's.
    let motions_hidden = !admin && access::motions_hidden(&state.storage, &spec, now_ms()).await?.is_some();
    let key = format!("phase {} {:?} motions hidden {motions_hidden}", phase.id, spec.ranking);
    let board = match state.leaderboards.get(&key, generation) {
        Some(board) => board,
        None => {
            let rows = state
                .leaderboards
                .rows(&state.storage, &phase.benchmark, Some(&phase.id))
                .await?;
            let mut ranked = leaderboard::rank_rows(&spec, rows);
            if motions_hidden {
                ranked = ranked.without_seconds();
            }
            state.leaderboards.put(key, generation, ranked)
        }
    };
    let mut v = json!(board.as_ref());
    v["phase"] = json!(phase.id);
    Ok(Json(v).into_response())
}
