//! PPO as rsl_rl 3.0.0 runs it (docs/ppo-tracker.md §9): rollout storage, GAE with time-out
//! bootstrap, one normalisation of the advantages per rollout, the clipped surrogate, the
//! clipped value loss, the entropy bonus, global gradient-norm clipping, Adam, and the optional
//! KL-adaptive learning rate checked before every minibatch.

use crate::config::{LrSchedule, PpoConfig};
use crate::policy::{ActorCritic, ActorSide, CriticSide};
use crate::side_by_side::{Later, OneThreadHere, beside, start_beside};
use arena_torch::optim::{Adam, AdamSlot, AdamStep, host_f32};
use std::collections::BTreeMap;
use tch::{Device, Kind, Tensor};

/// One rollout, time-major: `[T, N, ...]`.
#[derive(Debug)]
pub struct Rollout {
    pub obs: Tensor,
    pub critic_obs: Tensor,
    pub actions: Tensor,
    /// Rewards with the time-out bootstrap already added.
    pub rewards: Tensor,
    pub dones: Tensor,
    pub values: Tensor,
    pub log_probs: Tensor,
    pub mu: Tensor,
    pub sigma: Tensor,
}

/// Collects the steps of a rollout.
#[derive(Debug, Default)]
pub struct RolloutBuilder {
    obs: Vec<Tensor>,
    critic_obs: Vec<Tensor>,
    actions: Vec<Tensor>,
    rewards: Vec<Tensor>,
    dones: Vec<Tensor>,
    values: Vec<Tensor>,
    log_probs: Vec<Tensor>,
    mu: Vec<Tensor>,
    sigma: Vec<Tensor>,
}

/// What the policy did at one step (detached).
#[derive(Debug)]
pub struct Act {
    pub actions: Tensor,
    pub values: Tensor,
    pub log_probs: Tensor,
    pub mu: Tensor,
    pub sigma: Tensor,
}

impl Act {
    /// Samples actions for raw inputs; updates the normalisers first (rsl_rl updates them with
    /// every step's observations and then normalises with the new statistics).
    pub fn sample(model: &mut ActorCritic, obs: &Tensor, critic_obs: &Tensor) -> Act {
        Self::start(model, obs, critic_obs).finish()
    }

    /// [`Act::sample`], returning as soon as the actions are drawn: where libtorch runs on one
    /// thread on the CPU (the rollout of a training on few cores, see `train.rs`), the critic's
    /// half (its normaliser and V) runs on a second thread, started before the actor's half
    /// and joined by [`PendingAct::finish`], so that it computes beside the actor's half and
    /// then beside whatever the caller does meanwhile (the envs' step). The two halves share
    /// no tensor and draw no random number, and each runs on one libtorch thread as before:
    /// the results are the same bit for bit.
    pub fn start(model: &mut ActorCritic, obs: &Tensor, critic_obs: &Tensor) -> PendingAct {
        let _guard = tch::no_grad_guard();
        let values = if model.device() == Device::Cpu && tch::get_num_threads() == 1 {
            let (mut critic, critic_input) = (model.critic_side(), critic_obs.shallow_clone());
            start_beside(move || {
                let _guard = tch::no_grad_guard();
                critic.norm.update(&critic_input);
                critic.value(&critic_input)
            })
        } else {
            model.critic_norm.update(critic_obs);
            Later::Done(model.value(critic_obs))
        };
        model.actor_norm.update(obs);
        let dist = model.distribution(obs);
        let actions = dist.sample();
        let log_probs = dist.log_prob(&actions);
        PendingAct {
            actions,
            log_probs,
            mu: dist.mean,
            sigma: dist.std,
            values,
        }
    }
}

/// A step's sampling whose values may still be computing ([`Act::start`]).
pub struct PendingAct {
    pub actions: Tensor,
    pub log_probs: Tensor,
    pub mu: Tensor,
    pub sigma: Tensor,
    values: Later<Tensor>,
}

