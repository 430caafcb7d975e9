"""What a participant implements (`Agent`) and what it is given: the session's `EpisodeSpec`, the
`EpisodeInfo` of starting episodes, one `Batch` of observations per control step, and the
`EpisodeEnd` of finished episodes. These are plain Python/numpy types, the same whatever the
transport or encoding, so an agent never touches protobuf or JSON."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .errors import AgentError
from .g1 import ANCHOR_BODY

log = logging.getLogger("arena_sdk")

#: Name of the observation group holding the next reference frames (36 values per frame).
REFERENCE_GROUP = "reference"
#: Values per reference frame: root position xyz (3), root quaternion wxyz (4), 29 joint angles.
REFERENCE_FRAME_SIZE = 36
#: Name of the observation group holding the next reference rows as BFM-Zero's backward network
#: reads them (527 values per row; row 1 is the target of the current step).
REFERENCE_GOAL_GROUP = "reference_goal"
#: Values per reference-goal row: the reference's `state` (64: joint angles - q0, joint
#: velocities, projected gravity, WORLD-frame unscaled root angular velocity) then its
#: `privileged_state` (463).
REFERENCE_GOAL_ROW_SIZE = 527


@dataclass(frozen=True)
class ObservationGroup:
    name: str
    #: Values of this group per episode.
    size: int


@dataclass(frozen=True)
class EpisodeSpec:
    """What every episode of a session looks like (`Connected.spec`)."""

    #: Groups in the order their values are concatenated in each observation row.
    observations: tuple[ObservationGroup, ...]
    #: Values per action: 29 joint targets (normalised, or radians in the joint-position mode).
    action_size: int
    #: Control steps per simulated second (50).
    control_hz: float
    #: Most episodes in one batch.
    max_batch: int
    #: Most requests outstanding at once (the server's lanes).
    max_in_flight: int
    #: Seconds the server waits for each answer.
    step_timeout_s: float
    #: Per joint (G1 order): PD target (rad) = default_joint_pos + action_scale * clip(a, -1, 1).
    #: float64 arrays of `action_size` values (empty if the server does not send them).
    default_joint_pos: np.ndarray = field(default_factory=lambda: np.zeros(0))
    action_scale: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: "normalized" (also "": the mapping above) or "joint_position": an action is 29 absolute
    #: joint position targets (rad), the server's PD loop applying the gains below.
    action_mode: str = ""
    #: The PD gains the server applies in this session (G1 order; kp N·m/rad, kd N·m·s/rad) and
    #: each motor's effort limit (N·m): float64 arrays, empty if the server does not send them.
    joint_stiffness: np.ndarray = field(default_factory=lambda: np.zeros(0))
    joint_damping: np.ndarray = field(default_factory=lambda: np.zeros(0))
    effort_limit: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: The body the motion_anchor_* groups relate (the robot's and the reference's anchor):
    #: "torso_link" unless the benchmark names another (also when the server does not say).
    anchor_body: str = ANCHOR_BODY

    @property
    def layout(self) -> ObservationLayout:
        return ObservationLayout(self.observations)


@dataclass(frozen=True)
class EpisodeInfo:
    """An episode that starts now; its first observations come in the next batch."""

    episode_id: int
    #: Empty when the benchmark hides motion names.
    motion: str
    start_s: float
    duration_s: float
    #: Control steps the episode lasts unless it ends early.
    steps: int
    seed: int
    dr_level: int
    #: The run's number: 1 on the first run; higher on each re-run (after a lost connection, or a
    #: run the server lost or gave back, which are not charged to the agent's attempts).
    attempt: int
    #: The whole reference motion (frames x 36, float64) when the benchmark reveals it, else None.
    reference: np.ndarray | None = None
    reference_fps: float = 0.0


@dataclass(frozen=True)
class EpisodeEnd:
    """An episode is over and recorded."""

    episode_id: int
    #: "completed", "fell", "failed" or "timeout".
    status: str
    #: Why, for "failed" and "timeout".
    reason: str
    #: Control steps run.
    steps: int
    #: Metric name -> value, for "completed" and "fell".
    metrics: Mapping[str, float]
    #: The motion of the episode as its EpisodeStart named it (filled in by the client; "" if
    #: the benchmark hides names or the start was not seen).
    motion: str = ""


class ObservationLayout:
    """Where each observation group sits in a row: `layout["reference"]` is a slice.

    `batch.group("reference_goal").reshape(len(batch), -1, REFERENCE_GOAL_ROW_SIZE)` gives the
    reference rows as (episodes, H, 527)."""

    def __init__(self, groups: Sequence[ObservationGroup]) -> None:
        self._slices: dict[str, slice] = {}
        offset = 0
        for g in groups:
            self._slices[g.name] = slice(offset, offset + g.size)
            offset += g.size
        self.groups: tuple[ObservationGroup, ...] = tuple(groups)
        #: Values per row (the sum of the group sizes).
        self.size = offset

    def __getitem__(self, name: str) -> slice:
        try:
            return self._slices[name]
        except KeyError:
            raise KeyError(f"no observation group {name!r} (the session has: {', '.join(self._slices)})") from None

    def get(self, name: str) -> slice | None:
        return self._slices.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._slices

    def __iter__(self) -> Iterator[tuple[str, slice]]:
        return iter(self._slices.items())

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}[{s.start}:{s.stop}]" for n, s in self._slices.items())
        return f"ObservationLayout({parts})"


@dataclass(frozen=True)
class Batch:
    """One control step's observations for every running episode of one request.

    Rows are episodes, in no particular order: match by `episode_ids`, never by position, and
    key per-episode state by episode id (episodes join and leave between batches).
    """

    #: Request number (the client echoes it in the answer).
    step: int
    #: (n,) uint32: the episode of each row.
    episode_ids: np.ndarray
    #: (n,) uint32: control steps since each episode started (0 in its first batch).
    episode_steps: np.ndarray
    #: (n, layout.size) float32: the groups of the spec, concatenated in order.
    observations: np.ndarray
    layout: ObservationLayout

    def __len__(self) -> int:
        return len(self.episode_ids)

    def group(self, name: str) -> np.ndarray:
        """The (n, size) view of one observation group (KeyError naming the groups if absent)."""
        return self.observations[:, self.layout[name]]


class Agent:
    """A tracking agent. Override `act`; the other hooks are optional.

    The client calls `configure` once per connection (again after a reconnect), `reset` when
    episodes start, `act` once per request with the whole batch, and `end` when an episode is
    over. Episode ids stay the same across reconnects of a submission; an episode interrupted
    by a lost connection restarts from its beginning (`EpisodeInfo.attempt` + 1).
    """

    #: Shown in error messages; defaults to the class name.
    name: str = ""

    def configure(self, spec: EpisodeSpec) -> None:
        """The session's layout and limits, before any episode starts."""

    def reset(self, episodes: list[EpisodeInfo]) -> None:
        """Episodes that start now (clear their per-episode state here)."""

    def act(self, batch: Batch) -> np.ndarray:
        """Returns (len(batch), action_size) float32 actions; row i answers batch.episode_ids[i]."""
        raise NotImplementedError(f"{type(self).__name__} must implement act(batch)")

    def end(self, result: EpisodeEnd) -> None:
        """An episode is over (status, reason, steps, metrics)."""


