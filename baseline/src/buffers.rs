//! Replay buffers (BFM_ZERO_FACTS §3.5, §5.3, §5.8): the online trajectory buffer over
//! (time × env), the expert buffer of reference observations, and the z buffer.
//!
//! Tensors live on the training device; the episode bookkeeping that decides which rows may be
//! sampled lives on the host, and every random choice comes from a caller-supplied RNG so a run
//! is reproducible from its seed and counters alone.

use crate::model::Obs;
use crate::update::TrainBatch;
use rand::Rng;
use rand::distr::{Distribution, weighted::WeightedIndex};
use std::collections::VecDeque;
use tch::{Device, Kind, Tensor};

/// Observation group widths (state, privileged_state, last_action, history_actor).
pub type GroupDims = [i64; 4];

fn gather(t: &Tensor, idx: &Tensor) -> Tensor {
    t.index_select(0, idx)
}

fn index_tensor(rows: &[i64], device: Device) -> Tensor {
    Tensor::from_slice(rows).to_device(device)
}

/// One env step of every env, as pushed into the online buffer (raw observations).
#[derive(Debug)]
pub struct StepRecord<'a> {
    /// Observation groups `[E, dim]` seen before acting.
    pub obs: &'a Obs,
    pub action: &'a Tensor,
    pub z: &'a Tensor,
    /// Σ c_k r_k of this step's transition `[E, 1]`.
    pub aux_reward: &'a Tensor,
    /// Per env: this observation starts a new episode (the previous step ended one).
    pub episode_start: &'a [bool],
    /// Per env: this observation is terminal (never true in BFM-Zero's configuration).
    pub terminated: &'a [bool],
}

/// Time-major ring buffer of `rows` × `envs` transitions.
#[derive(Debug)]
pub struct OnlineBuffer {
    rows: usize,
    envs: usize,
    device: Device,
    groups: [Tensor; 4],
    action: Tensor,
    z: Tensor,
    aux_reward: Tensor,
    terminated: Tensor,
    /// Rows written since the start (absolute time index of the next row).
    written: u64,
    /// Absolute row at which each env's current episode began.
    open_start: Vec<u64>,
    /// Closed episodes (env, first row, end row exclusive), oldest first.
    closed: VecDeque<(usize, u64, u64)>,
}

impl OnlineBuffer {
    pub fn new(rows: usize, envs: usize, dims: GroupDims, action_dim: i64, z_dim: i64, device: Device) -> Self {
        assert!(rows >= 2 && envs >= 1, "an online buffer needs 2 rows and 1 env");
        let cap = (rows * envs) as i64;
        let f = (Kind::Float, device);
        OnlineBuffer {
            rows,
            envs,
            device,
            groups: dims.map(|d| Tensor::zeros([cap, d], f)),
            action: Tensor::zeros([cap, action_dim], f),
            z: Tensor::zeros([cap, z_dim], f),
            aux_reward: Tensor::zeros([cap, 1], f),
            terminated: Tensor::zeros([cap, 1], f),
            written: 0,
            open_start: vec![0; envs],
            closed: VecDeque::new(),
        }
    }

    /// Transitions that can be sampled now.
    pub fn transitions(&self) -> u64 {
        self.segments().map(|(_, a, b)| b - a - 1).sum()
    }

    pub fn rows_written(&self) -> u64 {
        self.written
    }

    /// Appends one step of every env.
    pub fn push(&mut self, step: &StepRecord) {
        let _guard = tch::no_grad_guard();
        let t = self.written;
        for (e, &start) in step.episode_start.iter().enumerate() {
            if start && t > self.open_start[e] {
                self.closed.push_back((e, self.open_start[e], t));
            }
            if start {
                self.open_start[e] = t;
            }
        }
        let row = (t % self.rows as u64) as i64;
        let (a, b) = (row * self.envs as i64, (row + 1) * self.envs as i64);
        let obs = [
            &step.obs.state,
            &step.obs.privileged_state,
            &step.obs.last_action,
            &step.obs.history_actor,
        ];
        for (dst, src) in self.groups.iter_mut().zip(obs) {
            dst.narrow(0, a, b - a).copy_(src);
        }
        self.action.narrow(0, a, b - a).copy_(step.action);
        self.z.narrow(0, a, b - a).copy_(step.z);
        self.aux_reward.narrow(0, a, b - a).copy_(step.aux_reward);
        let term: Vec<f32> = step.terminated.iter().map(|&x| if x { 1.0 } else { 0.0 }).collect();
        self.terminated
            .narrow(0, a, b - a)
            .copy_(&Tensor::from_slice(&term).view([-1, 1]).to_device(self.device));
        self.written += 1;
        let oldest = self.written.saturating_sub(self.rows as u64);
        while self.closed.front().is_some_and(|&(_, _, end)| end <= oldest + 1) {
            self.closed.pop_front();
        }
    }

