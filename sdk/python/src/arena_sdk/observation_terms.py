"""A tracking policy's observation terms (mjlab / BeyondMimic and holosoma names) computed from the
arena's robot-interface groups (`arena_sdk.g1.ROBOT_GROUPS`), and the observation vector they make
in the policy's own term order and joint order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .agent import EpisodeSpec, ObservationLayout
from .g1 import NUM_JOINTS, ROBOT_GROUPS


@dataclass(frozen=True)
class TermSource:
    """What the arena computes a term from."""

    #: The arena's name of the quantity (the mjlab name where one exists).
    name: str
    #: Values per episode.
    size: int
    #: Arena groups it reads (empty: the policy's own previous action).
    groups: tuple[str, ...]
    #: How it is computed, for people (`arena-agent onnx --show`, docs/bring-your-policy.md).
    description: str
    #: Relative to the policy's anchor body, which must then be the session's (EpisodeSpec.anchor_body).
    needs_anchor: bool = False


_J = NUM_JOINTS
#: The quantities a policy can observe, by the arena's name.
SOURCES: dict[str, TermSource] = {
    s.name: s
    for s in (
        TermSource(
            "motion_command",
            2 * _J,
            ("motion_command",),
            "motion_command: reference joint positions then velocities (policy joint order)",
        ),
        TermSource(
            "motion_anchor_pos_b",
            3,
            ("motion_anchor_pos_b",),
            "motion_anchor_pos_b: reference anchor position in the robot anchor's frame",
            needs_anchor=True,
        ),
        TermSource(
            "motion_anchor_ori_b",
            6,
            ("motion_anchor_ori_b",),
            "motion_anchor_ori_b: first two columns of R_robot_anchor^T R_reference_anchor",
            needs_anchor=True,
        ),
        TermSource("base_lin_vel", 3, ("base_lin_vel",), "base_lin_vel: pelvis linear velocity, pelvis frame"),
        TermSource("base_ang_vel", 3, ("imu",), "imu[4:7]: pelvis gyroscope"),
        TermSource("projected_gravity", 3, ("imu",), "R_pelvis^T (0, 0, -1) from the imu quaternion imu[0:4]"),
        TermSource("joint_pos", _J, ("motors",), "motors[0:29] - default_joint_pos (policy joint order)"),
        TermSource("joint_vel", _J, ("motors",), "motors[29:58] (policy joint order)"),
        TermSource("actions", _J, (), "the policy's previous raw output (zeros at an episode's start)"),
    )
}

#: Term names as the exporters write them -> the arena's quantity. mjlab / BeyondMimic first,
#: then mjlab's interim `motion_ref_*` names, which holosoma uses too, then holosoma's.
TERM_ALIASES: dict[str, str] = {
    "command": "motion_command",
    "motion_command": "motion_command",
    "motion_anchor_pos_b": "motion_anchor_pos_b",
    "motion_anchor_ori_b": "motion_anchor_ori_b",
    "motion_ref_pos_b": "motion_anchor_pos_b",
    "motion_ref_ori_b": "motion_anchor_ori_b",
    "base_lin_vel": "base_lin_vel",
    "base_ang_vel": "base_ang_vel",
    "projected_gravity": "projected_gravity",
    "joint_pos": "joint_pos",
    "dof_pos": "joint_pos",
    "joint_vel": "joint_vel",
    "dof_vel": "joint_vel",
    "actions": "actions",
    "last_action": "actions",
}


def term_source(name: str) -> TermSource | None:
    """The quantity behind a policy term name, None when the arena cannot provide it."""
    canonical = TERM_ALIASES.get(name)
    return SOURCES[canonical] if canonical else None


@dataclass(frozen=True, eq=False)
class ObservationTerm:
    """One term of a policy's observation vector."""

    #: The name the policy's metadata uses.
    name: str
    source: TermSource
    #: Multiplied in after computing (holosoma's and newer mjlab's per-term scale); None = 1.
    scale: float | np.ndarray | None = None
    #: (low, high) clip after scaling; None = none.
    clip: tuple[float, float] | None = None

    @property
    def size(self) -> int:
        return self.source.size


