#!/usr/bin/env python3
"""Independent test oracle for one FB-CPR-Aux agent update (BFM-Zero).

This is a TEST ORACLE, not shipped code.  It was written only from the fact
sheet `/work/shared/reference/BFM_ZERO_FACTS.md` (sections 2.4, 2.5, 5.1-5.7)
and the file interface below, without looking at the Rust (tch)
implementation it checks.  Everything is float32 on the CPU.

Usage
-----
    python fb_cpr_aux_oracle.py DIR [--tol 1e-5] [--json]

DIR holds what the Rust side wrote:

    config.json          {"model": {...}, "agent": {...}}
    init.safetensors     every model tensor before the update (checkpoint names)
    batch.safetensors    raw train/expert batch and the update's random numbers
    outputs.safetensors  forward outputs with the initial parameters
    grads.safetensors    grad.<param> used by each optimiser step
    after.safetensors    every tensor of init.safetensors after the update
    metrics.json         loss scalars

The oracle rebuilds every network as torch.nn modules, loads the initial
tensors by name, runs ONE complete update with the supplied noise and
compares everything with the normwise relative error

    err = max|ours - theirs| / max(max|theirs|, 1e-12).

Exit status: 0 if every error <= tol, 1 otherwise, 2 on bad input (missing
file, missing/unexpected tensor, wrong shape).

--after-from-their-grads: the first step of a fresh Adam is ~lr*sign(g), so an
element whose true gradient is at fp32 round-off level can legitimately move by
2*lr (relative error ~1e-3 on that parameter tensor).  With this flag the
after.* values of the six online nets (and their targets) are recomputed from
the Rust gradients, which checks the optimiser/Polyak step on its own while the
grad.* comparison still checks the gradients.

Readings taken where the fact sheet leaves room:
- metric fb_loss = the whole F/B loss L_fb + ortho_coef*L_ortho; fb_diag =
  -sum_p mean_i D_p[i,i]; fb_offdiag = sum_p 0.5*sum_{i!=j} D_p^2/(N(N-1));
  orth_loss = L_ortho without ortho_coef (orth_loss_diag / orth_loss_offdiag
  are also compared when metrics.json has them).
- disc_loss includes grad_penalty*GP; disc_wgan_gp_loss is GP unscaled;
  disc_expert_loss = mean(-log sigmoid(l_E)); disc_train_loss = mean(softplus(l_T)).
- Q_fb / Q_discriminator / Q_aux = batch means of the pessimistic values used
  in the actor loss (actor_pessimism for all three, updated F and critics).
- Expert z and the goal z of the mix are computed without gradient from the
  online B before the FB step; the discriminator sees z_E as a constant.
- The discriminator is trained on expert *current* obs with z_E and train
  *current* obs with the stored train.z; GP interpolates normalised goals and z.
- B ends in SphereNorm only when norm_z is true (always true here).
- The three next actions a' come from the online actor before its update.
- The aux-reward debias uses 1 - tau**counter with the incremented counter.
"""

import argparse
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

OBS_KEYS = ("state", "privileged_state", "last_action", "history_actor")
ACTOR_KEYS = ("state", "last_action", "history_actor")   # fact sheet 2.4
CRITIC_KEYS = OBS_KEYS                                    # F, Q_D, Q_aux
GOAL_KEYS = ("state", "privileged_state")                 # B and D

LN_EPS = 1e-5
BN_EPS = 1e-5
ACTION_EPS = 1e-6
ONLINE_NETS = ("_forward_map", "_backward_map", "_discriminator",
               "_critic", "_aux_critic", "_actor")
REQUIRED_METRICS = (
    "fb_loss", "fb_diag", "fb_offdiag", "orth_loss",
    "disc_loss", "disc_expert_loss", "disc_train_loss", "disc_wgan_gp_loss",
    "critic_loss", "aux_critic_loss", "actor_loss",
    "Q_fb", "Q_discriminator", "Q_aux",
)


class BadInput(Exception):
    """Missing file / tensor or inconsistent shapes: exit status 2."""


# --------------------------------------------------------------------------
# Building blocks (fact sheet 5.1)
# --------------------------------------------------------------------------

