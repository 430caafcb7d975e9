//! The training loop (BFM_ZERO_FACTS §8) on the project's own batched `TrackingEnv`: rollouts
//! with the z schedule of §5.4, the online, expert and z buffers, 16 updates per 1024 env steps,
//! periodic evaluation with the arena's metrics (through the local runner, exactly as a
//! submission is scored) and EMD-prioritised motion sampling, checkpoints and exact resume.
//!
//! Exact resume: every random number is derived from the run seed and a saved counter, and at
//! each checkpoint boundary every env starts a new episode (after the optional evaluation, as
//! BFM-Zero resets its envs after evaluating). A run resumed from a checkpoint at step N, with
//! its buffers saved, continues exactly as the uninterrupted run does.

use crate::agent::TrackingAgent;
use crate::aux_rewards::AuxRewards;
use crate::buffers::{ExpertBuffer, OnlineBuffer, OnlineBufferState, StepRecord, ZBuffer};
use crate::checkpoint;
use crate::model::{FbCprAuxModel, Obs};
use crate::train_config::TrainConfig;
use crate::train_log::{EVAL_COLUMNS, LogAccumulator, train_log_columns};
use crate::update::{ExpertBatch, Learner};
use anyhow::{Context, bail};
use arena_bench::aggregate::honest_means;
use arena_bench::priority::{PriorityConfig, priorities};
use arena_bench::spec::BenchmarkSpec;
use arena_data::{MotionClip, NUM_JOINTS};
use arena_runner::local::{LocalOptions, run_local};
use arena_sim::RobotConfig;
use arena_sim::dr::DrLevel;
use arena_sim::env::{EpisodeAssignment, EpisodeStatus, LieDown, ObservationBatch, TrackingEnv, TrackingEnvConfig};
use arena_sim::motion::MotionLibrary;
use arena_sim::observation::reference_observations;
use arena_torch::cli::json_differences as differences;
use arena_torch::csv_log::{CsvValue, append_csv, append_csv_values, truncate_log};
pub use arena_torch::run_dir::RunPaths;
use arena_torch::seed::derive_seed;
use rand::distr::{Distribution, weighted::WeightedIndex};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

/// Streams of the per-iteration random generator.
const ROLLOUT_STREAM: u64 = 0x524f_4c4c;
const RESET_STREAM: u64 = 0x5245_5345;
const BATCH_STREAM: u64 = 0x4241_5443;

/// Counters saved in `train_status.json`; with the checkpoint they fix the rest of the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TrainStatus {
    /// Env steps taken (BFM-Zero's "time").
    pub time: u64,
    /// Env steps of every env (iterations of the loop).
    pub iterations: u64,
    pub updates: u64,
    pub episodes_started: u64,
    pub optimizer_steps: BTreeMap<String, i64>,
    pub wall_time_s: f64,
    /// Motion sampling priorities (from the last evaluation).
    pub priorities: Vec<f64>,
    pub zbuffer_len: usize,
    pub zbuffer_cursor: usize,
    pub online_buffer: Option<OnlineBufferState>,
}

/// A report hook for progress (env steps done, total, last log row).
pub type ProgressFn<'a> = dyn FnMut(u64, u64, Option<&BTreeMap<String, f64>>) + 'a;

/// The benchmark the run trains and evaluates on, with its clips.
pub struct Motions {
    pub spec: BenchmarkSpec,
    pub clips: Vec<MotionClip>,
}

impl std::fmt::Debug for Motions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Motions")
            .field("benchmark", &self.spec.name)
            .field("clips", &self.clips.len())
            .finish()
    }
}

struct EnvState {
    /// Steps since the episode started.
    counter: u64,
    /// This episode's tracking z rows (expert-tracking rollouts), `[L, d]` host values.
    expert_z: Option<Vec<f32>>,
    prev_a5: [f64; NUM_JOINTS],
}

