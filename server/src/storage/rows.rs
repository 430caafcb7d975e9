//! Decoding database rows into records: the column lists each query selects, typed column reads
//! that name what was being read, and metrics as JSON that keeps non-finite values.

use super::*;

/// Metrics as a JSON object; non-finite values become the strings "NaN", "inf", "-inf".
pub(super) fn metrics_to_json(metrics: &BTreeMap<String, f64>) -> String {
    let map: serde_json::Map<String, serde_json::Value> = metrics
        .iter()
        .map(|(k, &v)| {
            let value = if v.is_finite() {
                serde_json::Value::from(v)
            } else if v.is_nan() {
                serde_json::Value::from("NaN")
            } else if v > 0.0 {
                serde_json::Value::from("inf")
            } else {
                serde_json::Value::from("-inf")
            };
            (k.clone(), value)
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// Inverse of [`metrics_to_json`]; `null` also reads as NaN.
pub(super) fn metrics_from_json(text: &str) -> Result<BTreeMap<String, f64>, String> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| format!("metrics JSON {text:?}: {e}"))?;
    map.into_iter()
        .map(|(k, v)| {
            let x = match &v {
                serde_json::Value::Number(n) => n.as_f64(),
                serde_json::Value::Null => Some(f64::NAN),
                serde_json::Value::String(s) => match s.as_str() {
                    "NaN" => Some(f64::NAN),
                    "inf" => Some(f64::INFINITY),
                    "-inf" => Some(f64::NEG_INFINITY),
                    _ => None,
                },
                _ => None,
            };
            x.map(|x| (k.clone(), x))
                .ok_or_else(|| format!("metric {k:?} has the non-numeric value {v}"))
        })
        .collect()
}

pub(super) const SUBMISSION_COLUMNS: &str = "s.id, s.team_id, t.name AS team_name, s.benchmark, s.agent_name, s.status, \
     s.episodes_total, s.created_at, s.started_at, s.finished_at, s.report_json, s.error, s.phase_id, s.baseline, \
     s.summary_json, s.benchmark_version";

/// [`SUBMISSION_COLUMNS`] without the report (lists and leaderboards: a report is tens of KB).
pub(super) const SUBMISSION_LIST_COLUMNS: &str = "s.id, s.team_id, t.name AS team_name, s.benchmark, s.agent_name, s.status, \
     s.episodes_total, s.created_at, s.started_at, s.finished_at, CAST(NULL AS TEXT) AS report_json, s.error, \
     s.phase_id, s.baseline, s.summary_json, s.benchmark_version";

pub(super) const PHASE_COLUMNS: &str = "id, challenge_id, benchmark, starts_at, ends_at, leaderboard, max_per_day, max_total, \
     observation_groups, created_at, hosted_only";

pub(super) const TOKEN_COLUMNS: &str = "id, team_id, label, created_at, expires_at, revoked_at";

pub(super) const EPISODE_COLUMNS: &str = "idx, motion, category, start_s, duration_s, seed, dr_level, status, attempts, server_faults, uncharged_runs, steps, \
     metrics_json, reason, updated_at, lease_owner, agent_name, engine";

pub(super) fn get<'r, T>(row: &'r AnyRow, column: &str, what: &str) -> Result<T, StorageError>
where
    T: sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any>,
{
    row.try_get::<T, _>(column)
        .ctx(|| format!("reading column {column} of {what}"))
}

pub(super) fn team_from_row(row: &AnyRow) -> Result<Team, StorageError> {
    Ok(Team {
        id: get(row, "id", "a team")?,
        name: get(row, "name", "a team")?,
        created_at: get(row, "created_at", "a team")?,
    })
}

pub(super) fn submission_from_row(row: &AnyRow) -> Result<Submission, StorageError> {
    let id: String = get(row, "id", "a submission")?;
    let what = format!("submission {id}");
    let status: String = get(row, "status", &what)?;
    Ok(Submission {
        team_id: get(row, "team_id", &what)?,
        team_name: get(row, "team_name", &what)?,
        benchmark: get(row, "benchmark", &what)?,
        agent_name: get(row, "agent_name", &what)?,
        status: status
            .parse()
            .map_err(|e| StorageError::Corrupt(format!("{what}: {e}")))?,
        episodes_total: get(row, "episodes_total", &what)?,
        created_at: get(row, "created_at", &what)?,
        started_at: get(row, "started_at", &what)?,
        finished_at: get(row, "finished_at", &what)?,
        report_json: get(row, "report_json", &what)?,
        error: get(row, "error", &what)?,
        phase_id: get(row, "phase_id", &what)?,
        baseline: get::<i64>(row, "baseline", &what)? != 0,
        summary_json: get(row, "summary_json", &what)?,
        benchmark_version: get(row, "benchmark_version", &what)?,
        id,
    })
}

