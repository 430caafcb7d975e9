//! The FB-CPR-Aux model: every network, its target copy and the normalisers, registered in one
//! [`ParamStore`] under the checkpoint names of BFM_ZERO_FACTS §5.2.

use crate::config::ModelConfig;
use crate::nn::{Actor, BackwardMap, Discriminator, ForwardMap, sphere_norm};
use crate::normalizer::{AuxRewardNormalizer, ObsNormalizer, RunningNorm};
use crate::params::{ParamStore, Scope};
use tch::{Device, Tensor};

/// Checkpoint prefixes of the trained networks, and of their target copies.
pub const ACTOR: &str = "_actor.";
pub const FORWARD: &str = "_forward_map.";
pub const BACKWARD: &str = "_backward_map.";
pub const CRITIC: &str = "_critic.";
pub const AUX_CRITIC: &str = "_aux_critic.";
pub const DISCRIMINATOR: &str = "_discriminator.";
pub const TARGET_FORWARD: &str = "_target_forward_map.";
pub const TARGET_BACKWARD: &str = "_target_backward_map.";
pub const TARGET_CRITIC: &str = "_target_critic.";
pub const TARGET_AUX_CRITIC: &str = "_target_aux_critic.";
/// (online, target) pairs that Polyak averaging links.
pub const TARGET_PAIRS: [(&str, &str); 4] = [
    (FORWARD, TARGET_FORWARD),
    (BACKWARD, TARGET_BACKWARD),
    (CRITIC, TARGET_CRITIC),
    (AUX_CRITIC, TARGET_AUX_CRITIC),
];

/// Normalised observation groups of a batch `[N, ·]`.
#[derive(Debug)]
pub struct Obs {
    pub state: Tensor,
    pub privileged_state: Tensor,
    pub last_action: Tensor,
    pub history_actor: Tensor,
}

impl Obs {
    pub fn actor_input(&self) -> Tensor {
        Tensor::cat(&[&self.state, &self.last_action, &self.history_actor], -1)
    }
    pub fn critic_input(&self) -> Tensor {
        Tensor::cat(
            &[
                &self.state,
                &self.privileged_state,
                &self.last_action,
                &self.history_actor,
            ],
            -1,
        )
    }
    pub fn goal_input(&self) -> Tensor {
        goal_input(&self.state, &self.privileged_state)
    }
    pub fn shallow_clone(&self) -> Obs {
        Obs {
            state: self.state.shallow_clone(),
            privileged_state: self.privileged_state.shallow_clone(),
            last_action: self.last_action.shallow_clone(),
            history_actor: self.history_actor.shallow_clone(),
        }
    }
}

/// A checkpoint prefix without its trailing dot, as a scope root.
fn prefix(p: &str) -> &str {
    p.trim_end_matches('.')
}

/// B and D read state | privileged_state.
pub fn goal_input(state: &Tensor, privileged_state: &Tensor) -> Tensor {
    Tensor::cat(&[state, privileged_state], -1)
}

#[derive(Debug)]
pub struct FbCprAuxModel {
    pub config: ModelConfig,
    pub obs_norm_momentum: f64,
    pub aux_reward_ema: f64,
    pub device: Device,
    pub store: ParamStore,
    pub actor: Actor,
    pub forward_map: ForwardMap,
    pub backward_map: BackwardMap,
    pub critic: ForwardMap,
    pub aux_critic: ForwardMap,
    pub discriminator: Discriminator,
    pub target_forward_map: ForwardMap,
    pub target_backward_map: BackwardMap,
    pub target_critic: ForwardMap,
    pub target_aux_critic: ForwardMap,
    pub obs_normalizer: ObsNormalizer,
    pub aux_reward_normalizer: AuxRewardNormalizer,
}

impl FbCprAuxModel {
    /// A freshly initialised model (orthogonal weights from torch's generator: seed it first
    /// with `tch::manual_seed` for a reproducible init); targets start as copies.
    pub fn new(config: &ModelConfig, obs_norm_momentum: f64, aux_reward_ema: f64, device: Device) -> Self {
        let model = Self::build(config, obs_norm_momentum, aux_reward_ema, device, None);
        model.copy_targets();
        model
    }

    /// A second handle on this model: every tensor shared, nothing copied. It can move to
    /// another thread (an agent) while this one stays put.
    pub fn share(&self) -> Self {
        Self::build(
            &self.config,
            self.obs_norm_momentum,
            self.aux_reward_ema,
            self.device,
            Some(&self.store),
        )
    }

