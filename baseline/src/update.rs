//! One FB-CPR-Aux agent update (BFM_ZERO_FACTS §5.3, §5.5, §5.6).
//!
//! The update is split into drawing its random numbers ([`UpdateNoise::draw`]) and a
//! deterministic function of batch, noise and model ([`Learner::update_with_noise`]), so that an
//! independent implementation can be fed the very same numbers and compared term by term.

use crate::config::{AgentConfig, ModelConfig};
use crate::model::{
    ACTOR, AUX_CRITIC, BACKWARD, CRITIC, DISCRIMINATOR, FORWARD, FbCprAuxModel, Obs, TARGET_AUX_CRITIC,
    TARGET_BACKWARD, TARGET_CRITIC, TARGET_FORWARD, goal_input,
};
use crate::nn::sample_action;
use crate::optim::Adam;
use std::collections::BTreeMap;
use tch::{Device, Kind, Tensor};

/// A batch of online transitions (raw, unnormalised observations).
#[derive(Debug)]
pub struct TrainBatch {
    pub obs: Obs,
    pub action: Tensor,
    pub next_obs: Obs,
    /// `[N, 1]`, 1.0 where the next state is terminal.
    pub terminated: Tensor,
    /// The rollout z stored with the transition `[N, d]`.
    pub z: Tensor,
    /// Σ_k c_k r_k of the transition `[N, 1]` (before scale normalisation).
    pub aux_reward: Tensor,
}

/// A batch of expert slices: `batch / seq_length` slices of `seq_length` consecutive rows,
/// slice-major; only the goal groups are present.
#[derive(Debug)]
pub struct ExpertBatch {
    pub state: Tensor,
    pub privileged_state: Tensor,
    pub next_state: Tensor,
    pub next_privileged_state: Tensor,
}

/// Every random number one update uses.
#[derive(Debug)]
pub struct UpdateNoise {
    /// Per row 0 = goal z, 1 = expert z, 2 = uniform prior `[N]` (int64).
    pub mix_choice: Tensor,
    pub goal_perm: Tensor,
    pub expert_perm: Tensor,
    /// Standard normal `[N, d]`, projected into prior z.
    pub prior: Tensor,
    /// U(0,1) `[N, 1]`: a row takes the mixed z where this is ≤ relabel_ratio.
    pub relabel: Tensor,
    /// U(0,1) `[N, 1]`: interpolation weight of the gradient penalty.
    pub gp_alpha: Tensor,
    /// Actor noise (std-scaled, clipped to ±stddev_clip) `[N, A]` for each sampled action.
    pub fb_next_eps: Tensor,
    pub critic_next_eps: Tensor,
    pub aux_next_eps: Tensor,
    pub actor_eps: Tensor,
}

impl UpdateNoise {
    /// Draws from torch's generator on `device`.
    pub fn draw(agent: &AgentConfig, model: &ModelConfig, device: Device) -> Self {
        let n = agent.batch_size;
        let f = (Kind::Float, device);
        let probs = Tensor::from_slice(&[
            agent.train_goal_ratio,
            agent.expert_asm_ratio,
            (1.0 - agent.train_goal_ratio - agent.expert_asm_ratio).max(0.0),
        ])
        .to_kind(Kind::Float)
        .to_device(device);
        let eps =
            || (Tensor::randn([n, model.action_dim], f) * model.actor_std).clamp(-agent.stddev_clip, agent.stddev_clip);
        UpdateNoise {
            mix_choice: probs.multinomial(n, true),
            goal_perm: Tensor::randperm(n, (Kind::Int64, device)),
            expert_perm: Tensor::randperm(n, (Kind::Int64, device)),
            prior: Tensor::randn([n, model.z_dim], f),
            relabel: Tensor::rand([n, 1], f),
            gp_alpha: Tensor::rand([n, 1], f),
            fb_next_eps: eps(),
            critic_next_eps: eps(),
            aux_next_eps: eps(),
            actor_eps: eps(),
        }
    }

