//! `POST /api/v1/submissions/hosted`: a team hands in an exported policy (the ONNX file as the
//! request body) and the server evaluates it itself (`crate::hosted`). The file is checked
//! before anything is created or counted: every problem comes back at once (422
//! `unsupported_policy` with `problems`), and a refused file uses no quota. A team over its
//! quota is refused before its file is checked or stored, and the submission and its policy
//! are recorded in one transaction.

use super::*;
use arena_onnx::PolicyOverrides;

/// The largest policy file (the upload limit of `arena_onnx::Limits`).
pub const MAX_POLICY_BYTES: usize = 64 << 20;

/// How long the body of an upload refused before its check is read and dropped, at most.
const DRAIN_FOR: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HostedQuery {
    #[serde(default)]
    benchmark: String,
    #[serde(default)]
    phase: String,
    #[serde(default)]
    agent_name: String,
    /// The uploaded file's name (mjlab exports are all `policy.onnx`).
    #[serde(default)]
    file_name: String,
    /// The folder the file came from (its run's, usually), for the default agent name.
    #[serde(default)]
    folder: String,
    /// The `arena-agent onnx` overrides for what the file's metadata lacks, as a JSON object
    /// (`{"action_scale": [0.5], "anchor_body": "torso_link", ...}`).
    #[serde(default)]
    overrides: String,
}

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/submissions/hosted", post(create_hosted_submission))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_POLICY_BYTES))
}

/// An upload's scratch copy, removed whatever happens to the request (an error, a refusal, or
/// the client leaving mid-check, which drops the handler's future).
struct ScratchFile(std::path::PathBuf);

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Whether the client waits for a `100 Continue` before it sends the body.
fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
}

fn too_large() -> ApiError {
    ApiError(AccessError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("policy file: larger than the limit of {} MiB", MAX_POLICY_BYTES >> 20),
    ))
}

/// The last component of a name that may be a path (separated by slashes or backslashes).
fn base_name(name: &str) -> &str {
    name.rsplit(['/', '\\']).next().unwrap_or(name)
}

fn unsupported(problems: Vec<String>) -> Response {
    // The problems quote the file's metadata, which is the uploader's text: each cut and escaped
    // (a 6000-character body name came back whole, line breaks and bidi overrides too).
    let problems: Vec<String> = problems.iter().map(|p| arena_sdk::protocol::tamed(p, 500)).collect();
    let message = format!("the policy cannot run here: {}", problems.join("; "));
    tracing::debug!("hosted upload refused: {message}");
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(json!({"error": {"code": "unsupported_policy", "message": message, "problems": problems}})),
    )
        .into_response()
}

