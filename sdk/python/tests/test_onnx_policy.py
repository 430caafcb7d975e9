"""The bring-your-policy runner: ONNX policies built here (a MatMul + Add graph whose actions can be
worked out by hand) with metadata in the mjlab / BeyondMimic and the holosoma conventions. Checks
the metadata reading, the joint reordering, the observation vector assembled from the arena's
robot-interface groups, the targets and gains sent (against a small fake server speaking the
protocol), the refusals, and, when the server has it, real `g1-smoke-robot` submissions: through
the CLI with the benchmark's preset gains, and through `run` with gains of the policy's own (each
convention, each transport), checking the gains the session announced and the observation vector
the model was fed at every request."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import SDK_DIR, Server

onnx = pytest.importorskip("onnx", reason="onnx is not installed (python/requirements-dev.txt)")
pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (python/requirements-dev.txt)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import arena_sdk  # noqa: E402
from arena_sdk import (  # noqa: E402
    Batch,
    EpisodeSpec,
    ObservationGroup,
    OnnxPolicy,
    PolicyConfig,
    PolicyOverrides,
    ProtocolError,
    RefusedError,
    UnsupportedPolicyError,
    fetch_spec,
    run,
)
from arena_sdk._proto import arena_pb2 as pb  # noqa: E402
from arena_sdk.g1 import JOINT_NAMES, ROBOT_GROUPS  # noqa: E402
from arena_sdk.observation_terms import projected_gravity  # noqa: E402
from arena_sdk.transports import envelope_to_json  # noqa: E402

J = 29
# The policy's joint order: the G1's, shuffled. PERM[p] is the G1 index of the policy's joint p.
PERM = np.random.default_rng(3).permutation(J)
POLICY_JOINTS = [JOINT_NAMES[i] for i in PERM]
# Per-joint values in the POLICY's order, exact at mjlab's 3 decimals.
KP = 20.0 + np.arange(J)
KD = 1.0 + 0.5 * np.arange(J)
DEFAULT = np.round(0.05 * np.arange(J) - 0.4, 3)
SCALE = np.round(0.1 + 0.01 * np.arange(J), 3)

# The arena's groups for one episode, G1 order (the numbers the expected vectors are built from).
Q = 0.01 * np.arange(J) - 0.1
DQ = 0.1 * np.arange(J)
TAU = 100.0 + np.arange(J)
QUAT = np.array([np.cos(np.pi / 4), np.sin(np.pi / 4), 0.0, 0.0])  # 90° about x
GYRO = np.array([0.1, 0.2, 0.3])
ACC = np.array([0.0, 9.81, 0.0])
REF_Q = 0.5 + 0.01 * np.arange(J)
REF_DQ = -0.2 * np.arange(J)
ANCHOR_POS = np.array([1.0, 2.0, 3.0])
ANCHOR_ORI = np.array([0.9, 0.1, -0.1, 0.9, 0.2, 0.3])
LIN_VEL = np.array([0.4, 0.5, 0.6])
POSE_W = np.array([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
GROUP_VALUES = {
    "imu": np.concatenate([QUAT, GYRO, ACC]),
    "imu_torso": np.concatenate([[1.0, 0, 0, 0], GYRO * 2, ACC * 2]),
    "motors": np.concatenate([Q, DQ, TAU]),
    "base_lin_vel": LIN_VEL,
    "motion_command": np.concatenate([REF_Q, REF_DQ]),
    "motion_anchor_pos_b": ANCHOR_POS,
    "motion_anchor_ori_b": ANCHOR_ORI,
    "motion_anchor_pose_w": POSE_W,
}
# Not the docs' order: offsets must come from the spec.
GROUP_ORDER = [
    "motors",
    "motion_anchor_ori_b",
    "imu",
    "imu_torso",
    "motion_command",
    "base_lin_vel",
    "motion_anchor_pos_b",
    "motion_anchor_pose_w",
]
MJLAB_TERMS = "command,motion_anchor_pos_b,motion_anchor_ori_b,base_lin_vel,base_ang_vel,joint_pos,joint_vel,actions"
MJLAB_SIZE = 58 + 3 + 6 + 3 + 3 + 29 + 29 + 29


def csv(values) -> str:
    return ",".join(f"{v:.3f}" for v in values)  # mjlab's list_to_csv_str


def mjlab_metadata(**changes: str | None) -> dict[str, str]:
    metadata = {
        "run_path": "team/project/run",
        "joint_names": ",".join(POLICY_JOINTS),
        "joint_stiffness": csv(KP),
        "joint_damping": csv(KD),
        "default_joint_pos": csv(DEFAULT),
        "command_names": "motion",
        "observation_names": MJLAB_TERMS,
        "action_scale": csv(SCALE),
        "anchor_body_name": "torso_link",
        "body_names": "pelvis,torso_link",
    }
    metadata.update(changes)  # type: ignore[arg-type]
    return {k: v for k, v in metadata.items() if v is not None}


EFFORT = 50.0 + 2.0 * np.arange(J)  # holosoma's dof_effort_limit_list, policy order


def holosoma_metadata(
    history: int = 1,
    terms: Mapping[str, dict] | None = None,
    ref_body: str = "torso_link",
    *,
    kp: np.ndarray = KP,
    kd: np.ndarray = KD,
    default: np.ndarray = DEFAULT,
    effort: np.ndarray = EFFORT,
) -> dict:
    """holosoma's metadata; kp, kd, default and effort per joint in the POLICY's order."""
    terms = terms or {
        "motion_command": {"scale": 1.0, "noise": 0.0, "clip": None},
        "motion_ref_ori_b": {"scale": 1.0, "noise": 0.05, "clip": None},
        "base_ang_vel": {"scale": 1.0, "noise": 0.2, "clip": None},
        "dof_pos": {"scale": 1.0, "noise": 0.01, "clip": None},
        "dof_vel": {"scale": 0.5, "noise": 0.5, "clip": None},
        "actions": {"scale": 1.0, "noise": 0.0, "clip": None},
    }
    experiment = {
        "robot": {
            "dof_names": POLICY_JOINTS,
            "dof_effort_limit_list": np.asarray(effort, float).tolist(),
            "init_state": {"default_joint_angles": {n: float(d) for n, d in zip(POLICY_JOINTS, default)}},
            "control": {
                "control_type": "P",
                "action_scale": 0.25,
                "action_scales_by_effort_limit_over_p_gain": True,
                "clip_actions": True,
                "action_clip_value": 100.0,
            },
        },
        "observation": {
            "groups": {"actor_obs": {"concatenate": True, "history_length": history, "terms": terms}},
            "clip_observations": 100.0,
        },
        "command": {"setup_terms": {"motion_command": {"params": {"motion_config": {"body_name_ref": [ref_body]}}}}},
    }
    values = {
        "dof_names": POLICY_JOINTS,
        "kp": np.asarray(kp, float).tolist(),
        "kd": np.asarray(kd, float).tolist(),
        "command_ranges": None,
        "robot_urdf": "<robot name='g1'/>",
        "experiment_config": experiment,
        "iteration": 1000,
    }
    return {k: json.dumps(v) for k, v in values.items()}


def build_policy(
    path: Path,
    metadata: Mapping[str, str],
    weights: np.ndarray,
    bias: np.ndarray,
    *,
    batch: str | int = "batch",
    time_type: int | None = TensorProto.FLOAT,
    time_coef: float = 0.0,
) -> Path:
    """actions = obs @ weights + bias (+ time_coef * time_step), plus a `joint_pos` output standing
    for the embedded motion (ignored by the runner)."""
    n_obs = weights.shape[0]
    f32 = np.float32
    inputs = [helper.make_tensor_value_info("obs", TensorProto.FLOAT, [batch, n_obs])]
    outputs = [helper.make_tensor_value_info("actions", TensorProto.FLOAT, [batch, J])]
    inits = [
        numpy_helper.from_array(weights.astype(f32), "W"),
        numpy_helper.from_array(bias.reshape(1, J).astype(f32), "b"),
    ]
    nodes = [helper.make_node("MatMul", ["obs", "W"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["pre"])]
    if time_type is None:
        nodes.append(helper.make_node("Identity", ["pre"], ["actions"]))
    else:
        inputs.append(helper.make_tensor_value_info("time_step", time_type, [batch, 1]))
        inits.append(numpy_helper.from_array(np.full((1, J), time_coef, f32), "c"))
        nodes += [
            helper.make_node("Cast", ["time_step"], ["t"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["t", "c"], ["tc"]),
            helper.make_node("Add", ["pre", "tc"], ["actions"]),
            helper.make_node("Mul", ["t", "c"], ["joint_pos"]),
        ]
        outputs.append(helper.make_tensor_value_info("joint_pos", TensorProto.FLOAT, [batch, J]))
    graph = helper.make_graph(nodes, "policy", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    for key, value in metadata.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def selector(n_obs: int, start: int) -> np.ndarray:
    """Weights copying obs[start : start + 29] into the 29 actions."""
    w = np.zeros((n_obs, J))
    w[start + np.arange(J), np.arange(J)] = 1.0
    return w


def robot_spec(
    groups: list[str] = GROUP_ORDER, action_mode: str = "joint_position", anchor_body: str = "torso_link"
) -> EpisodeSpec:
    return EpisodeSpec(
        observations=tuple(ObservationGroup(g, ROBOT_GROUPS[g]) for g in groups),
        action_size=J,
        control_hz=50.0,
        max_batch=4,
        max_in_flight=1,
        step_timeout_s=1.0,
        action_mode=action_mode,
        joint_stiffness=np.zeros(J),
        joint_damping=np.zeros(J),
        effort_limit=np.full(J, 88.0),
        anchor_body=anchor_body,
    )


def robot_row(spec: EpisodeSpec, shift: float = 0.0) -> np.ndarray:
    """One episode's values: GROUP_VALUES (+ shift on the joint positions) in the spec's order."""
    parts = []
    for g in spec.observations:
        values = GROUP_VALUES[g.name].copy()
        if g.name == "motors":
            values[:J] += shift
        parts.append(values)
    return np.concatenate(parts).astype(np.float32)


def batch_of(spec: EpisodeSpec, ids: list[int], steps: list[int], shifts: list[float], step: int = 0) -> Batch:
    rows = np.stack([robot_row(spec, s) for s in shifts])
    return Batch(step, np.array(ids, np.uint32), np.array(steps, np.uint32), rows, spec.layout)


def f32(x) -> np.ndarray:
    return np.asarray(x, np.float32).astype(np.float64)


# --- reading metadata, joint order, observation vector ------------------------------------------


def test_mjlab_metadata_and_joint_order() -> None:
    config = PolicyConfig.from_metadata(mjlab_metadata())
    assert config.convention == "mjlab"
    assert config.joint_names == tuple(POLICY_JOINTS)
    assert [t.name for t in config.observation_terms] == MJLAB_TERMS.split(",")
    assert config.observation_size == MJLAB_SIZE
    assert config.anchor_body == "torso_link"
    np.testing.assert_allclose(config.default_joint_pos, DEFAULT)
    np.testing.assert_allclose(config.action_scale, SCALE)
    # Gains go to Connect in the G1 order: G1 joint PERM[p] gets the policy's joint p's gain.
    stiffness, damping = config.gains_g1()  # type: ignore[misc]
    for p in range(J):
        assert stiffness[PERM[p]] == KP[p] and damping[PERM[p]] == KD[p]
    assert stiffness[JOINT_NAMES.index(POLICY_JOINTS[0])] == KP[0]
    # A scalar action scale (mjlab writes a float when the scale is one number) applies to all.
    scalar = PolicyConfig.from_metadata(mjlab_metadata(action_scale="0.5"))
    np.testing.assert_allclose(scalar.action_scale, np.full(J, 0.5))


def test_mjlab_observation_vector_from_the_arena_groups() -> None:
    config = PolicyConfig.from_metadata(mjlab_metadata())
    agent = arena_sdk.TrackingPolicyAgent(config, lambda obs, t: np.zeros((len(obs), J)))
    spec = robot_spec()
    agent.configure(spec)
    previous = np.linspace(-1, 1, J)
    rows = np.stack([robot_row(spec)])
    obs = agent.builder.build(rows, previous.reshape(1, J).astype(np.float32))
    expected = np.concatenate(
        [
            REF_Q[PERM],  # command: reference joint positions, then velocities, POLICY order
            REF_DQ[PERM],
            ANCHOR_POS,
            ANCHOR_ORI,
            LIN_VEL,
            GYRO,  # base_ang_vel: the pelvis gyro, imu[4:7]
            f32(Q)[PERM] - DEFAULT,  # joint_pos: relative to the policy's default pose
            DQ[PERM],
            previous,
        ]
    )
    assert obs.shape == (1, MJLAB_SIZE) and obs.dtype == np.float32
    np.testing.assert_allclose(obs[0], expected, atol=1e-6)


def test_projected_gravity_and_velocity_task_names() -> None:
    # 90° about x: gravity (0, 0, -1) in the world is (0, -1, 0) in the body frame.
    np.testing.assert_allclose(projected_gravity(QUAT.reshape(1, 4)), [[0.0, -1.0, 0.0]], atol=1e-7)
    np.testing.assert_allclose(projected_gravity(np.array([[2.0, 0, 0, 0]])), [[0.0, 0.0, -1.0]])
    config = PolicyConfig.from_metadata(
        mjlab_metadata(observation_names="projected_gravity,base_ang_vel,joint_vel", anchor_body_name=None)
    )
    agent = arena_sdk.TrackingPolicyAgent(config, lambda obs, t: np.zeros((len(obs), J)))
    spec = robot_spec(["imu", "motors"])  # no command or anchor terms: two groups suffice
    agent.configure(spec)
    obs = agent.builder.build(np.stack([robot_row(spec)]), np.zeros((1, J), np.float32))
    np.testing.assert_allclose(obs[0], np.concatenate([[0.0, -1.0, 0.0], GYRO, DQ[PERM]]), atol=1e-6)


def test_holosoma_metadata_terms_in_alphabetical_order() -> None:
    config = PolicyConfig.from_metadata(holosoma_metadata())
    assert config.convention == "holosoma"
    assert config.joint_names == tuple(POLICY_JOINTS)
    # holosoma concatenates terms sorted by name, whatever the config's order.
    names = [t.name for t in config.observation_terms]
    assert names == ["actions", "base_ang_vel", "dof_pos", "dof_vel", "motion_command", "motion_ref_ori_b"]
    np.testing.assert_allclose(config.default_joint_pos, DEFAULT)
    # action_scales_by_effort_limit_over_p_gain: 0.25 * effort / kp per joint.
    np.testing.assert_allclose(config.action_scale, 0.25 * EFFORT / KP)
    assert config.action_clip == 100.0 and config.anchor_body == "torso_link"
    agent = arena_sdk.TrackingPolicyAgent(config, lambda obs, t: np.zeros((len(obs), J)))
    spec = robot_spec()
    agent.configure(spec)
    previous = np.full((1, J), 0.25, np.float32)
    obs = agent.builder.build(np.stack([robot_row(spec)]), previous)
    expected = np.concatenate(
        [previous[0], GYRO, f32(Q)[PERM] - DEFAULT, 0.5 * DQ[PERM], REF_Q[PERM], REF_DQ[PERM], ANCHOR_ORI]
    )
    np.testing.assert_allclose(obs[0], expected, atol=1e-5)


def test_overrides_fill_in_and_replace() -> None:
    metadata = mjlab_metadata(default_joint_pos=None, action_scale=None)
    with pytest.raises(UnsupportedPolicyError) as info:
        PolicyConfig.from_metadata(metadata)
    text = str(info.value)
    assert "metadata key 'default_joint_pos' is missing (give --default-joint-pos)" in text
    assert "metadata key 'action_scale' is missing (give --action-scale)" in text
    config = PolicyConfig.from_metadata(
        metadata, PolicyOverrides(default_joint_pos=list(DEFAULT), action_scale=0.25, joint_stiffness=[5.0] * J)
    )
    np.testing.assert_allclose(config.action_scale, 0.25)
    np.testing.assert_allclose(config.joint_stiffness, 5.0)  # replaces the file's
    np.testing.assert_allclose(config.joint_damping, KD)


def test_newer_mjlab_per_term_metadata() -> None:
    """Optional per-term keys of newer mjlab exports: sizes are checked, scales and clips applied."""
    config = PolicyConfig.from_metadata(
        mjlab_metadata(
            observation_names="base_ang_vel,joint_vel",
            anchor_body_name=None,
            observation_dims="3,29",
            observation_terms_history_length="0,0",
            observation_terms_scale="0.25,1.000",
            observation_terms_clip="-inf;inf,-1.000;1.000",
        )
    )
    gyro, vel = config.observation_terms
    assert (gyro.scale, gyro.clip, vel.scale, vel.clip) == (0.25, None, None, (-1.0, 1.0))
    agent = arena_sdk.TrackingPolicyAgent(config, lambda obs, t: np.zeros((len(obs), J)))
    spec = robot_spec(["imu", "motors"])
    agent.configure(spec)
    obs = agent.builder.build(np.stack([robot_row(spec)]), np.zeros((1, J), np.float32))
    np.testing.assert_allclose(obs[0], np.concatenate([0.25 * GYRO, np.clip(DQ[PERM], -1, 1)]), atol=1e-6)
    text = refusal(mjlab_metadata(observation_dims="3,3,6,3,3,29,29,29"))
    assert "observation term 'command' has 3 values in the policy, the arena's has 58" in text
    assert "history of 5 frames" in refusal(mjlab_metadata(observation_terms_history_length="5,0,0,0,0,0,0,0"))


# --- the agent on an ONNX model ------------------------------------------------------------------


def test_onnx_agent_targets_time_step_and_previous_action(tmp_path: Path) -> None:
    # actions = previous action + 1 + 10 * time_step, batched, time_step declared int64.
    weights = selector(MJLAB_SIZE, MJLAB_SIZE - J)
    path = build_policy(
        tmp_path / "p.onnx", mjlab_metadata(), weights, np.ones(J), time_type=TensorProto.INT64, time_coef=10.0
    )
    policy = OnnxPolicy.from_file(path)
    assert policy.io.batched and policy.io.time_dtype == np.int64 and policy.io.action_name == "actions"
    agent = policy.agent()
    spec = robot_spec()
    agent.configure(spec)
    agent.reset([arena_sdk.EpisodeInfo(3, "m", 0, 1, 5, 0, 0, 1), arena_sdk.EpisodeInfo(7, "m", 0, 1, 5, 0, 0, 1)])
    targets = agent.act(batch_of(spec, [7, 3], [0, 0], [0.0, 0.0]))
    # time_step is the episode step + 1 (the command's frame, as mjlab feeds it).
    raw = np.full(J, 1.0 + 10.0)  # step 0: previous 0, time_step 1
    np.testing.assert_allclose(targets, np.tile(to_g1(DEFAULT + SCALE * raw), (2, 1)), rtol=1e-6)
    targets = agent.act(batch_of(spec, [3, 7], [1, 1], [0.0, 0.0], step=1))
    raw = np.full(J, 11.0 + 1.0 + 20.0)  # previous 11, time_step 2
    np.testing.assert_allclose(targets[0], to_g1(DEFAULT + SCALE * raw), rtol=1e-6)
    # A new episode in the same batch starts from zeros; the others go on.
    targets = agent.act(batch_of(spec, [3, 9], [2, 0], [0.0, 0.0], step=2))
    np.testing.assert_allclose(targets[0], to_g1(DEFAULT + SCALE * (32 + 1 + 30)), rtol=1e-6)
    np.testing.assert_allclose(targets[1], to_g1(DEFAULT + SCALE * 11.0), rtol=1e-6)


def to_g1(policy_values) -> np.ndarray:
    out = np.empty(J)
    out[PERM] = policy_values
    return out


def test_holosoma_onnx_fixed_batch_of_one(tmp_path: Path) -> None:
    # actions = dof_pos (columns 32:61 of the alphabetical layout), batch fixed at 1.
    weights = selector(154, 29 + 3)
    path = build_policy(tmp_path / "h.onnx", holosoma_metadata(), weights, np.zeros(J), batch=1)
    policy = OnnxPolicy.from_file(path)
    assert not policy.io.batched
    agent = policy.agent()
    spec = robot_spec()
    agent.configure(spec)
    targets = agent.act(batch_of(spec, [0, 1], [0, 0], [0.0, 0.5]))
    for row, shift in zip(targets, (0.0, 0.5)):
        dof_pos = f32(Q + shift)[PERM] - DEFAULT
        np.testing.assert_allclose(row, to_g1(DEFAULT + 0.25 * EFFORT / KP * dof_pos), rtol=1e-5, atol=1e-6)


# --- refusals --------------------------------------------------------------------------------------


def refusal(metadata: Mapping[str, str], overrides: PolicyOverrides | None = None) -> str:
    with pytest.raises(UnsupportedPolicyError) as info:
        PolicyConfig.from_metadata(metadata, overrides)
    return str(info.value)


def test_an_unreadable_key_is_not_also_missing() -> None:
    text = refusal(mjlab_metadata(default_joint_pos="[-0.312, 0.0]"))
    assert "metadata key 'default_joint_pos' is not a comma-separated list of numbers" in text
    assert "is missing" not in text
    assert "metadata key 'default_joint_pos' is missing (give --default-joint-pos)" in refusal(
        mjlab_metadata(default_joint_pos=None)
    )
    assert "action_scale has negative values" in refusal(mjlab_metadata(action_scale="-0.25"))


def test_per_term_lists_must_align_with_the_terms_and_names_are_bounded() -> None:
    terms = len(MJLAB_TERMS.split(","))
    short = ",".join(["1.0"] * (terms - 1))
    assert f"metadata key 'observation_terms_scale' has {terms - 1} entries for {terms} observation terms" in refusal(
        mjlab_metadata(observation_terms_scale=short)
    )
    gap = ",".join(["1.0"] * (terms - 1) + [""])
    assert "some empty" in refusal(mjlab_metadata(observation_terms_scale=gap))
    assert "joint_names has 300 entries" in refusal(mjlab_metadata(joint_names="a," * 299 + "a"))
    assert "at most 4194304 are read" in refusal(mjlab_metadata(run_path="x" * (4 << 20)))
    # A clip that is no range, refused as the hosted runner refuses it.
    clips = ",".join(["nan;nan"] + ["-inf;inf"] * (terms - 1))
    assert "clip [NaN, NaN] is not a range" in refusal(mjlab_metadata(observation_terms_clip=clips))
    clips = ",".join(["1;-1"] + ["-inf;inf"] * (terms - 1))
    assert "clip [1, -1] is not a range" in refusal(mjlab_metadata(observation_terms_clip=clips))


def test_refusals_of_the_file() -> None:
    assert "unknown observation term 'foot_contact'" in refusal(
        mjlab_metadata(observation_names="command,foot_contact")
    )
    assert "unknown joint names (not joints of the arena's G1): left_toe_joint" in refusal(
        mjlab_metadata(joint_names=",".join(["left_toe_joint", *POLICY_JOINTS[1:]]))
    )
    assert "the policy drives 28 joints" in refusal(mjlab_metadata(joint_names=",".join(POLICY_JOINTS[1:])))
    assert "metadata key 'anchor_body_name' is missing (give --anchor-body)" in refusal(
        mjlab_metadata(anchor_body_name=None)
    )
    assert "joint stiffness without joint damping" in refusal(mjlab_metadata(joint_damping=None))
    assert "history of 3 frames" in refusal(holosoma_metadata(history=3))
    text = refusal({"producer": "something else"})
    for flag in ("--joint-names", "--observation-names", "--default-joint-pos", "--action-scale"):
        assert flag in text
    # Every problem is listed at once, one per line.
    text = refusal(mjlab_metadata(observation_names="command,foot_contact", default_joint_pos=None))
    assert "foot_contact" in text and "--default-joint-pos" in text


def test_refusals_of_the_session() -> None:
    config = PolicyConfig.from_metadata(mjlab_metadata())
    agent = arena_sdk.TrackingPolicyAgent(config, lambda obs, t: np.zeros((len(obs), J)), name="pol")
    missing = [g for g in GROUP_ORDER if g != "motion_anchor_ori_b"]
    problems = agent.check(robot_spec(missing))
    assert problems == [
        "the benchmark does not send the observation group 'motion_anchor_ori_b' (needed by motion_anchor_ori_b; "
        f"it sends: {', '.join(missing)})"
    ]
    problems = agent.check(robot_spec(action_mode=""))
    assert problems == [
        "the benchmark's action mode is 'normalized'; the policy's absolute joint targets need 'joint_position'"
    ]
    with pytest.raises(UnsupportedPolicyError, match="cannot run pol"):
        agent.configure(robot_spec(action_mode="normalized"))


PELVIS_ON_TORSO = (
    "the policy's anchor body is 'pelvis'; the benchmark's motion_anchor_* groups are relative to 'torso_link'"
)


def anchor_problems(policy_anchor: str | None, spec_anchor: str, holosoma: bool = False) -> list[str]:
    if holosoma:
        metadata = holosoma_metadata(ref_body=policy_anchor or "torso_link")
    else:
        metadata = mjlab_metadata(anchor_body_name=policy_anchor)
    config = PolicyConfig.from_metadata(metadata)
    agent = arena_sdk.TrackingPolicyAgent(config, lambda obs, t: np.zeros((len(obs), J)), name="pol")
    return agent.check(robot_spec(anchor_body=spec_anchor))


def test_anchor_body_against_the_session() -> None:
    """The policy's anchor must be the body the session's motion_anchor_* groups relate
    (EpisodeSpec.anchor_body; "" from servers that do not say it means torso_link)."""
    other = [PELVIS_ON_TORSO]
    # Another anchor loads (--show works); the session decides.
    assert PolicyConfig.from_metadata(mjlab_metadata(anchor_body_name="pelvis")).anchor_body == "pelvis"
    assert PolicyConfig.from_metadata(holosoma_metadata(ref_body="pelvis")).anchor_body == "pelvis"
    assert anchor_problems("torso_link", "torso_link") == []
    assert anchor_problems("torso_link", "") == []
    assert anchor_problems("pelvis", "torso_link") == other
    assert anchor_problems("pelvis", "") == other
    assert anchor_problems("pelvis", "torso_link", holosoma=True) == other
    # A benchmark announcing another anchor: a policy with that anchor runs, one with torso_link does not.
    assert anchor_problems("pelvis", "pelvis") == []
    assert anchor_problems("pelvis", "pelvis", holosoma=True) == []
    assert anchor_problems("torso_link", "pelvis") == [
        "the policy's anchor body is 'torso_link'; the benchmark's motion_anchor_* groups are relative to 'pelvis'"
    ]
    # The --anchor-body override is checked the same way.
    config = PolicyConfig.from_metadata(mjlab_metadata(anchor_body_name=None), PolicyOverrides(anchor_body="pelvis"))
    agent = arena_sdk.TrackingPolicyAgent(config, lambda obs, t: np.zeros((len(obs), J)), name="pol")
    assert agent.check(robot_spec(anchor_body="pelvis")) == []
    with pytest.raises(UnsupportedPolicyError, match="anchor body is 'pelvis'.*relative to 'torso_link'"):
        agent.configure(robot_spec())
    # A policy without anchor terms runs whatever the anchor.
    config = PolicyConfig.from_metadata(
        mjlab_metadata(observation_names="projected_gravity,base_ang_vel,joint_vel", anchor_body_name=None)
    )
    assert config.anchor_body == ""
    agent = arena_sdk.TrackingPolicyAgent(config, lambda obs, t: np.zeros((len(obs), J)), name="pol")
    assert agent.check(robot_spec(["imu", "motors"], anchor_body="pelvis")) == []


def test_refusals_of_the_model(tmp_path: Path) -> None:
    # 10 inputs where the terms make 160.
    path = build_policy(tmp_path / "small.onnx", mjlab_metadata(), np.zeros((10, J)), np.zeros(J))
    with pytest.raises(UnsupportedPolicyError) as info:
        OnnxPolicy.from_file(path)
    assert "input 'obs' takes 10 values; the policy's terms make 160 (command 58," in str(info.value)
    # Integer actions: refused as the hosted engine refuses them (a float64 output runs in both).
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["obs", "W"], ["h"]), helper.make_node("Cast", ["h"], ["actions"], to=TensorProto.INT64)],
        "int_actions",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", MJLAB_SIZE])],
        [helper.make_tensor_value_info("actions", TensorProto.INT64, ["batch", J])],
        [numpy_helper.from_array(np.zeros((MJLAB_SIZE, J), np.float32), "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    for key, value in mjlab_metadata().items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(tmp_path / "int.onnx"))
    with pytest.raises(UnsupportedPolicyError, match="output 'actions' has type tensor\\(int64\\); expected floating point"):
        OnnxPolicy.from_file(tmp_path / "int.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(UnsupportedPolicyError, match="onnxruntime cannot load it"):
        OnnxPolicy.from_file(tmp_path / "junk.onnx")


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SDK_DIR / "src")}
    return subprocess.run(
        [sys.executable, "-m", "arena_sdk.cli", "onnx", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def test_cli_show_and_refusal_without_traceback(tmp_path: Path) -> None:
    path = build_policy(tmp_path / "p.onnx", mjlab_metadata(), np.zeros((MJLAB_SIZE, J)), np.zeros(J))
    shown = cli(str(path), "--show")
    assert shown.returncode == 0, shown.stderr
    assert "joint order: differs from the G1 order (mapped by name)" in shown.stdout
    assert "[0:58] command <- motion_command" in shown.stdout
    bad = build_policy(
        tmp_path / "bad.onnx",
        mjlab_metadata(observation_names="command,foot_contact", default_joint_pos=None),
        np.zeros((58, J)),
        np.zeros(J),
    )
    result = cli(str(bad), "--token", "t", "--benchmark", "g1-smoke-robot")
    assert result.returncode == 2, result.stderr
    assert "unknown observation term 'foot_contact'" in result.stderr and "--default-joint-pos" in result.stderr
    assert "Traceback" not in result.stderr
    # The flag supplies what the file lacks.
    fixed = cli(str(bad), "--show", "--observation-names", MJLAB_TERMS, "--default-joint-pos", csv(DEFAULT))
    assert fixed.returncode == 2 and "input 'obs' takes 58 values; the policy's terms make 160" in fixed.stderr


# --- against a fake server: what goes on the wire --------------------------------------------------


class FakeArena:
    """Just enough of the protocol over WebSocket (binary): a practice Connect (the runner's spec
    check) gets Connected; a submission Connect gets one episode of len(rows) steps. Records the
    Connects, the actions and how practice connections ended; `refuse` answers every Connect with that error code instead."""

    def __init__(self, spec: EpisodeSpec, rows: list[np.ndarray], refuse: str = "") -> None:
        self.spec, self.rows, self.refuse = spec, rows, refuse
        self.connects: list[pb.Connect] = []
        self.actions: list[list[float]] = []
        # How each practice connection ended: the Disconnect reason, or "closed".
        self.practice_ends: list[str] = []

    def handler(self, ws) -> None:
        from websockets.exceptions import ConnectionClosed

        first = pb.Envelope.FromString(ws.recv())
        self.connects.append(first.connect)
        if self.refuse:
            ws.send(envelope(error=pb.Error(code=self.refuse, message="not allowed here")))
            return
        spec = pb.EpisodeSpec(
            observations=[pb.ObservationGroup(name=g.name, size=g.size) for g in self.spec.observations],
            action_size=J,
            control_hz=50,
            max_batch=1,
            max_in_flight=1,
            step_timeout_s=1,
            action_mode=self.spec.action_mode,
            anchor_body=self.spec.anchor_body,
            joint_stiffness=list(first.connect.joint_stiffness),
            joint_damping=list(first.connect.joint_damping),
        )
        practice = first.connect.mode == "practice"
        ws.send(
            envelope(
                connected=pb.Connected(
                    session_id="ses-fake",
                    submission_id="" if practice else "sub-fake",
                    benchmark="g1-smoke-robot",
                    episodes_total=1,
                    spec=spec,
                )
            )
        )
        if practice:
            try:
                self.practice_ends.append(pb.Envelope.FromString(ws.recv()).disconnect.reason)
            except ConnectionClosed:  # the client refused the spec at Connected
                self.practice_ends.append("closed")
            return
        ws.send(envelope(episode_start=pb.EpisodeStart(episodes=[pb.EpisodeInfo(episode_id=0, steps=len(self.rows))])))
        for k, row in enumerate(self.rows):
            obs = pb.EpisodeObservation(episode_id=0, episode_step=k, values=row.tolist())
            ws.send(envelope(get_action=pb.GetAction(step=k, observations=[obs])))
            answer = pb.Envelope.FromString(ws.recv())
            assert answer.action.step == k
            self.actions.append(list(answer.action.actions[0].values))
        ws.send(envelope(episode_end=pb.EpisodeEnd(episode_id=0, status="completed", steps=len(self.rows))))
        ws.send(envelope(disconnect=pb.Disconnect(reason="submission_complete", submission_status="COMPLETED")))


def envelope(**message) -> bytes:
    return pb.Envelope(**message).SerializeToString()


@contextmanager
def fake_arena(arena: FakeArena) -> Iterator[str]:
    from websockets.sync.server import serve

    with serve(arena.handler, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}/api/v1/agent"
        finally:
            server.shutdown()
            thread.join(5)


def test_cli_checks_the_spec_then_sends_gains_and_targets(tmp_path: Path) -> None:
    # actions = joint_pos term (columns 102:131): the targets are then default + scale * (q - default).
    weights = selector(MJLAB_SIZE, 58 + 3 + 6 + 3 + 3)
    path = build_policy(tmp_path / "p.onnx", mjlab_metadata(), weights, np.zeros(J))
    spec = robot_spec()
    arena = FakeArena(spec, [robot_row(spec, 0.0), robot_row(spec, 0.1)])
    with fake_arena(arena) as url:
        result = cli(str(path), "--server", url, "--token", "t", "--benchmark", "g1-smoke-robot")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "submission sub-fake COMPLETED: 1 episode in this run (1 completed)" in result.stdout
    # First the spec check (practice: nothing stored), then the submission; both with the gains.
    assert [c.mode for c in arena.connects] == ["practice", "submission"]
    assert arena.practice_ends == ["client_done"]
    for c in arena.connects:
        assert c.benchmark == "g1-smoke-robot" and c.gain_preset == ""
        np.testing.assert_allclose(c.joint_stiffness, to_g1(KP))
        np.testing.assert_allclose(c.joint_damping, to_g1(KD))
    # Named as an upload of the file would be: the run its metadata names.
    assert arena.connects[1].agent_name == "team/project/run"
    for sent, shift in zip(arena.actions, (0.0, 0.1)):
        expected = to_g1(DEFAULT + SCALE * (f32(Q + shift)[PERM] - DEFAULT))
        np.testing.assert_allclose(sent, expected, rtol=1e-5, atol=1e-6)


def test_a_benchmark_in_the_normalized_mode_is_refused_before_submitting(tmp_path: Path) -> None:
    path = build_policy(tmp_path / "p.onnx", mjlab_metadata(), np.zeros((MJLAB_SIZE, J)), np.zeros(J))
    arena = FakeArena(robot_spec(GROUP_ORDER[:3], action_mode="normalized"), [])
    with fake_arena(arena) as url:
        result = cli(str(path), "--server", url, "--token", "t", "--benchmark", "g1-smoke")
    assert result.returncode == 2
    assert "action mode is 'normalized'" in result.stderr and "'motion_command'" in result.stderr
    assert [c.mode for c in arena.connects] == ["practice"]  # no submission was created


def test_another_anchor_is_refused_before_submitting(tmp_path: Path) -> None:
    """The spec check names both bodies when the benchmark's anchor is not the policy's; a policy
    with the benchmark's anchor runs."""
    weights = selector(MJLAB_SIZE, 58 + 3 + 6 + 3 + 3)
    torso = build_policy(tmp_path / "torso.onnx", mjlab_metadata(), weights, np.zeros(J))
    spec = robot_spec(anchor_body="pelvis")
    arena = FakeArena(spec, [robot_row(spec)])
    with fake_arena(arena) as url:
        result = cli(str(torso), "--server", url, "--token", "t", "--benchmark", "g1-pelvis")
        assert result.returncode == 2, result.stdout + result.stderr
        assert (
            "the policy's anchor body is 'torso_link'; the benchmark's motion_anchor_* groups are relative to 'pelvis'"
        ) in result.stderr
        assert "Traceback" not in result.stderr
        assert [c.mode for c in arena.connects] == ["practice"]  # no submission was created
        # A practice run has no spec check before it: refused at Connected, before any episode.
        result = cli(str(torso), "--server", url, "--token", "t", "--benchmark", "g1-pelvis", "--practice", "m")
        assert result.returncode == 2, result.stdout + result.stderr
        assert "relative to 'pelvis'" in result.stderr and "Traceback" not in result.stderr
        # The spec check's session ends as done; the refused one says why (agent_cannot_serve).
        assert arena.actions == [] and arena.practice_ends[0] == "client_done", arena.practice_ends
        assert arena.practice_ends[1].startswith("agent_cannot_serve: the policy's anchor body"), arena.practice_ends
        # The same policy with the benchmark's anchor (the flag here) runs.
        arena.connects.clear()
        result = cli(str(torso), "--server", url, "--token", "t", "--benchmark", "g1-pelvis", "--anchor-body", "pelvis")
        assert result.returncode == 0, result.stdout + result.stderr
        assert [c.mode for c in arena.connects] == ["practice", "submission"]
        assert len(arena.actions) == 1


