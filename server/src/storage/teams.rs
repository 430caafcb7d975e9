//! Teams, their members and their bearer tokens (stored as hashes only).

use super::*;

/// A new token id: names a token without revealing anything about it.
pub(super) fn new_token_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    format!("tok-{}", &u[..16])
}

/// Maps a unique violation on `team_tokens.token_hash` or `teams.token_hash` to a conflict.
pub(super) fn is_token_conflict(e: &sqlx::Error) -> bool {
    let Some(d) = e.as_database_error() else {
        return false;
    };
    d.is_unique_violation()
        && (d.message().contains("token_hash") || d.constraint().is_some_and(|c| c.contains("token_hash")))
}

/// A unique violation on `teams.name` (SQLite names the column, PostgreSQL the constraint).
fn on_team_names(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|d| d.message().contains("teams.name") || d.constraint().is_some_and(|c| c == "teams_name_key"))
}

impl Storage {
    /// Creates a team and its first token (label "initial", no expiry); a duplicate name (or
    /// token) is [`StorageError::Conflict`].
    pub async fn create_team(&self, name: &str, token_hash: &str) -> Result<Team, StorageError> {
        Ok(self.create_team_with(name, &[], token_hash).await?.0)
    }

    /// Creates a team with its members (name, email) and its first token (label "initial", no
    /// expiry), in one transaction; a duplicate name (or token) is [`StorageError::Conflict`].
    pub async fn create_team_with(
        &self,
        name: &str,
        members: &[(String, String)],
        token_hash: &str,
    ) -> Result<(Team, TeamToken), StorageError> {
        let context = || format!("creating team {name:?}");
        let now = now_ms();
        let mut tx = self.pool.begin().await.ctx(context)?;
        // teams.token_hash (schema 0001) is NOT NULL UNIQUE: it keeps the first token's hash,
        // but authentication reads team_tokens only.
        let row = sqlx::query(
            "INSERT INTO teams (name, token_hash, created_at) VALUES ($1, $2, $3) RETURNING id, name, created_at",
        )
        .bind(name)
        .bind(token_hash)
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| {
            if is_token_conflict(&e) {
                StorageError::Conflict("a team with this token already exists".to_string())
            } else if is_unique_violation(&e) && on_team_names(&e) {
                StorageError::Conflict(format!("team {name:?} already exists"))
            } else if is_unique_violation(&e) {
                // The id the database gave is taken: teams copied in with their ids and the
                // sequence left behind (a move from SQLite by hand; docs/server.md says how).
                StorageError::Database {
                    context: format!(
                        "{}: the next team id is already taken (were teams copied in without advancing \
                         teams_id_seq? docs/server.md, moving to PostgreSQL)",
                        context()
                    ),
                    cause: e,
                }
            } else {
                StorageError::Database {
                    context: context(),
                    cause: e,
                }
            }
        })?;
        let team = team_from_row(&row)?;
        for (member, email) in members {
            sqlx::query("INSERT INTO team_members (team_id, name, email, created_at) VALUES ($1, $2, $3, $4)")
                .bind(team.id)
                .bind(member)
                .bind(email)
                .bind(now)
                .execute(&mut *tx)
                .await
                .ctx(|| format!("adding member {member:?} to team {name:?}"))?;
        }
        let token = Self::insert_token(&mut tx, team.id, token_hash, "initial", None, now).await?;
        tx.commit().await.ctx(context)?;
        Ok((team, token))
    }

    pub(super) async fn insert_token(
        conn: &mut sqlx::AnyConnection,
        team_id: i64,
        token_hash: &str,
        label: &str,
        expires_at: Option<i64>,
        now: i64,
    ) -> Result<TeamToken, StorageError> {
        let row = sqlx::query(&format!(
            "INSERT INTO team_tokens (id, team_id, token_hash, label, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING {TOKEN_COLUMNS}"
        ))
        .bind(new_token_id())
        .bind(team_id)
        .bind(token_hash)
        .bind(label)
        .bind(now)
        .bind(expires_at)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| {
            if is_token_conflict(&e) {
                StorageError::Conflict("a token with this hash already exists".to_string())
            } else if is_foreign_key_violation(&e) {
                StorageError::NotFound(format!("team {team_id}"))
            } else {
                StorageError::Database {
                    context: format!("creating a token for team {team_id}"),
                    cause: e,
                }
            }
        })?;
        token_from_row(&row)
    }

    /// The token whose hash is `token_hash` and its team, whatever the token's state (revoked,
    /// expired): the caller decides, so that it can say why a token is refused.
    pub async fn token_by_hash(&self, token_hash: &str) -> Result<Option<(Team, TeamToken)>, StorageError> {
        let row = sqlx::query(
            "SELECT k.id, k.team_id, k.label, k.created_at, k.expires_at, k.revoked_at, \
             t.name AS team_name, t.created_at AS team_created_at \
             FROM team_tokens k JOIN teams t ON t.id = k.team_id WHERE k.token_hash = $1",
        )
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await
        .ctx(|| "looking up a team token".to_string())?;
        let Some(row) = row else { return Ok(None) };
        let token = token_from_row(&row)?;
        let team = Team {
            id: token.team_id,
            name: get(&row, "team_name", "a team")?,
            created_at: get(&row, "team_created_at", "a team")?,
        };
        Ok(Some((team, token)))
    }

    /// Adds a token to a team; an unknown team is [`StorageError::NotFound`].
    pub async fn create_token(
        &self,
        team_id: i64,
        token_hash: &str,
        label: &str,
        expires_at: Option<i64>,
    ) -> Result<TeamToken, StorageError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .ctx(|| format!("creating a token for team {team_id}"))?;
        Self::insert_token(&mut conn, team_id, token_hash, label, expires_at, now_ms()).await
    }

    /// A team's tokens (metadata only), oldest first.
    pub async fn tokens(&self, team_id: i64) -> Result<Vec<TeamToken>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM team_tokens WHERE team_id = $1 ORDER BY created_at, id"
        ))
        .bind(team_id)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("listing the tokens of team {team_id}"))?;
        rows.iter().map(token_from_row).collect()
    }

    /// Revokes a team's token at `now` (a token revoked earlier keeps its first time); a token
    /// that is not this team's is [`StorageError::NotFound`].
    pub async fn revoke_token(&self, team_id: i64, token_id: &str, now: i64) -> Result<TeamToken, StorageError> {
        let row = sqlx::query(&format!(
            "UPDATE team_tokens SET revoked_at = COALESCE(revoked_at, $3) WHERE id = $1 AND team_id = $2 \
             RETURNING {TOKEN_COLUMNS}"
        ))
        .bind(token_id)
        .bind(team_id)
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .ctx(|| format!("revoking token {token_id} of team {team_id}"))?;
        match row {
            Some(row) => token_from_row(&row),
            None => Err(StorageError::NotFound(format!("token {token_id:?} of team {team_id}"))),
        }
    }

    /// One team, if it exists.
    pub async fn team(&self, id: i64) -> Result<Option<Team>, StorageError> {
        let row = sqlx::query("SELECT id, name, created_at FROM teams WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .ctx(|| format!("reading team {id}"))?;
        row.as_ref().map(team_from_row).transpose()
    }

    /// All teams, by id.
    pub async fn teams(&self) -> Result<Vec<Team>, StorageError> {
        let rows = sqlx::query("SELECT id, name, created_at FROM teams ORDER BY id")
            .fetch_all(&self.pool)
            .await
            .ctx(|| "listing teams".to_string())?;
        rows.iter().map(team_from_row).collect()
    }

    /// Adds a member to a team; an unknown team is [`StorageError::NotFound`].
    pub async fn add_member(&self, team_id: i64, name: &str, email: &str) -> Result<Member, StorageError> {
        let now = now_ms();
        sqlx::query("INSERT INTO team_members (team_id, name, email, created_at) VALUES ($1, $2, $3, $4)")
            .bind(team_id)
            .bind(name)
            .bind(email)
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(|e| {
                if is_foreign_key_violation(&e) {
                    StorageError::NotFound(format!("team {team_id}"))
                } else {
                    StorageError::Database {
                        context: format!("adding member {name:?} to team {team_id}"),
                        cause: e,
                    }
                }
            })?;
        Ok(Member {
            name: name.to_string(),
            email: email.to_string(),
            created_at: now,
        })
    }

    /// A team's members, in the order they were added.
    pub async fn members(&self, team_id: i64) -> Result<Vec<Member>, StorageError> {
        let rows = sqlx::query(
            "SELECT name, email, created_at FROM team_members WHERE team_id = $1 ORDER BY created_at, name",
        )
        .bind(team_id)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("listing the members of team {team_id}"))?;
        let what = format!("a member of team {team_id}");
        rows.iter()
            .map(|row| {
                Ok(Member {
                    name: get(row, "name", &what)?,
                    email: get(row, "email", &what)?,
                    created_at: get(row, "created_at", &what)?,
                })
            })
            .collect()
    }
}
