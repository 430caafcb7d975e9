"""What the arena needs to know about an exported tracking policy (joint order, default pose,
action scale, PD gains, observation terms, anchor body), read from ONNX metadata in the
mjlab / BeyondMimic convention (comma-separated strings) or the holosoma one (JSON values), with
explicit overrides for what a file lacks. Nothing here runs a model."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from .errors import ArenaError
from .g1 import JOINT_NAMES, NUM_JOINTS
from .observation_terms import TERM_ALIASES, ObservationTerm, term_source


class UnsupportedPolicyError(ArenaError):
    """The policy cannot run on the arena as given: each problem names what is missing or
    unknown (a term, a metadata key, a group the benchmark does not send, the action mode)."""

    def __init__(self, what: str, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__(f"cannot run {what}:\n  - " + "\n  - ".join(self.problems))


@dataclass(frozen=True)
class PolicyOverrides:
    """Values that replace (or fill in) the file's. Joint-indexed values are in the POLICY's joint
    order (its `joint_names`), as the file's are. The `arena-agent onnx` flags of the same names
    (`--action-scale`, ...) set these."""

    joint_names: Sequence[str] | None = None
    observation_names: Sequence[str] | None = None
    default_joint_pos: Sequence[float] | None = None
    #: One value for every joint, or one per joint.
    action_scale: float | Sequence[float] | None = None
    joint_stiffness: Sequence[float] | None = None
    joint_damping: Sequence[float] | None = None
    anchor_body: str | None = None


# The flag that supplies each field, for refusal messages.
_FLAGS = {
    "joint_names": "--joint-names",
    "observation_names": "--observation-names",
    "default_joint_pos": "--default-joint-pos",
    "action_scale": "--action-scale",
    "joint_stiffness": "--joint-stiffness",
    "joint_damping": "--joint-damping",
    "anchor_body": "--anchor-body",
}


@dataclass
class PolicyMetadata:
    """The fields found in a file, in the policy's joint and term order (None: absent)."""

    #: "mjlab" (also BeyondMimic), "holosoma", or "" when neither convention was recognised.
    convention: str = ""
    joint_names: list[str] | None = None
    observation_names: list[str] | None = None
    default_joint_pos: list[float] | None = None
    action_scale: float | list[float] | None = None
    joint_stiffness: list[float] | None = None
    joint_damping: list[float] | None = None
    anchor_body: str | None = None
    #: Per term (optional in both conventions).
    term_scales: dict[str, float | list[float]] = field(default_factory=dict)
    term_clips: dict[str, tuple[float, float]] = field(default_factory=dict)
    term_dims: dict[str, int] = field(default_factory=dict)
    term_history: dict[str, int] = field(default_factory=dict)
    #: Raw actions are clipped to ±this before use (holosoma's clip_actions).
    action_clip: float | None = None
    #: Where each field is read from, for messages ("metadata key 'joint_names'").
    keys: dict[str, str] = field(default_factory=dict)
    #: Values that were present but unreadable.
    problems: list[str] = field(default_factory=list)
    #: Said first when something is missing (e.g. that no known convention was found).
    note: str = ""


