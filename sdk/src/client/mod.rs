//! The client: connects over WebSocket or gRPC, runs a submission or a practice session with an
//! [`Agent`], answers heartbeats, and reconnects with exponential backoff after a lost connection
//! (a submission resumes where it stopped: the server re-runs only unfinished episodes). The
//! session logic is the same on both transports; [`Connection`] only moves messages.

use crate::agent::{Agent, Batch};
use crate::goal_rows::GoalRowsOnce;
use crate::layout::ObservationLayout;
use crate::protocol::{
    self, Action, Connect, Connected, Disconnect, Encoding, EpisodeAction, EpisodeEnd, EpisodeInfo, GetAction,
    Heartbeat, Msg, PRACTICE_WAITING, PROTOCOL_VERSION, ResetEpisode, SHUTDOWN, codes,
};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod connection;
mod console;
mod spec_check;
use connection::Connection;
pub use console::{DEFAULT_SERVER, endpoint, print_event, report_done};
pub use spec_check::{SpecAnswer, fetch_spec};

/// What the client asks the server for.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Run a submission of `benchmark`, or attach to `submission_id` (created over REST, or
    /// left unfinished by an earlier connection).
    Submission {
        benchmark: String,
        submission_id: Option<String>,
    },
    /// Run the given episodes of `benchmark`; nothing is stored or ranked.
    Practice {
        benchmark: String,
        episodes: Vec<ResetEpisode>,
    },
}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The agent endpoint; its scheme picks the transport: `ws://127.0.0.1:8080/api/v1/agent`
    /// (WebSocket) or `grpc://127.0.0.1:8080` (gRPC, plaintext HTTP/2 on the same port).
    pub url: String,
    pub token: String,
    pub agent_name: String,
    pub mode: Mode,
    /// Challenge phase to run in (empty: none). The phase's benchmark applies.
    pub phase: String,
    /// WebSocket frames: binary (protobuf) or text (JSON). gRPC is always protobuf.
    pub encoding: Encoding,
    /// Largest batch the agent wants (0 = the server's limit).
    pub max_batch: u32,
    /// Joint-position benchmarks: the PD gains the agent was trained with (29 each, G1 joint
    /// order; empty = the benchmark's default), or the name of one of the benchmark's presets.
    pub joint_stiffness: Vec<f64>,
    pub joint_damping: Vec<f64>,
    pub gain_preset: String,
    /// Ask for each `reference_goal` row once (docs/protocol.md §5): the server sends an
    /// episode's first rows with its start and one row per request instead of H, and the
    /// client rebuilds the group ([`crate::goal_rows`]); the agent sees the same values.
    /// Default true; false asks for whole rows.
    pub reference_goal_once: bool,
    /// Connection attempts after a lost connection before giving up.
    pub max_reconnects: u32,
    /// After the server said it is stopping (`disconnect {shutdown}`: a deploy, a restart),
    /// how long the attempts to reconnect do not count against `max_reconnects`: a restart that
    /// takes a minute must not end the run. Default [`RESTART_WAIT`]; zero counts them at once.
    pub restart_wait: Duration,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// How long opening a connection (TCP, TLS, the WebSocket handshake or the gRPC session)
    /// may take before the attempt counts as failed: a proxy that accepts and never answers
    /// must not hang the run.
    pub connect_timeout: Duration,
    /// A session inside the server's own process instead of a network connection (the
    /// server's hosted evaluation of an uploaded policy): when set, `url` only names it.
    pub local: Option<LocalConnector>,
    /// Before a new submission (no `submission_id`), read the spec on a practice connection
    /// ([`fetch_spec`]) and check the agent against it: an agent that cannot serve it ends the
    /// run with [`ClientError::Agent`] before any submission is made (one made counts against
    /// its phase's quota). Default false; the SDK's command line sets it unless `--no-check`.
    pub spec_check: bool,
}

/// Opens an in-process session: the messages to the server, and the server's messages. The
/// first message sent is the `connect`.
#[derive(Clone)]
pub struct LocalConnector(
    pub  std::sync::Arc<
        dyn Fn() -> (
                tokio::sync::mpsc::UnboundedSender<Msg>,
                tokio::sync::mpsc::UnboundedReceiver<Msg>,
            ) + Send
            + Sync,
    >,
);

impl std::fmt::Debug for LocalConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalConnector")
    }
}

impl ClientConfig {
    pub fn new(url: impl Into<String>, token: impl Into<String>, mode: Mode) -> Self {
        Self {
            url: url.into(),
            token: token.into(),
            agent_name: "arena-sdk-agent".into(),
            mode,
            phase: String::new(),
            encoding: Encoding::Binary,
            max_batch: 0,
            joint_stiffness: Vec::new(),
            joint_damping: Vec::new(),
            gain_preset: String::new(),
            reference_goal_once: true,
            max_reconnects: 10,
            restart_wait: RESTART_WAIT,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            local: None,
            spec_check: false,
        }
    }
}

