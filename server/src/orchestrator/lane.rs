//! A simulator lane: one thread, one batched TrackingEnv. It claims episodes, sends their
//! observations in one GetAction per control step, waits (with the step deadline) for the Action
//! answering it, steps the physics and hands finished episodes to the committer.

use super::warm::SimulatorShape;
use super::{JobSource, RunContext, Sink, db_call, episode_start};
use crate::trajectory_store::part_draft::{Draft, Drafts, PartDraft, Spillable};
use arena_bench::aggregate::EpisodeStatus;
use arena_bench::spec::Episode;
use arena_data::NUM_JOINTS;
use arena_runner::episode::{self, ReferenceScratch};
use arena_runner::local::episode_infos;
use arena_sdk::protocol::{self, Action, EpisodeObservation, EpisodeStart, GetAction, Msg, codes};
use arena_sim::env::{EpisodeAssignment, TrackingEnv, Trajectory};
use rayon::prelude::*;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// A finished episode on its way to the committer.
#[derive(Debug)]
pub struct Finished {
    pub episode: Episode,
    pub attempt: u32,
    pub status: EpisodeStatus,
    pub reason: Option<String>,
    pub trajectory: Trajectory,
    /// Its part as far as it was written while the episode ran, for the committer to finish.
    pub draft: Option<PartDraft>,
    /// The simulator that ran it (`Handler::describe`), recorded with its result.
    pub engine: String,
}

/// Why a lane stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum LaneEnd {
    /// No episodes left.
    Drained,
    /// The agent's connection is gone; running episodes were re-queued.
    ConnectionLost,
    Error(String),
}

/// The episode a slot runs and anything that already decided its end.
struct Running {
    episode: Episode,
    attempt: u32,
    /// Set when the protocol, not the physics, ends the episode (bad action, timeout).
    forced: Option<(EpisodeStatus, String)>,
    /// Its part, written while it runs (dropped, the file goes too, if the run is given back).
    draft: Draft,
}

/// The reason of the episodes a session's end cut, whichever lane noticed it (one waiting for
/// an action, or one between requests: they wrote "agent connection lost" and "the session
/// ended" for the same lost connection).
const CONNECTION_LOST: &str = "agent connection lost";

/// Deadline of each lane's first request of a session, when the step deadline is shorter.
pub const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How often an idle practice lane looks at its inbox for late actions, and a lane whose agent
/// missed a deadline for a sign of life.
const IDLE_POLL: Duration = Duration::from_millis(50);

/// The `stale_step` error for an Action whose step is not outstanding, and why.
fn stale_step(a: &Action, why: &str) -> Msg {
    Msg::Error(protocol::Error {
        code: codes::STALE_STEP.into(),
        message: format!("step {} is not awaiting an Action ({why})", a.step),
        step: a.step,
        ..Default::default()
    })
}

/// Wall time of a lane's parts, logged once when the lane ends (target `arena_timings`, level
/// info: `ARENA_LOG=warn,arena_timings=info`) as the breakdown of an evaluation.
#[derive(Debug, Default)]
struct LaneTimings {
    /// Making the batched env (for the GPU backend: starting the worker, compiling), or taking
    /// a started one over (`warm_start`).
    startup_s: f64,
    warm_start: bool,
    /// Claiming episodes (database) and resetting their envs.
    claim_and_reset_s: f64,
    /// Of which the claims alone: the database's answer (an idle lane's wait for episodes
    /// included) and the episodes looked up.
    claim_s: f64,
    /// Of which the EpisodeStart infos (each episode's revealed reference).
    episode_infos_s: f64,
    /// Building each GetAction's observations.
    observe_s: f64,
    /// From a GetAction handed to the connection until its Action is back: transport both ways
    /// and the agent's own time.
    agent_s: f64,
    /// Checking actions into the batch.
    apply_s: f64,
    /// Handing finished episodes to the committer (their trajectories move).
    collect_s: f64,
    /// Handing running episodes' rows to the writer of their parts ([`Drafts::spill`]).
    spill_s: f64,
    /// Blocks of rows handed over.
    spilled: u64,
    requests: u64,
}

pub fn run_lane(
    ctx: &RunContext,
    lane: usize,
    inbox: mpsc::Receiver<Action>,
    commit: mpsc::Sender<Finished>,
) -> LaneEnd {
    let started = Instant::now();
    match Lane::new(ctx, lane, inbox, commit) {
        Ok(mut l) => {
            l.timings.startup_s = started.elapsed().as_secs_f64();
            // A panic ends the lane as an error does: its running episodes must not stay claimed.
            let end = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l.run()))
                .unwrap_or_else(|_| LaneEnd::Error(format!("simulator lane {lane} panicked")));
            if let LaneEnd::Error(why) = &end {
                l.return_running(why);
            }
            // Actions that came in since the last request are answered before the inbox goes
            // (the gateway answers those that come after it).
            l.refuse_late_actions();
            l.log_timings(started.elapsed().as_secs_f64());
            // A lane stopped by an error keeps nothing: its simulator may be what failed.
            if !matches!(end, LaneEnd::Error(_)) {
                let (shape, simulator) = (l.shape, l.env.into_handler());
                if ctx.warm.give_back(shape, simulator) {
                    tracing::debug!(lane, "simulator kept for a later lane");
                }
            }
            end
        }
        Err(e) => LaneEnd::Error(format!("starting simulator lane {lane}: {e:#}")),
    }
}

