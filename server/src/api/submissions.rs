//! Submissions (create, list, read, results, report, trajectories) and benchmark leaderboards.

use super::*;

/// When a download of a trajectory file still being merged is told to try again.
const MERGE_RETRY_AFTER_MS: i64 = 5_000;

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

pub(super) async fn create_submission(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiBody(body): ApiBody,
) -> ApiResult {
    let Caller::Team(team) = caller(&state, &headers).await? else {
        return Err(bad_request("submissions belong to teams: use a team token".into()));
    };
    let new: NewSubmissionBody = parse_body(&body)?;
    let agent_name = access::check_name("agent_name", &new.agent_name, access::MAX_AGENT_NAME, true)?;
    let now = now_ms();
    let request = RunRequest {
        benchmark: &new.benchmark,
        phase: &new.phase,
        practice: false,
        hosted: false,
        accepted_in_window: false,
        sessions: &[],
    };
    let plan = access::resolve_run(&state.storage, request, now).await?;
    let benchmark = load_planned(&state, &plan).await?;
    let submission = create_planned(&state, &team, &plan, &benchmark, agent_name, None).await?;
    Ok((StatusCode::CREATED, Json(submission)).into_response())
}

/// The benchmark a resolved run names, loaded off the async threads.
pub(super) async fn load_planned(
    state: &AppState,
    plan: &access::RunPlan,
) -> Result<Arc<crate::catalog::LoadedBenchmark>, ApiError> {
    let catalog = state.catalog.clone();
    let name = plan.benchmark.clone();
    tokio::task::spawn_blocking(move || catalog.load(&name))
        .await?
        .map_err(|e| benchmark_error(&plan.benchmark, &e))
}

/// A new submission of `team` for a resolved run (its benchmark and phase), counted against the
/// phase's quotas: what an agent then runs (`POST /api/v1/submissions`) or the server itself
/// (a hosted upload).
/// `hosted`: the uploaded policy of a hosted submission (its `submission_id` is set here),
/// recorded with it, and the moment its file had arrived whole. The phase's window is checked
/// again: on this moment's clock for a submission an agent runs (the request may have waited for
/// the benchmark since it was resolved); for an upload, when its file had arrived, the team's
/// part done (the wait for a check place and the check are the server's: a file received
/// before the close was refused after it).
pub(super) async fn create_planned(
    state: &AppState,
    team: &Team,
    plan: &access::RunPlan,
    benchmark: &crate::catalog::LoadedBenchmark,
    agent_name: String,
    hosted: Option<(&mut crate::storage::HostedPolicy, i64)>,
) -> Result<Submission, ApiError> {
    let now = now_ms();
    let judged_at = hosted.as_ref().map_or(now, |(_, received_at)| *received_at);
    if let Some(phase) = &plan.phase {
        access::check_open(phase, judged_at)?;
    }
    let id = crate::state::new_submission_id();
    let hosted = hosted.map(|(policy, _)| {
        policy.submission_id = id.clone();
        &*policy
    });
    Ok(access::create_submission(
        &state.storage,
        team,
        &NewSubmission {
            id,
            team_id: team.id,
            benchmark: benchmark.spec.name.clone(),
            agent_name,
            phase_id: plan.phase.as_ref().map(|p| p.id.clone()),
            benchmark_version: benchmark.spec.version,
            benchmark_definition: Some(benchmark.definition.clone()),
            connect_key: None,
        },
        &runner::new_episodes(benchmark),
        plan.phase.as_ref(),
        hosted,
        now,
    )
    .await?)
}

/// The `scores` of submissions' leaderboard rows ([`crate::leaderboard::list_scores`]) as a
/// caller may see them, with the phases and specs looked up once per list.
struct ScoreLookup<'a> {
    state: &'a AppState,
    admin: bool,
    now: i64,
    phases: std::collections::HashMap<String, Option<crate::storage::Phase>>,
    specs: std::collections::HashMap<String, Option<arena_bench::spec::BenchmarkSpec>>,
    /// Whether each benchmark's motions are hidden from this caller now (a hidden test set).
    motions_hidden: std::collections::HashMap<String, bool>,
}