    /// Episodes (env, first, end) clipped to the rows still in the ring, with ≥ 2 rows.
    fn segments(&self) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        let oldest = self.written.saturating_sub(self.rows as u64);
        let open = (0..self.envs).map(move |e| (e, self.open_start[e], self.written));
        self.closed
            .iter()
            .copied()
            .chain(open)
            .map(move |(e, a, b)| (e, a.max(oldest), b))
            .filter(|&(_, a, b)| b >= a + 2)
    }

    /// `n` transitions (row → next row of the same episode), uniform over every transition in
    /// the ring. BFM-Zero draws an episode segment uniformly, then a start in it (§5.8); its
    /// episodes all run 501 steps, so that is uniform over transitions too. Here episodes end
    /// with their motion and so vary in length, and a segment-uniform draw would over-sample
    /// the few steps after each reset of the short ones. None until one episode has two rows.
    pub fn sample(&self, n: usize, rng: &mut impl Rng) -> Option<TrainBatch> {
        // Cumulative transition counts: segment k holds transitions [ends[k-1], ends[k]).
        let segments: Vec<(usize, u64, u64)> = self.segments().collect();
        let ends: Vec<u64> = segments
            .iter()
            .scan(0u64, |total, &(_, a, b)| {
                *total += b - a - 1;
                Some(*total)
            })
            .collect();
        let total = *ends.last()?;
        let mut now = Vec::with_capacity(n);
        let mut next = Vec::with_capacity(n);
        for _ in 0..n {
            let u = rng.random_range(0..total);
            let k = ends.partition_point(|&end| end <= u);
            let (e, a, b) = segments[k];
            let first = ends[k] - (b - a - 1);
            let t = a + (u - first);
            let flat = |t: u64| ((t % self.rows as u64) * self.envs as u64 + e as u64) as i64;
            now.push(flat(t));
            next.push(flat(t + 1));
        }
        let (i, j) = (index_tensor(&now, self.device), index_tensor(&next, self.device));
        let obs_at = |idx: &Tensor| Obs {
            state: gather(&self.groups[0], idx),
            privileged_state: gather(&self.groups[1], idx),
            last_action: gather(&self.groups[2], idx),
            history_actor: gather(&self.groups[3], idx),
        };
        Some(TrainBatch {
            obs: obs_at(&i),
            action: gather(&self.action, &i),
            next_obs: obs_at(&j),
            terminated: gather(&self.terminated, &j),
            z: gather(&self.z, &i),
            aux_reward: gather(&self.aux_reward, &i),
        })
    }
}

/// Reference observations of every motion, one trajectory per motion (§3.5).
#[derive(Debug)]
pub struct ExpertBuffer {
    state: Tensor,
    privileged_state: Tensor,
    /// (first row, rows) per motion.
    spans: Vec<(usize, usize)>,
    priorities: Vec<f64>,
    device: Device,
}

/// Expert slices: `slices × len` rows, slice-major, and the rows one step later.
#[derive(Debug)]
pub struct ExpertSlices {
    pub state: Tensor,
    pub privileged_state: Tensor,
    pub next_state: Tensor,
    pub next_privileged_state: Tensor,
    /// The motion of each slice.
    pub motions: Vec<usize>,
}

impl ExpertBuffer {
    /// `motions`: per motion its state rows `[T, state]` and privileged rows `[T, priv]` (f32, row-major).
    pub fn new(motions: &[(Vec<f32>, Vec<f32>)], dims: (i64, i64), device: Device) -> Result<Self, String> {
        let (sd, pd) = dims;
        let mut spans = Vec::with_capacity(motions.len());
        let mut states = Vec::new();
        let mut privs = Vec::new();
        let mut first = 0;
        for (k, (s, p)) in motions.iter().enumerate() {
            let rows = s.len() / sd as usize;
            if s.len() != rows * sd as usize || p.len() != rows * pd as usize {
                return Err(format!("expert motion {k}: row widths do not match ({sd}, {pd})"));
            }
            spans.push((first, rows));
            first += rows;
            states.extend_from_slice(s);
            privs.extend_from_slice(p);
        }
        if first == 0 {
            return Err("the expert buffer has no rows (no motions)".into());
        }
        Ok(ExpertBuffer {
            state: Tensor::from_slice(&states).view([-1, sd]).to_device(device),
            privileged_state: Tensor::from_slice(&privs).view([-1, pd]).to_device(device),
            priorities: vec![1.0; spans.len()],
            spans,
            device,
        })
    }

    pub fn num_motions(&self) -> usize {
        self.spans.len()
    }

