//! Teams, their members and their tokens (admin only; a token is shown once, at creation).

use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberBody {
    name: String,
    email: String,
}

impl MemberBody {
    /// Trimmed (name, email), checked.
    fn checked(&self, field: &str) -> Result<(String, String), ApiError> {
        let name = access::check_name(&format!("{field}.name"), &self.name, 128, false)?;
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
        Ok((name, email.to_string()))
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

pub(super) async fn create_team(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiBody(body): ApiBody,
) -> ApiResult {
    require_admin(&state, &headers).await?;
    let new: NewTeamBody = parse_body(&body)?;
    let name = access::check_name("name", &new.name, 64, false)?;
    if name.chars().all(|c| c.is_ascii_digit()) || name.parse::<i64>().is_ok() {
        // `arena admin` and the API's paths take a team's numeric id where a name may stand.
        return Err(bad_request(format!(
            "name: {name:?} reads as a team id; a team name needs a character other than a digit or a sign"
        )));
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
        .create_team_with(&name, &members, &hash_token(&token))
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

pub(super) async fn list_teams(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
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
            "no team with id {} (teams are addressed by their numeric id; GET /api/v1/teams lists them)",
            arena_sdk::protocol::quoted(id)
        ))
    })
}

pub(super) async fn get_team(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    require_admin(&state, &headers).await?;
    let team = team_by_path(&state, &id).await?;
    let members = state.storage.members(team.id).await?;
    let tokens = state.storage.tokens(team.id).await?;
    Ok(Json(json!({"team": team, "members": members, "tokens": tokens})).into_response())
}

pub(super) async fn add_member(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
    ApiBody(body): ApiBody,
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

pub(super) async fn create_token(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
    ApiBody(body): ApiBody,
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
    let label = access::check_name("label", &new.label, 64, true)?;
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
        .create_token(team.id, &hash_token(&token), &label, expires_at)
        .await
        .map_err(storage_error)?;
    tracing::info!(team = team.id, token = %info.id, "team token created");
    Ok((StatusCode::CREATED, Json(json!({"token": token, "token_info": info}))).into_response())
}

pub(super) async fn list_tokens(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    require_admin(&state, &headers).await?;
    let team = team_by_path(&state, &id).await?;
    Ok(Json(json!({"tokens": state.storage.tokens(team.id).await?})).into_response())
}

pub(super) async fn revoke_token(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiPath((id, token_id)): ApiPath<(String, String)>,
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
