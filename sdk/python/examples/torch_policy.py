"""Template: a PyTorch policy (an nn.Module mapping observations to actions) as an arena agent.

Needs PyTorch (`pip install "arena-sdk[torch]"`); torch is imported when the agent is created,
not when this file is, so the file imports without it. Replace `build_policy` with your network
(e.g. `torch.jit.load("policy.pt")` or your module plus `load_state_dict`), and `observation`
with the input your network was trained on.

Slow set-up belongs in `__init__`, which runs before the client connects: the server sends the
first requests right after `connected`, and their step deadline (1 s on g1-smoke) includes the
time `configure` takes. Importing torch alone can take a second. Run it with:

    arena-agent torch_policy.py:TorchPolicyAgent --server http://127.0.0.1:8080 --token "$TOKEN" \
        --benchmark g1-smoke
"""

from __future__ import annotations

import os

import numpy as np

from arena_sdk import Agent, Batch, EpisodeInfo, EpisodeSpec


def build_policy(obs_dim: int, action_size: int):
    """The network: here an untrained MLP, so the template runs as is (its actions are near zero)."""
    import torch

    torch.manual_seed(0)
    policy = torch.nn.Sequential(
        torch.nn.Linear(obs_dim, 256),
        torch.nn.ELU(),
        torch.nn.Linear(256, action_size),
        torch.nn.Tanh(),
    )
    with torch.no_grad():
        policy[-2].weight.mul_(0.01)
    return policy


class TorchPolicyAgent(Agent):
    def __init__(self) -> None:
        import torch

        self.torch = torch
        # "cuda" when available, unless ARENA_TORCH_DEVICE says otherwise.
        name = os.environ.get("ARENA_TORCH_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(name)
        self.policy = None
        # Recurrent policies: keep per-episode state keyed by episode id (rows change order and
        # membership between batches), and clear it in reset().
        self.state: dict[int, object] = {}

    def configure(self, spec: EpisodeSpec) -> None:
        torch = self.torch
        if self.policy is None:  # configure runs again after a reconnect
            self.policy = build_policy(spec.layout.size, spec.action_size).to(self.device).eval()
            # One forward pass now, so lazy initialisation does not delay the first answer.
            with torch.inference_mode():
                self.policy(torch.zeros(max(1, spec.max_batch), spec.layout.size, device=self.device))

    def reset(self, episodes: list[EpisodeInfo]) -> None:
        for e in episodes:
            self.state.pop(e.episode_id, None)

    def observation(self, batch: Batch) -> np.ndarray:
        """The network's input: here every group, as sent (batch.group(name) selects one)."""
        return batch.observations

    def act(self, batch: Batch) -> np.ndarray:
        torch = self.torch
        with torch.inference_mode():
            obs = torch.from_numpy(self.observation(batch)).to(self.device)
            actions = self.policy(obs)
        return actions.to("cpu", torch.float32).numpy()
