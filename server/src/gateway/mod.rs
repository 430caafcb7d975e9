//! The agent gateway: one connection is one protocol-v1 session, whatever the transport
//! ([`ws`]: WebSocket frames, [`grpc`]: a bidirectional gRPC stream). The session code here is
//! shared by both: it admits the Connect (`admission`: token, phase and quota rules of
//! [`crate::access`], the submission created or resumed), starts the orchestrator's lanes,
//! routes Actions to them, keeps heartbeats, and turns every bad message into an Error without
//! ending the session. Transports only decode and encode.

mod admission;
pub mod grpc;
mod grpc_opening;
pub mod ws;
pub(crate) mod ws_handshake;
mod ws_opening;

use crate::catalog::LoadedBenchmark;
use crate::orchestrator::{self, JobSource, RunContext, RunOutcome, Sink};
use crate::outbox::Outbox;
use crate::state::AppState;
use crate::storage::{EpisodeState, StorageError, Team, now_ms};
use admission::admit;
use arena_bench::spec::Episode;
use arena_runner::episode::episode_spec;
use arena_runner::revealed;
use arena_sdk::protocol::{
    self, Connect, Connected, DecodeError, Disconnect, EpisodeSpec, Heartbeat, Msg, PROTOCOL_VERSION, ResetEpisode,
    codes,
};
use futures_util::{Stream, StreamExt};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// How long a new connection may take to send Connect.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The `disconnect` reason of a session the server ends because it is stopping
/// ([`crate::session_stop`]); the protocol's constant, which the SDKs wait out.
pub use arena_sdk::protocol::SHUTDOWN;

/// Practice episodes asked for that may wait for a slot at once (a flood of `reset_episode`
/// otherwise queued without bound); the protocol's constant, which the SDKs keep to.
pub use arena_sdk::protocol::PRACTICE_WAITING;

use arena_sdk::protocol::quoted;

fn error(code: &str, message: impl Into<String>) -> Msg {
    Msg::Error(protocol::Error::new(code, message))
}

/// The last message of a session the server's stop ends.
fn shutdown() -> Msg {
    Msg::Disconnect(Disconnect {
        reason: SHUTDOWN.into(),
        submission_status: String::new(),
        ..Default::default()
    })
}

/// An Error that refuses a request (boxed: `Msg` is large and travels in `Result`s).
fn refuse(code: &str, message: impl Into<String>) -> Box<Msg> {
    Box::new(error(code, message))
}