impl PendingAct {
    /// Waits for the values.
    pub fn finish(self) -> Act {
        Act {
            values: self.values.join(),
            actions: self.actions,
            log_probs: self.log_probs,
            mu: self.mu,
            sigma: self.sigma,
        }
    }
}

/// What the envs returned for one step, `[N]` each (dones and time-outs as 0/1).
#[derive(Debug)]
pub struct StepTensors {
    pub rewards: Tensor,
    pub dones: Tensor,
    pub timeouts: Tensor,
}

impl RolloutBuilder {
    /// Stores one step. Episodes that ended by time-out get r += γ·V(s_t).
    pub fn push(&mut self, obs: Tensor, critic_obs: Tensor, act: Act, step: &StepTensors, gamma: f64) {
        let rewards = &step.rewards + &act.values * &step.timeouts * gamma;
        let dones = &step.dones;
        self.obs.push(obs);
        self.critic_obs.push(critic_obs);
        self.actions.push(act.actions);
        self.rewards.push(rewards);
        self.dones.push(dones.shallow_clone());
        self.values.push(act.values);
        self.log_probs.push(act.log_probs);
        self.mu.push(act.mu);
        self.sigma.push(act.sigma);
    }

    pub fn finish(self) -> Rollout {
        let s = |v: Vec<Tensor>| Tensor::stack(&v, 0);
        Rollout {
            obs: s(self.obs),
            critic_obs: s(self.critic_obs),
            actions: s(self.actions),
            rewards: s(self.rewards),
            dones: s(self.dones),
            values: s(self.values),
            log_probs: s(self.log_probs),
            mu: s(self.mu),
            sigma: s(self.sigma),
        }
    }
}

/// GAE: δ_t = r_t + (1−d_t)γV_{t+1} − V_t, A_t = δ_t + (1−d_t)γλA_{t+1}, R_t = A_t + V_t, with
/// V_T = `last_values`. Returns (returns, advantages normalised over the whole rollout).
pub fn compute_returns(r: &Rollout, last_values: &Tensor, gamma: f64, lam: f64) -> (Tensor, Tensor) {
    let _guard = tch::no_grad_guard();
    let steps = r.rewards.size()[0];
    let mut advantage = last_values.zeros_like();
    let mut returns = Vec::with_capacity(steps as usize);
    for t in (0..steps).rev() {
        let next_values = if t == steps - 1 {
            last_values.shallow_clone()
        } else {
            r.values.get(t + 1)
        };
        let not_done = 1.0 - r.dones.get(t);
        let delta = r.rewards.get(t) + &not_done * &next_values * gamma - r.values.get(t);
        advantage = delta + &not_done * &advantage * (gamma * lam);
        returns.push(&advantage + r.values.get(t));
    }
    returns.reverse();
    let returns = Tensor::stack(&returns, 0);
    let advantages = &returns - &r.values;
    let advantages = (&advantages - advantages.mean(Kind::Float)) / (advantages.std(true) + 1e-8);
    (returns, advantages)
}

/// Means over the update's minibatches (and the last learning rate).
pub type UpdateMetrics = BTreeMap<&'static str, f64>;

/// What the oracle test compares: every minibatch's losses and the clipped gradients of the
/// first minibatch.
#[derive(Debug, Default)]
pub struct UpdateTrace {
    pub losses: Vec<[f64; 4]>,
    pub first_grads: Vec<(String, Tensor)>,
}

/// What one update learns from: the rollout, its returns and advantages ([`compute_returns`])
/// and one random permutation of its T·N samples, cut into the minibatches of every epoch (as
/// rsl_rl does).
#[derive(Debug)]
pub struct UpdateBatch<'a> {
    pub rollout: &'a Rollout,
    pub returns: &'a Tensor,
    pub advantages: &'a Tensor,
    pub permutation: &'a Tensor,
}

