"""mjlab's own tracking metrics and terminations, run on episodes the arena recorded.

Usage: python mjlab_metrics_oracle.py EPISODES.json --mjlab DIR [--tol 1e-9] [--report OUT.json]

DIR holds the unpacked mjlab 1.6.0 wheel (scripts/bootstrap-mjlab.sh puts it in
third_party/mjlab-1.6.0). mjlab is not imported as a package (its __init__ needs MuJoCo Warp and
tyro): this script loads the files it needs by path, which need only torch and numpy:
  utils/lab_api/math.py          quat_mul, yaw_quat, quat_apply, quat_error_magnitude, ...
  tasks/tracking/mdp/metrics.py  compute_mpkpe, compute_root_relative_mpkpe, ... (called as is)
  tasks/tracking/mdp/terminations.py  bad_anchor_pos_z_only, bad_anchor_ori,
                                      bad_motion_body_pos_z_only (called as is)
  tasks/tracking/mdp/rewards.py  _get_body_indexes (used by the termination above)
  tasks/tracking/mdp/commands.py MotionCommand.update_relative_body_poses, the function's own
                                 source compiled on its own (the class needs the simulator)

Each episode of EPISODES.json gives, per row, the 14 tracked bodies of the robot and of the
reference (world positions and (w, x, y, z) orientations), the robot's joint velocities, the
reference's (`joint_vel`, or the clip's joint positions from which they are computed as mjlab's
scripts/csv_to_npz.py writes a motion file's: torch.gradient along the clip), the row times,
and the values the arena computed. The oracle replays mjlab's step: for row k >= 1 the
reference of row k is re-anchored on the robot's anchor at row k - 1
(update_relative_body_poses), the metrics pair it with the robot at row k, the terminations
check row k, and the means run over rows 1..=the first terminating row, as
tasks/tracking/scripts/evaluate.py accumulates them. Success is "no termination"; the failure
time is that row's time (the last row's if none), from the first row.

Prints every metric of every episode with the arena's value and the difference, then the
largest difference per metric. Exit 0 if every difference is within --tol, 1 if not, 2 on bad
input.
"""

import argparse
import ast
import importlib.util
import json
import math
import os
import sys
import types

import torch

BODY_NAMES = (
    "pelvis", "left_hip_roll_link", "left_knee_link", "left_ankle_roll_link",
    "right_hip_roll_link", "right_knee_link", "right_ankle_roll_link", "torso_link",
    "left_shoulder_roll_link", "left_elbow_link", "left_wrist_yaw_link",
    "right_shoulder_roll_link", "right_elbow_link", "right_wrist_yaw_link",
)
ANCHOR = BODY_NAMES.index("torso_link")
# The G1 config's ee_body_pos bodies, which evaluate.py also passes to the ee_* metrics.
EE_NAMES = ("left_ankle_roll_link", "right_ankle_roll_link", "left_wrist_yaw_link", "right_wrist_yaw_link")
METRICS = ("mjlab_success", "mjlab_failure_time_s", "mpkpe", "r_mpkpe", "joint_vel_error",
           "ee_pos_error", "ee_ori_error")


class BadInput(Exception):
    pass