class ObservationBuilder:
    """Assembles a policy's observation rows from the arena's groups.

    `policy_to_g1[p]` is the G1 index of the policy's joint p; `default_joint_pos` is in the
    policy's joint order (what `joint_pos` is relative to, as in training)."""

    def __init__(
        self,
        terms: Sequence[ObservationTerm],
        policy_to_g1: np.ndarray,
        default_joint_pos: np.ndarray,
    ) -> None:
        self.terms = tuple(terms)
        self.policy_to_g1 = np.asarray(policy_to_g1, dtype=np.intp)
        self.default_joint_pos = np.asarray(default_joint_pos, dtype=np.float32)
        self.size = sum(t.size for t in self.terms)
        self._slices: dict[str, slice] = {}

    @property
    def groups(self) -> tuple[str, ...]:
        """The arena groups the terms read, in first-use order."""
        seen: dict[str, None] = {}
        for t in self.terms:
            for g in t.source.groups:
                seen.setdefault(g, None)
        return tuple(seen)

    def check(self, spec: EpisodeSpec) -> list[str]:
        """What is missing from a session's groups (empty: the policy can run on it)."""
        problems = []
        layout = spec.layout
        sent = ", ".join(g.name for g in spec.observations) or "none"
        for group in self.groups:
            users = ", ".join(t.name for t in self.terms if group in t.source.groups)
            got = layout.get(group)
            if got is None:
                problems.append(
                    f"the benchmark does not send the observation group {group!r} (needed by {users}; it sends: {sent})"
                )
            elif got.stop - got.start != ROBOT_GROUPS[group]:
                problems.append(
                    f"observation group {group!r} has {got.stop - got.start} values, expected {ROBOT_GROUPS[group]}"
                )
        return problems

    def bind(self, layout: ObservationLayout) -> None:
        """Takes the group offsets of a session (call `check` first)."""
        self._slices = {g: layout[g] for g in self.groups}

    def build(self, values: np.ndarray, previous_actions: np.ndarray) -> np.ndarray:
        """(n, size) float32 observation rows from (n, layout.size) arena rows and the policy's
        (n, 29) previous raw actions (policy joint order)."""
        n = values.shape[0]
        out = np.empty((n, self.size), np.float32)
        col = 0
        for term in self.terms:
            part = self._compute(term.source.name, values, previous_actions)
            if term.scale is not None:
                part = part * term.scale
            if term.clip is not None:
                part = np.clip(part, term.clip[0], term.clip[1])
            out[:, col : col + term.size] = part
            col += term.size
        return out

    def _group(self, values: np.ndarray, name: str) -> np.ndarray:
        return values[:, self._slices[name]]

    def _compute(self, name: str, values: np.ndarray, previous_actions: np.ndarray) -> np.ndarray:
        j = self.policy_to_g1
        if name == "motion_command":
            command = self._group(values, "motion_command")
            return np.concatenate([command[:, :NUM_JOINTS][:, j], command[:, NUM_JOINTS:][:, j]], axis=1)
        if name in ("motion_anchor_pos_b", "motion_anchor_ori_b", "base_lin_vel"):
            return self._group(values, name)
        if name == "base_ang_vel":
            return self._group(values, "imu")[:, 4:7]
        if name == "projected_gravity":
            return projected_gravity(self._group(values, "imu")[:, 0:4])
        if name == "joint_pos":
            return self._group(values, "motors")[:, :NUM_JOINTS][:, j] - self.default_joint_pos
        if name == "joint_vel":
            return self._group(values, "motors")[:, NUM_JOINTS : 2 * NUM_JOINTS][:, j]
        if name == "actions":
            return previous_actions
        raise AssertionError(f"no computation for {name}")


def projected_gravity(quat_wxyz: np.ndarray) -> np.ndarray:
    """R(q)^T (0, 0, -1) for (n, 4) quaternions wxyz: gravity's direction in the body frame.

    The quaternion is normalised first: the arena sends it as float32."""
    q = np.asarray(quat_wxyz, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    # R^T e_z is the third row of R; gravity points along -e_z.
    row = np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=1)
    return (-row).astype(np.float32)