/// Everything the loop owns.
pub struct Trainer {
    pub config: TrainConfig,
    pub learner: Learner,
    pub status: TrainStatus,
    paths: RunPaths,
    device: Device,
    env: TrackingEnv,
    library: Arc<MotionLibrary>,
    motions: Motions,
    online: OnlineBuffer,
    expert: ExpertBuffer,
    zbuffer: ZBuffer,
    aux: AuxRewards,
    envs: Vec<EnvState>,
    z: Vec<f32>,
    episode_start: Vec<bool>,
    episode_steps: u64,
    log: LogAccumulator,
    /// Wall time after which [`Trainer::run`] stops early (at the end of an iteration) and
    /// writes its checkpoint: a run that must end inside a time budget (a GPU session).
    pub time_limit: Option<std::time::Duration>,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer").field("time", &self.status.time).finish()
    }
}

fn to_tensor(values: &[f32], cols: i64, device: Device) -> Tensor {
    Tensor::from_slice(values).view([-1, cols]).to_device(device)
}

fn obs_tensors(batch: &ObservationBatch, dims: [i64; 4], device: Device) -> Obs {
    Obs {
        state: to_tensor(&batch.state, dims[0], device),
        privileged_state: to_tensor(&batch.privileged_state, dims[1], device),
        last_action: to_tensor(&batch.last_action, dims[2], device),
        history_actor: to_tensor(&batch.history_actor, dims[3], device),
    }
}

