"""An exported tracking policy (mjlab / BeyondMimic or holosoma ONNX file) on onnxruntime (CPU):

    policy = OnnxPolicy.from_file("policy.onnx", PolicyOverrides(action_scale=0.5))
    stiffness, damping = policy.config.gains_g1()
    arena_sdk.run(policy.agent(), url, token, benchmark="g1-smoke-robot",
                  joint_stiffness=stiffness, joint_damping=damping)

onnxruntime is imported when a file is loaded (`pip install "arena-sdk[onnx]"`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .g1 import NUM_JOINTS
from .policy_config import PolicyConfig, PolicyOverrides, UnsupportedPolicyError
from .tracking_agent import TrackingPolicyAgent

#: Input names the exporters use for the motion time step (mjlab, holosoma: `time_step`).
TIME_INPUTS = ("time_step",)
#: Output names of the action, in order of preference; else the first output.
ACTION_OUTPUTS = ("actions", "action")

_DTYPES: dict[str, Any] = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


class OnnxPolicy:
    """A loaded policy: its `config` (what the arena needs), `metadata` (the file's
    metadata_props) and `infer` (one batch through the model)."""

    def __init__(self, path: Path, session: Any, config: PolicyConfig, io: _ModelIO) -> None:
        self.path = path
        self.session = session
        self.config = config
        self.io = io
        self.metadata: Mapping[str, str] = dict(session.get_modelmeta().custom_metadata_map)

    @classmethod
    def from_file(cls, path: str | Path, overrides: PolicyOverrides | None = None, *, threads: int = 0) -> OnnxPolicy:
        """Loads the model and its metadata. Raises UnsupportedPolicyError listing every problem
        (unknown term or joint, missing metadata key, an input the runner cannot feed), and
        ImportError without onnxruntime. `threads`: onnxruntime's intra-op threads (0: its own)."""
        path = Path(path)
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise ImportError('running ONNX policies needs onnxruntime: pip install "arena-sdk[onnx]"') from e
        if not path.is_file():
            raise FileNotFoundError(f"no file {path}")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        try:
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime's own exception types: invalid file, unknown operator
            raise UnsupportedPolicyError(str(path), [f"onnxruntime cannot load it: {e}"]) from e
        metadata = session.get_modelmeta().custom_metadata_map
        problems: list[str] = []
        config = None
        try:
            config = PolicyConfig.from_metadata(metadata, overrides, str(path))
        except UnsupportedPolicyError as e:
            problems += e.problems
        io = _ModelIO.inspect(session, config, problems)
        if problems or config is None or io is None:
            raise UnsupportedPolicyError(str(path), problems)
        return cls(path, session, config, io)

    def infer(self, obs: np.ndarray, time_step: np.ndarray) -> np.ndarray:
        """(n, N) observations and (n, 1) time steps (episode step + 1) -> (n, 29) raw actions (policy order)."""
        io = self.io
        obs = np.ascontiguousarray(obs, dtype=io.obs_dtype)
        feed: dict[str, np.ndarray] = {}
        if io.batched:
            feed[io.obs_name] = obs
            if io.time_name:
                feed[io.time_name] = time_step.astype(io.time_dtype).reshape(-1, 1)
            return np.asarray(self.session.run([io.action_name], feed)[0]).reshape(len(obs), -1)
        rows = []
        for i in range(len(obs)):  # the model's batch dimension is fixed at 1
            feed[io.obs_name] = obs[i : i + 1]
            if io.time_name:
                feed[io.time_name] = time_step[i : i + 1].astype(io.time_dtype).reshape(1, 1)
            rows.append(np.asarray(self.session.run([io.action_name], feed)[0]).reshape(1, -1))
        return np.concatenate(rows, axis=0)

    def agent(self, name: str = "") -> TrackingPolicyAgent:
        """An Agent running this policy (a fresh one per run: it keeps per-episode state)."""
        return TrackingPolicyAgent(self.config, self.infer, name or self.path.stem)

    def describe(self) -> str:
        io = self.io
        batch = "dynamic (one call per batch)" if io.batched else "1 (one call per episode)"
        inputs = f"{io.obs_name} [batch, {self.config.observation_size}]"
        if io.time_name:
            inputs += f", {io.time_name} [batch, 1] (the episode step + 1: the command's frame)"
        return f"{self.path}\nmodel: inputs {inputs}; output {io.action_name}; batch {batch}\n{self.config.describe()}"