impl<'a> ScoreLookup<'a> {
    fn new(state: &'a AppState, who: &Caller, now: i64) -> Self {
        ScoreLookup {
            state,
            admin: who.is_admin(),
            now,
            phases: Default::default(),
            specs: Default::default(),
            motions_hidden: Default::default(),
        }
    }

    /// The submission's scores (`None` until it has a report, or while hidden), and whether its
    /// private phase hides its results from this caller now.
    async fn scores(&mut self, s: &Submission) -> Result<(Option<Value>, bool), ApiError> {
        let phase = match &s.phase_id {
            Some(id) => {
                if !self.phases.contains_key(id) {
                    self.phases.insert(id.clone(), self.state.storage.phase(id).await?);
                }
                self.phases[id].as_ref()
            }
            None => None,
        };
        let hidden = !self.admin && phase.is_some_and(|p| access::results_hidden(p, self.now));
        let spec = self
            .specs
            .entry(s.benchmark.clone())
            .or_insert_with(|| self.state.catalog.spec(&s.benchmark).ok());
        let motions_hidden = match (self.admin, spec.as_ref()) {
            (false, Some(spec)) => {
                super::motions_hidden_once(self.state, &mut self.motions_hidden, spec, self.now).await?
            }
            _ => false,
        };
        let scores = match (&s.summary_json, spec.as_ref()) {
            (Some(summary), Some(spec)) if !hidden => {
                serde_json::from_str::<crate::leaderboard::ReportSummary>(summary)
                    .ok()
                    .map(|summary| crate::leaderboard::list_scores(spec, &summary, motions_hidden))
            }
            _ => None,
        };
        Ok((scores, hidden))
    }
}

/// How many of a submission's episodes a lost connection made run again, and the limit: an
/// interrupted episode restarts from its beginning as its next attempt, and one that reaches
/// `max_attempts` fails.
fn attempts_json(state: &AppState, (episodes_rerun, reruns): (i64, i64)) -> Value {
    json!({
        "max_per_episode": state.config.max_attempts,
        "episodes_rerun": episodes_rerun,
        "reruns": reruns,
    })
}

/// `GET /api/v1/submissions`: the caller's submissions (a team's own, or every one for the
/// admin), newest first, each with the `scores` its leaderboard row shows once it has a report
/// (`null` while it runs, or while its private phase hides results from the team:
/// `results_hidden` is then true), and for a team the quota used and left in each phase it
/// submitted to (`quotas`).
pub(super) async fn list_submissions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> ApiResult {
    let who = caller(&state, &headers).await?;
    let team = match &who {
        Caller::Admin => None,
        Caller::Team(t) => Some(t.id),
    };
    let submissions = state.storage.submissions(team).await?;
    let (first, end, next) = page.window(&submissions)?;
    // A team's own re-runs (attempts cost something: the listing says how many were used);
    // the organiser sees them per submission (`GET /api/v1/submissions/{id}`).
    let reruns = match team {
        Some(_) => state.storage.reruns(team, None).await?,
        None => Default::default(),
    };
    let now = now_ms();
    let mut lookup = ScoreLookup::new(&state, &who, now);
    let mut listed = Vec::with_capacity(end - first);
    for s in &submissions[first..end] {
        let (scores, hidden) = lookup.scores(s).await?;
        let mut v = serde_json::to_value(s).map_err(|e| internal_error("listing submissions", e))?;
        v["scores"] = json!(scores);
        v["results_hidden"] = json!(hidden);
        if team.is_some() {
            v["attempts"] = attempts_json(&state, reruns.get(&s.id).copied().unwrap_or((0, 0)));
        }
        // As on the submission's own page: an unfinished one waiting for its agent or a place
        // (a few queries each, for the unfinished ones of this page only).
        let (awaiting_agent, awaiting_hosted_place) = match s.status.is_final() {
            true => (false, false),
            false => {
                let (_, running, _) = state.storage.episode_counts(&s.id).await?;
                let is_hosted = state.storage.hosted_policy(&s.id).await?.is_some();
                waiting_flags(&state, s, running, is_hosted).await?
            }
        };
        v["awaiting_agent"] = json!(awaiting_agent);
        v["awaiting_hosted_place"] = json!(awaiting_hosted_place);
        listed.push(v);
    }
    let mut phases = lookup.phases;
    let quotas: Vec<Value> = match team {
        None => Vec::new(),
        Some(_) => {
            // Every phase the team submitted to, whatever the page holds (the page's were looked
            // up for their scores), in the order of their ids: a page of one submission listed
            // the quota of that one's phase only.
            let mut ids: Vec<&String> = submissions.iter().filter_map(|s| s.phase_id.as_ref()).collect();
            ids.sort_unstable();
            ids.dedup();
            for id in &ids {
                if !phases.contains_key(*id) {
                    phases.insert((*id).clone(), state.storage.phase(id).await?);
                }
            }
            let today = access::day_start(now);
            ids.iter()
                .filter_map(|id| phases[*id].as_ref())
                .map(|p| {
                    let mine = submissions
                        .iter()
                        .filter(|s| s.phase_id.as_deref() == Some(p.id.as_str()));
                    let used_total = mine.clone().count() as u32;
                    let used_today = mine.filter(|s| s.created_at >= today).count() as u32;
                    let left = |max: Option<u32>, used: u32| max.map(|m| m.saturating_sub(used));
                    let (left_day, left_all) = (left(p.max_per_day, used_today), left(p.max_total, used_total));
                    // What may still be submitted today: the tighter of the two limits.
                    let left_today = match (left_day, left_all) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    json!({
                        "phase": p.id,
                        "used_today": used_today,
                        "used_total": used_total,
                        "max_per_day": p.max_per_day,
                        "max_total": p.max_total,
                        "left_today": left_today,
                        "left_total": left_all,
                        "day_resets_at": access::rfc3339(today + 86_400_000),
                    })
                })
                .collect()
        }
    };
    Ok(Json(json!({"submissions": listed, "quotas": quotas, "next": next})).into_response())
}

