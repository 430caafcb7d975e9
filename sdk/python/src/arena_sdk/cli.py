"""`arena-agent`: runs an Agent class against a server from the command line."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from .agent import SupportsAct

# The pieces shared with onnx_cli.py live in cli_common.py, so that onnx_cli.py need not import
# this module; the public ones stay importable from here as before (__all__).
from .cli_common import (
    HIDDEN_MOTIONS_NOTE,
    KEY_METRICS,
    METRIC_UNITS,
    SUCCESS_METRICS,
    add_session_options,
    attach_number_lists,
    check_session_arguments,
    float_list,
    print_summary,
    run_agent,
    setup_logging,
)
from .client import check_gains

DESCRIPTION = """\
Run a MimicArena agent against an arena server: a scored submission of a benchmark (default),
or a practice session on chosen motions (--practice). The agent is a class with
act(batch) -> actions (see arena_sdk.Agent), named as MODULE:CLASS, where MODULE is an
importable module (the current directory is importable) or a path to a .py file; the class is
instantiated with no arguments.

Prints one line per finished episode and a summary table. Exit status:
  0    the run ended normally (a submission COMPLETED, or every practice motion ran)
  1    an error: a refused session, an unreachable server, invalid actions, the agent raised,
       the submission ended FAILED (cancelled by the organiser, or abandoned by the server
       after no agent ran it for too long), or it COMPLETED with no episode scored (every one
       failed or timed out)
  2    bad arguments, an agent that cannot be loaded, or an agent that cannot serve the
       benchmark's spec
  130  interrupted (Ctrl-C)

`arena-agent onnx POLICY.onnx ...` runs an exported mjlab / BeyondMimic / holosoma policy instead
of a class (`arena-agent onnx --help`); `arena-agent submit POLICY.onnx` hands the file to the
server, which evaluates it itself (`arena-agent submit --help`); `arena-agent submissions` lists
your team's submissions with their results and the quota left in each phase.
"""

EPILOG = """\
examples (the team token from --token or $ARENA_TOKEN; paths from the repository's root):
  arena-agent sdk/python/examples/replay_agent.py:ReplayAgent --server http://127.0.0.1:8080 \\
      --token "$ARENA_TOKEN" --benchmark g1-smoke
  arena-agent my_pkg.policy:Policy --benchmark g1-smoke --transport grpc \\
      --practice squat --practice arm_wave
  arena-agent my_agent.py:MyAgent --submission-id sub-0123456789abcdef   # resume / attach
  arena-agent onnx policy.onnx --benchmark g1-smoke-robot                 # an exported policy

--server takes the server's base URL (both transports), or an explicit
ws://HOST:PORT/api/v1/agent (ws://HOST:PORT gets that path) or grpc://HOST:PORT.
"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["submissions"]:  # no colon either: the team's submissions and quotas
        from .submissions_cli import main as submissions_main

        return submissions_main(argv[1:])
    if argv[:1] == ["submit"]:  # an ONNX file for the server to evaluate itself (hosted)
        from .submit_cli import main as submit_main

        return submit_main(argv[1:])
    if argv[:1] == ["onnx"]:  # a MODULE:CLASS always has a colon, so "onnx" is unambiguous
        from .onnx_cli import main as onnx_main

        return onnx_main(argv[1:])
    parser = _parser()
    args = parser.parse_args(attach_number_lists(argv, ("--joint-stiffness", "--joint-damping")))
    setup_logging(args.verbose)
    check_session_arguments(parser, args)
    try:
        check_gains(args.joint_stiffness, args.joint_damping, args.gain_preset)
    except ValueError as e:
        parser.error(str(e).replace("joint_", "--joint-").replace("gain_preset", "--gain-preset"))
    try:
        agent = load_agent(args.agent)
    except Exception as e:
        print(f"arena-agent: cannot load agent {args.agent!r}: {e}", file=sys.stderr)
        return 2
    return run_agent(
        agent,
        args,
        agent_name=args.agent_name,
        joint_stiffness=args.joint_stiffness,
        joint_damping=args.joint_damping,
        gain_preset=args.gain_preset,
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="arena-agent",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("agent", metavar="MODULE:CLASS", help="the agent class, e.g. my_agent.py:MyAgent or pkg.mod:Agent")
    add_session_options(p)
    p.add_argument("--agent-name", help="name shown on results and leaderboards (default: the class name)")
    p.add_argument(
        "--joint-stiffness",
        type=float_list,
        metavar="KP,...",
        help="joint-position benchmarks: the PD stiffness the agent was trained with, 29 values in the G1 joint "
        "order (default: the benchmark's)",
    )
    p.add_argument("--joint-damping", type=float_list, metavar="KD,...", help="the same for the damping")
    p.add_argument("--gain-preset", metavar="NAME", help="one of the benchmark's named gain presets instead")
    return p


def load_agent(spec: str) -> SupportsAct:
    """Instantiates `MODULE:CLASS`; MODULE is a dotted module name or a path to a .py file."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError("expected MODULE:CLASS, e.g. my_agent.py:MyAgent")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    path = Path(module_name)
    if module_name.endswith(".py") or os.sep in module_name:
        if not path.is_file():
            raise FileNotFoundError(f"no file {module_name}")
        # The file's folder is importable too, so the agent can import modules next to it.
        sys.path.insert(0, str(path.resolve().parent))
        name = path.stem
        module_spec = importlib.util.spec_from_file_location(name, path)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    factory = module
    for part in attr.split("."):
        factory = getattr(factory, part)
    if not callable(factory):
        raise TypeError(f"{attr} in {module_name} is not a class")
    agent = factory()
    if not callable(getattr(agent, "act", None)):
        raise TypeError(f"{attr}() has no act(batch) method")
    return cast(SupportsAct, agent)


__all__ = [
    "DESCRIPTION",
    "EPILOG",
    "HIDDEN_MOTIONS_NOTE",
    "KEY_METRICS",
    "METRIC_UNITS",
    "SUCCESS_METRICS",
    "add_session_options",
    "attach_number_lists",
    "check_session_arguments",
    "float_list",
    "load_agent",
    "main",
    "print_summary",
    "run_agent",
    "setup_logging",
]


if __name__ == "__main__":
    sys.exit(main())