def test_an_older_server_without_anchor_body_means_torso_link(tmp_path: Path) -> None:
    pelvis = build_policy(
        tmp_path / "pelvis.onnx", mjlab_metadata(anchor_body_name="pelvis"), np.zeros((MJLAB_SIZE, J)), np.zeros(J)
    )
    arena = FakeArena(robot_spec(anchor_body=""), [])
    with fake_arena(arena) as url:
        spec = fetch_spec(url, "t", benchmark="b")
        assert spec is not None and spec.anchor_body == "torso_link"
        result = cli(str(pelvis), "--server", url, "--token", "t", "--benchmark", "b")
    assert result.returncode == 2, result.stdout + result.stderr
    assert PELVIS_ON_TORSO in result.stderr
    assert [c.mode for c in arena.connects] == ["practice", "practice"]


def test_fetch_spec_from_a_server_outside_the_protocol_raises(tmp_path: Path) -> None:
    """A WebSocket server that answers the Connect with something that is no Envelope (not an
    arena at that URL, or another protocol version): ProtocolError, not None, so that
    `arena-agent onnx` stops before a submission exists instead of creating one its session
    cannot run."""
    from websockets.sync.server import serve

    connects: list[bytes] = []

    def handler(ws) -> None:
        connects.append(ws.recv())
        ws.send(b"\xff\x00 not an envelope")

    path = build_policy(tmp_path / "p.onnx", mjlab_metadata(), np.zeros((MJLAB_SIZE, J)), np.zeros(J))
    with serve(handler, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            url = f"ws://127.0.0.1:{server.socket.getsockname()[1]}/api/v1/agent"
            with pytest.raises(ProtocolError, match="undecodable binary frame"):
                fetch_spec(url, "t", benchmark="b", timeout_s=5)
            result = cli(str(path), "--server", url, "--token", "t", "--benchmark", "b")
        finally:
            server.shutdown()
            thread.join(5)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "undecodable binary frame" in result.stderr and "Traceback" not in result.stderr, result.stderr
    # The spec checks alone: no submission Connect.
    assert [pb.Envelope.FromString(c).connect.mode for c in connects] == ["practice", "practice"]


def test_gain_preset_and_invalid_gains(tmp_path: Path) -> None:
    path = build_policy(tmp_path / "p.onnx", mjlab_metadata(), np.zeros((MJLAB_SIZE, J)), np.zeros(J))
    arena = FakeArena(robot_spec(), [], refuse="invalid_gains")
    with fake_arena(arena) as url:
        result = cli(str(path), "--server", url, "--token", "t", "--benchmark", "b", "--gain-preset", "stiff")
        assert result.returncode == 1
        assert "server refused the session: invalid_gains: not allowed here" in result.stderr
        assert [(c.gain_preset, list(c.joint_stiffness)) for c in arena.connects] == [("stiff", [])]
        # invalid_gains is fatal: run() does not retry it.
        policy = OnnxPolicy.from_file(path)
        stiffness, damping = policy.config.gains_g1()  # type: ignore[misc]
        with pytest.raises(RefusedError) as info:
            run(policy.agent(), url, "t", benchmark="b", joint_stiffness=stiffness, joint_damping=damping)
        assert info.value.code == "invalid_gains" and len(arena.connects) == 2
        with pytest.raises(RefusedError):
            fetch_spec(url, "t", benchmark="b")
    assert "invalid_gains" in arena_sdk.FATAL_CODES


def test_arena_agent_gain_flags(tmp_path: Path) -> None:
    """`arena-agent MODULE:CLASS` declares gains too (G1 order), or a preset."""
    (tmp_path / "zero.py").write_text(
        "import numpy as np\nclass Zero:\n    def act(self, batch):\n        return np.zeros((len(batch), 29))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SDK_DIR / "src")}
    base = [sys.executable, "-m", "arena_sdk.cli", f"{tmp_path / 'zero.py'}:Zero", "--token", "t", "--benchmark", "b"]
    arena = FakeArena(robot_spec(), [], refuse="invalid_gains")
    with fake_arena(arena) as url:
        gains = ["--joint-stiffness", csv(KP), "--joint-damping", csv(KD)]
        result = subprocess.run([*base, "--server", url, *gains], capture_output=True, text=True, env=env, timeout=60)
        assert result.returncode == 1 and "invalid_gains" in result.stderr, result.stderr
        result = subprocess.run(
            [*base, "--server", url, "--gain-preset", "soft"], capture_output=True, text=True, env=env, timeout=60
        )
        assert result.returncode == 1, result.stderr
    assert [(list(c.joint_stiffness), list(c.joint_damping), c.gain_preset) for c in arena.connects] == [
        (KP.tolist(), KD.tolist(), ""),
        ([], [], "soft"),
    ]
    for bad, message in (
        (["--joint-stiffness", "1,2", "--joint-damping", "1,2"], "--joint-stiffness needs 29 values"),
        (["--joint-stiffness", csv(KP)], "give --joint-stiffness and --joint-damping together"),
        (["--gain-preset", "x", "--joint-damping", csv(KD)], "--gain-preset excludes"),
    ):
        result = subprocess.run([*base, *bad], capture_output=True, text=True, env=env, timeout=60)
        assert result.returncode == 2 and message in result.stderr, (bad, result.stderr)


def test_run_checks_gain_arguments() -> None:
    with pytest.raises(ValueError, match="together"):
        run(object(), "http://127.0.0.1:9", "t", benchmark="b", joint_stiffness=[1.0] * J)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="29 values"):
        run(object(), "http://127.0.0.1:9", "t", benchmark="b", joint_stiffness=[1.0], joint_damping=[1.0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="excludes"):
        run(
            object(),
            "http://127.0.0.1:9",
            "t",
            benchmark="b",
            gain_preset="x",
            joint_stiffness=[1.0] * J,  # type: ignore[arg-type]
            joint_damping=[1.0] * J,
        )


def test_json_encoding_of_the_new_fields() -> None:
    e = pb.Envelope()
    e.connect.joint_stiffness.extend([1.5] * J)
    e.connect.joint_damping.extend([0.5] * J)
    e.connect.gain_preset = ""
    body = json.loads(envelope_to_json(e))
    assert body["joint_stiffness"] == [1.5] * J and body["joint_damping"] == [0.5] * J and body["gain_preset"] == ""
    from arena_sdk.transports import envelope_from_json

    text = json.dumps(
        {
            "type": "connected",
            "spec": {
                "action_mode": "joint_position",
                "joint_stiffness": [40.0] * J,
                "joint_damping": [2.0] * J,
                "effort_limit": [88.0] * J,
                "anchor_body": "pelvis",
            },
        }
    )
    spec = arena_sdk.client._spec(envelope_from_json(text).connected.spec)
    assert spec.action_mode == "joint_position" and spec.anchor_body == "pelvis"
    assert spec.joint_stiffness.tolist() == [40.0] * J and spec.effort_limit.tolist() == [88.0] * J
    # An older server does not send it: torso_link.
    old = arena_sdk.client._spec(envelope_from_json('{"type":"connected","spec":{}}').connected.spec)
    assert old.anchor_body == "torso_link"


# --- a real server -----------------------------------------------------------------------------------

BENCHMARK = "g1-smoke-robot"


def require_benchmark(server: Server) -> None:
    status, body = server.request("GET", "/api/v1/benchmarks")
    assert status == 200, body
    names = [b["name"] for b in body["benchmarks"]]
    if BENCHMARK not in names:
        reason = f"the server lists no {BENCHMARK} benchmark (it has: {', '.join(names)})"
        print(f"\nSKIP: {reason}", file=sys.stderr)
        pytest.skip(reason)


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_onnx_policy_completes_g1_smoke_robot(server: Server, team_token: str, tmp_path: Path, transport: str) -> None:
    require_benchmark(server)
    spec = fetch_spec(server.http_url, team_token, benchmark=BENCHMARK, transport=transport)
    assert spec is not None and spec.action_mode == "joint_position", spec
    assert {g.name: g.size for g in spec.observations} == ROBOT_GROUPS
    assert len(spec.joint_stiffness) == len(spec.joint_damping) == len(spec.effort_limit) == J
    assert spec.anchor_body == "torso_link"  # also from a server that does not send it
    # Holds the default pose (zero actions) with the benchmark's own gains, in a shuffled joint
    # order: the gains must come back to the server in the G1 order to be accepted as its own.
    metadata = mjlab_metadata(
        joint_stiffness=csv_full(spec.joint_stiffness[PERM]),
        joint_damping=csv_full(spec.joint_damping[PERM]),
        default_joint_pos=csv_full(spec.default_joint_pos[PERM]),
    )
    path = build_policy(tmp_path / "hold.onnx", metadata, np.zeros((MJLAB_SIZE, J)), np.zeros(J))
    result = cli(
        str(path),
        "--server",
        server.http_url,
        "--token",
        team_token,
        "--benchmark",
        BENCHMARK,
        "--transport",
        transport,
        "--agent-name",
        f"onnx-{transport}",
        timeout=600,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\nserver log:\n{server.log_tail()}"
    match = re.search(rf"^connected: submission (sub-\S+) of {BENCHMARK}", result.stdout, re.MULTILINE)
    assert match, result.stdout
    status, body = server.request("GET", f"/api/v1/submissions/{match.group(1)}", team_token)
    assert status == 200 and body["status"] == "COMPLETED" and body["agent_name"] == f"onnx-{transport}", body


# --- a real submission: the gains the server applied, the observation vector the model was fed ----


class RecordingPolicy(OnnxPolicy):
    """The file's policy (loaded by `from_file`, run by `agent()` as usual); keeps every model call:
    the observation rows and time steps the runner passed to onnxruntime, and the raw actions back."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def infer(self, obs: np.ndarray, time_step: np.ndarray) -> np.ndarray:
        raw = super().infer(obs, time_step)
        self.calls.append((np.array(obs, copy=True), np.array(time_step, copy=True), np.array(raw, copy=True)))
        return raw


@dataclass(frozen=True)
class Request:
    """One GetAction as the agent saw it, the model call it made and the targets it answered."""

    episode_ids: np.ndarray
    episode_steps: np.ndarray
    rows: np.ndarray  # the EpisodeObservation values, one row per episode
    obs: np.ndarray  # what the runner fed the model
    time_step: np.ndarray
    raw: np.ndarray  # what the model returned
    targets: np.ndarray  # what went to the server (G1 order)


class RecordingAgent(arena_sdk.Agent):
    """Passes every hook on to the policy's agent, keeping the spec each connection announced,
    each request and each EpisodeEnd."""

    def __init__(self, inner: arena_sdk.TrackingPolicyAgent, policy: RecordingPolicy) -> None:
        self.inner, self.policy = inner, policy
        self.name = inner.name
        self.specs: list[EpisodeSpec] = []
        self.requests: list[Request] = []
        self.ends: list[arena_sdk.EpisodeEnd] = []

    def configure(self, spec: EpisodeSpec) -> None:
        self.specs.append(spec)
        self.inner.configure(spec)

    def reset(self, episodes: list[arena_sdk.EpisodeInfo]) -> None:
        self.inner.reset(episodes)

    def act(self, batch: Batch) -> np.ndarray:
        before = len(self.policy.calls)
        targets = self.inner.act(batch)
        assert len(self.policy.calls) == before + 1, "one model call per request"
        obs, time_step, raw = self.policy.calls[-1]
        self.requests.append(
            Request(
                batch.episode_ids.copy(),
                batch.episode_steps.copy(),
                batch.observations.copy(),
                obs,
                time_step,
                raw,
                np.array(targets, dtype=np.float64),
            )
        )
        return targets

    def end(self, result: arena_sdk.EpisodeEnd) -> None:
        self.ends.append(result)
        self.inner.end(result)


@dataclass(frozen=True)
class HandPolicy:
    """A policy file whose actions are worked out by hand: raw = obs @ weights + bias +
    time_coef * episode step, targets (policy order) = default + scale * raw."""

    path: Path
    weights: np.ndarray
    bias: np.ndarray
    time_coef: float
    default: np.ndarray  # policy order
    scale: np.ndarray  # policy order
    actions: slice  # the columns of the `actions` term (the previous raw output)
    #: The observation vector from one request's groups (name -> values) and the previous raw action.
    expected_obs: Callable[[dict[str, np.ndarray], np.ndarray], np.ndarray]


def hand_policy(
    convention: str, tmp_path: Path, kp_g1: np.ndarray, kd_g1: np.ndarray, default_g1: np.ndarray
) -> HandPolicy:
    """A tracking policy in `convention` declaring these gains (G1 order; written in the shuffled
    policy order). It pulls toward the current pose (0.5 joint_pos + 0.25 previous action) plus
    a small dense part over every observation value, and a small time_step term."""
    kp, kd = kp_g1[PERM], kd_g1[PERM]
    default = np.round(default_g1[PERM], 3)
    rng = np.random.default_rng(7)
    if convention == "mjlab":
        n, joint_pos, actions = MJLAB_SIZE, 58 + 3 + 6 + 3 + 3, MJLAB_SIZE - J
        metadata = mjlab_metadata(joint_stiffness=csv(kp), joint_damping=csv(kd), default_joint_pos=csv(default))
        scale = SCALE

        def expected_obs(g: dict[str, np.ndarray], previous: np.ndarray) -> np.ndarray:
            command, motors = g["motion_command"], g["motors"]
            return np.concatenate(
                [
                    command[:J][PERM],  # command: reference joint positions then velocities
                    command[J:][PERM],
                    g["motion_anchor_pos_b"],
                    g["motion_anchor_ori_b"],
                    g["base_lin_vel"],
                    g["imu"][4:7],  # base_ang_vel: the pelvis gyro
                    motors[:J][PERM] - default,  # joint_pos
                    motors[J : 2 * J][PERM],  # joint_vel
                    previous,  # actions
                ]
            )

        batch: str | int = "batch"
        time_type = TensorProto.FLOAT
    else:
        # Alphabetical: actions, base_ang_vel, dof_pos, dof_vel (x 0.5), motion_command, motion_ref_ori_b.
        n, joint_pos, actions = 154, 29 + 3, 0
        effort = np.round(1.2 * kp, 3)  # action scale 0.25 * effort / kp: about 0.3
        metadata = holosoma_metadata(kp=kp, kd=kd, default=default, effort=effort)
        scale = 0.25 * effort / kp

        def expected_obs(g: dict[str, np.ndarray], previous: np.ndarray) -> np.ndarray:
            command, motors = g["motion_command"], g["motors"]
            return np.concatenate(
                [
                    previous,
                    g["imu"][4:7],
                    motors[:J][PERM] - default,
                    0.5 * motors[J : 2 * J][PERM],
                    command[:J][PERM],
                    command[J:][PERM],
                    g["motion_anchor_ori_b"],
                ]
            )

        batch = 1  # fixed batch: one model run per episode
        time_type = TensorProto.INT64
    weights = 0.001 * rng.standard_normal((n, J)) + 0.5 * selector(n, joint_pos) + 0.25 * selector(n, actions)
    bias = 0.01 * rng.standard_normal(J)
    time_coef = 1e-4
    path = build_policy(
        tmp_path / f"{convention}.onnx", metadata, weights, bias, batch=batch, time_type=time_type, time_coef=time_coef
    )
    return HandPolicy(path, weights, bias, time_coef, default, scale, slice(actions, actions + J), expected_obs)


@pytest.mark.parametrize("convention", ["mjlab", "holosoma"])
@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_onnx_policy_submission_applies_its_gains_and_feeds_the_expected_observations(
    server: Server, team_token: str, tmp_path: Path, transport: str, convention: str
) -> None:
    """A policy file declaring gains of its own (no preset, within the benchmark's bounds) in a
    shuffled joint order completes a g1-smoke-robot submission through `run`: the session's
    EpisodeSpec announces those gains in the G1 order, and at every request the model was fed the
    observation vector recomputed here from that request's raw groups."""
    require_benchmark(server)
    status, body = server.request("GET", f"/api/v1/benchmarks/{BENCHMARK}")
    assert status == 200 and body["action"]["mode"] == "joint_position", body.get("action")
    bounds = body["action"]
    # Declared gains: the benchmark's default preset x 1.2 (kp), x 0.9 (kd), at mjlab's 3 decimals.
    default_spec = fetch_spec(server.http_url, team_token, benchmark=BENCHMARK, transport=transport)
    assert default_spec is not None
    kp_g1 = np.round(default_spec.joint_stiffness * 1.2, 3)
    kd_g1 = np.round(default_spec.joint_damping * 0.9, 3)
    assert (kp_g1 <= np.asarray(bounds["kp_max"])).all() and (kd_g1 <= np.asarray(bounds["kd_max"])).all()
    assert bounds["presets"]
    for preset in bounds["presets"]:
        announced = fetch_spec(
            server.http_url, team_token, benchmark=BENCHMARK, transport=transport, gain_preset=preset
        )
        assert announced is not None and len(announced.joint_stiffness) == J
        assert not np.allclose(announced.joint_stiffness, kp_g1, rtol=1e-3), f"{preset} is the declared kp"
        assert not np.allclose(announced.joint_damping, kd_g1, rtol=1e-3), f"{preset} is the declared kd"

    hand = hand_policy(convention, tmp_path, kp_g1, kd_g1, default_spec.default_joint_pos)
    policy = RecordingPolicy.from_file(hand.path)
    assert isinstance(policy, RecordingPolicy) and policy.config.convention == convention
    assert policy.config.joint_names == tuple(POLICY_JOINTS)
    np.testing.assert_allclose(policy.config.action_scale, hand.scale, rtol=1e-12)
    gains = policy.config.gains_g1()
    assert gains is not None
    stiffness, damping = gains
    agent = RecordingAgent(policy.agent(), policy)
    events: list[object] = []
    name = f"onnx-{convention}-{transport}"
    summary = run(
        agent,
        server.http_url,
        team_token,
        benchmark=BENCHMARK,
        transport=transport,
        agent_name=name,
        joint_stiffness=stiffness,
        joint_damping=damping,
        on_event=events.append,
    )
    context = f"server log:\n{server.log_tail()}"
    assert summary.submission_status == "COMPLETED" and summary.reconnects == 0, (summary, context)
    status, submission = server.request("GET", f"/api/v1/submissions/{summary.submission_id}", team_token)
    assert status == 200 and submission["status"] == "COMPLETED", submission
    assert submission["agent_name"] == name, submission

    # The gains the server applied: those of the spec announced in this submission's session.
    connected = [e for e in events if isinstance(e, arena_sdk.Connected)]
    assert [c.submission_id for c in connected] == [summary.submission_id]
    assert len(agent.specs) == 1
    spec = agent.specs[0]
    assert spec.action_mode == "joint_position"
    np.testing.assert_array_equal(spec.joint_stiffness, kp_g1)
    np.testing.assert_array_equal(spec.joint_damping, kd_g1)
    for p, joint in enumerate(POLICY_JOINTS):  # by name: the file's p-th joint is the G1's joint of that name
        g1 = JOINT_NAMES.index(joint)
        assert spec.joint_stiffness[g1] == kp_g1[PERM][p] and spec.joint_damping[g1] == kd_g1[PERM][p]

    # The observation vector of every request, recomputed from its groups (split by the spec's layout).
    assert {g.name: g.size for g in spec.observations} == ROBOT_GROUPS

    def groups_of(row: np.ndarray) -> dict[str, np.ndarray]:
        out, offset = {}, 0
        for g in spec.observations:
            out[g.name] = row[offset : offset + g.size].astype(np.float64)
            offset += g.size
        assert offset == len(row)
        return out

    last: dict[int, tuple[int, np.ndarray]] = {}  # episode -> (its step, the model's raw output)
    first_requests: list[int] = []
    for r in agent.requests:
        np.testing.assert_array_equal(r.time_step.reshape(-1), r.episode_steps + 1)
        for i, (episode, step) in enumerate(zip(r.episode_ids.tolist(), r.episode_steps.tolist())):
            where = f"{convention} over {transport}: episode {episode}, step {step}"
            if step == 0:
                assert episode not in last, where
                first_requests.append(episode)
                previous = np.zeros(J)
                assert not r.obs[i, hand.actions].any(), where  # the actions term starts at zeros
            else:
                seen, previous = last[episode]
                assert seen == step - 1, where
            expected = hand.expected_obs(groups_of(r.rows[i]), previous)
            assert r.obs[i].shape == expected.shape, where
            np.testing.assert_allclose(r.obs[i], expected, rtol=1e-6, atol=1e-6, err_msg=where)
            raw = expected @ hand.weights + hand.bias + hand.time_coef * (step + 1)  # time_step = step + 1
            np.testing.assert_allclose(r.raw[i], raw, rtol=1e-4, atol=1e-5, err_msg=where)
            targets = to_g1(hand.default + hand.scale * raw)
            np.testing.assert_allclose(r.targets[i], targets, rtol=1e-5, atol=1e-5, err_msg=where)
            last[episode] = (step, r.raw[i].astype(np.float64))
    ends = agent.ends
    assert len(ends) == len(body["motion_list"]) and all(e.status == "completed" for e in ends), ends
    assert sorted(first_requests) == sorted(e.episode_id for e in ends)
    assert len(agent.requests) > 1 and any(step > 0 for step, _ in last.values())
    assert max(np.abs(raw).max() for _, raw in last.values()) > 0  # later steps fed non-zero previous actions


@pytest.mark.parametrize("convention", ["mjlab", "holosoma"])
def test_the_server_runs_the_file_as_the_remote_route_does(
    server: Server, team_token: str, tmp_path: Path, convention: str
) -> None:
    """Issue 40: the same file handed in (`arena-agent submit`: the server runs it itself, with its
    Rust engine and observation builder) and run remotely (`arena-agent onnx` over WebSocket:
    onnxruntime and the Python builder) gives the same episodes: each with the same motion and
    outcome, every metric within the two engines' float tolerance."""
    require_benchmark(server)
    default_spec = fetch_spec(server.http_url, team_token, benchmark=BENCHMARK)
    assert default_spec is not None
    kp_g1 = np.round(default_spec.joint_stiffness * 1.2, 3)
    kd_g1 = np.round(default_spec.joint_damping * 0.9, 3)
    hand = hand_policy(convention, tmp_path, kp_g1, kd_g1, default_spec.default_joint_pos)
    common = ["--server", server.http_url, "--token", team_token, "--benchmark", BENCHMARK]
    remote = cli(str(hand.path), *common, "--agent-name", f"remote-{convention}", timeout=600)
    assert remote.returncode == 0, f"{remote.stdout}\n{remote.stderr}\nserver log:\n{server.log_tail()}"
    remote_id = re.search(r"^connected: submission (sub-\S+)", remote.stdout, re.MULTILINE)
    assert remote_id, remote.stdout
    env = {**os.environ, "PYTHONPATH": str(SDK_DIR / "src")}
    hosted = subprocess.run(
        [sys.executable, "-m", "arena_sdk.cli", "submit", str(hand.path), *common, "--agent-name", f"hosted-{convention}", "--wait"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert hosted.returncode == 0, f"{hosted.stdout}\n{hosted.stderr}\nserver log:\n{server.log_tail()}"
    hosted_id = re.search(r"submitted: submission (sub-\S+)", hosted.stdout)
    assert hosted_id, hosted.stdout

    def episodes(submission: str) -> list[dict]:
        status, body = server.request("GET", f"/api/v1/submissions/{submission}/results", team_token)
        assert status == 200 and body["submission"]["status"] == "COMPLETED", body
        return body["episodes"]

    ran_remotely, ran_hosted = episodes(remote_id.group(1)), episodes(hosted_id.group(1))
    assert len(ran_remotely) == len(ran_hosted) > 0
    largest = 0.0
    for r, h in zip(ran_remotely, ran_hosted):
        where = f"{convention}, episode {r['idx']} ({r['motion']})"
        assert (h["motion"], h["status"], h["steps"]) == (r["motion"], r["status"], r["steps"]), where
        assert set(h["metrics"]) == set(r["metrics"]), where
        for name, value in r["metrics"].items():
            other = h["metrics"][name]
            if value is None or other is None or not (np.isfinite(value) and np.isfinite(other)):
                assert value == other or (value is None) == (other is None), f"{where}: {name} {value} vs {other}"
                continue
            largest = max(largest, abs(value - other) / max(1.0, abs(value)))
            assert abs(value - other) <= 1e-4 * max(1.0, abs(value)), f"{where}: {name} remote {value}, hosted {other}"
    print(f"\n{convention}: {len(ran_hosted)} episodes, largest relative metric difference {largest:.2e}")


def test_a_handed_in_file_is_named_after_its_run_motion_or_folder(
    server: Server, team_token: str, tmp_path: Path
) -> None:
    """mjlab exports are all policy.onnx: without --agent-name, a hosted submission is named after
    the run its metadata names, else the motion holosoma's metadata names, else the folder."""
    require_benchmark(server)
    spec = fetch_spec(server.http_url, team_token, benchmark=BENCHMARK)
    assert spec is not None
    own = dict(
        joint_stiffness=csv_full(spec.joint_stiffness[PERM]),
        joint_damping=csv_full(spec.joint_damping[PERM]),
        default_joint_pos=csv_full(spec.default_joint_pos[PERM]),
    )
    zeros = np.zeros((MJLAB_SIZE, J)), np.zeros(J)
    cases = []
    for folder, metadata, expected in [
        ("run-a", mjlab_metadata(**own), "team/project/run"),
        ("dance-v3", mjlab_metadata(run_path=None, **own), "dance-v3"),
    ]:
        (tmp_path / folder).mkdir()
        cases.append((build_policy(tmp_path / folder / "policy.onnx", metadata, *zeros), expected))
    kp, kd = spec.joint_stiffness[PERM], spec.joint_damping[PERM]
    holosoma = holosoma_metadata(kp=kp, kd=kd, default=np.round(spec.default_joint_pos[PERM], 3), effort=1.2 * kp)
    experiment = json.loads(holosoma["experiment_config"])
    experiment["command"]["setup_terms"]["motion_command"]["params"]["motion_config"]["motion_file"] = "data/far_robot_mj.npz"
    holosoma["experiment_config"] = json.dumps(experiment)
    (tmp_path / "h").mkdir()
    path = build_policy(tmp_path / "h" / "policy.onnx", holosoma, np.zeros((154, J)), np.zeros(J), batch=1, time_type=None)
    cases.append((path, "far_robot_mj"))
    env = {**os.environ, "PYTHONPATH": str(SDK_DIR / "src")}
    for path, expected in cases:
        out = subprocess.run(
            [sys.executable, "-m", "arena_sdk.cli", "submit", str(path), "--server", server.http_url, "--token",
             team_token, "--benchmark", BENCHMARK],
            capture_output=True, text=True, env=env, timeout=600,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert f" as {expected} " in out.stdout or out.stdout.rstrip().endswith(f" as {expected}"), out.stdout


def test_a_normalized_benchmark_is_refused_before_a_submission_exists(
    server: Server, team_token: str, tmp_path: Path
) -> None:
    """g1-smoke (normalized actions, the BFM-Zero groups) cannot run the policy: the spec check
    on a practice connection says why, and no submission is created."""
    path = build_policy(tmp_path / "p.onnx", mjlab_metadata(), np.zeros((MJLAB_SIZE, J)), np.zeros(J))
    _, before = server.request("GET", "/api/v1/submissions", team_token)
    result = cli(str(path), "--server", server.http_url, "--token", team_token, "--benchmark", "g1-smoke")
    assert result.returncode == 2, f"{result.stdout}\n{result.stderr}"
    assert "action mode is 'normalized'" in result.stderr, result.stderr
    assert "the benchmark does not send the observation group 'motors'" in result.stderr, result.stderr
    _, after = server.request("GET", "/api/v1/submissions", team_token)
    assert len(after["submissions"]) == len(before["submissions"])


def csv_full(values) -> str:
    return ",".join(repr(float(v)) for v in values)


def test_robot_groups_are_what_the_runner_assumes(server: Server, team_token: str) -> None:
    """The group semantics the term mapping relies on, at the first step of a practice episode."""
    require_benchmark(server)
    status, body = server.request("GET", f"/api/v1/benchmarks/{BENCHMARK}")
    assert status == 200 and body.get("motion_list"), body
    motion = body["motion_list"][0]["name"]

    class Probe(arena_sdk.Agent):
        def __init__(self) -> None:
            self.first: dict[str, np.ndarray] = {}

        def configure(self, spec: EpisodeSpec) -> None:
            self.hold = np.asarray(spec.default_joint_pos, np.float32)

        def act(self, batch: Batch) -> np.ndarray:
            if not self.first:
                self.first = {name: batch.group(name)[0].copy() for name, _ in batch.layout}
            return np.tile(self.hold, (len(batch), 1))  # joint-position mode: hold the default pose

    probe = Probe()
    summary = run(
        probe, server.http_url, team_token, benchmark=BENCHMARK, practice=[{"motion": motion, "duration_s": 0.1}]
    )
    assert [e.status for e in summary.episodes] == ["completed"]
    g = probe.first
    assert all(np.isfinite(v).all() for v in g.values()), g
    for imu in ("imu", "imu_torso"):
        assert abs(np.linalg.norm(g[imu][:4]) - 1.0) < 1e-4, g[imu]  # a unit quaternion first
    assert projected_gravity(g["imu"][None, :4])[0, 2] < -0.8, g["imu"]  # episodes start upright
    quat = g["motion_anchor_pose_w"][3:]
    assert abs(np.linalg.norm(quat) - 1.0) < 1e-4, g["motion_anchor_pose_w"]


def test_the_onnx_command_names_a_policy_as_the_server_names_an_upload(tmp_path: Path) -> None:
    """`arena-agent onnx` and `arena-agent submit` name one file alike (the run, else the
    motion, else the file's stem unless `policy`, else its folder), made fit as the server makes
    them: the onnx command named mjlab's `policy.onnx` "policy" where the upload was named by
    its run."""
    from arena_sdk.onnx_cli import default_agent_name

    folder = tmp_path / "g1-dance"
    folder.mkdir()
    policy = folder / "policy.onnx"
    assert default_agent_name({"run_path": " team/run-7 "}, policy) == "team/run-7"
    motion = {"command": {"setup_terms": {"motion_command": {"params": {"motion_config": {"motion_file": "m/walk_01.npz"}}}}}}
    assert default_agent_name({"experiment_config": json.dumps(motion)}, policy) == "walk_01"
    assert default_agent_name({"experiment_config": "not json"}, folder / "dancer.onnx") == "dancer"
    assert default_agent_name({}, policy) == "g1-dance"
    assert default_agent_name({"run_path": "\u202egnp.ahpla\u202c best\n"}, policy) == "gnp.ahpla best"
    # The marks the server keeps stay (U+200E LEFT-TO-RIGHT MARK).
    assert default_agent_name({"run_path": "run\u200e-1"}, policy) == "run\u200e-1"
    assert len(default_agent_name({"run_path": "x" * 300}, policy)) == 128