/// A page of `GET /api/v1/submissions`: at most `limit` (1–1000; all by default) after the
/// submission `after` names (the `next` of the page before), in the listing's order. The
/// listing of an organiser with thousands of submissions took its scores whole at every call.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PageQuery {
    limit: Option<String>,
    after: Option<String>,
}

/// The most a page holds.
const MAX_PAGE: usize = 1000;

impl PageQuery {
    /// The page's bounds in `listed` and the `next` cursor (the page's last id, when more follow).
    fn window(&self, listed: &[Submission]) -> Result<(usize, usize, Option<String>), ApiError> {
        let limit = match self.limit.as_deref() {
            None => listed.len(),
            Some(text) => match text.parse::<usize>() {
                Ok(n) if (1..=MAX_PAGE).contains(&n) => n,
                _ => {
                    return Err(bad_request(format!(
                        "limit must be a whole number from 1 to {MAX_PAGE}, got {}",
                        arena_sdk::protocol::quoted(text)
                    )));
                }
            },
        };
        let first = match self.after.as_deref() {
            None => 0,
            Some(id) => match listed.iter().position(|s| s.id == id) {
                Some(i) => i + 1,
                None => {
                    return Err(bad_request(format!(
                        "after: no submission {} in this listing (give the `next` of the page before)",
                        arena_sdk::protocol::quoted(id)
                    )));
                }
            },
        };
        let end = first.saturating_add(limit).min(listed.len());
        let next = (end < listed.len() && end > first).then(|| listed[end - 1].id.clone());
        Ok((first, end, next))
    }
}