class SupportsAct(Protocol):
    """What `run` needs of an agent: `act` (the other hooks of `Agent` are looked up if present)."""

    def act(self, batch: Batch) -> Any: ...


def agent_name(agent: object) -> str:
    return getattr(agent, "name", "") or type(agent).__name__


def check_actions(
    agent: object,
    actions: object,
    batch: Batch,
    action_size: int,
    send_non_finite: bool = False,
    joint_position: bool = False,
) -> np.ndarray:
    """The agent's actions as a C-contiguous (n, action_size) float32 array, or AgentError.

    Checked on the client because the server would only fail the episodes (wrong size) or
    reject the frame (NaN in JSON), which is much harder to debug. With `send_non_finite`
    (protobuf frames, which carry NaN and infinities) a non-finite value is sent as it is,
    with a warning: the server fails that episode with the reason and the others go on, as
    with the Rust SDK. In the joint-position mode (`joint_position`) an action may also be
    (n, 2 x action_size): the targets, then feed-forward torques (protocol.md §5).
    """
    name = agent_name(agent)
    expected = (len(batch), action_size)
    if actions is None:
        raise AgentError(name, f"act() returned None; expected an array of shape {expected}")
    try:
        raw = np.asarray(actions)
    except Exception as e:  # e.g. a CUDA tensor, ragged lists
        raise AgentError(name, f"act() returned a {type(actions).__name__} that is not an array: {e}") from e
    if raw.dtype.kind not in "fiu":
        raise AgentError(name, f"act() returned an array of dtype {raw.dtype}; expected numbers (float32)")
    if joint_position and raw.shape == (len(batch), 2 * action_size):
        expected = raw.shape
    if raw.shape != expected:
        with_torques = f", or {(len(batch), 2 * action_size)} with feed-forward torques" if joint_position else ""
        raise AgentError(
            name,
            f"act() returned shape {raw.shape}; expected {expected} "
            f"({len(batch)} episodes in the batch x action_size {action_size}{with_torques})",
        )
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(raw, dtype=np.float32)
    finite = np.isfinite(out)
    if not finite.all():
        row, col = np.argwhere(~finite)[0]
        problem = (
            f"act() returned a non-finite action (episode {int(batch.episode_ids[row])}, "
            f"value {int(col)}: {raw[row, col]}) at step {batch.step}"
        )
        if not send_non_finite:
            raise AgentError(name, problem)
        log.warning("agent %s: %s; sent as it is: the server fails that episode", name, problem)
    return out