/// One PPO update: `num_learning_epochs` passes over the minibatches.
pub fn update(
    model: &ActorCritic,
    adam: &mut Adam,
    b: &UpdateBatch<'_>,
    c: &PpoConfig,
    mut trace: Option<&mut UpdateTrace>,
) -> UpdateMetrics {
    let (rollout, returns, advantages, permutation) = (b.rollout, b.returns, b.advantages, b.permutation);
    let flat = |t: &Tensor| t.flatten(0, 1);
    let (obs, critic_obs, actions) = (flat(&rollout.obs), flat(&rollout.critic_obs), flat(&rollout.actions));
    let (old_values, old_log_probs) = (flat(&rollout.values), flat(&rollout.log_probs));
    let (old_mu, old_sigma) = (flat(&rollout.mu), flat(&rollout.sigma));
    let (returns, advantages) = (flat(returns), flat(advantages));
    let batch = obs.size()[0];
    let mini = batch / c.num_mini_batches as i64;
    let params: Vec<Tensor> = adam.params().iter().map(Tensor::shallow_clone).collect();
    let names = adam.names.clone();
    let mut sums: BTreeMap<&'static str, f64> = BTreeMap::new();
    let mut count = 0.0;
    // The actor's and the critic's terms share no tensor: on a pool of two libtorch threads
    // they compute side by side, one thread each (see `split_update`).
    let split = split_update(model);
    // The whole update then on one thread here (its optimiser step and clipping included): a
    // pool's idle thread spins a while after each parallel region, on the core the helper needs.
    let _one_thread = split.then(OneThreadHere::new);
    // The parameters of each side (the actor's include the std), by the optimiser's index.
    let (actor_ids, critic_ids): (Vec<usize>, Vec<usize>) =
        (0..params.len()).partition(|&k| !names[k].starts_with("critic."));
    let pick_params = |ids: &[usize]| -> Vec<Tensor> { ids.iter().map(|&k| params[k].shallow_clone()).collect() };
    for _epoch in 0..c.num_learning_epochs {
        for i in 0..c.num_mini_batches as i64 {
            let idx = permutation.narrow(0, i * mini, mini);
            // Each side selects its minibatch, clears its gradients, backpropagates its loss
            // term (the sum's gradient, as the two sides' parameters are apart) and, when side
            // by side, sums its gradients' squares for the clip's norm.
            let (actor_side, actor_params) = (model.actor_side(), pick_params(&actor_ids));
            let actor = || {
                let pick = |t: &Tensor| t.index_select(0, &idx);
                let batch = ActorBatch {
                    obs: pick(&obs),
                    actions: pick(&actions),
                    old_log_probs: pick(&old_log_probs),
                    old_mu: pick(&old_mu),
                    old_sigma: pick(&old_sigma),
                    advantages: pick(&advantages),
                };
                zero_grads(&actor_params);
                let terms = actor_terms(&actor_side, &batch, c);
                (&terms.surrogate_loss - &terms.entropy_mean * c.entropy_coef).backward();
                let grads = grads_of(&actor_params);
                let squares = split.then(|| squares_on_host(&grads)).flatten();
                (terms, grads, squares)
            };
            let (critic_side, critic_params) = (model.critic_side(), pick_params(&critic_ids));
            let (critic_idx, value_config) = (idx.shallow_clone(), c.clone());
            let critic_inputs = [&critic_obs, &returns, &old_values].map(Tensor::shallow_clone);
            let critic = move || {
                let [critic_obs, returns, old_values] = critic_inputs.map(|t| t.index_select(0, &critic_idx));
                let batch = CriticBatch {
                    critic_obs,
                    returns,
                    old_values,
                };
                zero_grads(&critic_params);
                let value_loss = value_loss(&critic_side, &batch, &value_config);
                (&value_loss * value_config.value_loss_coef).backward();
                let grads = grads_of(&critic_params);
                let squares = split.then(|| squares_on_host(&grads)).flatten();
                (value_loss, grads, squares)
            };
            let ((terms, actor_grads, actor_squares), (value_loss, critic_grads, critic_squares)) = if split {
                beside(actor, critic)
            } else {
                (actor(), critic())
            };
            let ActorTerms {
                surrogate_loss,
                entropy_mean,
                kl_mean,
            } = terms;
            if c.schedule == LrSchedule::Adaptive {
                if kl_mean > 2.0 * c.desired_kl {
                    adam.lr = (adam.lr / 1.5).max(1e-5);
                } else if kl_mean > 0.0 && kl_mean < c.desired_kl / 2.0 {
                    adam.lr = (adam.lr * 1.5).min(1e-2);
                }
            }
            let grad_norm = if let (Some(a), Some(b)) = (actor_squares, critic_squares) {
                // Side by side: the norm of both sides' gradients, then each side's clip and
                // optimiser step on its own thread.
                let total = norm_of(a + b);
                let coef = clip_coefficient(total, c.max_grad_norm);
                let step = adam.begin_step();
                let slots = |ids: &[usize]| -> Vec<AdamSlot> { ids.iter().map(|&k| adam.slot(k)).collect() };
                let (actor_slots, critic_slots) = (slots(&actor_ids), slots(&critic_ids));
                beside(
                    || step_side(&step, &actor_slots, &actor_grads, coef),
                    move || step_side(&step, &critic_slots, &critic_grads, coef),
                );
                total
            } else {
                let grads: Vec<Tensor> = params.iter().map(|p| p.grad().detach()).collect();
                let total = clip_grad_norm(&grads, c.max_grad_norm);
                adam.step(&grads);
                total
            };
            if let Some(t) = trace.as_deref_mut() {
                let loss = {
                    let _guard = tch::no_grad_guard();
                    &surrogate_loss + &value_loss * c.value_loss_coef - &entropy_mean * c.entropy_coef
                };
                t.losses.push([
                    loss.double_value(&[]),
                    surrogate_loss.double_value(&[]),
                    value_loss.double_value(&[]),
                    entropy_mean.double_value(&[]),
                ]);
                if t.first_grads.is_empty() {
                    // The clipped gradients (the optimiser's step leaves them as they are).
                    t.first_grads = names
                        .iter()
                        .zip(&params)
                        .map(|(n, p)| (n.clone(), p.grad().copy()))
                        .collect();
                }
            }
            for (k, v) in [
                ("loss/surrogate", surrogate_loss.double_value(&[])),
                ("loss/value_function", value_loss.double_value(&[])),
                ("loss/entropy", entropy_mean.double_value(&[])),
                ("kl", kl_mean),
                ("grad_norm", grad_norm),
            ] {
                *sums.entry(k).or_default() += v;
            }
            count += 1.0;
        }
    }
    let mut metrics: UpdateMetrics = sums.into_iter().map(|(k, v)| (k, v / count)).collect();
    metrics.insert("learning_rate", adam.lr);
    metrics.insert("mean_std", model.std.mean(Kind::Float).double_value(&[]));
    metrics
}