pub(super) async fn get_submission(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    // Status, progress counts and the leaderboard row's numbers, which a private phase hides
    // from the team until it ends (`results_hidden`).
    let (who, s) = visible_submission(&state, &headers, &id).await?;
    let (pending, running, finished) = state.storage.episode_counts(&id).await?;
    let (scores, hidden) = ScoreLookup::new(&state, &who, now_ms()).scores(&s).await?;
    let reruns = state.storage.reruns(None, Some(&id)).await?.remove(&id);
    let mut v = serde_json::to_value(&s)?;
    v["attempts"] = attempts_json(&state, reruns.unwrap_or((0, 0)));
    // Of the finished, those that never ran: FAILED without an attempt (the submission was
    // cancelled or abandoned before their turn).
    let never_ran = state.storage.never_ran(&id).await?;
    v["progress"] = json!({"pending": pending, "running": running, "finished": finished, "never_ran": never_ran});
    // Every agent session, oldest first: `agent_name` above is the last one's.
    v["sessions"] = json!(state.storage.sessions(&id).await?);
    // A hosted submission's policy file (issue 40); null when an agent runs it.
    let hosted = state.storage.hosted_policy(&id).await?;
    let is_hosted = hosted.is_some();
    v["hosted"] = json!(hosted);
    v["scores"] = json!(scores);
    v["results_hidden"] = json!(hidden);
    let (awaiting_agent, awaiting_hosted_place) = waiting_flags(&state, &s, running, is_hosted).await?;
    v["awaiting_hosted_place"] = json!(awaiting_hosted_place);
    v["awaiting_agent"] = json!(awaiting_agent);
    if state.config.idle_submission_expiry_s > 0.0 {
        v["idle_expiry_s"] = json!(state.config.idle_submission_expiry_s);
    }
    Ok(Json(v).into_response())
}

/// Whether an unfinished submission waits for its agent to reconnect, and whether a hosted one
/// waits for a place among the server's hosted runs (`awaiting_agent`, `awaiting_hosted_place`
/// of the submission and of the listing); `running`: its RUNNING episodes.
async fn waiting_flags(
    state: &AppState,
    s: &Submission,
    running: i64,
    is_hosted: bool,
) -> Result<(bool, bool), ApiError> {
    // One with no session here and no episode running anywhere waits (the pages say so, not
    // "updating"). Episodes still RUNNING under a lease that ran out (a replica that died) run
    // nowhere.
    let waiting = !s.status.is_final()
        && !state.attached.contains(&s.id)
        && (running == 0 || state.storage.live_claims(&s.id).await? == 0);
    if is_hosted {
        // A hosted submission has no agent: it waits for a place (and runs even after its
        // phase closed).
        return Ok((false, waiting));
    }
    let mut awaiting = waiting;
    // Not when its phase has closed and a resume would be refused (`access::may_resume_after_close`):
    // the pages told the team to reconnect, which only got `phase_closed`.
    if awaiting
        && let Some(phase_id) = &s.phase_id
        && let Some(phase) = state.storage.phase(phase_id).await?
        && crate::access::PhaseState::of(&phase, now_ms()) == crate::access::PhaseState::Closed
    {
        let sessions: Vec<(i64, Option<i64>)> = state
            .storage
            .sessions(&s.id)
            .await?
            .into_iter()
            .map(|x| (x.started_at, x.ended_at))
            .collect();
        awaiting = crate::access::may_resume_after_close(&phase, &sessions, now_ms());
    }
    Ok((awaiting, false))
}