pub(super) fn challenge_from_row(row: &AnyRow) -> Result<Challenge, StorageError> {
    Ok(Challenge {
        id: get(row, "id", "a challenge")?,
        title: get(row, "title", "a challenge")?,
        description: get(row, "description", "a challenge")?,
        created_at: get(row, "created_at", "a challenge")?,
    })
}

pub(super) fn phase_from_row(row: &AnyRow) -> Result<Phase, StorageError> {
    let id: String = get(row, "id", "a phase")?;
    let what = format!("phase {id}");
    let corrupt = |msg: String| StorageError::Corrupt(format!("{what}: {msg}"));
    let leaderboard: String = get(row, "leaderboard", &what)?;
    let limit = |column: &str| -> Result<Option<u32>, StorageError> {
        get::<Option<i64>>(row, column, &what)?
            .map(|n| u32::try_from(n).map_err(|_| corrupt(format!("{column} = {n} is out of range"))))
            .transpose()
    };
    let groups: Option<String> = get(row, "observation_groups", &what)?;
    Ok(Phase {
        challenge_id: get(row, "challenge_id", &what)?,
        benchmark: get(row, "benchmark", &what)?,
        starts_at: get(row, "starts_at", &what)?,
        ends_at: get(row, "ends_at", &what)?,
        leaderboard: leaderboard.parse().map_err(|e| corrupt(format!("leaderboard: {e}")))?,
        max_per_day: limit("max_per_day")?,
        max_total: limit("max_total")?,
        observation_groups: groups
            .map(|g| serde_json::from_str(&g).map_err(|e| corrupt(format!("observation_groups {g:?}: {e}"))))
            .transpose()?,
        created_at: get(row, "created_at", &what)?,
        hosted_only: get::<i64>(row, "hosted_only", &what)? != 0,
        id,
    })
}

pub(super) fn token_from_row(row: &AnyRow) -> Result<TeamToken, StorageError> {
    Ok(TeamToken {
        id: get(row, "id", "a team token")?,
        team_id: get(row, "team_id", "a team token")?,
        label: get(row, "label", "a team token")?,
        created_at: get(row, "created_at", "a team token")?,
        expires_at: get(row, "expires_at", "a team token")?,
        revoked_at: get(row, "revoked_at", "a team token")?,
    })
}

pub(super) fn episode_from_row(row: &AnyRow, submission: &str) -> Result<EpisodeRow, StorageError> {
    let idx: i64 = get(row, "idx", "an episode")?;
    let what = format!("episode {idx} of submission {submission}");
    let corrupt = |msg: String| StorageError::Corrupt(format!("{what}: {msg}"));
    let status: String = get(row, "status", &what)?;
    let seed: String = get(row, "seed", &what)?;
    let metrics_json: Option<String> = get(row, "metrics_json", &what)?;
    Ok(EpisodeRow {
        idx,
        motion: get(row, "motion", &what)?,
        category: get(row, "category", &what)?,
        start_s: get(row, "start_s", &what)?,
        duration_s: get(row, "duration_s", &what)?,
        seed: seed.parse().map_err(|e| corrupt(format!("seed {seed:?}: {e}")))?,
        dr_level: get(row, "dr_level", &what)?,
        status: status.parse().map_err(|e: StorageError| corrupt(e.to_string()))?,
        attempts: get(row, "attempts", &what)?,
        server_faults: get(row, "server_faults", &what)?,
        uncharged_runs: get(row, "uncharged_runs", &what)?,
        steps: get(row, "steps", &what)?,
        metrics: match metrics_json {
            Some(text) => metrics_from_json(&text).map_err(corrupt)?,
            None => BTreeMap::new(),
        },
        reason: get(row, "reason", &what)?,
        updated_at: get(row, "updated_at", &what)?,
        agent_name: get(row, "agent_name", &what)?,
        engine: if status_is_final(&status) {
            get(row, "engine", &what)?
        } else {
            None
        },
        committed_by: if status_is_final(&status) {
            get(row, "lease_owner", &what)?
        } else {
            None
        },
    })
}

pub(super) fn status_is_final(status: &str) -> bool {
    status.parse::<EpisodeState>().is_ok_and(|s| s.is_final())
}
