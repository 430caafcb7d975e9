//! The agent sessions of a submission: which agent connected, when, and how each session ended
//! (issue 39). A resume by another agent no longer renames the submission silently: every
//! session's agent stays on record, and the pages and `arena admin submissions show` list them.

use super::*;

/// One agent session of a submission.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionRecord {
    /// The protocol's session id (`Connected.session_id`).
    pub id: String,
    /// `connect.agent_name` of the session.
    pub agent_name: String,
    /// Unix milliseconds.
    pub started_at: i64,
    /// Unix milliseconds; None while it runs, or when its server stopped without ending it.
    pub ended_at: Option<i64>,
    /// How it ended: `completed` (the submission finished), `cancelled`, `stopped` (the agent
    /// left, or the server is shutting down), `error`, or [`SERVER_LOST`].
    pub outcome: Option<String>,
}

/// The outcome of a session whose server was killed or crashed without ending it, written when
/// that replica starts again ([`Storage::recover_after_restart`]).
pub const SERVER_LOST: &str = "server_lost";

impl Storage {
    /// Records the start of a session of `submission_id` by `agent_name`.
    pub async fn start_session(
        &self,
        session_id: &str,
        submission_id: &str,
        agent_name: &str,
        now: i64,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO submission_sessions (id, submission_id, agent_name, started_at, server) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(session_id)
        .bind(submission_id)
        .bind(agent_name)
        .bind(now)
        .bind(&self.lease.owner)
        .execute(&self.pool)
        .await
        .ctx(|| format!("recording session {session_id} of submission {submission_id}"))?;
        Ok(())
    }

    /// Records how a session ended.
    pub async fn end_session(&self, session_id: &str, outcome: &str, now: i64) -> Result<(), StorageError> {
        sqlx::query("UPDATE submission_sessions SET ended_at = $2, outcome = $3 WHERE id = $1 AND ended_at IS NULL")
            .bind(session_id)
            .bind(now)
            .bind(outcome)
            .execute(&self.pool)
            .await
            .ctx(|| format!("recording the end of session {session_id}"))?;
        Ok(())
    }

    /// Marks the open session `session_id` of `submission_id` as replaced by a client's new
    /// connection (`Connect.previous_session_id`), for the server that runs it, maybe another
    /// replica ([`Storage::session_replaced`]). Whether an open session was marked.
    pub async fn mark_session_replaced(
        &self,
        submission_id: &str,
        session_id: &str,
        now: i64,
    ) -> Result<bool, StorageError> {
        let done = sqlx::query(
            "UPDATE submission_sessions SET replaced_at = $3 \
             WHERE id = $1 AND submission_id = $2 AND ended_at IS NULL AND replaced_at IS NULL",
        )
        .bind(session_id)
        .bind(submission_id)
        .bind(now)
        .execute(&self.pool)
        .await
        .ctx(|| format!("marking session {session_id} replaced"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Whether a client's new connection named session `session_id` as the one it lost.
    pub async fn session_replaced(&self, session_id: &str) -> Result<bool, StorageError> {
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM submission_sessions WHERE id = $1 AND replaced_at IS NOT NULL")
                .bind(session_id)
                .fetch_one(&self.pool)
                .await
                .ctx(|| format!("reading whether session {session_id} was replaced"))?;
        Ok(n > 0)
    }

    /// A submission's sessions, oldest first.
    pub async fn sessions(&self, submission_id: &str) -> Result<Vec<SessionRecord>, StorageError> {
        let rows = sqlx::query(
            "SELECT id, agent_name, started_at, ended_at, outcome FROM submission_sessions \
             WHERE submission_id = $1 ORDER BY started_at, id",
        )
        .bind(submission_id)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("reading the sessions of submission {submission_id}"))?;
        let what = "submission sessions";
        rows.iter()
            .map(|row| {
                Ok(SessionRecord {
                    id: get(row, "id", what)?,
                    agent_name: get(row, "agent_name", what)?,
                    started_at: get(row, "started_at", what)?,
                    ended_at: get(row, "ended_at", what)?,
                    outcome: get(row, "outcome", what)?,
                })
            })
            .collect()
    }
}
