"""`arena-agent onnx POLICY.onnx ...`: runs an exported tracking policy as a submission or a
practice session (docs/bring-your-policy.md)."""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path

from .cli_common import (
    add_session_options,
    attach_number_lists,
    check_session_arguments,
    float_list,
    non_negative_int,
    run_agent,
    setup_logging,
)
from .client import fetch_spec
from .errors import ProtocolError, RefusedError
from .policy_config import PolicyOverrides, UnsupportedPolicyError

PROG = "arena-agent onnx"

DESCRIPTION = """\
Run an exported tracking policy (mjlab / BeyondMimic or holosoma ONNX file) against an arena
server. The file's metadata gives the joint order, default pose, action scale, PD gains and
observation terms; the runner builds each observation from the benchmark's robot-interface
groups, feeds time_step with the episode step + 1 (the command's frame, as mjlab does), declares the policy's gains in Connect and sends
q* = default_joint_pos + action_scale * action (joint_position action mode). The benchmark must
be in that mode, send the groups the terms read and relate its motion_anchor groups to the
policy's anchor body.

Before a new submission it checks the benchmark's spec on a practice connection (nothing is
stored), so a policy that cannot run is refused before a submission exists.

Exit status: 0 when the run ended normally, 1 on an error (refused session, unreachable server,
a submission that ended FAILED or COMPLETED with no episode scored), 2 on bad arguments or a
policy the arena cannot run (the message names what is missing), 130 when interrupted.
"""

EPILOG = """\
examples:
  arena-agent onnx policy.onnx --server http://127.0.0.1:8080 --token "$ARENA_TOKEN" \\
      --benchmark g1-smoke-robot
  arena-agent onnx policy.onnx --show                      # the mapping, without connecting
  arena-agent onnx policy.onnx --benchmark g1-smoke-robot --practice squat --action-scale 0.25

Joint-indexed overrides are in the policy's joint order (its joint_names / dof_names).
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    lists = ("--action-scale", "--default-joint-pos", "--joint-stiffness", "--joint-damping")
    args = parser.parse_args(attach_number_lists(sys.argv[1:] if argv is None else argv, lists))
    setup_logging(args.verbose)
    if not args.show:
        check_session_arguments(parser, args)
    overrides = PolicyOverrides(
        joint_names=args.joint_names,
        observation_names=args.observation_names,
        default_joint_pos=args.default_joint_pos,
        action_scale=args.action_scale,
        joint_stiffness=args.joint_stiffness,
        joint_damping=args.joint_damping,
        anchor_body=args.anchor_body,
    )
    try:
        from .onnx_policy import OnnxPolicy

        policy = OnnxPolicy.from_file(args.policy, overrides, threads=args.threads)
    except UnsupportedPolicyError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    except (ImportError, OSError) as e:
        print(f"{PROG}: cannot load {args.policy}: {e}", file=sys.stderr)
        return 2
    if args.show:
        print(policy.describe())
        return 0
    stiffness = damping = None
    if not args.gain_preset:
        gains = policy.config.gains_g1()
        if gains is None:
            print(
                f"{PROG}: cannot run {args.policy}: it has no PD gains (metadata joint_stiffness / kp): give "
                "--joint-stiffness and --joint-damping, or --gain-preset NAME",
                file=sys.stderr,
            )
            return 2
        stiffness, damping = gains
    agent = policy.agent()
    if not (args.practice or args.submission_id or args.no_check):
        # A refusal found at Connected would leave a created submission RUNNING.
        try:
            spec = fetch_spec(
                args.server,
                args.token,
                benchmark=args.benchmark,
                phase=args.phase,
                transport=args.transport,
                joint_stiffness=stiffness,
                joint_damping=damping,
                gain_preset=args.gain_preset,
            )
        except RefusedError as e:
            print(f"{PROG}: error: {e}", file=sys.stderr)
            return 1
        except ProtocolError as e:
            # Not an arena at that URL, or another protocol version: no submission is made.
            print(f"{PROG}: error: the server at {args.server} does not speak the arena protocol: {e}", file=sys.stderr)
            return 1
        if spec is None:
            print(
                f"{PROG}: note: the policy could not be checked against the session before the submission "
                "(a private phase offers no practice, or the check could not be made): a policy that cannot "
                "run fails the submission when its session starts, and that counts against the quota",
                file=sys.stderr,
            )
        problems = agent.check(spec) if spec is not None else []
        if problems:
            print(f"{PROG}: {UnsupportedPolicyError(args.policy, problems)}", file=sys.stderr)
            return 2
    return run_agent(
        agent,
        args,
        agent_name=args.agent_name or default_agent_name(policy.metadata, policy.path),
        joint_stiffness=stiffness,
        joint_damping=damping,
        gain_preset=args.gain_preset,
        prog=PROG,
    )


def default_agent_name(metadata: Mapping[str, str], path: Path) -> str:
    """A name better than the file's (mjlab exports are all `policy.onnx`), by the rule the
    server names an uploaded policy with (`arena-agent submit`), so the two commands name one
    file alike: the run the metadata names (mjlab's `run_path`), else the motion it was trained
    on (holosoma's `motion_config.motion_file`), else the file's stem unless it is `policy`, else
    its folder's name."""
    run = _fit_name(metadata.get("run_path", ""))
    if run:
        return run
    try:
        config = json.loads(metadata.get("experiment_config", ""))
        motion_file = config["command"]["setup_terms"]["motion_command"]["params"]["motion_config"]["motion_file"]
        motion = _fit_name(Path(str(motion_file)).stem)
    except (ValueError, KeyError, TypeError):
        motion = ""
    if motion:
        return motion
    if path.stem.strip() and path.stem.strip() != "policy":
        return path.stem.strip()
    folder = path.resolve().parent.name
    return folder or "onnx-policy"


# Bidirectional formatting characters, which the server refuses in an agent's name.
_BIDI_CONTROLS = frozenset(chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)])


