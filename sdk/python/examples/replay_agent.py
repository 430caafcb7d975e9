"""Open-loop reference replay: each step, target the next reference frame's joint angles.

The baseline of the shipped examples (the same action as the Rust SDK's ReplayAgent and
`arena eval --policy replay`). Run it with:

    arena-agent replay_agent.py:ReplayAgent --server http://127.0.0.1:8080 --token "$TOKEN" \
        --benchmark g1-smoke
"""

from __future__ import annotations

import numpy as np

from arena_sdk import REFERENCE_GROUP, Agent, Batch, EpisodeSpec, UnsupportedPolicyError

# Within one reference frame: root position xyz (3), root quaternion wxyz (4), 29 joint angles.
JOINTS = slice(7, 36)


class ReplayAgent(Agent):
    def configure(self, spec: EpisodeSpec) -> None:
        # A benchmark this agent cannot serve is refused as such: the submission ends FAILED with
        # the reason rather than staying RUNNING (and counted towards the quota) until it expires.
        problems = []
        if REFERENCE_GROUP not in spec.layout:
            problems.append(f"replay needs the {REFERENCE_GROUP!r} observation group; this benchmark sends none")
        if len(spec.default_joint_pos) != spec.action_size or len(spec.action_scale) != spec.action_size:
            problems.append("the server sent no action mapping (EpisodeSpec.default_joint_pos / action_scale)")
        if problems:
            raise UnsupportedPolicyError(type(self).__name__, problems)
        # The server's mapping: target = default_joint_pos + action_scale * clip(action, -1, 1).
        self.default_joint_pos = spec.default_joint_pos.astype(np.float32)
        self.action_scale = spec.action_scale.astype(np.float32)

    def act(self, batch: Batch) -> np.ndarray:
        # The group holds H frames x 36 values; its FIRST frame is the reference for the next step.
        q_ref = batch.group(REFERENCE_GROUP)[:, JOINTS]
        return np.clip((q_ref - self.default_joint_pos) / self.action_scale, -1.0, 1.0)
