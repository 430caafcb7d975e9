//! The training envs: the project's `TrackingEnv` (the simulator that scores submissions) in the
//! joint-position action mode with the benchmark's robot, wrapped with the tracking MDP
//! (mdp.rs): actions → PD targets, rewards and terminations after each step, perturbed
//! reference-state initialisation at adaptively sampled start frames, actor and critic inputs.

use crate::config::PpoTrainConfig;
use crate::mdp::{self, ACTOR_DIM, CRITIC_DIM, RobotFrame};
use crate::sampler::StartSampler;
use crate::sim_tape::SimTape;
use anyhow::Context;
use arena_bench::spec::BenchmarkSpec;
use arena_data::{MotionClip, NUM_JOINTS};
use arena_runner::gains::{DeclaredGains, SessionGains, resolve, robot_config};
use arena_sim::dr::DrLevel;
use arena_sim::env::{
    ActionMode, EpisodeAssignment, EpisodeStatus, TARGET_RANGE_MARGIN, TrackingEnv, TrackingEnvConfig,
};
use arena_sim::handler::{NQ, NV};
use arena_sim::math::{self, Quat, Vec3};
use arena_sim::motion::{MotionLibrary, MotionState};
use arena_sim::{CONTROL_DT, RobotConfig};
use arena_torch::seed::derive_seed;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use std::sync::Arc;
use std::time::Instant;

/// The robot and action interface a policy is trained for (and exported with).
#[derive(Debug, Clone)]
pub struct ActionInterface {
    pub gains: SessionGains,
    pub robot: RobotConfig,
    pub default_pose: [f64; NUM_JOINTS],
    pub scale: [f64; NUM_JOINTS],
    /// Targets are kept this far inside the range the arena accepts (rad).
    pub target_range: [(f64, f64); NUM_JOINTS],
}

impl ActionInterface {
    /// The benchmark's joint-position robot with the configured gain preset.
    pub fn new(
        spec: &BenchmarkSpec,
        config: &PpoTrainConfig,
        joint_ranges: &[(f64, f64); NUM_JOINTS],
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            spec.action.mode == arena_bench::spec::ActionMode::JointPosition,
            "benchmark {} takes {:?} actions; the tracker trains for joint_position benchmarks (e.g. g1-smoke-robot)",
            spec.name,
            spec.action.mode
        );
        let declared = DeclaredGains {
            preset: config.env.gains.clone(),
            ..Default::default()
        };
        let gains = resolve(&spec.action, &declared)
            .map_err(|e| anyhow::anyhow!("env.gains = {:?} on benchmark {}: {e}", config.env.gains, spec.name))?;
        let robot = robot_config(&spec.action, Some(&gains), false);
        let scale = std::array::from_fn(|j| config.env.action_scale_factor * robot.effort[j] / gains.kp[j]);
        let target_range =
            joint_ranges.map(|(lo, hi)| (lo - TARGET_RANGE_MARGIN + 1e-3, hi + TARGET_RANGE_MARGIN - 1e-3));
        Ok(ActionInterface {
            gains,
            robot,
            default_pose: mdp::POLICY_DEFAULT_POSE,
            scale,
            target_range,
        })
    }

    /// PD target of joint j for raw action a (clamped into what the arena accepts).
    pub fn target(&self, j: usize, a: f32) -> f64 {
        let (lo, hi) = self.target_range[j];
        (self.default_pose[j] + self.scale[j] * a as f64).clamp(lo, hi)
    }
}

/// The joints' ranges in the compiled G1 model (the same for every gain set).
pub fn joint_ranges() -> anyhow::Result<[(f64, f64); NUM_JOINTS]> {
    let handler = arena_sim::SimBackend::Cpu.create(RobotConfig::new(arena_sim::GainSet::Armature), 1, 1)?;
    Ok(handler.joint_ranges())
}