/// One minibatch of what the actor's terms need.
struct ActorBatch {
    obs: Tensor,
    actions: Tensor,
    old_log_probs: Tensor,
    old_mu: Tensor,
    old_sigma: Tensor,
    advantages: Tensor,
}

/// One minibatch of what the value loss needs.
struct CriticBatch {
    critic_obs: Tensor,
    returns: Tensor,
    old_values: Tensor,
}

/// A minibatch's actor terms: the clipped surrogate and the mean entropy (with their graphs),
/// and the mean KL from the rollout's policy (for the adaptive learning rate).
struct ActorTerms {
    surrogate_loss: Tensor,
    entropy_mean: Tensor,
    kl_mean: f64,
}

fn actor_terms(actor: &ActorSide, b: &ActorBatch, c: &PpoConfig) -> ActorTerms {
    let dist = actor.distribution(&b.obs);
    let log_prob = dist.log_prob(&b.actions);
    let entropy = dist.entropy();
    let kl_mean = {
        let _guard = tch::no_grad_guard();
        let (mu, sigma) = (&dist.mean, &dist.std);
        let (omu, osigma) = (&b.old_mu, &b.old_sigma);
        let kl = ((sigma / osigma + 1e-5).log() + (osigma.square() + (omu - mu).square()) / (sigma.square() * 2.0)
            - 0.5)
            .sum_dim_intlist(Some(&[-1i64][..]), false, Kind::Float);
        kl.mean(Kind::Float).double_value(&[])
    };
    let ratio = (&log_prob - &b.old_log_probs).exp();
    let surrogate = -&b.advantages * &ratio;
    let clipped = -&b.advantages * ratio.clamp(1.0 - c.clip_param, 1.0 + c.clip_param);
    ActorTerms {
        surrogate_loss: surrogate.maximum(&clipped).mean(Kind::Float),
        entropy_mean: entropy.mean(Kind::Float),
        kl_mean,
    }
}

