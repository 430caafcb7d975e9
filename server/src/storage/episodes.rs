//! The episode lifecycle in the database: claims under a lease, lease renewal and expiry,
//! results committed exactly once, re-queueing after a lost connection and recovery at start-up.
//!
//! Every claim is a lease held by one server process (its [`Lease::owner`]) until
//! [`Lease::expires_at`]; a live server renews its leases ([`Storage::renew_leases`]) while the
//! episodes run. A result is committed only by the lease's holder, so an episode whose server
//! died, and which another replica claimed again after the lease ran out, is counted once: by
//! whichever run still holds the lease when it finishes.
//!
//! Runs are numbered by `attempts`, which only grows: a run's number names its trajectory part
//! and its commit, so no two runs of an episode ever share one. Runs that are not the agent's
//! are counted apart: `server_faults`, those the server lost by a fault (its crash, a lane's
//! error, a failed store, an expired lease), capped at [`MAX_SERVER_FAULTS`] so that an
//! episode which itself breaks the server (one that kills every replica in turn) still ends;
//! and `uncharged_runs`, claims that never started and runs a server told to stop gave back.
//! `max_attempts` caps the agent's runs, [`AGENT_ATTEMPTS`].

use super::*;

/// Who holds the claims a [`Storage`] handle makes, and for how long each holds without renewal.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    /// The replica's id (server key `replica_id`): stable across restarts of one replica, so a
    /// restarted server knows which RUNNING episodes were its own.
    pub replica: String,
    /// What the claims of this process record (`lease_owner`): `NONCE@replica`, the nonce 8 hex
    /// digits new to each start. A restart takes back its replica's claims
    /// ([`Lease::same_replica`]); commits and renewals match the whole owner, so an older process
    /// of the same replica that is still alive (cut off from the database while a new one took
    /// the id) can no longer commit the episodes the new one claimed again.
    pub owner: String,
    pub duration: Duration,
}

impl Lease {
    /// How long a claim holds without renewal unless configured (`lease_s`).
    pub const DEFAULT_DURATION: Duration = Duration::from_secs(30);

    /// A lease owner unique to this process (a handle nobody named).
    pub(super) fn for_this_process() -> Lease {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        Lease::of_replica(
            format!("process-{}-{}", std::process::id(), &nonce[..8]),
            Self::DEFAULT_DURATION,
        )
    }

    /// The claims of a new process of replica `replica`.
    pub(super) fn of_replica(replica: String, duration: Duration) -> Lease {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        Lease {
            owner: format!("{}@{replica}", &nonce[..8]),
            replica,
            duration,
        }
    }

    /// SQL true when column `column` names a claim of replica `$param`, by any of its processes:
    /// `NONCE@replica`, or the bare replica id that servers before the nonce recorded.
    pub(super) fn same_replica(column: &str, param: usize) -> String {
        format!("({column} = ${param} OR (substr({column}, 9, 1) = '@' AND substr({column}, 10) = ${param}))")
    }

    pub(super) fn expires_at(&self, now: i64) -> i64 {
        now.saturating_add(self.duration.as_millis().min(i64::MAX as u128) as i64)
    }
}

/// What [`Storage::expire_leases`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expired {
    /// Back to PENDING, to be claimed again (the lost run a server fault, not the agent's).
    pub requeued: u64,
    /// FAILED: the server had lost [`MAX_SERVER_FAULTS`] of its runs.
    pub failed: u64,
}

/// The reason an expired episode is given (the server-fault count follows when it gives up).
pub const LEASE_EXPIRED: &str = "the server running it stopped renewing its claim (lease expired)";

/// The reason an episode running when its server stopped is given.
pub const SERVER_RESTARTED: &str = "the server running it stopped before it ended";

/// Runs of one episode the server may lose before the episode fails: enough for a restart or
/// a replica lost during a deploy, few enough that an episode which itself makes the server
/// fail (a lane that panics on it, a replica it kills) ends.
pub const MAX_SERVER_FAULTS: i64 = 3;

/// SQL true for the row of run $3 of episode $2 of submission $1 while RUNNING under lease
/// owner $4 (not a newer claim of the same episode).
const RUN: &str = "submission_id = $1 AND idx = $2 AND status = 'RUNNING' AND attempts = $3 AND lease_owner = $4";

/// SQL for the runs charged to the agent, what `max_attempts` caps.
pub const AGENT_ATTEMPTS: &str = "(attempts - server_faults - uncharged_runs)";

/// The reason episodes a stopping server gives back are given ([`Storage::give_back_on_stop`]).
pub const SERVER_STOPPED: &str = "the server running it was stopped";

/// SQL true for a row whose next server fault is its last.
fn last_server_fault() -> String {
    format!("server_faults + 1 >= {MAX_SERVER_FAULTS}")
}

/// SQL for the reason of an episode given up after the server lost its runs: `reason_sql`
/// (an expression) with " (server fault n of max)", n the count after this loss.
fn server_faults_reason(reason_sql: &str) -> String {
    format!("{reason_sql} || ' (server fault ' || CAST(server_faults + 1 AS TEXT) || ' of {MAX_SERVER_FAULTS})'")
}

/// A commit must end the episode: COMPLETED, FELL, FAILED or TIMEOUT.
fn check_final(submission: &str, idx: i64, result: &EpisodeOutcome) -> Result<(), StorageError> {
    if result.status.is_final() {
        return Ok(());
    }
    Err(StorageError::Invalid(format!(
        "finishing episode {idx} of submission {submission} with status {} \
         (expected COMPLETED, FELL, FAILED or TIMEOUT)",
        result.status
    )))
}

