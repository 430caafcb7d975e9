//! Submissions: creation with their episodes under a phase's quota, status changes, leaderboard
//! reads, baseline flags, cancellation, metrics, summaries and reports.

use super::*;

impl Storage {
    /// Inserts the submission (status PENDING) and all its episodes (PENDING, attempts 0) in ONE
    /// transaction; a duplicate id is [`StorageError::Conflict`], an unknown team
    /// [`StorageError::NotFound`], duplicate episode indices [`StorageError::Invalid`].
    pub async fn create_submission(
        &self,
        sub: &NewSubmission,
        episodes: &[NewEpisode],
    ) -> Result<Submission, StorageError> {
        self.create_submission_within(sub, episodes, None).await
    }

    /// [`Storage::create_submission`], refused with [`StorageError::QuotaExceeded`] (nothing
    /// stored) when the team already has `quota.max_total` submissions in the phase, or
    /// `quota.max_per_day` created since `quota.day_start`. The total limit is checked first
    /// (it never resets). The count and the insert share one transaction that first locks the
    /// team's row (PostgreSQL: a row lock; SQLite: the database write lock), so concurrent
    /// requests of one team are counted one after the other and cannot exceed the quota.
    pub async fn create_submission_within(
        &self,
        sub: &NewSubmission,
        episodes: &[NewEpisode],
        quota: Option<&Quota<'_>>,
    ) -> Result<Submission, StorageError> {
        self.create_submission_with_policy(sub, episodes, quota, None).await
    }