@dataclass(frozen=True, eq=False)
class PolicyConfig:
    """A tracking policy as the arena runs it. Joint-indexed arrays are in the policy's order."""

    joint_names: tuple[str, ...]
    default_joint_pos: np.ndarray
    action_scale: np.ndarray
    #: None when neither the file nor an override gives them (a gain preset can stand in).
    joint_stiffness: np.ndarray | None
    joint_damping: np.ndarray | None
    observation_terms: tuple[ObservationTerm, ...]
    #: The body its motion-anchor terms are relative to ("" when it uses none); a session's
    #: `EpisodeSpec.anchor_body` must name the same.
    anchor_body: str = ""
    action_clip: float | None = None
    convention: str = ""

    @property
    def policy_to_g1(self) -> np.ndarray:
        """(29,) the G1 index of each of the policy's joints."""
        return np.array([JOINT_NAMES.index(n) for n in self.joint_names], dtype=np.intp)

    @property
    def observation_size(self) -> int:
        return sum(t.size for t in self.observation_terms)

    def to_g1(self, values: np.ndarray) -> np.ndarray:
        """Per-joint values (last axis in the policy's order) reordered to the G1 order."""
        values = np.asarray(values)
        out = np.empty_like(values)
        out[..., self.policy_to_g1] = values
        return out

    def gains_g1(self) -> tuple[list[float], list[float]] | None:
        """(stiffness, damping) in the G1 order, as Connect carries them; None without gains."""
        if self.joint_stiffness is None or self.joint_damping is None:
            return None
        return self.to_g1(self.joint_stiffness).tolist(), self.to_g1(self.joint_damping).tolist()

    def describe(self) -> str:
        """The mapping in words: terms to arena groups, joint order, gains."""
        lines = [f"policy metadata: {self.convention or 'none (overrides only)'}"]
        reordered = self.joint_names != JOINT_NAMES
        lines.append(f"joint order: {'differs from the G1 order (mapped by name)' if reordered else 'the G1 order'}")
        lines.append(f"observation: {self.observation_size} values, {len(self.observation_terms)} terms")
        col = 0
        for t in self.observation_terms:
            extra = ""
            if t.scale is not None:
                extra += f", x {np.round(t.scale, 4).tolist()}"
            if t.clip is not None:
                extra += f", clipped to [{t.clip[0]:g}, {t.clip[1]:g}]"
            lines.append(f"  [{col}:{col + t.size}] {t.name} <- {t.source.description}{extra}")
            col += t.size
        if self.anchor_body:
            lines.append(f"anchor body: {self.anchor_body}")
        gains = self.gains_g1()
        if gains is None:
            lines.append("gains: none in the policy (give --joint-stiffness/--joint-damping or --gain-preset)")
        else:
            lines.append(f"joint_stiffness (G1 order): {np.round(gains[0], 3).tolist()}")
            lines.append(f"joint_damping (G1 order): {np.round(gains[1], 3).tolist()}")
        lines.append(f"default_joint_pos (G1 order): {np.round(self.to_g1(self.default_joint_pos), 4).tolist()}")
        lines.append(f"action_scale (G1 order): {np.round(self.to_g1(self.action_scale), 4).tolist()}")
        if self.action_clip is not None:
            lines.append(f"raw actions clipped to ±{self.action_clip:g}")
        lines.append("targets: q* = default_joint_pos + action_scale * action (joint_position mode)")
        return "\n".join(lines)

    @classmethod
    def from_metadata(
        cls,
        metadata: Mapping[str, str],
        overrides: PolicyOverrides | None = None,
        what: str = "the policy",
    ) -> PolicyConfig:
        """Reads ONNX `metadata_props` (key -> string) in either convention and applies
        `overrides`. Raises UnsupportedPolicyError listing every problem at once."""
        return resolve(read_metadata(metadata), overrides, what)


# The most bytes of metadata (keys and values) read, and the most entries of a list of names:
# as the server's hosted runner (arena_onnx::config), which refuses larger ones.
MAX_METADATA_BYTES = 4 << 20
MAX_NAMES = 256


def read_metadata(props: Mapping[str, str]) -> PolicyMetadata:
    """The fields of either convention; unknown conventions give an empty PolicyMetadata."""
    size = sum(len(k.encode()) + len(v.encode()) for k, v in props.items())
    if size > MAX_METADATA_BYTES:
        return PolicyMetadata(problems=[f"the file's metadata is {size} bytes; at most {MAX_METADATA_BYTES} are read"])
    if "joint_names" in props or "observation_names" in props:
        return _read_mjlab(props)
    if any(k in props for k in _HOLOSOMA_KEYS):
        return _read_holosoma(props)
    keys = ", ".join(sorted(props)) or "none"
    return PolicyMetadata(
        keys={name: f"metadata key {key!r}" for name, key in _MJLAB_KEYS.items()},
        note=f"the file has no mjlab or holosoma metadata (its metadata keys: {keys})",
    )


