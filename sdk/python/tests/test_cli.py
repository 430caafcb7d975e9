"""`arena-agent` from a fresh virtual environment (`pip install <repo>/sdk/python`) completes a
g1-smoke submission with the replay example over both transports; in-process, its exit status,
argument checks and help examples."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import EXAMPLES, REPO, Server

from arena_sdk import RunSummary, cli, cli_common, onnx_cli
from arena_sdk.cli_common import attach_number_lists, check_session_arguments


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_replay_example_completes_g1_smoke(
    server: Server, team_token: str, fresh_venv: Path, tmp_path: Path, transport: str
) -> None:
    result = subprocess.run(
        [
            str(fresh_venv / "arena-agent"),
            f"{EXAMPLES / 'replay_agent.py'}:ReplayAgent",
            "--server",
            server.http_url,
            "--token",
            team_token,
            "--benchmark",
            "g1-smoke",
            "--transport",
            transport,
            "--agent-name",
            f"replay-{transport}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the repository: the installed package must be what runs
        timeout=300,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\nserver log:\n{server.log_tail()}"
    match = re.search(r"^connected: submission (sub-\S+) of g1-smoke", result.stdout, re.MULTILINE)
    assert match, result.stdout
    submission_id = match.group(1)
    assert f"submission {submission_id} COMPLETED: 6 episodes in this run (6 completed)" in result.stdout
    assert len(re.findall(r"^\[\d/6\] episode \d \w+: completed", result.stdout, re.MULTILINE)) == 6

    status, body = server.request("GET", f"/api/v1/submissions/{submission_id}", team_token)
    assert status == 200, body
    assert body["status"] == "COMPLETED" and body["agent_name"] == f"replay-{transport}"
    assert body["episodes_total"] == 6 and body["progress"] == {"pending": 0, "running": 0, "finished": 6, "never_ran": 0}
    status, results = server.request("GET", f"/api/v1/submissions/{submission_id}/results", team_token)
    assert status == 200, results
    assert [e["status"] for e in results["episodes"]] == ["COMPLETED"] * 6, results["episodes"]

    # The participant's own listing (issue 39): the submission with its result.
    listing = subprocess.run(
        [str(fresh_venv / "arena-agent"), "submissions", "--server", server.http_url, "--token", team_token],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if submission_id in line)
    assert "COMPLETED" in row and "6/6 scored" in row and "emd " in row, listing.stdout


def test_cli_reports_errors(server: Server, fresh_venv: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            str(fresh_venv / "arena-agent"),
            f"{EXAMPLES / 'replay_agent.py'}:ReplayAgent",
            "--server",
            server.http_url,
            "--token",
            "at_wrong",
            "--benchmark",
            "g1-smoke",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert result.returncode == 1
    assert "arena-agent: error: server refused the session: unauthorized" in result.stderr
    assert "left RUNNING" not in result.stderr  # nothing was started


def test_cli_says_how_to_resume_after_a_broken_agent(
    server: Server, team_token: str, fresh_venv: Path, tmp_path: Path
) -> None:
    (tmp_path / "short.py").write_text(
        "import numpy as np\n"
        "class Short:\n"
        "    def act(self, batch):\n"
        "        return np.zeros((len(batch), 28), np.float32)\n"
    )
    result = subprocess.run(
        [
            str(fresh_venv / "arena-agent"),
            "short.py:Short",
            "--server",
            server.http_url,
            "--token",
            team_token,
            "--benchmark",
            "g1-smoke",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    match = re.search(r"^connected: submission (sub-\S+) of g1-smoke", result.stdout, re.MULTILINE)
    assert match, result.stdout
    submission_id = match.group(1)
    assert "arena-agent: error: agent " in result.stderr, result.stderr
    assert f"submission {submission_id} is left RUNNING" in result.stderr, result.stderr
    assert f"--submission-id {submission_id}" in result.stderr, result.stderr
    assert "uses one of its attempts" in result.stderr, result.stderr
    status, body = server.request("GET", f"/api/v1/submissions/{submission_id}", team_token)
    assert status == 200 and body["status"] == "RUNNING", body
    assert body["attempts"]["max_per_episode"] == 3, body
    # An exception in the agent's own code: its traceback, then the same advice.
    (tmp_path / "raises.py").write_text(
        "class Raises:\n    def act(self, batch):\n        raise ValueError('model not loaded')\n"
    )
    result = subprocess.run(
        [str(fresh_venv / "arena-agent"), "raises.py:Raises", "--server", server.http_url, "--token", team_token,
         "--benchmark", "g1-smoke"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "ValueError: model not loaded" in result.stderr and "is left RUNNING" in result.stderr, result.stderr


def test_cli_help_and_bad_agent(fresh_venv: Path, tmp_path: Path) -> None:
    help_text = subprocess.run([str(fresh_venv / "arena-agent"), "--help"], capture_output=True, text=True).stdout
    for flag in (
        "--server",
        "--token",
        "--benchmark",
        "--transport",
        "--phase",
        "--submission-id",
        "--practice",
        "--agent-name",
        "--max-batch",
        "--encoding",
        "MODULE:CLASS",
    ):
        assert flag in help_text
    result = subprocess.run(
        [str(fresh_venv / "arena-agent"), "nowhere.py:Agent", "--token", "t", "--benchmark", "g1-smoke"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "cannot load agent" in result.stderr
    for bad in (["--transport", "grpc", "--encoding", "json"], ["--server", "ftp://h"], []):
        args = [str(fresh_venv / "arena-agent"), "x.py:A", "--token", "t", *bad]
        if bad:
            args += ["--benchmark", "g1-smoke"]
        result = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path)
        assert result.returncode == 2 and "arena-agent: error:" in result.stderr, (bad, result.stderr)


REPLAY = f"{EXAMPLES / 'replay_agent.py'}:ReplayAgent"


def test_cli_exits_1_when_the_submission_ended_failed(
    server: Server, team_token: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Attaching to a cancelled submission ends normally but FAILED: exit 1 (as the Rust SDK)."""
    status, body = server.request("POST", "/api/v1/submissions", team_token, {"benchmark": "g1-smoke"})
    assert status == 201, body
    submission_id = body["id"]
    status, body = server.request("POST", f"/api/v1/submissions/{submission_id}/cancel", server.admin_token)
    assert status == 200 and body["status"] == "FAILED", body
    code = cli.main([REPLAY, "--server", server.http_url, "--token", team_token, "--submission-id", submission_id])
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    assert f"submission {submission_id} FAILED" in out, out  # the summary still comes first
    assert f"arena-agent: error: submission {submission_id} ended FAILED: cancelled by the organiser" in err, err
    assert "left RUNNING" not in err, err