impl Storage {
    /// The episodes of a submission, ordered by idx (empty if the submission does not exist).
    pub async fn episodes(&self, submission: &str) -> Result<Vec<EpisodeRow>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {EPISODE_COLUMNS} FROM episodes WHERE submission_id = $1 ORDER BY idx"
        ))
        .bind(submission)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("reading the episodes of submission {submission}"))?;
        rows.iter().map(|row| episode_from_row(row, submission)).collect()
    }

    /// PENDING → RUNNING under this handle's lease, attempts += 1; returns the new attempt
    /// number, or None if the episode was not PENDING (already claimed or finished) or does not
    /// exist.
    pub async fn start_episode(&self, submission: &str, idx: i64) -> Result<Option<i64>, StorageError> {
        let now = self.now();
        let row = sqlx::query(
            "UPDATE episodes SET status = 'RUNNING', attempts = attempts + 1, updated_at = $3, \
             lease_owner = $4, lease_expires_at = $5 \
             WHERE submission_id = $1 AND idx = $2 AND status = 'PENDING' RETURNING attempts",
        )
        .bind(submission)
        .bind(idx)
        .bind(now)
        .bind(&self.lease.owner)
        .bind(self.lease.expires_at(now))
        .fetch_optional(&self.pool)
        .await
        .ctx(|| format!("starting episode {idx} of submission {submission}"))?;
        let attempt = row
            .map(|row| get(&row, "attempts", &format!("episode {idx} of submission {submission}")))
            .transpose()?;
        if let Some(attempt) = attempt {
            self.hold(submission, idx, attempt);
        }
        Ok(attempt)
    }

    /// RUNNING → a final status (COMPLETED, FELL, FAILED, TIMEOUT) with steps, metrics and reason,
    /// ONLY if the row is RUNNING under this handle's lease (so an episode is never counted
    /// twice, even when another replica claimed it again after the lease ran out); returns
    /// whether it changed. [`Storage::commit_episode`] also checks the attempt.
    pub async fn finish_episode(
        &self,
        submission: &str,
        idx: i64,
        result: &EpisodeOutcome,
    ) -> Result<bool, StorageError> {
        self.commit_episode(submission, idx, None, result).await
    }

    /// [`Storage::finish_episode`] for one claim: this handle's lease AND `attempt` (when given),
    /// so that a run whose lease ran out, and which this same server then claimed again, cannot
    /// commit over the newer run. Safe to retry after an error that left the outcome unknown (a
    /// connection lost during the commit): a row that this claim already finalised answers true
    /// again (a final row keeps the lease owner that committed it).
    pub async fn commit_episode(
        &self,
        submission: &str,
        idx: i64,
        attempt: Option<i64>,
        result: &EpisodeOutcome,
    ) -> Result<bool, StorageError> {
        check_final(submission, idx, result)?;
        let context = || {
            format!(
                "finishing episode {idx} of submission {submission} as {}",
                result.status
            )
        };
        let committed = async {
            let mut conn = self.pool.acquire().await?;
            self.commit_one(&mut conn, submission, idx, attempt, result).await
        }
        .await
        .ctx(context);
        if settled(&committed) {
            self.release(submission, idx, attempt);
        }
        committed
    }

    /// [`Storage::commit_episode`] for the runs `(idx, attempt, outcome)` of one submission in
    /// one transaction: one write lock and one durable commit for all of them instead of one
    /// each (the committer commits the episodes that finished together). Answers per run, in
    /// order, as `commit_episode` would; on an error none is committed, and a retry is as safe.
    pub async fn commit_episodes(
        &self,
        submission: &str,
        runs: &[(i64, i64, &EpisodeOutcome)],
    ) -> Result<Vec<bool>, StorageError> {
        for &(idx, _, result) in runs {
            check_final(submission, idx, result)?;
        }
        let context = || format!("finishing {} episodes of submission {submission}", runs.len());
        // Rows locked in index order, as the lease renewal's statement and other batches take
        // them more often than not: fewer deadlocks between them on PostgreSQL (one that
        // happens anyway is transient, and the commit is tried again).
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by_key(|&i| runs[i].0);
        let committed = async {
            let mut tx = self.pool.begin().await?;
            let mut answers = vec![false; runs.len()];
            for i in order {
                let (idx, attempt, result) = runs[i];
                answers[i] = self.commit_one(&mut tx, submission, idx, Some(attempt), result).await?;
            }
            tx.commit().await?;
            Ok::<_, sqlx::Error>(answers)
        }
        .await
        .ctx(context);
        if settled(&committed) {
            for &(idx, attempt, _) in runs {
                self.release(submission, idx, Some(attempt));
            }
        }
        committed
    }

    /// The commit of one run on `conn` (a pooled connection or a transaction's): RUNNING under this lease and
    /// attempt → final; else, for a given attempt, whether this very claim already finalised it.
    async fn commit_one(
        &self,
        conn: &mut sqlx::AnyConnection,
        submission: &str,
        idx: i64,
        attempt: Option<i64>,
        result: &EpisodeOutcome,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(
            "UPDATE episodes SET status = $3, steps = $4, metrics_json = $5, reason = $6, updated_at = $7, \
             lease_expires_at = NULL, engine = $10 \
             WHERE submission_id = $1 AND idx = $2 AND status = 'RUNNING' AND lease_owner = $8 \
             AND ($9 < 0 OR attempts = $9)",
        )
        .bind(submission)
        .bind(idx)
        .bind(result.status.as_str())
        .bind(result.steps)
        .bind(metrics_to_json(&result.metrics))
        .bind(result.reason.as_deref())
        .bind(self.now())
        .bind(&self.lease.owner)
        .bind(attempt.unwrap_or(-1))
        .bind(result.engine.as_deref())
        .execute(&mut *conn)
        .await?;
        if done.rows_affected() > 0 {
            return Ok(true);
        }
        let Some(attempt) = attempt else {
            return Ok(false);
        };
        // Already committed by this very claim (a retry after an unknown outcome)?
        let row =
            sqlx::query("SELECT status, attempts, lease_owner FROM episodes WHERE submission_id = $1 AND idx = $2")
                .bind(submission)
                .bind(idx)
                .fetch_optional(&mut *conn)
                .await?;
        let Some(row) = row else { return Ok(false) };
        let status: String = row.try_get("status")?;
        let attempts: i64 = row.try_get("attempts")?;
        let owner: Option<String> = row.try_get("lease_owner")?;
        let final_state = status.parse::<EpisodeState>().is_ok_and(|s| s.is_final());
        Ok(final_state && attempts == attempt && owner.as_deref() == Some(self.lease.owner.as_str()))
    }

    /// After a lost agent connection: the given runs `(idx, attempt)`, RUNNING, go back to
    /// PENDING if the agent's attempts ([`AGENT_ATTEMPTS`]) < max_attempts (keeping
    /// `reason` as the last failure), else FAILED with reason "{reason} (attempt {n} of {max})",
    /// n the agent's. Returns (requeued, failed) counts. Only touches rows that are RUNNING
    /// under this handle's lease in that attempt (a newer claim of the same episode is left
    /// alone); all in one transaction.
    pub async fn requeue_episodes(
        &self,
        submission: &str,
        runs: &[(i64, i64)],
        max_attempts: i64,
        reason: &str,
    ) -> Result<(usize, usize), StorageError> {
        // `max_attempts` is an integer: spliced into the statements.
        let back = format!(
            "UPDATE episodes SET status = 'PENDING', reason = $6, updated_at = $5, \
             lease_owner = NULL, lease_expires_at = NULL \
             WHERE {RUN} AND {AGENT_ATTEMPTS} < {max_attempts}"
        );
        let gave_up = format!(
            "UPDATE episodes SET status = 'FAILED', \
             reason = $6 || ' (attempt ' || CAST({AGENT_ATTEMPTS} AS TEXT) || ' of {max_attempts})', \
             updated_at = $5, lease_owner = NULL, lease_expires_at = NULL WHERE {RUN}"
        );
        let context = || format!("requeueing episodes {runs:?} (index, attempt) of submission {submission}");
        self.settle_runs(submission, runs, reason, &back, Some(&gave_up), context)
            .await
    }

    /// After a server-side error that stopped running them (a lane's error, a trajectory the
    /// server could not store): the given RUNNING episodes under this handle's lease go back to
    /// PENDING as a server fault, not charged to the agent (as after a restart), with `reason`
    /// kept as the last failure, so this or another server runs them again now instead of
    /// renewing their claims until a restart; one the server has now lost
    /// [`MAX_SERVER_FAULTS`] times is FAILED with "{reason} (server fault n of max)". The
    /// claims are released even when the update fails for good, as by
    /// [`Storage::requeue_episodes`]. Returns (returned, failed) counts.
    pub async fn return_episodes(
        &self,
        submission: &str,
        runs: &[(i64, i64)],
        reason: &str,
    ) -> Result<(usize, usize), StorageError> {
        let back = format!(
            "UPDATE episodes SET status = 'PENDING', reason = $6, updated_at = $5, \
             server_faults = server_faults + 1, lease_owner = NULL, lease_expires_at = NULL \
             WHERE {RUN} AND NOT ({})",
            last_server_fault()
        );
        let gave_up = format!(
            "UPDATE episodes SET status = 'FAILED', reason = {}, server_faults = server_faults + 1, \
             updated_at = $5, lease_owner = NULL, lease_expires_at = NULL WHERE {RUN} AND {}",
            server_faults_reason("$6"),
            last_server_fault()
        );
        let context =
            || format!("returning episodes {runs:?} (index, attempt) of submission {submission} after a server error");
        self.settle_runs(submission, runs, reason, &back, Some(&gave_up), context)
            .await
    }

    /// Claims that never started (the agent was gone before their `episode_start` was sent):
    /// the given RUNNING episodes under this handle's lease go back to PENDING charged to
    /// nobody (`uncharged_runs` += 1; the number stays taken, as every run's does), with
    /// `reason`; with `keep_earlier_reason` (the agent left before it heard of them) an episode
    /// that had failed before keeps that failure's reason instead (a run that never began is no
    /// failure, and a charged run's words must not be lost to it). Claims released as by
    /// [`Storage::requeue_episodes`]. Returns how many went back.
    pub async fn unclaim_episodes(
        &self,
        submission: &str,
        runs: &[(i64, i64)],
        reason: &str,
        keep_earlier_reason: bool,
    ) -> Result<usize, StorageError> {
        let reason_sql = match keep_earlier_reason {
            true => "COALESCE(NULLIF(reason, ''), $6)",
            false => "$6",
        };
        let back = format!(
            "UPDATE episodes SET status = 'PENDING', reason = {reason_sql}, updated_at = $5, \
             uncharged_runs = uncharged_runs + 1, lease_owner = NULL, lease_expires_at = NULL WHERE {RUN}"
        );
        let context = || format!("unclaiming episodes {runs:?} (index, attempt) of submission {submission}");
        let (back, _) = self.settle_runs(submission, runs, reason, &back, None, context).await?;
        Ok(back)
    }

    /// The runs `(idx, attempt)` of `submission`, each in its row only while RUNNING under
    /// this handle's lease in that attempt (a newer claim of the episode is left alone),
    /// settled in one transaction: `back` moves a run's row (→ PENDING), and where it matches
    /// none, `gave_up` (→ FAILED). Both bind [`RUN`]'s $1–$4, $5 now and $6 `reason`. Returns
    /// (back, gave up) counts. The claims are released even when the update failed for good:
    /// their leases then run out and [`Storage::expire_leases`] settles them, rather than this
    /// server renewing claims nobody runs. After a transient error the caller tries again (the
    /// claims stay renewed meanwhile), and forgets them if it gives up.
    async fn settle_runs(
        &self,
        submission: &str,
        runs: &[(i64, i64)],
        reason: &str,
        back: &str,
        gave_up: Option<&str>,
        context: impl Fn() -> String,
    ) -> Result<(usize, usize), StorageError> {
        let now = self.now();
        let done = async {
            let (mut moved, mut failed) = (0, 0);
            let mut tx = self.pool.begin().await.ctx(&context)?;
            for &(idx, attempt) in runs {
                let bind = |sql| {
                    sqlx::query(sql)
                        .bind(submission)
                        .bind(idx)
                        .bind(attempt)
                        .bind(&self.lease.owner)
                        .bind(now)
                        .bind(reason)
                };
                // Every statement here writes, so SQLite takes the write lock at the first one.
                if bind(back).execute(&mut *tx).await.ctx(&context)?.rows_affected() > 0 {
                    moved += 1;
                    continue;
                }
                if let Some(gave_up) = gave_up {
                    failed += bind(gave_up).execute(&mut *tx).await.ctx(&context)?.rows_affected() as usize;
                }
            }
            tx.commit().await.ctx(&context)?;
            Ok((moved, failed))
        }
        .await;
        if settled(&done) {
            for &(idx, attempt) in runs {
                self.release(submission, idx, Some(attempt));
            }
        }
        done
    }

    /// When the server is told to stop (a signal): every episode this process still runs goes
    /// back to PENDING charged to nobody (`uncharged_runs` += 1, reason [`SERVER_STOPPED`]), so
    /// that a deploy's restarts neither use up agents' attempts nor count toward
    /// [`MAX_SERVER_FAULTS`]. This handle claims nothing after it, and lets its hosted runs go
    /// (another server takes them up at once instead of after their claims expire), and ends the
    /// agent sessions it runs (`stopped`). A run that commits first keeps its result; one that would commit
    /// after is refused (its lease is gone), as after any lost claim. Returns how many went back.
    pub async fn give_back_on_stop(&self) -> Result<u64, StorageError> {
        // First: a lane that would claim after the give-back would leave its claims to the
        // next start (a fault each).
        self.stop_claiming();
        let back = sqlx::query(
            "UPDATE episodes SET status = 'PENDING', reason = $1, updated_at = $2, \
             uncharged_runs = uncharged_runs + 1, lease_owner = NULL, lease_expires_at = NULL \
             WHERE status = 'RUNNING' AND lease_owner = $3",
        )
        .bind(SERVER_STOPPED)
        .bind(self.now())
        .bind(&self.lease.owner)
        .execute(&self.pool)
        .await
        .ctx(|| format!("giving back the episodes of {} as it stops", self.lease.owner))?
        .rows_affected();
        sqlx::query("UPDATE hosted_policies SET runner = NULL, runner_expires_at = NULL WHERE runner = $1")
            .bind(&self.lease.owner)
            .execute(&self.pool)
            .await
            .ctx(|| format!("letting the hosted runs of {} go as it stops", self.lease.owner))?;
        // The sessions it runs end now (a remote agent's is told and would say so itself; a
        // hosted run's, which no connection holds, was left open for good).
        sqlx::query(
            "UPDATE submission_sessions SET ended_at = $1, outcome = 'stopped' WHERE ended_at IS NULL AND server = $2",
        )
        .bind(now_ms())
        .bind(&self.lease.owner)
        .execute(&self.pool)
        .await
        .ctx(|| format!("ending the sessions of {} as it stops", self.lease.owner))?;
        let mut held = self.held();
        held.claims.clear();
        held.ended.clear();
        drop(held);
        Ok(back)
    }

    /// At server start: the RUNNING episodes of PENDING/RUNNING submissions that no live server
    /// runs go back to PENDING as a server fault, not charged to the agent (reason
    /// [`SERVER_RESTARTED`]); one the server has now lost [`MAX_SERVER_FAULTS`] times (an
    /// episode that crashes it at every start) is FAILED instead. On SQLite that is all of them (one server per database, the data
    /// directory lock says so); on PostgreSQL, where other replicas may be running theirs, only
    /// those claimed under this handle's own lease owner (the same replica before its restart)
    /// or under none; other replicas' episodes go back when their leases expire
    /// ([`Storage::expire_leases`]). The agent sessions left open by the same replica (on
    /// SQLite, all of them) end as [`SERVER_LOST`]. Returns the ids of the unfinished (PENDING
    /// or RUNNING) submissions, oldest first.
    pub async fn recover_after_restart(&self) -> Result<Vec<String>, StorageError> {
        let context = || "recovering unfinished episodes after a restart".to_string();
        let mut tx = self.pool.begin().await.ctx(context)?;
        let whose = match self.engine {
            Engine::Sqlite => "",
            Engine::Postgres => &format!(
                " AND ({} OR lease_owner IS NULL)",
                Lease::same_replica("lease_owner", 2)
            ),
        };
        let lost = format!(
            "WHERE status = 'RUNNING'{whose} AND submission_id IN \
             (SELECT id FROM submissions WHERE status IN ('PENDING', 'RUNNING'))"
        );
        // A constant without quotes: spliced in, so that the statements keep the parameters
        // they had ($2, the replica, on PostgreSQL only).
        let reason = format!("'{SERVER_RESTARTED}'");
        let back = format!(
            "UPDATE episodes SET status = 'PENDING', reason = {reason}, server_faults = server_faults + 1, \
             updated_at = $1, lease_owner = NULL, lease_expires_at = NULL \
             {lost} AND server_faults + 1 < {MAX_SERVER_FAULTS}"
        );
        let gave_up = format!(
            "UPDATE episodes SET status = 'FAILED', reason = {}, server_faults = server_faults + 1, \
             updated_at = $1, lease_owner = NULL, lease_expires_at = NULL {lost} AND {}",
            server_faults_reason(&reason),
            last_server_fault()
        );
        // The sessions its killed predecessor left open end now: nothing runs them any more;
        // and those no server is named for (recorded before servers were, migration 0019),
        // which no replica would end otherwise, once nothing of their submission runs under a
        // live lease (an older replica of a rolling upgrade may still be running one).
        let sessions_whose = match self.engine {
            Engine::Sqlite => "",
            Engine::Postgres => &format!(
                " AND ({} OR (server IS NULL AND NOT EXISTS (SELECT 1 FROM episodes e \
                 WHERE e.submission_id = submission_sessions.submission_id AND e.status = 'RUNNING' \
                 AND e.lease_expires_at > $1)))",
                Lease::same_replica("server", 2)
            ),
        };
        let lost_sessions = format!(
            "UPDATE submission_sessions SET ended_at = $1, outcome = '{SERVER_LOST}' \
             WHERE ended_at IS NULL{sessions_whose}"
        );
        let now = self.now();
        for sql in [&back, &gave_up, &lost_sessions] {
            let mut recover = sqlx::query(sql).bind(now);
            if self.engine == Engine::Postgres {
                recover = recover.bind(&self.lease.replica);
            }
            recover.execute(&mut *tx).await.ctx(context)?;
        }
        let rows =
            sqlx::query("SELECT id FROM submissions WHERE status IN ('PENDING', 'RUNNING') ORDER BY created_at, id")
                .fetch_all(&mut *tx)
                .await
                .ctx(context)?;
        tx.commit().await.ctx(context)?;
        rows.iter()
            .map(|row| get(row, "id", "an unfinished submission"))
            .collect()
    }

    /// Claims the next episode of a submission to run, under this handle's lease: the PENDING
    /// episode with the lowest idx becomes RUNNING (attempts += 1). Only when none is PENDING are
    /// the submission's expired leases settled ([`Storage::expire_leases`]) and the claim tried
    /// again, so the common claim is one statement and a dead replica's episodes run once the
    /// queue is drained. Returns (idx, attempt), or None when nothing is PENDING. Concurrent
    /// claimers on PostgreSQL skip each other's locked rows (`FOR UPDATE SKIP LOCKED`) instead
    /// of queueing behind them.
    pub async fn claim_next_episode(&self, submission: &str) -> Result<Option<(i64, i64)>, StorageError> {
        Ok(self.claim_next_episodes(submission, 1).await?.into_iter().next())
    }

    /// [`Storage::claim_next_episode`] for up to `limit` episodes in one statement (a lane
    /// filling thousands of slots would otherwise pay one database commit per episode: 25 s
    /// for 4096 on SQLite, measured on an H100 machine). Returns (idx, attempt) pairs in idx
    /// order; empty when nothing is PENDING.
    pub async fn claim_next_episodes(&self, submission: &str, limit: usize) -> Result<Vec<(i64, i64)>, StorageError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let claimed = self.claim_pending(submission, limit).await?;
        if !claimed.is_empty() {
            return Ok(claimed);
        }
        if self.expire_leases(submission).await?.requeued == 0 {
            return Ok(Vec::new());
        }
        self.claim_pending(submission, limit).await
    }

    /// The `limit` PENDING episodes with the lowest idx → RUNNING under this handle's lease;
    /// none once the server is stopping ([`Storage::give_back_on_stop`]).
    async fn claim_pending(&self, submission: &str, limit: usize) -> Result<Vec<(i64, i64)>, StorageError> {
        if self.held().stopping {
            return Ok(Vec::new());
        }
        let set = "SET status = 'RUNNING', attempts = attempts + 1, updated_at = $2, lease_owner = $3, \
                   lease_expires_at = $4, agent_name = (SELECT agent_name FROM submissions WHERE id = $1)";
        let pick = "SELECT idx FROM episodes WHERE submission_id = $1 AND status = 'PENDING' ORDER BY idx LIMIT $5";
        let sql = match self.engine {
            // SQLite evaluates the uncorrelated subquery once; one writer at a time.
            Engine::Sqlite => format!(
                "UPDATE episodes {set} WHERE submission_id = $1 AND status = 'PENDING' AND idx IN ({pick}) \
                 RETURNING idx, attempts"
            ),
            // PostgreSQL may run an `IN (… LIMIT n FOR UPDATE SKIP LOCKED)` subquery once per
            // row, each run locking the next rows (measured: LIMIT 1 claimed all three): the
            // locking CTE runs once.
            Engine::Postgres => format!(
                "WITH picked AS ({pick} FOR UPDATE SKIP LOCKED) UPDATE episodes {set} FROM picked \
                 WHERE episodes.submission_id = $1 AND episodes.idx = picked.idx \
                 RETURNING episodes.idx AS idx, episodes.attempts AS attempts"
            ),
        };
        let now = self.now();
        let rows = sqlx::query(&sql)
            .bind(submission)
            .bind(now)
            .bind(&self.lease.owner)
            .bind(self.lease.expires_at(now))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .ctx(|| format!("claiming episodes of submission {submission}"))?;
        let what = format!("a claimed episode of submission {submission}");
        let mut claimed = rows
            .iter()
            .map(|row| Ok::<_, StorageError>((get(row, "idx", &what)?, get(row, "attempts", &what)?)))
            .collect::<Result<Vec<_>, _>>()?;
        // RETURNING follows no particular order.
        claimed.sort_unstable();
        for &(idx, attempt) in &claimed {
            self.hold(submission, idx, attempt);
        }
        if self.held().stopping {
            // Told to stop while this claim was under way: its give-back may have come before
            // the claim did. These never start; back they go, charged to nobody.
            self.unclaim_episodes(submission, &claimed, SERVER_STOPPED, false)
                .await?;
            return Ok(Vec::new());
        }
        Ok(claimed)
    }

    /// The RUNNING episodes of a submission whose lease ran out (their server died or lost the
    /// database for longer than a lease), except those this handle holds: back to PENDING with
    /// reason [`LEASE_EXPIRED`] as a server fault, not charged to the agent; one the server has
    /// now lost [`MAX_SERVER_FAULTS`] times is FAILED with "… (server fault n of max)". Whoever
    /// held them can no longer commit them.
    pub async fn expire_leases(&self, submission: &str) -> Result<Expired, StorageError> {
        let context = || format!("settling the expired claims of submission {submission}");
        if self.just_reconnected() {
            return Ok(Expired::default());
        }
        let now = self.now();
        // Claims this handle still holds are alive here, whatever their lease says (the
        // database may have been unreachable for renewals): only other servers settle them.
        let held = self.held_claims(submission);
        let not_held = if held.is_empty() {
            String::new()
        } else {
            // Integers and this handle's own id: safe to splice into the statement.
            let list = held.keys().map(i64::to_string).collect::<Vec<_>>().join(", ");
            format!(
                " AND NOT (lease_owner = '{}' AND idx IN ({list}))",
                self.lease.owner.replace('\'', "''")
            )
        };
        let mut tx = self.pool.begin().await.ctx(context)?;
        let requeued = sqlx::query(&format!(
            "UPDATE episodes SET status = 'PENDING', reason = $3, server_faults = server_faults + 1, updated_at = $2, \
             lease_owner = NULL, lease_expires_at = NULL \
             WHERE submission_id = $1 AND status = 'RUNNING' AND (lease_expires_at IS NULL OR lease_expires_at < $2) \
             AND server_faults + 1 < {MAX_SERVER_FAULTS}{not_held}"
        ))
        .bind(submission)
        .bind(now)
        .bind(LEASE_EXPIRED)
        .execute(&mut *tx)
        .await
        .ctx(context)?
        .rows_affected();
        let failed = sqlx::query(&format!(
            "UPDATE episodes SET status = 'FAILED', reason = {}, server_faults = server_faults + 1, updated_at = $2, \
             lease_owner = NULL, lease_expires_at = NULL \
             WHERE submission_id = $1 AND status = 'RUNNING' AND (lease_expires_at IS NULL OR lease_expires_at < $2) \
             AND {}{not_held}",
            server_faults_reason("$3"),
            last_server_fault()
        ))
        .bind(submission)
        .bind(now)
        .bind(LEASE_EXPIRED)
        .execute(&mut *tx)
        .await
        .ctx(context)?
        .rows_affected();
        tx.commit().await.ctx(context)?;
        if requeued + failed > 0 {
            tracing::warn!(submission, requeued, failed, "claims of a stopped server expired");
        }
        Ok(Expired { requeued, failed })
    }

    /// Extends the leases of the episodes this handle holds (claimed, not yet committed or given
    /// back) by its duration; returns how many rows moved. A server calls it several times per
    /// lease while it runs.
    pub async fn renew_leases(&self) -> Result<u64, StorageError> {
        let held: Vec<(String, Vec<i64>)> = {
            let mut held = self.held();
            // Ended marks of submissions no claim here runs (cancelled while none was held).
            let super::Held { claims, ended, .. } = &mut *held;
            ended.retain(|s| claims.contains_key(s));
            claims
                .iter()
                .filter(|(_, idxs)| !idxs.is_empty())
                .map(|(sub, idxs)| (sub.clone(), idxs.keys().copied().collect()))
                .collect()
        };
        let expires_at = self.lease.expires_at(self.now());
        let mut renewed = 0;
        for (submission, idxs) in held {
            // Integers only: the list is safe to splice into the statement.
            let list = idxs.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
            let done = sqlx::query(&format!(
                "UPDATE episodes SET lease_expires_at = $3 \
                 WHERE submission_id = $1 AND lease_owner = $2 AND status = 'RUNNING' AND idx IN ({list})"
            ))
            .bind(&submission)
            .bind(&self.lease.owner)
            .bind(expires_at)
            .execute(&self.pool)
            .await
            .ctx(|| format!("renewing the claims of {} on submission {submission}", self.lease.owner))?;
            renewed += done.rows_affected();
            if (done.rows_affected() as usize) < idxs.len() {
                // Some claims were not there to renew: committed meanwhile, or the submission
                // ended (cancelled on another replica), which the lanes running them must learn.
                // Best effort: the other submissions' claims are renewed all the same.
                let open =
                    sqlx::query("SELECT status FROM submissions WHERE id = $1 AND status IN ('PENDING', 'RUNNING')")
                        .bind(&submission)
                        .fetch_optional(&self.pool)
                        .await;
                match open {
                    Ok(None) => self.note_submission_ended(&submission),
                    Ok(Some(_)) => {}
                    Err(e) => tracing::warn!(submission = %submission, "looking whether it ended: {e}"),
                }
            }
        }
        Ok(renewed)
    }

    /// Stops renewing the claim of run `attempt` of an episode without touching its row (its
    /// commit was given up on): the lease runs out and the episode is claimed again, here or
    /// elsewhere. A newer claim of the same episode stays held.
    pub fn forget_claim(&self, submission: &str, idx: i64, attempt: i64) {
        self.release(submission, idx, Some(attempt));
    }

    fn hold(&self, submission: &str, idx: i64, attempt: i64) {
        self.held()
            .claims
            .entry(submission.to_string())
            .or_default()
            .insert(idx, attempt);
    }

    /// Drops the claim of `idx` from the held ones: the one of run `attempt`, or whichever
    /// there is with `None` (a commit without an attempt).
    fn release(&self, submission: &str, idx: i64, attempt: Option<i64>) {
        let mut guard = self.held();
        let guard = &mut *guard;
        let held = &mut guard.claims;
        if let Some(claims) = held.get_mut(submission) {
            if attempt.is_none() || claims.get(&idx) == attempt.as_ref() {
                claims.remove(&idx);
            }
            if claims.is_empty() {
                held.remove(submission);
                guard.ended.remove(submission);
            }
        }
    }

    /// Whether `submission`, of which this handle holds claims, ended while they ran: cancelled
    /// by this server, or found final when their leases were renewed (cancelled on another
    /// replica). Their results would not be counted: a lane stops its episodes at once rather
    /// than running them to their end.
    pub fn submission_ended(&self, submission: &str) -> bool {
        self.held().ended.contains(submission)
    }

    /// Marks `submission` ended for the lanes running its claims here. Marked whether or not
    /// claims are held now: a claim whose statement committed before the cancel may be taken
    /// into hand just after it. A mark without claims goes at the next renewal.
    pub(super) fn note_submission_ended(&self, submission: &str) {
        self.held().ended.insert(submission.to_string());
    }

    /// When the earliest claim on this submission that this handle does not hold expires (unix
    /// ms), if any is RUNNING: another replica's, or one of ours given up on. A lane with
    /// nothing to claim waits for those rather than ending.
    pub async fn others_lease_expiry(&self, submission: &str) -> Result<Option<i64>, StorageError> {
        // This handle's claims are looked at before the query and after it. A run released
        // meanwhile is RUNNING in the rows and no longer held: committed or returned (final or
        // PENDING by now), or given up (`forget_claim`: still RUNNING, and waited for like
        // another's), which a second look at those rows tells apart. A run another lane claims
        // meanwhile is held by the second look once its claim has returned.
        let held_before = self.held_claims(submission);
        let rows = self.running_claims(submission, None).await?;
        let held_after = self.held_claims(submission);
        let mut earliest: Option<i64> = None;
        let mut released_meanwhile = Vec::new();
        for (idx, expiry) in rows {
            if held_after.contains_key(&idx) {
                continue;
            }
            if held_before.contains_key(&idx) {
                released_meanwhile.push(idx);
                continue;
            }
            earliest = Some(earliest.map_or(expiry, |e| e.min(expiry)));
        }
        if !released_meanwhile.is_empty() {
            let rows = self.running_claims(submission, Some(&released_meanwhile)).await?;
            let held_now = self.held_claims(submission);
            for (idx, expiry) in rows {
                if !held_now.contains_key(&idx) {
                    earliest = Some(earliest.map_or(expiry, |e| e.min(expiry)));
                }
            }
        }
        Ok(earliest)
    }

    /// The RUNNING episodes of `submission` (of those in `among`, when given) with their lease
    /// expiry; a row without a lease (written before leases existed) counts as expired now.
    async fn running_claims(&self, submission: &str, among: Option<&[i64]>) -> Result<Vec<(i64, i64)>, StorageError> {
        let mut sql =
            "SELECT idx, lease_expires_at FROM episodes WHERE submission_id = $1 AND status = 'RUNNING'".to_string();
        if let Some(idxs) = among {
            // Indices of this handle's own claims: numbers, written into the statement.
            let list = idxs.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
            sql.push_str(&format!(" AND idx IN ({list})"));
        }
        let rows = sqlx::query(&sql)
            .bind(submission)
            .fetch_all(&self.pool)
            .await
            .ctx(|| format!("reading the claims on submission {submission}"))?;
        let what = format!("the claims on submission {submission}");
        rows.iter()
            .map(|row| {
                let expiry: Option<i64> = get(row, "lease_expires_at", &what)?;
                Ok((get(row, "idx", &what)?, expiry.unwrap_or(0)))
            })
            .collect()
    }

    /// This handle's claims on `submission` now: episode index → attempt.
    fn held_claims(&self, submission: &str) -> std::collections::BTreeMap<i64, i64> {
        self.held().claims.get(submission).cloned().unwrap_or_default()
    }

    /// The server is stopping: this handle claims nothing more (episodes, hosted runs), and
    /// runs its sessions end are given back charged to nobody ([`Storage::is_stopping`]).
    /// [`Storage::give_back_on_stop`] starts with it; a stop that cannot give back (another
    /// server holds this replica's id) uses it alone.
    pub fn stop_claiming(&self) {
        self.held().stopping = true;
    }

    /// Whether the server is stopping ([`Storage::stop_claiming`]): a session that ends now
    /// ends because of the stop, not its agent.
    pub fn is_stopping(&self) -> bool {
        self.held().stopping
    }

    /// The claims in hand, locked.
    pub(super) fn held(&self) -> std::sync::MutexGuard<'_, super::Held> {
        self.held.lock().expect("held claims lock")
    }

    /// How many episodes of a submission are in each status.
    async fn status_counts(&self, submission: &str) -> Result<Vec<(EpisodeState, i64)>, StorageError> {
        let rows = sqlx::query("SELECT status, COUNT(*) AS n FROM episodes WHERE submission_id = $1 GROUP BY status")
            .bind(submission)
            .fetch_all(&self.pool)
            .await
            .ctx(|| format!("counting the episodes of submission {submission}"))?;
        let what = format!("episode counts of submission {submission}");
        rows.iter()
            .map(|row| {
                let status: String = get(row, "status", &what)?;
                let n: i64 = get(row, "n", &what)?;
                let status = status
                    .parse::<EpisodeState>()
                    .map_err(|e| StorageError::Corrupt(format!("{what}: {e}")))?;
                Ok((status, n))
            })
            .collect()
    }

    /// A submission's final episodes: (scored, failed unscored). Scored: completed or fell;
    /// unscored: failed or timed out (listed with their reason, left out of the statistics, as
    /// `results` counts them).
    pub async fn final_counts(&self, submission: &str) -> Result<(i64, i64), StorageError> {
        let (mut scored, mut failed) = (0, 0);
        for (status, n) in self.status_counts(submission).await? {
            match status {
                EpisodeState::Completed | EpisodeState::Fell => scored += n,
                EpisodeState::Failed | EpisodeState::Timeout => failed += n,
                EpisodeState::Pending | EpisodeState::Running => {}
            }
        }
        Ok((scored, failed))
    }

    /// (pending, running, finished) episode counts of a submission.
    pub async fn episode_counts(&self, submission: &str) -> Result<(i64, i64, i64), StorageError> {
        let (mut pending, mut running, mut finished) = (0, 0, 0);
        for (status, n) in self.status_counts(submission).await? {
            match status {
                EpisodeState::Pending => pending += n,
                EpisodeState::Running => running += n,
                _ => finished += n,
            }
        }
        Ok((pending, running, finished))
    }

    /// The episodes of a submission that ended without ever running: FAILED with no attempt
    /// (their submission was cancelled or abandoned before their turn came).
    pub async fn never_ran(&self, submission: &str) -> Result<i64, StorageError> {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM episodes WHERE submission_id = $1 AND status = 'FAILED' AND attempts = 0",
        )
        .bind(submission)
        .fetch_one(&self.pool)
        .await
        .ctx(|| format!("counting the episodes of submission {submission} that never ran"))
    }

    /// The RUNNING episodes of a submission whose claim is alive: its lease has not run out, so
    /// a server (this one or a replica) runs them. The others' server died: no agent runs them,
    /// whatever their status still says until a claim settles them ([`Storage::expire_leases`]).
    pub async fn live_claims(&self, submission: &str) -> Result<i64, StorageError> {
        let context = || format!("counting the live claims of submission {submission}");
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM episodes WHERE submission_id = $1 AND status = 'RUNNING' \
             AND lease_expires_at IS NOT NULL AND lease_expires_at >= $2",
        )
        .bind(submission)
        .bind(self.now())
        .fetch_one(&self.pool)
        .await
        .ctx(context)?;
        get(&row, "n", &context())
    }

    /// Episodes the agent ran more than once (a lost connection restarts an episode as its next
    /// attempt; runs the server lost are not counted), per submission of `team` (every team's
    /// for `None`), or of the one `submission`: submission id → (episodes re-run, extra runs).
    /// Submissions with none are left out.
    pub async fn reruns(
        &self,
        team: Option<i64>,
        submission: Option<&str>,
    ) -> Result<std::collections::HashMap<String, (i64, i64)>, StorageError> {
        let rows = sqlx::query(
            "SELECT e.submission_id AS submission_id, \
                    CAST(COUNT(*) AS BIGINT) AS episodes_rerun, \
                    CAST(SUM(e.attempts - e.server_faults - e.uncharged_runs - 1) AS BIGINT) AS reruns \
             FROM episodes e JOIN submissions s ON s.id = e.submission_id \
             WHERE ($1 IS NULL OR s.team_id = $1) AND ($2 IS NULL OR e.submission_id = $2) \
             AND e.attempts - e.server_faults - e.uncharged_runs > 1 \
             GROUP BY e.submission_id",
        )
        .bind(team)
        .bind(submission)
        .fetch_all(&self.pool)
        .await
        .ctx(|| "counting re-run episodes".to_string())?;
        let what = "re-run episode counts";
        rows.iter()
            .map(|row| {
                let id: String = get(row, "submission_id", what)?;
                let episodes: i64 = get(row, "episodes_rerun", what)?;
                let runs: i64 = get(row, "reruns", what)?;
                Ok((id, (episodes, runs)))
            })
            .collect()
    }
}

/// Whether a call on claims is over for them: done, or failed in a way that trying again cannot
/// change. After a transient error (the database unreachable, a deadlock) the caller tries the
/// same call again, and the claims stay held, so renewed, until it does or gives up
/// ([`Storage::forget_claim`]).
fn settled<T>(result: &Result<T, StorageError>) -> bool {
    result.as_ref().map_or_else(|e| !e.is_transient(), |_| true)
}
