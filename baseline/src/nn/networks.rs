//! The five networks of FB-CPR-Aux (BFM_ZERO_FACTS §5.2). Inputs are already normalised and
//! concatenated in the order of §2.4; z is appended (F, critics, actor) or prepended (D).

use super::layers::{Dense, Norm, Sequence, sphere_norm};
use crate::config::{ActorArch, BackwardArch, DiscriminatorArch, ResidualArch};
use arena_torch::params::Scope;
use tch::Tensor;

/// Forward map F(s, a, z) → R^out, and with out = 1 the critics Q_D and Q_aux (same class,
/// same parameter names: `embed_z`, `embed_sa`, `Fs`). Output `[P, N, out]`.
#[derive(Debug)]
pub struct ForwardMap {
    embed_z: Sequence,
    embed_sa: Sequence,
    trunk: Sequence,
    ensemble: i64,
}

impl ForwardMap {
    pub fn new(s: &mut Scope, obs_dim: i64, z_dim: i64, action_dim: i64, output: i64, arch: ResidualArch) -> Self {
        let p = Some(arch.ensemble);
        let h = arch.hidden_dim;
        // The residual forward map uses hidden_layers for its embeddings too (§10 quirk 5).
        let embed_z = Sequence::res_embed(&mut s.sub("embed_z"), obs_dim + z_dim, h, arch.hidden_layers, p);
        let embed_sa = Sequence::res_embed(&mut s.sub("embed_sa"), obs_dim + action_dim, h, arch.hidden_layers, p);
        let trunk = Sequence::res_trunk(&mut s.sub("Fs"), h, arch.hidden_layers, output, p);
        ForwardMap {
            embed_z,
            embed_sa,
            trunk,
            ensemble: arch.ensemble,
        }
    }

    /// `obs` `[N, obs]`, `z` `[N, d]`, `action` `[N, A]` → `[P, N, out]`.
    ///
    /// The inputs stay `[N, ·]`: the first LayerNorm normalises them once and its per-member
    /// affine parameters `[P, 1, ·]` broadcast the result to `[P, N, ·]` (the same values as
    /// normalising P copies, at 1/P of the cost on the widest layer).
    pub fn forward(&self, obs: &Tensor, z: &Tensor, action: &Tensor) -> Tensor {
        let e_z = self.embed_z.forward(&Tensor::cat(&[obs, z], -1));
        let e_sa = self.embed_sa.forward(&Tensor::cat(&[obs, action], -1));
        let out = self.trunk.forward(&Tensor::cat(&[e_sa, e_z], -1));
        debug_assert_eq!(out.size()[0], self.ensemble);
        out
    }
}

/// Backward map B(s) = SphereNorm(Linear(tanh(LN(Linear(s))))) → ‖B‖ = √d.
#[derive(Debug)]
pub struct BackwardMap {
    first: Dense,
    norm: Norm,
    last: Dense,
}

impl BackwardMap {
    pub fn new(s: &mut Scope, goal_dim: i64, z_dim: i64, arch: BackwardArch) -> Self {
        let mut net = s.sub("net");
        let first = Dense::new(&mut net.sub(0), goal_dim, arch.hidden_dim, None);
        let norm = Norm::new(&mut net.sub(1), arch.hidden_dim, None);
        let last = Dense::new(&mut net.sub(3), arch.hidden_dim, z_dim, None);
        BackwardMap { first, norm, last }
    }

    pub fn forward(&self, goal: &Tensor) -> Tensor {
        sphere_norm(&self.last.forward(&self.norm.forward(&self.first.forward(goal)).tanh()))
    }
}

/// Actor π(s, z): the tanh mean of a truncated normal with fixed std.
#[derive(Debug)]
pub struct Actor {
    embed_z: Sequence,
    embed_s: Sequence,
    policy: Sequence,
}

impl Actor {
    pub fn new(s: &mut Scope, obs_dim: i64, z_dim: i64, action_dim: i64, arch: ActorArch) -> Self {
        let h = arch.hidden_dim;
        let embed_z = Sequence::res_embed(&mut s.sub("embed_z"), obs_dim + z_dim, h, arch.embedding_layers, None);
        let embed_s = Sequence::res_embed(&mut s.sub("embed_s"), obs_dim, h, arch.embedding_layers, None);
        let policy = Sequence::res_trunk(&mut s.sub("policy"), h, arch.hidden_layers, action_dim, None);
        Actor {
            embed_z,
            embed_s,
            policy,
        }
    }

    /// The mean action μ ∈ (−1, 1)^A.
    pub fn mean(&self, obs: &Tensor, z: &Tensor) -> Tensor {
        let e_z = self.embed_z.forward(&Tensor::cat(&[obs, z], -1));
        let e_s = self.embed_s.forward(obs);
        self.policy.forward(&Tensor::cat(&[e_s, e_z], -1)).tanh()
    }
}

/// A sample of the truncated normal around `mean` from pre-drawn noise `eps` (already scaled by
/// the std and clipped): clamped to (−1, 1) with a straight-through gradient.
pub fn sample_action(mean: &Tensor, eps: &Tensor) -> Tensor {
    const EDGE: f64 = 1e-6;
    let x = mean + eps;
    let clamped = x.clamp(-1.0 + EDGE, 1.0 - EDGE).detach();
    &x - x.detach() + clamped
}

/// Discriminator D(s, z) → logit; input `[z, goal obs]` (z first).
#[derive(Debug)]
pub struct Discriminator {
    first: Dense,
    norm: Norm,
    hidden: Vec<Dense>,
    last: Dense,
}

impl Discriminator {
    pub fn new(s: &mut Scope, goal_dim: i64, z_dim: i64, arch: DiscriminatorArch) -> Self {
        let mut trunk = s.sub("trunk");
        let h = arch.hidden_dim;
        let first = Dense::new(&mut trunk.sub(0), z_dim + goal_dim, h, None);
        let norm = Norm::new(&mut trunk.sub(1), h, None);
        let hidden = (0..arch.hidden_layers)
            .map(|k| Dense::new(&mut trunk.sub(3 + 2 * k), h, h, None))
            .collect();
        let last = Dense::new(&mut trunk.sub(3 + 2 * arch.hidden_layers), h, 1, None);
        Discriminator {
            first,
            norm,
            hidden,
            last,
        }
    }

    pub fn logits(&self, goal: &Tensor, z: &Tensor) -> Tensor {
        let mut y = self
            .norm
            .forward(&self.first.forward(&Tensor::cat(&[z, goal], -1)))
            .tanh();
        for layer in &self.hidden {
            y = layer.forward(&y).relu();
        }
        self.last.forward(&y)
    }

    /// r_D = log σ(l) − log(1 − σ(l)) with σ clamped to [1e-7, 1 − 1e-7].
    pub fn reward(&self, goal: &Tensor, z: &Tensor) -> Tensor {
        let s = self.logits(goal, z).sigmoid().clamp(1e-7, 1.0 - 1e-7);
        s.log() - (-&s + 1.0).log()
    }
}