    /// The tensors by name (what the parity oracle reads).
    pub fn named(&self) -> Vec<(&'static str, &Tensor)> {
        vec![
            ("mix_choice", &self.mix_choice),
            ("goal_perm", &self.goal_perm),
            ("expert_perm", &self.expert_perm),
            ("prior", &self.prior),
            ("relabel", &self.relabel),
            ("gp_alpha", &self.gp_alpha),
            ("fb_next_eps", &self.fb_next_eps),
            ("critic_next_eps", &self.critic_next_eps),
            ("aux_next_eps", &self.aux_next_eps),
            ("actor_eps", &self.actor_eps),
        ]
    }
}

/// Scalars logged by one update (the §8 columns).
pub type UpdateMetrics = BTreeMap<&'static str, f64>;

/// Every key of [`UpdateMetrics`], in the order of the train log's columns.
pub const METRIC_NAMES: [&str; 32] = [
    "fb_loss",
    "fb_diag",
    "fb_offdiag",
    "orth_loss",
    "orth_loss_diag",
    "orth_loss_offdiag",
    "target_M",
    "M1",
    "F1",
    "B",
    "B_norm",
    "z_norm",
    "disc_loss",
    "disc_expert_loss",
    "disc_train_loss",
    "disc_wgan_gp_loss",
    "target_Q",
    "Q1",
    "mean_next_Q",
    "unc_Q",
    "critic_loss",
    "mean_disc_reward",
    "target_auxQ",
    "auxQ1",
    "mean_next_auxQ",
    "unc_auxQ",
    "aux_critic_loss",
    "mean_aux_reward",
    "actor_loss",
    "Q_discriminator",
    "Q_aux",
    "Q_fb",
];

/// The model, its six optimisers and the z buffer's producer side: everything an update touches.
#[derive(Debug)]
pub struct Learner {
    pub model: FbCprAuxModel,
    pub agent: AgentConfig,
    pub actor_opt: Adam,
    pub forward_opt: Adam,
    pub backward_opt: Adam,
    pub critic_opt: Adam,
    pub aux_critic_opt: Adam,
    pub discriminator_opt: Adam,
    /// Keep the gradients of the last update (tests and the parity oracle).
    pub capture_grads: bool,
    pub last_grads: BTreeMap<String, Tensor>,
}

/// Pessimistic ensemble reduction: mean − λ·Σ_{p≠q}|X_p − X_q| / (P² − P) over dim 0.
pub fn pessimistic(x: &Tensor, lambda: f64) -> Tensor {
    let p = x.size()[0];
    let mean = x.mean_dim(Some(&[0i64][..]), false, Kind::Float);
    if p < 2 || lambda == 0.0 {
        return mean;
    }
    let unc = (x.unsqueeze(0) - x.unsqueeze(1))
        .abs()
        .sum_dim_intlist(Some(&[0i64, 1i64][..]), false, Kind::Float)
        / ((p * p - p) as f64);
    mean - unc * lambda
}

/// 0.5·Σ_{i≠j} M_ij² / (N(N−1)) − mean_i M_ii, summed over a leading ensemble dim if present.
fn off_diag_loss(m: &Tensor) -> (Tensor, Tensor) {
    let n = *m.size().last().unwrap();
    let eye = Tensor::eye(n, (Kind::Float, m.device()));
    let off = (m * (-&eye + 1.0)).square().sum(Kind::Float) * (0.5 / (n * (n - 1)) as f64);
    let diag = m.diagonal(0, -2, -1);
    let lead = if m.dim() == 3 { m.size()[0] as f64 } else { 1.0 };
    (off, -diag.mean(Kind::Float) * lead)
}

pub use arena_torch::seed::derive_seed;

