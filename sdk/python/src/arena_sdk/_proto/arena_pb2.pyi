from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Envelope(_message.Message):
    __slots__ = ("connect", "connected", "reset_episode", "episode_start", "get_action", "action", "episode_end", "heartbeat", "error", "disconnect")
    CONNECT_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    RESET_EPISODE_FIELD_NUMBER: _ClassVar[int]
    EPISODE_START_FIELD_NUMBER: _ClassVar[int]
    GET_ACTION_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    EPISODE_END_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DISCONNECT_FIELD_NUMBER: _ClassVar[int]
    connect: Connect
    connected: Connected
    reset_episode: ResetEpisode
    episode_start: EpisodeStart
    get_action: GetAction
    action: Action
    episode_end: EpisodeEnd
    heartbeat: Heartbeat
    error: Error
    disconnect: Disconnect
    def __init__(self, connect: _Optional[_Union[Connect, _Mapping]] = ..., connected: _Optional[_Union[Connected, _Mapping]] = ..., reset_episode: _Optional[_Union[ResetEpisode, _Mapping]] = ..., episode_start: _Optional[_Union[EpisodeStart, _Mapping]] = ..., get_action: _Optional[_Union[GetAction, _Mapping]] = ..., action: _Optional[_Union[Action, _Mapping]] = ..., episode_end: _Optional[_Union[EpisodeEnd, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., disconnect: _Optional[_Union[Disconnect, _Mapping]] = ...) -> None: ...

class Connect(_message.Message):
    __slots__ = ("protocol_version", "agent_name", "token", "mode", "benchmark", "submission_id", "max_batch", "phase", "joint_stiffness", "joint_damping", "gain_preset", "reference_goal_once", "connect_key", "previous_session_id")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    JOINT_STIFFNESS_FIELD_NUMBER: _ClassVar[int]
    JOINT_DAMPING_FIELD_NUMBER: _ClassVar[int]
    GAIN_PRESET_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_GOAL_ONCE_FIELD_NUMBER: _ClassVar[int]
    CONNECT_KEY_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    agent_name: str
    token: str
    mode: str
    benchmark: str
    submission_id: str
    max_batch: int
    phase: str
    joint_stiffness: _containers.RepeatedScalarFieldContainer[float]
    joint_damping: _containers.RepeatedScalarFieldContainer[float]
    gain_preset: str
    reference_goal_once: bool
    connect_key: str
    previous_session_id: str
    def __init__(self, protocol_version: _Optional[int] = ..., agent_name: _Optional[str] = ..., token: _Optional[str] = ..., mode: _Optional[str] = ..., benchmark: _Optional[str] = ..., submission_id: _Optional[str] = ..., max_batch: _Optional[int] = ..., phase: _Optional[str] = ..., joint_stiffness: _Optional[_Iterable[float]] = ..., joint_damping: _Optional[_Iterable[float]] = ..., gain_preset: _Optional[str] = ..., reference_goal_once: _Optional[bool] = ..., connect_key: _Optional[str] = ..., previous_session_id: _Optional[str] = ...) -> None: ...

class Connected(_message.Message):
    __slots__ = ("session_id", "protocol_version", "heartbeat_interval_s", "heartbeat_timeout_s", "submission_id", "benchmark", "episodes_total", "episodes_remaining", "spec")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    EPISODES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EPISODES_REMAINING_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    protocol_version: int
    heartbeat_interval_s: float
    heartbeat_timeout_s: float
    submission_id: str
    benchmark: str
    episodes_total: int
    episodes_remaining: int
    spec: EpisodeSpec
    def __init__(self, session_id: _Optional[str] = ..., protocol_version: _Optional[int] = ..., heartbeat_interval_s: _Optional[float] = ..., heartbeat_timeout_s: _Optional[float] = ..., submission_id: _Optional[str] = ..., benchmark: _Optional[str] = ..., episodes_total: _Optional[int] = ..., episodes_remaining: _Optional[int] = ..., spec: _Optional[_Union[EpisodeSpec, _Mapping]] = ...) -> None: ...

class EpisodeSpec(_message.Message):
    __slots__ = ("observations", "action_size", "control_hz", "max_batch", "max_in_flight", "step_timeout_s", "default_joint_pos", "action_scale", "action_mode", "joint_stiffness", "joint_damping", "effort_limit", "anchor_body", "reference_goal_once")
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    ACTION_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONTROL_HZ_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    STEP_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_JOINT_POS_FIELD_NUMBER: _ClassVar[int]
    ACTION_SCALE_FIELD_NUMBER: _ClassVar[int]
    ACTION_MODE_FIELD_NUMBER: _ClassVar[int]
    JOINT_STIFFNESS_FIELD_NUMBER: _ClassVar[int]
    JOINT_DAMPING_FIELD_NUMBER: _ClassVar[int]
    EFFORT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    ANCHOR_BODY_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_GOAL_ONCE_FIELD_NUMBER: _ClassVar[int]
    observations: _containers.RepeatedCompositeFieldContainer[ObservationGroup]
    action_size: int
    control_hz: float
    max_batch: int
    max_in_flight: int
    step_timeout_s: float
    default_joint_pos: _containers.RepeatedScalarFieldContainer[float]
    action_scale: _containers.RepeatedScalarFieldContainer[float]
    action_mode: str
    joint_stiffness: _containers.RepeatedScalarFieldContainer[float]
    joint_damping: _containers.RepeatedScalarFieldContainer[float]
    effort_limit: _containers.RepeatedScalarFieldContainer[float]
    anchor_body: str
    reference_goal_once: bool
    def __init__(self, observations: _Optional[_Iterable[_Union[ObservationGroup, _Mapping]]] = ..., action_size: _Optional[int] = ..., control_hz: _Optional[float] = ..., max_batch: _Optional[int] = ..., max_in_flight: _Optional[int] = ..., step_timeout_s: _Optional[float] = ..., default_joint_pos: _Optional[_Iterable[float]] = ..., action_scale: _Optional[_Iterable[float]] = ..., action_mode: _Optional[str] = ..., joint_stiffness: _Optional[_Iterable[float]] = ..., joint_damping: _Optional[_Iterable[float]] = ..., effort_limit: _Optional[_Iterable[float]] = ..., anchor_body: _Optional[str] = ..., reference_goal_once: _Optional[bool] = ...) -> None: ...

class ObservationGroup(_message.Message):
    __slots__ = ("name", "size")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class ResetEpisode(_message.Message):
    __slots__ = ("motion", "start_s", "duration_s", "seed")
    MOTION_FIELD_NUMBER: _ClassVar[int]
    START_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    motion: str
    start_s: float
    duration_s: float
    seed: int
    def __init__(self, motion: _Optional[str] = ..., start_s: _Optional[float] = ..., duration_s: _Optional[float] = ..., seed: _Optional[int] = ...) -> None: ...

class EpisodeStart(_message.Message):
    __slots__ = ("episodes",)
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    episodes: _containers.RepeatedCompositeFieldContainer[EpisodeInfo]
    def __init__(self, episodes: _Optional[_Iterable[_Union[EpisodeInfo, _Mapping]]] = ...) -> None: ...

class EpisodeInfo(_message.Message):
    __slots__ = ("episode_id", "motion", "start_s", "duration_s", "steps", "seed", "dr_level", "attempt", "reference", "reference_goal")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    MOTION_FIELD_NUMBER: _ClassVar[int]
    START_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    DR_LEVEL_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_GOAL_FIELD_NUMBER: _ClassVar[int]
    episode_id: int
    motion: str
    start_s: float
    duration_s: float
    steps: int
    seed: int
    dr_level: int
    attempt: int
    reference: Reference
    reference_goal: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, episode_id: _Optional[int] = ..., motion: _Optional[str] = ..., start_s: _Optional[float] = ..., duration_s: _Optional[float] = ..., steps: _Optional[int] = ..., seed: _Optional[int] = ..., dr_level: _Optional[int] = ..., attempt: _Optional[int] = ..., reference: _Optional[_Union[Reference, _Mapping]] = ..., reference_goal: _Optional[_Iterable[float]] = ...) -> None: ...

class Reference(_message.Message):
    __slots__ = ("fps", "frames", "qpos")
    FPS_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    QPOS_FIELD_NUMBER: _ClassVar[int]
    fps: float
    frames: int
    qpos: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, fps: _Optional[float] = ..., frames: _Optional[int] = ..., qpos: _Optional[_Iterable[float]] = ...) -> None: ...