# --- mjlab / BeyondMimic: every value is a string, lists comma-separated ---------------------

# Field -> mjlab's metadata key.
_MJLAB_KEYS = {
    "joint_names": "joint_names",
    "observation_names": "observation_names",
    "default_joint_pos": "default_joint_pos",
    "action_scale": "action_scale",
    "joint_stiffness": "joint_stiffness",
    "joint_damping": "joint_damping",
    "anchor_body": "anchor_body_name",
}


def _read_mjlab(props: Mapping[str, str]) -> PolicyMetadata:
    m = PolicyMetadata(convention="mjlab")
    for name, key in _MJLAB_KEYS.items():
        m.keys[name] = f"metadata key {key!r}"
        raw = props.get(key)
        if raw is None or not raw.strip():
            continue
        if name in ("joint_names", "observation_names"):
            setattr(m, name, _csv(raw))
        elif name == "anchor_body":
            m.anchor_body = raw.strip()
        else:
            numbers = _csv_numbers(raw, key, m.problems)
            if numbers is not None:
                value: Any = numbers[0] if name == "action_scale" and len(numbers) == 1 else numbers
                setattr(m, name, value)
    # Optional per-term details of newer exports; older ones have none of them. mjlab writes one
    # entry per term, aligned with observation_names: a list of another length, or with an empty
    # entry, would pair later values with the wrong terms, so it is refused.
    names = m.observation_names or []
    misaligned: list[str] = []

    def per_term(key: str) -> list[tuple[str, str]]:
        raw = props.get(key)
        if raw is None or not raw.strip():
            return []
        entries = [p.strip() for p in raw.split(",")]
        if len(entries) != len(names) or any(not e for e in entries):
            some_empty = ", some empty," if any(not e for e in entries) else ""
            misaligned.append(
                f"metadata key {key!r} has {len(entries)} entries{some_empty} for {len(names)} observation terms"
            )
            return []
        return list(zip(names, entries))

    unreadable = None
    try:
        for n, v in per_term("observation_dims"):
            m.term_dims[n] = int(float(v))
        for key in ("observation_history_lengths", "observation_terms_history_length"):
            for n, v in per_term(key):
                m.term_history[n] = int(float(v))
        for n, v in per_term("observation_terms_scale"):
            parts = [float(p) for p in v.split(";")]  # a per-dimension scale is ';'-joined
            m.term_scales[n] = parts[0] if len(parts) == 1 else parts
        for n, v in per_term("observation_terms_clip"):
            lo, hi = (float(p) for p in v.split(";"))
            # (-inf, inf) is mjlab's "no clip"; a NaN bound is kept, to be refused as no range.
            if math.isfinite(lo) or math.isfinite(hi) or math.isnan(lo) or math.isnan(hi):
                m.term_clips[n] = (lo, hi)
    except ValueError as e:
        unreadable = f"unreadable per-term metadata (observation_dims / _terms_scale / _terms_clip): {e}"
    m.problems.extend(misaligned)
    if unreadable:
        m.problems.append(unreadable)
    return m