/// An internal failure while admitting a session: the details (which may name server files) go
/// to the log, the agent gets what it was doing and where to look.
fn refuse_internal(doing: &str, e: impl std::fmt::Display) -> Box<Msg> {
    tracing::error!("{doing}: {e}");
    refuse(
        codes::INTERNAL,
        format!("{doing}: internal server error (the server's log has the details)"),
    )
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A message from the client, as a transport delivered it.
// One value per received frame, moved once into the session: boxing the large `Msg` (a
// Connect with its gains) would add an allocation to every action instead.
#[allow(clippy::large_enum_variant)]
pub enum Incoming {
    Msg(Msg),
    /// A frame that could not be decoded; answered with an Error, the session goes on.
    Bad(DecodeError),
    /// A frame after which the transport can read nothing more (gRPC: an undecodable message
    /// leaves the stream at a meaningless byte offset): answered with the Error, then
    /// Disconnect {reason: the error's code}; the session ends as for a lost connection.
    Fatal(DecodeError),
    /// The connection ended.
    Closed,
    /// A transport-level frame with no protocol meaning (e.g. a WebSocket ping).
    Ignore,
}

/// How a transport encodes the server's messages, which sets how many episodes fit one
/// GetAction (each message is at most [`crate::app::MAX_FRAME_BYTES`], docs/protocol.md §1).
#[derive(Debug, Clone)]
pub enum Replies {
    /// Protobuf (gRPC): 4 bytes a value.
    Protobuf,
    /// WebSocket: the encoding of the client's `connect` frame (binary when set, else JSON text,
    /// whose widest float takes 16 bytes with its separator).
    LikeTheClient(Arc<std::sync::atomic::AtomicBool>),
    /// Messages handed over in process (a hosted policy): no limit.
    InProcess,
}

impl Replies {
    /// Bytes a value of an observation row takes at most; None without a size limit.
    fn bytes_per_value(&self) -> Option<usize> {
        match self {
            Replies::Protobuf => Some(4),
            Replies::LikeTheClient(binary) if binary.load(std::sync::atomic::Ordering::Acquire) => Some(4),
            Replies::LikeTheClient(_) => Some(16),
            Replies::InProcess => None,
        }
    }

    /// Bytes a value of a revealed reference (a double) takes at most; None without a limit.
    fn bytes_per_reference_value(&self) -> Option<usize> {
        match self {
            Replies::Protobuf => Some(revealed::BINARY_BYTES_PER_VALUE),
            Replies::LikeTheClient(binary) if binary.load(std::sync::atomic::Ordering::Acquire) => {
                Some(revealed::BINARY_BYTES_PER_VALUE)
            }
            Replies::LikeTheClient(_) => Some(revealed::JSON_BYTES_PER_VALUE),
            Replies::InProcess => None,
        }
    }
}

/// Episodes one GetAction may carry and stay within a message: rows of `row_values` values at
/// `bytes_per_value`, each with its episode id and step (and JSON's keys), beside the message's
/// own fields.
pub fn batch_within_message(row_values: usize, bytes_per_value: usize) -> usize {
    const MESSAGE_FIELDS: usize = 64 << 10;
    const PER_EPISODE: usize = 64;
    ((crate::app::MAX_FRAME_BYTES - MESSAGE_FIELDS) / (row_values * bytes_per_value + PER_EPISODE)).max(1)
}

/// Runs one session on any transport: `incoming` yields the client's messages, `out` carries
/// the server's (the transport encodes them as `replies` says, and closes after a Disconnect).
pub async fn session<S>(state: Arc<AppState>, incoming: S, out: Outbox, replies: Replies)
where
    S: Stream<Item = Incoming> + Unpin,
{
    session_of(state, None, incoming, out, replies).await
}

/// A session the server runs for `team` itself (the hosted evaluation of an uploaded policy,
/// `crate::hosted`): admitted like any other, but authenticated by the caller, not a token.
pub async fn hosted_session<S>(state: Arc<AppState>, team: Team, incoming: S, out: Outbox)
where
    S: Stream<Item = Incoming> + Unpin,
{
    session_of(state, Some(team), incoming, out, Replies::InProcess).await
}

async fn session_of<S>(state: Arc<AppState>, team: Option<Team>, mut incoming: S, out: Outbox, replies: Replies)
where
    S: Stream<Item = Incoming> + Unpin,
{
    let first = tokio::select! {
        // First: a Connect already waiting (an in-process one is) must not start a session
        // on a server that is stopping.
        biased;
        // A connection that has not connected yet when the server stops: nothing to give back.
        () = state.session_stop.told() => {
            let _ = out.send(shutdown());
            return;
        }
        first = first_message(&mut incoming, CONNECT_TIMEOUT) => first,
    };
    let Some(first) = first else {
        let _ = out.send(error(codes::UNEXPECTED_MESSAGE, "no Connect within 30 s"));
        return;
    };
    let connect = match first {
        Incoming::Msg(Msg::Connect(c)) => c,
        Incoming::Msg(other) => {
            let m = format!("the first message must be connect, got {}", protocol::type_name(&other));
            let _ = out.send(error(codes::UNEXPECTED_MESSAGE, m));
            return;
        }
        Incoming::Bad(e) | Incoming::Fatal(e) => {
            let _ = out.send(e.to_msg());
            return;
        }
        Incoming::Closed | Incoming::Ignore => return,
    };
    if let Err(refusal) = run_session(&state, team.as_ref(), connect, &out, &mut incoming, &replies).await {
        // Messages name tokens by id only, so refusals can be logged as they are.
        if let Msg::Error(e) = refusal.as_ref() {
            tracing::info!(code = %e.code, "connect refused: {}", e.message);
        }
        let _ = out.send(*refusal);
    }
}

/// The `disconnect` reason of a session whose submission a newer connection of its team took
/// over (`Connect.previous_session_id` or `connect_key`).
pub const SESSION_REPLACED: &str = "session_replaced";

/// The `connect_key` a session attached with: the one its connect carried, where the connect
/// named no submission (the server ignores it otherwise).
fn attached_key(connect: &Connect) -> &str {
    match connect.submission_id.is_empty() {
        true => &connect.connect_key,
        false => "",
    }
}

/// Resolves when the session's submission is handed to its client's new connection (never
/// for a practice session, which holds none).
async fn given_way(attachment: Option<&crate::attachments::Attachment>) {
    match attachment {
        Some(a) => a.given_way().await,
        None => std::future::pending().await,
    }
}

/// The client's first message with protocol meaning, or None when `limit` has passed since the
/// connection opened. The deadline is the connection's, not each message's: transport frames
/// with no meaning (pings) do not extend it.
async fn first_message<S>(incoming: &mut S, limit: Duration) -> Option<Incoming>
where
    S: Stream<Item = Incoming> + Unpin,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, incoming.next()).await {
            Ok(Some(Incoming::Ignore)) => continue,
            Ok(first) => return Some(first.unwrap_or(Incoming::Closed)),
            Err(_) => return None,
        }
    }
}