    fn build(
        config: &ModelConfig,
        obs_norm_momentum: f64,
        aux_reward_ema: f64,
        device: Device,
        source: Option<&ParamStore>,
    ) -> Self {
        let c = config;
        let (obs, z, a) = (c.obs.critic(), c.z_dim, c.action_dim);
        let mut store = ParamStore::new();
        let actor = Actor::new(
            &mut Scope::shared(&mut store, source, prefix(ACTOR), device, true),
            c.obs.actor(),
            z,
            a,
            c.actor,
        );
        let forward_map = ForwardMap::new(
            &mut Scope::shared(&mut store, source, prefix(FORWARD), device, true),
            obs,
            z,
            a,
            z,
            c.forward,
        );
        let backward_map = BackwardMap::new(
            &mut Scope::shared(&mut store, source, prefix(BACKWARD), device, true),
            c.obs.goal(),
            z,
            c.backward,
        );
        let critic = ForwardMap::new(
            &mut Scope::shared(&mut store, source, prefix(CRITIC), device, true),
            obs,
            z,
            a,
            1,
            c.critic,
        );
        let aux_critic = ForwardMap::new(
            &mut Scope::shared(&mut store, source, prefix(AUX_CRITIC), device, true),
            obs,
            z,
            a,
            1,
            c.aux_critic,
        );
        let discriminator = Discriminator::new(
            &mut Scope::shared(&mut store, source, prefix(DISCRIMINATOR), device, true),
            c.obs.goal(),
            z,
            c.discriminator,
        );
        let target_forward_map = ForwardMap::new(
            &mut Scope::shared(&mut store, source, prefix(TARGET_FORWARD), device, false),
            obs,
            z,
            a,
            z,
            c.forward,
        );
        let target_backward_map = BackwardMap::new(
            &mut Scope::shared(&mut store, source, prefix(TARGET_BACKWARD), device, false),
            c.obs.goal(),
            z,
            c.backward,
        );
        let target_critic = ForwardMap::new(
            &mut Scope::shared(&mut store, source, prefix(TARGET_CRITIC), device, false),
            obs,
            z,
            a,
            1,
            c.critic,
        );
        let target_aux_critic = ForwardMap::new(
            &mut Scope::shared(&mut store, source, prefix(TARGET_AUX_CRITIC), device, false),
            obs,
            z,
            a,
            1,
            c.aux_critic,
        );
        let mut norms = Scope::shared(&mut store, source, "_obs_normalizer._normalizers", device, false);
        let obs_normalizer = ObsNormalizer {
            state: RunningNorm::new(&mut norms.sub("state"), c.obs.state, obs_norm_momentum),
            privileged_state: RunningNorm::new(
                &mut norms.sub("privileged_state"),
                c.obs.privileged_state,
                obs_norm_momentum,
            ),
            last_action: RunningNorm::new(&mut norms.sub("last_action"), c.obs.last_action, obs_norm_momentum),
            history_actor: RunningNorm::new(&mut norms.sub("history_actor"), c.obs.history_actor, obs_norm_momentum),
        };
        let aux_reward_normalizer = AuxRewardNormalizer::new(
            &mut Scope::shared(&mut store, source, "_aux_reward_normalizer", device, false),
            aux_reward_ema,
        );
        FbCprAuxModel {
            config: config.clone(),
            obs_norm_momentum,
            aux_reward_ema,
            device,
            store,
            actor,
            forward_map,
            backward_map,
            critic,
            aux_critic,
            discriminator,
            target_forward_map,
            target_backward_map,
            target_critic,
            target_aux_critic,
            obs_normalizer,
            aux_reward_normalizer,
        }
    }

    /// Sets every target network equal to its online network.
    pub fn copy_targets(&self) {
        for (online, target) in TARGET_PAIRS {
            self.copy_target(online, target);
        }
    }

    /// Sets one target network equal to its online network.
    pub fn copy_target(&self, online: &str, target: &str) {
        self.for_each_target(online, target, |t, online| {
            t.copy_(online);
        });
    }

    /// θ̄ ← (1 − τ)θ̄ + τθ for one (online, target) pair.
    pub fn polyak(&self, online: &str, target: &str, tau: f64) {
        self.for_each_target(online, target, |t, online| {
            let _ = t.g_mul_scalar_(1.0 - tau);
            let _ = t.g_add_(&(online * tau));
        });
    }

    /// Calls `f(target tensor, online tensor)` for every tensor of one (online, target) pair,
    /// without gradient tracking.
    fn for_each_target(&self, online: &str, target: &str, mut f: impl FnMut(&mut Tensor, &Tensor)) {
        let _guard = tch::no_grad_guard();
        for (name, tensor) in self.store.all_under(online) {
            let target_name = format!("{target}{}", &name[online.len()..]);
            let mut t = self
                .store
                .get(&target_name)
                .expect("target has the online names")
                .shallow_clone();
            f(&mut t, &tensor);
        }
    }

    /// Normalises raw observation groups with the running statistics.
    pub fn normalize(&self, raw: &Obs) -> Obs {
        let n = &self.obs_normalizer;
        Obs {
            state: n.state.normalize(&raw.state),
            privileged_state: n.privileged_state.normalize(&raw.privileged_state),
            last_action: n.last_action.normalize(&raw.last_action),
            history_actor: n.history_actor.normalize(&raw.history_actor),
        }
    }

    /// Folds a raw batch into the running statistics (training only).
    pub fn update_normalizer(&mut self, raw: &Obs) {
        let n = &mut self.obs_normalizer;
        n.state.update(&raw.state);
        n.privileged_state.update(&raw.privileged_state);
        n.last_action.update(&raw.last_action);
        n.history_actor.update(&raw.history_actor);
    }

    /// Projects z onto the sphere of radius √d when `norm_z` is on.
    pub fn project_z(&self, z: &Tensor) -> Tensor {
        if self.config.norm_z {
            sphere_norm(z)
        } else {
            z.shallow_clone()
        }
    }

    /// z from the uniform prior: projected standard normal draws `[n, d]` supplied by the caller.
    pub fn prior_z(&self, gaussian: &Tensor) -> Tensor {
        self.project_z(gaussian)
    }

    /// Deterministic action μ(s, z) for raw observations (inference).
    pub fn act_mean(&self, raw: &Obs, z: &Tensor) -> Tensor {
        let _guard = tch::no_grad_guard();
        self.actor.mean(&self.normalize(raw).actor_input(), z)
    }

    /// z = project(B(goal)) for raw goal groups (tracking and goal inference, §6).
    pub fn backward_z(&self, state: &Tensor, privileged_state: &Tensor) -> Tensor {
        let _guard = tch::no_grad_guard();
        let n = &self.obs_normalizer;
        let goal = goal_input(
            &n.state.normalize(state),
            &n.privileged_state.normalize(privileged_state),
        );
        self.project_z(&self.backward_map.forward(&goal))
    }
}
