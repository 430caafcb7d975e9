#!/usr/bin/env python3
"""Independent PyTorch oracle of one PPO update as rsl_rl 3.0.0 defines it
(docs/ppo-tracker.md §9), for ppo/tests/oracle_parity.rs.

Written from the algorithm's definition with PyTorch's own building blocks (nn.Linear, nn.ELU,
torch.distributions.Normal, torch.optim.Adam, torch.nn.utils.clip_grad_norm_), not from the
Rust code. `load` and `update` are also what the update-throughput benchmark times
(ppo/bench/update_throughput.py). Reads DIR/init.safetensors (the model before the update, rsl_rl's tensor names),
DIR/rollout.safetensors and DIR/config.json (`schedule` "adaptive", the default, or "fixed");
writes DIR/oracle.safetensors with the returns,
advantages, every minibatch's (loss, surrogate, value, entropy), the gradients of the first
minibatch (after clipping), every tensor after the update and the final learning rate.
"""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

NORMALIZER_EPS = 1e-2
MIN_STD = 1e-6


def mlp(sizes):
    layers = []
    for k in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[k], sizes[k + 1]))
        if k < len(sizes) - 2:
            layers.append(nn.ELU())
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    def __init__(self, obs_dim, critic_dim, act_dim, actor_hidden, critic_hidden):
        super().__init__()
        self.actor = mlp([obs_dim, *actor_hidden, act_dim])
        self.critic = mlp([critic_dim, *critic_hidden, 1])
        self.std = nn.Parameter(torch.ones(act_dim))
        for group, dim in (("actor_obs_normalizer", obs_dim), ("critic_obs_normalizer", critic_dim)):
            self.register_buffer(f"{group}_mean", torch.zeros(1, dim))
            self.register_buffer(f"{group}_std", torch.ones(1, dim))

    def normalize(self, group, x):
        return (x - getattr(self, f"{group}_mean")) / (getattr(self, f"{group}_std") + NORMALIZER_EPS)

    def distribution(self, obs):
        mean = self.actor(self.normalize("actor_obs_normalizer", obs))
        std = self.std.clamp(min=MIN_STD).expand_as(mean)
        return torch.distributions.Normal(mean, std)

    def value(self, critic_obs):
        return self.critic(self.normalize("critic_obs_normalizer", critic_obs)).squeeze(-1)


def load(folder: Path):
    """The model before the update, the rollout and the configuration written into `folder`."""
    cfg = json.loads((folder / "config.json").read_text())
    init = load_file(str(folder / "init.safetensors"))
    r = load_file(str(folder / "rollout.safetensors"))
    obs_dim, critic_dim = r["obs"].shape[-1], r["critic_obs"].shape[-1]
    act_dim = r["actions"].shape[-1]
    model = ActorCritic(obs_dim, critic_dim, act_dim, cfg["actor_hidden"], cfg["critic_hidden"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(init[name])
        for group in ("actor_obs_normalizer", "critic_obs_normalizer"):
            getattr(model, f"{group}_mean").copy_(init[f"{group}._mean"])
            getattr(model, f"{group}_std").copy_(init[f"{group}._std"])
    return model, init, r, cfg


def update(model, r, cfg):
    """GAE, then one update (epochs x minibatches) of `model` in place; returns the returns,
    advantages, every minibatch's losses, the first minibatch's clipped gradients and the
    final learning rate."""
    # GAE with bootstrap from last_values; advantages normalised once over the rollout.
    gamma, lam = cfg["gamma"], cfg["lam"]
    rewards, dones, values = r["rewards"], r["dones"], r["values"]
    steps = rewards.shape[0]
    returns = torch.zeros_like(rewards)
    advantage = torch.zeros_like(r["last_values"])
    for t in reversed(range(steps)):
        next_values = r["last_values"] if t == steps - 1 else values[t + 1]
        not_done = 1.0 - dones[t]
        delta = rewards[t] + not_done * gamma * next_values - values[t]
        advantage = delta + not_done * gamma * lam * advantage
        returns[t] = advantage + values[t]
    advantages = returns - values
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    def flat(x):
        return x.reshape(-1, *x.shape[2:])

    obs, critic_obs, actions = flat(r["obs"]), flat(r["critic_obs"]), flat(r["actions"])
    old_values, old_log_probs = flat(values), flat(r["log_probs"])
    old_mu, old_sigma = flat(r["mu"]), flat(r["sigma"])
    ret, adv = flat(returns), flat(advantages)
    batch = obs.shape[0]
    mini = batch // cfg["mini_batches"]
    perm = r["permutation"]

    lr = cfg["learning_rate"]
    adaptive = cfg.get("schedule", "adaptive") == "adaptive"
    # Adam over the parameters in name order (the order does not change Adam's result).
    params = [p for _, p in sorted(model.named_parameters())]
    names = [n for n, _ in sorted(model.named_parameters())]
    optimizer = torch.optim.Adam(params, lr=lr)
    clip = cfg["clip"]
    losses, first_grads = [], None
    for _ in range(cfg["epochs"]):
        for i in range(cfg["mini_batches"]):
            idx = perm[i * mini : (i + 1) * mini]
            dist = model.distribution(obs[idx])
            log_prob = dist.log_prob(actions[idx]).sum(-1)
            entropy = dist.entropy().sum(-1)
            value = model.value(critic_obs[idx])
            with torch.no_grad():
                mu, sigma = dist.mean, dist.stddev
                om, os_ = old_mu[idx], old_sigma[idx]
                kl = torch.sum(
                    torch.log(sigma / os_ + 1e-5) + (os_**2 + (om - mu) ** 2) / (2.0 * sigma**2) - 0.5, dim=-1
                ).mean()
                if adaptive:
                    if kl > 2.0 * cfg["desired_kl"]:
                        lr = max(1e-5, lr / 1.5)
                    elif 0.0 < kl < cfg["desired_kl"] / 2.0:
                        lr = min(1e-2, lr * 1.5)
                    for g in optimizer.param_groups:
                        g["lr"] = lr
            ratio = torch.exp(log_prob - old_log_probs[idx])
            a = adv[idx]
            surrogate = torch.max(-a * ratio, -a * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)).mean()
            v_clipped = old_values[idx] + (value - old_values[idx]).clamp(-clip, clip)
            value_loss = torch.max((value - ret[idx]) ** 2, (v_clipped - ret[idx]) ** 2).mean()
            loss = surrogate + cfg["value_loss_coef"] * value_loss - cfg["entropy_coef"] * entropy.mean()
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(params, cfg["max_grad_norm"])
            if first_grads is None:
                first_grads = {f"grad.{n}": p.grad.detach().clone() for n, p in zip(names, params)}
            optimizer.step()
            losses.append([loss.item(), surrogate.item(), value_loss.item(), entropy.mean().item()])

    return {
        "returns": returns,
        "advantages": advantages,
        "losses": torch.tensor(losses, dtype=torch.float64),
        "learning_rate": torch.tensor([lr], dtype=torch.float64),
        **first_grads,
    }


def main(folder: Path) -> None:
    model, init, r, cfg = load(folder)
    out = update(model, r, cfg)
    for name, p in model.named_parameters():
        out[f"after.{name}"] = p.detach().clone()
    for name in init:
        if "normalizer" in name:
            out[f"after.{name}"] = init[name]
    save_file({k: v.contiguous() for k, v in out.items()}, str(folder / "oracle.safetensors"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