/// The (optionally clipped) value loss of a minibatch.
fn value_loss(critic: &CriticSide, b: &CriticBatch, c: &PpoConfig) -> Tensor {
    let value = critic.value(&b.critic_obs);
    let ret = &b.returns;
    if c.use_clipped_value_loss {
        let old = &b.old_values;
        let v_clipped = old + (&value - old).clamp(-c.clip_param, c.clip_param);
        (&value - ret)
            .square()
            .maximum(&(v_clipped - ret).square())
            .mean(Kind::Float)
    } else {
        (&value - ret).square().mean(Kind::Float)
    }
}

/// Clears the parameters' gradients (those that have one) in place.
fn zero_grads(params: &[Tensor]) {
    for p in params {
        let mut g = p.grad();
        if g.defined() {
            let _ = g.zero_();
        }
    }
}

/// The parameters' gradients, as handles to them.
fn grads_of(params: &[Tensor]) -> Vec<Tensor> {
    params.iter().map(|p| p.grad().detach()).collect()
}

/// One side's clip (its gradients scaled by `coef`) and optimiser step.
fn step_side(step: &AdamStep, slots: &[AdamSlot], grads: &[Tensor], coef: f32) {
    scale_on_host(grads, coef);
    for (slot, g) in slots.iter().zip(grads) {
        step.apply(slot, g);
    }
}

/// Whether an update computes the actor's and the critic's terms side by side: on the CPU with
/// a pool of two libtorch threads. Measured on two cores (`ppo_update_throughput`, g1-smoke's
/// sizes, six interleaved pairs): 178–238 ms an update against 182–284 ms on the pool, whose
/// threads waited at libgomp's barriers for a fifth of their time (the dispatch between ops is
/// serial). Larger pools keep the whole pool on each op: not measured split.
fn split_update(model: &ActorCritic) -> bool {
    model.device() == Device::Cpu && tch::get_num_threads() == 2
}

/// [`clip_grad_norm`] in plain memory where every gradient is a contiguous float32 CPU tensor
/// (None otherwise: the caller takes libtorch's ops). At a PPO minibatch's sizes the 35
/// libtorch calls of the clip (a norm and a scaling per parameter) cost more in dispatch than in
/// arithmetic. The norm is summed in float64 (libtorch sums each gradient's squares in float32,
/// then the norms: the two agree to float32's rounding); the scaling is float32's, skipped where
/// the factor is 1 (a multiplication by 1 changes nothing).
fn clip_on_host(grads: &[Tensor], max_norm: f64) -> Option<f64> {
    let total = norm_of(squares_on_host(grads)?);
    scale_on_host(grads, clip_coefficient(total, max_norm));
    Some(total)
}

/// The gradients' norm from the sum of their squares, rounded to float32 as libtorch's is.
fn norm_of(sum_of_squares: f64) -> f64 {
    sum_of_squares.sqrt() as f32 as f64
}

/// The factor a clip to `max_norm` scales gradients of norm `total` by.
fn clip_coefficient(total: f64, max_norm: f64) -> f32 {
    ((max_norm / (total + 1e-6)) as f32).min(1.0)
}

/// Whether every gradient is a contiguous float32 CPU tensor (one plain array of floats).
fn on_host(grads: &[Tensor]) -> bool {
    grads.iter().all(host_f32)
}

