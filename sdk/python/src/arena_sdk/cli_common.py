"""What the `arena-agent` commands share (cli.py: MODULE:CLASS; onnx_cli.py: `arena-agent onnx`):
the session options and their checks, number-list arguments, and running an agent with a progress
line per episode and a summary table. It imports neither command, so the commands depend on it
and not on each other (cli.py dispatches to onnx_cli.py and submissions_cli.py)."""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import traceback
from collections.abc import Sequence
from typing import TextIO

from .agent import EpisodeEnd, SupportsAct
from .client import Connected, Event, Reconnecting, RunSummary, ServerError, run
from .errors import ArenaError, RefusedError
from .policy_config import UnsupportedPolicyError
from .transports import resolve_endpoint

#: Metrics shown in the progress lines and the summary table when the benchmark computes them:
#: both success rules (PHC's and mjlab's), EMD, and the body-position errors.
KEY_METRICS = ("success", "mjlab_success", "emd", "mpjpe_g", "mpjpe_rr", "r_mpkpe")
#: Their units (docs/metrics.md): success 0 or 1 (no unit), EMD of joint-angle frames in
#: radians, MPJPE in millimetres, mjlab's r_mpkpe in metres (mjlab's unit).
METRIC_UNITS = {"success": "", "mjlab_success": "", "emd": "rad", "mpjpe_g": "mm", "mpjpe_rr": "mm", "r_mpkpe": "m"}
#: The 0/1 success metrics: their rates are over every episode (an unscored failure is no success).
SUCCESS_METRICS = ("success", "mjlab_success")

#: Why a motion shows as "-": the server withholds the names of hidden motions.
HIDDEN_MOTIONS_NOTE = "motions show as '-': this benchmark or phase keeps its motion names hidden"


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # The progress display prints reconnects and server errors itself; the SDK's own log lines
    # (the same at WARNING level) only with --verbose.
    logging.getLogger("arena_sdk").setLevel(logging.INFO if verbose else logging.ERROR)


def non_negative_int(text: str) -> int:
    """argparse type: a whole number from 0 to 2**32 - 1 (the protocol's uint32 counts); one
    outside would only fail later, inside protobuf, as if the agent had raised."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value <= 0xFFFF_FFFF:
        raise argparse.ArgumentTypeError(f"must be from 0 to {0xFFFF_FFFF}, got {value}")
    return value


def add_session_options(p: argparse.ArgumentParser) -> None:
    """Where and what to run: the options every arena-agent command shares."""
    p.add_argument(
        "--server",
        default=os.environ.get("ARENA_SERVER", "http://127.0.0.1:8080"),
        help="server URL (default: $ARENA_SERVER or %(default)s)",
    )
    p.add_argument("--token", default=os.environ.get("ARENA_TOKEN"), help="team token (default: $ARENA_TOKEN)")
    p.add_argument("--benchmark", default="", help="benchmark to run, e.g. g1-smoke")
    p.add_argument("--transport", choices=("ws", "grpc"), default=None, help="default: from the URL's scheme, else ws")
    p.add_argument("--phase", help="challenge phase to submit to (its benchmark applies)")
    p.add_argument("--submission-id", help="attach to an existing submission (created over REST, or unfinished)")
    p.add_argument(
        "--practice",
        metavar="MOTION",
        action="append",
        help="practise this motion (whole clip) instead of submitting; repeat for several",
    )
    p.add_argument(
        "--max-batch", type=non_negative_int, default=0, help="largest batch per request (default: the server's)"
    )
    p.add_argument(
        "--encoding", choices=("binary", "json"), default="binary", help="WebSocket frames (default: %(default)s)"
    )
    p.add_argument(
        "--max-reconnects",
        type=non_negative_int,
        default=10,
        help="failed connections in a row before giving up, once a connection has been up (a server never "
        "reached ends the run at once) (default: 10); while a server that said it is stopping is waited for "
        "(300 s), attempts do not count",
    )
    p.add_argument(
        "--whole-goal-rows",
        action="store_true",
        help="ask for whole reference_goal groups in every request instead of each row once "
        "(docs/protocol.md §5; the agent sees the same values)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log the client's progress")


def check_session_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors (exit status 2) before anything is loaded or connected."""
    if not args.token:
        parser.error("--token is required (or set ARENA_TOKEN)")
    try:
        endpoint = resolve_endpoint(args.server, args.transport)
    except ValueError as e:
        parser.error(str(e))
    if args.encoding == "json" and endpoint.transport == "grpc":
        parser.error("--encoding json is for WebSocket only; gRPC always carries protobuf")
    if not (args.benchmark or args.phase or args.submission_id):
        parser.error("give --benchmark, --phase or --submission-id")
    if args.practice and args.submission_id:
        parser.error("--practice and --submission-id exclude each other")
    if args.gain_preset and (args.joint_stiffness or args.joint_damping):
        parser.error("--gain-preset excludes --joint-stiffness / --joint-damping")