struct Lane<'a> {
    ctx: &'a RunContext,
    lane: usize,
    env: TrackingEnv,
    /// What the env's simulator is, to give it back for a later lane.
    shape: SimulatorShape,
    observations: episode::ObservationPlan,
    slots: Vec<Option<Running>>,
    inbox: mpsc::Receiver<Action>,
    commit: mpsc::Sender<Finished>,
    next_request: u64,
    scratch: ReferenceScratch,
    actions: Vec<f32>,
    timings: LaneTimings,
    /// Where running episodes' parts are written as they run; `None` where each is written
    /// whole when it ends (practice sessions, remote stores).
    drafts: Option<Drafts<'a>>,
    /// Set when the agent missed a step deadline: how many Actions the session had heard from
    /// it then ([`RunContext::answers_heard`]). Until it answers anything more, the lane claims no
    /// episode: a hung agent whose connection stays open loses the request's episodes, not
    /// every episode the lane could claim before the heartbeat timeout (32 a second at the
    /// defaults, most of a submission).
    missed_deadline: Option<u64>,
    /// When the lane last asked the database whether its submission has episodes to claim,
    /// while it waits after a missed deadline (once a second, not at each poll).
    last_left_check: Option<Instant>,
    /// The last request whose deadline passed: its step, when it was sent and its deadline, so
    /// that its late answer is told how late it came (network time counts against the deadline).
    last_missed: Option<(u64, Instant, Duration)>,
}

impl<'a> Lane<'a> {
    fn new(
        ctx: &'a RunContext,
        lane: usize,
        inbox: mpsc::Receiver<Action>,
        commit: mpsc::Sender<Finished>,
    ) -> anyhow::Result<Self> {
        let spec = &ctx.benchmark.spec;
        let mut env_config = episode::env_config(spec, ctx.gains.as_ref(), ctx.batch, ctx.sim_threads);
        env_config.backend = ctx.backend.clone();
        let shape = SimulatorShape {
            backend: env_config.backend.clone(),
            robot: env_config.robot.clone(),
            num_envs: env_config.num_envs,
            threads: env_config.threads,
        };
        let library = ctx.benchmark.library.clone();
        let mut timings = LaneTimings::default();
        let mut env = match ctx.warm.take(&shape) {
            Some(simulator) => {
                timings.warm_start = true;
                TrackingEnv::with_handler(env_config, library, simulator)?
            }
            None => TrackingEnv::new(env_config, library)?,
        };
        // Episodes reach the committer through `take_trajectory`, which appends a waiting row.
        env.record_behind_physics(true);
        Ok(Self {
            ctx,
            lane,
            shape,
            actions: vec![0.0; ctx.batch * env.action_width()],
            env,
            observations: episode::ObservationPlan::for_slots(spec, ctx.batch)
                .sending_goal_rows_once(ctx.goal_rows_once),
            slots: (0..ctx.batch).map(|_| None).collect(),
            inbox,
            commit,
            next_request: lane as u64,
            scratch: ReferenceScratch::default(),
            timings,
            drafts: match &ctx.sink {
                Sink::Submission {
                    objects, submission_id, ..
                } => Drafts::for_store(objects, submission_id),
                Sink::Practice => None,
            },
            missed_deadline: None,
            last_missed: None,
            last_left_check: None,
        })
    }

    fn log_timings(&self, wall_s: f64) {
        let t = &self.timings;
        let env = self.env.timings();
        let round = |s: f64| (s * 1000.0).round() / 1000.0;
        let breakdown = serde_json::json!({
            "lane": self.lane, "batch": self.slots.len(), "backend": self.env.handler().describe(),
            "warm_start": t.warm_start,
            "wall_s": round(wall_s), "startup_s": round(t.startup_s),
            "claim_and_reset_s": round(t.claim_and_reset_s), "claim_s": round(t.claim_s),
            "episode_infos_s": round(t.episode_infos_s), "reset_s": round(env.reset_s),
            "resets": env.resets, "observe_s": round(t.observe_s), "agent_s": round(t.agent_s),
            "apply_s": round(t.apply_s), "physics_s": round(env.physics_s),
            "refresh_s": round(env.refresh_s), "record_s": round(env.record_s),
            "collect_s": round(t.collect_s), "spill_s": round(t.spill_s), "spilled_blocks": t.spilled,
            "requests": t.requests, "steps": env.steps,
        });
        tracing::info!(target: "arena_timings", "lane {breakdown}");
    }

