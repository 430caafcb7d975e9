"""Rebuilding the `reference_goal` group of a session that sends each row once.

docs/protocol.md §5, `connect.reference_goal_once`: row j of an episode (the reference at
start + j/50 s) depends on the episode alone, and step t's rows j = t + 1 … t + H share H − 1
with step t − 1's. So the server sends rows 1 … H − 1 with the episode's start and, in each
request, only the newest row t + H. The client keeps each running episode's last H rows and
gives its agent the whole group, so agents see the same values either way. As the Rust SDK's
`arena_sdk::goal_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .agent import REFERENCE_GOAL_GROUP, REFERENCE_GOAL_ROW_SIZE, ObservationLayout
from .errors import ProtocolError

W = REFERENCE_GOAL_ROW_SIZE


class _Episode:
    __slots__ = ("rows", "last_step")

    def __init__(self, first_rows: np.ndarray, horizon: int) -> None:
        # Rows oldest first; the last is filled by the first request.
        self.rows = np.empty(horizon * W, np.float32)
        self.rows[: (horizon - 1) * W] = first_rows
        self.last_step: int | None = None


class GoalRowsOnce:
    """Each running episode's `reference_goal` rows, as the session has sent them."""

    def __init__(self, layout: ObservationLayout) -> None:
        group = layout.get(REFERENCE_GOAL_GROUP)
        if group is None or group.stop == group.start:
            raise ProtocolError("the server's spec sends reference_goal rows once but announces no reference_goal group")
        self.group = group
        self.horizon = (group.stop - group.start) // W
        #: Values of a row as the server sends it: the layout's less H − 1 goal rows.
        self.sent_row_size = layout.size - (self.horizon - 1) * W
        # None: the episode's start carried no rows (it must fail before a request holds it).
        self._episodes: dict[int, _Episode | None] = {}

    def start(self, episode_id: int, first_rows: Sequence[float]) -> None:
        """An episode starts (again, after a lost connection): its rows 1 … H − 1. An episode
        that fails before its first step (it could not be set up) comes without them."""
        expected = (self.horizon - 1) * W
        if len(first_rows) == 0 and expected > 0:
            self._episodes[episode_id] = None
            return
        if len(first_rows) != expected:
            raise ProtocolError(
                f"episode {episode_id}'s start carries {len(first_rows)} reference_goal values; a horizon of "
                f"{self.horizon} needs {expected} (rows 1 … {self.horizon - 1})"
            )
        self._episodes[episode_id] = _Episode(np.asarray(first_rows, np.float32), self.horizon)

    def end(self, episode_id: int) -> None:
        """An episode ended: its rows are dropped."""
        self._episodes.pop(episode_id, None)

    def expand(self, episode_id: int, step: int, sent: np.ndarray, out: np.ndarray) -> None:
        """Writes into `out` (a whole row) the row `sent` (as sent) with its group rebuilt."""
        if episode_id not in self._episodes:
            raise ProtocolError(f"episode {episode_id} is in a request but its episode_start was not received")
        episode = self._episodes[episode_id]
        if episode is None:
            raise ProtocolError(
                f"episode {episode_id} is in a request but its episode_start carried no reference_goal rows"
            )
        rows = episode.rows
        if episode.last_step is None and step == 0:
            pass
        elif episode.last_step is not None and step == episode.last_step + 1:
            # The oldest row leaves the horizon.
            rows[:-W] = rows[W:]
        else:
            after = "its start" if episode.last_step is None else f"step {episode.last_step}"
            raise ProtocolError(
                f"episode {episode_id}: a request at episode step {step} after {after}: each reference_goal row "
                "is sent once, so every step must be received in turn"
            )
        g = self.group.start
        rows[-W:] = sent[g : g + W]
        episode.last_step = step
        out[:g] = sent[:g]
        out[g : self.group.stop] = rows
        out[self.group.stop :] = sent[g + W :]