async fn run_session<S>(
    state: &Arc<AppState>,
    hosted: Option<&Team>,
    connect: Connect,
    out: &Outbox,
    incoming: &mut S,
    replies: &Replies,
) -> Result<(), Box<Msg>>
where
    S: Stream<Item = Incoming> + Unpin,
{
    let mut admitted = admit(
        state,
        hosted,
        &connect,
        replies.bytes_per_reference_value(),
        replies.bytes_per_value(),
    )
    .await?;
    // Held for the session's life: the team's place among its concurrent sessions.
    let _place = admitted.place.take();
    // Told to stop meanwhile: no lane started. A submission this Connect created goes on to
    // `connected` (the client must learn its id), whose first loop turn then ends the session.
    let created = connect.submission_id.is_empty() && admitted.submission.is_some();
    if state.session_stop.is_told() && !created {
        return Err(Box::new(shutdown()));
    }
    let session_id = format!("ses-{}", uuid::Uuid::new_v4().simple());
    // One session per submission; the one the client lost gives way to it (`attachments`).
    let attachment = match &admitted.submission {
        Some(s) => match state
            .attached
            .attach(&s.id, &session_id, &connect.previous_session_id, attached_key(&connect))
            .await
        {
            Ok(a) => Some(a),
            Err(_) => {
                return Err(refuse(
                    codes::SUBMISSION_BUSY,
                    format!("submission {} is being run by another session; retry shortly", s.id),
                ));
            }
        },
        None => None,
    };
    let config = &state.config;
    let spec = &admitted.benchmark.spec;
    let step_timeout = if config.step_timeout_s > 0.0 {
        Duration::from_secs_f64(config.step_timeout_s)
    } else {
        Duration::from_millis(spec.limits.step_timeout_ms)
    };
    let mut max_batch = config.max_batch as usize;
    if connect.max_batch > 0 {
        max_batch = max_batch.min(connect.max_batch as usize);
    }
    // A client that asks gets each `reference_goal` row once (docs/protocol.md §5): rows of
    // BFM-Zero's benchmarks shrink from 4,717 values to 1,028.
    let goal_rows_once = connect.reference_goal_once && spec.observations.reference_goal_horizon > 0;
    // Every GetAction must fit one message: large rows (BFM-Zero's `reference_goal`) at large
    // batches would exceed it, and the client would drop the connection at every request.
    if let Some(bytes) = replies.bytes_per_value() {
        let row = arena_runner::observations::ObservationPlan::for_spec(spec)
            .sending_goal_rows_once(goal_rows_once)
            .size();
        let fit = batch_within_message(row, bytes);
        if fit < max_batch {
            tracing::info!(row, fit, asked = max_batch, "batch limited to what one message holds");
            max_batch = fit;
        }
    }
    let remaining = admitted.remaining;
    let practice = admitted.submission.is_none();
    // Lanes × batch covers at most the episodes left (practice: one lane, batch as asked).
    let (lanes, batch) = if practice {
        (1, max_batch)
    } else {
        crate::orchestrator::lanes_and_batch(config.lanes, max_batch, remaining)
    };
    let (practice_tx, source) = if practice {
        let (tx, rx) = mpsc::sync_channel(PRACTICE_WAITING);
        (Some(tx), JobSource::Practice(Mutex::new(rx)))
    } else {
        (None, JobSource::Claims)
    };
    let sink = match &admitted.submission {
        Some(s) => {
            match state.storage.mark_submission_running(&s.id).await {
                Ok(()) => {}
                // Ended meanwhile (its last session, or another replica, completed it).
                Err(StorageError::Conflict(why)) => {
                    let status = match state.storage.submission(&s.id).await {
                        Ok(Some(now)) => now.status.as_str().to_string(),
                        _ => String::new(),
                    };
                    return Err(admission::submission_finished(state, &s.id, &status, why).await);
                }
                Err(e) => return Err(refuse_internal("starting the submission", e)),
            }
            if admitted.renamed {
                state
                    .storage
                    .set_agent_name(&s.id, &s.agent_name)
                    .await
                    .map_err(|e| refuse_internal("recording the resuming agent", e))?;
            }
            if let Err(e) = state
                .storage
                .start_session(&session_id, &s.id, &s.agent_name, crate::storage::now_ms())
                .await
            {
                return Err(refuse_internal("recording the session", e));
            }
            // The session the client lost may run on another replica, which no in-memory
            // hand-over reaches: marked in the database, it ends as a lost connection at its
            // next missed deadline rather than timing its episodes out for good.
            if !connect.previous_session_id.is_empty() {
                match state
                    .storage
                    .mark_session_replaced(&s.id, &connect.previous_session_id, crate::storage::now_ms())
                    .await
                {
                    Ok(true) => tracing::info!(
                        session = %connect.previous_session_id,
                        submission = %s.id,
                        "the session the client lost is marked replaced"
                    ),
                    Ok(false) => {}
                    Err(e) => tracing::warn!("marking the client's lost session replaced: {e}"),
                }
            }
            Sink::Submission {
                storage: state.storage.clone(),
                submission_id: s.id.clone(),
                objects: state.objects.clone(),
                max_attempts: config.max_attempts,
            }
        }
        None => Sink::Practice,
    };
    let _ = out.send(Msg::Connected(Connected {
        session_id: session_id.clone(),
        protocol_version: PROTOCOL_VERSION,
        heartbeat_interval_s: config.heartbeat_interval_s,
        heartbeat_timeout_s: config.heartbeat_timeout_s,
        submission_id: admitted.submission.as_ref().map(|s| s.id.clone()).unwrap_or_default(),
        benchmark: spec.name.clone(),
        episodes_total: admitted.submission.as_ref().map_or(0, |s| s.episodes_total as u32),
        episodes_remaining: remaining as u32,
        spec: Some(EpisodeSpec {
            reference_goal_once: goal_rows_once,
            ..episode_spec(
                spec,
                admitted.gains.as_ref(),
                batch as u32,
                lanes as u32,
                step_timeout.as_secs_f64(),
            )
        }),
    }));
    tracing::info!(
        session = %session_id,
        submission = admitted.submission.as_ref().map(|s| s.id.as_str()).unwrap_or("practice"),
        benchmark = %spec.name,
        remaining,
        lanes,
        batch,
        "session started"
    );
    let answers_heard = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let unanswered_since_ms = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let ending = Arc::new(crate::orchestrator::SessionEnding::default());
    let ctx = Arc::new(RunContext {
        benchmark: admitted.benchmark.clone(),
        gains: admitted.gains.clone(),
        out: out.clone(),
        step_timeout,
        hosted: hosted.is_some(),
        answers_heard: answers_heard.clone(),
        unanswered_since_ms: unanswered_since_ms.clone(),
        ending: ending.clone(),
        session_id: session_id.clone(),
        lanes,
        batch,
        sim_threads: config.sim_threads as usize,
        // The configuration was validated at start-up, the backend keys included.
        backend: config.backend().unwrap_or_default(),
        warm: state.warm_simulators.clone(),
        sink,
        source,
        reveal_results: admitted.reveal_results,
        reference_value_bytes: replies.bytes_per_reference_value(),
        row_value_bytes: replies.bytes_per_value(),
        goal_rows_once,
        runtime: tokio::runtime::Handle::current(),
    });
    let mut handle = orchestrator::start(ctx);
    let mut inboxes = Some(handle.action_inboxes);
    let mut practice_tx = practice_tx;
    // Practice episodes are numbered in the order the client asks for them.
    let mut practice_count = 0usize;
    let heartbeat_every = Duration::from_secs_f64(config.heartbeat_interval_s);
    let silence_limit = Duration::from_secs_f64(config.heartbeat_timeout_s);
    // Beats on their own timer, so each comes on time (a shared 1 s ticker compared against the
    // interval made a 1 s beat slip to 2 s whenever the tick landed a hair early); silence is
    // checked every second.
    let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat_every, heartbeat_every);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticker = tokio::time::interval(silence_limit.min(Duration::from_secs(1)));
    let mut last_heard = Instant::now();
    // The agent ended its submission itself (`agent_cannot_serve`): its session's outcome says so.
    let mut agent_cannot_serve = false;
    let told = state.session_stop.told();
    tokio::pin!(told);
    let outcome = loop {
        tokio::select! {
            outcome = &mut handle.outcome => break outcome.unwrap_or(RunOutcome::Error("the run stopped unexpectedly".into())),
            // A client far behind in reading gets nothing more read until it catches up (the
            // transport's write deadline ends one that stops reading).
            () = tokio::time::sleep(Duration::from_millis(10)), if inboxes.is_some() && out.backed_up() => {}
            message = incoming.next(), if inboxes.is_some() && !out.backed_up() => {
                let message = message.unwrap_or(Incoming::Closed);
                if !matches!(message, Incoming::Closed) {
                    last_heard = Instant::now();
                }
                // Only an Action shows that the agent received a request (the SDKs send
                // heartbeats of their own whether or not anything arrives): a lane whose
                // request went unanswered claims again on this (`RunContext::answers_heard`).
                if matches!(message, Incoming::Msg(Msg::Action(_))) {
                    answers_heard.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    unanswered_since_ms.store(0, std::sync::atomic::Ordering::Relaxed);
                }
                match message {
                    Incoming::Closed => {
                        tracing::info!(session = %session_id, "agent connection closed");
                        inboxes = None;
                        practice_tx = None;
                    }
                    Incoming::Ignore => {}
                    Incoming::Bad(e) => {
                        let _ = out.send(e.to_msg());
                    }
                    Incoming::Fatal(e) => {
                        tracing::info!(session = %session_id, "{}: {}; ending the session", e.code, e.message);
                        let _ = out.send(e.to_msg());
                        let _ = out.send(Msg::Disconnect(Disconnect {
                            reason: e.code.into(),
                            submission_status: String::new(),
                            ..Default::default()
                        }));
                        inboxes = None;
                        practice_tx = None;
                    }
                    Incoming::Msg(Msg::Action(a)) => {
                        let lanes = inboxes.as_ref().expect("guarded by the select");
                        let lane = (a.step % lanes.len() as u64) as usize;
                        let refused = match lanes[lane].try_send(a) {
                            Ok(()) => None,
                            // That lane has run out of episodes: nothing awaits this step.
                            Err(mpsc::TrySendError::Disconnected(a)) => {
                                Some((a.step, "its lane has finished its episodes".to_string()))
                            }
                            // An agent answers each request once: the lane (busy stepping, or
                            // starting its simulator) holds more Actions than it could have asked for.
                            Err(mpsc::TrySendError::Full(a)) => Some((
                                a.step,
                                format!(
                                    "{} Actions already wait for its lane, which asks for one at a time; this one is dropped",
                                    orchestrator::ACTIONS_WAITING
                                ),
                            )),
                        };
                        if let Some((step, why)) = refused {
                            let _ = out.send(Msg::Error(protocol::Error {
                                code: codes::STALE_STEP.into(),
                                message: format!("step {step} is not awaiting an Action: {why}"),
                                step,
                                ..Default::default()
                            }));
                        }
                    }
                    Incoming::Msg(Msg::Heartbeat(_)) => {}
                    Incoming::Msg(Msg::ResetEpisode(r)) => match &practice_tx {
                        Some(tx) => match practice_episode(&admitted.benchmark, &r, practice_count) {
                            Ok(e) => match tx.try_send(e) {
                                Ok(()) => practice_count += 1,
                                Err(mpsc::TrySendError::Full(_)) => {
                                    let _ = out.send(error(
                                        codes::INVALID_MESSAGE,
                                        format!(
                                            "reset_episode: {PRACTICE_WAITING} practice episodes are already waiting to start; \
                                             ask for more as they start"
                                        ),
                                    ));
                                }
                                // The lane has stopped: the session is ending.
                                Err(mpsc::TrySendError::Disconnected(_)) => {}
                            },
                            Err(m) => {
                                let _ = out.send(*m);
                            }
                        },
                        None => {
                            let _ = out.send(error(
                                codes::UNEXPECTED_MESSAGE,
                                "reset_episode is only for practice sessions",
                            ));
                        }
                    },
                    Incoming::Msg(Msg::Disconnect(d)) => {
                        // The agent's words, escaped and cut (a line break forged log lines).
                        tracing::info!(session = %session_id, reason = %protocol::tamed(&d.reason, 200), "agent disconnected");
                        ending.agent_disconnected(&d.reason);
                        // A hosted run's submission is ended by the hosted runner, in its own
                        // words (`crate::hosted`): both raced to end it, and either won.
                        if let (Some(why), Some(s), None) = (
                            d.reason.strip_prefix(protocol::AGENT_CANNOT_SERVE),
                            admitted.submission.as_ref(),
                            hosted,
                        ) {
                            agent_cannot_serve =
                                end_unserved_submission(state, &s.id, why.trim_start_matches([':', ' '])).await;
                        }
                        inboxes = None;
                        practice_tx = None;
                    }
                    Incoming::Msg(other) => {
                        let _ = out.send(error(
                            codes::UNEXPECTED_MESSAGE,
                            format!("{} is not expected from a client during a session", protocol::type_name(&other)),
                        ));
                    }
                }
            }
            // The server is stopping and has given its running episodes back (charged to
            // nobody): the agent is told so and reconnects (to another replica, or to this
            // one restarted); the lanes stop at their next step.
            // (Polled only until it fires: the branch then sets `inboxes` to None.)
            () = &mut told, if inboxes.is_some() => {
                tracing::info!(session = %session_id, "the server is stopping; ending the session");
                let _ = out.send(shutdown());
                inboxes = None;
                practice_tx = None;
            }
            // The client lost this connection (the server had not noticed) and its new one
            // takes the session's place: a lost connection, running episodes re-run.
            () = given_way(attachment.as_ref()), if inboxes.is_some() => {
                tracing::info!(session = %session_id, "agent connection replaced by its client's new one");
                // Said, should this connection be alive after all (a teammate's client).
                let _ = out.send(Msg::Disconnect(Disconnect {
                    reason: SESSION_REPLACED.into(),
                    ..Default::default()
                }));
                inboxes = None;
                practice_tx = None;
            }
            _ = ticker.tick() => {
                // Heartbeats, but no answer since a request went unanswered: its lanes claim
                // nothing (an agent that no longer reads the requests), so the session ends
                // as a silent one does.
                let unanswered = match unanswered_since_ms.load(std::sync::atomic::Ordering::Relaxed) {
                    0 => false,
                    since => crate::storage::now_ms() - since > silence_limit.as_millis() as i64,
                };
                if unanswered && inboxes.is_some() {
                    tracing::warn!(session = %session_id, "no Action for {silence_limit:?} after a missed deadline; ending the session");
                    let _ = out.send(Msg::Disconnect(Disconnect {
                        reason: "heartbeat_timeout".into(),
                        ..Default::default()
                    }));
                    inboxes = None;
                    practice_tx = None;
                }
                if last_heard.elapsed() > silence_limit && inboxes.is_some() {
                    tracing::warn!(session = %session_id, "no message for {silence_limit:?}; ending the session");
                    let _ = out.send(Msg::Disconnect(Disconnect {
                        reason: "heartbeat_timeout".into(),
                        submission_status: String::new(),
                        ..Default::default()
                    }));
                    inboxes = None;
                    practice_tx = None;
                }
            }
            _ = beat.tick() => {
                let _ = out.send(Msg::Heartbeat(Heartbeat { time: now_s() }));
            }
        }
    };
    drop(practice_tx);
    tracing::info!(session = %session_id, ?outcome, "session ended");
    if admitted.submission.is_some() {
        let word = match &outcome {
            RunOutcome::SubmissionComplete => "completed",
            // The agent's own end, not the organiser's cancel.
            _ if agent_cannot_serve => "agent_cannot_serve",
            RunOutcome::SubmissionCancelled => "cancelled",
            RunOutcome::Stopped => "stopped",
            RunOutcome::Error(_) => "error",
        };
        if let Err(e) = state
            .storage
            .end_session(&session_id, word, crate::storage::now_ms())
            .await
        {
            tracing::warn!(session = %session_id, "{e}");
        }
    }
    if let RunOutcome::Error(e) = outcome {
        tracing::error!(session = %session_id, "{e}");
        // The details may name server files: they stay in the log.
        let _ = out.send(error(
            codes::INTERNAL,
            "the run stopped on a server error (the server's log has the details); reconnecting resumes the submission",
        ));
        let _ = out.send(Msg::Disconnect(Disconnect {
            reason: "error".into(),
            submission_status: String::new(),
            ..Default::default()
        }));
    }
    Ok(())
}