/// What one step produced, per env.
#[derive(Debug, Default)]
pub struct StepOutcome {
    pub rewards: Vec<f32>,
    /// The episode ended (failure, time-out, simulator failure).
    pub dones: Vec<bool>,
    /// It ended by time-out or the motion's end (bootstrapped).
    pub timeouts: Vec<bool>,
}

/// Sums over a logging period.
#[derive(Debug, Clone, Default)]
pub struct EnvStats {
    /// Σ weight·term·dt per reward term, over env steps.
    pub reward_terms: [f64; 9],
    pub env_steps: u64,
    pub terminations: [u64; 3],
    pub timeouts: u64,
    pub sim_failures: u64,
    pub episodes: u64,
    pub episode_length_sum: u64,
    pub episode_return_sum: f64,
    pub clipped_targets: u64,
    /// Seconds of the steps by part: the simulator's step, reading and scoring the states
    /// (rewards, terminations and their bookkeeping), ending and restarting episodes, and the
    /// actor's and critic's inputs.
    pub physics_s: f64,
    pub rewards_s: f64,
    pub resets_s: f64,
    pub observations_s: f64,
}

pub struct TrackerEnvs {
    env: TrackingEnv,
    library: Arc<MotionLibrary>,
    config: PpoTrainConfig,
    pub interface: ActionInterface,
    soft_limits: [(f64, f64); NUM_JOINTS],
    pub sampler: StartSampler,
    last_action: Vec<f32>,
    /// The robot anchor pose when each env's current action was chosen (§4.1 alignment).
    align: Vec<(Vec3, Quat)>,
    episode_return: Vec<f64>,
    episode_cap: usize,
    commands: Vec<f32>,
    pub actor_obs: Vec<f32>,
    pub critic_obs: Vec<f32>,
    /// Each env's state as the last step left it (one buffer for the run: a step's 4 kB per
    /// env are written in place, not allocated), and whether it is still current.
    frames: Vec<RobotFrame>,
    frame_current: Vec<bool>,
    reference: MotionState,
    pub stats: EnvStats,
    /// Episodes started so far (the counter episode seeds derive from).
    pub episodes_started: u64,
    /// The simulator calls, while recording ([`TrackerEnvs::record_sim_calls`]).
    tape: Option<SimTape>,
}

impl std::fmt::Debug for TrackerEnvs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackerEnvs")
            .field("num_envs", &self.env.num_envs())
            .finish()
    }
}

/// Stream of the episode seeds (DR draws).
const EPISODE_STREAM: u64 = 0x4550_4953;

impl TrackerEnvs {
    pub fn new(config: &PpoTrainConfig, spec: &BenchmarkSpec, clips: &[MotionClip]) -> anyhow::Result<Self> {
        let n = config.env.num_envs;
        let ranges = joint_ranges()?;
        let interface = ActionInterface::new(spec, config, &ranges)?;
        let library =
            Arc::new(MotionLibrary::from_clips(clips, &interface.robot).context("building the motion library")?);
        let env =
            TrackingEnv::new(sim_config(config, &interface)?, library.clone()).context("creating the training envs")?;
        let frames: Vec<usize> = library.motions.iter().map(|m| m.num_frames).collect();
        let uniform = config.sampling.uniform_ratio * n as f64 / 4096.0;
        let sampler = StartSampler::new(&frames, config.sampling.alpha, uniform, config.sampling.adaptive);
        let frames = vec![RobotFrame::read(env.handler(), 0); n];
        Ok(TrackerEnvs {
            env,
            soft_limits: mdp::soft_limits(&ranges),
            library,
            interface,
            sampler,
            last_action: vec![0.0; n * NUM_JOINTS],
            align: vec![([0.0; 3], math::IDENTITY); n],
            episode_return: vec![0.0; n],
            episode_cap: (config.env.episode_length_s / CONTROL_DT).ceil() as usize,
            commands: vec![0.0; n * 2 * NUM_JOINTS],
            actor_obs: vec![0.0; n * ACTOR_DIM],
            critic_obs: vec![0.0; n * CRITIC_DIM],
            frames,
            frame_current: vec![false; n],
            reference: MotionState::default(),
            stats: EnvStats::default(),
            episodes_started: 0,
            tape: None,
            config: config.clone(),
        })
    }