def load_mjlab(root):
    src = os.path.join(root, "mjlab")
    if not os.path.isfile(os.path.join(src, "tasks", "tracking", "mdp", "metrics.py")):
        raise BadInput(f"{root} does not hold mjlab's sources (expected mjlab/tasks/tracking/mdp/metrics.py)")
    for name in ("mjlab", "mjlab.utils", "mjlab.utils.lab_api", "mjlab.tasks", "mjlab.tasks.tracking",
                 "mjlab.tasks.tracking.mdp"):
        pkg = types.ModuleType(name)
        pkg.__path__ = []
        sys.modules[name] = pkg
    # rewards.py imports ContactSensor only for a type check of other rewards.
    sensor = types.ModuleType("mjlab.sensor")
    sensor.ContactSensor = object
    sys.modules["mjlab.sensor"] = sensor

    def load(name, rel):
        spec = importlib.util.spec_from_file_location(name, os.path.join(src, rel))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    lab_math = load("mjlab.utils.lab_api.math", "utils/lab_api/math.py")
    # commands.py: only update_relative_body_poses is needed; its source runs against the
    # names commands.py imports from lab_api.math.
    path = os.path.join(src, "tasks/tracking/mdp/commands.py")
    with open(path) as fh:
        tree = ast.parse(fh.read(), path)
    fn = next(n for cls in tree.body if isinstance(cls, ast.ClassDef) and cls.name == "MotionCommand"
              for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "update_relative_body_poses")
    fn.decorator_list = []
    scope = {name: getattr(lab_math, name) for name in dir(lab_math) if not name.startswith("_")}
    scope["torch"] = torch
    exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), scope)
    commands = types.ModuleType("mjlab.tasks.tracking.mdp.commands")
    commands.MotionCommand = type("MotionCommand", (), {
        "update_relative_body_poses": scope["update_relative_body_poses"]})
    sys.modules["mjlab.tasks.tracking.mdp.commands"] = commands
    load("mjlab.tasks.tracking.mdp.rewards", "tasks/tracking/mdp/rewards.py")
    metrics = load("mjlab.tasks.tracking.mdp.metrics", "tasks/tracking/mdp/metrics.py")
    terminations = load("mjlab.tasks.tracking.mdp.terminations", "tasks/tracking/mdp/terminations.py")
    return commands.MotionCommand, metrics, terminations


def tensor(episode, key, rows, shape):
    if key not in episode:
        raise BadInput(f"episode {episode.get('name', '?')}: no {key!r}")
    t = torch.tensor(episode[key], dtype=torch.float64)
    if tuple(t.shape) != (rows,) + shape:
        raise BadInput(f"episode {episode.get('name', '?')}: {key} has shape {tuple(t.shape)}, "
                       f"expected {(rows,) + shape}")
    return t


def reference_joint_velocities(episode, rows):
    """The reference's joint velocities of the episode's rows: `joint_vel` as given, or, given the
    clip's joint positions (`clip_joint_pos`, `clip_fps`, `clip_first_frame`), computed as
    mjlab's csv_to_npz.py writes them into a motion file: torch.gradient along the clip."""
    if "clip_joint_pos" not in episode:
        return tensor(episode, "joint_vel", rows, (29,))
    clip = torch.tensor(episode["clip_joint_pos"], dtype=torch.float64)
    first = int(episode.get("clip_first_frame", 0))
    fps = float(episode.get("clip_fps", 0.0))
    if clip.ndim != 2 or clip.shape[1] != 29 or fps <= 0 or first < 0 or first + rows > clip.shape[0]:
        raise BadInput(f"episode {episode.get('name', '?')}: clip_joint_pos {tuple(clip.shape)} at fps {fps} "
                       f"does not hold rows {first}..{first + rows}")
    return torch.gradient(clip, spacing=1.0 / fps, dim=0)[0][first:first + rows]