    /// Rows of one motion (all of it): the reference observations of a tracking episode.
    pub fn motion_rows(&self, motion: usize) -> (Tensor, Tensor) {
        let (first, rows) = self.spans[motion];
        (
            self.state.narrow(0, first as i64, rows as i64),
            self.privileged_state.narrow(0, first as i64, rows as i64),
        )
    }

    pub fn priorities(&self) -> &[f64] {
        &self.priorities
    }

    /// Replaces the motion sampling weights (§7.4); they need not sum to 1.
    pub fn set_priorities(&mut self, priorities: &[f64]) -> Result<(), String> {
        if priorities.len() != self.spans.len() || priorities.iter().any(|p| !(p.is_finite() && *p >= 0.0)) {
            return Err(format!("{} finite non-negative priorities expected", self.spans.len()));
        }
        self.priorities = priorities.to_vec();
        Ok(())
    }

    /// `slices` slices of `len` consecutive rows: a motion by priority (among those with at
    /// least `len + 1` rows), a start uniformly in [0, rows − len − 1].
    pub fn sample(&self, slices: usize, len: usize, rng: &mut impl Rng) -> Result<ExpertSlices, String> {
        let weights: Vec<f64> = self
            .spans
            .iter()
            .zip(&self.priorities)
            .map(|(&(_, rows), &p)| if rows > len { p } else { 0.0 })
            .collect();
        let pick = WeightedIndex::new(&weights)
            .map_err(|_| format!("no motion has more than {len} rows (or all priorities are 0)"))?;
        let mut now = Vec::with_capacity(slices * len);
        let mut motions = Vec::with_capacity(slices);
        for _ in 0..slices {
            let m = pick.sample(rng);
            let (first, rows) = self.spans[m];
            let start = first + rng.random_range(0..rows - len);
            motions.push(m);
            now.extend((start..start + len).map(|r| r as i64));
        }
        let next: Vec<i64> = now.iter().map(|r| r + 1).collect();
        let (i, j) = (index_tensor(&now, self.device), index_tensor(&next, self.device));
        Ok(ExpertSlices {
            state: gather(&self.state, &i),
            privileged_state: gather(&self.privileged_state, &i),
            next_state: gather(&self.state, &j),
            next_privileged_state: gather(&self.privileged_state, &j),
            motions,
        })
    }
}

/// Ring buffer of z vectors (the mixed z of every update), sampled uniformly for rollouts.
#[derive(Debug)]
pub struct ZBuffer {
    data: Tensor,
    len: usize,
    cursor: usize,
}

impl ZBuffer {
    pub fn new(capacity: usize, z_dim: i64, device: Device) -> Self {
        ZBuffer {
            data: Tensor::zeros([capacity as i64, z_dim], (Kind::Float, device)),
            len: 0,
            cursor: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn add(&mut self, z: &Tensor) {
        let _guard = tch::no_grad_guard();
        let cap = self.data.size()[0] as usize;
        let n = z.size()[0] as usize;
        let mut k = 0;
        while k < n {
            let take = (cap - self.cursor).min(n - k);
            self.data
                .narrow(0, self.cursor as i64, take as i64)
                .copy_(&z.narrow(0, k as i64, take as i64));
            self.cursor = (self.cursor + take) % cap;
            k += take;
        }
        self.len = (self.len + n).min(cap);
    }

    /// `n` rows drawn uniformly with replacement; None while empty.
    pub fn sample(&self, n: usize, rng: &mut impl Rng) -> Option<Tensor> {
        if self.len == 0 {
            return None;
        }
        let idx: Vec<i64> = (0..n).map(|_| rng.random_range(0..self.len) as i64).collect();
        Some(self.data.index_select(0, &index_tensor(&idx, self.data.device())))
    }
}

/// Host bookkeeping of an [`OnlineBuffer`], saved next to its tensors.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct OnlineBufferState {
    pub rows: usize,
    pub envs: usize,
    pub written: u64,
    pub open_start: Vec<u64>,
    pub closed: Vec<(usize, u64, u64)>,
}

impl OnlineBuffer {
    /// Tensors (`online.*`) and bookkeeping for a checkpoint.
    pub fn state(&self) -> (Vec<(String, Tensor)>, OnlineBufferState) {
        let names = ["state", "privileged_state", "last_action", "history_actor"];
        let mut tensors: Vec<(String, Tensor)> = names
            .iter()
            .zip(&self.groups)
            .map(|(n, t)| (format!("online.observation-{n}"), t.shallow_clone()))
            .collect();
        tensors.push(("online.action".into(), self.action.shallow_clone()));
        tensors.push(("online.z".into(), self.z.shallow_clone()));
        tensors.push(("online.aux_reward".into(), self.aux_reward.shallow_clone()));
        tensors.push(("online.terminated".into(), self.terminated.shallow_clone()));
        let state = OnlineBufferState {
            rows: self.rows,
            envs: self.envs,
            written: self.written,
            open_start: self.open_start.clone(),
            closed: self.closed.iter().copied().collect(),
        };
        (tensors, state)
    }

