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
    pub created_at: i64,
}

impl Storage {
    /// Records the policy of hosted submission `policy.submission_id`.
    pub async fn insert_hosted_policy(&self, policy: &HostedPolicy) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO hosted_policies (submission_id, sha256, file_name, bytes, overrides, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&policy.submission_id)
        .bind(&policy.sha256)
        .bind(&policy.file_name)
        .bind(policy.bytes)
        .bind(&policy.overrides)
        .bind(policy.created_at)
        .execute(&self.pool)
        .await
        .ctx(|| format!("recording the policy of submission {}", policy.submission_id))?;
        Ok(())
    }

    /// The policy of a hosted submission; None for a submission an agent runs.
    pub async fn hosted_policy(&self, submission_id: &str) -> Result<Option<HostedPolicy>, StorageError> {
        let rows = self.hosted_policies_where(Some(submission_id), false).await?;
        Ok(rows.into_iter().next())
    }

    /// The hosted submissions not yet COMPLETED or FAILED (to run at start-up).
    pub async fn unfinished_hosted_policies(&self) -> Result<Vec<HostedPolicy>, StorageError> {
        self.hosted_policies_where(None, true).await
    }

    /// One submission's, or every one's; only the unfinished ones with `unfinished`.
    async fn hosted_policies_where(
        &self,
        submission: Option<&str>,
        unfinished: bool,
    ) -> Result<Vec<HostedPolicy>, StorageError> {
        let rows = sqlx::query(
            "SELECT h.submission_id, h.sha256, h.file_name, h.bytes, h.overrides, h.created_at \
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
                    created_at: get(row, "created_at", what)?,
                })
            })
            .collect()
    }
}
