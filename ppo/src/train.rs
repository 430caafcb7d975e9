//! The training loop: rollouts on the tracker envs, GAE, PPO updates, CSV logs, periodic
//! evaluation through the arena's own scoring (the local runner, as a submission is scored),
//! checkpoints and exact resume.
//!
//! Exact resume: every random draw derives from the run seed and the iteration counter, and at
//! every checkpoint boundary (each `run.checkpoint_every` iterations) every env starts a new
//! episode. A run stops only at a boundary (`--time-limit` finishes the interval it is in), so
//! resuming from its checkpoint continues exactly as the uninterrupted run does.

use crate::config::PpoTrainConfig;
use crate::envs::{ActionInterface, EnvStats, TrackerEnvs};
use crate::mdp::{ACTOR_DIM, CRITIC_DIM, REWARD_TERMS, TERMINATION_TERMS};
use crate::policy::ActorCritic;
use crate::ppo::{self, Act, RolloutBuilder, StepTensors, UpdateBatch, UpdateMetrics};
use crate::sampler::StartSampler;
use anyhow::{Context, bail};
use arena_bench::spec::BenchmarkSpec;
use arena_data::{MotionClip, NUM_JOINTS};
use arena_runner::local::{LocalOptions, run_local};
use arena_sdk::tracker::{Dense, TrackerAgent, TrackerCard, TrackerPolicy};
use arena_torch::cli::json_differences;
use arena_torch::csv_log::{CsvValue, append_csv, append_csv_values, truncate_log};
use arena_torch::denormals::FlushDenormals;
use arena_torch::optim::Adam;
use arena_torch::run_dir::RunPaths;
use arena_torch::seed::derive_seed;
use arena_torch::tensors::{read_tensors, write_tensors};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

const ENV_STREAM: u64 = 0x454e_5653;
const ACTION_STREAM: u64 = 0x4143_5453;
const PERMUTATION_STREAM: u64 = 0x5045_524d;
const INIT_STREAM: u64 = 0x494e_4954;

/// The counters and states saved in `train_status.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainStatus {
    pub iteration: u64,
    pub env_steps: u64,
    pub wall_time_s: f64,
    pub learning_rate: f64,
    pub adam_step: i64,
    pub episodes_started: u64,
    pub sampler: StartSampler,
}

/// What a checkpoint's `policy.json` records (the SDK's [`TrackerCard`]) for this run.
pub fn policy_card(config: &PpoTrainConfig, interface: &ActionInterface) -> TrackerCard {
    TrackerCard {
        benchmark: config.env.benchmark.clone(),
        gain_preset: config.env.gains.clone(),
        joint_names: arena_sim::robot::JOINT_NAMES.iter().map(|s| s.to_string()).collect(),
        joint_stiffness: interface.gains.kp.to_vec(),
        joint_damping: interface.gains.kd.to_vec(),
        default_joint_pos: interface.default_pose.to_vec(),
        action_scale: interface.scale.to_vec(),
        observation_names: crate::mdp::ACTOR_TERMS.iter().map(|t| t.0.to_string()).collect(),
        anchor_body_name: "torso_link".into(),
        actor_hidden: config.network.actor_hidden.clone(),
        critic_hidden: config.network.critic_hidden.clone(),
        joint_target_range: interface.target_range.iter().map(|&(lo, hi)| [lo, hi]).collect(),
    }
}