pub(super) async fn get_results(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    let (who, s) = visible_submission(&state, &headers, &id).await?;
    check_results_visible(&state, &who, &s).await?;
    let rows = state.storage.episodes(&id).await?;
    // The means only: where each episode's scoring stopped is in its report.
    let aggregator = results::aggregate(&rows, None);
    let mut episodes = serde_json::to_value(&rows)?;
    // Where each episode's scoring stopped (its report's `scored_until_s`), by the benchmark's
    // success rule; left out when the benchmark cannot be read now.
    if let Ok(spec) = state.catalog.spec(&s.benchmark) {
        let rule = spec.ranking.success.as_deref();
        for (row, e) in rows.iter().zip(episodes.as_array_mut().into_iter().flatten()) {
            let until = arena_bench::metrics::scored_until(rule, &row.metrics);
            e["scored_until_s"] = json!(until);
        }
    }
    let mut failed = serde_json::to_value(aggregator.failed())?;
    let mut aggregated = serde_json::to_value(aggregator.aggregated())?;
    let mut groups = serde_json::to_value(aggregator.by_category())?;
    let in_seconds = leaderboard::in_seconds;
    if motions_hidden_from(&state, &who, &s).await?.is_some() {
        // Nor their statistics: the longest survival time is the longest clip's length, a
        // category of one clip gives that clip's.
        let tables = aggregated.as_object_mut().into_iter();
        let tables = tables.chain(
            groups
                .as_object_mut()
                .into_iter()
                .flat_map(|g| g.values_mut().filter_map(Value::as_object_mut)),
        );
        for table in tables {
            table.retain(|name, _| !in_seconds(name));
        }
        // A hidden test set (issue 40 §3): scores, but nothing that tells a motion or its
        // length: no name, no window, no step count, no metric in seconds (a survival time is
        // the episode's length where nothing broke), and of a reason only the kind of failure
        // (a step number tells a length; a target's value, computed by a hosted policy from
        // the reference, gave a hidden frame to float precision); in the failed episodes' list
        // as in the episodes.
        let rows = episodes.as_array_mut().into_iter().chain(failed.as_array_mut());
        for e in rows.flatten() {
            // `updated_at` too: the times the episodes of one batch ended order them by length.
            for key in [
                "motion",
                "start_s",
                "duration_s",
                "steps",
                "scored_until_s",
                "updated_at",
            ] {
                if e.get(key).is_some() {
                    e[key] = Value::Null;
                }
            }
            if let Some(reason) = e["reason"].as_str() {
                e["reason"] = access::failure_kind(reason).into();
            }
            if let Some(metrics) = e.get_mut("metrics").and_then(Value::as_object_mut) {
                for (name, value) in metrics.iter_mut() {
                    if in_seconds(name) {
                        *value = Value::Null;
                    }
                }
            }
        }
    }
    Ok(Json(json!({
        "submission": s,
        "aggregated": aggregated,
        "groups": groups,
        "group_counts": aggregator.category_counts(),
        "episodes": episodes,
        "failed_episodes": failed,
    }))
    .into_response())
}

pub(super) async fn get_report(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    let (who, s) = visible_submission(&state, &headers, &id).await?;
    check_results_visible(&state, &who, &s).await?;
    check_motions_visible(&state, &who, &s).await?;
    if let Some(json) = &s.report_json {
        return Ok(([(header::CONTENT_TYPE, "application/json")], json.clone()).into_response());
    }
    // Not finished yet: the report so far.
    let spec = state
        .catalog
        .spec(&s.benchmark)
        .map_err(|e| stored_benchmark_error(&s.benchmark, &e))?;
    let rows = state.storage.episodes(&id).await?;
    Ok(Json(results::report(&spec, &s, &rows)).into_response())
}

