//! Challenges and their phases (time windows, leaderboard visibility, quotas, observation groups).

use super::*;

impl Storage {
    /// Creates a challenge; a duplicate id is [`StorageError::Conflict`].
    pub async fn create_challenge(&self, id: &str, title: &str, description: &str) -> Result<Challenge, StorageError> {
        let row = sqlx::query(
            "INSERT INTO challenges (id, title, description, created_at) VALUES ($1, $2, $3, $4) \
             RETURNING id, title, description, created_at",
        )
        .bind(id)
        .bind(title)
        .bind(description)
        .bind(now_ms())
        .fetch_one(&self.pool)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                StorageError::Conflict(format!("challenge {id:?} already exists"))
            } else {
                StorageError::Database {
                    context: format!("creating challenge {id:?}"),
                    cause: e,
                }
            }
        })?;
        challenge_from_row(&row)
    }

    /// One challenge, if it exists.
    pub async fn challenge(&self, id: &str) -> Result<Option<Challenge>, StorageError> {
        let row = sqlx::query("SELECT id, title, description, created_at FROM challenges WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .ctx(|| format!("reading challenge {id:?}"))?;
        row.as_ref().map(challenge_from_row).transpose()
    }

    /// All challenges, oldest first.
    pub async fn challenges(&self) -> Result<Vec<Challenge>, StorageError> {
        let rows = sqlx::query("SELECT id, title, description, created_at FROM challenges ORDER BY created_at, id")
            .fetch_all(&self.pool)
            .await
            .ctx(|| "listing challenges".to_string())?;
        rows.iter().map(challenge_from_row).collect()
    }

    /// Stores a new phase as given; a duplicate id is [`StorageError::Conflict`], an unknown
    /// challenge [`StorageError::NotFound`]. Validation is the caller's (see `access`).
    pub async fn create_phase(&self, phase: &Phase) -> Result<Phase, StorageError> {
        let id = &phase.id;
        let groups = phase
            .observation_groups
            .as_ref()
            .map(|g| serde_json::Value::from(g.clone()).to_string());
        sqlx::query(&format!(
            "INSERT INTO phases ({PHASE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        ))
        .bind(id)
        .bind(&phase.challenge_id)
        .bind(&phase.benchmark)
        .bind(phase.starts_at)
        .bind(phase.ends_at)
        .bind(phase.leaderboard.as_str())
        .bind(phase.max_per_day.map(i64::from))
        .bind(phase.max_total.map(i64::from))
        .bind(groups)
        .bind(phase.created_at)
        .bind(i64::from(phase.hosted_only))
        .execute(&self.pool)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                StorageError::Conflict(format!("phase {id:?} already exists"))
            } else if is_foreign_key_violation(&e) {
                StorageError::NotFound(format!("challenge {:?} (for phase {id:?})", phase.challenge_id))
            } else {
                StorageError::Database {
                    context: format!("creating phase {id:?}"),
                    cause: e,
                }
            }
        })?;
        Ok(phase.clone())
    }

    /// Changes a phase's window, visibility, quotas and observation groups (its id, challenge,
    /// benchmark and creation time stay); a missing phase is [`StorageError::NotFound`].
    pub async fn update_phase(&self, phase: &Phase) -> Result<Phase, StorageError> {
        self.update_phase_with(&phase.id, |stored| {
            stored.starts_at = phase.starts_at;
            stored.ends_at = phase.ends_at;
            stored.leaderboard = phase.leaderboard;
            stored.max_per_day = phase.max_per_day;
            stored.max_total = phase.max_total;
            stored.observation_groups = phase.observation_groups.clone();
            stored.hosted_only = phase.hosted_only;
            Ok::<(), std::convert::Infallible>(())
        })
        .await
        .map(|changed| changed.unwrap_or_else(|never| match never {}))
    }

    /// Reads phase `id`, lets `change` edit it and writes it back in one transaction that holds
    /// the row from before the read (a write first, as a submission's quota count does), so two
    /// concurrent updates each apply to the other's result rather than one being lost. An
    /// error of `change` writes nothing and is handed back; a missing phase is
    /// [`StorageError::NotFound`].
    pub async fn update_phase_with<E>(
        &self,
        id: &str,
        change: impl FnOnce(&mut Phase) -> Result<(), E>,
    ) -> Result<Result<Phase, E>, StorageError> {
        let context = || format!("updating phase {id:?}");
        let mut tx = self.pool.begin().await.ctx(context)?;
        // A column that is no key: the row lock then leaves alone the submissions' foreign-key
        // checks against the phase (PostgreSQL), which are not what this waits for.
        let held = sqlx::query("UPDATE phases SET hosted_only = hosted_only WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .ctx(context)?;
        if held.rows_affected() == 0 {
            return Err(StorageError::NotFound(format!("phase {id:?}")));
        }
        let row = sqlx::query(&format!("SELECT {PHASE_COLUMNS} FROM phases WHERE id = $1"))
            .bind(id)
            .fetch_one(&mut *tx)
            .await
            .ctx(context)?;
        let mut phase = phase_from_row(&row)?;
        if let Err(e) = change(&mut phase) {
            return Ok(Err(e));
        }
        let groups = phase
            .observation_groups
            .as_ref()
            .map(|g| serde_json::Value::from(g.clone()).to_string());
        let done = sqlx::query(
            "UPDATE phases SET starts_at = $2, ends_at = $3, leaderboard = $4, max_per_day = $5, max_total = $6, \
             observation_groups = $7, hosted_only = $8 WHERE id = $1",
        )
        .bind(id)
        .bind(phase.starts_at)
        .bind(phase.ends_at)
        .bind(phase.leaderboard.as_str())
        .bind(phase.max_per_day.map(i64::from))
        .bind(phase.max_total.map(i64::from))
        .bind(groups)
        .bind(i64::from(phase.hosted_only))
        .execute(&mut *tx)
        .await
        .ctx(context)?;
        if done.rows_affected() == 0 {
            return Err(StorageError::NotFound(format!("phase {id:?}")));
        }
        tx.commit().await.ctx(context)?;
        Ok(Ok(phase))
    }

    /// One phase, if it exists.
    pub async fn phase(&self, id: &str) -> Result<Option<Phase>, StorageError> {
        let row = sqlx::query(&format!("SELECT {PHASE_COLUMNS} FROM phases WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .ctx(|| format!("reading phase {id:?}"))?;
        row.as_ref().map(phase_from_row).transpose()
    }

    /// The phases of a challenge, by start time.
    pub async fn phases_of_challenge(&self, challenge_id: &str) -> Result<Vec<Phase>, StorageError> {
        self.phases_where("challenge_id", challenge_id).await
    }

    /// The phases that run a benchmark, by start time.
    pub async fn phases_of_benchmark(&self, benchmark: &str) -> Result<Vec<Phase>, StorageError> {
        self.phases_where("benchmark", benchmark).await
    }

    /// The phases that have not ended at `now` (ms), by start time.
    pub async fn phases_not_ended(&self, now: i64) -> Result<Vec<Phase>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {PHASE_COLUMNS} FROM phases WHERE ends_at > $1 ORDER BY starts_at, id"
        ))
        .bind(now)
        .fetch_all(&self.pool)
        .await
        .ctx(|| "listing the phases that have not ended".to_string())?;
        rows.iter().map(phase_from_row).collect()
    }

    /// The phases whose `column` (a fixed column name, never user input) equals `value`.
    pub(super) async fn phases_where(&self, column: &'static str, value: &str) -> Result<Vec<Phase>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {PHASE_COLUMNS} FROM phases WHERE {column} = $1 ORDER BY starts_at, id"
        ))
        .bind(value)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("listing the phases with {column} {value:?}"))?;
        rows.iter().map(phase_from_row).collect()
    }
}