/// The actor of `model` as the SDK's plain-Rust policy (what evaluation and serving run).
pub fn tracker_policy(model: &ActorCritic, card: TrackerCard) -> anyhow::Result<TrackerPolicy> {
    let values = |t: &Tensor| -> anyhow::Result<Vec<f32>> {
        Ok(Vec::<f32>::try_from(
            t.detach()
                .to_device(Device::Cpu)
                .to_kind(Kind::Float)
                .contiguous()
                .view([-1]),
        )?)
    };
    let layers = model
        .actor
        .layers()
        .into_iter()
        .map(|(w, b)| {
            let size = w.size();
            Ok(Dense {
                weight: values(w)?,
                bias: values(b)?,
                input: size[1] as usize,
                output: size[0] as usize,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    TrackerPolicy::new(
        card,
        values(&model.actor_norm.mean)?,
        values(&model.actor_norm.std)?,
        layers,
    )
    .map_err(anyhow::Error::msg)
}

/// A fresh model of the configured sizes, initialised from `seed`.
pub fn new_model(config: &PpoTrainConfig, seed: u64) -> ActorCritic {
    tch::manual_seed(derive_seed(seed ^ INIT_STREAM, 0) as i64);
    ActorCritic::new(
        ACTOR_DIM as i64,
        CRITIC_DIM as i64,
        NUM_JOINTS as i64,
        &config.network.actor_hidden,
        &config.network.critic_hidden,
        config.ppo.init_noise_std,
    )
}

/// Loads `model.safetensors` of a checkpoint folder into a model of `card`'s sizes.
pub fn load_model(dir: &Path) -> anyhow::Result<(ActorCritic, TrackerCard)> {
    let card_path = dir.join("policy.json");
    let card: TrackerCard = serde_json::from_str(
        &std::fs::read_to_string(&card_path).with_context(|| format!("reading {}", card_path.display()))?,
    )
    .with_context(|| format!("parsing {}", card_path.display()))?;
    let path = dir.join("model.safetensors");
    let tensors = read_tensors(&path, "missing: not a tracker checkpoint")?;
    // The card's layer widths against the file's tensors, whole shapes, before a model of those
    // widths is made: a card (or a zero-element tensor) that says otherwise would otherwise
    // allocate whatever it names.
    let nets = [
        ("actor", ACTOR_DIM as i64, &card.actor_hidden, NUM_JOINTS as i64),
        ("critic", CRITIC_DIM as i64, &card.critic_hidden, 1),
    ];
    for (net, input, hidden, output) in nets {
        let widths: Vec<i64> = std::iter::once(input)
            .chain(hidden.iter().copied())
            .chain([output])
            .collect();
        for (k, pair) in widths.windows(2).enumerate() {
            let name = format!("{net}.{}.weight", 2 * k);
            let shape = tensors.get(&name).map(Tensor::size);
            if shape.as_deref() != Some(&[pair[1], pair[0]][..]) {
                bail!(
                    "{}: {net}_hidden {hidden:?} does not match {} ({name}: {}, expected [{}, {}])",
                    card_path.display(),
                    path.display(),
                    shape.map_or("missing".to_string(), |s| format!("{s:?}")),
                    pair[1],
                    pair[0]
                );
            }
        }
    }
    let model = ActorCritic::new(
        ACTOR_DIM as i64,
        CRITIC_DIM as i64,
        NUM_JOINTS as i64,
        &card.actor_hidden,
        &card.critic_hidden,
        1.0,
    );
    model
        .load(&|k| tensors.get(k).map(Tensor::shallow_clone))
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok((model, card))
}

pub struct Trainer {
    pub config: PpoTrainConfig,
    pub spec: BenchmarkSpec,
    clips: Vec<MotionClip>,
    pub paths: RunPaths,
    pub model: ActorCritic,
    adam: Adam,
    /// Where the model and the update live (the envs are the backend's).
    device: Device,
    pub envs: TrackerEnvs,
    pub status: TrainStatus,
    sim_s: f64,
    update_s: f64,
    /// The rollout's share of `update_s`: observations to tensors, sampling, the values.
    rollout_policy_s: f64,
    log_stats_steps: u64,
    log_started: Instant,
    last_metrics: UpdateMetrics,
    /// The envs hold no episodes yet (a new or resumed trainer): the next iteration starts
    /// them whether or not it is at a checkpoint boundary.
    envs_idle: bool,
    /// A resumed run's evaluation due at its checkpoint's iteration, which the run before may
    /// have stopped ahead of (the checkpoint is written first).
    evaluation_due: bool,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("iteration", &self.status.iteration)
            .finish()
    }
}

/// Progress hook: (iterations done, the run's iteration limit or 0, the last log row).
pub type ProgressFn<'a> = dyn FnMut(u64, u64, Option<&BTreeMap<String, f64>>) + 'a;

impl Trainer {
    /// A new run in `paths`, or the continuation of the one checkpointed there when `resume`,
    /// with the model and its update on the CPU.
    pub fn new(
        config: PpoTrainConfig,
        spec: BenchmarkSpec,
        clips: Vec<MotionClip>,
        paths: RunPaths,
        resume: bool,
    ) -> anyhow::Result<Self> {
        Self::new_on(config, spec, clips, paths, resume, Device::Cpu)
    }

    /// [`Trainer::new`] with the model, the rollout's tensors and the update on `device` (a
    /// CUDA device: the arena-bfm route, docs/baseline.md). The model is made, or loaded, on
    /// the CPU and moved, with the optimiser's moments. Exact resume holds on the CPU only.
    pub fn new_on(
        config: PpoTrainConfig,
        spec: BenchmarkSpec,
        clips: Vec<MotionClip>,
        paths: RunPaths,
        resume: bool,
        device: Device,
    ) -> anyhow::Result<Self> {
        config.validate().map_err(anyhow::Error::msg)?;
        let mut envs = TrackerEnvs::new(&config, &spec, &clips)?;
        let ckpt = paths.checkpoint();
        let (model, adam, status) = if resume {
            if let Some(what) = paths.recover_interrupted_save()? {
                tracing::info!("{what}");
            }
            let saved: PpoTrainConfig = serde_json::from_str(
                &std::fs::read_to_string(ckpt.join("config.json"))
                    .with_context(|| format!("reading {}", ckpt.join("config.json").display()))?,
            )
            .context("parsing the checkpoint's config.json")?;
            // What the checkpoint fixes: the sizes, and what its state was made with (the
            // learning rate is the status's, the start sampler its own), which a changed value
            // would not reach.
            let fixed = |c: &PpoTrainConfig| {
                serde_json::json!({"env": {"num_envs": c.env.num_envs, "benchmark": c.env.benchmark,
                    "gains": c.env.gains, "action_scale_factor": c.env.action_scale_factor},
                    "network": c.network,
                    "ppo": {"learning_rate": c.ppo.learning_rate, "schedule": c.ppo.schedule},
                    "sampling": c.sampling})
            };
            let diffs = json_differences(&fixed(&saved), &fixed(&config), "config");
            if !diffs.is_empty() {
                bail!(
                    "{}: a resume keeps these as the checkpoint has them: {}",
                    ckpt.display(),
                    diffs.join("; ")
                );
            }
            let (model, _) = load_model(&ckpt)?;
            let status: TrainStatus = serde_json::from_str(
                &std::fs::read_to_string(ckpt.join("train_status.json"))
                    .with_context(|| format!("reading {}", ckpt.join("train_status.json").display()))?,
            )
            .context("parsing train_status.json")?;
            let mut adam = Adam::new(model.parameters(), status.learning_rate);
            let opt_path = ckpt.join("optimizer.safetensors");
            let opt = read_tensors(&opt_path, "missing")?;
            adam.load_state("", status.adam_step, &|k| opt.get(k).map(Tensor::shallow_clone))
                .map_err(|e| anyhow::anyhow!("{}: {e}", opt_path.display()))?;
            let (then, now) = (status.sampler.motion_frames(), envs.sampler.motion_frames());
            if then != now {
                let sizes = |f: &[usize]| format!("{} clips of {} frames", f.len(), f.iter().sum::<usize>());
                bail!(
                    "{}: the clips of benchmark {} are not those the run trained on ({} then, {} now): \
                     another motions root or benchmarks folder?",
                    ckpt.display(),
                    config.env.benchmark,
                    sizes(&then),
                    sizes(&now)
                );
            }
            envs.sampler = status.sampler.clone();
            envs.episodes_started = status.episodes_started;
            truncate_log(&paths.train_log(), |t| t <= status.env_steps as f64)?;
            // The evaluation at the checkpoint's own step runs again (see `evaluation_due`).
            truncate_log(&paths.eval_log(), |t| t < status.env_steps as f64)?;
            (model, adam, status)
        } else {
            let model = new_model(&config, config.run.seed);
            if let Some(dir) = &config.run.init_from {
                let (init, card) = load_model(dir).with_context(|| format!("run.init_from {}", dir.display()))?;
                if (&card.actor_hidden, &card.critic_hidden)
                    != (&config.network.actor_hidden, &config.network.critic_hidden)
                {
                    bail!(
                        "run.init_from {}: its networks are {:?} / {:?}, the configuration's {:?} / {:?}",
                        dir.display(),
                        card.actor_hidden,
                        card.critic_hidden,
                        config.network.actor_hidden,
                        config.network.critic_hidden
                    );
                }
                let tensors: BTreeMap<String, Tensor> = init.tensors().into_iter().collect();
                model
                    .load(&|k| tensors.get(k).map(Tensor::shallow_clone))
                    .map_err(anyhow::Error::msg)?;
                tracing::info!(
                    "initialised the actor, critic, std and normalisers from {}",
                    dir.display()
                );
            }
            let adam = Adam::new(model.parameters(), config.ppo.learning_rate);
            let status = TrainStatus {
                iteration: 0,
                env_steps: 0,
                wall_time_s: 0.0,
                learning_rate: config.ppo.learning_rate,
                adam_step: 0,
                episodes_started: 0,
                sampler: envs.sampler.clone(),
            };
            (model, adam, status)
        };
        let (model, adam) = if device == Device::Cpu {
            (model, adam)
        } else {
            let moved = model.to_device(device);
            let mut moved_adam = Adam::new(moved.parameters(), adam.lr);
            let state: BTreeMap<String, Tensor> = adam.state_tensors("").into_iter().collect();
            moved_adam
                .load_state("", adam.step, &|k| state.get(k).map(Tensor::shallow_clone))
                .map_err(anyhow::Error::msg)?;
            (moved, moved_adam)
        };
        std::fs::create_dir_all(&paths.dir).with_context(|| format!("creating {}", paths.dir.display()))?;
        let e = config.run.eval_every;
        let evaluation_due = resume && status.iteration > 0 && e > 0 && status.iteration.is_multiple_of(e);
        Ok(Trainer {
            config,
            spec,
            clips,
            paths,
            model,
            adam,
            device,
            envs,
            status,
            sim_s: 0.0,
            update_s: 0.0,
            rollout_policy_s: 0.0,
            log_stats_steps: 0,
            log_started: Instant::now(),
            last_metrics: UpdateMetrics::new(),
            envs_idle: true,
            evaluation_due,
        })
    }

    /// Seconds spent since the last log row stepping the envs (the simulator, rewards, resets,
    /// observations) and in the policy and its update (the rollout's action sampling included).
    pub fn busy_split(&self) -> (f64, f64) {
        (self.sim_s, self.update_s)
    }

    /// Of `busy_split`'s policy and update, the seconds the rollout's action sampling took.
    pub fn rollout_policy_s(&self) -> f64 {
        self.rollout_policy_s
    }

    fn at_boundary(&self) -> bool {
        self.status.iteration.is_multiple_of(self.config.run.checkpoint_every)
    }

    /// One iteration: a rollout of `steps_per_env` steps and one PPO update.
    pub fn iteration(&mut self) -> anyhow::Result<()> {
        let c = &self.config;
        let it = self.status.iteration;
        let mut rng = ChaCha8Rng::seed_from_u64(derive_seed(c.run.seed ^ ENV_STREAM, it));
        let started = Instant::now();
        // A boundary starts every episode afresh (what makes a resume from it exact); so does
        // a trainer's first iteration, at a boundary or not (a run resumed from a checkpoint
        // written off one, at max_iterations, continues, though not bit for bit).
        if std::mem::take(&mut self.envs_idle) | self.at_boundary() {
            self.envs.reset_all(&mut rng)?;
        }
        tch::manual_seed(derive_seed(c.run.seed ^ ACTION_STREAM, it) as i64);
        let n = self.envs.num_envs() as i64;
        let mut rollout = RolloutBuilder::default();
        let mut policy_s = 0.0;
        // The rollout's libtorch calls are small (one step's rows) and the simulator's threads
        // run between them: with libtorch's OpenMP pool, its workers spin after each call
        // (libgomp's spin wait) on the cores the physics needs, which slowed the simulator by
        // 16 % in training against the same calls replayed alone (`make bench`). So up to
        // `ONE_THREAD_MAX_ENVS` envs the rollout's calls run on one thread (and the critic's
        // half of each step's sampling on a second one, beside the actor's half and the envs'
        // step, `Act::start`); the update gets the pool back.
        let one_thread = OneTorchThread::new(self.envs.num_envs());
        for _ in 0..c.env.steps_per_env {
            let t0 = Instant::now();
            let device = self.device;
            let obs = Tensor::from_slice(&self.envs.actor_obs)
                .view([n, ACTOR_DIM as i64])
                .to_device(device);
            let critic_obs = Tensor::from_slice(&self.envs.critic_obs)
                .view([n, CRITIC_DIM as i64])
                .to_device(device);
            let (act, actions) = {
                let _flush = FlushDenormals::new(tch::get_num_threads().max(1) as usize);
                let act = Act::start(&mut self.model, &obs, &critic_obs);
                let actions =
                    Vec::<f32>::try_from(act.actions.to_device(Device::Cpu).contiguous().view([-1])).expect("f32");
                (act, actions)
            };
            policy_s += t0.elapsed().as_secs_f64();
            // The critic's half of the sampling may still compute beside the envs' step.
            let out = self.envs.step(&actions, &mut rng)?;
            let joined = Instant::now();
            let act = act.finish();
            policy_s += joined.elapsed().as_secs_f64();
            let rewards = Tensor::from_slice(&out.rewards).to_device(device);
            let as_f32 = |v: &[bool]| {
                Tensor::from_slice(&v.iter().map(|b| *b as u8 as f32).collect::<Vec<f32>>()).to_device(device)
            };
            let outcome = StepTensors {
                rewards,
                dones: as_f32(&out.dones),
                timeouts: as_f32(&out.timeouts),
            };
            rollout.push(obs, critic_obs, act, &outcome, c.ppo.gamma);
        }
        let rollout = rollout.finish();
        let torch_threads = one_thread.restore();
        // libtorch's work from here flushes subnormal floats to zero (see `FlushDenormals`):
        // the critic's inputs hold rounding noise around 1e-32 where they are zero in exact
        // arithmetic, and its backward pass ran 1.7× as long on subnormal products.
        let _flush = FlushDenormals::new(torch_threads);
        let last_values = {
            let _guard = tch::no_grad_guard();
            let critic_obs = Tensor::from_slice(&self.envs.critic_obs)
                .view([n, CRITIC_DIM as i64])
                .to_device(self.device);
            self.model.value(&critic_obs)
        };
        let sim_done = Instant::now();
        let (returns, advantages) = ppo::compute_returns(&rollout, &last_values, c.ppo.gamma, c.ppo.lam);
        tch::manual_seed(derive_seed(c.run.seed ^ PERMUTATION_STREAM, it) as i64);
        let batch = c.batch_size() as i64;
        // Drawn on the CPU's generator whatever the device: the same stream everywhere.
        let permutation = Tensor::randperm(batch, (Kind::Int64, Device::Cpu)).to_device(self.device);
        let update_batch = UpdateBatch {
            rollout: &rollout,
            returns: &returns,
            advantages: &advantages,
            permutation: &permutation,
        };
        self.last_metrics = ppo::update(&self.model, &mut self.adam, &update_batch, &c.ppo, None);
        self.sim_s += (sim_done - started).as_secs_f64() - policy_s;
        self.update_s += sim_done.elapsed().as_secs_f64() + policy_s;
        self.rollout_policy_s += policy_s;
        self.status.iteration += 1;
        self.status.env_steps += batch as u64;
        self.log_stats_steps += batch as u64;
        Ok(())
    }

    /// Trains until `run.max_iterations` or, with a time limit, until the first checkpoint
    /// boundary after it; writes a checkpoint at every boundary.
    pub fn run(&mut self, time_limit_s: Option<f64>, progress: &mut ProgressFn<'_>) -> anyhow::Result<bool> {
        let started = Instant::now();
        let wall_before = self.status.wall_time_s;
        self.log_started = Instant::now();
        let max = self.config.run.max_iterations;
        let mut stopped_by_time = false;
        if std::mem::take(&mut self.evaluation_due) {
            self.evaluate()?;
        }
        loop {
            if max > 0 && self.status.iteration >= max {
                break;
            }
            if self.at_boundary() && time_limit_s.is_some_and(|l| started.elapsed().as_secs_f64() >= l) {
                stopped_by_time = true;
                break;
            }
            self.iteration()?;
            self.status.wall_time_s = wall_before + started.elapsed().as_secs_f64();
            let mut row = None;
            if self.status.iteration.is_multiple_of(self.config.run.log_every) {
                let r = self.log_row();
                append_csv(&self.paths.train_log(), &train_log_columns(), &r)?;
                row = Some(r);
            }
            if self.at_boundary() {
                self.save_checkpoint()?;
            }
            let e = self.config.run.eval_every;
            if e > 0 && self.status.iteration.is_multiple_of(e) {
                self.evaluate()?;
            }
            progress(self.status.iteration, max, row.as_ref());
        }
        if !self.at_boundary() {
            // max_iterations off a boundary: the checkpoint holds the last state (resuming it
            // starts fresh episodes, see `envs_idle`).
            self.save_checkpoint()?;
        }
        Ok(stopped_by_time)
    }

    fn log_row(&mut self) -> BTreeMap<String, f64> {
        let s = std::mem::take(&mut self.envs.stats);
        let elapsed = self.log_started.elapsed().as_secs_f64().max(1e-9);
        let mut row = BTreeMap::new();
        row.insert("timestep".to_string(), self.status.env_steps as f64);
        row.insert("iteration".into(), self.status.iteration as f64);
        row.insert("duration [minutes]".into(), self.status.wall_time_s / 60.0);
        row.insert("FPS".into(), self.log_stats_steps as f64 / elapsed);
        let busy = (self.sim_s + self.update_s).max(1e-9);
        row.insert("sim_share".into(), self.sim_s / busy);
        row.insert("update_share".into(), self.update_s / busy);
        // What of sim_share went where (the rest: the commands and the rollout's tensors).
        row.insert("physics_share".into(), s.physics_s / busy);
        row.insert("rewards_share".into(), s.rewards_s / busy);
        row.insert("resets_share".into(), s.resets_s / busy);
        row.insert("observations_share".into(), s.observations_s / busy);
        fill_env_stats(&s, &mut row);
        row.insert("sampler_entropy".into(), self.envs.sampler.entropy());
        for (k, v) in &self.last_metrics {
            row.insert(k.to_string(), *v);
        }
        self.sim_s = 0.0;
        self.update_s = 0.0;
        self.rollout_policy_s = 0.0;
        self.log_stats_steps = 0;
        self.log_started = Instant::now();
        row
    }

    /// Runs the benchmark as it is scored, with the deterministic policy, and logs the means.
    pub fn evaluate(&mut self) -> anyhow::Result<BTreeMap<String, f64>> {
        let card = policy_card(&self.config, &self.envs.interface);
        let policy = tracker_policy(&self.model, card.clone())?;
        let means = evaluate_policy(policy, &self.spec, &self.clips, self.config.env.threads)?;
        let mut row: BTreeMap<String, CsvValue> = means.iter().map(|(k, v)| (k.clone(), CsvValue::Num(*v))).collect();
        row.insert("timestep".into(), CsvValue::Num(self.status.env_steps as f64));
        append_csv_values(&self.paths.eval_log(), &eval_log_columns(), &row)?;
        tracing::info!(
            "evaluation at {} env steps ({}): success {:.3} of {} episodes ({} failed unscored); over the {} scored: failure time {:.2} s, emd {:.4}",
            self.status.env_steps,
            card.benchmark,
            means.get("success").copied().unwrap_or(f64::NAN),
            means.get("episodes").copied().unwrap_or(0.0),
            means.get("failed_unscored").copied().unwrap_or(0.0),
            means.get("scored").copied().unwrap_or(0.0),
            means.get("failure_time_s").copied().unwrap_or(f64::NAN),
            means.get("emd").copied().unwrap_or(f64::NAN),
        );
        Ok(means)
    }

    /// Writes the checkpoint folder: model, optimiser moments, status, configuration and the
    /// policy card.
    pub fn save_checkpoint(&mut self) -> anyhow::Result<()> {
        let tmp = self.paths.begin_checkpoint()?;
        write_tensors(&tmp.join("model.safetensors"), &self.model.tensors())?;
        let moments: Vec<(String, Tensor)> = self
            .adam
            .state_tensors("")
            .into_iter()
            .map(|(name, t)| (name, t.to_device(Device::Cpu)))
            .collect();
        write_tensors(&tmp.join("optimizer.safetensors"), &moments)?;
        self.status.learning_rate = self.adam.lr;
        self.status.adam_step = self.adam.step;
        self.status.sampler = self.envs.sampler.clone();
        self.status.episodes_started = self.envs.episodes_started;
        let json = |v: &dyn erased::Json| v.pretty();
        std::fs::write(tmp.join("train_status.json"), json(&self.status))?;
        std::fs::write(tmp.join("config.json"), json(&self.config))?;
        std::fs::write(
            tmp.join("policy.json"),
            json(&policy_card(&self.config, &self.envs.interface)),
        )?;
        let dir = self.paths.commit_checkpoint()?;
        tracing::info!(
            "checkpoint at iteration {} ({} env steps): {}",
            self.status.iteration,
            self.status.env_steps,
            dir.display()
        );
        Ok(())
    }
}

mod erased {
    /// Pretty JSON of any serialisable value, behind a trait object.
    pub trait Json {
        fn pretty(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn pretty(&self) -> String {
            serde_json::to_string_pretty(self).expect("serialisable") + "\n"
        }
    }
}

/// The most envs whose rollout runs libtorch on one thread. Measured on two cores
/// (`training_throughput`, g1-smoke): one thread trained faster at 128, 512 and 1024 envs
/// (0.50 → 0.54 of the simulator's rate at 128; sampling 5.0 → 3.9 ms per step at 512, 7.6 →
/// 7.2 ms at 1024), the whole pool at 4096 (26 → 16 ms, with the physics stubbed out), where a
/// step's rows are enough work to share.
const ONE_THREAD_MAX_ENVS: usize = 2048;

/// libtorch on one thread (for a rollout of at most [`ONE_THREAD_MAX_ENVS`] envs) until
/// [`OneTorchThread::restore`] or drop (an error mid-rollout included), then back to the
/// threads it had.
struct OneTorchThread(i32);

impl OneTorchThread {
    fn new(envs: usize) -> Self {
        let threads = tch::get_num_threads();
        if envs <= ONE_THREAD_MAX_ENVS {
            tch::set_num_threads(1);
        }
        OneTorchThread(threads)
    }

    /// Back to the threads before; returns how many.
    fn restore(self) -> usize {
        self.0.max(1) as usize
    }
}

impl Drop for OneTorchThread {
    fn drop(&mut self) {
        tch::set_num_threads(self.0);
    }
}

/// Means of the benchmark's metrics over an evaluation of `model` on every episode, run by the
/// local runner exactly as a submission is scored.
pub fn evaluate_policy(
    policy: TrackerPolicy,
    spec: &BenchmarkSpec,
    clips: &[MotionClip],
    threads: usize,
) -> anyhow::Result<BTreeMap<String, f64>> {
    let mut agent = TrackerAgent::new(policy);
    let options = LocalOptions {
        batch: 16,
        threads,
        ..Default::default()
    };
    let aggregator = run_local(spec, clips, &mut agent, &options, &mut |_, _, _| {}).context("evaluation run")?;
    Ok(honest_means(aggregator.episodes()))
}

/// The means an evaluation prints and logs, with the counts they are over (the benchmarks
/// crate's rule, shared with `arena-bfm`).
pub use arena_bench::aggregate::honest_means;

fn fill_env_stats(s: &EnvStats, row: &mut BTreeMap<String, f64>) {
    let steps = s.env_steps.max(1) as f64;
    let episodes = s.episodes.max(1) as f64;
    let total: f64 = s.reward_terms.iter().sum();
    row.insert("mean_reward".into(), total / steps);
    for (k, name) in REWARD_TERMS.iter().enumerate() {
        row.insert(format!("reward/{name}"), s.reward_terms[k] / steps);
    }
    for (k, name) in TERMINATION_TERMS.iter().enumerate() {
        row.insert(format!("termination/{name}"), s.terminations[k] as f64 / episodes);
    }
    row.insert("termination/time_out".into(), s.timeouts as f64 / episodes);
    row.insert("episodes".into(), s.episodes as f64);
    row.insert("episode_length".into(), s.episode_length_sum as f64 / episodes);
    row.insert("episode_return".into(), s.episode_return_sum / episodes);
    row.insert("sim_failures".into(), s.sim_failures as f64);
    row.insert("clipped_targets".into(), s.clipped_targets as f64);
}

/// Columns of `train_log.csv` (docs/ppo-tracker.md explains each).
pub fn train_log_columns() -> Vec<String> {
    let mut cols: Vec<String> = [
        "timestep",
        "iteration",
        "duration [minutes]",
        "FPS",
        "sim_share",
        "update_share",
        "physics_share",
        "rewards_share",
        "resets_share",
        "observations_share",
        "mean_reward",
        "episode_return",
        "episode_length",
        "episodes",
    ]
    .map(String::from)
    .to_vec();
    cols.extend(REWARD_TERMS.iter().map(|t| format!("reward/{t}")));
    cols.extend(TERMINATION_TERMS.iter().map(|t| format!("termination/{t}")));
    cols.push("termination/time_out".into());
    cols.extend(
        [
            "sim_failures",
            "clipped_targets",
            "sampler_entropy",
            "loss/surrogate",
            "loss/value_function",
            "loss/entropy",
            "kl",
            "grad_norm",
            "learning_rate",
            "mean_std",
        ]
        .map(String::from),
    );
    cols
}

/// Columns of `eval_log.csv`: means over the benchmark's episodes.
pub fn eval_log_columns() -> Vec<String> {
    [
        "timestep",
        "success",
        "success_phc_linf",
        "failure_time_s",
        "mjlab_success",
        "emd",
        "mpjpe_l",
        "mpjpe_g",
        "episodes",
        "scored",
        "failed_unscored",
    ]
    .map(String::from)
    .to_vec()
}