/// Logged scalars, kept on the device until the update ends (one transfer, no per-value sync).
#[derive(Default)]
struct Logged(Vec<(&'static str, Tensor)>);

impl Logged {
    fn insert(&mut self, name: &'static str, value: Tensor) {
        self.0.push((name, value.detach().to_kind(Kind::Float).reshape([1])));
    }

    fn into_metrics(self) -> UpdateMetrics {
        let values: Vec<Tensor> = self.0.iter().map(|(_, t)| t.shallow_clone()).collect();
        let host = Vec::<f32>::try_from(Tensor::cat(&values, 0).to_device(tch::Device::Cpu)).expect("f32 metrics");
        self.0
            .iter()
            .zip(host)
            .map(|((name, _), v)| (*name, v as f64))
            .collect()
    }
}

impl Learner {
    pub fn new(model: FbCprAuxModel, agent: AgentConfig) -> Self {
        let opt = |prefix: &str, lr: f64| Adam::new(model.store.trainable_under(prefix), lr);
        Learner {
            actor_opt: opt(ACTOR, agent.lr_actor),
            forward_opt: opt(FORWARD, agent.lr_f),
            backward_opt: opt(BACKWARD, agent.lr_b),
            critic_opt: opt(CRITIC, agent.lr_critic),
            aux_critic_opt: opt(AUX_CRITIC, agent.lr_aux_critic),
            discriminator_opt: opt(DISCRIMINATOR, agent.lr_discriminator),
            model,
            agent,
            capture_grads: false,
            last_grads: BTreeMap::new(),
        }
    }

    /// The optimisers with their checkpoint names.
    pub fn optimizers(&self) -> [(&'static str, &Adam); 6] {
        [
            ("actor", &self.actor_opt),
            ("forward", &self.forward_opt),
            ("backward", &self.backward_opt),
            ("critic", &self.critic_opt),
            ("aux_critic", &self.aux_critic_opt),
            ("discriminator", &self.discriminator_opt),
        ]
    }

    pub fn optimizers_mut(&mut self) -> [(&'static str, &mut Adam); 6] {
        [
            ("actor", &mut self.actor_opt),
            ("forward", &mut self.forward_opt),
            ("backward", &mut self.backward_opt),
            ("critic", &mut self.critic_opt),
            ("aux_critic", &mut self.aux_critic_opt),
            ("discriminator", &mut self.discriminator_opt),
        ]
    }

    /// Updates done so far (the actor's optimiser steps).
    pub fn updates(&self) -> u64 {
        self.actor_opt.step as u64
    }

    /// One update with noise drawn from torch's generator seeded by (`seed`, update count), so
    /// that a resumed run draws the same numbers without saving generator state.
    pub fn update(&mut self, train: &TrainBatch, expert: &ExpertBatch, seed: u64) -> (UpdateMetrics, Tensor) {
        tch::manual_seed(derive_seed(seed, self.updates()) as i64);
        let noise = UpdateNoise::draw(&self.agent, &self.model.config, self.model.device);
        self.update_with_noise(train, expert, &noise)
    }

    /// Gradients of `loss` w.r.t. the optimiser's parameters, then one Adam step.
    fn step(capture: bool, grads_out: &mut BTreeMap<String, Tensor>, opt: &mut Adam, loss: &Tensor, keep_graph: bool) {
        let grads = Tensor::run_backward(&[loss], opt.params(), keep_graph, false);
        if capture {
            for (name, g) in opt.names.iter().zip(&grads) {
                grads_out.insert(name.clone(), g.copy());
            }
        }
        opt.step(&grads);
    }

    /// One update; returns the logged scalars and the mixed z for the z buffer.
    pub fn update_with_noise(
        &mut self,
        train: &TrainBatch,
        expert: &ExpertBatch,
        noise: &UpdateNoise,
    ) -> (UpdateMetrics, Tensor) {
        let a = self.agent.clone();
        let capture = self.capture_grads;
        let mut grads = BTreeMap::new();
        let mut metrics = Logged::default();
        let n = a.batch_size;

        // Normaliser statistics: train obs, then train next obs; then normalise everything.
        self.model.update_normalizer(&train.obs);
        self.model.update_normalizer(&train.next_obs);
        let obs = self.model.normalize(&train.obs);
        let next_obs = self.model.normalize(&train.next_obs);
        let norms = &self.model.obs_normalizer;
        let expert_goal = goal_input(
            &norms.state.normalize(&expert.state),
            &norms.privileged_state.normalize(&expert.privileged_state),
        );
        let expert_next_goal = goal_input(
            &norms.state.normalize(&expert.next_state),
            &norms.privileged_state.normalize(&expert.next_privileged_state),
        );
        let (obs_c, next_obs_c) = (obs.critic_input(), next_obs.critic_input());
        let (obs_a, next_obs_a) = (obs.actor_input(), next_obs.actor_input());
        let (obs_g, next_obs_g) = (obs.goal_input(), next_obs.goal_input());
        let not_done = -&train.terminated + 1.0;
        let discount = &not_done * a.discount;

        // Expert z: mean of B over each slice's next observations, projected, repeated.
        let expert_z = tch::no_grad(|| {
            let b = self.model.backward_map.forward(&expert_next_goal);
            let d = b.size()[1];
            let z = self
                .model
                .project_z(&b.view([n / a.seq_length, a.seq_length, d]).mean_dim(
                    Some(&[1i64][..]),
                    false,
                    Kind::Float,
                ));
            z.repeat_interleave_self_int(a.seq_length, 0, None)
        });

        // Discriminator: expert (obs, z_E) against train (obs, stored z), gradient penalty.
        let d = &self.model.discriminator;
        let expert_logits = d.logits(&expert_goal, &expert_z);
        let train_logits = d.logits(&obs_g, &train.z);
        let expert_loss = -expert_logits.log_sigmoid().mean(Kind::Float);
        let train_loss = train_logits.softplus().mean(Kind::Float);
        let alpha = &noise.gp_alpha;
        let inter_goal = (alpha * &expert_goal + (-alpha + 1.0) * &obs_g)
            .detach()
            .set_requires_grad(true);
        let inter_z = (alpha * &expert_z + (-alpha + 1.0) * &train.z)
            .detach()
            .set_requires_grad(true);
        let inter_logits = d.logits(&inter_goal, &inter_z);
        let g = Tensor::run_backward(&[inter_logits.sum(Kind::Float)], &[&inter_goal, &inter_z], true, true);
        let grad_norm = Tensor::cat(&g, 1).norm_scalaropt_dim(2.0, [1], false);
        let gp = (grad_norm - 1.0).square().mean(Kind::Float);
        let disc_loss = &expert_loss + &train_loss + &gp * a.grad_penalty_discriminator;
        Self::step(capture, &mut grads, &mut self.discriminator_opt, &disc_loss, false);
        metrics.insert("disc_loss", disc_loss);
        metrics.insert("disc_expert_loss", expert_loss);
        metrics.insert("disc_train_loss", train_loss);
        metrics.insert("disc_wgan_gp_loss", gp);

        // Mixed z: goal / expert / prior per row; then relabel 80 % of the transitions.
        let mixed_z = tch::no_grad(|| {
            let prior = self.model.prior_z(&noise.prior);
            let goals = self.model.project_z(
                &self
                    .model
                    .backward_map
                    .forward(&next_obs_g.index_select(0, &noise.goal_perm)),
            );
            let experts = expert_z.index_select(0, &noise.expert_perm);
            let choice = noise.mix_choice.unsqueeze(1);
            let z = prior.where_self(&choice.ne(0), &goals);
            experts.where_self(&choice.eq(1), &z)
        });
        let z = mixed_z.where_self(&noise.relabel.le(a.relabel_ratio), &train.z);

        // The three targets sample a' around the same μ(s', z): the actor changes only at the end.
        let next_mean = tch::no_grad(|| self.model.actor.mean(&next_obs_a, &z));

        // FB loss and orthonormality of B.
        let (target_m, next_action_fb) = tch::no_grad(|| {
            let next_action = sample_action(&next_mean, &noise.fb_next_eps);
            let tf = self.model.target_forward_map.forward(&next_obs_c, &z, &next_action);
            let tb = self.model.target_backward_map.forward(&next_obs_g);
            let tm = tf.matmul(&tb.tr());
            (pessimistic(&tm, a.fb_pessimism), next_action)
        });
        let _ = next_action_fb;
        let f = self.model.forward_map.forward(&obs_c, &z, &train.action);
        let b = self.model.backward_map.forward(&next_obs_g);
        let m = f.matmul(&b.tr());
        let diff = &m - &discount * &target_m;
        let (fb_offdiag, fb_diag) = off_diag_loss(&diff);
        let cov = b.matmul(&b.tr());
        let (orth_offdiag, orth_diag) = off_diag_loss(&cov);
        let fb_loss = &fb_offdiag + &fb_diag + (&orth_offdiag + &orth_diag) * a.ortho_coef;
        let mut fb_params: Vec<Tensor> = self.forward_opt.params().iter().map(Tensor::shallow_clone).collect();
        fb_params.extend(self.backward_opt.params().iter().map(Tensor::shallow_clone));
        let fb_grads = Tensor::run_backward(&[&fb_loss], &fb_params, false, false);
        let (f_grads, b_grads) = fb_grads.split_at(self.forward_opt.params().len());
        if capture {
            for (name, g) in self
                .forward_opt
                .names
                .iter()
                .chain(&self.backward_opt.names)
                .zip(&fb_grads)
            {
                grads.insert(name.clone(), g.copy());
            }
        }
        self.forward_opt.step(f_grads);
        self.backward_opt.step(b_grads);
        metrics.insert("fb_loss", fb_loss);
        metrics.insert("fb_diag", fb_diag);
        metrics.insert("fb_offdiag", fb_offdiag);
        metrics.insert("orth_loss", &orth_offdiag + &orth_diag);
        metrics.insert("orth_loss_diag", orth_diag);
        metrics.insert("orth_loss_offdiag", orth_offdiag);
        metrics.insert("target_M", target_m.mean(Kind::Float));
        metrics.insert("M1", m.get(0).mean(Kind::Float));
        metrics.insert("F1", f.get(0).mean(Kind::Float));
        metrics.insert("B", b.mean(Kind::Float));
        metrics.insert("B_norm", b.norm_scalaropt_dim(2.0, [-1], false).mean(Kind::Float));
        metrics.insert("z_norm", z.norm_scalaropt_dim(2.0, [-1], false).mean(Kind::Float));

        // Discriminator-reward critic Q_D (reward from the updated discriminator, relabelled z).
        let (critic_target, disc_reward, next_q_mean, next_q_unc) = tch::no_grad(|| {
            let reward = self.model.discriminator.reward(&obs_g, &z);
            let next_action = sample_action(&next_mean, &noise.critic_next_eps);
            let next_q = self.model.target_critic.forward(&next_obs_c, &z, &next_action);
            let next_v = pessimistic(&next_q, a.critic_pessimism);
            let target = &reward + &discount * &next_v;
            (
                target,
                reward,
                next_q.mean(Kind::Float),
                pessimistic(&next_q, 1.0) - next_q.mean_dim(Some(&[0i64][..]), false, Kind::Float),
            )
        });
        let q = self.model.critic.forward(&obs_c, &z, &train.action);
        let critic_loss = (&q - &critic_target)
            .square()
            .mean_dim(Some(&[1i64, 2i64][..]), false, Kind::Float)
            .sum(Kind::Float)
            * 0.5;
        Self::step(capture, &mut grads, &mut self.critic_opt, &critic_loss, false);
        metrics.insert("critic_loss", critic_loss);
        metrics.insert("target_Q", critic_target.mean(Kind::Float));
        metrics.insert("Q1", q.get(0).mean(Kind::Float));
        metrics.insert("mean_next_Q", next_q_mean);
        metrics.insert("unc_Q", (-next_q_unc).mean(Kind::Float));
        metrics.insert("mean_disc_reward", disc_reward.mean(Kind::Float));

        // Aux critic on the scale-normalised aux reward.
        let aux_reward = self.model.aux_reward_normalizer.update_and_normalize(&train.aux_reward);
        let (aux_target, next_aux_mean, next_aux_unc) = tch::no_grad(|| {
            let next_action = sample_action(&next_mean, &noise.aux_next_eps);
            let next_q = self.model.target_aux_critic.forward(&next_obs_c, &z, &next_action);
            let next_v = pessimistic(&next_q, a.aux_critic_pessimism);
            let target = &aux_reward + &discount * &next_v;
            (
                target,
                next_q.mean(Kind::Float),
                pessimistic(&next_q, 1.0) - next_q.mean_dim(Some(&[0i64][..]), false, Kind::Float),
            )
        });
        let q_aux = self.model.aux_critic.forward(&obs_c, &z, &train.action);
        let aux_loss = (&q_aux - &aux_target)
            .square()
            .mean_dim(Some(&[1i64, 2i64][..]), false, Kind::Float)
            .sum(Kind::Float)
            * 0.5;
        Self::step(capture, &mut grads, &mut self.aux_critic_opt, &aux_loss, false);
        metrics.insert("aux_critic_loss", aux_loss);
        metrics.insert("target_auxQ", aux_target.mean(Kind::Float));
        metrics.insert("auxQ1", q_aux.get(0).mean(Kind::Float));
        metrics.insert("mean_next_auxQ", next_aux_mean);
        metrics.insert("unc_auxQ", (-next_aux_unc).mean(Kind::Float));
        metrics.insert("mean_aux_reward", train.aux_reward.mean(Kind::Float));

        // Actor: maximise F·z, regularised by the two critics scaled by |Q_fb|.
        let action = sample_action(&self.model.actor.mean(&obs_a, &z), &noise.actor_eps);
        let fz = (self.model.forward_map.forward(&obs_c, &z, &action) * &z).sum_dim_intlist(
            Some(&[-1i64][..]),
            false,
            Kind::Float,
        );
        let q_fb = pessimistic(&fz, a.actor_pessimism);
        let q_d = pessimistic(&self.model.critic.forward(&obs_c, &z, &action), a.actor_pessimism);
        let q_x = pessimistic(&self.model.aux_critic.forward(&obs_c, &z, &action), a.actor_pessimism);
        let weight = if a.scale_reg {
            q_fb.abs().mean(Kind::Float).detach()
        } else {
            Tensor::from(1.0f32).to_device(q_fb.device())
        };
        let actor_loss = -q_fb.mean(Kind::Float)
            - &weight * q_d.mean(Kind::Float) * a.reg_coeff
            - &weight * q_x.mean(Kind::Float) * a.reg_coeff_aux;
        Self::step(capture, &mut grads, &mut self.actor_opt, &actor_loss, false);
        metrics.insert("actor_loss", actor_loss);
        metrics.insert("Q_fb", q_fb.mean(Kind::Float));
        metrics.insert("Q_discriminator", q_d.mean(Kind::Float));
        metrics.insert("Q_aux", q_x.mean(Kind::Float));

        // Targets.
        self.model.polyak(FORWARD, TARGET_FORWARD, a.fb_target_tau);
        self.model.polyak(BACKWARD, TARGET_BACKWARD, a.fb_target_tau);
        self.model.polyak(CRITIC, TARGET_CRITIC, a.critic_target_tau);
        self.model.polyak(AUX_CRITIC, TARGET_AUX_CRITIC, a.critic_target_tau);

        if capture {
            self.last_grads = grads;
        }
        (metrics.into_metrics(), mixed_z)
    }
}
