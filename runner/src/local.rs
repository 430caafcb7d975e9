//! The local runner: drives an [`Agent`](arena_sdk::Agent) through a whole benchmark against an in-process
//! simulator, with no server and no network. Observations, episode ends and scores come from the
//! same code the server uses, so a local score is what a submission would get.

use crate::episode::{self, ReferenceScratch};
use crate::gains::SessionGains;
use anyhow::Context;
use arena_bench::aggregate::{EpisodeResult, MetricsAggregator};
use arena_bench::spec::{BenchmarkSpec, Episode};
use arena_data::{MotionClip, NUM_JOINTS};
use arena_sdk::protocol::{EpisodeEnd, EpisodeInfo};
use arena_sdk::{Agent, Batch};
use arena_sim::RobotConfig;
use arena_sim::SimBackend;
use arena_sim::env::{TrackingEnv, TrackingEnvConfig};
use arena_sim::motion::MotionLibrary;
use rayon::prelude::*;
use std::sync::Arc;
use std::time::Instant;

/// Options of a local run.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Envs stepped together (episodes in flight).
    pub batch: usize,
    /// Simulation threads (0 = rayon's default).
    pub threads: usize,
    /// Physics backend.
    pub backend: SimBackend,
    /// The joint-position mode's gains, as a session resolved them; None = the benchmark's.
    pub gains: Option<SessionGains>,
}

impl Default for LocalOptions {
    fn default() -> Self {
        Self {
            batch: 16,
            threads: 0,
            backend: SimBackend::Cpu,
            gains: None,
        }
    }
}

/// Progress callback: (episodes finished, episodes in all, the result just finished).
pub type Progress<'a> = dyn FnMut(usize, usize, &EpisodeResult) + 'a;

/// The protocol's description of each starting (episode, attempt). A benchmark that hides motion
/// names sends neither the name nor where the window lies or how long it lasts (0), which would
/// tell the clip apart just as well. A revealed reference is computed once per motion (windows
/// of one clip carry the same whole reference: 6000 frames for a 2-minute clip).
pub fn episode_infos<'a>(
    spec: &BenchmarkSpec,
    library: &MotionLibrary,
    episodes: impl IntoIterator<Item = (&'a Episode, u32)>,
) -> Vec<EpisodeInfo> {
    let mut references = std::collections::HashMap::new();
    episodes
        .into_iter()
        .map(|(episode, attempt)| {
            let mut info = info_without_reference(spec, library, episode, attempt);
            if spec.observations.reveal_reference {
                let motion = &library.motions[episode.motion];
                let reference = references
                    .entry(episode.motion)
                    .or_insert_with(|| episode::reference_of(motion));
                info.reference = Some(reference.clone());
            }
            info
        })
        .collect()
}

fn info_without_reference(
    spec: &BenchmarkSpec,
    library: &MotionLibrary,
    episode: &Episode,
    attempt: u32,
) -> EpisodeInfo {
    let motion = &library.motions[episode.motion];
    let hidden = spec.observations.hide_motion_names;
    EpisodeInfo {
        episode_id: episode.index as u32,
        motion: if hidden { String::new() } else { motion.name.clone() },
        start_s: if hidden { 0.0 } else { episode.start_s },
        duration_s: if hidden { 0.0 } else { episode.duration_s },
        steps: if hidden { 0 } else { episode::episode_steps(episode) },
        seed: episode.seed,
        dr_level: spec.episodes.dr_level as u32,
        attempt,
        reference: None,
        // The local runner hands whole rows to its agent.
        reference_goal: Vec::new(),
    }
}

/// Below this many episodes one thread builds the observations (a few microseconds each).
const PARALLEL_FROM: usize = 64;

/// Runs every episode of `spec` with `agent` and returns the aggregator holding the results.
pub fn run_local(
    spec: &BenchmarkSpec,
    clips: &[MotionClip],
    agent: &mut dyn Agent,
    options: &LocalOptions,
    progress: &mut Progress<'_>,
) -> anyhow::Result<MetricsAggregator> {
    run_local_described(spec, clips, agent, options, progress).map(|run| run.aggregator)
}

/// What an in-process run produced: its results, and the simulator that ran every episode as it
/// describes itself (`Handler::describe`: `cpu (MuJoCo 3.17.0)`, `gpu (…)`), which a server
/// records per episode.
pub struct LocalRun {
    pub aggregator: MetricsAggregator,
    pub engine: String,
}