    fn run(&mut self) -> LaneEnd {
        loop {
            // No request is outstanding here: whatever the inbox holds answers an old one.
            let (agent_gone, answered_late) = self.refuse_late_actions();
            if agent_gone || self.ctx.out.is_closed() {
                // No episode is claimed for an agent that is gone: the gateway drops the
                // lanes' inboxes when the connection ends, before the writer notices.
                return self.connection_lost(CONNECTION_LOST);
            }
            let idle = self.slots.iter().all(Option::is_none);
            if let Some(heard) = self.missed_deadline {
                // An answer, late or to another lane's request: the agent is there and reads
                // the requests, and is given episodes again. A heartbeat alone is not enough
                // (`RunContext::answers_heard`); silence ends the session (the gateway's
                // heartbeat timeout), and so does the client's reconnect. With nothing left
                // to claim the lane goes on too, to end: the submission completes now rather
                // than when the silence ends the session.
                if answered_late
                    || self.ctx.answers_heard.load(Ordering::Relaxed) != heard
                    || !idle
                    || self.nothing_left_to_claim()
                {
                    self.missed_deadline = None;
                } else {
                    std::thread::sleep(IDLE_POLL);
                    continue;
                }
            }
            self.stop_if_submission_ended();
            let started = Instant::now();
            let filled = self.fill_slots(idle);
            self.timings.claim_and_reset_s += started.elapsed().as_secs_f64();
            let starting = match filled {
                Ok(s) => s,
                Err(end) => return end,
            };
            if self.ctx.ending.is_lost() {
                // Another lane found the connection gone while this claim was under way (and
                // may have re-queued what it took): the agent never saw these episodes.
                let unseen = starting.iter().map(|e| e.episode_id).collect();
                self.return_slots_of(&unseen, "the session ended before they started", GiveBack::Unseen);
                return self.connection_lost(CONNECTION_LOST);
            }
            if self.slots.iter().all(Option::is_none) {
                return LaneEnd::Drained;
            }
            if let Err(end) = self.announce(starting) {
                return end;
            }
            if self.slots.iter().flatten().all(|r| r.forced.is_some()) {
                // Nothing to ask the agent: only episodes that already failed to start.
                self.step_and_collect();
                continue;
            }
            let step = self.next_request;
            self.next_request += self.ctx.lanes as u64;
            let started = Instant::now();
            let request = self.request(step);
            self.timings.observe_s += started.elapsed().as_secs_f64();
            self.timings.requests += 1;
            if !self.send(Msg::GetAction(request)) {
                return self.connection_lost(CONNECTION_LOST);
            }
            let sent = Instant::now();
            // While the agent works: the rows the last refresh left waiting (the env's timings
            // count them as recording).
            self.env.flush_recording();
            let started = Instant::now();
            // A lane's first request may also wait for the agent's set-up (a model loading in
            // `configure`), so it gets at least FIRST_REQUEST_TIMEOUT.
            let timeout = if step == self.lane as u64 {
                self.ctx.step_timeout.max(FIRST_REQUEST_TIMEOUT)
            } else {
                self.ctx.step_timeout
            };
            let answer = self.wait_for(step, timeout);
            self.timings.agent_s += started.elapsed().as_secs_f64();
            let started = Instant::now();
            match answer {
                Wait::Action(action) => {
                    self.apply(action);
                    self.timings.apply_s += started.elapsed().as_secs_f64();
                }
                Wait::Timeout if self.replaced_elsewhere() => {
                    // The client's new connection took this session's place on another
                    // replica: its episodes run again there, as after a lost connection.
                    return self.connection_lost(CONNECTION_LOST);
                }
                Wait::Timeout => {
                    if self.missed_deadline.is_none() {
                        tracing::info!(
                            lane = self.lane,
                            "the agent missed step {step}'s deadline: no new episode on this lane until it answers something"
                        );
                    }
                    self.missed_deadline = Some(self.ctx.answers_heard.load(Ordering::Relaxed));
                    let _ = self.ctx.unanswered_since_ms.compare_exchange(
                        0,
                        crate::storage::now_ms(),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    self.last_missed = Some((step, sent, timeout));
                    let counted = match self.ctx.hosted {
                        true => "the policy runs on the server, whose CPU other runs share",
                        false => "time on the network counts",
                    };
                    let reason = format!(
                        "no Action for GetAction step {step} (a session-wide request counter) within the {:.3} s step deadline \
                         (counted from the request's sending: {counted})",
                        timeout.as_secs_f64()
                    );
                    for slot in self.slots.iter_mut().flatten() {
                        slot.forced = Some((EpisodeStatus::Timeout, reason.clone()));
                    }
                }
                Wait::Lost => return self.connection_lost(CONNECTION_LOST),
            }
            self.step_and_collect();
        }
    }

    /// A submission that ended while its episodes ran here (the organiser cancelled it, here or
    /// on another replica) has them stopped now: their results would not be counted, and a
    /// long clip ran on for minutes, asking the agent for actions, after the cancel.
    fn stop_if_submission_ended(&mut self) {
        let Sink::Submission {
            storage, submission_id, ..
        } = &self.ctx.sink
        else {
            return;
        };
        if !storage.submission_ended(submission_id) {
            return;
        }
        for running in self.slots.iter_mut().flatten().filter(|r| r.forced.is_none()) {
            running.forced = Some((
                EpisodeStatus::Failed,
                "the submission ended while the episode ran".into(),
            ));
        }
    }

    fn send(&self, msg: Msg) -> bool {
        self.ctx.out.send(msg).is_ok()
    }

    /// Sends the EpisodeStart of the episodes just claimed, in as many messages as their revealed
    /// references need; an episode whose reference alone exceeds a message starts without it and
    /// fails at once.
    fn announce(&mut self, starting: Vec<protocol::EpisodeInfo>) -> Result<(), LaneEnd> {
        let bytes = self
            .ctx
            .reference_value_bytes
            .map(|reference| episode_start::ValueBytes {
                reference,
                row: self.ctx.row_value_bytes.unwrap_or(reference),
            });
        let starts = episode_start::split(starting, bytes, crate::app::MAX_FRAME_BYTES);
        for (id, why) in starts.too_large {
            let slot = self.slots.iter_mut().flatten().find(|r| r.episode.index as u32 == id);
            if let Some(running) = slot.filter(|r| r.forced.is_none()) {
                running.forced = Some((EpisodeStatus::Failed, why));
            }
        }
        let mut messages = starts.messages.into_iter();
        while let Some(episodes) = messages.next() {
            let sent: std::collections::HashSet<u32> = episodes.iter().map(|e| e.episode_id).collect();
            if !self.send(Msg::EpisodeStart(EpisodeStart { episodes })) {
                // The agent never heard of these episodes and the ones after: no attempt counted.
                let unseen = sent
                    .into_iter()
                    .chain(messages.flatten().map(|e| e.episode_id))
                    .collect();
                self.return_slots_of(&unseen, "the session ended before they started", GiveBack::Unseen);
                return Err(self.connection_lost(CONNECTION_LOST));
            }
        }
        Ok(())
    }

    /// Answers `stale_step` to every Action waiting in the inbox. Called only while no request
    /// of this lane is outstanding, so each of them is late (its step timed out or was answered)
    /// or early (a step this lane has not asked for yet).
    /// Returns whether the inbox is closed (the session's connection has ended) and whether
    /// there was any such Action.
    fn refuse_late_actions(&self) -> (bool, bool) {
        let mut refused = false;
        loop {
            match self.inbox.try_recv() {
                Ok(a) => {
                    refused = true;
                    let why = match a.step >= self.next_request {
                        true => format!("not asked for yet; the next request is step {}", self.next_request),
                        false => format!(
                            "its episodes have ended (answered already or timed out){}",
                            self.how_late(a.step)
                        ),
                    };
                    self.send(stale_step(&a, &why));
                }
                Err(mpsc::TryRecvError::Empty) => return (false, refused),
                Err(mpsc::TryRecvError::Disconnected) => return (true, refused),
            }
        }
    }

    /// Claims episodes for free slots and resets their envs together. When `idle` and the
    /// source is a practice session, blocks until the client asks for one (or the session ends).
    fn fill_slots(&mut self, idle: bool) -> Result<Vec<arena_sdk::protocol::EpisodeInfo>, LaneEnd> {
        let mut starting = Vec::new();
        let mut resets = Vec::new();
        let free: Vec<usize> = (0..self.slots.len()).filter(|&s| self.slots[s].is_none()).collect();
        let started = Instant::now();
        let claimed = self.claim(idle, free.len())?;
        self.timings.claim_s += started.elapsed().as_secs_f64();
        let spec = &self.ctx.benchmark.spec;
        let started = Instant::now();
        starting.extend(episode_infos(
            spec,
            &self.ctx.benchmark.library,
            claimed.iter().map(|(e, a)| (e, *a)),
        ));
        self.timings.episode_infos_s += started.elapsed().as_secs_f64();
        // Sessions sent each reference_goal row once: the rows before the first request's newest
        // go with the start (which episode of `starting`, and its assignment).
        let mut first_goal_rows = Vec::new();
        for (i, ((episode, attempt), slot)) in claimed.into_iter().zip(free).enumerate() {
            let forced = match episode::assignment(spec, &episode) {
                Ok(a) => {
                    if self.observations.goal_rows_once() {
                        first_goal_rows.push((i, a));
                    }
                    resets.push((slot, a));
                    None
                }
                Err(e) => Some(reset_failure(&e)),
            };
            self.slots[slot] = Some(Running {
                episode,
                attempt,
                forced,
                draft: Draft::default(),
            });
        }
        self.fill_first_goal_rows(&mut starting, &first_goal_rows);
        let failures = self.env.handler().backend_failures();
        let failed = self.env.reset_isolating_failures(&resets);
        if self.env.handler().backend_failures() != failures && matches!(self.ctx.sink, Sink::Submission { .. }) {
            // The backend failed as a whole while resetting (a GPU worker that died or could not
            // start): not these episodes' doing. Not announced yet, they go back to the queue as
            // a server fault (the third fails them), as a step's failure does.
            let lost: std::collections::HashSet<u32> = failed
                .iter()
                .filter_map(|(slot, _)| self.slots[*slot].as_ref().map(|r| r.episode.index as u32))
                .collect();
            let why = failed.first().map(|(_, e)| format!("{e:#}")).unwrap_or_default();
            tracing::error!(lane = self.lane, "the simulator failed resetting episodes: {why}");
            for &(slot, _) in &failed {
                self.env.stop(slot);
            }
            self.return_slots_of(&lost, &format!("the server: simulator: {why}"), GiveBack::ServerFault);
            starting.retain(|e| !lost.contains(&e.episode_id));
            return Ok(starting);
        }
        for (slot, e) in failed {
            if let Some(running) = self.slots[slot].as_mut() {
                running.forced = Some(reset_failure(&e.into()));
            }
        }
        Ok(starting)
    }

    /// Sets each starting episode's first `reference_goal` rows (`(index in starting, assignment)`),
    /// on the env's threads when there are many: 7 rows per episode at g1-smoke's horizon.
    fn fill_first_goal_rows(&self, starting: &mut [protocol::EpisodeInfo], wanted: &[(usize, EpisodeAssignment)]) {
        /// Below this many episodes one thread computes them.
        const PARALLEL_FROM: usize = 16;
        let (plan, env) = (&self.observations, &self.env);
        let rows = |(_, a): &(usize, EpisodeAssignment)| plan.first_goal_rows(env, a);
        let computed: Vec<Vec<f32>> = match env.handler().pool() {
            Some(pool) if wanted.len() >= PARALLEL_FROM => pool.install(|| wanted.par_iter().map(rows).collect()),
            _ => wanted.iter().map(rows).collect(),
        };
        for ((i, _), rows) in wanted.iter().zip(computed) {
            starting[*i].reference_goal = rows;
        }
    }

    /// Up to `max` episodes to run, with their attempt numbers, in one claim. When `block`,
    /// waits until there is at least one or there will be none.
    fn claim(&self, block: bool, max: usize) -> Result<Vec<(Episode, u32)>, LaneEnd> {
        if max == 0 {
            return Ok(Vec::new());
        }
        match &self.ctx.source {
            JobSource::Practice(rx) => {
                let rx = rx.lock().expect("practice queue lock");
                let mut claimed = Vec::new();
                if block {
                    // Idle until the client asks for an episode; a late action meanwhile is
                    // answered within a poll, not when the next episode starts.
                    loop {
                        match rx.recv_timeout(IDLE_POLL) {
                            Ok(e) => {
                                claimed.push((e, 1));
                                break;
                            }
                            Err(RecvTimeoutError::Timeout) => {
                                if self.refuse_late_actions().0 {
                                    return Ok(claimed);
                                }
                            }
                            Err(RecvTimeoutError::Disconnected) => return Ok(claimed),
                        }
                    }
                }
                while claimed.len() < max {
                    let Ok(e) = rx.try_recv() else { break };
                    claimed.push((e, 1));
                }
                Ok(claimed)
            }
            JobSource::Claims => {
                let Sink::Submission {
                    storage, submission_id, ..
                } = &self.ctx.sink
                else {
                    return Err(LaneEnd::Error(
                        "a claimed episode source needs a stored submission".into(),
                    ));
                };
                loop {
                    let claimed = db_call(&self.ctx.runtime, "claiming episodes", || {
                        storage.claim_next_episodes(submission_id, max)
                    });
                    let claimed = match claimed {
                        Ok(claimed) => claimed,
                        Err(e) => return Err(LaneEnd::Error(format!("claiming episodes: {e}"))),
                    };
                    if !claimed.is_empty() {
                        let episodes = &self.ctx.benchmark.episodes;
                        let found: Result<Vec<_>, LaneEnd> = claimed
                            .iter()
                            .map(|&(idx, attempt)| {
                                // Episodes are listed in index order; the search is the fallback.
                                let at = usize::try_from(idx).ok().and_then(|i| episodes.get(i));
                                (at.filter(|e| e.index as i64 == idx), idx, attempt)
                            })
                            .map(|(at, idx, attempt)| match at.or_else(|| episodes.iter().find(|e| e.index as i64 == idx)) {
                                Some(episode) => Ok((*episode, attempt as u32)),
                                None => Err(LaneEnd::Error(format!(
                                    "claimed episode {idx} of submission {submission_id}, which benchmark {} does not have",
                                    self.ctx.benchmark.spec.name
                                ))),
                            })
                            .collect();
                        if let Err(LaneEnd::Error(why)) = &found {
                            // None of this claim reaches a slot: the whole claim goes back, a
                            // server fault for the episodes the benchmark lacks (the third
                            // fails them), charged to nobody for the others, which never
                            // started.
                            let known = |idx: i64| episodes.iter().any(|e| e.index as i64 == idx);
                            let (present, missing): (Vec<_>, Vec<_>) =
                                claimed.iter().partition(|&&(idx, _)| known(idx));
                            let why = format!("the server: {why}");
                            self.give_back(&missing, &why, GiveBack::ServerFault);
                            self.give_back(&present, &why, GiveBack::NeverStarted);
                        }
                        return found;
                    }
                    // Nothing to claim. An idle lane waits while another server holds some of
                    // this submission's episodes: they finish there, or their lease runs out
                    // and one of them is claimed here.
                    if !block {
                        return Ok(Vec::new());
                    }
                    let expiry = db_call(&self.ctx.runtime, "reading the claims", || {
                        storage.others_lease_expiry(submission_id)
                    });
                    match expiry {
                        Ok(None) => return Ok(Vec::new()),
                        Ok(Some(_)) if self.ctx.out.is_closed() => return Err(LaneEnd::ConnectionLost),
                        Ok(Some(at)) => {
                            // On the database's clock, as leases are. A claim already past its
                            // expiry and not settled yet (just after a database outage, nobody
                            // settles one for a lease: `Storage::expire_leases`) is looked at
                            // again in half a second, not ten times a second.
                            let left = (at - storage.now_for_leases()).max(0) as u64;
                            let wait = if left == 0 { 500 } else { left.clamp(100, 1000) };
                            std::thread::sleep(Duration::from_millis(wait));
                            if self.refuse_late_actions().0 {
                                return Err(LaneEnd::ConnectionLost);
                            }
                        }
                        Err(e) => return Err(LaneEnd::Error(format!("waiting for claimed episodes: {e}"))),
                    }
                }
            }
        }
    }

    /// The GetAction of `step`: every running episode's observation, built on the env's worker
    /// threads when the batch is large enough to pay for the hand-off.
    fn request(&mut self, step: u64) -> GetAction {
        /// Below this many episodes one thread builds them (a few microseconds each).
        const PARALLEL_FROM: usize = 64;
        let (plan, env) = (&self.observations, &self.env);
        let wanted: Vec<(usize, u32)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(slot, r)| match r {
                Some(r) if r.forced.is_none() => Some((slot, r.episode.index as u32)),
                _ => None,
            })
            .collect();
        let build = |scratch: &mut ReferenceScratch, &(slot, episode_id): &(usize, u32)| {
            let mut values = vec![0.0f32; plan.size()];
            plan.fill(env, slot, scratch, &mut values);
            EpisodeObservation {
                episode_id,
                episode_step: env.infos()[slot].step as u32,
                values,
            }
        };
        let observations = match env.handler().pool() {
            Some(pool) if wanted.len() >= PARALLEL_FROM => {
                pool.install(|| wanted.par_iter().map_init(ReferenceScratch::default, build).collect())
            }
            _ => wanted.iter().map(|w| build(&mut self.scratch, w)).collect(),
        };
        GetAction { step, observations }
    }