pub(super) async fn get_trajectories(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    let (who, s) = visible_submission(&state, &headers, &id).await?;
    check_results_visible(&state, &who, &s).await?;
    check_motions_visible(&state, &who, &s).await?;
    // A completed (or ended) submission's merged file; one this server is merging right now
    // (a submission that has just completed) is waited for.
    let key = crate::objects::trajectory_key(&s.id);
    state
        .objects
        .writes_in_flight()
        .wait(&key, crate::trajectory_store::MERGE_WAIT)
        .await;
    let file_name = format!("{id}.h5");
    let download = super::download::Download {
        key: &key,
        what: "trajectory file",
        content_type: "application/x-hdf5",
        file_name: &file_name,
        // Written once, just after the submission ends (by the session that ended it, its
        // retries, or the next start's sweep when that merge could not finish).
        changes: super::download::Changes::Never,
        content_tag: None,
    };
    match super::download::object(&state, &headers, download).await? {
        Some(response) => Ok(response),
        None => {
            if s.status.is_final() {
                let rows = state.storage.episodes(&s.id).await?;
                let missing = crate::trajectory_store::runs_missing(&state.objects, &s.id, &rows)
                    .await
                    .map_err(|e| super::internal_error("looking for the stored runs", e))?;
                if !missing.is_empty() {
                    let shown: Vec<String> = missing.iter().take(10).map(i64::to_string).collect();
                    let more = match missing.len() {
                        n if n > 10 => format!(" and {} more", n - 10),
                        _ => String::new(),
                    };
                    // No retry makes the file: said plainly (it was a 503 "retry later" for good).
                    return Err(ApiError(AccessError::new(
                        StatusCode::NOT_FOUND,
                        "runs_missing",
                        format!(
                            "submission {id} has no trajectory file, and it cannot be made: the stored runs of \
                             episodes {}{more} are missing from the object store, though its results count them \
                             (the organiser can restore them from a backup of the store); its other episodes are \
                             readable one by one through episodes/{{idx}}/series",
                            shown.join(", ")
                        ),
                    )));
                }
            }
            let parts = crate::objects::episode_parts_prefix(&s.id);
            let merging = s.status.is_final() && !state.objects.list(&parts).await.unwrap_or_default().is_empty();
            if merging {
                // A state that passes (on another replica, a merge takes a second or two): 503
                // with a Retry-After, so that a client retries instead of concluding there is no file.
                let mut e = AccessError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not_merged_yet",
                    format!(
                        "submission {id} has no trajectory file yet: its episodes' runs are not merged into one yet \
                         (in the background; a merge that could not finish is done again at the server's next start): \
                         retry later (episodes stored so far are readable one by one through episodes/{{idx}}/series)"
                    ),
                );
                e.resets_at_ms = Some(now_ms() + MERGE_RETRY_AFTER_MS);
                return Err(ApiError(e));
            }
            let why = if s.status.is_final() {
                "has no trajectories"
            } else {
                "has no trajectory file yet (it is written when the submission completes)"
            };
            Err(not_found(format!("submission {id} {why}")))
        }
    }
}

/// A hosted submission's policy file, as uploaded (the owner and the organiser).
pub(super) async fn get_policy(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    let (_, s) = visible_submission(&state, &headers, &id).await?;
    let Some(policy) = state.storage.hosted_policy(&s.id).await? else {
        return Err(not_found(format!(
            "submission {id} is not hosted: an agent runs it, there is no policy file"
        )));
    };
    let name = if policy.file_name.is_empty() {
        format!("{id}.onnx")
    } else {
        policy.file_name.clone()
    };
    let key = crate::hosted::policy_key(&policy.sha256);
    let download = super::download::Download {
        key: &key,
        what: "policy file",
        content_type: "application/octet-stream",
        file_name: &name,
        // Kept under its hash, which is its tag.
        changes: super::download::Changes::Never,
        content_tag: Some(&policy.sha256),
    };
    super::download::object(&state, &headers, download)
        .await?
        .ok_or_else(|| not_found(format!("the policy file of submission {id} is missing from the store")))
}

/// A benchmark's leaderboard over all its completed submissions, except (for everyone but the
/// admin) those of private phases that have not ended: they appear once their phase ends.
pub(super) async fn get_leaderboard(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(benchmark): ApiPath<String>,
) -> ApiResult {
    let who = optional_caller(&state, &headers).await?;
    let spec = state
        .catalog
        .spec(&benchmark)
        .map_err(|e| benchmark_error(&benchmark, &e))?;
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
    // A running private phase makes the benchmark its test set, as its own flag does: no time
    // in seconds on the board then (`/results` withholds them too).
    let motions_hidden = !who.as_ref().is_some_and(Caller::is_admin) && (spec.motions.hidden || !hidden.is_empty());
    let key = format!(
        "benchmark {} {:?} hiding {hidden:?} motions hidden {motions_hidden}",
        spec.name, spec.ranking
    );
    if let Some(board) = state.leaderboards.get(&key, generation) {
        return Ok(Json(board.as_ref()).into_response());
    }
    let hidden: HashSet<String> = hidden.into_iter().collect();
    let rows = state.leaderboards.rows(&state.storage, &spec.name, None).await?;
    let rows = rows
        .into_iter()
        .filter(|s| !s.phase_id.as_ref().is_some_and(|p| hidden.contains(p)));
    let mut ranked = leaderboard::rank_rows(&spec, rows);
    if motions_hidden {
        ranked = ranked.without_seconds();
    }
    let board = state.leaderboards.put(key, generation, ranked);
    Ok(Json(board.as_ref()).into_response())
}