/// The most of an agent's `agent_cannot_serve` reason a submission keeps (the SDKs' reasons
/// name an observation group or a width: a few dozen characters).
const AGENT_REASON_CHARS: usize = 300;

/// A submission whose agent said it cannot serve the session's spec (a client `disconnect` with
/// [`protocol::AGENT_CANNOT_SERVE`]) is ended FAILED with that reason when it has finished no
/// episode: left RUNNING, it would count against the team's quota until its idle expiry (a
/// day by default), and no run of that agent can resume it. One with finished episodes stays
/// RUNNING for an agent that can. Whether it ended the submission.
async fn end_unserved_submission(state: &AppState, id: &str, why: &str) -> bool {
    let finished = match state.storage.episodes(id).await {
        Ok(rows) => rows
            .iter()
            .any(|r| !matches!(r.status, EpisodeState::Pending | EpisodeState::Running)),
        Err(e) => {
            tracing::warn!(submission = %id, "looking at an unserved submission's episodes: {e}");
            return false;
        }
    };
    if finished {
        return false;
    }
    // The agent's words: stored on the submission and each unfinished episode, shown on pages
    // and terminals, so cut and escaped (16 MiB of them, with line breaks, ESC and bidi
    // overrides, went into every episode's row).
    let reason = format!(
        "the agent could not serve this session: {}",
        protocol::tamed(why, AGENT_REASON_CHARS)
    );
    match state.storage.cancel_submission(id, &reason).await {
        Ok(()) => {
            tracing::info!(submission = %id, "{reason}: ended FAILED (no episode had finished)");
            true
        }
        Err(e) => {
            tracing::warn!(submission = %id, "ending an unserved submission: {e}");
            false
        }
    }
}