    /// Records every call on the simulator from now on, to replay them alone
    /// ([`SimTape::replay`] on an env made with [`TrackerEnvs::sim_config`]). Started before
    /// the first reset, the replay starts from the same state.
    pub fn record_sim_calls(&mut self) {
        self.tape = Some(SimTape::default());
    }

    /// The recording so far (marks go into it), if recording.
    pub fn sim_tape(&mut self) -> Option<&mut SimTape> {
        self.tape.as_mut()
    }

    /// The simulator the MDP runs on.
    pub fn sim(&self) -> &TrackingEnv {
        &self.env
    }

    /// The simulator's configuration, for an env that replays this one's calls.
    pub fn sim_config(&self) -> anyhow::Result<TrackingEnvConfig> {
        sim_config(&self.config, &self.interface)
    }

    pub fn num_envs(&self) -> usize {
        self.env.num_envs()
    }

    pub fn library(&self) -> &MotionLibrary {
        &self.library
    }

    /// Starts a new episode in every env (a run's start, and every checkpoint boundary).
    pub fn reset_all(&mut self, rng: &mut ChaCha8Rng) -> anyhow::Result<()> {
        let all: Vec<usize> = (0..self.num_envs()).collect();
        self.reset_envs(&all, rng)?;
        self.frame_current.fill(false);
        self.observe_all(rng);
        Ok(())
    }

    /// Draws a start for each listed env and puts the robot there with the §6.1 noise.
    fn reset_envs(&mut self, envs: &[usize], rng: &mut ChaCha8Rng) -> anyhow::Result<()> {
        if envs.is_empty() {
            return Ok(());
        }
        let probabilities = self.sampler.probabilities();
        let dr_level = DrLevel::try_from(self.config.dr.level).map_err(anyhow::Error::msg)?;
        let mut assignments = Vec::with_capacity(envs.len());
        for &e in envs {
            let (motion, frame) = self.sampler.draw(&probabilities, rng);
            let start_time = frame as f64 * CONTROL_DT;
            let seed = derive_seed(self.config.run.seed ^ EPISODE_STREAM, self.episodes_started);
            self.episodes_started += 1;
            assignments.push((
                e,
                EpisodeAssignment {
                    motion,
                    start_time,
                    seed,
                    dr_level,
                },
            ));
        }
        let init = &self.config.init;
        let mut states = Vec::with_capacity(envs.len());
        for &(e, a) in &assignments {
            self.library.motions[a.motion].state_at(a.start_time, &mut self.reference);
            let (qpos, qvel) = perturbed_start(
                &self.reference,
                (init.pose_noise, init.velocity_noise, init.joint_noise),
                &self.soft_limits,
                rng,
            );
            states.push((e, qpos, qvel));
            self.last_action[e * NUM_JOINTS..(e + 1) * NUM_JOINTS].fill(0.0);
            self.episode_return[e] = 0.0;
        }
        self.env.reset_with_start_states(&assignments, &states)?;
        if let Some(tape) = &mut self.tape {
            tape.reset_with_start_states(&assignments, &states);
        }
        Ok(())
    }