class _ModelIO:
    """Which inputs and output the runner uses, their dtypes, and whether batches are dynamic."""

    def __init__(
        self, obs_name: str, obs_dtype: Any, time_name: str, time_dtype: Any, action_name: str, batched: bool
    ) -> None:
        self.obs_name = obs_name
        self.obs_dtype = obs_dtype
        self.time_name = time_name
        self.time_dtype = time_dtype
        self.action_name = action_name
        self.batched = batched

    @classmethod
    def inspect(cls, session: Any, config: PolicyConfig | None, problems: list[str]) -> _ModelIO | None:
        inputs = {i.name: i for i in session.get_inputs()}
        outputs = [o.name for o in session.get_outputs()]
        time_names = [n for n in inputs if n in TIME_INPUTS]
        obs_names = [n for n in inputs if n not in TIME_INPUTS]
        if len(obs_names) != 1 or len(time_names) > 1:
            problems.append(
                f"expected one observation input (and optionally time_step); the model has {', '.join(inputs)}"
            )
            return None
        obs = inputs[obs_names[0]]
        before = len(problems)
        obs_dtype = _DTYPES.get(obs.type)
        if obs_dtype is None or obs_dtype in (np.int64, np.int32):
            problems.append(f"input {obs.name!r} has type {obs.type}; expected floating point")
        shape = list(obs.shape)
        if len(shape) != 2:
            problems.append(f"input {obs.name!r} has shape {shape}; expected [batch, observation size]")
            return None
        batch, size = shape
        batched = not isinstance(batch, int)
        if isinstance(batch, int) and batch != 1:
            problems.append(f"input {obs.name!r} has a fixed batch of {batch}; the runner feeds 1 or a dynamic batch")
        if config is not None and isinstance(size, int) and size != config.observation_size:
            sizes = ", ".join(f"{t.name} {t.size}" for t in config.observation_terms)
            problems.append(
                f"input {obs.name!r} takes {size} values; the policy's terms make {config.observation_size} ({sizes})"
            )
        time_name: str = ""
        time_dtype: Any = np.float32
        if time_names:
            t = inputs[time_names[0]]
            time_name = t.name
            time_dtype = _DTYPES.get(t.type, np.float32)
            if t.type not in _DTYPES:
                problems.append(f"input {t.name!r} has type {t.type}; expected a number")
            if len(t.shape) != 2:
                problems.append(f"input {t.name!r} has shape {list(t.shape)}; expected [batch, 1]")
            elif isinstance(t.shape[0], int):
                batched = False  # a time_step fixed at batch 1 forces one call per episode
        action_name = next((n for n in ACTION_OUTPUTS if n in outputs), outputs[0] if outputs else "")
        action = next((o for o in session.get_outputs() if o.name == action_name), None)
        if action is None:
            problems.append("the model has no output")
        elif _DTYPES.get(action.type) not in (np.float32, np.float64, np.float16):
            problems.append(f"output {action_name!r} has type {action.type}; expected floating point actions")
        elif action.shape and isinstance(action.shape[-1], int) and action.shape[-1] != NUM_JOINTS:
            problems.append(f"output {action_name!r} has {action.shape[-1]} values per row, expected {NUM_JOINTS}")
        if len(problems) > before:
            return None
        return cls(obs.name, obs_dtype, time_name, time_dtype, action_name, batched)