class GetAction(_message.Message):
    __slots__ = ("step", "observations")
    STEP_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    step: int
    observations: _containers.RepeatedCompositeFieldContainer[EpisodeObservation]
    def __init__(self, step: _Optional[int] = ..., observations: _Optional[_Iterable[_Union[EpisodeObservation, _Mapping]]] = ...) -> None: ...

class EpisodeObservation(_message.Message):
    __slots__ = ("episode_id", "episode_step", "values")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_STEP_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    episode_id: int
    episode_step: int
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, episode_id: _Optional[int] = ..., episode_step: _Optional[int] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class Action(_message.Message):
    __slots__ = ("step", "actions")
    STEP_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    step: int
    actions: _containers.RepeatedCompositeFieldContainer[EpisodeAction]
    def __init__(self, step: _Optional[int] = ..., actions: _Optional[_Iterable[_Union[EpisodeAction, _Mapping]]] = ...) -> None: ...

class EpisodeAction(_message.Message):
    __slots__ = ("episode_id", "values")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    episode_id: int
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, episode_id: _Optional[int] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class EpisodeEnd(_message.Message):
    __slots__ = ("episode_id", "status", "reason", "steps", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    episode_id: int
    status: str
    reason: str
    steps: int
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, episode_id: _Optional[int] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., steps: _Optional[int] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("time",)
    TIME_FIELD_NUMBER: _ClassVar[int]
    time: float
    def __init__(self, time: _Optional[float] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message", "step", "limit", "resets_at", "submission_status", "episodes_scored", "episodes_failed")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    RESETS_AT_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_STATUS_FIELD_NUMBER: _ClassVar[int]
    EPISODES_SCORED_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FAILED_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    step: int
    limit: int
    resets_at: str
    submission_status: str
    episodes_scored: int
    episodes_failed: int
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., step: _Optional[int] = ..., limit: _Optional[int] = ..., resets_at: _Optional[str] = ..., submission_status: _Optional[str] = ..., episodes_scored: _Optional[int] = ..., episodes_failed: _Optional[int] = ...) -> None: ...

class Disconnect(_message.Message):
    __slots__ = ("reason", "submission_status", "episodes_scored", "episodes_failed")
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_STATUS_FIELD_NUMBER: _ClassVar[int]
    EPISODES_SCORED_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FAILED_FIELD_NUMBER: _ClassVar[int]
    reason: str
    submission_status: str
    episodes_scored: int
    episodes_failed: int
    def __init__(self, reason: _Optional[str] = ..., submission_status: _Optional[str] = ..., episodes_scored: _Optional[int] = ..., episodes_failed: _Optional[int] = ...) -> None: ...