def attach_number_lists(argv: Sequence[str], options: Sequence[str]) -> list[str]:
    """`--opt -0.1,0.3` as `--opt=-0.1,0.3`: argparse takes a value starting with '-' for an
    option, and default poses usually start with a negative angle."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in options and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            try:
                float_list(argv[i + 1])
            except argparse.ArgumentTypeError:
                pass
            else:
                out.append(f"{argv[i]}={argv[i + 1]}")
                i += 2
                continue
        out.append(argv[i])
        i += 1
    return out


def float_list(text: str) -> list[float]:
    """argparse type: numbers separated by commas (or spaces)."""
    try:
        return [float(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None


def run_agent(
    agent: SupportsAct,
    args: argparse.Namespace,
    *,
    agent_name: str | None,
    joint_stiffness: Sequence[float] | None = None,
    joint_damping: Sequence[float] | None = None,
    gain_preset: str | None = None,
    prog: str = "arena-agent",
) -> int:
    """Runs with the session options of `args`, printing progress and the summary; the exit status."""
    progress = _Progress(sys.stdout, len(args.practice) if args.practice else 0)
    progress.gains_given = bool(gain_preset) or joint_stiffness is not None or joint_damping is not None
    try:
        summary = run(
            agent,
            args.server,
            args.token,
            benchmark=args.benchmark,
            transport=args.transport,
            phase=args.phase,
            practice=args.practice,
            submission_id=args.submission_id,
            agent_name=agent_name,
            max_batch=args.max_batch,
            encoding=args.encoding,
            max_reconnects=args.max_reconnects,
            reference_goal_once=not args.whole_goal_rows,
            on_event=progress,
            joint_stiffness=joint_stiffness,
            joint_damping=joint_damping,
            gain_preset=gain_preset,
        )
    except UnsupportedPolicyError as e:  # the session's spec does not fit the policy
        print(f"{prog}: {e}", file=sys.stderr)
        if progress.submission_id:
            # The client said so to the server (agent_cannot_serve): resuming with this policy
            # would fail the same way.
            print(
                f"{prog}: submission {progress.submission_id}: the server ends it FAILED if it had "
                "finished no episode; one with finished episodes stays RUNNING for a policy that "
                f"serves the benchmark (--submission-id {progress.submission_id})",
                file=sys.stderr,
            )
        return 2
    except ArenaError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        if not isinstance(e, RefusedError):
            _say_how_to_resume(progress.submission_id)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        _say_how_to_resume(progress.submission_id)
        return 130
    except Exception:  # the agent's own code raised: its traceback, then what became of the run
        traceback.print_exc()
        print(f"{prog}: error: the agent raised (traceback above)", file=sys.stderr)
        _say_how_to_resume(progress.submission_id)
        return 1
    print_summary(summary, sys.stdout)
    return exit_status(summary, prog)


def exit_status(summary: RunSummary, prog: str) -> int:
    """The exit status of a run that ended normally (the error said on stderr when it is 1)."""
    if summary.submission_status == "FAILED":
        # The run ended, but not well (as the Rust SDK's `report_done`): a script must not take it
        # for a scored submission.
        print(f"{prog}: error: {ended_failed(summary.submission_id)}", file=sys.stderr)
        return 1
    if summary.episodes_scored == 0 and summary.episodes_failed:
        # Completed, yet nothing in it counts: not a run a script should take for a success.
        print(
            f"{prog}: error: submission {summary.submission_id} completed with no episode scored: all "
            f"{summary.episodes_failed} failed or timed out (the reasons at GET "
            f"/api/v1/submissions/{summary.submission_id}/results)",
            file=sys.stderr,
        )
        return 1
    return 0


def ended_failed(submission_id: str) -> str:
    """Why a run exits 1 although the session ended normally: what FAILED means here."""
    return (
        f"submission {submission_id} ended FAILED: cancelled by the organiser, or abandoned by the "
        "server after no agent ran it for too long (its idle_submission_expiry_s)"
    )


def _say_how_to_resume(submission_id: str) -> None:
    if submission_id:
        print(
            f"arena-agent: submission {submission_id} is left RUNNING (it counts towards quotas); "
            f"its unfinished episodes wait: resume it with --submission-id {submission_id}. "
            "An interrupted episode runs again from its start. One your side cut short (a lost "
            "connection) uses one of its attempts (the server's max_attempts; an episode "
            "interrupted that often fails), one the server cut short (it stopped or failed) does "
            "not: `arena-agent submissions` shows how many were used",
            file=sys.stderr,
        )


class _Progress:
    """Prints a line per episode end and notable events."""

    def __init__(self, out: TextIO, practice_total: int) -> None:
        self.out = out
        self.total = practice_total
        self.done = 0
        #: The submission being run, once connected ("" in practice).
        self.submission_id = ""
        #: Gains were given on the command line (a preset or per-joint values).
        self.gains_given = False

    def __call__(self, event: Event) -> None:
        if isinstance(event, Connected):
            if event.submission_id:
                self.submission_id = event.submission_id
                self.total = event.episodes_total
                self.done = event.episodes_total - event.episodes_remaining
                print(
                    f"connected: submission {event.submission_id} of {event.benchmark}: "
                    f"{event.episodes_remaining} of {event.episodes_total} episodes to run",
                    file=self.out,
                )
            else:
                print(f"connected: practice session on {event.benchmark}", file=self.out)
            if self.gains_given and event.spec.action_mode != "joint_position":
                # The protocol ignores gains in the normalized mode: say so rather than let a
                # preset the benchmark does not even offer pass in silence.
                print(
                    f"note: {event.benchmark} takes normalized actions and applies its own PD gains: "
                    "the PD gains declared (--gain-preset, --joint-stiffness, --joint-damping, or a policy file's) are ignored",
                    file=sys.stderr,
                )
        elif isinstance(event, EpisodeEnd):
            self.done += 1
            count = f"[{self.done}/{self.total}]" if self.total else f"[{self.done}]"
            print(f"{count} {_describe(event)}", file=self.out)
        elif isinstance(event, Reconnecting):
            # Tries while a stopping server is waited for do not count against --max-reconnects:
            # said, so that a count past it does not read as a broken limit.
            why = "; the server said it was stopping, waiting for it to come back" if event.waiting_for_restart else ""
            print(
                f"connection lost ({event.error}){why}; reconnecting in {event.delay_s:.1f} s (attempt {event.attempt})",
                file=sys.stderr,
            )
        elif isinstance(event, ServerError):
            print(f"server error: {event.code}: {event.message}", file=sys.stderr)
        self.out.flush()


def _describe(e: EpisodeEnd) -> str:
    text = f"episode {e.episode_id}{' ' + e.motion if e.motion else ''}: {e.status}, {e.steps} steps"
    metrics = [f"{k} {_fmt(e.metrics[k])}{_unit(k, ' ')}" for k in KEY_METRICS if k in e.metrics]
    if metrics:
        text += ", " + ", ".join(metrics)
    if e.reason:
        text += f" ({e.reason})"
    return text


def _fmt(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.4f}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _unit(metric: str, sep: str) -> str:
    unit = METRIC_UNITS.get(metric, "")
    return f"{sep}{unit}" if unit else ""


def print_summary(summary: RunSummary, out: TextIO) -> None:
    """The episodes as a table (sorted by episode id), then totals."""
    episodes = sorted(summary.episodes, key=lambda e: e.episode_id)
    results = f"GET /api/v1/submissions/{summary.submission_id}/results"
    if summary.submission_id and not episodes and not summary.episodes_total:
        # No session opened: the server said the submission had finished (`--submission-id` of
        # a finished one, or one another agent finished while this run waited to attach): no
        # table of nothing, what became of its episodes when the server said.
        line = (
            f"\nsubmission {summary.submission_id} {summary.submission_status}: it had finished when this run "
            "reached it, nothing was left to run"
        )
        if summary.episodes_scored is not None:
            failed = summary.episodes_failed or 0
            line += f"; its {summary.episodes_scored + failed} episodes: {summary.episodes_scored} scored"
            if failed:
                line += f", {failed} failed or timed out"
        print(f"{line}: its results at {results}", file=out)
        return
    metrics = [k for k in KEY_METRICS if any(k in e.metrics for e in episodes)]
    header = ["episode", "motion", "status", "steps", *(f"{k}{_unit(k, ' ')}" for k in metrics)]
    rows = [
        [
            str(e.episode_id),
            e.motion or "-",
            e.status,
            str(e.steps),
            *(_fmt(e.metrics[k]) if k in e.metrics else "-" for k in metrics),
        ]
        for e in episodes
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print(file=out)
    for r in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), file=out)
    statuses: dict[str, int] = {}
    for e in episodes:
        statuses[e.status] = statuses.get(e.status, 0) + 1
    counts = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "no episodes"
    what = (
        f"submission {summary.submission_id} {summary.submission_status}".rstrip()
        if summary.submission_id
        else "practice"
    )
    # The ends this run received, over all its connections: a resumed submission ran others
    # before, and ends sent while a connection was down are lost to the run, not to the server.
    in_run = " in this run" if summary.submission_id else ""
    line = f"{what}: {_plural(len(episodes), 'episode')}{in_run} ({counts})"
    scored = [e for e in episodes if e.status in ("completed", "fell")]
    for k in SUCCESS_METRICS:
        if any(k in e.metrics for e in scored):
            rate = sum(e.metrics.get(k, 0.0) for e in scored) / len(episodes)
            line += f", {k} {rate:.3f} over all {len(episodes)}"
    values = [e.metrics["emd"] for e in scored if "emd" in e.metrics and not math.isnan(e.metrics["emd"])]
    if values:
        unscored = len(episodes) - len(scored)
        line += f", mean emd {sum(values) / len(values):.4f} rad over the {len(values)} scored"
        if unscored:
            line += f" ({unscored} failed or timed out, unscored, left out)"
    if summary.reconnects:
        line += f", {_plural(summary.reconnects, 'reconnect')}"
    if summary.submission_id and summary.episodes_scored is not None:
        # What became of all of them, those this run did not see end too.
        failed = summary.episodes_failed or 0
        line += f"; the submission's {summary.episodes_scored + failed} episodes: {summary.episodes_scored} scored"
        if failed:
            line += f", {failed} failed or timed out (the reasons at {results})"
    elif summary.submission_id and summary.episodes_total > len(episodes):
        line += f"; the submission has {summary.episodes_total}: its results over all of them at {results}"

    print(line, file=out)
    if episodes and all(not e.motion for e in episodes):
        print(HIDDEN_MOTIONS_NOTE, file=out)