/// The episode a practice client asks for.
fn practice_episode(benchmark: &LoadedBenchmark, r: &ResetEpisode, index: usize) -> Result<Episode, Box<Msg>> {
    let Some(motion) = benchmark.library.motions.iter().position(|m| m.name == r.motion) else {
        let names: Vec<&str> = benchmark.library.motions.iter().map(|m| m.name.as_str()).collect();
        return Err(refuse(
            codes::UNKNOWN_MOTION,
            format!(
                "benchmark {} has no motion {} (it has: {})",
                benchmark.spec.name,
                quoted(&r.motion),
                names.join(", ")
            ),
        ));
    };
    let length = benchmark.library.motions[motion].length_s;
    if !(r.start_s.is_finite() && r.start_s >= 0.0 && r.start_s < length) {
        return Err(refuse(
            codes::INVALID_MESSAGE,
            format!("reset_episode.start_s must be in [0, {length:.3}), got {}", r.start_s),
        ));
    }
    if !(r.duration_s.is_finite() && r.duration_s >= 0.0) {
        return Err(refuse(
            codes::INVALID_MESSAGE,
            format!("reset_episode.duration_s must be >= 0, got {}", r.duration_s),
        ));
    }
    let rest = length - r.start_s;
    let duration = if r.duration_s == 0.0 {
        rest
    } else {
        r.duration_s.min(rest)
    };
    Ok(Episode {
        index,
        motion,
        start_s: r.start_s,
        duration_s: duration,
        repeat: 0,
        seed: r.seed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that pings and never connects is dropped at the connection's deadline: pings
    /// do not restart it (they did: such a connection stayed open past 100 s).
    #[tokio::test]
    async fn pings_do_not_extend_the_connect_deadline() {
        let limit = Duration::from_millis(300);
        let mut pings = Box::pin(futures_util::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Some((Incoming::Ignore, ()))
        }));
        let outcome = tokio::time::timeout(Duration::from_secs(10), first_message(&mut pings, limit)).await;
        assert!(matches!(outcome, Ok(None)), "the deadline was extended by pings");
        let mut one = Box::pin(futures_util::stream::iter([Incoming::Ignore, Incoming::Closed]));
        assert!(matches!(first_message(&mut one, limit).await, Some(Incoming::Closed)));
    }
}