    /// Whether the submission has no episode waiting to be claimed (asked at most once a
    /// second; a practice session's requests always may come).
    fn nothing_left_to_claim(&mut self) -> bool {
        let Sink::Submission {
            storage, submission_id, ..
        } = &self.ctx.sink
        else {
            return false;
        };
        if self
            .last_left_check
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return false;
        }
        self.last_left_check = Some(Instant::now());
        matches!(
            self.ctx.runtime.block_on(storage.episode_counts(submission_id)),
            Ok((0, _, _))
        )
    }

    /// Whether a client's new connection named this session as the one it lost, on a replica
    /// that could not tell it in memory (`Storage::mark_session_replaced`). Asked only when a
    /// request goes unanswered; a database that does not answer says no.
    fn replaced_elsewhere(&self) -> bool {
        let Sink::Submission { storage, .. } = &self.ctx.sink else {
            return false;
        };
        matches!(
            self.ctx
                .runtime
                .block_on(storage.session_replaced(&self.ctx.session_id)),
            Ok(true)
        )
    }

    /// For the late answer to the request that last missed its deadline: how late it came. An
    /// agent that answers in milliseconds over a slow link learns that the link took the time.
    fn how_late(&self, step: u64) -> String {
        match self.last_missed {
            Some((missed, sent, deadline)) if missed == step => format!(
                " (this answer came {:.3} s after its request was sent, past the {:.3} s step deadline, which \
                 counts the time on the network both ways)",
                sent.elapsed().as_secs_f64(),
                deadline.as_secs_f64()
            ),
            _ => String::new(),
        }
    }

    fn wait_for(&self, step: u64, timeout: Duration) -> Wait {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.inbox.recv_timeout(left) {
                Ok(a) if a.step == step => return Wait::Action(a),
                Ok(a) => {
                    let why = match a.step > step {
                        true => format!("not asked for yet; waiting for step {step}"),
                        false => format!(
                            "answered already or timed out{}; waiting for step {step}",
                            self.how_late(a.step)
                        ),
                    };
                    self.send(stale_step(&a, &why));
                }
                Err(RecvTimeoutError::Timeout) => return Wait::Timeout,
                Err(RecvTimeoutError::Disconnected) => return Wait::Lost,
            }
        }
    }

    /// Copies each episode's action into the env's batch; an episode whose entry is missing,
    /// wrong-sized, duplicated or not finite is failed with the reason (the rest of the batch
    /// goes on).
    fn apply(&mut self, action: Action) {
        self.actions.fill(0.0);
        let mut seen = vec![false; self.slots.len()];
        // Each episode's slot, found in one pass (a search per action made a step of 4096
        // episodes cost 4096² comparisons); a slot holds one episode, the first one wins.
        let mut slot_of: std::collections::HashMap<u32, usize> =
            std::collections::HashMap::with_capacity(self.slots.len());
        for (slot, running) in self.slots.iter().enumerate() {
            if let Some(r) = running {
                slot_of.entry(r.episode.index as u32).or_insert(slot);
            }
        }
        // Entries for episodes the request does not hold: one Error for the whole Action (an
        // Action of a million such entries got a million Errors queued).
        let mut strangers: Vec<u32> = Vec::new();
        for entry in &action.actions {
            // An episode whose run was ended earlier in this very action is no longer in it.
            let found = slot_of
                .get(&entry.episode_id)
                .copied()
                .filter(|&slot| self.slots[slot].as_ref().is_some_and(|r| r.forced.is_none()));
            let Some(slot) = found else {
                strangers.push(entry.episode_id);
                continue;
            };
            // Every reason has one form: "step N" is the request's step (the `step` of
            // get_action and action), the episode's own step follows in parentheses.
            let at = self.env.infos()[slot].step;
            let running = self.slots[slot].as_mut().expect("found above");
            let fail = |what: String| Some((EpisodeStatus::Failed, format!("step {}: {what}", action.step)));
            if seen[slot] {
                running.forced = fail(format!(
                    "two actions for episode {} (at its step {at})",
                    entry.episode_id
                ));
                continue;
            }
            seen[slot] = true;
            // Joint-position mode: 29 targets, optionally followed by 29 feed-forward torques.
            let width = self.env.action_width();
            let sizes_ok = entry.values.len() == NUM_JOINTS || entry.values.len() == width;
            if !sizes_ok {
                let expected = if width == NUM_JOINTS {
                    format!("{NUM_JOINTS}")
                } else {
                    format!("{NUM_JOINTS} (targets) or {width} (targets, then feed-forward torques)")
                };
                running.forced = fail(format!(
                    "action for episode {} has {} values, expected {expected} (at its step {at})",
                    entry.episode_id,
                    entry.values.len()
                ));
                continue;
            }
            if let Some(j) = entry.values.iter().position(|v| !v.is_finite()) {
                let v = entry.values[j];
                // ±inf may be a finite number sent as text that overflows a 32-bit float.
                let hint = if v.is_infinite() {
                    " (actions are 32-bit floats: |a| < 3.4e38)"
                } else {
                    ""
                };
                running.forced = fail(format!(
                    "non-finite action for episode {} (at its step {at}; joint {j}: {v}{hint})",
                    entry.episode_id
                ));
                continue;
            }
            // Checked here as the environment would, to say it in the protocol's form.
            if let Some(why) = self.env.joint_command_error(&entry.values) {
                running.forced = fail(format!(
                    "action out of range for episode {} (at its step {at}; {why})",
                    entry.episode_id
                ));
                continue;
            }
            self.actions[slot * width..slot * width + entry.values.len()].copy_from_slice(&entry.values);
        }
        if !strangers.is_empty() {
            // Named once each, however many entries an agent sent for one.
            strangers.sort_unstable();
            strangers.dedup();
            let _ = self.ctx.out.send(Msg::Error(protocol::Error {
                code: codes::INVALID_ACTION.into(),
                message: format!(
                    "step {}: {} not in this request; {} ignored",
                    action.step,
                    named_episodes(&strangers),
                    if strangers.len() == 1 {
                        "its action is"
                    } else {
                        "their actions are"
                    }
                ),
                step: action.step,
                ..Default::default()
            }));
        }
        for (slot, running) in self.slots.iter_mut().enumerate() {
            if let Some(r) = running
                && r.forced.is_none()
                && !seen[slot]
            {
                let at = self.env.infos()[slot].step;
                r.forced = Some((
                    EpisodeStatus::Failed,
                    format!(
                        "step {}: no action for episode {} (at its step {at})",
                        action.step, r.episode.index
                    ),
                ));
            }
        }
    }

    /// Stops forced episodes, steps the rest and hands every finished one to the committer.
    fn step_and_collect(&mut self) {
        for (slot, running) in self.slots.iter().enumerate() {
            if running.as_ref().is_some_and(|r| r.forced.is_some()) {
                self.env.stop(slot);
            }
        }
        if self.slots.iter().flatten().any(|r| r.forced.is_none()) {
            let failures = self.env.handler().backend_failures();
            let stepped = self.env.step(&self.actions).map(|_| ()).map_err(|e| e.to_string());
            match stepped {
                Err(e) => self.simulator_failed(&e),
                // The backend failed every env it ran, with its reason (a GPU worker that died).
                Ok(()) if self.env.handler().backend_failures() != failures => {
                    let reason = (0..self.slots.len())
                        .filter(|&slot| self.slots[slot].as_ref().is_some_and(|r| r.forced.is_none()))
                        .find_map(|slot| match &self.env.infos()[slot].status {
                            arena_sim::env::EpisodeStatus::Failed(why) => Some(why.clone()),
                            _ => None,
                        })
                        .unwrap_or_else(|| "the simulation backend failed".into());
                    self.simulator_failed(&reason);
                }
                Ok(()) => {}
            }
        }
        let started = Instant::now();
        let running = self.slots.iter().enumerate();
        episode::settle_recordings(
            &mut self.env,
            running.filter_map(|(s, r)| r.as_ref().map(|r| (s, &r.episode))),
        );
        for slot in 0..self.slots.len() {
            let Some(running) = &self.slots[slot] else { continue };
            let ended = episode::finished_status(&mut self.env, slot, &running.episode);
            let (status, reason) = match (&running.forced, ended) {
                (Some((s, r)), _) => (*s, Some(r.clone())),
                (None, Some(end)) => end,
                (None, None) => continue,
            };
            let mut running = self.slots[slot].take().expect("checked above");
            let finished = Finished {
                episode: running.episode,
                attempt: running.attempt,
                status,
                reason,
                trajectory: self.env.take_trajectory(slot),
                draft: running.draft.take(),
                engine: self.env.handler().describe(),
            };
            if let Err(mpsc::SendError(lost)) = self.commit.send(finished) {
                tracing::error!(lane = self.lane, "the committer is gone; an episode result is lost");
                // Its claim is let go, so that the episode runs again once the lease runs out.
                if let Sink::Submission {
                    storage, submission_id, ..
                } = &self.ctx.sink
                {
                    storage.forget_claim(submission_id, lost.episode.index as i64, lost.attempt as i64);
                }
            }
        }
        self.timings.collect_s += started.elapsed().as_secs_f64();
        self.spill();
    }

    /// Hands the rows of running episodes to the writer of their parts, a block at a time, so
    /// that little is left to write when they end together.
    fn spill(&mut self) {
        let Some(drafts) = &self.drafts else { return };
        let started = Instant::now();
        let env = &self.env;
        let running: Vec<Spillable<'_>> = self
            .slots
            .iter_mut()
            .enumerate()
            .filter_map(|(slot, r)| {
                let r = r.as_mut().filter(|r| r.forced.is_none())?;
                Some(Spillable {
                    draft: &mut r.draft,
                    idx: r.episode.index as i64,
                    attempt: r.attempt as i64,
                    rows: &env.trajectory(slot).rows,
                })
            })
            .collect();
        self.timings.spilled += drafts.spill(running) as u64;
        self.timings.spill_s += started.elapsed().as_secs_f64();
    }

    /// The backend failed as a whole in a step (a GPU worker that died): not the episodes' doing,
    /// whose own instabilities end them one by one (`simulator: …`, FAILED). A submission's
    /// stepped episodes go back to the queue as a server fault (re-run from the start, not
    /// charged to the agent's attempts; the third such loss fails them) and the agent is told
    /// why it will hear no more of them; the backend starts afresh at the next reset. Practice
    /// episodes, which have no queue, end FAILED with the reason.
    fn simulator_failed(&mut self, error: &str) {
        let stepped: Vec<usize> = (0..self.slots.len())
            .filter(|&slot| self.slots[slot].as_ref().is_some_and(|r| r.forced.is_none()))
            .collect();
        for &slot in &stepped {
            self.env.stop(slot);
        }
        if !matches!(self.ctx.sink, Sink::Submission { .. }) {
            let reason = format!("simulator: {error}");
            for &slot in &stepped {
                if let Some(r) = &mut self.slots[slot] {
                    r.forced = Some((EpisodeStatus::Failed, reason.clone()));
                }
            }
            return;
        }
        let runs: Vec<Running> = stepped.iter().filter_map(|&slot| self.slots[slot].take()).collect();
        let ids: Vec<u32> = runs.iter().map(|r| r.episode.index as u32).collect();
        tracing::error!(
            lane = self.lane,
            "the simulator failed: {error}; {} returned to the queue",
            named_episodes(&ids)
        );
        let returned: Vec<(i64, i64)> = runs
            .iter()
            .map(|r| (r.episode.index as i64, r.attempt as i64))
            .collect();
        self.give_back(
            &returned,
            &format!("the server: simulator: {error}"),
            GiveBack::ServerFault,
        );
        self.send(Msg::Error(protocol::Error {
            code: codes::INTERNAL.into(),
            message: format!(
                "the server's simulator failed ({error}): {} back in the queue, to run again from the start \
                 with attempt + 1 (not charged to your attempts); no episode_end comes for this run of them",
                named_episodes(&ids)
            ),
            ..Default::default()
        }));
    }

    /// After an error that ends the lane: its running episodes go back to the queue as a
    /// server fault, not charged to the agent, so that this or another server runs them again
    /// rather than renewing their claims until a restart.
    fn return_running(&mut self, why: &str) {
        let running = self.take_running();
        self.give_back(&running, &format!("the server: {why}"), GiveBack::ServerFault);
    }

    /// Empties every slot; the runs they held, (episode index, attempt).
    fn take_running(&mut self) -> Vec<(i64, i64)> {
        self.slots
            .iter_mut()
            .filter_map(Option::take)
            .map(|r| (r.episode.index as i64, r.attempt as i64))
            .collect()
    }

    /// Empties the slots running `episodes` and gives those back ([`Self::give_back`]).
    fn return_slots_of(&mut self, episodes: &std::collections::HashSet<u32>, reason: &str, how: GiveBack) {
        let running: Vec<(i64, i64)> = self
            .slots
            .iter_mut()
            .filter(|r| r.as_ref().is_some_and(|r| episodes.contains(&(r.episode.index as u32))))
            .filter_map(Option::take)
            .map(|r| (r.episode.index as i64, r.attempt as i64))
            .collect();
        self.give_back(&running, reason, how);
    }

    /// Returns claimed episodes to the queue, charged to nobody, `reason` kept as their last
    /// failure: as a server fault ([`crate::storage::Storage::return_episodes`]) or, for claims
    /// that never started, as if never claimed. Should the database refuse, the claims are let
    /// go all the same and their leases run out.
    fn give_back(&self, runs: &[(i64, i64)], reason: &str, how: GiveBack) {
        let Sink::Submission {
            storage, submission_id, ..
        } = &self.ctx.sink
        else {
            return;
        };
        if runs.is_empty() {
            return;
        }
        let returned = db_call(&self.ctx.runtime, "returning episodes", || async {
            match how {
                GiveBack::ServerFault => storage.return_episodes(submission_id, runs, reason).await,
                GiveBack::NeverStarted => Ok((storage.unclaim_episodes(submission_id, runs, reason, false).await?, 0)),
                GiveBack::Unseen => Ok((storage.unclaim_episodes(submission_id, runs, reason, true).await?, 0)),
            }
        });
        match returned {
            // Nothing left to return: the stop's own pass (or an expiry) returned them first.
            Ok((0, 0)) => tracing::debug!(
                lane = self.lane,
                runs = runs.len(),
                "{reason}: the episodes had been returned to the queue already"
            ),
            Ok((n, failed)) => tracing::warn!(
                lane = self.lane,
                returned = n,
                failed,
                "{reason}: episodes returned to the queue (those the server has lost {} times fail)",
                crate::storage::MAX_SERVER_FAULTS
            ),
            Err(e) => {
                tracing::error!(
                    lane = self.lane,
                    "{reason}: returning episodes failed ({e}); they run again once their leases expire"
                );
                for &(idx, attempt) in runs {
                    storage.forget_claim(submission_id, idx, attempt);
                }
            }
        }
    }

    /// Re-queues the running episodes (a lost connection re-runs them from the start, up to the
    /// attempt limit) and ends the lane. A session the server's stop ended charges nobody.
    fn connection_lost(&mut self, why: &str) -> LaneEnd {
        // Before anything goes back to the queue: see `SessionEnding::lost`.
        self.ctx.ending.mark_lost();
        let why = &self.ctx.ending.reason(why);
        let running = self.take_running();
        if let Sink::Submission { storage, .. } = &self.ctx.sink
            && storage.is_stopping()
        {
            self.give_back(&running, crate::storage::SERVER_STOPPED, GiveBack::NeverStarted);
            return LaneEnd::ConnectionLost;
        }
        if let Sink::Submission {
            storage,
            submission_id,
            max_attempts,
            ..
        } = &self.ctx.sink
            && !running.is_empty()
        {
            let requeued = db_call(&self.ctx.runtime, "re-queueing episodes", || {
                storage.requeue_episodes(submission_id, &running, *max_attempts as i64, why)
            });
            match requeued {
                Ok((again, failed)) => {
                    tracing::info!(lane = self.lane, again, failed, "{why}: running episodes re-queued")
                }
                Err(e) => {
                    // Let go: their leases run out and they are settled as expired claims.
                    for &(idx, attempt) in &running {
                        storage.forget_claim(submission_id, idx, attempt);
                    }
                    return LaneEnd::Error(format!("re-queueing episodes after {why}: {e}"));
                }
            }
        }
        LaneEnd::ConnectionLost
    }
}