    /// [`Storage::create_submission_within`] for a hosted submission: its uploaded policy
    /// (`policy.submission_id` = `sub.id`) is recorded in the same transaction, its run claimed
    /// by this server, so that no hosted submission exists without the policy it runs.
    pub async fn create_submission_with_policy(
        &self,
        sub: &NewSubmission,
        episodes: &[NewEpisode],
        quota: Option<&Quota<'_>>,
        policy: Option<&HostedPolicy>,
    ) -> Result<Submission, StorageError> {
        let id = &sub.id;
        let mut seen = HashSet::with_capacity(episodes.len());
        if let Some(e) = episodes.iter().find(|e| !seen.insert(e.idx)) {
            return Err(StorageError::Invalid(format!(
                "submission {id}: episode index {} appears twice",
                e.idx
            )));
        }
        let context = || format!("creating submission {id}");
        let now = now_ms();
        let mut tx = self.pool.begin().await.ctx(context)?;
        // A write first, quota or not: it serialises this team's submissions until the commit
        // (the quota's count and the connect key's look-up), and on SQLite it takes the write
        // lock before any read, waiting for it (`busy_timeout`). A transaction that reads first
        // cannot upgrade to writing once another connection has written (SQLITE_BUSY at once):
        // 30 agents connecting together outside a quota got 17 `internal` refusals.
        sqlx::query("UPDATE teams SET name = name WHERE id = $1")
            .bind(sub.team_id)
            .execute(&mut *tx)
            .await
            .ctx(context)?;
        // Before the quota: a connect whose key another one (at the same moment) made a
        // submission with attaches to that one; counted, the quota would refuse it for good.
        if let Some(key) = &sub.connect_key {
            let taken: Option<String> =
                sqlx::query_scalar("SELECT submission_id FROM connect_keys WHERE team_id = $1 AND connect_key = $2")
                    .bind(sub.team_id)
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await
                    .ctx(context)?;
            if taken.is_some() {
                return Err(StorageError::ConnectKeyTaken(key.clone()));
            }
        }
        if let Some(quota) = quota {
            quota_left(&mut tx, sub.team_id, quota).await?;
        }
        if let Some(definition) = &sub.benchmark_definition {
            record_definition(&mut tx, sub, definition, now).await?;
        }
        sqlx::query(
            "INSERT INTO submissions (id, team_id, benchmark, agent_name, status, episodes_total, created_at, phase_id, \
             benchmark_version) VALUES ($1, $2, $3, $4, 'PENDING', $5, $6, $7, $8)",
        )
        .bind(id)
        .bind(sub.team_id)
        .bind(&sub.benchmark)
        .bind(&sub.agent_name)
        .bind(episodes.len() as i64)
        .bind(now)
        .bind(sub.phase_id.as_deref())
        .bind(i64::from(sub.benchmark_version))
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                StorageError::Conflict(format!("submission {id} already exists"))
            } else if is_foreign_key_violation(&e) {
                let phase = sub.phase_id.as_deref().map(|p| format!(" or phase {p:?}")).unwrap_or_default();
                StorageError::NotFound(format!("team {}{phase} (for submission {id})", sub.team_id))
            } else {
                StorageError::Database {
                    context: context(),
                    cause: e,
                }
            }
        })?;
        if let Some(key) = &sub.connect_key {
            sqlx::query(
                "INSERT INTO connect_keys (team_id, connect_key, submission_id, created_at) VALUES ($1, $2, $3, $4)",
            )
            .bind(sub.team_id)
            .bind(key)
            .bind(id)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(|e| match is_unique_violation(&e) {
                true => StorageError::ConnectKeyTaken(key.clone()),
                false => StorageError::Database {
                    context: context(),
                    cause: e,
                },
            })?;
        }
        for chunk in episodes.chunks(INSERT_CHUNK) {
            let mut sql = String::from(
                "INSERT INTO episodes (submission_id, idx, motion, category, start_s, duration_s, seed, dr_level, \
                 status, attempts, steps, updated_at) VALUES ",
            );
            for i in 0..chunk.len() {
                let p = i * 9;
                if i > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(&format!(
                    "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, 'PENDING', 0, 0, ${})",
                    p + 1,
                    p + 2,
                    p + 3,
                    p + 4,
                    p + 5,
                    p + 6,
                    p + 7,
                    p + 8,
                    p + 9
                ));
            }
            let mut query = sqlx::query(&sql);
            for e in chunk {
                query = query
                    .bind(id)
                    .bind(e.idx)
                    .bind(&e.motion)
                    .bind(&e.category)
                    .bind(e.start_s)
                    .bind(e.duration_s)
                    .bind(e.seed.to_string())
                    .bind(e.dr_level)
                    .bind(now);
            }
            query
                .execute(&mut *tx)
                .await
                .ctx(|| format!("creating the episodes of submission {id}"))?;
        }
        if let Some(policy) = policy {
            self.insert_hosted_policy_on(&mut tx, policy).await?;
        }
        let row = sqlx::query(&format!(
            "SELECT {SUBMISSION_COLUMNS} FROM submissions s JOIN teams t ON t.id = s.team_id WHERE s.id = $1"
        ))
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .ctx(context)?;
        let submission = submission_from_row(&row)?;
        tx.commit().await.ctx(context)?;
        Ok(submission)
    }

    /// Whether `team` may create one more submission under `quota`:
    /// [`StorageError::QuotaExceeded`] when not. A check before work a refused submission would
    /// waste (storing an uploaded policy); the creation counts again, in its transaction.
    pub async fn check_quota(&self, team_id: i64, quota: &Quota<'_>) -> Result<(), StorageError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .ctx(|| format!("counting the submissions of team {team_id}"))?;
        quota_left(&mut conn, team_id, quota).await
    }

    /// One submission, if it exists.
    pub async fn submission(&self, id: &str) -> Result<Option<Submission>, StorageError> {
        let row = sqlx::query(&format!(
            "SELECT {SUBMISSION_COLUMNS} FROM submissions s JOIN teams t ON t.id = s.team_id WHERE s.id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .ctx(|| format!("reading submission {id}"))?;
        row.as_ref().map(submission_from_row).transpose()
    }

    /// The submission the team created with a connect that carried `key` (`Connect.connect_key`).
    pub async fn submission_by_connect_key(&self, team_id: i64, key: &str) -> Result<Option<Submission>, StorageError> {
        let id: Option<String> =
            sqlx::query_scalar("SELECT submission_id FROM connect_keys WHERE team_id = $1 AND connect_key = $2")
                .bind(team_id)
                .bind(key)
                .fetch_optional(&self.pool)
                .await
                .ctx(|| format!("reading connect key {key:?}"))?;
        match id {
            Some(id) => self.submission(&id).await,
            None => Ok(None),
        }
    }

    /// Submissions, newest first; `team` keeps only that team's.
    pub async fn submissions(&self, team: Option<i64>) -> Result<Vec<Submission>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {SUBMISSION_LIST_COLUMNS} FROM submissions s JOIN teams t ON t.id = s.team_id \
             WHERE ($1 IS NULL OR s.team_id = $1) ORDER BY s.created_at DESC, s.id DESC"
        ))
        .bind(team)
        .fetch_all(&self.pool)
        .await
        .ctx(|| match team {
            Some(team) => format!("listing the submissions of team {team}"),
            None => "listing submissions".to_string(),
        })?;
        rows.iter().map(submission_from_row).collect()
    }

    /// COMPLETED submissions of a benchmark (for leaderboards), oldest first.
    pub async fn completed_submissions(&self, benchmark: &str) -> Result<Vec<Submission>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {SUBMISSION_LIST_COLUMNS} FROM submissions s JOIN teams t ON t.id = s.team_id \
             WHERE s.benchmark = $1 AND s.status = 'COMPLETED' ORDER BY s.finished_at, s.id"
        ))
        .bind(benchmark)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("listing the completed submissions of benchmark {benchmark:?}"))?;
        rows.iter().map(submission_from_row).collect()
    }

    /// What a leaderboard reads of each submission of a benchmark (`phase`: of that phase), as
    /// one JSON array built by the database: `[{"id", "team_name", "agent_name", "finished_at",
    /// "baseline" (0/1), "phase_id", "status", "summary" (the stored summary's text, null unless
    /// COMPLETED: parsed row by row, so one unreadable summary leaves one row off)}]`, in
    /// no particular order (ranking leaves rows without a summary off). One row instead of
    /// thousands: decoding rows one by one through the driver costs far more than the JSON.
    pub async fn leaderboard_json(&self, benchmark: &str, phase: Option<&str>) -> Result<String, StorageError> {
        self.leaderboard_json_since(benchmark, phase, -1).await
    }

    /// The leaderboard rows of a benchmark's submissions (`phase`: of that phase) stamped after
    /// `since` by [`Storage::stamp_board_change_on`], whatever their status now (`status`: a row
    /// that is no longer COMPLETED leaves the board), in the form of [`Storage::leaderboard_json`].
    /// With `since` = -1: every submission's row. Read the counter ([`Storage::board_counter`])
    /// first: stamps follow commit order, so rows stamped up to it are all there.
    pub async fn leaderboard_json_since(
        &self,
        benchmark: &str,
        phase: Option<&str>,
        since: i64,
    ) -> Result<String, StorageError> {
        let sql = match self.engine {
            Engine::Sqlite => {
                "SELECT COALESCE(json_group_array(json_object('id', s.id, 'team_name', t.name, \
                 'agent_name', s.agent_name, 'finished_at', s.finished_at, 'baseline', s.baseline, \
                 'phase_id', s.phase_id, 'status', s.status, 'benchmark_version', s.benchmark_version, \
                 'summary', CASE WHEN s.status = 'COMPLETED' THEN s.summary_json END)), '[]') AS board \
                 FROM submissions s JOIN teams t ON t.id = s.team_id \
                 WHERE s.benchmark = $1 AND s.board_seq > $3 AND ($2 IS NULL OR s.phase_id = $2)"
            }
            Engine::Postgres => {
                "SELECT COALESCE(json_agg(json_build_object('id', s.id, 'team_name', t.name, \
                 'agent_name', s.agent_name, 'finished_at', s.finished_at, 'baseline', s.baseline, \
                 'phase_id', s.phase_id, 'status', s.status, 'benchmark_version', s.benchmark_version, \
                 'summary', CASE WHEN s.status = 'COMPLETED' THEN s.summary_json END)), '[]'::json)::text AS board \
                 FROM submissions s JOIN teams t ON t.id = s.team_id \
                 WHERE s.benchmark = $1 AND s.board_seq > $3 AND ($2::text IS NULL OR s.phase_id = $2)"
            }
        };
        let row = sqlx::query(sql)
            .bind(benchmark)
            .bind(phase)
            .bind(since)
            .fetch_one(&self.pool)
            .await
            .ctx(|| format!("reading the changed leaderboard rows of benchmark {benchmark:?}"))?;
        get(&row, "board", "a leaderboard")
    }

    /// COMPLETED submissions of a phase (for its leaderboard), oldest first.
    pub async fn completed_submissions_of_phase(&self, phase_id: &str) -> Result<Vec<Submission>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {SUBMISSION_LIST_COLUMNS} FROM submissions s JOIN teams t ON t.id = s.team_id \
             WHERE s.phase_id = $1 AND s.status = 'COMPLETED' ORDER BY s.finished_at, s.id"
        ))
        .bind(phase_id)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("listing the completed submissions of phase {phase_id:?}"))?;
        rows.iter().map(submission_from_row).collect()
    }

    /// Explains why a guarded submission update changed nothing: missing, or already final.
    pub(super) async fn submission_not_open(&self, id: &str, action: &str) -> StorageError {
        match self.submission(id).await {
            Ok(Some(s)) => {
                StorageError::Conflict(format!("cannot {action} submission {id}: it is already {}", s.status))
            }
            Ok(None) => StorageError::NotFound(format!("submission {id}")),
            Err(e) => e,
        }
    }

    /// Sets RUNNING (and started_at if unset); a COMPLETED or FAILED submission is a
    /// [`StorageError::Conflict`], a missing one [`StorageError::NotFound`].
    pub async fn mark_submission_running(&self, id: &str) -> Result<(), StorageError> {
        let done = sqlx::query(
            "UPDATE submissions SET status = 'RUNNING', started_at = COALESCE(started_at, $2) \
             WHERE id = $1 AND status IN ('PENDING', 'RUNNING')",
        )
        .bind(id)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .ctx(|| format!("marking submission {id} running"))?;
        if done.rows_affected() == 0 {
            return Err(self.submission_not_open(id, "start").await);
        }
        Ok(())
    }

    /// Sets COMPLETED (or FAILED with `error`), finished_at, and the report JSON. Only a PENDING or
    /// RUNNING submission can finish ([`StorageError::Conflict`] otherwise).
    pub async fn finish_submission(
        &self,
        id: &str,
        status: SubmissionStatus,
        report_json: Option<&str>,
        error: Option<&str>,
    ) -> Result<(), StorageError> {
        self.finish_with_summary(id, status, report_json, error, None).await
    }

    /// [`Storage::finish_submission`] COMPLETED with its report and leaderboard summary in one
    /// write: a summary written apart could fail after the status, leaving a completed
    /// submission off every leaderboard until a restart's backfill.
    pub async fn complete_submission(
        &self,
        id: &str,
        report_json: &str,
        summary_json: &str,
    ) -> Result<(), StorageError> {
        self.finish_with_summary(
            id,
            SubmissionStatus::Completed,
            Some(report_json),
            None,
            Some(summary_json),
        )
        .await
    }

    async fn finish_with_summary(
        &self,
        id: &str,
        status: SubmissionStatus,
        report_json: Option<&str>,
        error: Option<&str>,
        summary_json: Option<&str>,
    ) -> Result<(), StorageError> {
        let _changed = self.leaderboards_changed();
        if !status.is_final() {
            return Err(StorageError::Invalid(format!(
                "finishing submission {id} with status {status} (expected COMPLETED or FAILED)"
            )));
        }
        let context = || format!("finishing submission {id} as {status}");
        let mut tx = self.pool.begin().await.ctx(context)?;
        let done = sqlx::query(
            "UPDATE submissions SET status = $2, finished_at = $3, report_json = $4, error = $5, \
             summary_json = COALESCE($6, summary_json) WHERE id = $1 AND status IN ('PENDING', 'RUNNING')",
        )
        .bind(id)
        .bind(status.as_str())
        .bind(now_ms())
        .bind(report_json)
        .bind(error)
        .bind(summary_json)
        .execute(&mut *tx)
        .await
        .ctx(context)?;
        if done.rows_affected() == 0 {
            drop(tx);
            return Err(self.submission_not_open(id, "finish").await);
        }
        self.stamp_board_change_on(&mut tx, id).await?;
        tx.commit().await.ctx(context)
    }

    /// The agent of the session now running an unfinished submission (a resume may come from
    /// another agent): pages show the last session's agent, each episode keeps its own.
    pub async fn set_agent_name(&self, id: &str, agent_name: &str) -> Result<(), StorageError> {
        sqlx::query("UPDATE submissions SET agent_name = $2 WHERE id = $1 AND status IN ('PENDING', 'RUNNING')")
            .bind(id)
            .bind(agent_name)
            .execute(&self.pool)
            .await
            .ctx(|| format!("recording the agent of submission {id}"))?;
        Ok(())
    }

    /// Joint-position benchmarks: the gains (JSON) a submission's first session fixed, if any.
    pub async fn joint_gains(&self, id: &str) -> Result<Option<String>, StorageError> {
        let row: Option<(Option<String>,)> = sqlx::query_as("SELECT joint_gains FROM submissions WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .ctx(|| format!("reading the gains of submission {id}"))?;
        Ok(row.and_then(|(g,)| g))
    }

    /// Fixes a submission's gains (JSON) unless they are fixed already; returns the stored ones
    /// (the caller's, or those of a session that got there first).
    pub async fn fix_joint_gains(&self, id: &str, gains: &str) -> Result<String, StorageError> {
        sqlx::query("UPDATE submissions SET joint_gains = $2 WHERE id = $1 AND joint_gains IS NULL")
            .bind(id)
            .bind(gains)
            .execute(&self.pool)
            .await
            .ctx(|| format!("recording the gains of submission {id}"))?;
        Ok(self.joint_gains(id).await?.unwrap_or_else(|| gains.to_string()))
    }

    /// Marks (or unmarks) a submission as a baseline; false if it does not exist.
    pub async fn set_baseline(&self, id: &str, baseline: bool) -> Result<bool, StorageError> {
        let _changed = self.leaderboards_changed();
        let context = || format!("marking submission {id} as baseline = {baseline}");
        let mut tx = self.pool.begin().await.ctx(context)?;
        let done = sqlx::query("UPDATE submissions SET baseline = $2 WHERE id = $1")
            .bind(id)
            .bind(i64::from(baseline))
            .execute(&mut *tx)
            .await
            .ctx(context)?;
        self.stamp_board_change_on(&mut tx, id).await?;
        tx.commit().await.ctx(context)?;
        Ok(done.rows_affected() > 0)
    }

    /// An organiser's cancel: a PENDING or RUNNING submission becomes FAILED with `reason`, and
    /// its unfinished episodes FAILED with the same reason (results still in flight are then not
    /// counted: `finish_episode` only moves RUNNING episodes). One transaction;
    /// [`StorageError::Conflict`] for a finished submission, [`StorageError::NotFound`] for none.
    pub async fn cancel_submission(&self, id: &str, reason: &str) -> Result<(), StorageError> {
        match self.fail_open_submission(id, reason, None).await? {
            true => Ok(()),
            false => Err(self.submission_not_open(id, "cancel").await),
        }
    }

    /// The idle expiry's end of a submission [`Storage::idle_submissions`] listed: as
    /// [`Storage::cancel_submission`], in the same statement as a new look at whether it is
    /// still idle since `idle_since`, so that an agent that attached and claimed episodes (on
    /// any replica) after the listing keeps its run. False when it is no longer idle or open.
    pub async fn expire_idle_submission(&self, id: &str, reason: &str, idle_since: i64) -> Result<bool, StorageError> {
        self.fail_open_submission(id, reason, Some(idle_since)).await
    }

    /// A PENDING or RUNNING submission, and its unfinished episodes, FAILED with `reason`; with
    /// `idle_since`, only if still idle then. False when no row was changed.
    async fn fail_open_submission(
        &self,
        id: &str,
        reason: &str,
        idle_since: Option<i64>,
    ) -> Result<bool, StorageError> {
        let _changed = self.leaderboards_changed();
        let context = || format!("cancelling submission {id}");
        let mut tx = self.pool.begin().await.ctx(context)?;
        let now = now_ms();
        let still_idle = match idle_since {
            Some(_) => format!(" AND {}", idle_condition("$4")),
            None => String::new(),
        };
        let statement = format!(
            "UPDATE submissions SET status = 'FAILED', finished_at = $2, error = $3 \
             WHERE id = $1 AND status IN ('PENDING', 'RUNNING'){still_idle}"
        );
        let mut update = sqlx::query(&statement).bind(id).bind(now).bind(reason);
        if let Some(since) = idle_since {
            update = update.bind(since);
        }
        let done = update.execute(&mut *tx).await.ctx(context)?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query(
            "UPDATE episodes SET status = 'FAILED', reason = $2, updated_at = $3, \
             lease_owner = NULL, lease_expires_at = NULL \
             WHERE submission_id = $1 AND status IN ('PENDING', 'RUNNING')",
        )
        .bind(id)
        .bind(reason)
        .bind(now)
        .execute(&mut *tx)
        .await
        .ctx(context)?;
        self.stamp_board_change_on(&mut tx, id).await?;
        tx.commit().await.ctx(context)?;
        // The episodes this server runs of it stop now, not at their ends.
        self.note_submission_ended(id);
        Ok(true)
    }

    /// The unfinished (PENDING or RUNNING) submissions nobody is running anywhere, and nobody
    /// has for a while: see [`idle_condition`]. Hosted submissions are the server's own to run
    /// (waiting for a place, or paused while their benchmark cannot be loaded) and never idle.
    pub async fn idle_submissions(&self, idle_since: i64) -> Result<Vec<String>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT id FROM submissions WHERE status IN ('PENDING', 'RUNNING') AND {} \
             ORDER BY created_at, id",
            idle_condition("$1")
        ))
        .bind(idle_since)
        .fetch_all(&self.pool)
        .await
        .ctx(|| "listing idle submissions".to_string())?;
        rows.iter().map(|row| get(row, "id", "an idle submission")).collect()
    }

    /// Replaces the metrics of a final episode (a re-score from its stored trajectory).
    pub async fn set_episode_metrics(
        &self,
        submission: &str,
        idx: i64,
        metrics: &BTreeMap<String, f64>,
    ) -> Result<bool, StorageError> {
        let done = sqlx::query(
            "UPDATE episodes SET metrics_json = $3, updated_at = $4 \
             WHERE submission_id = $1 AND idx = $2 AND status IN ('COMPLETED', 'FELL')",
        )
        .bind(submission)
        .bind(idx)
        .bind(metrics_to_json(metrics))
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .ctx(|| format!("re-scoring episode {idx} of submission {submission}"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Sets the leaderboard summary of a submission (with its report, or filled in later).
    pub async fn set_summary(&self, id: &str, summary_json: &str) -> Result<(), StorageError> {
        let _changed = self.leaderboards_changed();
        let context = || format!("storing the summary of submission {id}");
        let mut tx = self.pool.begin().await.ctx(context)?;
        sqlx::query("UPDATE submissions SET summary_json = $2 WHERE id = $1")
            .bind(id)
            .bind(summary_json)
            .execute(&mut *tx)
            .await
            .ctx(context)?;
        self.stamp_board_change_on(&mut tx, id).await?;
        tx.commit().await.ctx(context)
    }

    /// COMPLETED submissions that have a report but no summary yet, or a summary that does not
    /// keep its report's `format_version` (both stored by an older version): their ids, so that
    /// their reports are read one at a time ([`Storage::report_json`]; thousands of whole
    /// reports at once would be gigabytes).
    pub async fn reports_without_summary(&self) -> Result<Vec<String>, StorageError> {
        sqlx::query_scalar(
            "SELECT id FROM submissions \
             WHERE status = 'COMPLETED' AND report_json IS NOT NULL \
             AND (summary_json IS NULL OR summary_json NOT LIKE '%\"format_version\"%') ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await
        .ctx(|| "listing the reports without a summary".to_string())
    }

    /// Every COMPLETED submission's leaderboard summary (JSON text, a few hundred bytes each), as
    /// (id, summary), to find those an older arena scored ([`crate::leaderboard::ReportSummary`]).
    pub async fn completed_summaries(&self) -> Result<Vec<(String, String)>, StorageError> {
        let rows = sqlx::query(
            "SELECT id, summary_json FROM submissions WHERE status = 'COMPLETED' AND summary_json IS NOT NULL ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await
        .ctx(|| "listing the leaderboard summaries".to_string())?;
        rows.iter()
            .map(|r| Ok((get(r, "id", "a submission")?, get(r, "summary_json", "a submission")?)))
            .collect()
    }

    /// A submission's stored report (JSON text), if it has one.
    pub async fn report_json(&self, id: &str) -> Result<Option<String>, StorageError> {
        sqlx::query_scalar::<_, Option<String>>("SELECT report_json FROM submissions WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map(Option::flatten)
            .ctx(|| format!("reading the report of submission {id}"))
    }

    /// What the first submission of `benchmark`'s `version` recorded it defines, if any has.
    pub async fn benchmark_definition(&self, benchmark: &str, version: u32) -> Result<Option<String>, StorageError> {
        sqlx::query_scalar("SELECT definition FROM benchmark_definitions WHERE benchmark = $1 AND version = $2")
            .bind(benchmark)
            .bind(i64::from(version))
            .fetch_optional(&self.pool)
            .await
            .ctx(|| format!("reading benchmark {benchmark} version {version}'s definition"))
    }

    /// Sets `version` on the submissions of `benchmark` that have none (stored before versions
    /// were kept); how many. Ranking is unchanged by it (none counts as the current version),
    /// so no leaderboard stamp.
    pub async fn set_missing_benchmark_versions(&self, benchmark: &str, version: u32) -> Result<u64, StorageError> {
        let done = sqlx::query(
            "UPDATE submissions SET benchmark_version = $2 WHERE benchmark = $1 AND benchmark_version IS NULL",
        )
        .bind(benchmark)
        .bind(i64::from(version))
        .execute(&self.pool)
        .await
        .ctx(|| format!("recording the version of benchmark {benchmark:?} on its older submissions"))?;
        Ok(done.rows_affected())
    }

    /// Replaces the report of a COMPLETED submission (after a re-score) and its leaderboard
    /// summary, in one write with its stamp (two writes could leave the new report with the old
    /// summary on the boards for good).
    pub async fn replace_report_and_summary(
        &self,
        id: &str,
        report_json: &str,
        summary_json: &str,
    ) -> Result<(), StorageError> {
        let _changed = self.leaderboards_changed();
        let context = || format!("replacing the report of submission {id}");
        let mut tx = self.pool.begin().await.ctx(context)?;
        let done = sqlx::query(
            "UPDATE submissions SET report_json = $2, summary_json = $3 WHERE id = $1 AND status = 'COMPLETED'",
        )
        .bind(id)
        .bind(report_json)
        .bind(summary_json)
        .execute(&mut *tx)
        .await
        .ctx(context)?;
        if done.rows_affected() == 0 {
            return Err(StorageError::Conflict(format!("submission {id} is not COMPLETED")));
        }
        self.stamp_board_change_on(&mut tx, id).await?;
        tx.commit().await.ctx(context)
    }
}

/// Records what `sub`'s benchmark version defines, when it is the version's first submission,
/// and refuses `sub` when that version was recorded with another definition.
async fn record_definition(
    conn: &mut sqlx::AnyConnection,
    sub: &NewSubmission,
    definition: &str,
    now: i64,
) -> Result<(), StorageError> {
    let context = || {
        format!(
            "recording benchmark {} version {}",
            sub.benchmark, sub.benchmark_version
        )
    };
    sqlx::query(
        "INSERT INTO benchmark_definitions (benchmark, version, definition, recorded_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT DO NOTHING",
    )
    .bind(&sub.benchmark)
    .bind(i64::from(sub.benchmark_version))
    .bind(definition)
    .bind(now)
    .execute(&mut *conn)
    .await
    .ctx(context)?;
    let recorded: String =
        sqlx::query_scalar("SELECT definition FROM benchmark_definitions WHERE benchmark = $1 AND version = $2")
            .bind(&sub.benchmark)
            .bind(i64::from(sub.benchmark_version))
            .fetch_one(&mut *conn)
            .await
            .ctx(context)?;
    if recorded == definition {
        return Ok(());
    }
    // Recorded by a server that read benchmarks otherwise (another digest scheme, `d1:…`): not
    // an edited file; recorded again as this server reads it.
    if !crate::catalog::changed_since(&recorded, definition) {
        sqlx::query(
            "UPDATE benchmark_definitions SET definition = $3, recorded_at = $4 WHERE benchmark = $1 AND version = $2",
        )
        .bind(&sub.benchmark)
        .bind(i64::from(sub.benchmark_version))
        .bind(definition)
        .bind(now)
        .execute(&mut *conn)
        .await
        .ctx(context)?;
        return Ok(());
    }
    Err(StorageError::BenchmarkChanged {
        benchmark: sub.benchmark.clone(),
        version: sub.benchmark_version,
    })
}

/// [`StorageError::QuotaExceeded`] when `team_id` has used `quota` up (the total first: it never
/// resets), counted on `conn`.
async fn quota_left(conn: &mut sqlx::AnyConnection, team_id: i64, quota: &Quota<'_>) -> Result<(), StorageError> {
    let row = sqlx::query(
        "SELECT COUNT(*) AS total, COALESCE(SUM(CASE WHEN created_at >= $3 THEN 1 ELSE 0 END), 0) AS today \
         FROM submissions WHERE team_id = $1 AND phase_id = $2",
    )
    .bind(team_id)
    .bind(quota.phase_id)
    .bind(quota.day_start)
    .fetch_one(&mut *conn)
    .await
    .ctx(|| format!("counting the submissions of team {team_id} in phase {}", quota.phase_id))?;
    let what = format!("submission counts of team {team_id}");
    let total: i64 = get(&row, "total", &what)?;
    let today: i64 = get(&row, "today", &what)?;
    let over = |limit: Option<u32>, used: i64| limit.filter(|&l| used >= i64::from(l));
    if let Some(limit) = over(quota.max_total, total) {
        return Err(StorageError::QuotaExceeded {
            limit,
            used: total,
            daily: false,
        });
    }
    if let Some(limit) = over(quota.max_per_day, today) {
        return Err(StorageError::QuotaExceeded {
            limit,
            used: today,
            daily: true,
        });
    }
    Ok(())
}

/// SQL (over the `submissions` table's row) for "idle since `param`" (unix ms): not hosted; no
/// episode RUNNING under a live claim (a claim whose lease ran out before `param` is a replica
/// gone for good, whose episodes nobody settles while no claim is made); no agent session
/// started or ended since (an agent attached on any replica, not yet claiming); the last change
/// (an episode's, else the submission's creation) before `param`.
fn idle_condition(param: &str) -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM hosted_policies h WHERE h.submission_id = submissions.id) \
         AND NOT EXISTS (SELECT 1 FROM submission_sessions ss WHERE ss.submission_id = submissions.id \
         AND (ss.started_at >= {param} OR ss.ended_at >= {param})) \
         AND NOT EXISTS (SELECT 1 FROM episodes e WHERE e.submission_id = submissions.id AND e.status = 'RUNNING' \
         AND (e.lease_expires_at IS NULL OR e.lease_expires_at >= {param})) \
         AND COALESCE((SELECT MAX(e.updated_at) FROM episodes e WHERE e.submission_id = submissions.id), \
         submissions.created_at) < {param} \
         AND submissions.created_at < {param}"
    )
}