    /// Writes every env's actor and critic inputs, with the reference at the frame its next
    /// action must reach, and records the anchor pose the next rewards align to; the envs whose
    /// frame is not current (they were reset) are read first. The envs are observed on the
    /// simulator's threads; the noise is drawn before, in env order, so a run draws the same
    /// numbers whatever the threads.
    fn observe_all(&mut self, rng: &mut ChaCha8Rng) {
        let n = self.num_envs();
        let scale = self.config.noise.scale;
        let noise: Vec<f64> = if scale == 0.0 {
            Vec::new()
        } else {
            (0..n * mdp::ACTOR_NOISE_DRAWS)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect()
        };
        let (env, library, default_pose) = (&self.env, &self.library, &self.interface.default_pose);
        let (last_action, current) = (&self.last_action, &self.frame_current);
        let rows = self
            .actor_obs
            .par_chunks_mut(ACTOR_DIM)
            .zip(self.critic_obs.par_chunks_mut(CRITIC_DIM))
            .zip(self.align.par_iter_mut())
            .zip(self.frames.par_iter_mut())
            .enumerate();
        on_env_threads(env, || {
            rows.for_each_init(
                MotionState::default,
                |reference, (e, (((actor, critic), align), frame))| {
                    if !current[e] {
                        *frame = RobotFrame::read(env.handler(), e);
                    }
                    let a = env.assignment(e).expect("every env runs an episode");
                    let t_next = a.start_time + (env.infos()[e].step + 1) as f64 * CONTROL_DT;
                    library.motions[a.motion].state_at(t_next, reference);
                    let last = &last_action[e * NUM_JOINTS..(e + 1) * NUM_JOINTS];
                    mdp::actor_observation(frame, reference, default_pose, last, actor);
                    if scale != 0.0 {
                        let mut draws = noise[e * mdp::ACTOR_NOISE_DRAWS..].iter();
                        mdp::add_actor_noise(actor, scale, || *draws.next().expect("drawn"));
                    }
                    mdp::critic_observation(frame, reference, default_pose, last, critic);
                    *align = frame.anchor_pose();
                },
            )
        });
    }

    /// Applies the raw actions (N × 29), scores the step, resets the envs whose episode ended
    /// and observes every env.
    pub fn step(&mut self, actions: &[f32], rng: &mut ChaCha8Rng) -> anyhow::Result<StepOutcome> {
        let n = self.num_envs();
        anyhow::ensure!(actions.len() == n * NUM_JOINTS, "actions must be {n}×29");
        for e in 0..n {
            for j in 0..NUM_JOINTS {
                let a = actions[e * NUM_JOINTS + j];
                let unclamped = self.interface.default_pose[j] + self.interface.scale[j] * a as f64;
                let target = self.interface.target(j, a);
                if target != unclamped {
                    self.stats.clipped_targets += 1;
                }
                self.commands[e * 2 * NUM_JOINTS + j] = target as f32;
            }
        }
        let started = Instant::now();
        self.env.step(&self.commands)?;
        let stepped = Instant::now();
        self.stats.physics_s += (stepped - started).as_secs_f64();
        if let Some(tape) = &mut self.tape {
            tape.step(&self.commands);
        }
        let weights = mdp::weights(&self.config.rewards);
        let mut out = StepOutcome {
            rewards: vec![0.0; n],
            dones: vec![false; n],
            timeouts: vec![false; n],
        };
        // The MDP of each env on the simulator's threads; then, in env order, everything that
        // sums or draws (statistics, the start sampler), so a run is the same whatever the threads.
        let assessed = self.assess_all(actions);
        let mut ended = Vec::new();
        for (e, assessment) in assessed.into_iter().enumerate() {
            let step = assessment.step;
            let Assessed::Running {
                terms,
                reward,
                failed,
                motion,
                motion_frame,
                timed_out,
            } = assessment.outcome
            else {
                if let Assessed::SimFailure(reason) = &assessment.outcome {
                    tracing::debug!("env {e}: {reason}");
                }
                self.stats.sim_failures += 1;
                out.dones[e] = true;
                self.frame_current[e] = false;
                ended.push(e);
                self.finish_episode(e, step);
                continue;
            };
            for (k, v) in terms.values.iter().enumerate() {
                self.stats.reward_terms[k] += v * weights[k] * CONTROL_DT;
            }
            self.stats.env_steps += 1;
            out.rewards[e] = reward as f32;
            self.episode_return[e] += reward;
            self.last_action[e * NUM_JOINTS..(e + 1) * NUM_JOINTS]
                .copy_from_slice(&actions[e * NUM_JOINTS..(e + 1) * NUM_JOINTS]);
            if failed.any() {
                for (k, f) in failed.flags.iter().enumerate() {
                    self.stats.terminations[k] += *f as u64;
                }
                self.sampler.record_failure(motion, motion_frame);
                out.dones[e] = true;
            } else if timed_out || step >= self.episode_cap {
                self.stats.timeouts += 1;
                out.dones[e] = true;
                out.timeouts[e] = true;
            }
            self.frame_current[e] = !out.dones[e];
            if out.dones[e] {
                ended.push(e);
                self.finish_episode(e, step);
            }
        }
        self.sampler.step();
        let assessed = Instant::now();
        self.stats.rewards_s += (assessed - stepped).as_secs_f64();
        for &e in &ended {
            self.env.stop(e);
            if let Some(tape) = &mut self.tape {
                tape.stop(e);
            }
        }
        self.reset_envs(&ended, rng)?;
        let restarted = Instant::now();
        self.stats.resets_s += (restarted - assessed).as_secs_f64();
        self.observe_all(rng);
        self.stats.observations_s += restarted.elapsed().as_secs_f64();
        Ok(out)
    }

