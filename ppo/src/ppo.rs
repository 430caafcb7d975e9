//! PPO as rsl_rl 3.0.0 runs it (docs/ppo-tracker.md §9): rollout storage, GAE with time-out
//! bootstrap, one normalisation of the advantages per rollout, the clipped surrogate, the
//! clipped value loss, the entropy bonus, global gradient-norm clipping, Adam, and the optional
//! KL-adaptive learning rate checked before every minibatch.

use crate::config::{LrSchedule, PpoConfig};
use crate::policy::ActorCritic;
use arena_torch::optim::Adam;
use std::collections::BTreeMap;
use tch::{Kind, Tensor};

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
        let _guard = tch::no_grad_guard();
        model.actor_norm.update(obs);
        model.critic_norm.update(critic_obs);
        let dist = model.distribution(obs);
        let actions = dist.sample();
        let log_probs = dist.log_prob(&actions);
        Act {
            values: model.value(critic_obs),
            log_probs,
            mu: dist.mean,
            sigma: dist.std,
            actions,
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
    for _epoch in 0..c.num_learning_epochs {
        for i in 0..c.num_mini_batches as i64 {
            let idx = permutation.narrow(0, i * mini, mini);
            let pick = |t: &Tensor| t.index_select(0, &idx);
            let dist = model.distribution(&pick(&obs));
            let log_prob = dist.log_prob(&pick(&actions));
            let value = model.value(&pick(&critic_obs));
            let entropy = dist.entropy();
            let kl_mean = {
                let _guard = tch::no_grad_guard();
                let (mu, sigma) = (&dist.mean, &dist.std);
                let (omu, osigma) = (pick(&old_mu), pick(&old_sigma));
                let kl = ((sigma / &osigma + 1e-5).log()
                    + (osigma.square() + (&omu - mu).square()) / (sigma.square() * 2.0)
                    - 0.5)
                    .sum_dim_intlist(Some(&[-1i64][..]), false, Kind::Float);
                kl.mean(Kind::Float).double_value(&[])
            };
            if c.schedule == LrSchedule::Adaptive {
                if kl_mean > 2.0 * c.desired_kl {
                    adam.lr = (adam.lr / 1.5).max(1e-5);
                } else if kl_mean > 0.0 && kl_mean < c.desired_kl / 2.0 {
                    adam.lr = (adam.lr * 1.5).min(1e-2);
                }
            }
            let adv = pick(&advantages);
            let ratio = (&log_prob - pick(&old_log_probs)).exp();
            let surrogate = -&adv * &ratio;
            let clipped = -&adv * ratio.clamp(1.0 - c.clip_param, 1.0 + c.clip_param);
            let surrogate_loss = surrogate.maximum(&clipped).mean(Kind::Float);
            let ret = pick(&returns);
            let value_loss = if c.use_clipped_value_loss {
                let old = pick(&old_values);
                let v_clipped = &old + (&value - &old).clamp(-c.clip_param, c.clip_param);
                (&value - &ret)
                    .square()
                    .maximum(&(v_clipped - &ret).square())
                    .mean(Kind::Float)
            } else {
                (&value - &ret).square().mean(Kind::Float)
            };
            let entropy_mean = entropy.mean(Kind::Float);
            let loss = &surrogate_loss + &value_loss * c.value_loss_coef - &entropy_mean * c.entropy_coef;
            for p in &params {
                let mut g = p.grad();
                if g.defined() {
                    let _ = g.zero_();
                }
            }
            loss.backward();
            let grads: Vec<Tensor> = params.iter().map(|p| p.grad().detach()).collect();
            let grad_norm = clip_grad_norm(&grads, c.max_grad_norm);
            if let Some(t) = trace.as_deref_mut() {
                t.losses.push([
                    loss.double_value(&[]),
                    surrogate_loss.double_value(&[]),
                    value_loss.double_value(&[]),
                    entropy_mean.double_value(&[]),
                ]);
                if t.first_grads.is_empty() {
                    t.first_grads = names.iter().cloned().zip(grads.iter().map(|g| g.copy())).collect();
                }
            }
            adam.step(&grads);
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

/// `torch.nn.utils.clip_grad_norm_`: scales every gradient by min(1, max/(‖g‖ + 1e-6)), with
/// ‖g‖ the norm of all of them together; returns ‖g‖ before clipping.
pub fn clip_grad_norm(grads: &[Tensor], max_norm: f64) -> f64 {
    let _guard = tch::no_grad_guard();
    let norms: Vec<Tensor> = grads.iter().map(|g| g.norm()).collect();
    let total = Tensor::stack(&norms, 0).norm();
    let coef = (max_norm / (&total + 1e-6)).clamp_max(1.0);
    for g in grads {
        let mut g = g.shallow_clone();
        let _ = g.g_mul_(&coef);
    }
    total.double_value(&[])
}