def _f32_text(v: np.float32) -> str:
    """A float32 as Rust prints one ("NaN", "inf", "1", "0.1")."""
    if np.isnan(v):
        return "NaN"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return np.format_float_positional(v, trim="-")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite_number(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


def _csv(raw: str) -> list[str]:
    return [p.strip() for p in raw.split(",") if p.strip()]


def _csv_numbers(raw: str, key: str, problems: list[str]) -> list[float] | None:
    try:
        return [float(p) for p in _csv(raw)]
    except ValueError:
        problems.append(f"metadata key {key!r} is not a comma-separated list of numbers: {raw[:80]!r}")
        return None


# --- holosoma: every value is JSON; the rest is in the experiment config -----------------------


# The metadata keys holosoma's reader reads (each a JSON value).
_HOLOSOMA_KEYS = ("dof_names", "kp", "kd", "experiment_config")


def _read_holosoma(props: Mapping[str, str]) -> PolicyMetadata:
    m = PolicyMetadata(convention="holosoma")
    values: dict[str, Any] = {}
    # Only the keys read here must be JSON: another tool's key beside them is not holosoma's.
    for key, raw in props.items():
        if key not in _HOLOSOMA_KEYS:
            continue
        try:
            values[key] = json.loads(raw)
        except ValueError:
            m.problems.append(f"metadata key {key!r} is not JSON (holosoma writes every value as JSON)")
    m.keys.update(
        joint_names="metadata key 'dof_names'",
        joint_stiffness="metadata key 'kp'",
        joint_damping="metadata key 'kd'",
        observation_names="experiment_config.observation.groups.actor_obs.terms",
        default_joint_pos="experiment_config.robot.init_state.default_joint_angles",
        action_scale="experiment_config.robot.control.action_scale",
        anchor_body="experiment_config.command (motion_config.body_name_ref)",
    )
    m.joint_names = _str_list(values.get("dof_names"))
    m.joint_stiffness = _number_list(values.get("kp"), "kp", m.problems)
    m.joint_damping = _number_list(values.get("kd"), "kd", m.problems)
    config = values.get("experiment_config")
    if not isinstance(config, dict):
        return m
    robot = _dig(config, "robot") or {}
    defaults = _dig(robot, "init_state", "default_joint_angles")
    if isinstance(defaults, dict) and m.joint_names:
        missing = [n for n in m.joint_names if n not in defaults]
        if missing:
            m.problems.append(f"default_joint_angles has no angle for {', '.join(missing)}")
        else:
            m.default_joint_pos = [float(defaults[n]) for n in m.joint_names]
    control = _dig(robot, "control") or {}
    scale = control.get("action_scale")
    if isinstance(scale, (int, float)):
        effort = robot.get("dof_effort_limit_list")
        if control.get("action_scales_by_effort_limit_over_p_gain"):
            # holosoma's per-joint scale: action_scale * effort / kp (0 where kp is 0).
            if isinstance(effort, list) and m.joint_stiffness and len(effort) == len(m.joint_stiffness):
                m.action_scale = [float(scale) * e / k if k else 0.0 for e, k in zip(effort, m.joint_stiffness)]
            else:
                m.problems.append("action scale by effort / kp, but no dof_effort_limit_list matching kp")
        else:
            m.action_scale = float(scale)
    if control.get("clip_actions") and isinstance(control.get("action_clip_value"), (int, float)):
        clip = float(control["action_clip_value"])
        # Actions are clipped to [-clip, clip]: a negative bound is no range.
        if math.isfinite(clip) and clip >= 0:
            m.action_clip = clip
        else:
            m.problems.append(
                f"experiment_config.robot.control.action_clip_value is {clip:g}; clip_actions needs a number >= 0"
            )
    group = _dig(config, "observation", "groups", "actor_obs")
    if isinstance(group, dict) and isinstance(group.get("terms"), dict):
        terms = group["terms"]
        # holosoma concatenates a group's terms in alphabetical order of their names.
        m.observation_names = sorted(terms)
        history = group.get("history_length")
        for name, cfg in terms.items():
            if isinstance(history, int):
                m.term_history[name] = history
            if not isinstance(cfg, dict):
                continue
            s = cfg.get("scale")
            if isinstance(s, (int, float)) and s != 1:
                m.term_scales[name] = float(s)
            elif isinstance(s, list):
                # An entry that is not a number is NaN, refused when the terms are resolved.
                m.term_scales[name] = [float(v) if _is_number(v) else math.nan for v in s]
            c = cfg.get("clip")
            if isinstance(c, list) and len(c) == 2:
                m.term_clips[name] = (float(c[0]), float(c[1]))
    ref = _find_key(_dig(config, "command"), "body_name_ref")
    if isinstance(ref, list) and ref and isinstance(ref[0], str):
        m.anchor_body = ref[0]
    elif isinstance(ref, str):
        m.anchor_body = ref
    return m


def _dig(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _find_key(value: Any, key: str) -> Any:
    """The first value of `key` anywhere in nested dicts and lists."""
    if isinstance(value, dict):
        if key in value:
            return value[key]
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            found = _find_key(item, key)
            if found is not None:
                return found
    return None


def _str_list(value: Any) -> list[str] | None:
    return [str(v) for v in value] if isinstance(value, list) else None


def _number_list(value: Any, key: str, problems: list[str]) -> list[float] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, (int, float)) for v in value):
        problems.append(f"metadata key {key!r} is not a list of numbers")
        return None
    return [float(v) for v in value]