/// The sum of the gradients' squares in float64, in plain memory (None where one is not a
/// contiguous float32 CPU tensor).
fn squares_on_host(grads: &[Tensor]) -> Option<f64> {
    if !on_host(grads) {
        return None;
    }
    let mut lanes = [0f64; 8];
    let mut rest = 0f64;
    for g in grads {
        // SAFETY: a contiguous float32 CPU tensor (checked above): its data pointer addresses
        // `numel` floats, which nothing writes while the sum reads them.
        let g = unsafe { std::slice::from_raw_parts(g.data_ptr() as *const f32, g.numel()) };
        let chunks = g.chunks_exact(8);
        for &x in chunks.remainder() {
            rest += x as f64 * x as f64;
        }
        // Eight partial sums: a dependency chain of float64 additions per lane, not one.
        for c in chunks {
            for (lane, &x) in lanes.iter_mut().zip(c) {
                *lane += x as f64 * x as f64;
            }
        }
    }
    Some(lanes.iter().sum::<f64>() + rest)
}

/// Multiplies the gradients by `coef` in plain memory where they are contiguous float32 CPU
/// tensors (as [`squares_on_host`] found them); nothing where `coef` is 1.
fn scale_on_host(grads: &[Tensor], coef: f32) {
    if coef >= 1.0 || !on_host(grads) {
        return;
    }
    for g in grads {
        // SAFETY: a contiguous float32 CPU tensor (checked above): its data pointer addresses
        // `numel` floats; the gradients are distinct tensors (one per parameter) and nothing
        // else reads or writes this one during the scaling.
        let g = unsafe { std::slice::from_raw_parts_mut(g.data_ptr() as *mut f32, g.numel()) };
        g.iter_mut().for_each(|x| *x *= coef);
    }
}

/// `torch.nn.utils.clip_grad_norm_`: scales every gradient by min(1, max/(‖g‖ + 1e-6)), with
/// ‖g‖ the norm of all of them together; returns ‖g‖ before clipping.
pub fn clip_grad_norm(grads: &[Tensor], max_norm: f64) -> f64 {
    let _guard = tch::no_grad_guard();
    clip_on_host(grads, max_norm).unwrap_or_else(|| clip_with_libtorch(grads, max_norm))
}

/// [`clip_grad_norm`] in libtorch's ops, for any device.
fn clip_with_libtorch(grads: &[Tensor], max_norm: f64) -> f64 {
    let norms: Vec<Tensor> = grads.iter().map(|g| g.norm()).collect();
    let total = Tensor::stack(&norms, 0).norm();
    let coef = (max_norm / (&total + 1e-6)).clamp_max(1.0);
    for g in grads {
        let mut g = g.shallow_clone();
        let _ = g.g_mul_(&coef);
    }
    total.double_value(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clip_on_the_host_matches_libtorch() {
        tch::manual_seed(5);
        let shapes: [&[i64]; 4] = [&[256, 160], &[256], &[29, 64], &[7]];
        for max_norm in [1.0, 1e6] {
            let grads: Vec<Tensor> = shapes
                .iter()
                .map(|s| Tensor::randn(*s, tch::kind::FLOAT_CPU) * 0.3)
                .collect();
            let copies: Vec<Tensor> = grads.iter().map(Tensor::copy).collect();
            let host = clip_on_host(&grads, max_norm).expect("contiguous float32 CPU tensors");
            let torch = clip_with_libtorch(&copies, max_norm);
            assert!((host - torch).abs() <= 1e-6 * torch, "norm {host} against {torch}");
            for (a, b) in grads.iter().zip(&copies) {
                let d = (a - b).abs().max().double_value(&[]);
                assert!(d <= 1e-7, "a clipped gradient differs by {d} (max_norm {max_norm})");
            }
            let clipped = max_norm < torch;
            assert_eq!(clipped, max_norm == 1.0, "the test exercises one case of each");
        }
        // A view that is not contiguous takes libtorch's ops.
        let t = Tensor::randn([4, 6], tch::kind::FLOAT_CPU).transpose(0, 1);
        assert!(clip_on_host(&[t], 1.0).is_none());
    }
}