async fn create_hosted_submission(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    query: Result<ApiQuery<HostedQuery>, ApiError>,
    body: axum::body::Body,
) -> ApiResult {
    let Caller::Team(team) = caller(&state, &headers).await? else {
        return Err(bad_request("submissions belong to teams: use a team token".into()));
    };
    // A declared size over the limit is refused before any of the body is read.
    if let Some(declared) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        && declared > MAX_POLICY_BYTES as u64
    {
        return Err(too_large());
    }
    // Everything that needs no file is answered before the file is read: the token (above), the
    // query, the phase and its window, the quota.
    let early = async {
        // A query the extractor refused is answered as the other early refusals are.
        let ApiQuery(query) = query?;
        let agent_name = access::check_name("agent_name", &query.agent_name, access::MAX_AGENT_NAME, true)?;
        // The name of the file, not a path: it is offered back as the download's name.
        let file_name = access::check_name("file_name", base_name(&query.file_name), 255, true)?;
        let folder = access::check_name("folder", &query.folder, 1024, true)?;
        let overrides = if query.overrides.is_empty() {
            PolicyOverrides::default()
        } else {
            crate::hosted::overrides_from_json(&query.overrides).map_err(bad_request)?
        };
        let now = now_ms();
        let plan = access::resolve_run(
            &state.storage,
            RunRequest {
                benchmark: &query.benchmark,
                phase: &query.phase,
                practice: false,
                hosted: true,
                accepted_in_window: false,
                sessions: &[],
            },
            now,
        )
        .await?;
        let benchmark = super::submissions::load_planned(&state, &plan).await?;
        // Before the file is checked or stored: a team over its quota leaves nothing behind.
        access::check_quota(&state.storage, &team, plan.phase.as_ref(), now).await?;
        let raw_overrides = query.overrides;
        Ok::<_, ApiError>((
            agent_name,
            file_name,
            folder,
            overrides,
            raw_overrides,
            now,
            plan,
            benchmark,
        ))
    }
    .await;
    let (agent_name, file_name, folder, overrides, raw_overrides, now, plan, benchmark) = match early {
        Ok(admitted) => admitted,
        Err(refused) => {
            // A client that asked to be told first (`Expect: 100-continue`, as curl does) sent
            // nothing yet; one that sends its body at once reads the answer only once it has
            // sent it (Python's urllib fails on a connection closed under its upload), so the
            // body is read and dropped (never stored).
            // At most the largest upload, within DRAIN_FOR: a client that trickles its body
            // does not hold the request open.
            if !expects_continue(&headers) {
                use futures_util::StreamExt;
                let drain = async {
                    let mut chunks = body.into_data_stream();
                    let mut read = 0usize;
                    while let Some(Ok(chunk)) = chunks.next().await {
                        read += chunk.len();
                        if read > MAX_POLICY_BYTES {
                            break;
                        }
                    }
                };
                let _ = tokio::time::timeout(DRAIN_FOR, drain).await;
            }
            return Err(refused);
        }
    };
    // The body goes straight to the scratch file, hashed on the way: an upload waiting for its check holds
    // disk, not up to 64 MiB of memory.
    let scratch = ScratchFile(state.objects.scratch_file(".onnx"));
    let (size, sha256) = receive_upload(body, &scratch.0).await?;
    let received_at = now_ms();
    // A file that finished arriving after the close is late, whatever its check would say.
    if let Some(phase) = &plan.phase {
        access::check_open(phase, received_at)?;
    }
    if size == 0 {
        return Err(bad_request(
            "no policy file: send the ONNX file as the request body".into(),
        ));
    }
    let spec = match &plan.phase {
        Some(phase) => access::phase_spec(&benchmark.spec, phase),
        None => benchmark.spec.clone(),
    };
    let checked_path = scratch.0.clone();
    let checked_overrides = overrides.clone();
    // The turn goes with the check, not the request: a client that leaves does not free it
    // while its check still runs. One check per team at once: its slow files wait for each
    // other, not other teams' uploads for them.
    let turn = state.upload_checks.turn(team.id).await?;
    let checked = tokio::task::spawn_blocking(move || {
        let _turn = turn;
        crate::hosted::check_upload(&checked_path, &checked_overrides, &spec)
    })
    .await;
    let policy = match checked {
        Ok(Ok(p)) => p,
        Ok(Err(Ok(problems))) => return Ok(unsupported(problems)),
        Ok(Err(Err(_fault))) => {
            // Logged where it happened; the file is not refused for the server's fault.
            return Err(ApiError(AccessError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the server could not check the file now; try again (its log says why)",
            )));
        }
        Err(e) => {
            tracing::error!("checking an uploaded policy panicked: {e}");
            return Ok(unsupported(vec![
                "checking the file failed on the server (a panic; its log has the details)".into(),
            ]));
        }
    };
    // Stored once per content: an upload of a file already there leaves it as it is (rewriting
    // it changed the other submissions' download tag, which said when another team handed in
    // the same file, and broke their `If-Range` resumes of a file that never changes).
    let key = crate::hosted::policy_key(&sha256);
    let stored = state
        .objects
        .exists(&key)
        .await
        .map_err(|e| internal_error("looking for the policy", e))?;
    if !stored {
        state
            .objects
            .put_file(&key, &scratch.0)
            .await
            .map_err(|e| internal_error("storing the policy", e))?;
    }
    let agent_name = if !agent_name.is_empty() {
        agent_name
    } else {
        fit_agent_name(&default_agent_name(&policy, &file_name, &folder))
    };
    let mut hosted = crate::storage::HostedPolicy {
        submission_id: String::new(),
        sha256,
        file_name,
        bytes: size as i64,
        overrides: if raw_overrides.is_empty() {
            "{}".into()
        } else {
            raw_overrides
        },
        mapping: policy.mapping(),
        created_at: now,
    };
    // The submission and its policy in one transaction: never one without the other.
    let submission = super::submissions::create_planned(
        &state,
        &team,
        &plan,
        &benchmark,
        agent_name.clone(),
        Some((&mut hosted, received_at)),
    )
    .await?;
    tracing::info!(submission = %submission.id, team = team.id, sha256 = %hosted.sha256, "hosted submission created");
    crate::hosted::start(
        state.clone(),
        team,
        submission.benchmark.clone(),
        submission.phase_id.clone().unwrap_or_default(),
        agent_name,
        hosted.clone(),
    );
    let mut v = serde_json::to_value(&submission)?;
    v["hosted"] = json!(hosted);
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