/// [`run_local`], with the engine that ran it.
pub fn run_local_described(
    spec: &BenchmarkSpec,
    clips: &[MotionClip],
    agent: &mut dyn Agent,
    options: &LocalOptions,
    progress: &mut Progress<'_>,
) -> anyhow::Result<LocalRun> {
    let began = Instant::now();
    let mut timings = LocalTimings::default();
    let robot = RobotConfig::default();
    let library = Arc::new(MotionLibrary::from_clips(clips, &robot).context("building the motion library")?);
    let lengths: Vec<f64> = library.motions.iter().map(|m| m.length_s).collect();
    let episodes = spec.expand_episodes(&lengths).map_err(anyhow::Error::msg)?;
    anyhow::ensure!(!episodes.is_empty(), "benchmark {} expands to no episodes", spec.name);
    let batch = options.batch.clamp(1, episodes.len());
    let env_config = TrackingEnvConfig {
        backend: options.backend.clone(),
        ..episode::env_config(spec, options.gains.as_ref(), batch, options.threads)
    };
    let started = Instant::now();
    let mut env = TrackingEnv::new(env_config, library.clone())?;
    // Only ended episodes' trajectories are read (`finished_status` stops an env at its
    // window's end, which appends its waiting row).
    env.record_behind_physics(true);
    timings.startup_s = started.elapsed().as_secs_f64();
    timings.setup_s = started.duration_since(began).as_secs_f64();
    let plan = episode::ObservationPlan::for_slots(spec, batch);
    let session = episode::episode_spec(spec, options.gains.as_ref(), batch as u32, 1, 0.0);
    agent.configure(&session);
    agent
        .check(&session)
        .map_err(|reason| anyhow::anyhow!("the agent cannot serve benchmark {}: {reason}", spec.name))?;
    let metric_config = episode::metric_config(spec);
    let mut aggregator = MetricsAggregator::new();
    let mut running: Vec<Option<&Episode>> = vec![None; batch];
    let mut queue = episodes.iter();
    let mut finished = 0;
    let mut scratch = ReferenceScratch::default();
    // Per-step buffers, sized once.
    let mut ids: Vec<u32> = Vec::with_capacity(batch);
    let mut steps: Vec<u32> = Vec::with_capacity(batch);
    let mut slots: Vec<usize> = Vec::with_capacity(batch);
    let mut observations = vec![0.0f32; batch * plan.size()];
    let mut agent_actions = vec![0.0f32; batch * NUM_JOINTS];
    // The env's rows may be wider (joint-position mode: targets, then feed-forward torques, 0 here).
    let width = env.action_width();
    let mut env_actions = vec![0.0f32; batch * width];
    let mut starting = Vec::new();
    let mut step_counter = 0u64;

    // Episodes starting together are reset in one call: on the GPU backend each reset call is
    // a round trip to the worker.
    let mut refills: Vec<(usize, &Episode)> = Vec::with_capacity(batch);
    let start = |env: &mut TrackingEnv, refills: &[(usize, &Episode)], starting: &mut Vec<EpisodeInfo>| {
        let assignments = refills
            .iter()
            .map(|&(slot, ep)| Ok((slot, episode::assignment(spec, ep)?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        env.reset(&assignments)?;
        starting.extend(episode_infos(spec, &library, refills.iter().map(|&(_, ep)| (ep, 1))));
        anyhow::Ok(())
    };
    refills.extend(queue.by_ref().take(batch).enumerate());
    let started = Instant::now();
    start(&mut env, &refills, &mut starting)?;
    timings.starts_s += started.elapsed().as_secs_f64();
    for &(slot, ep) in &refills {
        running[slot] = Some(ep);
    }
    refills.clear();
    while running.iter().any(Option::is_some) {
        if !starting.is_empty() {
            agent.reset(&starting);
            starting.clear();
        }
        ids.clear();
        steps.clear();
        slots.clear();
        let d = plan.size();
        for (slot, ep) in running.iter().enumerate() {
            let Some(ep) = ep else { continue };
            ids.push(ep.index as u32);
            steps.push(env.infos()[slot].step as u32);
            slots.push(slot);
        }
        let n = slots.len();
        let started = Instant::now();
        let rows = observations[..n * d].chunks_mut(d.max(1)).zip(&slots);
        match env.handler().pool() {
            // Thousands of rows: built on the env's threads, as the server's lanes do.
            Some(pool) if n >= PARALLEL_FROM && d > 0 => {
                let env = &env;
                let rows = observations[..n * d].par_chunks_mut(d).zip(slots.par_iter());
                pool.install(|| {
                    rows.for_each_init(ReferenceScratch::default, |scratch, (row, &slot)| {
                        plan.fill(env, slot, scratch, row)
                    })
                });
            }
            _ => {
                for (row, &slot) in rows {
                    plan.fill(&env, slot, &mut scratch, row);
                }
            }
        }
        let batch_view = Batch {
            step: step_counter,
            episodes: &ids,
            episode_steps: &steps,
            observations: &observations[..n * d],
            layout: plan.layout(),
        };
        step_counter += 1;
        let acting = Instant::now();
        timings.observe_s += acting.duration_since(started).as_secs_f64();
        // Rows the agent leaves unwritten are zeros (as the SDK's client sends), never the
        // previous step's actions of another episode.
        agent_actions[..n * NUM_JOINTS].fill(0.0);
        agent.act(&batch_view, &mut agent_actions[..n * NUM_JOINTS]);
        // As the server does with a client's or hosted policy's failure: the run stops with the
        // agent's own reason, not as episodes failed by the actions it left behind.
        if let Some(reason) = agent.failure() {
            anyhow::bail!(
                "the agent failed at step {} ({} episodes finished): {reason}",
                step_counter - 1,
                finished
            );
        }
        let stepping = Instant::now();
        timings.agent_s += stepping.duration_since(acting).as_secs_f64();
        env_actions.fill(0.0);
        for (row, &slot) in slots.iter().enumerate() {
            env_actions[slot * width..slot * width + NUM_JOINTS]
                .copy_from_slice(&agent_actions[row * NUM_JOINTS..(row + 1) * NUM_JOINTS]);
        }
        env.step(&env_actions)?;
        timings.step_s += stepping.elapsed().as_secs_f64();
        let scoring = Instant::now();
        let mut ended = Vec::new();
        episode::settle_recordings(
            &mut env,
            running
                .iter()
                .enumerate()
                .filter_map(|(slot, ep)| ep.map(|ep| (slot, ep))),
        );
        for slot in 0..batch {
            let Some(ep) = running[slot] else { continue };
            if let Some((status, reason)) = episode::finished_status(&mut env, slot, ep) {
                ended.push((slot, ep, status, reason));
            }
        }
        // Episodes that end together are scored together, on every core.
        let score = |&(slot, _, status, ref reason): &(usize, &Episode, _, Option<String>)| {
            episode::score_finished(
                &env.trajectory(slot).rows,
                status,
                reason.clone(),
                &spec.metrics.list,
                &metric_config,
            )
        };
        let scored: Vec<_> = if ended.len() > 1 {
            ended.par_iter().map(score).collect()
        } else {
            ended.iter().map(score).collect()
        };
        timings.score_s += scoring.elapsed().as_secs_f64();
        for ((slot, ep, _, _), (status, metrics, reason)) in ended.into_iter().zip(scored) {
            let trajectory = env.trajectory(slot);
            let motion = &library.motions[ep.motion];
            let scored_until_s = arena_bench::metrics::scored_until(metric_config.success_rule, &metrics);
            let result = EpisodeResult {
                episode_id: format!("ep{:04}", ep.index),
                motion: motion.name.clone(),
                category: motion.category.clone(),
                status,
                metrics,
                num_steps: trajectory.len().saturating_sub(1),
                start_s: ep.start_s,
                duration_s: ep.duration_s,
                seed: ep.seed,
                dr_level: spec.episodes.dr_level,
                reason,
                scored_until_s,
            };
            agent.end(&EpisodeEnd {
                episode_id: ep.index as u32,
                status: status_name(result.status).into(),
                reason: result.reason.clone().unwrap_or_default(),
                steps: result.num_steps as u32,
                metrics: result.metrics.clone(),
            });
            finished += 1;
            progress(finished, episodes.len(), &result);
            aggregator.add_episode(result);
            running[slot] = None;
            if let Some(next) = queue.next() {
                refills.push((slot, next));
                running[slot] = Some(next);
            }
        }
        if !refills.is_empty() {
            let started = Instant::now();
            start(&mut env, &refills, &mut starting)?;
            timings.starts_s += started.elapsed().as_secs_f64();
            refills.clear();
        }
    }
    timings.log(&env, began.elapsed().as_secs_f64());
    Ok(LocalRun {
        aggregator,
        engine: env.handler().describe(),
    })
}

/// Where an in-process evaluation's wall time went, logged at its end (target `arena_timings`,
/// `local {…}`, beside the server lanes' `lane {…}`): the motion library and episodes, the
/// simulator's start (a GPU worker's start-up), the episodes' starts (resets with DR), the
/// observations, the agent, the env's step (of which the backend's physics, the refresh with
/// the recording), scoring.
#[derive(Debug, Default)]
struct LocalTimings {
    setup_s: f64,
    startup_s: f64,
    starts_s: f64,
    observe_s: f64,
    agent_s: f64,
    step_s: f64,
    score_s: f64,
}

impl LocalTimings {
    fn log(&self, env: &TrackingEnv, wall_s: f64) {
        let e = env.timings();
        let round = |s: f64| (s * 1000.0).round() / 1000.0;
        let breakdown = serde_json::json!({
            "batch": env.num_envs(), "backend": env.handler().describe(), "wall_s": round(wall_s),
            "setup_s": round(self.setup_s), "startup_s": round(self.startup_s),
            "starts_s": round(self.starts_s), "reset_s": round(e.reset_s), "resets": e.resets,
            "observe_s": round(self.observe_s), "agent_s": round(self.agent_s),
            "step_s": round(self.step_s), "physics_s": round(e.physics_s), "refresh_s": round(e.refresh_s),
            "record_s": round(e.record_s),
            "steps": e.steps, "score_s": round(self.score_s),
        });
        tracing::info!(target: "arena_timings", "local {breakdown}");
    }
}

/// The protocol's name of an episode status.
pub fn status_name(status: arena_bench::aggregate::EpisodeStatus) -> &'static str {
    use arena_bench::aggregate::EpisodeStatus::*;
    match status {
        Completed => "completed",
        Fell => "fell",
        Failed => "failed",
        Timeout => "timeout",
    }
}
