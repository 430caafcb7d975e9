//! The orchestrator: runs a session's episodes in the simulator for a connected agent.
//!
//! - [`runner`] (BenchmarkRunner): expands a benchmark into a submission's episodes and builds
//!   the queue of the ones still to run.
//! - [`lane`] (EpisodeManager's workers): each lane is a thread with a batch of envs; it claims
//!   episodes, streams GetAction requests, applies Actions, and applies the error policy
//!   (timeouts, bad actions, lost connections, simulator failures). Several lanes per session
//!   keep the simulator busy while the agent computes another lane's actions.
//! - [`episode_start`]: the EpisodeStart of claimed episodes in messages that fit a frame.
//! - [`warm`]: simulators kept started between sessions, taken over by later lanes.
//! - [`committer`]: off the simulation threads, scores each finished episode, writes its
//!   trajectory (HDF5, flushed), commits the result, and only then reports EpisodeEnd; at the end
//!   it aggregates the submission into its report (MetricsAggregator).

pub mod committer;
pub mod episode_start;
pub mod lane;
pub mod runner;
pub mod warm;

use crate::catalog::LoadedBenchmark;
use crate::storage::{Storage, StorageError};
use arena_bench::spec::Episode;
use arena_sdk::protocol::Action;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Lanes and envs per lane of a submission's session with `remaining` episodes to run, on a
/// server of `lanes` lanes and batches of at most `max_batch`: lanes × batch covers at most
/// the episodes left.
pub fn lanes_and_batch(lanes: u32, max_batch: usize, remaining: usize) -> (usize, usize) {
    let lanes = (lanes as usize).clamp(1, remaining.max(1));
    (lanes, max_batch.min(remaining.div_ceil(lanes)).max(1))
}

/// How long lanes and the committer keep retrying a database call that failed for a reason
/// that may pass (the database restarting, a failover) before they give up on it.
pub const DB_RETRY_FOR: Duration = Duration::from_secs(120);