/// Writes the request body to `path` as it arrives: its size and SHA-256 (hex). Past
/// [`MAX_POLICY_BYTES`] it is 413; a body that broke off (a dropped connection, bad chunking)
/// is 400 with the reason.
async fn receive_upload(body: axum::body::Body, path: &std::path::Path) -> Result<(usize, String), ApiError> {
    use futures_util::StreamExt;
    use sha2::Digest;
    use tokio::io::AsyncWriteExt;
    let mut file = tokio::fs::File::create(path)
        .await
        .map_err(|e| internal_error("writing the upload", e))?;
    let mut hash = sha2::Sha256::new();
    let mut size = 0usize;
    let mut chunks = body.into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| bad_request(format!("policy file: the request body could not be read: {e}")))?;
        size += chunk.len();
        if size > MAX_POLICY_BYTES {
            return Err(too_large());
        }
        hash.update(&chunk);
        file.write_all(&chunk)
            .await
            .map_err(|e| internal_error("writing the upload", e))?;
    }
    file.flush()
        .await
        .map_err(|e| internal_error("writing the upload", e))?;
    Ok((size, hex::encode(hash.finalize())))
}

/// A name better than the file's (mjlab exports are all `policy.onnx`): the run the metadata
/// names (mjlab's `run_path`), else the motion it was trained on (holosoma's
/// `motion_config.motion_file`), else the file's stem unless it is `policy`, else the folder it
/// came from, else `hosted-policy`.
fn default_agent_name(policy: &arena_onnx::OnnxPolicy, file_name: &str, folder: &str) -> String {
    let metadata = policy.engine.metadata();
    if let Some(run) = metadata.get("run_path").filter(|r| !r.trim().is_empty()) {
        return run.trim().to_string();
    }
    let stem = |path: &str| {
        std::path::Path::new(path)
            .file_stem()
            .map(|s| s.to_string_lossy().trim().to_string())
            .unwrap_or_default()
    };
    let motion = metadata
        .get("experiment_config")
        .and_then(|c| serde_json::from_str::<Value>(c).ok())
        .and_then(|c| {
            c.pointer("/command/setup_terms/motion_command/params/motion_config/motion_file")
                .and_then(Value::as_str)
                .map(stem)
        })
        .unwrap_or_default();
    if !motion.is_empty() {
        return motion;
    }
    let file = stem(file_name);
    if !file.is_empty() && file != "policy" {
        return file;
    }
    let folder = folder.trim().trim_end_matches('/');
    match folder
        .rsplit('/')
        .next()
        .filter(|f| !f.is_empty() && *f != "." && *f != "..")
    {
        Some(f) => f.to_string(),
        None => "hosted-policy".into(),
    }
}

/// A name from a file's metadata, made fit to be an agent's name rather than checked like a
/// typed one: no control characters, no bidirectional formatting ones (which the server's own
/// `connect` would then refuse, failing the run), at most [`access::MAX_AGENT_NAME`] characters.
fn fit_agent_name(derived: &str) -> String {
    let fit: String = derived
        .chars()
        .filter(|&c| !c.is_control() && !access::is_bidi_control(c))
        .take(access::MAX_AGENT_NAME)
        .collect();
    match fit.trim() {
        "" => "hosted-policy".to_string(),
        name => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_from_metadata_is_made_fit() {
        assert_eq!(fit_agent_name("\u{202E}gnp.ahpla\u{202C} best\n"), "gnp.ahpla best");
        assert_eq!(fit_agent_name("\u{2067}\u{2069} "), "hosted-policy");
        assert_eq!(fit_agent_name(&"x".repeat(300)).chars().count(), access::MAX_AGENT_NAME);
    }
}