def test_the_replay_example_refuses_a_benchmark_without_references(
    server: Server, team_token: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped replay example on a benchmark that sends no `reference` group refuses the
    spec (UnsupportedPolicyError): the submission ends FAILED with why, exit 2. It raised a
    RuntimeError, which left the submission RUNNING, counted towards the quota, for a day."""
    code = cli.main([REPLAY, "--server", server.http_url, "--token", team_token, "--benchmark", "g1-smoke-robot"])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "left RUNNING" not in err, err
    match = re.search(r"submission (sub-\S+)", out + err)
    assert match, (out, err)
    status, body = server.request("GET", f"/api/v1/submissions/{match.group(1)}", team_token)
    assert status == 200 and body["status"] == "FAILED", body
    assert "reference" in (body["error"] or ""), body


@pytest.mark.parametrize("status, code", [("COMPLETED", 0), ("FAILED", 1), ("", 0)])
def test_cli_exit_status_follows_the_submission_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], status: str, code: int
) -> None:
    """A run that ends with Disconnect `submission_cancelled` (FAILED) exits 1; COMPLETED and
    practice ("") exit 0."""
    monkeypatch.setattr(cli_common, "run", lambda *a, **k: RunSummary("sub-1" if status else "", status))
    assert cli.main([REPLAY, "--token", "t", "--benchmark", "g1-smoke"]) == code
    err = capsys.readouterr().err
    assert ("ended FAILED" in err) == (status == "FAILED"), err


@pytest.mark.parametrize("flag", ["--max-batch", "--max-reconnects"])
@pytest.mark.parametrize("value", ["-1", "x", str(2**32)])
def test_cli_rejects_negative_counts(capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    for main in (cli.main, onnx_cli.main):
        with pytest.raises(SystemExit) as e:
            main([REPLAY if main is cli.main else "p.onnx", "--token", "t", "--benchmark", "b", flag, value])
        assert e.value.code == 2
        assert f"argument {flag}:" in capsys.readouterr().err
    args = cli._parser().parse_args([REPLAY, "--max-batch", "0", "--max-reconnects", "0"])
    assert (args.max_batch, args.max_reconnects) == (0, 0)


def test_onnx_cli_rejects_negative_threads(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        onnx_cli.main(["p.onnx", "--token", "t", "--benchmark", "b", "--threads", "-2"])
    assert e.value.code == 2
    assert "argument --threads:" in capsys.readouterr().err


def _examples(text: str) -> list[str]:
    """The `arena-agent ...` command lines in help text or Markdown, continuations joined and
    comments dropped; synopses (with [options] or …) left out."""
    lines = re.sub(r"\\\n\s*", " ", text).splitlines()
    commands = [re.sub(r"^\s*(venv/bin/)?", "", line) for line in lines]
    return [c.split("  #")[0] for c in commands if c.startswith("arena-agent ") and not re.search(r"[\[…]", c)]


def test_cli_help_examples_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every example in `--help` and docs/sdk-python.md passes the argument checks as written
    (with $ARENA_TOKEN set)."""
    monkeypatch.setenv("ARENA_TOKEN", "t")  # read when the parsers are built
    monkeypatch.setenv("TOKEN", "t")
    docs = (REPO / "docs" / "sdk-python.md").read_text()
    examples = _examples(cli.EPILOG) + _examples(onnx_cli.EPILOG) + _examples(docs)
    assert len(examples) >= 6, examples
    checked = 0
    for example in examples:
        argv = [re.sub(r"\$(\w+)", "t", a) for a in shlex.split(example)][1:]
        if argv[0] in ("submit", "submissions"):  # their own parsers, without MODULE:CLASS rules
            continue
        parser = onnx_cli._parser() if argv[0] == "onnx" else cli._parser()
        argv = argv[1:] if argv[0] == "onnx" else argv
        try:
            args = parser.parse_args(attach_number_lists(argv, ("--joint-stiffness", "--joint-damping")))
            if not getattr(args, "show", False):
                check_session_arguments(parser, args)
        except SystemExit:
            pytest.fail(f"example exits 2: {example}")
        checked += 1
    assert checked >= 6, examples


def test_the_summary_counts_this_runs_episodes_and_points_to_the_rest() -> None:
    """A resumed submission, or one whose episode ends were lost with a connection, has more
    episodes than the run received: the last line says so and where all results are."""
    import io

    from arena_sdk.agent import EpisodeEnd

    ends = [
        EpisodeEnd(0, "completed", "", 200, {"emd": 0.25}, "stand"),
        EpisodeEnd(1, "timeout", "no Action in time", 10, {}, "squat"),
    ]
    out = io.StringIO()
    summary = RunSummary("sub-1", "COMPLETED", "g1-smoke", ends, reconnects=1, episodes_total=6)
    cli_common.print_summary(summary, out)
    last = out.getvalue().strip().splitlines()[-1]
    assert last.startswith("submission sub-1 COMPLETED: 2 episodes in this run (1 completed, 1 timeout)"), last
    assert "(1 failed or timed out, unscored, left out)" in last and "1 reconnect;" in last, last
    assert last.endswith("the submission has 6: its results over all of them at GET /api/v1/submissions/sub-1/results")
    # Nothing lost: no pointer.
    out = io.StringIO()
    cli_common.print_summary(RunSummary("sub-1", "COMPLETED", "g1-smoke", ends, episodes_total=2), out)
    assert "the submission has" not in out.getvalue()


def test_the_summary_gives_the_servers_counts_of_every_episode() -> None:
    """A submission whose episodes all failed while the run's connections were cut (none of their
    ends reached it) completed: the last line says what became of all of them, from the server's
    counts, and the run is no success (exit 1)."""
    import contextlib
    import io

    out = io.StringIO()
    summary = RunSummary(
        "sub-1", "COMPLETED", "g1-smoke", [], reconnects=3, episodes_total=6, episodes_scored=0, episodes_failed=6
    )
    cli_common.print_summary(summary, out)
    last = out.getvalue().strip().splitlines()[-1]
    assert last.endswith(
        "the submission's 6 episodes: 0 scored, 6 failed or timed out (the reasons at "
        "GET /api/v1/submissions/sub-1/results)"
    ), last
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli_common.exit_status(summary, "arena-agent") == 1
    assert "completed with no episode scored: all 6 failed" in err.getvalue(), err.getvalue()
    summary.episodes_scored, summary.episodes_failed = 5, 1
    assert cli_common.exit_status(summary, "arena-agent") == 0


def test_the_summary_of_a_submission_that_had_finished_says_so_without_a_table() -> None:
    """`--submission-id` of a finished submission: the server answers `submission_finished` and no
    session opens; the run says the submission had finished, not an empty table."""
    import contextlib
    import io

    out = io.StringIO()
    cli_common.print_summary(RunSummary("sub-1", "COMPLETED", "g1-smoke", []), out)
    text = out.getvalue().strip()
    assert text == (
        "submission sub-1 COMPLETED: it had finished when this run reached it, nothing was left to run: its "
        "results at GET /api/v1/submissions/sub-1/results"
    ), text
    # The server's refusal carries what became of its episodes: none scored is no success.
    summary = RunSummary("sub-1", "COMPLETED", "g1-smoke", [], episodes_scored=0, episodes_failed=4)
    out = io.StringIO()
    cli_common.print_summary(summary, out)
    text = out.getvalue().strip()
    assert text == (
        "submission sub-1 COMPLETED: it had finished when this run reached it, nothing was left to run; its 4 "
        "episodes: 0 scored, 4 failed or timed out: its results at GET /api/v1/submissions/sub-1/results"
    ), text
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli_common.exit_status(summary, "arena-agent") == 1