impl Trainer {
    /// A new run, or the continuation of the one checkpointed under `paths` when `resume`.
    pub fn new(
        config: TrainConfig,
        motions: Motions,
        paths: RunPaths,
        device: Device,
        resume: bool,
    ) -> anyhow::Result<Self> {
        let model_config = config.model_config().map_err(anyhow::Error::msg)?;
        let t = config.train.clone();
        let robot = RobotConfig::default();
        let library =
            Arc::new(MotionLibrary::from_clips(&motions.clips, &robot).context("building the motion library")?);
        let env_config = TrackingEnvConfig {
            robot: robot.clone(),
            num_envs: t.num_envs,
            threads: t.threads,
            fall_rule: None,
            record: false,
            backend: t.backend(),
            dr_gains_and_delay: t.dr_gains_and_delay,
            ..Default::default()
        };
        let env = TrackingEnv::new(env_config, library.clone()).context("creating the training envs")?;
        let aux = AuxRewards::new(env.handler(), &config.agent.aux_reward_coefs);
        let o = model_config.obs;
        // The env's widths (the G1's observation terms and joints): a model of other widths
        // would fail at its first step, in a tensor's reshape.
        let g1 = crate::config::ObsDims::default();
        for (key, model, env) in [
            ("obs.state", o.state, g1.state),
            ("obs.privileged_state", o.privileged_state, g1.privileged_state),
            ("obs.last_action", o.last_action, g1.last_action),
            ("obs.history_actor", o.history_actor, g1.history_actor),
            ("action_dim", model_config.action_dim, NUM_JOINTS as i64),
        ] {
            if model != env {
                bail!("model.{key} is {model}, where the G1's envs give {env}");
            }
        }
        let references: Vec<(Vec<f32>, Vec<f32>)> = library
            .motions
            .iter()
            .map(|m| {
                let r = reference_observations(m, &robot);
                (r.state, r.privileged_state)
            })
            .collect();
        let mut expert =
            ExpertBuffer::new(&references, (o.state, o.privileged_state), device).map_err(anyhow::Error::msg)?;
        let rows = (t.buffer_size / t.num_envs as u64) as usize;
        let dims = [o.state, o.privileged_state, o.last_action, o.history_actor];
        let mut online = OnlineBuffer::new(
            rows,
            t.num_envs,
            dims,
            model_config.action_dim,
            model_config.z_dim,
            device,
        );
        let mut zbuffer = ZBuffer::new(config.agent.z_buffer_size, model_config.z_dim, device);

        let ckpt = paths.checkpoint();
        let (learner, status) = if resume {
            let (model, saved) = checkpoint::load_model(&ckpt, device).context("loading the checkpoint's model")?;
            if saved.networks.is_some() {
                bail!(
                    "{}: an export, not a run's checkpoint; start a run from it with train.init_from",
                    ckpt.display()
                );
            }
            if saved.model != model_config {
                bail!(
                    "{}: the checkpoint's model sizes differ from the configuration's: {}",
                    ckpt.display(),
                    differences(
                        &serde_json::to_value(&saved.model)?,
                        &serde_json::to_value(&model_config)?,
                        "model"
                    )
                    .join("; ")
                );
            }
            let status: TrainStatus = serde_json::from_str(
                &std::fs::read_to_string(ckpt.join("train_status.json"))
                    .with_context(|| format!("reading {}", ckpt.join("train_status.json").display()))?,
            )
            .context("parsing train_status.json")?;
            let mut learner = Learner::new(model, config.agent.clone());
            checkpoint::load_optimizers(&mut learner, &ckpt, &status.optimizer_steps)?;
            let buffers_path = ckpt.join("buffers.safetensors");
            if let Some(state) = status.online_buffer.as_ref() {
                let saved = checkpoint::read_tensors(
                    &buffers_path,
                    "missing, though train_status.json says the run saved its buffers",
                )?;
                let lookup = |k: &str| saved.get(k).map(|t| t.to_device(device));
                online
                    .restore(&lookup, state.clone())
                    .map_err(|e| anyhow::anyhow!("{}: {e}", buffers_path.display()))?;
                let z = lookup("zbuffer").context("buffers.safetensors has no zbuffer")?;
                zbuffer
                    .restore(&z, status.zbuffer_len, status.zbuffer_cursor)
                    .map_err(anyhow::Error::msg)?;
            } else {
                tracing::warn!(
                    "the checkpoint has no buffers: the run continues with empty buffers (not an exact resume)"
                );
            }
            if !status.priorities.is_empty() {
                expert.set_priorities(&status.priorities).map_err(anyhow::Error::msg)?;
            }
            (learner, status)
        } else {
            tch::manual_seed(derive_seed(t.seed, u64::MAX) as i64);
            let model = FbCprAuxModel::new(
                &model_config,
                config.agent.obs_norm_momentum,
                config.agent.aux_reward_ema,
                device,
            );
            if let Some(dir) = &t.init_from {
                let loaded =
                    checkpoint::init_from(&model, dir).with_context(|| format!("train.init_from {}", dir.display()))?;
                tracing::info!(
                    "initialised {} from {}; the other networks start from the seed",
                    loaded.join(", "),
                    dir.display()
                );
            }
            (Learner::new(model, config.agent.clone()), TrainStatus::default())
        };
        std::fs::create_dir_all(&paths.dir).with_context(|| format!("creating {}", paths.dir.display()))?;
        if resume {
            // Rows written after the checkpoint are written again by the resumed run; the
            // evaluation at the checkpoint's step too (it runs again, identically).
            truncate_log(&paths.train_log(), |t| t <= status.time as f64)?;
            truncate_log(&paths.eval_log(), |t| t < status.time as f64)?;
        }
        let n = t.num_envs;
        let envs = (0..n)
            .map(|_| EnvState {
                counter: 0,
                expert_z: None,
                prev_a5: [0.0; NUM_JOINTS],
            })
            .collect();
        let episode_steps = (t.episode_length_s / arena_sim::CONTROL_DT).round().max(1.0) as u64;
        Ok(Trainer {
            z: vec![0.0; n * model_config.z_dim as usize],
            episode_start: vec![true; n],
            config,
            learner,
            status,
            paths,
            device,
            env,
            library,
            motions,
            online,
            expert,
            zbuffer,
            aux,
            envs,
            episode_steps,
            log: LogAccumulator::default(),
            time_limit: None,
        })
    }