    /// Reads every env's state after a step into its frame and scores it against the
    /// reference frame its action had to reach (rewards, terminations), on the simulator's
    /// threads.
    fn assess_all(&mut self, actions: &[f32]) -> Vec<Assessment> {
        let (env, library) = (&self.env, &self.library);
        let (align, last_action) = (&self.align, &self.last_action);
        let (soft_limits, config) = (&self.soft_limits, &self.config);
        let frames = self.frames.par_iter_mut().enumerate();
        on_env_threads(env, || {
            frames
                .map_init(MotionState::default, |reference, (e, frame)| {
                    let info = &env.infos()[e];
                    let step = info.step;
                    if let EpisodeStatus::Failed(reason) = &info.status {
                        return Assessment {
                            step,
                            outcome: Assessed::SimFailure(reason.clone()),
                        };
                    }
                    let a = env.assignment(e).expect("every env runs an episode");
                    *frame = RobotFrame::read(env.handler(), e);
                    library.motions[a.motion].state_at(info.motion_time, reference);
                    let terms = mdp::reward_terms(
                        frame,
                        reference,
                        align[e],
                        &actions[e * NUM_JOINTS..(e + 1) * NUM_JOINTS],
                        &last_action[e * NUM_JOINTS..(e + 1) * NUM_JOINTS],
                        soft_limits,
                        &config.rewards,
                    );
                    Assessment {
                        step,
                        outcome: Assessed::Running {
                            terms,
                            reward: terms.total(&config.rewards),
                            failed: mdp::terminations(frame, reference, &config.terminations),
                            motion: a.motion,
                            motion_frame: (info.motion_time / CONTROL_DT).round() as usize,
                            timed_out: info.status == EpisodeStatus::Truncated,
                        },
                    }
                })
                .collect()
        })
    }

    fn finish_episode(&mut self, e: usize, length: usize) {
        self.stats.episodes += 1;
        self.stats.episode_length_sum += length as u64;
        self.stats.episode_return_sum += self.episode_return[e];
    }
}

/// One env's step as the MDP sees it ([`TrackerEnvs::assess_all`]).
struct Assessment {
    /// The env's step count after the step.
    step: usize,
    outcome: Assessed,
}

enum Assessed {
    /// The simulator failed the env (its reason): the episode ends, unscored by the MDP.
    SimFailure(String),
    Running {
        terms: mdp::RewardTerms,
        reward: f64,
        failed: mdp::Terminations,
        motion: usize,
        /// The reference frame the step reached (where a failure is recorded for sampling).
        motion_frame: usize,
        /// The motion ended (the simulator truncated the episode).
        timed_out: bool,
    },
}