/// Something the client saw, for progress displays and logs.
#[derive(Debug)]
pub enum ClientEvent<'a> {
    Connected(&'a Connected),
    EpisodeStart(&'a [EpisodeInfo]),
    EpisodeEnd(&'a EpisodeEnd),
    /// An Error the server sent during the session (the session goes on).
    ServerError(&'a protocol::Error),
    Reconnecting {
        /// Reconnections tried since the last finished episode (those while a stopping server
        /// is waited for included).
        attempt: u32,
        delay: Duration,
        error: &'a str,
    },
}

/// The outcome of [`run`].
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// Empty in practice mode.
    pub submission_id: String,
    /// The submission's status when the last session ended (e.g. "COMPLETED").
    pub submission_status: String,
    /// Every EpisodeEnd received, in arrival order, over every connection of the run.
    pub episodes: Vec<EpisodeEnd>,
    pub reconnects: u32,
    /// The submission's episodes, as the last session's `Connected` said (0 in practice): more
    /// than `episodes` when an earlier run ran some, or when ends were lost with a connection.
    pub episodes_total: u32,
    /// The submission's episodes once it completed, as the server counted them (those this run
    /// did not see end too): `None` until then, and from servers that do not say.
    pub final_counts: Option<FinalCounts>,
}

/// What became of all of a completed submission's episodes (`Disconnect.episodes_scored` and
/// `episodes_failed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinalCounts {
    /// Completed or fell: in the statistics.
    pub scored: u32,
    /// Failed or timed out: listed with their reason, left out of the statistics.
    pub failed: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server refused the session (bad token, unknown benchmark, closed phase, quota
    /// reached, ...): not retried. `limit` and `resets_at` are set for `quota_exceeded`.
    #[error("server refused the session: {code}: {message}")]
    Refused {
        code: String,
        message: String,
        limit: u32,
        resets_at: String,
    },
    /// No connection after `max_reconnects` attempts.
    #[error("gave up after {attempts} connection attempt{}: {last_error}", if *attempts == 1 { "" } else { "s" })]
    Unreachable { attempts: u32, last_error: String },
    /// The server broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The agent cannot serve the session's layout ([`Agent::check`]); nothing was played.
    #[error("the agent cannot serve this session: {0}")]
    Agent(String),
    /// The run's configuration cannot run (e.g. practice with no episode); nothing was sent.
    #[error("cannot run: {0}")]
    Config(String),
    /// The agent stopped being able to act mid-run ([`Agent::failure`]); the step it failed on
    /// was not answered.
    #[error("the agent failed: {0}")]
    AgentFailed(String),
}

impl ClientError {
    fn refused(e: protocol::Error) -> Self {
        ClientError::Refused {
            code: e.code,
            message: e.message,
            limit: e.limit,
            resets_at: e.resets_at,
        }
    }
}

/// Codes refusing a Connect after which reconnecting cannot help.
const FATAL_CODES: [&str; 12] = [
    codes::UNAUTHORIZED,
    codes::INVALID_GAINS,
    codes::UNSUPPORTED_VERSION,
    codes::UNKNOWN_BENCHMARK,
    codes::BENCHMARK_UNAVAILABLE,
    codes::BENCHMARK_CHANGED,
    codes::UNKNOWN_SUBMISSION,
    codes::INVALID_MESSAGE,
    codes::UNKNOWN_PHASE,
    codes::PHASE_CLOSED,
    codes::FORBIDDEN,
    codes::QUOTA_EXCEEDED,
];

enum SessionEnd {
    /// The server or the client ended the session on purpose.
    Done,
    /// The server refused the Connect for the team's request rate: wait this long and retry
    /// (not a failure: it does not count against `max_reconnects`).
    Throttled(Duration),
    /// The server refused the Connect as `submission_busy`: it still holds an earlier session
    /// of the submission (it has not yet noticed that connection drop, which takes up to its
    /// heartbeat timeout, 60 s by default). Retried with the backoff for up to [`BUSY_WAIT`],
    /// not counted against `max_reconnects`.
    Busy(String),
    /// The connection was lost (or could not be made after an earlier one was up); worth
    /// another attempt.
    Lost(String),
    /// The server said it is stopping (`disconnect {shutdown}`): reconnected to like a lost
    /// connection, and waited for up to `restart_wait` without counting the attempts.
    ServerStopping(String),
    /// The very first connection could not be made (nothing listening, wrong host or port):
    /// reconnecting is for connections that were up, so the run stops at once.
    NeverConnected { attempts: u32, error: String },
}

/// How many times a run's first connection is tried when each try is accepted and then cut
/// before any answer: enough for a flaky first packet or a proxy whose backend restarts, few
/// enough that a `ws://` URL at a TLS port (whose server closes the plaintext request) stops
/// in seconds rather than after `max_reconnects` backed-off tries.
pub const FIRST_CONNECTION_CUTS: u32 = 3;

/// How long a resume refused as `submission_busy` is tried again before the run gives up: past
/// the server's default heartbeat timeout (60 s), after which it drops a session it no longer
/// hears from, with room for a server configured longer.
pub const BUSY_WAIT: Duration = Duration::from_secs(180);

/// How long, by default, a run waits for a server that said it is stopping to come back (or for
/// another replica behind the same address) before reconnection attempts count again
/// ([`ClientConfig::restart_wait`]).
pub const RESTART_WAIT: Duration = Duration::from_secs(300);

/// Per-run state that survives reconnects.
struct RunState {
    summary: RunSummary,
    /// Whether a connection to the server was ever made in this run.
    reached: bool,
    /// First connections accepted and then cut before any answer, while `reached` is unset.
    first_cuts: u32,
    /// The caller was told the server is at its connection caps, since the last connection.
    told_at_capacity: bool,
    /// Sessions the server accepted (`connected`) in this run.
    sessions: u32,
    /// Practice: the indices (in `Mode::Practice::episodes`) of the episodes that ended; a
    /// reconnect asks only for the others.
    practice_done: std::collections::HashSet<usize>,
    /// Sent with each connect until one is `connected` to a submission (`Connect.connect_key`):
    /// a connect lost before its answer came made a submission whose id this client never
    /// learnt, and the next connect attaches to it instead of making another.
    connect_key: String,
    /// The session the last `connected` opened (`Connect.previous_session_id` on the next
    /// connect: a lost connection the server has not noticed gives way to the new one).
    last_session_id: String,
}

/// A key no other run of the team will make: 128 bits from the standard library's randomly
/// keyed hasher (seeded by the OS), over the time and the process.
fn new_connect_key() -> String {
    use std::hash::BuildHasher;
    let half = |salt: u8| {
        std::collections::hash_map::RandomState::new().hash_one((salt, SystemTime::now(), std::process::id()))
    };
    format!("{:016x}{:016x}", half(1), half(2))
}

/// Runs the session described by `config` with `agent` until the submission completes (or the
/// practice episodes are done), reconnecting after lost connections.
pub async fn run(
    config: &ClientConfig,
    agent: &mut dyn Agent,
    on_event: &mut (dyn FnMut(ClientEvent<'_>) + Send),
) -> Result<RunSummary, ClientError> {
    if let Mode::Practice { episodes, .. } = &config.mode
        && episodes.is_empty()
    {
        return Err(ClientError::Config("practice: give at least one episode".into()));
    }
    let mut state = RunState {
        summary: RunSummary::default(),
        reached: false,
        first_cuts: 0,
        told_at_capacity: false,
        sessions: 0,
        practice_done: Default::default(),
        connect_key: new_connect_key(),
        last_session_id: String::new(),
    };
    if let Mode::Submission {
        submission_id: Some(id),
        ..
    } = &config.mode
    {
        state.summary.submission_id = id.clone();
    }
    if config.spec_check
        && let Mode::Submission {
            submission_id: None, ..
        } = &config.mode
    {
        match fetch_spec(config).await? {
            SpecAnswer::Spec(spec) => {
                agent.configure(&spec);
                agent
                    .check(&spec)
                    .and_then(|()| checked_action_width(agent.action_width(&spec), &spec).map(|_| ()))
                    .map_err(|reason| {
                        ClientError::Agent(format!(
                            "{reason} (checked on a practice connection before submitting: no submission was made)"
                        ))
                    })?;
            }
            // A private phase offers no practice, and a server not reached is the run's to say.
            SpecAnswer::NoPractice(why) | SpecAnswer::Unreached(why) => {
                tracing::debug!("no check of the agent against the spec before submitting: {why}")
            }
            SpecAnswer::Unchecked(why) => {
                tracing::warn!("could not check the agent against the spec before submitting: {why}")
            }
        }
    }
    // Failed connections counted against `max_reconnects`; tries since the last progress.
    let mut failures = 0u32;
    let mut tries = 0u32;
    let mut backoff = config.initial_backoff;
    // Since when every try was refused as busy.
    let mut busy_since: Option<tokio::time::Instant> = None;
    // Since when the server has been stopping (told by its `shutdown`), until a session is
    // accepted again.
    let mut stopping_since: Option<tokio::time::Instant> = None;
    loop {
        let connected_before = state.summary.episodes.len();
        let sessions_before = state.sessions;
        let end = session(config, agent, &mut state, on_event).await?;
        if state.sessions > sessions_before {
            stopping_since = None;
        }
        if matches!(end, SessionEnd::ServerStopping(_)) {
            stopping_since.get_or_insert_with(tokio::time::Instant::now);
        }
        if !matches!(end, SessionEnd::Busy(_)) {
            busy_since = None;
        }
        match end {
            SessionEnd::Done => return Ok(state.summary),
            SessionEnd::NeverConnected { attempts, error } => {
                return Err(ClientError::Unreachable {
                    attempts,
                    last_error: format!("cannot reach the server at {}: {error}", config.url),
                });
            }
            SessionEnd::Throttled(delay) => {
                tracing::warn!("rate limited by the server; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
            }
            SessionEnd::Busy(error) => {
                let since = *busy_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() > BUSY_WAIT {
                    return Err(ClientError::Unreachable {
                        attempts: tries + 1,
                        last_error: format!("{error} (still busy after {} s)", BUSY_WAIT.as_secs()),
                    });
                }
                tracing::info!("{error}; retrying in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(config.max_backoff);
            }
            SessionEnd::Lost(error) | SessionEnd::ServerStopping(error) => {
                // Progress since the last failure resets the backoff.
                if state.summary.episodes.len() > connected_before {
                    failures = 0;
                    tries = 0;
                    backoff = config.initial_backoff;
                }
                tries += 1;
                // A server that said it is stopping is waited for without counting.
                let restarting = stopping_since.is_some_and(|since| since.elapsed() < config.restart_wait);
                if !restarting {
                    failures += 1;
                }
                if failures > config.max_reconnects {
                    let last_error = match stopping_since {
                        Some(_) => format!(
                            "{error} (the server said it was stopping and did not take a session within {} s)",
                            config.restart_wait.as_secs_f64()
                        ),
                        None => error,
                    };
                    return Err(ClientError::Unreachable {
                        attempts: tries,
                        last_error,
                    });
                }
                on_event(ClientEvent::Reconnecting {
                    attempt: tries,
                    delay: backoff,
                    error: &error,
                });
                // The caller was told by the event (the CLIs print it): a debug line, not a second
                // copy at info under `-v`.
                tracing::debug!("connection lost ({error}); reconnecting in {backoff:?} (attempt {tries})");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(config.max_backoff);
                state.summary.reconnects += 1;
            }
        }
    }
}

/// [`run`] on a runtime of its own, for programs that are not async.
pub fn run_blocking(
    config: &ClientConfig,
    agent: &mut dyn Agent,
    on_event: &mut (dyn FnMut(ClientEvent<'_>) + Send),
) -> Result<RunSummary, ClientError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClientError::Protocol(format!("starting the async runtime: {e}")))?;
    runtime.block_on(run(config, agent, on_event))
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// How long to wait after `rate_limited`: until `resets_at` (RFC 3339), plus a little, or a
/// few seconds when it cannot be read.
fn throttle_delay(resets_at: &str) -> Duration {
    let margin = Duration::from_millis(250);
    humantime::parse_rfc3339_weak(resets_at)
        .ok()
        .and_then(|t| t.duration_since(SystemTime::now()).ok())
        .map_or(Duration::from_secs(5), |d| d.min(Duration::from_secs(60)) + margin)
}

/// Asks for practice episodes while fewer than [`PRACTICE_WAITING`] of this connection's
/// requests wait to start (the server refuses more), in the order given.
async fn request_practice(
    connection: &mut Connection,
    episodes: &[ResetEpisode],
    to_request: &mut std::collections::VecDeque<usize>,
    requested: &mut Vec<usize>,
    started: usize,
) -> Result<(), String> {
    while requested.len().saturating_sub(started) < PRACTICE_WAITING {
        let Some(index) = to_request.pop_front() else { break };
        let m = Msg::ResetEpisode(episodes[index].clone());
        connection
            .send(m)
            .await
            .map_err(|e| format!("sending ResetEpisode: {e}"))?;
        requested.push(index);
    }
    Ok(())
}

/// Reusable buffers for answering GetAction.
#[derive(Default)]
struct ActBuffers {
    ids: Vec<u32>,
    steps: Vec<u32>,
    observations: Vec<f32>,
    actions: Vec<f32>,
}

async fn session(
    config: &ClientConfig,
    agent: &mut dyn Agent,
    state: &mut RunState,
    on_event: &mut (dyn FnMut(ClientEvent<'_>) + Send),
) -> Result<SessionEnd, ClientError> {
    let (mode, benchmark) = match &config.mode {
        Mode::Submission { benchmark, .. } => ("submission", benchmark.clone()),
        Mode::Practice { benchmark, .. } => ("practice", benchmark.clone()),
    };
    let connect = Msg::Connect(Connect {
        protocol_version: PROTOCOL_VERSION,
        agent_name: config.agent_name.clone(),
        token: config.token.clone(),
        mode: mode.into(),
        benchmark,
        submission_id: state.summary.submission_id.clone(),
        max_batch: config.max_batch,
        phase: config.phase.clone(),
        joint_stiffness: config.joint_stiffness.clone(),
        joint_damping: config.joint_damping.clone(),
        gain_preset: config.gain_preset.clone(),
        reference_goal_once: config.reference_goal_once,
        connect_key: match (mode, state.summary.submission_id.is_empty()) {
            ("submission", true) => state.connect_key.clone(),
            _ => String::new(),
        },
        previous_session_id: match mode {
            "submission" => state.last_session_id.clone(),
            _ => String::new(),
        },
    });
    let mut connection = match Connection::open(config, connect).await {
        Ok(c) => c,
        Err(e) if !state.reached && !e.server_answered => {
            return Ok(SessionEnd::NeverConnected {
                attempts: 1,
                error: e.message,
            });
        }
        Err(e) if e.at_capacity => {
            // Not a failure: the server is there and full (told once, then waited out as a
            // busy submission is, up to BUSY_WAIT).
            state.reached = true;
            if !std::mem::replace(&mut state.told_at_capacity, true) {
                on_event(ClientEvent::ServerError(&protocol::Error {
                    code: "too_many_connections".into(),
                    message: format!("{}; waiting for a place (up to {} s)", e.message, BUSY_WAIT.as_secs()),
                    ..Default::default()
                }));
            }
            return Ok(SessionEnd::Busy(e.message));
        }
        Err(e) if !state.reached && e.cut_before_answer => {
            state.first_cuts += 1;
            if state.first_cuts >= FIRST_CONNECTION_CUTS {
                return Ok(SessionEnd::NeverConnected {
                    attempts: state.first_cuts,
                    error: format!(
                        "{} (each of {} tries was accepted and then closed before any answer: a ws:// URL at a \
                         TLS port, or a proxy that does not pass WebSocket upgrades?)",
                        e.message, state.first_cuts
                    ),
                });
            }
            return Ok(SessionEnd::Lost(e.message));
        }
        Err(e) => {
            state.reached |= e.server_answered;
            return Ok(SessionEnd::Lost(e.message));
        }
    };
    state.reached = true;
    state.told_at_capacity = false;
    let mut layout: Option<ObservationLayout> = None;
    // Sessions that send each `reference_goal` row once: the rows each running episode has.
    let mut goal_rows: Option<GoalRowsOnce> = None;
    let mut action_size = 0usize;
    let mut heartbeat_every = Duration::from_secs(30);
    let mut silence_limit = Duration::from_secs(60);
    let mut last_heard = Instant::now();
    let mut last_sent = Instant::now();
    let mut buffers = ActBuffers::default();
    // Practice: the indices of the episodes asked for on this connection, in order; those still
    // to ask for; and how many of this connection's episodes have started.
    let mut requested: Vec<usize> = Vec::new();
    let mut to_request = std::collections::VecDeque::new();
    let mut started = 0usize;
    let mut ticker = tokio::time::interval(Duration::from_millis(500));
    // Set when a send failed: the server may have closed the session while the agent was
    // acting, and what it sent before closing (EpisodeEnds, Disconnect) is still to be read.
    let mut send_failed: Option<String> = None;
    loop {
        let received = tokio::select! {
            // What the server sent first: after an `act` longer than the silence limit, the
            // ticker is ready too (its missed ticks fire at once), and a random pick of it
            // called the server silent with its heartbeats, EpisodeEnds and Disconnect unread.
            biased;
            received = connection.recv() => received,
            _ = ticker.tick() => {
                if last_heard.elapsed() > silence_limit {
                    return Ok(SessionEnd::Lost(format!("server silent for {silence_limit:?}")));
                }
                if last_sent.elapsed() >= heartbeat_every && send_failed.is_none() {
                    last_sent = Instant::now();
                    let hb = Msg::Heartbeat(Heartbeat { time: now_s() });
                    if let Err(e) = connection.send(hb).await {
                        send_failed = Some(format!("sending Heartbeat: {e}"));
                    }
                }
                continue;
            }
        };
        let msg = match received {
            Err(lost) => return Ok(SessionEnd::Lost(send_failed.unwrap_or(lost))),
            Ok(msg) => msg,
        };
        let msg = msg.map_err(|e| ClientError::Protocol(format!("undecodable frame from the server: {e}")))?;
        let reply = match msg {
            Msg::Connected(c) => {
                state.sessions += 1;
                let spec = c.spec.clone().unwrap_or_default();
                let announced = ObservationLayout::from_spec(&spec);
                goal_rows = match spec.reference_goal_once {
                    false => None,
                    true => Some(GoalRowsOnce::new(&announced).ok_or_else(|| {
                        ClientError::Protocol(
                            "the server's spec sends reference_goal rows once but announces no reference_goal group"
                                .into(),
                        )
                    })?),
                };
                layout = Some(announced);
                action_size = spec.action_size as usize;
                if action_size == 0 {
                    return Err(ClientError::Protocol(
                        "the server's `connected` announces no action size (its spec is missing or empty)".into(),
                    ));
                }
                // Bounded: a day is more than any server asks, and inf would panic.
                let seconds = |s: f64| {
                    s.is_finite()
                        .then(|| Duration::try_from_secs_f64(s.min(86_400.0)).ok())
                        .flatten()
                        .filter(|d| !d.is_zero())
                };
                if let Some(every) = seconds(c.heartbeat_interval_s) {
                    heartbeat_every = every;
                }
                if let Some(limit) = seconds(c.heartbeat_timeout_s) {
                    silence_limit = limit;
                }
                state.summary.submission_id = c.submission_id.clone();
                state.summary.episodes_total = c.episodes_total;
                state.last_session_id.clone_from(&c.session_id);
                // Told first: an agent that cannot serve the spec leaves a submission RUNNING,
                // and the user needs its id to resume or cancel it.
                on_event(ClientEvent::Connected(&c));
                agent.configure(&spec);
                if let Err(reason) = agent.check(&spec).and_then(|()| {
                    action_size = checked_action_width(agent.action_width(&spec), &spec)?;
                    Ok(())
                }) {
                    let bye = Msg::Disconnect(Disconnect {
                        reason: format!("{}: {reason}", protocol::AGENT_CANNOT_SERVE),
                        submission_status: String::new(),
                        ..Default::default()
                    });
                    let _ = connection.send(bye).await;
                    connection.close().await;
                    return Err(ClientError::Agent(reason));
                }
                if let Mode::Practice { episodes, .. } = &config.mode {
                    to_request = (0..episodes.len())
                        .filter(|index| !state.practice_done.contains(index))
                        .collect();
                    // A failed send is noted, as for any reply: what the server sent before it
                    // closed is still read.
                    if send_failed.is_none()
                        && let Err(e) =
                            request_practice(&mut connection, episodes, &mut to_request, &mut requested, 0).await
                    {
                        send_failed = Some(e);
                    }
                }
                None
            }
            Msg::EpisodeStart(s) => {
                if let Some(goal) = goal_rows.as_mut() {
                    for info in &s.episodes {
                        goal.start(info).map_err(ClientError::Protocol)?;
                    }
                }
                agent.reset(&s.episodes);
                on_event(ClientEvent::EpisodeStart(&s.episodes));
                started += s.episodes.len();
                if let Mode::Practice { episodes, .. } = &config.mode
                    && send_failed.is_none()
                    && let Err(e) =
                        request_practice(&mut connection, episodes, &mut to_request, &mut requested, started).await
                {
                    send_failed = Some(e);
                }
                None
            }
            Msg::GetAction(request) => {
                let Some(layout) = layout.as_ref() else {
                    return Err(ClientError::Protocol("GetAction before Connected".into()));
                };
                // A panic in the agent's `act` fails the run as its `failure()` would: the server
                // is told why, and the caller gets the error (and the resume hint) rather than
                // an unwinding that leaves the submission waiting for a connection that is gone.
                let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    answer(agent, layout, goal_rows.as_mut(), action_size, request, &mut buffers)
                }));
                let outcome = match answered {
                    Err(panic) => Err(format!("its act panicked: {}", panic_text(panic.as_ref()))),
                    Ok(answered) => {
                        let action = answered?;
                        let failure = agent.failure().or_else(|| match connection.carries_non_finite() {
                            true => None,
                            false => non_finite_action(&action),
                        });
                        match failure {
                            Some(reason) => Err(reason),
                            None => Ok(action),
                        }
                    }
                };
                match outcome {
                    Ok(action) => Some(action),
                    Err(reason) => {
                        let bye = Msg::Disconnect(Disconnect {
                            reason: protocol::clip_message(format!("agent failed: {reason}")),
                            submission_status: String::new(),
                            ..Default::default()
                        });
                        let _ = connection.send(bye).await;
                        connection.close().await;
                        return Err(ClientError::AgentFailed(reason));
                    }
                }
            }
            Msg::EpisodeEnd(end) => {
                if let Some(goal) = goal_rows.as_mut() {
                    goal.end(end.episode_id);
                }
                agent.end(&end);
                on_event(ClientEvent::EpisodeEnd(&end));
                let episode_id = end.episode_id as usize;
                state.summary.episodes.push(end);
                if let Mode::Practice { episodes, .. } = &config.mode {
                    // Episode ids count this connection's accepted requests (a refused one ends
                    // the run), so an id names the request it answers.
                    if let Some(&index) = requested.get(episode_id) {
                        state.practice_done.insert(index);
                    }
                    if state.practice_done.len() >= episodes.len() {
                        let bye = Msg::Disconnect(Disconnect {
                            reason: "client_done".into(),
                            submission_status: String::new(),
                            ..Default::default()
                        });
                        let _ = connection.send(bye).await;
                        connection.close().await;
                        return Ok(SessionEnd::Done);
                    }
                }
                None
            }
            Msg::Heartbeat(_) => Some(Msg::Heartbeat(Heartbeat { time: now_s() })),
            Msg::Error(e) => {
                if layout.is_none() {
                    if FATAL_CODES.contains(&e.code.as_str()) {
                        return Err(ClientError::refused(e));
                    }
                    if e.code == codes::RATE_LIMITED {
                        on_event(ClientEvent::ServerError(&e));
                        return Ok(SessionEnd::Throttled(throttle_delay(&e.resets_at)));
                    }
                    if e.code == codes::SUBMISSION_FINISHED {
                        // COMPLETED, or FAILED (cancelled by the organiser).
                        if !e.submission_status.is_empty() {
                            state.summary.submission_status = e.submission_status.clone();
                        }
                        // What became of all its episodes: this run may have lost their ends
                        // with a connection (older servers send no counts).
                        if e.episodes_scored + e.episodes_failed > 0 {
                            state.summary.final_counts = Some(FinalCounts {
                                scored: e.episodes_scored,
                                failed: e.episodes_failed,
                            });
                        }
                        return Ok(SessionEnd::Done);
                    }
                    on_event(ClientEvent::ServerError(&e));
                    let error = format!("{}: {}", e.code, e.message);
                    if e.code == codes::SUBMISSION_BUSY {
                        // The old session is still being torn down.
                        return Ok(SessionEnd::Busy(error));
                    }
                    return Ok(SessionEnd::Lost(error));
                }
                // A refused practice request will never produce its EpisodeEnd.
                if matches!(config.mode, Mode::Practice { .. })
                    && [codes::UNKNOWN_MOTION, codes::INVALID_MESSAGE].contains(&e.code.as_str())
                {
                    return Err(ClientError::refused(e));
                }
                tracing::debug!("server error: {}: {}", e.code, e.message);
                on_event(ClientEvent::ServerError(&e));
                None
            }
            Msg::Disconnect(d) => {
                state.summary.submission_status = d.submission_status.clone();
                if ["submission_complete", "submission_cancelled"].contains(&d.reason.as_str())
                    && d.episodes_scored + d.episodes_failed > 0
                {
                    state.summary.final_counts = Some(FinalCounts {
                        scored: d.episodes_scored,
                        failed: d.episodes_failed,
                    });
                }
                if ["submission_complete", "submission_cancelled", "client_done"].contains(&d.reason.as_str()) {
                    return Ok(SessionEnd::Done);
                }
                if d.reason == SHUTDOWN {
                    return Ok(SessionEnd::ServerStopping(format!(
                        "server ended the session: {}",
                        d.reason
                    )));
                }
                return Ok(SessionEnd::Lost(format!("server ended the session: {}", d.reason)));
            }
            Msg::Connect(_) | Msg::ResetEpisode(_) | Msg::Action(_) => {
                return Err(ClientError::Protocol(format!(
                    "the server sent a client message ({})",
                    protocol::type_name(&msg)
                )));
            }
        };
        if let Some(reply) = reply
            && send_failed.is_none()
        {
            last_sent = Instant::now();
            if let Err(e) = connection.send(reply).await {
                send_failed = Some(format!("sending to the server: {e}"));
            }
        }
        // The silence limit counts the time the client listens, not the agent's: frames that
        // came during a long `act` may still be in the transport's hands (gRPC's connection
        // task runs on this thread, blocked meanwhile), not yet readable.
        last_heard = Instant::now();
    }
}

/// The text a panic carried (its payload is a `&str` or a `String` when it has one).
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Why an Action cannot go over JSON: its first value that is not a finite number.
fn non_finite_action(action: &Msg) -> Option<String> {
    let Msg::Action(action) = action else { return None };
    action.actions.iter().find_map(|a| {
        let (j, v) = a.values.iter().enumerate().find(|(_, v)| !v.is_finite())?;
        Some(format!(
            "a non-finite action (episode {}, value {j}: {v}) at step {}: JSON cannot carry it \
             (over the binary encoding or gRPC the server fails that episode instead)",
            a.episode_id, action.step
        ))
    })
}

/// Runs the agent on one GetAction and builds the Action answering it; a row that is not the
/// session's layout's size is the server's error.
/// The agent's [`Agent::action_width`] if the session takes it: the spec's action size, or in
/// the joint-position mode also twice that (targets, then feed-forward torques).
fn checked_action_width(width: usize, spec: &crate::protocol::EpisodeSpec) -> Result<usize, String> {
    let size = spec.action_size as usize;
    let joint_position = spec.action_mode == "joint_position";
    if width == size || (joint_position && width == 2 * size) {
        return Ok(width);
    }
    Err(match joint_position {
        true => format!(
            "the agent's actions have {width} values; this session takes {size} joint targets, or {} with feed-forward torques",
            2 * size
        ),
        false => format!("the agent's actions have {width} values; this session takes {size}"),
    })
}

fn answer(
    agent: &mut dyn Agent,
    layout: &ObservationLayout,
    mut goal_rows: Option<&mut GoalRowsOnce>,
    action_size: usize,
    request: GetAction,
    buffers: &mut ActBuffers,
) -> Result<Msg, ClientError> {
    let n = request.observations.len();
    // The row as sent: the layout's, less the goal rows sent before.
    let d = goal_rows.as_ref().map_or(layout.size(), |g| g.sent_row_size(layout));
    buffers.ids.clear();
    buffers.steps.clear();
    buffers.observations.clear();
    for o in &request.observations {
        if o.values.len() != d {
            return Err(ClientError::Protocol(format!(
                "step {}: episode {}'s observation row has {} values, the session's layout {d}",
                request.step,
                o.episode_id,
                o.values.len()
            )));
        }
        buffers.ids.push(o.episode_id);
        buffers.steps.push(o.episode_step);
        match goal_rows.as_mut() {
            Some(goal) => goal
                .expand(o, &mut buffers.observations)
                .map_err(|e| ClientError::Protocol(format!("step {}: {e}", request.step)))?,
            None => buffers.observations.extend_from_slice(&o.values),
        }
    }
    buffers.actions.clear();
    buffers.actions.resize(n * action_size, 0.0);
    let batch = Batch {
        step: request.step,
        episodes: &buffers.ids,
        episode_steps: &buffers.steps,
        observations: &buffers.observations,
        layout,
    };
    agent.act(&batch, &mut buffers.actions);
    Ok(Msg::Action(Action {
        step: request.step,
        actions: buffers
            .ids
            .iter()
            .zip(buffers.actions.chunks_exact(action_size.max(1)))
            .map(|(&episode_id, values)| EpisodeAction {
                episode_id,
                values: values.to_vec(),
            })
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_may_send_feedforward_torques_in_the_joint_position_mode() {
        let spec = |mode: &str| crate::protocol::EpisodeSpec {
            action_size: 29,
            action_mode: mode.into(),
            ..Default::default()
        };
        assert_eq!(checked_action_width(29, &spec("joint_position")), Ok(29));
        assert_eq!(checked_action_width(58, &spec("joint_position")), Ok(58));
        let e = checked_action_width(57, &spec("joint_position")).unwrap_err();
        assert!(e.contains("29 joint targets, or 58 with feed-forward torques"), "{e}");
        assert_eq!(checked_action_width(29, &spec("normalized")), Ok(29));
        let e = checked_action_width(58, &spec("normalized")).unwrap_err();
        assert_eq!(e, "the agent's actions have 58 values; this session takes 29");
    }

    /// A server that answers every connect with `disconnect {shutdown}` (stopping, and never
    /// back), in process: the tries within `restart_wait` are not counted against
    /// `max_reconnects`, those after it are, and the run then gives up saying so.
    #[test]
    fn a_stopping_server_is_waited_for_restart_wait_then_counted() {
        for restart_wait in [Duration::ZERO, Duration::from_millis(300)] {
            let connector = LocalConnector(std::sync::Arc::new(|| {
                let (requests, mut from_client) = tokio::sync::mpsc::unbounded_channel();
                let (to_client, responses) = tokio::sync::mpsc::unbounded_channel();
                std::thread::spawn(move || {
                    if let Some(Msg::Connect(_)) = from_client.blocking_recv() {
                        let _ = to_client.send(Msg::Disconnect(Disconnect {
                            reason: SHUTDOWN.into(),
                            submission_status: String::new(),
                            ..Default::default()
                        }));
                    }
                });
                (requests, responses)
            }));
            let mut config = ClientConfig::new(
                "local://stopping",
                "t",
                Mode::Submission {
                    benchmark: "b".into(),
                    submission_id: None,
                },
            );
            config.local = Some(connector);
            config.max_reconnects = 1;
            config.restart_wait = restart_wait;
            config.initial_backoff = Duration::from_millis(10);
            config.max_backoff = Duration::from_millis(20);
            let mut agent = crate::agents::ZeroAgent::default();
            let mut tries = Vec::new();
            let result = run_blocking(&config, &mut agent, &mut |e| {
                if let ClientEvent::Reconnecting { attempt, error, .. } = e {
                    tries.push((attempt, error.to_string()));
                }
            });
            let Err(ClientError::Unreachable { attempts, last_error }) = result else {
                panic!("{restart_wait:?}: expected Unreachable, got {result:?}");
            };
            assert!(
                tries.iter().all(|(_, e)| e == "server ended the session: shutdown"),
                "{tries:?}"
            );
            if restart_wait.is_zero() {
                // The first loss counts, the second ends the run.
                assert_eq!((attempts, tries.len()), (2, 1), "{tries:?}");
            } else {
                // At least the first try, made at once, was not counted.
                assert!(attempts >= 3 && tries.len() >= 2, "{attempts} {tries:?}");
            }
            let within = format!("did not take a session within {} s", restart_wait.as_secs_f64());
            assert!(last_error.contains(&within), "{last_error}");
        }
    }

    /// The first connection ends after its connect, before `connected` (the server made a
    /// submission this client never heard of): the retry carries the same connect key, so the
    /// server attaches it to that submission; after a `connected`, a reconnect names the
    /// submission instead. Another run makes another key.
    #[test]
    fn a_connect_lost_before_its_answer_is_retried_with_the_same_key() {
        let run_once = || {
            let connects = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Connect>::new()));
            let seen = connects.clone();
            let connector = LocalConnector(std::sync::Arc::new(move || {
                let (requests, mut from_client) = tokio::sync::mpsc::unbounded_channel();
                let (to_client, responses) = tokio::sync::mpsc::unbounded_channel();
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let Some(Msg::Connect(c)) = from_client.blocking_recv() else {
                        return;
                    };
                    let n = {
                        let mut seen = seen.lock().unwrap();
                        seen.push(c);
                        seen.len()
                    };
                    if n == 1 {
                        return; // lost before the answer
                    }
                    let _ = to_client.send(Msg::Connected(crate::protocol::Connected {
                        session_id: format!("ses-{n}"),
                        submission_id: "sub-1".into(),
                        episodes_total: 1,
                        spec: Some(crate::protocol::EpisodeSpec {
                            action_size: 29,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }));
                    if n == 3 {
                        let _ = to_client.send(Msg::Disconnect(Disconnect {
                            reason: "submission_complete".into(),
                            submission_status: "COMPLETED".into(),
                            ..Default::default()
                        }));
                        // The client reads to the end of the session.
                        while from_client.blocking_recv().is_some() {}
                    }
                });
                (requests, responses)
            }));
            let mut config = ClientConfig::new(
                "local://keyed",
                "t",
                Mode::Submission {
                    benchmark: "b".into(),
                    submission_id: None,
                },
            );
            config.local = Some(connector);
            config.max_reconnects = 3;
            config.initial_backoff = Duration::from_millis(10);
            config.max_backoff = Duration::from_millis(20);
            let mut agent = crate::agents::ZeroAgent::default();
            let summary = run_blocking(&config, &mut agent, &mut |_| {}).unwrap();
            assert_eq!(summary.submission_id, "sub-1");
            connects.lock().unwrap().clone()
        };
        let connects = run_once();
        let keys: Vec<&str> = connects.iter().map(|c| c.connect_key.as_str()).collect();
        assert_eq!(keys.len(), 3, "{connects:?}");
        assert_eq!((keys[0].len(), keys[1]), (32, keys[0]), "{keys:?}");
        assert_eq!((keys[2], connects[2].submission_id.as_str()), ("", "sub-1"));
        // The session the lost connection had is named, so the server can hand it over.
        assert_eq!(
            (
                connects[1].previous_session_id.as_str(),
                connects[2].previous_session_id.as_str()
            ),
            ("", "ses-2")
        );
        assert_ne!(run_once()[0].connect_key, keys[0], "another run, another key");
    }

    #[test]
    fn a_server_never_reached_is_not_retried() {
        // Port 9 (discard) is closed here; ten reconnects would take about half a minute.
        let mut config = ClientConfig::new(
            "ws://127.0.0.1:9/api/v1/agent",
            "t",
            Mode::Submission {
                benchmark: "g1-smoke".into(),
                submission_id: None,
            },
        );
        config.max_reconnects = 10;
        let mut agent = crate::agents::ZeroAgent::default();
        match run_blocking(&config, &mut agent, &mut |_| {}) {
            Err(ClientError::Unreachable { attempts, last_error }) => {
                assert_eq!(attempts, 1);
                assert!(
                    last_error.contains("cannot reach the server at ws://127.0.0.1:9"),
                    "{last_error}"
                );
            }
            other => panic!("expected Unreachable, got {other:?}"),
        }
    }

    fn submission_config(url: String) -> ClientConfig {
        let mut config = ClientConfig::new(
            url,
            "t",
            Mode::Submission {
                benchmark: "g1-smoke".into(),
                submission_id: None,
            },
        );
        config.initial_backoff = Duration::from_millis(10);
        config
    }

    #[test]
    fn a_server_that_accepts_and_never_answers_times_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("ws://{}/api/v1/agent", listener.local_addr().unwrap());
        // Accepted and held open, never a byte written: a proxy whose backend is down.
        let held = std::thread::spawn(move || listener.accept().map(|(socket, _)| socket));
        let mut config = submission_config(url.clone());
        config.connect_timeout = Duration::from_millis(300);
        let mut agent = crate::agents::ZeroAgent::default();
        match run_blocking(&config, &mut agent, &mut |_| {}) {
            Err(ClientError::Unreachable { attempts, last_error }) => {
                assert_eq!(attempts, 1);
                assert!(last_error.contains("no answer within 300ms"), "{last_error}");
            }
            other => panic!("expected Unreachable, got {other:?}"),
        }
        drop(held.join());
    }

    /// Answers each of `connections` connections with `status` and closes it; how many it
    /// answered.
    fn answer_with(status: &'static str, connections: usize) -> (String, std::thread::JoinHandle<usize>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("ws://{}/api/v1/agent", listener.local_addr().unwrap());
        let answered = std::thread::spawn(move || {
            let mut count = 0;
            for _ in 0..connections {
                let Ok((mut socket, _)) = listener.accept() else { break };
                let mut request = [0u8; 4096];
                let _ = std::io::Read::read(&mut socket, &mut request);
                let reply =
                    format!("HTTP/1.1 {status}\r\nRetry-After: 5\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
                let _ = std::io::Write::write_all(&mut socket, reply.as_bytes());
                count += 1;
            }
            count
        });
        (url, answered)
    }

    #[test]
    fn a_server_over_its_connection_caps_is_retried_on_the_first_connection() {
        // What `arena serve` answers over `max_connections` (connections.rs's REFUSED_RESPONSE),
        // then a 404 (a wrong path): only the first is a server worth trying again.
        for (status, tries) in [("503 Service Unavailable", 3), ("404 Not Found", 1)] {
            let (url, answered) = answer_with(status, tries);
            let mut config = submission_config(url);
            config.max_reconnects = 2;
            let mut agent = crate::agents::ZeroAgent::default();
            match run_blocking(&config, &mut agent, &mut |_| {}) {
                Err(ClientError::Unreachable { attempts, last_error }) => {
                    assert_eq!(attempts as usize, tries, "{status}");
                    assert!(last_error.contains(&status[..3]), "{last_error}");
                }
                other => panic!("expected Unreachable after {tries} attempts, got {other:?}"),
            }
            assert_eq!(answered.join().unwrap(), tries);
        }
    }

    /// The server at its connection caps (its 503 and JSON body, `arena serve`'s
    /// `refusal::REFUSED_RESPONSE`) is waited for like a busy submission: its refusals do not
    /// count against `max_reconnects` (a run gave up after 11 of them, 31 s, saying only "HTTP
    /// 503"), the caller is told once, with the server's words.
    #[test]
    fn a_server_at_its_connection_caps_is_waited_for_not_counted() {
        const AT_CAPACITY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 5\r\nConnection: close\r\nContent-Length: 95\r\n\r\n{\"error\":{\"code\":\"too_many_connections\",\"message\":\"too many open connections; retry shortly\"}}\n";
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("ws://{}/api/v1/agent", listener.local_addr().unwrap());
        let refusals = 4;
        // Accepts without blocking for ever: a run that stopped trying early fails the test
        // below rather than hanging it.
        listener.set_nonblocking(true).unwrap();
        let answered = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            let mut answered = 0;
            while answered < refusals && std::time::Instant::now() < deadline {
                let Ok((mut socket, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                socket.set_nonblocking(false).unwrap();
                let mut request = [0u8; 4096];
                let _ = std::io::Read::read(&mut socket, &mut request);
                let _ = std::io::Write::write_all(&mut socket, AT_CAPACITY);
                answered += 1;
            }
            // The listener closes: the next tries are refused, and those count.
            answered
        });
        let mut config = submission_config(url);
        config.max_reconnects = 1;
        let mut agent = crate::agents::ZeroAgent::default();
        let mut told = Vec::new();
        let result = run_blocking(&config, &mut agent, &mut |e| {
            if let ClientEvent::ServerError(e) = e {
                told.push(format!("{}: {}", e.code, e.message));
            }
        });
        assert_eq!(
            answered.join().unwrap(),
            refusals,
            "the run stopped before its refusals were done: {result:?}"
        );
        match result {
            Err(ClientError::Unreachable { attempts, .. }) => assert!(attempts <= 2, "{attempts}"),
            other => panic!("expected Unreachable once refused, got {other:?}"),
        }
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(
            told[0].contains("too many open connections; retry shortly") && told[0].contains("waiting for a place"),
            "{told:?}"
        );
    }

    /// A connection accepted and then reset before the upgrade (a flaky first packet, a proxy
    /// whose backend restarts) is a server worth trying again, unlike a refused one: the run
    /// made one try and stopped as "cannot reach the server". But only a few times: a ws:// URL
    /// at a TLS port is cut the same way each time, and was retried for `max_reconnects`.
    #[test]
    fn a_first_connection_reset_after_it_was_accepted_is_retried_a_few_times() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("ws://{}/api/v1/agent", listener.local_addr().unwrap());
        let tries = FIRST_CONNECTION_CUTS;
        let reset = std::thread::spawn(move || {
            for _ in 0..tries {
                let Ok((socket, _)) = listener.accept() else { break };
                let mut request = [0u8; 4096];
                let _ = std::io::Read::read(&mut &socket, &mut request);
                // SO_LINGER 0: the close is a reset.
                let fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
                let linger = libc::linger {
                    l_onoff: 1,
                    l_linger: 0,
                };
                // SAFETY: a valid socket and a correctly sized option value.
                unsafe {
                    libc::setsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        libc::SO_LINGER,
                        (&linger as *const libc::linger).cast(),
                        std::mem::size_of::<libc::linger>() as libc::socklen_t,
                    );
                }
                drop(socket);
            }
        });
        let mut config = submission_config(url);
        config.max_reconnects = 10;
        let mut agent = crate::agents::ZeroAgent::default();
        match run_blocking(&config, &mut agent, &mut |_| {}) {
            Err(ClientError::Unreachable { attempts, last_error }) => {
                assert_eq!(attempts, tries, "{last_error}");
                assert!(last_error.contains("TLS port"), "{last_error}");
            }
            other => panic!("expected Unreachable after {tries} tries, got {other:?}"),
        }
        reset.join().unwrap();
    }

    #[test]
    fn endpoint_accepts_the_documented_urls_and_refuses_tls() {
        let ws = |s: &str| endpoint(s, false);
        let grpc = |s: &str| endpoint(s, true);
        assert_eq!(ws("http://h:1").unwrap(), "ws://h:1/api/v1/agent");
        assert_eq!(ws("h:1/").unwrap(), "ws://h:1/api/v1/agent");
        assert_eq!(ws("ws://h:1").unwrap(), "ws://h:1/api/v1/agent");
        assert_eq!(ws("ws://h:1/api/v1/agent").unwrap(), "ws://h:1/api/v1/agent");
        assert_eq!(ws("grpc://h:1").unwrap(), "ws://h:1/api/v1/agent");
        assert_eq!(grpc("ws://h:1/api/v1/agent").unwrap(), "grpc://h:1");
        assert_eq!(grpc("http://h:1").unwrap(), "grpc://h:1");
        // A base URL under a proxy's prefix keeps it; gRPC has no path.
        assert_eq!(ws("http://h:1/arena").unwrap(), "ws://h:1/arena/api/v1/agent");
        assert_eq!(ws("h:1/arena/").unwrap(), "ws://h:1/arena/api/v1/agent");
        // The agent path pasted after http:// (as the server prints it) is not doubled.
        assert_eq!(ws("http://h:1/api/v1/agent").unwrap(), "ws://h:1/api/v1/agent");
        assert_eq!(
            ws("http://h:1/arena/api/v1/agent/").unwrap(),
            "ws://h:1/arena/api/v1/agent"
        );
        assert!(grpc("http://h:1/arena").unwrap_err().contains("no path"));
        assert!(grpc("grpc://h:1/x").unwrap_err().contains("no path"));
        for bad in ["https://h:1", "wss://h:1/api/v1/agent", "http://", "ftp://h:1"] {
            let e = ws(bad).unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn throttle_waits_until_the_window_resets() {
        let in_ten = SystemTime::now() + Duration::from_secs(10);
        let at = humantime::format_rfc3339_seconds(in_ten).to_string();
        let wait = throttle_delay(&at);
        assert!(
            wait > Duration::from_secs(8) && wait <= Duration::from_secs(11),
            "{wait:?}"
        );
        // Past, unreadable or far-future times: a retry soon, never a long sleep.
        assert!(throttle_delay("2000-01-01T00:00:00Z") == Duration::from_secs(5));
        assert_eq!(throttle_delay("soon"), Duration::from_secs(5));
        let next_year = humantime::format_rfc3339_seconds(SystemTime::now() + Duration::from_secs(3e7 as u64));
        assert!(throttle_delay(&next_year.to_string()) <= Duration::from_secs(61));
    }
}