    fn rng(&self, stream: u64) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(derive_seed(self.config.train.seed ^ stream, self.status.iterations))
    }

    /// Starts a new episode in each of `envs`: motion by priority, start uniformly in the clip.
    fn reset_envs(&mut self, envs: &[usize], rng: &mut ChaCha8Rng) -> anyhow::Result<()> {
        let weights: Vec<f64> = self.expert.priorities().to_vec();
        let pick = WeightedIndex::new(&weights).context("motion priorities")?;
        let level = DrLevel::try_from(self.config.train.dr_level).map_err(anyhow::Error::msg)?;
        // One side for every lying-down start of this reset call, as BFM-Zero draws it.
        let side = if rng.random::<bool>() {
            LieDown::Plus
        } else {
            LieDown::Minus
        };
        let lie_p = self.config.train.lie_down_probability;
        let mut assignments = Vec::with_capacity(envs.len());
        for &e in envs {
            let motion = pick.sample(rng);
            let length = self.library.motions[motion].length_s;
            let start_time = rng.random_range(0.0..length.max(1e-6)).min((length - 1e-6).max(0.0));
            let seed = derive_seed(self.config.train.seed ^ RESET_STREAM, self.status.episodes_started);
            self.status.episodes_started += 1;
            let lie = (rng.random::<f64>() < lie_p).then_some(side);
            let assignment = EpisodeAssignment {
                motion,
                start_time,
                seed,
                dr_level: level,
            };
            assignments.push((e, assignment, lie));
            let s = &mut self.envs[e];
            s.counter = 0;
            s.expert_z = None;
            s.prev_a5 = [0.0; NUM_JOINTS];
            self.episode_start[e] = true;
        }
        self.env
            .reset_with_starts(&assignments)
            .context("resetting training envs")?;
        Ok(())
    }

    /// The z of every env for this step (BFM_ZERO_FACTS §5.4, per env: see docs/baseline.md).
    fn schedule_z(&mut self, rng: &mut ChaCha8Rng) -> anyhow::Result<()> {
        let t = &self.config.train;
        let d = self.learner.model.config.z_dim as usize;
        let len = t.rollout_expert_length;
        let mut need_expert = Vec::new();
        let mut need_random = Vec::new();
        for (e, s) in self.envs.iter_mut().enumerate() {
            if t.rollout_expert_trajectories && s.counter % len as u64 == 0 {
                let was_tracking = s.expert_z.take().is_some();
                if rng.random::<f64>() < t.rollout_expert_fraction {
                    need_expert.push(e);
                    continue;
                }
                if was_tracking {
                    // A finished slice's last z must not linger until the next z change.
                    need_random.push(e);
                    continue;
                }
            }
            if s.expert_z.is_none() && s.counter % t.update_z_every_step == 0 {
                need_random.push(e);
            }
        }
        if !need_expert.is_empty() {
            let slices = self
                .expert
                .sample(need_expert.len(), len, rng)
                .map_err(anyhow::Error::msg);
            match slices {
                Ok(slices) => {
                    let zt = self.tracking_z(
                        &slices.next_state,
                        &slices.next_privileged_state,
                        need_expert.len(),
                        len,
                    );
                    for (k, &e) in need_expert.iter().enumerate() {
                        self.envs[e].expert_z = Some(zt[k * len * d..(k + 1) * len * d].to_vec());
                    }
                }
                // No motion is long enough for a tracking slice: random z instead.
                Err(_) => need_random.extend(need_expert.iter().copied()),
            }
        }
        if !need_random.is_empty() {
            let k = need_random.len();
            let z = match self.zbuffer.sample(k, rng) {
                Some(z) => z,
                None => {
                    let g: Vec<f32> = (0..k * d).map(|_| rng.sample::<f32, _>(StandardNormal)).collect();
                    self.learner.model.prior_z(&to_tensor(&g, d as i64, self.device))
                }
            };
            let host: Vec<f32> =
                Vec::try_from(z.to_device(Device::Cpu).contiguous().view([-1])).context("z to host")?;
            for (i, &e) in need_random.iter().enumerate() {
                self.z[e * d..(e + 1) * d].copy_from_slice(&host[i * d..(i + 1) * d]);
            }
        }
        for (e, s) in self.envs.iter().enumerate() {
            if let Some(zt) = &s.expert_z {
                let i = (s.counter % len as u64) as usize;
                self.z[e * d..(e + 1) * d].copy_from_slice(&zt[i * d..(i + 1) * d]);
            }
        }
        Ok(())
    }

    /// z rows of tracking slices: row i = project(mean B(next rows i … min(i + w, L) − 1)).
    fn tracking_z(&self, state: &Tensor, privileged: &Tensor, slices: usize, len: usize) -> Vec<f32> {
        let w = self.config.train.tracking_window as i64;
        let model = &self.learner.model;
        let b = model.backward_z(state, privileged); // projected per row; re-projected after averaging
        let d = b.size()[1];
        let b = b.view([slices as i64, len as i64, d]);
        let zero = Tensor::zeros([slices as i64, 1, d], (Kind::Float, self.device));
        let cs = Tensor::cat(&[zero, b.cumsum(1, Kind::Float)], 1);
        let l = len as i64;
        let ends: Vec<i64> = (0..l).map(|i| (i + w).min(l)).collect();
        let counts: Vec<f32> = (0..l).map(|i| ((i + w).min(l) - i) as f32).collect();
        let ends = Tensor::from_slice(&ends).to_device(self.device);
        let starts = Tensor::arange(l, (Kind::Int64, self.device));
        let sums = cs.index_select(1, &ends) - cs.index_select(1, &starts);
        let means = sums / Tensor::from_slice(&counts).to_device(self.device).view([1, l, 1]);
        let z = tch::no_grad(|| model.project_z(&means));
        Vec::try_from(z.to_device(Device::Cpu).contiguous().view([-1])).expect("f32 z")
    }

    /// Runs until `train.num_env_steps`, reporting progress.
    pub fn run(&mut self, progress: &mut ProgressFn<'_>) -> anyhow::Result<()> {
        let t = self.config.train.clone();
        let n = t.num_envs;
        let a_dim = NUM_JOINTS;
        let d = self.learner.model.config.z_dim as usize;
        let o = self.learner.model.config.obs;
        let dims = [o.state, o.privileged_state, o.last_action, o.history_actor];
        let mut clock = Instant::now();
        let started = Instant::now();
        let mut first = true;
        let mut actions = vec![0.0f32; n * a_dim];
        let mut a5 = vec![0.0f64; n * a_dim];
        let mut prev = vec![0.0f64; n * a_dim];
        let mut aux_weighted = vec![0.0f32; n];
        while self.status.time < t.num_env_steps {
            if self.time_limit.is_some_and(|limit| started.elapsed() >= limit) {
                tracing::info!(
                    "stopping at {} of {} env steps: the time limit is reached",
                    self.status.time,
                    t.num_env_steps
                );
                // The last row covers the steps since the previous one, as at a normal end.
                if !self.log.is_empty() {
                    let elapsed = self.status.wall_time_s + clock.elapsed().as_secs_f64();
                    let row = self.log.row(self.status.time, elapsed);
                    append_csv(&self.paths.train_log(), &train_log_columns(), &row)?;
                    progress(self.status.time, t.num_env_steps, Some(&row));
                }
                break;
            }
            let time = self.status.time;
            let boundary = first || time % t.checkpoint_every_steps < n as u64 || time % t.eval_every_steps < n as u64;
            // A boundary: checkpoint (not at the run's first iteration, which a resumed run
            // has already saved), evaluation if due, then every env starts a new episode.
            if boundary {
                if !first && time % t.checkpoint_every_steps < n as u64 {
                    self.status.wall_time_s += clock.elapsed().as_secs_f64();
                    clock = Instant::now();
                    self.save_checkpoint()?;
                }
                if time % t.eval_every_steps < n as u64 {
                    self.evaluate()?;
                }
                let mut rng = self.rng(RESET_STREAM);
                let all: Vec<usize> = (0..n).collect();
                self.reset_envs(&all, &mut rng)?;
            }
            first = false;
            let mut rng = self.rng(ROLLOUT_STREAM);
            let sim_start = Instant::now();
            self.schedule_z(&mut rng)?;
            let obs = obs_tensors(self.env.observations(), dims, self.device);
            let z = to_tensor(&self.z, d as i64, self.device);
            if time < t.num_seed_steps {
                actions.iter_mut().for_each(|a| *a = rng.random_range(-1.0..1.0));
            } else {
                let mean = self
                    .learner
                    .model
                    .act_mean(&obs, &z)
                    .to_device(Device::Cpu)
                    .contiguous();
                let len = actions.len();
                mean.copy_data(&mut actions, len);
                let std = self.learner.model.config.actor_std as f32;
                for a in actions.iter_mut() {
                    *a = (*a + std * rng.sample::<f32, _>(StandardNormal)).clamp(-1.0, 1.0);
                }
            }
            for (e, s) in self.envs.iter().enumerate() {
                prev[e * a_dim..(e + 1) * a_dim].copy_from_slice(&s.prev_a5);
            }
            for (x, a) in a5.iter_mut().zip(&actions) {
                *x = (5.0 * *a as f64).clamp(-5.0, 5.0);
            }
            self.env.step(&actions).context("stepping the training envs")?;
            self.aux
                .compute(self.env.handler(), &a5, &prev)
                .context("auxiliary rewards")?;
            for e in 0..n {
                aux_weighted[e] = self.aux.weighted(e) as f32;
                self.envs[e].prev_a5.copy_from_slice(&a5[e * a_dim..(e + 1) * a_dim]);
                self.envs[e].counter += 1;
            }
            self.log.rollout(&self.aux.terms, n);
            let record = StepRecord {
                obs: &obs,
                action: &to_tensor(&actions, a_dim as i64, self.device),
                z: &z,
                aux_reward: &to_tensor(&aux_weighted, 1, self.device),
                episode_start: &self.episode_start,
                terminated: &vec![false; n],
            };
            self.online.push(&record);
            self.episode_start.iter_mut().for_each(|f| *f = false);
            let mut done = Vec::new();
            for e in 0..n {
                let status = &self.env.infos()[e].status;
                if let EpisodeStatus::Failed(reason) = status {
                    tracing::debug!("training env {e}: {reason}");
                    self.log.failed += 1;
                }
                if status.is_done() || self.envs[e].counter >= self.episode_steps {
                    done.push(e);
                }
            }
            if !done.is_empty() {
                let mut rng = self.rng(RESET_STREAM ^ 1);
                self.reset_envs(&done, &mut rng)?;
            }
            self.log.sim_s += sim_start.elapsed().as_secs_f64();
            self.status.time += n as u64;
            self.status.iterations += 1;

            let now = self.status.time;
            // Rounds due in this iteration's n env steps (several when update_agent_every < n).
            let rounds = now / t.update_agent_every - (now - n as u64) / t.update_agent_every;
            if now > t.num_seed_steps && rounds > 0 {
                let update_start = Instant::now();
                let mut rng = self.rng(BATCH_STREAM);
                for _ in 0..rounds as usize * t.num_agent_updates {
                    self.update_once(&mut rng)?;
                }
                self.log.update_s += update_start.elapsed().as_secs_f64();
            }
            let row = if now / t.log_every_steps > (now - n as u64) / t.log_every_steps || now >= t.num_env_steps {
                let elapsed = self.status.wall_time_s + clock.elapsed().as_secs_f64();
                let row = self.log.row(now, elapsed);
                append_csv(&self.paths.train_log(), &train_log_columns(), &row)?;
                Some(row)
            } else {
                None
            };
            progress(now, t.num_env_steps, row.as_ref());
        }
        self.status.wall_time_s += clock.elapsed().as_secs_f64();
        self.save_checkpoint()?;
        Ok(())
    }

    fn update_once(&mut self, rng: &mut ChaCha8Rng) -> anyhow::Result<()> {
        let a = &self.config.agent;
        let batch = a.batch_size as usize;
        let Some(train) = self.online.sample(batch, rng) else {
            return Ok(());
        };
        let slices = self
            .expert
            .sample(batch / a.seq_length as usize, a.seq_length as usize, rng)
            .map_err(anyhow::Error::msg)?;
        let expert = ExpertBatch {
            state: slices.state,
            privileged_state: slices.privileged_state,
            next_state: slices.next_state,
            next_privileged_state: slices.next_privileged_state,
        };
        let (metrics, mixed_z) = self.learner.update(&train, &expert, self.config.train.seed);
        self.zbuffer.add(&mixed_z);
        self.status.updates = self.learner.updates();
        self.log.update(&metrics);
        Ok(())
    }

    /// Tracking evaluation on the run's benchmark through the SDK's local runner (the same
    /// episodes and metrics a submission gets); updates motion priorities from the EMDs.
    pub fn evaluate(&mut self) -> anyhow::Result<BTreeMap<String, f64>> {
        let t = &self.config.train;
        let mut agent = TrackingAgent::new(self.learner.model.share(), t.tracking_window);
        let options = LocalOptions {
            batch: t.eval_batch,
            threads: t.threads,
            backend: t.backend(),
            gains: None,
        };
        let aggregator = run_local(
            &self.motions.spec,
            &self.motions.clips,
            &mut agent,
            &options,
            &mut |_, _, _| {},
        )
        .context("evaluation run")?;
        if let Some(e) = agent.error {
            bail!("evaluation: {e}");
        }
        let mut per_motion: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for ep in aggregator.episodes() {
            if let Some(v) = ep.metrics.get("emd") {
                per_motion.entry(ep.motion.clone()).or_default().push(*v);
            }
            // Every episode has its row: an unscored failure's status says why its metrics
            // are empty.
            let mut row = BTreeMap::new();
            row.insert("timestep".to_string(), CsvValue::Num(self.status.time as f64));
            row.insert("motion".to_string(), CsvValue::Text(ep.motion.clone()));
            row.insert("status".to_string(), CsvValue::Text(ep.status.to_string()));
            for k in ["emd", "mpjpe_l", "success", "failure_time_s", "mjlab_success"] {
                if let Some(v) = ep.metrics.get(k) {
                    row.insert(k.to_string(), CsvValue::Num(*v));
                }
            }
            append_csv_values(&self.paths.eval_log(), &EVAL_COLUMNS.map(String::from), &row)?;
        }
        if t.prioritization {
            let emd: Vec<f64> = self
                .library
                .motions
                .iter()
                .map(|m| {
                    per_motion
                        .get(&m.name)
                        .map_or(f64::NAN, |v| v.iter().sum::<f64>() / v.len() as f64)
                })
                .collect();
            let p = priorities(&emd, &PriorityConfig::TRAINING);
            self.expert.set_priorities(&p).map_err(anyhow::Error::msg)?;
            self.status.priorities = p;
        }
        let means = honest_means(aggregator.episodes());
        tracing::info!(
            "evaluation at {} env steps: success {:.3} of {} episodes ({} failed unscored); emd {:.4} over the {} scored",
            self.status.time,
            means.get("success").copied().unwrap_or(f64::NAN),
            means.get("episodes").copied().unwrap_or(0.0),
            means.get("failed_unscored").copied().unwrap_or(0.0),
            means.get("emd").copied().unwrap_or(f64::NAN),
            means.get("scored").copied().unwrap_or(0.0),
        );
        Ok(means)
    }

    /// Writes the checkpoint folder (model, optimisers, buffers, status).
    pub fn save_checkpoint(&mut self) -> anyhow::Result<()> {
        let tmp = self.paths.begin_checkpoint()?;
        checkpoint::save_model(&self.learner.model, &self.config.agent, &tmp)?;
        self.status.optimizer_steps = checkpoint::save_optimizers(&self.learner, &tmp)?;
        self.status.updates = self.learner.updates();
        if self.config.train.save_buffer {
            let (mut tensors, state) = self.online.state();
            let (z, len, cursor) = self.zbuffer.state();
            tensors.push(("zbuffer".into(), z));
            let tensors: Vec<(String, Tensor)> = tensors
                .into_iter()
                .map(|(k, t)| (k, t.to_device(Device::Cpu)))
                .collect();
            let path = tmp.join("buffers.safetensors");
            Tensor::write_safetensors(&tensors, &path).with_context(|| format!("writing {}", path.display()))?;
            self.status.online_buffer = Some(state);
            self.status.zbuffer_len = len;
            self.status.zbuffer_cursor = cursor;
        } else {
            self.status.online_buffer = None;
        }
        std::fs::write(
            tmp.join("train_status.json"),
            serde_json::to_string_pretty(&self.status)? + "\n",
        )?;
        std::fs::write(
            tmp.join("config.json"),
            serde_json::to_string_pretty(&self.config)? + "\n",
        )?;
        let dir = self.paths.commit_checkpoint()?;
        tracing::info!("checkpoint at {} env steps: {}", self.status.time, dir.display());
        Ok(())
    }
}
