//! Hosted submissions (issue 40): the uploaded policy of a submission the server runs itself.

use super::*;

/// The policy of a hosted submission.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostedPolicy {
    pub submission_id: String,
    /// Hex SHA-256 of the file: its key in the object store (`policies/<sha256>.onnx`).
    pub sha256: String,
    /// The uploaded file's name (for people; mjlab exports are all `policy.onnx`).
    pub file_name: String,
    pub bytes: i64,
    /// The overrides given at upload (JSON object; `{}` for none).
    pub overrides: String,
    /// How the policy maps onto the arena (`OnnxPolicy::mapping`; `{}` for files stored
    /// before it was recorded).
    pub mapping: serde_json::Value,
    pub created_at: i64,
}

impl Storage {
    /// Records the policy of hosted submission `policy.submission_id`, its run claimed by this
    /// server.
    pub async fn insert_hosted_policy(&self, policy: &HostedPolicy) -> Result<(), StorageError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .ctx(|| format!("recording the policy of submission {}", policy.submission_id))?;
        self.insert_hosted_policy_on(&mut conn, policy).await
    }

    /// [`Storage::insert_hosted_policy`] on `conn` (a pooled connection or a transaction's).
    pub(super) async fn insert_hosted_policy_on(
        &self,
        conn: &mut sqlx::AnyConnection,
        policy: &HostedPolicy,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO hosted_policies \
             (submission_id, sha256, file_name, bytes, overrides, mapping, created_at, runner, runner_expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&policy.submission_id)
        .bind(&policy.sha256)
        .bind(&policy.file_name)
        .bind(policy.bytes)
        .bind(&policy.overrides)
        .bind(policy.mapping.to_string())
        .bind(policy.created_at)
        .bind(&self.lease.owner)
        .bind(self.lease.expires_at(self.now()))
        .execute(&mut *conn)
        .await
        .ctx(|| format!("recording the policy of submission {}", policy.submission_id))?;
        Ok(())
    }

    /// The policy of a hosted submission; None for a submission an agent runs.
    pub async fn hosted_policy(&self, submission_id: &str) -> Result<Option<HostedPolicy>, StorageError> {
        let rows = self.hosted_policies_where(Some(submission_id), false).await?;
        Ok(rows.into_iter().next())
    }

    /// Claims the run of hosted submission `submission_id` for this server, as episodes are
    /// claimed: when nobody holds it, this server already does (a restarted replica takes back
    /// its own at once), or the holder's claim expired (it died). False when another live
    /// server runs it, or when this one is stopping ([`Storage::give_back_on_stop`]).
    pub async fn claim_hosted_run(&self, submission_id: &str) -> Result<bool, StorageError> {
        if self.held().stopping {
            return Ok(false);
        }
        let now = self.now();
        // Just after a database outage nobody could renew: another server's expired claim is
        // not taken yet (as episodes' are not, [`Storage::expire_leases`]).
        let expired_before = if self.just_reconnected() { i64::MIN } else { now };
        let done = sqlx::query(&format!(
            "UPDATE hosted_policies SET runner = $2, runner_expires_at = $3 \
             WHERE submission_id = $1 AND (runner IS NULL OR runner = $2 OR {} OR runner_expires_at < $4)",
            Lease::same_replica("runner", 5)
        ))
        .bind(submission_id)
        .bind(&self.lease.owner)
        .bind(self.lease.expires_at(now))
        .bind(expired_before)
        .bind(&self.lease.replica)
        .execute(&self.pool)
        .await
        .ctx(|| format!("claiming the hosted run of submission {submission_id}"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Renews this server's claims on the hosted runs `submission_ids`; how many it still holds.
    pub async fn renew_hosted_runs(&self, submission_ids: &[String]) -> Result<u64, StorageError> {
        let expires_at = self.lease.expires_at(self.now());
        let mut renewed = 0;
        for id in submission_ids {
            let done = sqlx::query(
                "UPDATE hosted_policies SET runner_expires_at = $3 WHERE submission_id = $1 AND runner = $2",
            )
            .bind(id)
            .bind(&self.lease.owner)
            .bind(expires_at)
            .execute(&self.pool)
            .await
            .ctx(|| format!("renewing the hosted run of submission {id}"))?;
            renewed += done.rows_affected();
        }
        Ok(renewed)
    }

    /// Gives up this server's claim on a hosted run (it ended here).
    pub async fn release_hosted_run(&self, submission_id: &str) -> Result<(), StorageError> {
        sqlx::query(
            "UPDATE hosted_policies SET runner = NULL, runner_expires_at = NULL \
             WHERE submission_id = $1 AND runner = $2",
        )
        .bind(submission_id)
        .bind(&self.lease.owner)
        .execute(&self.pool)
        .await
        .ctx(|| format!("releasing the hosted run of submission {submission_id}"))?;
        Ok(())
    }

    /// The hosted submissions not yet COMPLETED or FAILED (to run at start-up).
    pub async fn unfinished_hosted_policies(&self) -> Result<Vec<HostedPolicy>, StorageError> {
        self.hosted_policies_where(None, true).await
    }

    /// The hosted submissions of `phase` not yet COMPLETED or FAILED, oldest first (those not
    /// yet run, or running now).
    pub async fn unfinished_hosted_in_phase(&self, phase: &str) -> Result<Vec<String>, StorageError> {
        let rows = sqlx::query(
            "SELECT h.submission_id FROM hosted_policies h JOIN submissions s ON s.id = h.submission_id \
             WHERE s.phase_id = $1 AND s.status IN ('PENDING', 'RUNNING') ORDER BY h.created_at, h.submission_id",
        )
        .bind(phase)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("reading the hosted submissions of phase {phase}"))?;
        rows.iter()
            .map(|row| get(row, "submission_id", "hosted submissions"))
            .collect()
    }

    /// One submission's, or every one's; only the unfinished ones with `unfinished`.
    async fn hosted_policies_where(
        &self,
        submission: Option<&str>,
        unfinished: bool,
    ) -> Result<Vec<HostedPolicy>, StorageError> {
        let rows = sqlx::query(
            "SELECT h.submission_id, h.sha256, h.file_name, h.bytes, h.overrides, h.mapping, h.created_at \
             FROM hosted_policies h JOIN submissions s ON s.id = h.submission_id \
             WHERE ($1 IS NULL OR h.submission_id = $1) AND ($2 = 0 OR s.status IN ('PENDING', 'RUNNING')) \
             ORDER BY h.created_at, h.submission_id",
        )
        .bind(submission)
        .bind(i64::from(unfinished))
        .fetch_all(&self.pool)
        .await
        .ctx(|| "reading hosted policies".to_string())?;
        let what = "hosted policies";
        rows.iter()
            .map(|row| {
                Ok(HostedPolicy {
                    submission_id: get(row, "submission_id", what)?,
                    sha256: get(row, "sha256", what)?,
                    file_name: get(row, "file_name", what)?,
                    bytes: get(row, "bytes", what)?,
                    overrides: get(row, "overrides", what)?,
                    mapping: serde_json::from_str(&get::<String>(row, "mapping", what)?).unwrap_or_default(),
                    created_at: get(row, "created_at", what)?,
                })
            })
            .collect()
    }
}
