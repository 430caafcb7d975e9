"""Python SDK of MimicArena: run a humanoid motion-tracking agent against an arena server.

    import arena_sdk

    class MyAgent(arena_sdk.Agent):
        def act(self, batch):
            return numpy.zeros((len(batch), 29), numpy.float32)

    summary = arena_sdk.run(MyAgent(), "http://127.0.0.1:8080", token, benchmark="g1-smoke")

Exported mjlab / BeyondMimic / holosoma policies run with `arena_sdk.OnnxPolicy` (needs
onnxruntime: the `onnx` extra) or `arena-agent onnx`; docs/bring-your-policy.md.

docs/sdk-python.md has the details; docs/protocol.md the protocol underneath.
"""

from .agent import (
    REFERENCE_FRAME_SIZE,
    REFERENCE_GOAL_GROUP,
    REFERENCE_GOAL_ROW_SIZE,
    REFERENCE_GROUP,
    Agent,
    Batch,
    EpisodeEnd,
    EpisodeInfo,
    EpisodeSpec,
    ObservationGroup,
    ObservationLayout,
    SupportsAct,
)
from .client import (
    PROTOCOL_VERSION,
    Connected,
    EpisodesStarted,
    Event,
    PracticeEpisode,
    Reconnecting,
    RunSummary,
    ServerError,
    fetch_spec,
    run,
)
from .errors import FATAL_CODES, AgentError, ArenaError, ProtocolError, RefusedError, UnreachableError
from .onnx_policy import OnnxPolicy
from .policy_config import PolicyConfig, PolicyOverrides, UnsupportedPolicyError
from .tracking_agent import TrackingPolicyAgent

__version__ = "0.1.0"

__all__ = [
    "FATAL_CODES",
    "PROTOCOL_VERSION",
    "REFERENCE_FRAME_SIZE",
    "REFERENCE_GOAL_GROUP",
    "REFERENCE_GOAL_ROW_SIZE",
    "REFERENCE_GROUP",
    "Agent",
    "AgentError",
    "ArenaError",
    "Batch",
    "Connected",
    "EpisodeEnd",
    "EpisodeInfo",
    "EpisodeSpec",
    "EpisodesStarted",
    "Event",
    "ObservationGroup",
    "ObservationLayout",
    "OnnxPolicy",
    "PolicyConfig",
    "PolicyOverrides",
    "PracticeEpisode",
    "ProtocolError",
    "Reconnecting",
    "RefusedError",
    "RunSummary",
    "ServerError",
    "SupportsAct",
    "TrackingPolicyAgent",
    "UnreachableError",
    "UnsupportedPolicyError",
    "fetch_spec",
    "run",
]
