"""An Agent around any tracking policy described by a `PolicyConfig`: it builds the policy's
observation from the arena's robot-interface groups, keeps each episode's previous action, calls
the model, and answers with absolute joint targets in the G1 order (joint-position mode). The
model is a plain function, so ONNX (`onnx_policy`) and other runtimes share this code."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from .agent import Agent, Batch, EpisodeEnd, EpisodeInfo, EpisodeSpec
from .errors import AgentError
from .g1 import ANCHOR_BODY, JOINT_POSITION_MODE, NUM_JOINTS
from .observation_terms import ObservationBuilder
from .policy_config import PolicyConfig, UnsupportedPolicyError

log = logging.getLogger("arena_sdk")

#: The model: (obs (n, N) float32, time_step (n, 1) int64: episode step + 1) -> (n, 29) raw actions,
#: in the policy's joint order.
InferFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


class TrackingPolicyAgent(Agent):
    """Runs `infer` with the observation terms of `config`; targets q* = default + scale * action.

    `configure` refuses (UnsupportedPolicyError) a session whose action mode is not
    "joint_position", that lacks a group the terms read, or whose motion_anchor_* groups relate
    another body than the policy's anchor (`EpisodeSpec.anchor_body`)."""

    def __init__(self, config: PolicyConfig, infer: InferFn, name: str = "") -> None:
        self.config = config
        self.infer = infer
        self.name = name or "TrackingPolicy"
        self.builder = ObservationBuilder(config.observation_terms, config.policy_to_g1, config.default_joint_pos)
        self._default = config.default_joint_pos.astype(np.float32)
        self._scale = config.action_scale.astype(np.float32)
        self._to_g1 = config.policy_to_g1
        # Episode id -> the policy's last raw action (its own `actions` term).
        self._previous: dict[int, np.ndarray] = {}

    def check(self, spec: EpisodeSpec) -> list[str]:
        """Why this policy cannot run on a session with `spec` (empty: it can)."""
        problems = []
        if spec.action_mode != JOINT_POSITION_MODE:
            problems.append(
                f"the benchmark's action mode is {spec.action_mode or 'normalized'!r}; the policy's absolute "
                f"joint targets need {JOINT_POSITION_MODE!r}"
            )
        if spec.action_size != NUM_JOINTS:
            problems.append(f"the benchmark's actions have {spec.action_size} values, the policy gives {NUM_JOINTS}")
        anchor = spec.anchor_body or ANCHOR_BODY  # "" from servers that do not say: torso_link
        if self.config.anchor_body and self.config.anchor_body != anchor:
            problems.append(
                f"the policy's anchor body is {self.config.anchor_body!r}; the benchmark's motion_anchor_* groups "
                f"are relative to {anchor!r}"
            )
        return problems + self.builder.check(spec)

    def configure(self, spec: EpisodeSpec) -> None:
        problems = self.check(spec)
        if problems:
            raise UnsupportedPolicyError(self.name, problems)
        self.builder.bind(spec.layout)
        self._previous.clear()
        gains = self.config.gains_g1()
        if gains is not None and len(spec.joint_stiffness) == NUM_JOINTS:
            same = np.allclose(spec.joint_stiffness, gains[0], rtol=1e-6) and np.allclose(
                spec.joint_damping, gains[1], rtol=1e-6
            )
            if not same:
                log.warning("the session's PD gains are not the policy's (a gain preset, or the benchmark's own)")

    def reset(self, episodes: list[EpisodeInfo]) -> None:
        for e in episodes:
            self._previous.pop(e.episode_id, None)

    def act(self, batch: Batch) -> np.ndarray:
        n = len(batch)
        ids = batch.episode_ids.tolist()
        previous = np.zeros((n, NUM_JOINTS), np.float32)
        for i, (episode, step) in enumerate(zip(ids, batch.episode_steps.tolist())):
            if step and episode in self._previous:  # zeros at an episode's start, as in training
                previous[i] = self._previous[episode]
        obs = self.builder.build(batch.observations, previous)
        # mjlab's time_step is the command's frame, one ahead of the robot (the command advances
        # before each observation): the episode step + 1, the motion frame of the command when
        # the episode starts at the motion's beginning.
        time_step = (batch.episode_steps.astype(np.int64) + 1).reshape(n, 1)
        raw = np.asarray(self.infer(obs, time_step), dtype=np.float32)
        if raw.shape != (n, NUM_JOINTS):
            raise AgentError(self.name, f"the model returned actions of shape {raw.shape}, expected {(n, NUM_JOINTS)}")
        if self.config.action_clip is not None:
            raw = np.clip(raw, -self.config.action_clip, self.config.action_clip)
        for i, episode in enumerate(ids):
            self._previous[episode] = raw[i].copy()
        targets = np.empty_like(raw)
        targets[:, self._to_g1] = self._default + self._scale * raw
        return targets

    def end(self, result: EpisodeEnd) -> None:
        self._previous.pop(result.episode_id, None)