class ParallelLinear(nn.Module):
    """Ensemble Linear: weight [P,in,out], bias [P,1,out]; y = bias + x @ W."""

    def __init__(self, n_in, n_out, ensemble):
        super().__init__()
        self.ensemble = ensemble
        self.weight = nn.Parameter(torch.zeros(ensemble, n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(ensemble, 1, n_out))

    def forward(self, x):
        if x.dim() == 2:                     # broadcast [N,in] -> [P,N,in]
            x = x.unsqueeze(0).expand(self.ensemble, -1, -1)
        return torch.baddbmm(self.bias, x, self.weight)


class ParallelLayerNorm(nn.Module):
    """Ensemble LayerNorm: normalise without affine, then *w[P,1,d] + b[P,1,d]."""

    def __init__(self, dim, ensemble):
        super().__init__()
        self.dim = dim
        self.weight = nn.Parameter(torch.ones(ensemble, 1, dim))
        self.bias = nn.Parameter(torch.zeros(ensemble, 1, dim))

    def forward(self, x):
        return F.layer_norm(x, (self.dim,), eps=LN_EPS) * self.weight + self.bias


class Mish(nn.Module):
    def forward(self, x):
        return F.mish(x)                     # x * tanh(softplus(x))


def make_linear(n_in, n_out, ensemble):
    return nn.Linear(n_in, n_out) if ensemble is None else ParallelLinear(n_in, n_out, ensemble)


def make_layernorm(dim, ensemble):
    return nn.LayerNorm(dim, eps=LN_EPS) if ensemble is None else ParallelLayerNorm(dim, ensemble)


class Block(nn.Module):
    """LN(i) -> Linear(i,o) -> (Mish if act).  mlp.0 = LN, mlp.1 = Linear."""

    def __init__(self, n_in, n_out, act, ensemble=None):
        super().__init__()
        layers = [make_layernorm(n_in, ensemble), make_linear(n_in, n_out, ensemble)]
        if act:
            layers.append(Mish())
        self.mlp = nn.Sequential(*layers)

    def forward(self, x):
        return self.mlp(x)


class ResBlock(nn.Module):
    """x + Mish(Linear(LN(x)))."""

    def __init__(self, dim, ensemble=None):
        super().__init__()
        self.mlp = nn.Sequential(make_layernorm(dim, ensemble),
                                 make_linear(dim, dim, ensemble), Mish())

    def forward(self, x):
        return x + self.mlp(x)


def res_embed(n_in, hidden, layers, ensemble=None):
    """ResEmbed(i, h, L): Block(i->h, Mish), (L-2) x ResBlock(h), Block(h->h/2, Mish)."""
    if layers < 2:
        raise BadInput(f"a residual embedding needs at least 2 layers, got {layers}")
    if hidden % 2:
        raise BadInput(f"hidden_dim must be even (embeddings output hidden/2), got {hidden}")
    mods = [Block(n_in, hidden, True, ensemble)]
    mods += [ResBlock(hidden, ensemble) for _ in range(layers - 2)]
    mods.append(Block(hidden, hidden // 2, True, ensemble))
    return nn.Sequential(*mods)


def res_trunk(hidden, layers, n_out, ensemble=None):
    """layers x ResBlock(h) then Block(h->out, no activation)."""
    mods = [ResBlock(hidden, ensemble) for _ in range(layers)]
    mods.append(Block(hidden, n_out, False, ensemble))
    return nn.Sequential(*mods)


def sphere_norm(x):
    """sqrt(dim) * x / ||x||  (L2 eps 1e-12)."""
    return math.sqrt(x.shape[-1]) * F.normalize(x, dim=-1, eps=1e-12)


# --------------------------------------------------------------------------
# Networks (fact sheet 5.2)
# --------------------------------------------------------------------------

class ForwardLike(nn.Module):
    """Residual forward map; also the critics (output dim 1).

    e_z = embed_z([obs, z]); e_sa = embed_sa([obs, a]); out = Fs([e_sa, e_z]).
    Outputs [P, N, out]."""

    def __init__(self, obs_dim, z_dim, action_dim, hidden, layers, ensemble, n_out):
        super().__init__()
        self.embed_z = res_embed(obs_dim + z_dim, hidden, layers, ensemble)
        self.embed_sa = res_embed(obs_dim + action_dim, hidden, layers, ensemble)
        self.Fs = res_trunk(hidden, layers, n_out, ensemble)

    def forward(self, obs, z, action):
        e_z = self.embed_z(torch.cat([obs, z], dim=-1))
        e_sa = self.embed_sa(torch.cat([obs, action], dim=-1))
        return self.Fs(torch.cat([e_sa, e_z], dim=-1))


class Actor(nn.Module):
    """mu = tanh(policy([embed_s(obs), embed_z([obs, z])]))."""

    def __init__(self, obs_dim, z_dim, action_dim, hidden, hidden_layers, embedding_layers):
        super().__init__()
        self.embed_z = res_embed(obs_dim + z_dim, hidden, embedding_layers)
        self.embed_s = res_embed(obs_dim, hidden, embedding_layers)
        self.policy = res_trunk(hidden, hidden_layers, action_dim)

    def forward(self, obs, z):
        e_z = self.embed_z(torch.cat([obs, z], dim=-1))
        e_s = self.embed_s(obs)
        return torch.tanh(self.policy(torch.cat([e_s, e_z], dim=-1)))


class BackwardMap(nn.Module):
    """Linear -> LN -> tanh -> Linear -> SphereNorm (net.{0,1,3})."""

    def __init__(self, goal_dim, hidden, z_dim, norm):
        super().__init__()
        self.norm = norm
        self.net = nn.Sequential(nn.Linear(goal_dim, hidden), nn.LayerNorm(hidden, eps=LN_EPS),
                                 nn.Tanh(), nn.Linear(hidden, z_dim))

    def forward(self, goal):
        out = self.net(goal)
        return sphere_norm(out) if self.norm else out


class Discriminator(nn.Module):
    """trunk: Linear(z+goal->h), LN, tanh, k x [Linear(h->h), ReLU], Linear(h->1).
    Input cat([z, goal]) (z first).  Returns logits [N,1]."""

    def __init__(self, goal_dim, z_dim, hidden, hidden_layers):
        super().__init__()
        mods = [nn.Linear(z_dim + goal_dim, hidden), nn.LayerNorm(hidden, eps=LN_EPS), nn.Tanh()]
        for _ in range(hidden_layers):
            mods += [nn.Linear(hidden, hidden), nn.ReLU()]
        mods.append(nn.Linear(hidden, 1))
        self.trunk = nn.Sequential(*mods)

    def forward(self, goal, z):
        return self.trunk(torch.cat([z, goal], dim=-1))


class Model(nn.Module):
    """Container whose state_dict names are the checkpoint names of 5.2."""

    def __init__(self, mc):
        super().__init__()
        od = mc["obs"]
        self.obs_dims = {k: int(od[k]) for k in OBS_KEYS}
        self.z_dim = int(mc["z_dim"])
        self.action_dim = int(mc["action_dim"])
        self.norm_z = bool(mc["norm_z"])
        actor_in = sum(self.obs_dims[k] for k in ACTOR_KEYS)
        critic_in = sum(self.obs_dims[k] for k in CRITIC_KEYS)
        goal_in = sum(self.obs_dims[k] for k in GOAL_KEYS)
        d, a = self.z_dim, self.action_dim

        def fwd_like(c, n_out):
            return ForwardLike(critic_in, d, a, int(c["hidden_dim"]), int(c["hidden_layers"]),
                               int(c["ensemble"]), n_out)

        fc, cc, xc = mc["forward"], mc["critic"], mc["aux_critic"]
        ac, bc, dc = mc["actor"], mc["backward"], mc["discriminator"]
        self._forward_map = fwd_like(fc, d)
        self._critic = fwd_like(cc, 1)
        self._aux_critic = fwd_like(xc, 1)
        self._backward_map = BackwardMap(goal_in, int(bc["hidden_dim"]), d, self.norm_z)
        self._actor = Actor(actor_in, d, a, int(ac["hidden_dim"]), int(ac["hidden_layers"]),
                            int(ac["embedding_layers"]))
        self._discriminator = Discriminator(goal_in, d, int(dc["hidden_dim"]), int(dc["hidden_layers"]))
        self._target_forward_map = fwd_like(fc, d)
        self._target_backward_map = BackwardMap(goal_in, int(bc["hidden_dim"]), d, self.norm_z)
        self._target_critic = fwd_like(cc, 1)
        self._target_aux_critic = fwd_like(xc, 1)
        for net in (self._target_forward_map, self._target_backward_map,
                    self._target_critic, self._target_aux_critic):
            net.requires_grad_(False)

    def project_z(self, z):
        return sphere_norm(z) if self.norm_z else z


def normalizer_names(key):
    p = f"_obs_normalizer._normalizers.{key}._normalizer."
    return p + "running_mean", p + "running_var", p + "num_batches_tracked"


AUX_NAMES = ("_aux_reward_normalizer.mean", "_aux_reward_normalizer.mean_square",
             "_aux_reward_normalizer.counter")


def expected_state_shapes(model):
    """name -> shape of every tensor that init.safetensors must hold."""
    shapes = {n: tuple(p.shape) for n, p in model.state_dict().items()}
    for k in OBS_KEYS:
        m, v, n = normalizer_names(k)
        shapes[m] = (model.obs_dims[k],)
        shapes[v] = (model.obs_dims[k],)
        shapes[n] = ()
    shapes[AUX_NAMES[0]] = (1,)
    shapes[AUX_NAMES[1]] = (1,)
    shapes[AUX_NAMES[2]] = ()
    return shapes


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

def pessimism(x, lam):
    """mean_p X_p - lam * sum_{p!=q} |X_p - X_q| / (P^2 - P)   (over dim 0)."""
    p = x.shape[0]
    mean = x.mean(dim=0)
    if p < 2:
        return mean
    unc = (x.unsqueeze(0) - x.unsqueeze(1)).abs().sum(dim=(0, 1)) / (p * p - p)
    return mean - lam * unc


def sample_action(mu, eps):
    """clamp(mu + eps) to [-1+1e-6, 1-1e-6] with a straight-through gradient."""
    x = mu + eps
    clamped = torch.clamp(x, -1.0 + ACTION_EPS, 1.0 - ACTION_EPS)
    return x - x.detach() + clamped.detach()


def cat_keys(obs, keys):
    return torch.cat([obs[k] for k in keys], dim=-1)


def normalise(x, mean, var):
    return (x - mean) / torch.sqrt(var + BN_EPS)


def params_of(net):
    return [p for _, p in net.named_parameters()]


def adam_step(net, grads, lr):
    """One step of a fresh torch Adam (betas 0.9/0.999, eps 1e-8)."""
    params = params_of(net)
    opt = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    for p, g in zip(params, grads):
        p.grad = g.detach().clone()
    opt.step()
    for p in params:
        p.grad = None


def record_grads(out, prefix, net, grads):
    for (n, _), g in zip(net.named_parameters(), grads):
        out[f"{prefix}.{n}"] = g.detach().clone()


@torch.no_grad()
def polyak(target, online, tau):
    for pt, po in zip(target.parameters(), online.parameters()):
        pt.mul_(1.0 - tau).add_(po, alpha=tau)


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------

def need(tensors, name, fname, shape=None):
    if name not in tensors:
        raise BadInput(f"missing tensor '{name}' in {fname}")
    t = tensors[name]
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise BadInput(f"tensor '{name}' in {fname} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    return t


def load_init(model, init):
    shapes = expected_state_shapes(model)
    unexpected = sorted(set(init) - set(shapes))
    if unexpected:
        more = f" (+{len(unexpected) - 5} more)" if len(unexpected) > 5 else ""
        raise BadInput("unexpected tensor(s) in init.safetensors: " + ", ".join(unexpected[:5]) + more)
    for name, shape in shapes.items():
        need(init, name, "init.safetensors", shape)
    sd = {n: init[n].to(torch.float32) for n in model.state_dict()}
    model.load_state_dict(sd, strict=True)
    obs_norm = {}
    for k in OBS_KEYS:
        m, v, n = normalizer_names(k)
        obs_norm[k] = {"mean": init[m].to(torch.float32).clone(), "var": init[v].to(torch.float32).clone(),
                       "count": int(init[n].item())}
    aux = {"mean": init[AUX_NAMES[0]].to(torch.float32).clone(),
           "mean_square": init[AUX_NAMES[1]].to(torch.float32).clone(),
           "counter": int(init[AUX_NAMES[2]].item())}
    return obs_norm, aux


def load_batch(batch, model, ac):
    n = int(ac["batch_size"])
    seq = int(ac["seq_length"])
    dims, a, d = model.obs_dims, model.action_dim, model.z_dim
    fn = "batch.safetensors"
    b = {"obs": {}, "next_obs": {}, "expert_obs": {}, "expert_next_obs": {}}
    for k in OBS_KEYS:
        b["obs"][k] = need(batch, f"train.obs.{k}", fn, (n, dims[k])).float()
        b["next_obs"][k] = need(batch, f"train.next_obs.{k}", fn, (n, dims[k])).float()
    if n % seq:
        raise BadInput(f"batch_size {n} is not a multiple of seq_length {seq}")
    for k in GOAL_KEYS:
        b["expert_obs"][k] = need(batch, f"expert.{k}", fn, (n, dims[k])).float()
        b["expert_next_obs"][k] = need(batch, f"expert.next_{k}", fn, (n, dims[k])).float()
    b["action"] = need(batch, "train.action", fn, (n, a)).float()
    b["terminated"] = need(batch, "train.terminated", fn, (n, 1)).float()
    b["z"] = need(batch, "train.z", fn, (n, d)).float()
    b["aux_reward"] = need(batch, "train.aux_reward", fn, (n, 1)).float()
    for name in ("mix_choice", "goal_perm", "expert_perm"):
        t = need(batch, f"noise.{name}", fn, (n,)).long()
        hi = 3 if name == "mix_choice" else n
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= hi):
            raise BadInput(f"noise.{name} has values outside [0, {hi})")
        b[name] = t
    b["prior"] = need(batch, "noise.prior", fn, (n, d)).float()
    b["relabel"] = need(batch, "noise.relabel", fn, (n, 1)).float()
    b["gp_alpha"] = need(batch, "noise.gp_alpha", fn, (n, 1)).float()
    for name in ("fb_next_eps", "critic_next_eps", "aux_next_eps", "actor_eps"):
        b[name] = need(batch, f"noise.{name}", fn, (n, a)).float()
    return b


# --------------------------------------------------------------------------
# Forward outputs with the initial parameters (before the normaliser update)
# --------------------------------------------------------------------------

@torch.no_grad()
def initial_outputs(model, obs_norm, b):
    obs = {k: normalise(b["obs"][k], obs_norm[k]["mean"], obs_norm[k]["var"]) for k in OBS_KEYS}
    nxt = {k: normalise(b["next_obs"][k], obs_norm[k]["mean"], obs_norm[k]["var"]) for k in OBS_KEYS}
    s_c, s_a, s_g = cat_keys(obs, CRITIC_KEYS), cat_keys(obs, ACTOR_KEYS), cat_keys(obs, GOAL_KEYS)
    z, act = b["z"], b["action"]
    return {
        "out.forward": model._forward_map(s_c, z, act),
        "out.backward": model._backward_map(cat_keys(nxt, GOAL_KEYS)),
        "out.actor_mean": model._actor(s_a, z),
        "out.critic": model._critic(s_c, z, act),
        "out.aux_critic": model._aux_critic(s_c, z, act),
        "out.disc_logits": model._discriminator(s_g, z),
    }


# --------------------------------------------------------------------------
# One agent update (fact sheet 5.5 / 5.6)
# --------------------------------------------------------------------------

def agent_update(model, obs_norm, aux, b, ac):
    """Runs the update in place on model / obs_norm / aux.  Returns (grads, metrics)."""
    grads, metrics = {}, {}
    n = int(ac["batch_size"])
    seq = int(ac["seq_length"])
    gamma = float(ac["discount"])
    mom = float(ac["obs_norm_momentum"])
    d = model.z_dim

    # 1. observation normaliser: stats from train obs, then train next obs; then normalise
    with torch.no_grad():
        for k in OBS_KEYS:
            st = obs_norm[k]
            for x in (b["obs"][k], b["next_obs"][k]):
                bm = x.mean(dim=0)
                bv = x.var(dim=0, unbiased=True)
                st["mean"] = (1.0 - mom) * st["mean"] + mom * bm
                st["var"] = (1.0 - mom) * st["var"] + mom * bv
                st["count"] += 1

        def norm_all(src, keys):
            return {k: normalise(src[k], obs_norm[k]["mean"], obs_norm[k]["var"]) for k in keys}

        obs = norm_all(b["obs"], OBS_KEYS)
        nxt = norm_all(b["next_obs"], OBS_KEYS)
        e_obs = norm_all(b["expert_obs"], GOAL_KEYS)
        e_nxt = norm_all(b["expert_next_obs"], GOAL_KEYS)
        s_c, s_a, s_g = cat_keys(obs, CRITIC_KEYS), cat_keys(obs, ACTOR_KEYS), cat_keys(obs, GOAL_KEYS)
        n_c, n_a, n_g = cat_keys(nxt, CRITIC_KEYS), cat_keys(nxt, ACTOR_KEYS), cat_keys(nxt, GOAL_KEYS)
        e_g = cat_keys(e_obs, GOAL_KEYS)
        e_ng = cat_keys(e_nxt, GOAL_KEYS)
        action = b["action"]
        mask = 1.0 - b["terminated"]                      # m = 1 - terminated, [N,1]
        z_train = b["z"]

        # 2. expert z: B(expert next obs), mean over each slice of seq rows, project, repeat
        b_exp = model._backward_map(e_ng).reshape(n // seq, seq, d).mean(dim=1)
        z_expert = model.project_z(b_exp).repeat_interleave(seq, dim=0)

    # 3. discriminator step: expert (obs, z_E) vs train (obs, stored z), WGAN-GP
    disc = model._discriminator
    dp = params_of(disc)
    logit_e = disc(e_g, z_expert)
    logit_t = disc(s_g, z_train)
    expert_loss = -F.logsigmoid(logit_e)
    train_loss = F.softplus(logit_t)
    alpha = b["gp_alpha"]
    g_hat = (alpha * e_g + (1.0 - alpha) * s_g).requires_grad_(True)
    z_hat = (alpha * z_expert + (1.0 - alpha) * z_train).requires_grad_(True)
    logit_hat = disc(g_hat, z_hat)
    gg, gz = torch.autograd.grad(logit_hat, [g_hat, z_hat], grad_outputs=torch.ones_like(logit_hat),
                                 create_graph=True)
    gnorm = torch.cat([gg, gz], dim=1).norm(2, dim=1)
    gp = ((gnorm - 1.0) ** 2).mean()
    disc_loss = torch.mean(expert_loss + train_loss) + float(ac["grad_penalty_discriminator"]) * gp
    g = torch.autograd.grad(disc_loss, dp)
    record_grads(grads, "grad._discriminator", disc, g)
    adam_step(disc, g, float(ac["lr_discriminator"]))
    metrics.update(disc_loss=disc_loss.item(), disc_expert_loss=expert_loss.mean().item(),
                   disc_train_loss=train_loss.mean().item(), disc_wgan_gp_loss=gp.item())

    # 4. mixed z and relabelling
    with torch.no_grad():
        z_goal = model.project_z(model._backward_map(n_g[b["goal_perm"]]))
        z_prior = model.project_z(b["prior"])
        choice = b["mix_choice"].unsqueeze(1)
        z_mix = torch.where(choice == 0, z_goal, torch.where(choice == 1, z_expert[b["expert_perm"]], z_prior))
        z = torch.where(b["relabel"] <= float(ac["relabel_ratio"]), z_mix, z_train)

    # 5. FB step
    fmap, bmap = model._forward_map, model._backward_map
    with torch.no_grad():
        next_a = sample_action(model._actor(n_a, z), b["fb_next_eps"])
        tf = model._target_forward_map(n_c, z, next_a)        # [P,N,d]
        tb = model._target_backward_map(n_g)                  # [N,d]
        target_m = pessimism(torch.matmul(tf, tb.T), float(ac["fb_pessimism"]))   # [N,N]
    f_out = fmap(s_c, z, action)                               # [P,N,d]
    b_out = bmap(n_g)                                          # [N,d]
    m_pred = torch.matmul(f_out, b_out.T)                      # [P,N,N]
    diff = m_pred - gamma * mask * target_m
    eye = torch.eye(n, dtype=torch.float32)
    off = 1.0 - eye
    off_sum = float(n * (n - 1))
    fb_offdiag = 0.5 * ((diff * off) ** 2).sum() / off_sum
    fb_diag = -torch.diagonal(diff, dim1=1, dim2=2).mean(dim=1).sum()
    cov = torch.matmul(b_out, b_out.T)
    orth_offdiag = 0.5 * ((cov * off) ** 2).sum() / off_sum
    orth_diag = -torch.diagonal(cov).mean()
    orth_loss = orth_offdiag + orth_diag
    fb_loss = fb_offdiag + fb_diag + float(ac["ortho_coef"]) * orth_loss
    fp, bp = params_of(fmap), params_of(bmap)
    g = torch.autograd.grad(fb_loss, fp + bp)
    gf, gb = g[:len(fp)], g[len(fp):]
    record_grads(grads, "grad._forward_map", fmap, gf)
    record_grads(grads, "grad._backward_map", bmap, gb)
    adam_step(fmap, gf, float(ac["lr_f"]))
    adam_step(bmap, gb, float(ac["lr_b"]))
    metrics.update(fb_loss=fb_loss.item(), fb_diag=fb_diag.item(), fb_offdiag=fb_offdiag.item(),
                   orth_loss=orth_loss.item(), orth_loss_diag=orth_diag.item(),
                   orth_loss_offdiag=orth_offdiag.item())

    # 6. discriminator critic Q_D (reward from the UPDATED discriminator, relabelled z)
    critic = model._critic
    with torch.no_grad():
        sig = torch.sigmoid(disc(s_g, z)).clamp(1e-7, 1.0 - 1e-7)
        r_d = torch.log(sig) - torch.log(1.0 - sig)
        next_a = sample_action(model._actor(n_a, z), b["critic_next_eps"])
        next_q = pessimism(model._target_critic(n_c, z, next_a), float(ac["critic_pessimism"]))
        y = r_d + gamma * mask * next_q
    q = critic(s_c, z, action)                                # [P,N,1]
    critic_loss = 0.5 * ((q - y) ** 2).mean(dim=(1, 2)).sum()
    g = torch.autograd.grad(critic_loss, params_of(critic))
    record_grads(grads, "grad._critic", critic, g)
    adam_step(critic, g, float(ac["lr_critic"]))
    metrics.update(critic_loss=critic_loss.item())

    # 7. aux critic Q_aux with the EMA-scaled aux reward
    aux_critic = model._aux_critic
    with torch.no_grad():
        tau = float(ac["aux_reward_ema"])
        rho = b["aux_reward"]
        aux["mean"] = tau * aux["mean"] + (1.0 - tau) * rho.mean()
        aux["mean_square"] = tau * aux["mean_square"] + (1.0 - tau) * (rho ** 2).mean()
        aux["counter"] += 1
        debias = 1.0 - tau ** aux["counter"]
        mu_hat = aux["mean"] / debias
        sq_hat = aux["mean_square"] / debias
        var = torch.clamp(sq_hat - mu_hat ** 2, min=1e-8)
        rho_norm = rho / torch.sqrt(var)
        next_a = sample_action(model._actor(n_a, z), b["aux_next_eps"])
        next_q = pessimism(model._target_aux_critic(n_c, z, next_a), float(ac["aux_critic_pessimism"]))
        y = rho_norm + gamma * mask * next_q
    q = aux_critic(s_c, z, action)
    aux_loss = 0.5 * ((q - y) ** 2).mean(dim=(1, 2)).sum()
    g = torch.autograd.grad(aux_loss, params_of(aux_critic))
    record_grads(grads, "grad._aux_critic", aux_critic, g)
    adam_step(aux_critic, g, float(ac["lr_aux_critic"]))
    metrics.update(aux_critic_loss=aux_loss.item())

    # 8. actor (uses the updated F, Q_D, Q_aux; gradients only to the actor)
    actor = model._actor
    lam = float(ac["actor_pessimism"])
    a_pi = sample_action(actor(s_a, z), b["actor_eps"])
    q_fb = pessimism((fmap(s_c, z, a_pi) * z).sum(dim=-1), lam)      # [N]
    q_d = pessimism(critic(s_c, z, a_pi), lam)                       # [N,1]
    q_x = pessimism(aux_critic(s_c, z, a_pi), lam)                   # [N,1]
    w = q_fb.abs().mean().detach() if bool(ac["scale_reg"]) else 1.0
    actor_loss = (-q_fb.mean() - float(ac["reg_coeff"]) * w * q_d.mean()
                  - float(ac["reg_coeff_aux"]) * w * q_x.mean())
    g = torch.autograd.grad(actor_loss, params_of(actor))
    record_grads(grads, "grad._actor", actor, g)
    adam_step(actor, g, float(ac["lr_actor"]))
    metrics.update(actor_loss=actor_loss.item(), Q_fb=q_fb.mean().item(),
                   Q_discriminator=q_d.mean().item(), Q_aux=q_x.mean().item())

    # 9. Polyak averaging of the targets
    polyak(model._target_forward_map, fmap, float(ac["fb_target_tau"]))
    polyak(model._target_backward_map, bmap, float(ac["fb_target_tau"]))
    polyak(model._target_critic, critic, float(ac["critic_target_tau"]))
    polyak(model._target_aux_critic, aux_critic, float(ac["critic_target_tau"]))
    return grads, metrics


def state_after(model, obs_norm, aux):
    out = {n: t.detach().clone() for n, t in model.state_dict().items()}
    for k in OBS_KEYS:
        m, v, c = normalizer_names(k)
        out[m] = obs_norm[k]["mean"].clone()
        out[v] = obs_norm[k]["var"].clone()
        out[c] = torch.tensor(obs_norm[k]["count"], dtype=torch.int64)
    out[AUX_NAMES[0]] = aux["mean"].clone()
    out[AUX_NAMES[1]] = aux["mean_square"].clone()
    out[AUX_NAMES[2]] = torch.tensor(aux["counter"], dtype=torch.int64)
    return out


def run_oracle(config, init, batch):
    """Everything the oracle computes: {name: tensor} with out.*, grad.*, after.*, metric.*."""
    torch.manual_seed(0)     # nothing random is drawn; kept for safety
    model = Model(config["model"])
    obs_norm, aux = load_init(model, init)
    b = load_batch(batch, model, config["agent"])
    results = dict(initial_outputs(model, obs_norm, b))
    grads, metrics = agent_update(model, obs_norm, aux, b, config["agent"])
    results.update(grads)
    for n, t in state_after(model, obs_norm, aux).items():
        results["after." + n] = t
    for n, v in metrics.items():
        results["metric." + n] = torch.tensor([v], dtype=torch.float32)
    return results


LR_KEYS = {"_forward_map": "lr_f", "_backward_map": "lr_b", "_discriminator": "lr_discriminator",
           "_critic": "lr_critic", "_aux_critic": "lr_aux_critic", "_actor": "lr_actor"}
TAU_KEYS = {"_forward_map": "fb_target_tau", "_backward_map": "fb_target_tau",
            "_critic": "critic_target_tau", "_aux_critic": "critic_target_tau"}


def after_from_their_grads(ours, init, their_grads, ac):
    """--after-from-their-grads: expected online parameters = one fresh-Adam step from init with
    the Rust gradients (grads.safetensors), targets = Polyak of those.  This isolates the
    optimiser/Polyak check from gradient round-off: Adam's first step is ~lr*sign(g), so an
    element whose gradient is at round-off level can legitimately flip by 2*lr."""
    for name in [n for n in ours if n.startswith("grad.")]:
        pname = name[len("grad."):]
        net = pname.split(".")[0]
        p = nn.Parameter(init[pname].to(torch.float32).clone())
        opt = torch.optim.Adam([p], lr=float(ac[LR_KEYS[net]]), betas=(0.9, 0.999), eps=1e-8)
        p.grad = their_grads[name].to(torch.float32).clone()
        opt.step()
        ours["after." + pname] = p.detach()
        if net in TAU_KEYS:
            tname = "_target_" + pname[1:]
            tau = float(ac[TAU_KEYS[net]])
            ours["after." + tname] = init[tname].to(torch.float32).clone().mul_(1.0 - tau).add_(p.detach(), alpha=tau)


# --------------------------------------------------------------------------
# Comparison / command line
# --------------------------------------------------------------------------

def rel_err(ours, theirs):
    o = ours.detach().to(torch.float64)
    t = theirs.detach().to(torch.float64)
    if o.numel() == 0:
        return 0.0
    denom = max(float(t.abs().max()), 1e-12)
    return float((o - t).abs().max()) / denom


def read_json(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot read {path}: {e}")


def read_st(path):
    try:
        return load_file(path)
    except Exception as e:  # noqa: BLE001  (corrupt file)
        raise BadInput(f"cannot read {path}: {e}")


def metric_value(raw, name):
    v = raw[name]
    while isinstance(v, (list, tuple)) and len(v) == 1:
        v = v[0]
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise BadInput(f"metrics.json: '{name}' is not a number: {v!r}")
    return float(v)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--json", action="store_true", help="also write DIR/report.json")
    ap.add_argument("--after-from-their-grads", action="store_true",
                    help="check after.* of the online nets (and their targets) by applying the "
                         "Adam step / Polyak to the Rust gradients instead of the oracle's own")
    args = ap.parse_args(argv)
    try:
        if not os.path.isdir(args.dir):
            raise BadInput(f"{args.dir} is not a directory")
        files = ("config.json", "init.safetensors", "batch.safetensors", "outputs.safetensors",
                 "grads.safetensors", "after.safetensors", "metrics.json")
        missing = [f for f in files if not os.path.isfile(os.path.join(args.dir, f))]
        if missing:
            raise BadInput(f"missing file(s) in {args.dir}: " + ", ".join(missing))
        p = lambda f: os.path.join(args.dir, f)  # noqa: E731
        config = read_json(p("config.json"))
        for sec in ("model", "agent"):
            if sec not in config:
                raise BadInput(f"config.json has no '{sec}' section")
        init = read_st(p("init.safetensors"))
        batch = read_st(p("batch.safetensors"))
        outputs = read_st(p("outputs.safetensors"))
        grads = read_st(p("grads.safetensors"))
        after = read_st(p("after.safetensors"))
        metrics_raw = read_json(p("metrics.json"))
        try:
            ours = run_oracle(config, init, batch)
        except KeyError as e:
            raise BadInput(f"config.json: missing key {e}")
        for name, t in ours.items():
            if name.startswith("grad."):
                need(grads, name, "grads.safetensors", t.shape)
        if args.after_from_their_grads:
            after_from_their_grads(ours, init, grads, config["agent"])

        # pair every oracle tensor with the Rust one
        pairs = []
        for name, t in ours.items():
            if name.startswith("out."):
                theirs = need(outputs, name, "outputs.safetensors", t.shape)
            elif name.startswith("grad."):
                theirs = need(grads, name, "grads.safetensors", t.shape)
            elif name.startswith("after."):
                theirs = need(after, name[len("after."):], "after.safetensors", t.shape)
            else:
                m = name[len("metric."):]
                if m not in metrics_raw:
                    if m in REQUIRED_METRICS:
                        raise BadInput(f"missing metric '{m}' in metrics.json")
                    continue           # optional metric the Rust side does not report
                theirs = torch.tensor([metric_value(metrics_raw, m)], dtype=torch.float32)
            pairs.append((name, t, theirs))
    except BadInput as e:
        print(f"oracle: bad input: {e}", file=sys.stderr)
        return 2

    extra = sorted(set(grads) - {n for n in ours if n.startswith("grad.")})
    if extra:
        print(f"oracle: note: {len(extra)} tensor(s) in grads.safetensors not compared, e.g. {extra[0]}")

    errors = {}
    width = max(len(n) for n, _, _ in pairs)
    print(f"{'tensor':<{width}}  rel.error")
    for name, o, t in pairs:
        e = rel_err(o, t)
        errors[name] = e
        flag = "" if e <= args.tol else "   <-- FAIL"
        print(f"{name:<{width}}  {e:.3e}{flag}")
    worst_name = max(errors, key=lambda k: math.inf if math.isnan(errors[k]) else errors[k])
    worst = errors[worst_name]
    n_fail = sum(1 for e in errors.values() if not e <= args.tol)
    if n_fail:
        print(f"oracle: {n_fail} tensor(s) above tol {args.tol:g}")
        fragile = [n for n in errors if errors[n] > args.tol and n.startswith("after.")
                   and not n.startswith("after._obs_") and not n.startswith("after._aux_reward")]
        if fragile and not args.after_from_their_grads:
            print("oracle: hint: after.* parameter mismatches can come from Adam's first step "
                  "(~lr*sign(g)) on round-off-sized gradients; rerun with --after-from-their-grads "
                  "to check the optimiser step on the Rust gradients")
    print(f"oracle parity: {len(errors)} tensors compared, worst relative error {worst:.3e} ({worst_name})")
    if args.json:
        with open(os.path.join(args.dir, "report.json"), "w") as fh:
            json.dump({"compared": len(errors), "worst": worst, "worst_name": worst_name,
                       "errors": errors}, fh, indent=1)
    return 0 if n_fail == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