/// Runs `work` (rayon parallel iterators) on the simulator's threads, so the MDP's per-env
/// work shares them with the simulator's. A simulator of one thread has no pool and runs
/// inline; so does the work then, on a pool of one thread (not rayon's global one, which
/// would take every core).
fn on_env_threads<R: Send>(env: &TrackingEnv, work: impl FnOnce() -> R + Send) -> R {
    static ONE_THREAD: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    let pool = env.handler().pool().or_else(|| {
        ONE_THREAD
            .get_or_init(|| rayon::ThreadPoolBuilder::new().num_threads(1).build().ok())
            .as_ref()
    });
    match pool {
        Some(pool) => pool.install(work),
        // No thread could be started: rayon's global pool.
        None => work(),
    }
}

/// The training simulator: the benchmark's joint-position robot, no fall rule (the MDP's
/// terminations decide), no recording, DR of gains and delay.
fn sim_config(config: &PpoTrainConfig, interface: &ActionInterface) -> anyhow::Result<TrackingEnvConfig> {
    Ok(TrackingEnvConfig {
        robot: interface.robot.clone(),
        num_envs: config.env.num_envs,
        threads: config.env.threads,
        fall_rule: None,
        record: false,
        dr_gains_and_delay: true,
        action_mode: ActionMode::JointPosition,
        backend: config.sim_backend().map_err(|e| anyhow::anyhow!(e))?,
        // The MDP reads the handler itself (mdp.rs), not the env's observation groups.
        compute_privileged_state: false,
        compute_history: false,
        ..Default::default()
    })
}

/// The reference state with the §6.1 noise, each group scaled: root position
/// U(±0.05, ±0.05, ±0.01) m, root orientation by roll/pitch U(±0.1), yaw U(±0.2) (world frame),
/// root linear velocity U(±0.5, ±0.5, ±0.2) m/s and angular U(±0.52, ±0.52, ±0.78) rad/s (world),
/// joint positions U(±0.1) rad clamped to the soft limits.
pub fn perturbed_start(
    reference: &MotionState,
    (pose, velocity, joints): (f64, f64, f64),
    soft_limits: &[(f64, f64); NUM_JOINTS],
    rng: &mut impl Rng,
) -> ([f64; NQ], [f64; NV]) {
    let mut u = |half: f64| if half > 0.0 { rng.random_range(-half..half) } else { 0.0 };
    let mut qpos = reference.qpos;
    for (k, half) in [0.05, 0.05, 0.01].iter().enumerate() {
        qpos[k] += u(half * pose);
    }
    let (roll, pitch, yaw) = (u(0.1 * pose), u(0.1 * pose), u(0.2 * pose));
    let q_delta = math::quat_mul(
        &math::quat_from_axis_angle(&[0.0, 0.0, 1.0], yaw),
        &math::quat_mul(
            &math::quat_from_axis_angle(&[0.0, 1.0, 0.0], pitch),
            &math::quat_from_axis_angle(&[1.0, 0.0, 0.0], roll),
        ),
    );
    let root: Quat = qpos[3..7].try_into().expect("4");
    let rot = math::quat_normalize(&math::quat_mul(&q_delta, &root));
    qpos[3..7].copy_from_slice(&rot);
    for j in 0..NUM_JOINTS {
        let (lo, hi) = soft_limits[j];
        qpos[7 + j] = (qpos[7 + j] + u(0.1 * joints)).clamp(lo, hi);
    }
    let mut qvel = [0.0; NV];
    for (k, half) in [0.5, 0.5, 0.2].iter().enumerate() {
        qvel[k] = reference.body_vel[0][k] + u(half * velocity);
    }
    let mut w = reference.body_ang_vel[0];
    for (k, half) in [0.52, 0.52, 0.78].iter().enumerate() {
        w[k] += u(half * velocity);
    }
    qvel[3..6].copy_from_slice(&math::rotate_inv(&rot, &w));
    qvel[6..].copy_from_slice(&reference.dof_vel);
    (qpos, qvel)
}
