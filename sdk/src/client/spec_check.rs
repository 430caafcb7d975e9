//! The spec a new submission's sessions would get, read on a practice connection that runs
//! nothing and stores nothing (it counts as one connect in the team's request rate and holds one
//! of its session places while it lasts), so that an agent that cannot serve it hears so before a
//! submission exists: a submission counts against its phase's quota from the moment it is made,
//! and one whose agent then fails its `check` used a place for nothing. The Python SDK's
//! `fetch_spec` does the same (docs/protocol.md §10).

use super::{ClientConfig, ClientError, Connection, FATAL_CODES, Mode, now_s};
use crate::protocol::{Connect, Disconnect, EpisodeSpec, Heartbeat, Msg, PROTOCOL_VERSION, codes};
use std::time::Duration;

/// How long the practice connection has to say `connected`.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// How long the server has to close the practice session once told `client_done`.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// What the practice connection told.
#[derive(Debug)]
pub enum SpecAnswer {
    /// The spec a session of the configured benchmark or phase gets with these gains.
    Spec(EpisodeSpec),
    /// The server offers no practice there (`forbidden`: a private phase), in its words.
    NoPractice(String),
    /// No connection could be opened (the run's own first connection then says why).
    Unreached(String),
    /// Asked, with no spec in answer: rate-limited, busy, no answer in time, the connection
    /// lost. A run then learns the spec from its session's `connected`, as without the check.
    Unchecked(String),
}

/// Reads the spec of `config`'s benchmark (or phase) with its gains on a practice connection.
/// A refusal that the submission would meet too (bad token, unknown benchmark, invalid gains,
/// phase closed, quota reached…) is [`ClientError::Refused`]; an answer outside the protocol
/// (no arena at that URL) is [`ClientError::Protocol`].
pub async fn fetch_spec(config: &ClientConfig) -> Result<SpecAnswer, ClientError> {
    let benchmark = match &config.mode {
        Mode::Submission { benchmark, .. } | Mode::Practice { benchmark, .. } => benchmark.clone(),
    };
    let connect = Msg::Connect(Connect {
        protocol_version: PROTOCOL_VERSION,
        agent_name: config.agent_name.clone(),
        token: config.token.clone(),
        mode: "practice".into(),
        benchmark,
        phase: config.phase.clone(),
        joint_stiffness: config.joint_stiffness.clone(),
        joint_damping: config.joint_damping.clone(),
        gain_preset: config.gain_preset.clone(),
        // As the submission's sessions will ask: the spec says the batch and the rows.
        max_batch: config.max_batch,
        reference_goal_once: config.reference_goal_once,
        ..Default::default()
    });
    let mut connection = match Connection::open(config, connect).await {
        Ok(c) => c,
        Err(e) => return Ok(SpecAnswer::Unreached(e.message)),
    };
    let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
    let answer = loop {
        let Ok(received) = tokio::time::timeout_at(deadline, connection.recv()).await else {
            break Ok(SpecAnswer::Unchecked(format!("no answer within {ANSWER_WITHIN:?}")));
        };
        match received {
            Err(lost) => break Ok(SpecAnswer::Unchecked(lost)),
            Ok(Err(undecodable)) => {
                break Err(ClientError::Protocol(format!(
                    "undecodable frame from the server: {undecodable}"
                )));
            }
            Ok(Ok(Msg::Connected(c))) => {
                let bye = Msg::Disconnect(Disconnect {
                    reason: "client_done".into(),
                    ..Default::default()
                });
                let _ = connection.send(bye).await;
                // Until the server closes: its session gives the team's session place back
                // first, which the submission's connect, next, may need.
                let _ =
                    tokio::time::timeout(CLOSE_WAIT, async { while let Ok(Ok(_)) = connection.recv().await {} }).await;
                break Ok(SpecAnswer::Spec(c.spec.unwrap_or_default()));
            }
            Ok(Ok(Msg::Error(e))) if FATAL_CODES.contains(&e.code.as_str()) && e.code != codes::FORBIDDEN => {
                break Err(ClientError::refused(e));
            }
            Ok(Ok(Msg::Error(e))) if e.code == codes::FORBIDDEN => break Ok(SpecAnswer::NoPractice(e.message)),
            Ok(Ok(Msg::Error(e))) => break Ok(SpecAnswer::Unchecked(format!("{}: {}", e.code, e.message))),
            Ok(Ok(Msg::Heartbeat(_))) => {
                let _ = connection.send(Msg::Heartbeat(Heartbeat { time: now_s() })).await;
            }
            Ok(Ok(_)) => {}
        }
    };
    connection.close().await;
    answer
}