# --- resolving: overrides, then every check -----------------------------------------------------


def resolve(
    metadata: PolicyMetadata, overrides: PolicyOverrides | None = None, what: str = "the policy"
) -> PolicyConfig:
    """A PolicyConfig from the file's fields and `overrides`, or UnsupportedPolicyError."""
    m = replace(metadata, problems=list(metadata.problems))  # overrides must not touch the caller's
    o = overrides or PolicyOverrides()
    problems = list(m.problems)
    for f in fields(PolicyOverrides):
        value = getattr(o, f.name)
        if value is not None:
            setattr(m, f.name, list(value) if isinstance(value, (list, tuple)) else value)

    def missing(name: str, what_: str) -> None:
        where = m.keys.get(name, "the file's metadata")
        # A key that is there but unreadable has said so already: it is not missing.
        if name in m.keys and any(p.startswith(where) for p in problems):
            return
        problems.append(f"no {what_}: {where} is missing (give {_FLAGS[name]})")

    names = m.joint_names
    if names and len(names) > MAX_NAMES:
        problems.append(f"joint_names has {len(names)} entries; the arena's G1 has {NUM_JOINTS} joints")
        names = None
    elif not names:
        missing("joint_names", "joint names")
    else:
        unknown = [n for n in names if n not in JOINT_NAMES]
        if unknown:
            problems.append(f"unknown joint names (not joints of the arena's G1): {', '.join(unknown)}")
        duplicates = sorted(n for n, times in Counter(names).items() if times > 1)
        if duplicates:
            problems.append(f"joint names given twice: {', '.join(duplicates)}")
        absent = [n for n in JOINT_NAMES if n not in names]
        if absent and not unknown:
            problems.append(
                f"the policy drives {len(names)} joints; the arena's G1 has {NUM_JOINTS}: no {', '.join(absent)}"
            )
    count = len(names) if names else NUM_JOINTS

    def per_joint(name: str, value: Any, label: str, scalar_ok: bool = False) -> np.ndarray | None:
        if value is None:
            return None
        array = np.asarray(value, dtype=np.float64).reshape(-1)
        if scalar_ok and array.size == 1:
            array = np.full(count, array[0])
        if array.size != count:
            problems.append(f"{label} has {array.size} values, the policy has {count} joints")
            return None
        if not np.isfinite(array).all():
            problems.append(f"{label} has non-finite values")
            return None
        return array

    default = per_joint("default_joint_pos", m.default_joint_pos, "default_joint_pos")
    if m.default_joint_pos is None:
        missing("default_joint_pos", "default joint positions")
    scale = per_joint("action_scale", m.action_scale, "action_scale", scalar_ok=True)
    if m.action_scale is None:
        missing("action_scale", "action scale")
    stiffness = per_joint("joint_stiffness", m.joint_stiffness, "joint_stiffness")
    damping = per_joint("joint_damping", m.joint_damping, "joint_damping")
    if (m.joint_stiffness is None) != (m.joint_damping is None):
        given, absent_ = ("stiffness", "damping") if m.joint_damping is None else ("damping", "stiffness")
        problems.append(f"joint {given} without joint {absent_} (give --joint-{absent_})")
    for label, gains in (("joint_stiffness", stiffness), ("joint_damping", damping)):
        if gains is not None and (gains < 0).any():
            problems.append(f"{label} has negative values")
    # A negative scale turns every action around (targets = default + scale * action).
    if scale is not None and (scale < 0).any():
        problems.append("action_scale has negative values")

    terms: list[ObservationTerm] = []
    observation_names = m.observation_names
    if not observation_names:
        missing("observation_names", "observation terms")
    elif len(observation_names) > MAX_NAMES:
        problems.append(f"observation_names has {len(observation_names)} entries; at most {MAX_NAMES} are read")
        observation_names = None
    for name in observation_names or ():
        source = term_source(name)
        if source is None:
            problems.append(f"unknown observation term {name!r}: the arena provides {', '.join(sorted(TERM_ALIASES))}")
            continue
        history = m.term_history.get(name, 1)
        if history > 1:
            problems.append(f"observation term {name!r} has a history of {history} frames; the runner feeds one")
        dims = m.term_dims.get(name)
        if dims is not None and dims != source.size:
            problems.append(f"observation term {name!r} has {dims} values in the policy, the arena's has {source.size}")
        scale_t = m.term_scales.get(name)
        term_scale: float | np.ndarray | None = None
        scale_values = scale_t if isinstance(scale_t, list) else ([] if scale_t is None else [scale_t])
        if not all(_is_finite_number(v) for v in scale_values):
            # A NaN scale would make every row NaN: each episode failed as non-finite actions.
            problems.append(f"observation term {name!r}: its scale holds a value that is not a finite number")
        elif isinstance(scale_t, list):
            if len(scale_t) not in (1, source.size):
                problems.append(f"observation term {name!r}: scale of {len(scale_t)} values for {source.size}")
            else:
                term_scale = np.asarray(scale_t, np.float32) if len(scale_t) > 1 else float(scale_t[0])
        elif scale_t is not None and scale_t != 1:
            term_scale = float(scale_t)
        clip = m.term_clips.get(name)
        if clip is not None:
            lo, hi = (np.float32(v) for v in clip)
            if np.isnan(lo) or np.isnan(hi) or lo > hi:
                # As the hosted runner (arena_onnx::config) refuses it: a NaN bound makes the
                # whole term NaN, a reversed one a constant.
                shown = ", ".join(_f32_text(v) for v in (lo, hi))
                problems.append(f"observation term {name!r}: clip [{shown}] is not a range")
        terms.append(ObservationTerm(name, source, term_scale, clip))

    anchor_users = [t.name for t in terms if t.source.needs_anchor]
    anchor = ""
    if anchor_users:
        if not m.anchor_body:
            where = m.keys.get("anchor_body", "the file's metadata")
            problems.append(
                f"the terms {', '.join(anchor_users)} need the anchor body: {where} is missing (give --anchor-body)"
            )
        # Checked against the session's spec (EpisodeSpec.anchor_body) by TrackingPolicyAgent.check.
        anchor = m.anchor_body or ""

    if problems:
        raise UnsupportedPolicyError(what, [m.note, *problems] if m.note else problems)
    assert names is not None and default is not None and scale is not None
    return PolicyConfig(
        joint_names=tuple(names),
        default_joint_pos=default,
        action_scale=scale,
        joint_stiffness=stiffness,
        joint_damping=damping,
        observation_terms=tuple(terms),
        anchor_body=anchor,
        action_clip=m.action_clip,
        convention=m.convention,
    )