enum Wait {
    Action(Action),
    Timeout,
    Lost,
}

/// How claimed episodes go back to the queue ([`Lane::give_back`]).
#[derive(Debug, Clone, Copy)]
enum GiveBack {
    /// The server failed them: a server fault, counted toward `MAX_SERVER_FAULTS`.
    ServerFault,
    /// Charged to nobody: they never started (the claim they came in could not start), or the
    /// server's stop ended their session.
    NeverStarted,
    /// Charged to nobody, the agent never having heard of them (it left before their
    /// `episode_start`): an episode that failed before keeps that failure's reason, the run
    /// that never began being none.
    Unseen,
}

/// How an episode whose env could not be reset ends.
/// "episode 7 is" / "episodes 7, 9 and 12 are" / "episodes 1, 2, 3, … (5000 in all) are": at
/// most ten ids.
fn named_episodes(ids: &[u32]) -> String {
    const SHOWN: usize = 10;
    let list = |ids: &[u32]| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    match ids {
        [one] => format!("episode {one} is"),
        [init @ .., last] if ids.len() <= SHOWN => format!("episodes {} and {last} are", list(init)),
        _ => format!("episodes {}, … ({} in all) are", list(&ids[..SHOWN]), ids.len()),
    }
}

fn reset_failure(e: &anyhow::Error) -> (EpisodeStatus, String) {
    (
        EpisodeStatus::Failed,
        format!("simulator: resetting the episode: {e:#}"),
    )
}

#[cfg(test)]
mod tests {
    use super::named_episodes;

    #[test]
    fn episodes_are_named_ten_at_most() {
        assert_eq!(named_episodes(&[7]), "episode 7 is");
        assert_eq!(named_episodes(&[7, 9, 12]), "episodes 7, 9 and 12 are");
        let many: Vec<u32> = (0..5000).collect();
        assert_eq!(
            named_episodes(&many),
            "episodes 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, … (5000 in all) are"
        );
    }
}