def _fit_name(derived: str) -> str:
    """A name from a file's metadata made fit to be an agent's name (as the server makes one):
    no control or bidirectional formatting characters, at most 128 characters."""
    kept = "".join(c for c in derived if unicodedata.category(c) != "Cc" and c not in _BIDI_CONTROLS)
    return kept[:128].strip()


def _action_scale(text: str) -> float | list[float]:
    values = float_list(text)
    return values[0] if len(values) == 1 else values


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("policy", metavar="POLICY.onnx", help="the exported policy")
    add_session_options(p)
    p.add_argument("--agent-name", help="name shown on results and leaderboards [default: as `arena-agent submit` names the file: the run (mjlab's run_path) or the motion (holosoma's motion_file) its metadata names, else the file's name unless it is policy.onnx, else its folder's]")
    p.add_argument("--show", action="store_true", help="print how the policy maps onto the arena, then exit")
    p.add_argument(
        "--no-check", action="store_true", help="skip the practice connection that checks the spec before submitting"
    )
    p.add_argument("--threads", type=non_negative_int, default=0, help="onnxruntime intra-op threads (default: its own choice)")
    o = p.add_argument_group("overrides (replace the file's values or fill in what it lacks)")
    o.add_argument("--action-scale", type=_action_scale, metavar="X[,...]", help="one value, or one per joint")
    o.add_argument("--default-joint-pos", type=float_list, metavar="Q,...", help="default pose (rad), per joint")
    o.add_argument("--joint-stiffness", type=float_list, metavar="KP,...", help="PD stiffness (N·m/rad), per joint")
    o.add_argument("--joint-damping", type=float_list, metavar="KD,...", help="PD damping (N·m·s/rad), per joint")
    o.add_argument(
        "--anchor-body",
        metavar="BODY",
        help="the body of the motion_anchor terms (must be the benchmark's anchor body, usually torso_link)",
    )
    o.add_argument("--joint-names", type=_names, metavar="NAME,...", help="the policy's joint order")
    o.add_argument(
        "--observation-names", type=_names, metavar="TERM,...", help="the policy's observation terms, in order"
    )
    o.add_argument(
        "--gain-preset",
        metavar="NAME",
        help="declare one of the benchmark's gain presets instead of the policy's gains",
    )
    return p


if __name__ == "__main__":
    sys.exit(main())