/// Runs a database call from a lane or committer thread, retrying transient failures
/// ([`StorageError::is_transient`]) with backoff for up to [`DB_RETRY_FOR`].
pub fn db_call<T, F, Fut>(runtime: &tokio::runtime::Handle, what: &str, call: F) -> Result<T, StorageError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, StorageError>>,
{
    let started = std::time::Instant::now();
    let mut wait = Duration::from_millis(200);
    let mut warned = false;
    loop {
        match runtime.block_on(call()) {
            Err(e) if e.is_transient() && started.elapsed() + wait < DB_RETRY_FOR => {
                if !warned {
                    tracing::warn!("{what}: {e}; retrying for up to {DB_RETRY_FOR:?}");
                    warned = true;
                }
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            Ok(v) => {
                if warned {
                    tracing::info!("{what}: the database answers again");
                }
                return Ok(v);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Where finished episodes go.
// One per session, never in a collection: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Sink {
    /// A stored submission.
    Submission {
        storage: Storage,
        submission_id: String,
        /// Where trajectories and the report go.
        objects: crate::objects::Objects,
        max_attempts: u32,
    },
    /// A practice session: scored and reported, nothing stored.
    Practice,
}

/// Where lanes get episodes from.
#[derive(Debug)]
pub enum JobSource {
    /// A stored submission's episodes, claimed in the database a lane's free slots at a time
    /// under this server's lease ([`crate::storage::Storage::claim_next_episodes`]): several sessions, on this server
    /// or on other replicas, can share one submission.
    Claims,
    /// Practice episodes as the client asks for them; closed when the session ends.
    Practice(Mutex<mpsc::Receiver<Episode>>),
}

/// Everything the lanes and the committer of one session share.
#[derive(Debug)]
pub struct RunContext {
    pub benchmark: Arc<LoadedBenchmark>,
    /// Joint-position benchmarks: the session's PD gains.
    pub gains: Option<arena_runner::gains::SessionGains>,
    /// Messages to the agent (the gateway encodes and sends them).
    pub out: crate::outbox::Outbox,
    pub step_timeout: Duration,
    /// The server runs the agent itself (a hosted upload): its step deadline counts the
    /// policy's inference on the server's CPU, not a network.
    pub hosted: bool,
    /// Actions the session has received from the agent, for any step, late ones included (the
    /// gateway counts them): a lane whose agent missed a deadline waits for this to move. Not
    /// heartbeats: a client sends its own whether or not the server's requests reach it, so
    /// over a link that has stopped one way they would hand the lane episodes the agent
    /// never sees.
    pub answers_heard: Arc<std::sync::atomic::AtomicU64>,
    /// When (unix ms) a lane's request first went unanswered since the last Action; 0 when
    /// none has. The gateway ends a session whose agent answers nothing for its silence limit
    /// after that, though it may still send heartbeats: its lanes claim nothing meanwhile.
    pub unanswered_since_ms: Arc<std::sync::atomic::AtomicI64>,
    /// How the session's connection ended, as its lanes learn it ([`SessionEnding`]).
    pub ending: Arc<SessionEnding>,
    /// The protocol's session id (`Connected.session_id`): a lane whose request goes
    /// unanswered asks whether a client's new connection replaced it on another replica.
    pub session_id: String,
    pub lanes: usize,
    /// Envs per lane (episodes per GetAction).
    pub batch: usize,
    /// Simulation threads of each lane (0 = all cores): while one lane waits for the agent,
    /// another uses every core.
    pub sim_threads: usize,
    /// Physics backend of every lane.
    pub backend: arena_sim::SimBackend,
    /// Where lanes take a started simulator from, and give theirs back when they end.
    pub warm: Arc<warm::WarmSimulators>,
    pub sink: Sink,
    pub source: JobSource,
    /// Whether EpisodeEnd carries metrics and the reason. False in a private phase before it
    /// ends: the agent learns each episode's status and length only (results stay stored).
    pub reveal_results: bool,
    /// Bytes one value of a revealed reference takes in the client's encoding, which sets how
    /// many episodes one EpisodeStart holds ([`episode_start`]); None: messages handed over in
    /// process, no size limit.
    pub reference_value_bytes: Option<usize>,
    /// Bytes one observation value (a float) takes in the client's encoding; None in process.
    pub row_value_bytes: Option<usize>,
    /// The session sends each `reference_goal` row once (docs/protocol.md §5): an episode's
    /// first rows go with its EpisodeStart, each GetAction row holds the newest alone.
    pub goal_rows_once: bool,
    /// For database calls from the (blocking) lane and committer threads.
    pub runtime: tokio::runtime::Handle,
}

/// In a re-queued episode's reason, what follows is the agent's own words (its `disconnect`):
/// nothing that reads reasons takes them for the server's ([`crate::access::failure_kind`]).
pub const AGENT_SAID: &str = "the agent disconnected saying";

/// What a session's lanes share about the end of its connection.
#[derive(Debug, Default)]
pub struct SessionEnding {
    /// Set by the first lane that finds the connection gone, before it re-queues its episodes:
    /// another lane whose claim, under way meanwhile, took those episodes (or others) gives
    /// them back uncharged, since the agent never saw them (it charged a second attempt for
    /// one lost connection).
    lost: std::sync::atomic::AtomicBool,
    /// The reason of the agent's own `disconnect` (the SDKs send `agent failed: …` when the
    /// policy raised), quoted: the re-queued episodes' reason says it, not only "connection
    /// lost".
    agent_said: std::sync::Mutex<Option<String>>,
}

impl SessionEnding {
    pub fn mark_lost(&self) {
        self.lost.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn is_lost(&self) -> bool {
        self.lost.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Keeps the reason of the agent's `disconnect` (at most 100 characters of it).
    pub fn agent_disconnected(&self, reason: &str) {
        if !reason.is_empty() {
            *self.agent_said.lock().unwrap_or_else(|e| e.into_inner()) = Some(arena_sdk::protocol::quoted(reason));
        }
    }

    /// The reason for episodes a lost connection cut: `connection_lost`, with what the agent
    /// said when it disconnected itself (after [`AGENT_SAID`]).
    pub fn reason(&self, connection_lost: &str) -> String {
        match &*self.agent_said.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(said) => format!("{connection_lost}: {AGENT_SAID} {said}"),
            None => connection_lost.to_string(),
        }
    }
}

/// How a session's run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    /// Every episode of the submission is final and the report is written.
    SubmissionComplete,
    /// The organiser cancelled the submission: its unfinished episodes are FAILED.
    SubmissionCancelled,
    /// The connection was lost (episodes re-queued) or the practice session ended.
    Stopped,
    /// A server-side error stopped the run.
    Error(String),
}

/// Actions a lane's inbox holds at most. A lane asks for one step at a time and an agent answers
/// each request once, so only late or repeated answers ever wait beside the one awaited; an
/// agent sending Actions unasked while the lane steps (or starts its simulator) is told each
/// extra one is dropped, instead of the server keeping them all (about 16 MiB each, decoded).
pub const ACTIONS_WAITING: usize = 64;

/// A running session's handle: the lanes' action inboxes (the gateway routes Action `step` to
/// lane `step % lanes`) and the outcome, delivered when every lane and the committer are done.
#[derive(Debug)]
pub struct RunHandle {
    pub action_inboxes: Vec<mpsc::SyncSender<Action>>,
    pub outcome: tokio::sync::oneshot::Receiver<RunOutcome>,
}

/// Starts the lanes and the committer of a session.
pub fn start(ctx: Arc<RunContext>) -> RunHandle {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let (commit_tx, commit_rx) = mpsc::channel();
    let mut inboxes = Vec::new();
    let mut lanes = Vec::new();
    for lane in 0..ctx.lanes {
        let (tx, rx) = mpsc::sync_channel(ACTIONS_WAITING);
        inboxes.push(tx);
        let ctx = ctx.clone();
        let commit = commit_tx.clone();
        lanes.push(
            std::thread::Builder::new()
                .name(format!("arena-lane-{lane}"))
                .spawn(move || lane::run_lane(&ctx, lane, rx, commit))
                .expect("spawning a simulator lane"),
        );
    }
    drop(commit_tx);
    std::thread::Builder::new()
        .name("arena-committer".into())
        .spawn(move || {
            let committer = std::thread::scope(|scope| {
                let c = scope.spawn(|| committer::run_committer(&ctx, commit_rx));
                let lane_results: Vec<lane::LaneEnd> = lanes
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| lane::LaneEnd::Error("a simulator lane panicked".into()))
                    })
                    .collect();
                (lane_results, c.join())
            });
            let (lane_results, committed) = committer;
            let (outcome, merge) = match committed {
                Err(_) => (RunOutcome::Error("the committer panicked".into()), None),
                Ok(ahead) => committer::finish(&ctx, &lane_results, ahead),
            };
            let _ = done_tx.send(outcome);
            // The session is over for everyone; its submission's file is merged after.
            if let Some(merge) = merge {
                merge.run(&ctx);
            }
        })
        .expect("spawning the committer");
    RunHandle {
        action_inboxes: inboxes,
        outcome: done_rx,
    }
}