    /// Restores what [`OnlineBuffer::state`] saved; shapes must match this buffer's.
    pub fn restore(&mut self, lookup: &dyn Fn(&str) -> Option<Tensor>, state: OnlineBufferState) -> Result<(), String> {
        if state.rows != self.rows || state.envs != self.envs {
            return Err(format!(
                "the saved online buffer is {} steps × {} envs, this run's {} × {}: a resumed run keeps \
                 its train.num_envs and train.buffer_size",
                state.rows, state.envs, self.rows, self.envs
            ));
        }
        let _guard = tch::no_grad_guard();
        let (tensors, _) = self.state();
        for (name, mut t) in tensors {
            let saved = lookup(&name).ok_or_else(|| format!("buffer tensor {name} is missing"))?;
            if saved.size() != t.size() {
                return Err(format!(
                    "buffer tensor {name}: shape {:?}, expected {:?}",
                    saved.size(),
                    t.size()
                ));
            }
            t.copy_(&saved);
        }
        self.written = state.written;
        self.open_start = state.open_start;
        self.closed = state.closed.into();
        Ok(())
    }
}

impl ZBuffer {
    pub fn state(&self) -> (Tensor, usize, usize) {
        (self.data.shallow_clone(), self.len, self.cursor)
    }

    pub fn restore(&mut self, data: &Tensor, len: usize, cursor: usize) -> Result<(), String> {
        if data.size() != self.data.size()
            || len > self.data.size()[0] as usize
            || cursor >= self.data.size()[0] as usize
        {
            return Err(format!(
                "the saved z buffer is {:?} ({len} filled), this run's {:?}: a resumed run keeps its \
                 agent.z_buffer_size and model.z_dim",
                data.size(),
                self.data.size()
            ));
        }
        let _guard = tch::no_grad_guard();
        self.data.copy_(data);
        self.len = len;
        self.cursor = cursor;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Env 0 restarts every 3 rows, env 1 runs one long episode; `state` holds 10·row + env.
    fn two_envs(rows_written: u64) -> OnlineBuffer {
        let mut buffer = OnlineBuffer::new(200, 2, [1; 4], 1, 1, Device::Cpu);
        let zeros = Tensor::zeros([2, 1], (Kind::Float, Device::Cpu));
        for t in 0..rows_written {
            let obs = Obs {
                state: Tensor::from_slice(&[10.0 * t as f32, 10.0 * t as f32 + 1.0]).view([2, 1]),
                privileged_state: zeros.shallow_clone(),
                last_action: zeros.shallow_clone(),
                history_actor: zeros.shallow_clone(),
            };
            buffer.push(&StepRecord {
                obs: &obs,
                action: &zeros,
                z: &zeros,
                aux_reward: &zeros,
                episode_start: &[t % 3 == 0, t == 0],
                terminated: &[false, false],
            });
        }
        buffer
    }

    #[test]
    fn sampling_is_uniform_over_transitions_not_episodes() {
        let buffer = two_envs(101);
        // Env 0: 33 episodes of 3 rows (2 transitions each) and an open one of 2 rows (1);
        // env 1: one episode of 101 rows (100).
        assert_eq!(buffer.transitions(), 66 + 1 + 100);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let batch = buffer.sample(20_000, &mut rng).unwrap();
        let now: Vec<f32> = Vec::try_from(batch.obs.state.flatten(0, -1)).unwrap();
        let next: Vec<f32> = Vec::try_from(batch.next_obs.state.flatten(0, -1)).unwrap();
        let mut long = 0;
        for (a, b) in now.iter().zip(&next) {
            let (row, env) = ((*a as u64) / 10, (*a as u64) % 10);
            assert_eq!(*b, a + 10.0, "the next row of the same env");
            if env == 1 {
                long += 1;
            } else {
                assert_ne!(row % 3, 2, "row {row} ends its episode: no transition starts there");
            }
        }
        // Transition-uniform: 100/167 = 0.60 from the long episode (episode-uniform: 1/35).
        let share = long as f64 / now.len() as f64;
        assert!((share - 100.0 / 167.0).abs() < 0.02, "{share}");
    }

    #[test]
    fn nothing_to_sample_before_an_episode_has_two_rows() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        assert!(two_envs(1).sample(4, &mut rng).is_none());
        assert!(two_envs(2).sample(4, &mut rng).is_some());
    }
}