def replay(episode, MotionCommand, metrics, terminations):
    times = episode["times"]
    rows = len(times)
    if rows < 2:
        raise BadInput(f"episode {episode.get('name', '?')}: {rows} row(s); needs the reset row and a step")
    ref_pos = tensor(episode, "body_pos_w", rows, (14, 3))
    ref_quat = tensor(episode, "body_quat_w", rows, (14, 4))
    ref_vel = reference_joint_velocities(episode, rows)
    robot_pos = tensor(episode, "robot_body_pos_w", rows, (14, 3))
    robot_quat = tensor(episode, "robot_body_quat_w", rows, (14, 4))
    robot_vel = tensor(episode, "robot_joint_vel", rows, (29,))

    command = MotionCommand()
    command.cfg = types.SimpleNamespace(body_names=BODY_NAMES)
    command.num_envs = 1
    command.device = "cpu"
    robot = types.SimpleNamespace(data=types.SimpleNamespace(
        gravity_vec_w=torch.tensor([[0.0, 0.0, -1.0]], dtype=torch.float64)))
    env = types.SimpleNamespace(
        command_manager=types.SimpleNamespace(get_term=lambda name: command),
        scene={"robot": robot})
    asset_cfg = types.SimpleNamespace(name="robot")

    sums = {m: 0.0 for m in METRICS[2:]}
    steps, terminated_row = 0, None
    for k in range(1, rows):
        # End of step k-1: the reference of row k re-anchored on the robot as it stands.
        command.body_pos_w = ref_pos[k:k + 1]
        command.body_quat_w = ref_quat[k:k + 1]
        command.anchor_pos_w = ref_pos[k:k + 1, ANCHOR]
        command.anchor_quat_w = ref_quat[k:k + 1, ANCHOR]
        command.robot_anchor_pos_w = robot_pos[k - 1:k, ANCHOR].clone()
        command.robot_anchor_quat_w = robot_quat[k - 1:k, ANCHOR].clone()
        command.update_relative_body_poses()
        # Step k: the robot after it.
        command.joint_vel = ref_vel[k:k + 1]
        command.robot_body_pos_w = robot_pos[k:k + 1]
        command.robot_body_quat_w = robot_quat[k:k + 1]
        command.robot_joint_vel = robot_vel[k:k + 1]
        command.robot_anchor_pos_w = robot_pos[k:k + 1, ANCHOR]
        command.robot_anchor_quat_w = robot_quat[k:k + 1, ANCHOR]
        sums["mpkpe"] += float(metrics.compute_mpkpe(command)[0])
        sums["r_mpkpe"] += float(metrics.compute_root_relative_mpkpe(command)[0])
        sums["joint_vel_error"] += float(metrics.compute_joint_velocity_error(command)[0])
        sums["ee_pos_error"] += float(metrics.compute_ee_position_error(command, EE_NAMES)[0])
        sums["ee_ori_error"] += float(metrics.compute_ee_orientation_error(command, EE_NAMES)[0])
        steps += 1
        fired = [
            bool(terminations.bad_anchor_pos_z_only(env, "motion", 0.25)[0]),
            bool(terminations.bad_anchor_ori(env, asset_cfg, "motion", 0.8)[0]),
            bool(terminations.bad_motion_body_pos_z_only(env, "motion", 0.25, EE_NAMES)[0]),
        ]
        if any(fired):
            terminated_row = k
            break
    out = {m: s / steps for m, s in sums.items()}
    out["mjlab_success"] = 1.0 if terminated_row is None else 0.0
    end = terminated_row if terminated_row is not None else rows - 1
    out["mjlab_failure_time_s"] = times[end] - times[0]
    return out, terminated_row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("episodes")
    ap.add_argument("--mjlab", required=True, help="folder holding mjlab 1.6.0's unpacked wheel")
    ap.add_argument("--tol", type=float, default=1e-9, help="largest absolute difference allowed")
    ap.add_argument("--report", help="write the differences as JSON here")
    args = ap.parse_args(argv)
    try:
        MotionCommand, metrics, terminations = load_mjlab(args.mjlab)
        try:
            with open(args.episodes) as fh:
                episodes = json.load(fh)["episodes"]
        except (OSError, ValueError, KeyError) as e:
            raise BadInput(f"cannot read episodes from {args.episodes}: {e}")
        results = []
        for ep in episodes:
            ours, row = replay(ep, MotionCommand, metrics, terminations)
            arena = ep.get("arena", {})
            missing = [m for m in METRICS if m not in arena]
            if missing:
                raise BadInput(f"episode {ep.get('name', '?')}: no arena value for {', '.join(missing)}")
            results.append((ep.get("name", "?"), row, ours, arena))
    except BadInput as e:
        print(f"mjlab oracle: bad input: {e}", file=sys.stderr)
        return 2

    worst = {m: 0.0 for m in METRICS}
    print(f"{'episode':<28} {'metric':<22} {'mjlab 1.6.0':>14} {'arena':>14} {'|diff|':>10}")
    for name, row, ours, arena in results:
        for m in METRICS:
            d = abs(ours[m] - arena[m])
            if math.isnan(d):
                d = math.inf
            worst[m] = max(worst[m], d)
            print(f"{name:<28} {m:<22} {ours[m]:>14.9f} {arena[m]:>14.9f} {d:>10.2e}")
        print(f"{name:<28} {'first termination':<22} {'none' if row is None else 'row ' + str(row):>14}")
    print("largest differences: " + ", ".join(f"{m} {worst[m]:.2e}" for m in METRICS))
    if args.report:
        with open(args.report, "w") as fh:
            json.dump({"episodes": len(results), "largest": worst,
                       "terminated": {n: r for n, r, _, _ in results}}, fh, indent=1)
    bad = [m for m in METRICS if not worst[m] <= args.tol]
    if bad:
        print(f"mjlab oracle: {', '.join(bad)} differ by more than {args.tol:g}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
