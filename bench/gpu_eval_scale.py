#!/usr/bin/env python3
"""An evaluation of thousands of concurrent episodes through the server on a chosen backend
(issue 17: at least 4096 on the GPU backend): `arena serve` with one lane of --episodes envs,
the SDK's replay example as the participant over a loopback WebSocket, and the figures:
wall time, episodes and control steps per second, mean step round trip, peak memory of the
server and of its GPU worker (and GPU memory from nvidia-smi when there is one), memory per
concurrent episode; the breakdown of the wall time the server logs (target `arena_timings`:
the lane's start-up, claims and resets, observations, the agent's round trips, physics,
refresh, hand-over; the committer's scoring, storing and database commits; the final merge);
and, beside it, the in-process `arena eval` of the same benchmark and batch (`--no-in-process`
leaves it out) with the ratio in-process time / served time (goal >= 0.9). The served time ends
when the agent is told the submission is COMPLETED; the runs are merged into one trajectory
file after that, and `trajectory_file_after_s` says how much later the file could be downloaded.

  python bench/gpu_eval_scale.py --arena target/release/arena \
      --agent target/release/examples/replay --episodes 4096 --backend gpu
The benchmark (written to a temporary folder) is k of the six built-in motions, k the largest
that divides --episodes, each repeated --episodes/k times (so one batch holds every episode and
no straggler runs alone in a batch of idle envs afterwards), whole clips (4-6 s) or their first --window-s seconds, DR level 3, observations
`state` + one reference frame (`--observations bfm-zero`: g1-smoke's, with `reference_goal`). On a CPU device, `--window-s 1` keeps a 4096-episode run to
about a quarter of an hour. `--backend gpu --gpu-impl stub --gpu-device cpu` runs the same
evaluation with no physics at all (the worker's stub; the server and `arena eval` need
--gpu-allow-stub for it, which this passes): what serving costs around the physics at GPU sizes,
on any machine; its scores mean nothing. `--sessions N` runs N submissions one after the other on
each served run's server: the first starts the lane's simulator, the later ones take it over
(the server's `warm_simulators`), so their times show an evaluation without the start-up.
On the GPU backend the server keeps a spare worker (`--spare-simulators`, default 1: started
with the server, its imports, device and kernels done) and the first submission waits until it
is ready, as on a server started before submissions come; `--spare-simulators 0` measures the
server's cold path, the lane starting its own worker.
"""
import argparse
import collections
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

BENCHMARK = """name = "g1-scale"
version = 1
description = "Scale test: built-in motions repeated, DR level 3."
task = "tracking"
[motions]
builtin = {motions}
[episodes]
window = {window}
repeats = {repeats}
dr_level = 3
seed = 0
[limits]
control_hz = 50
max_episode_s = 0.0
step_timeout_ms = 60000
[fall]
rule = "none"
[observations]
{observations}
[metrics]
list = ["emd", "mpjpe_g", "success"]
state_slice = [0, 23]
success_threshold_m = 0.5
ndtw_window_s = 1.0
[ranking]
success = "success"
primary = "emd"
"""


# What the agent observes (`--observations`): the state and the next reference frame, or
# BFM-Zero's groups as g1-smoke sends them (with the history and the 8 reference rows of
# `reference_goal`: 4,717 values per episode).
OBSERVATIONS = {
    "state": 'groups = ["state"]\nreference_horizon = 1',
    "bfm-zero": 'groups = ["state", "last_action", "history_actor"]\nreference_horizon = 1\n'
                'reference_goal_horizon = 8',
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid):
    """The child processes of `pid`, from /proc (every thread's `children` list): no `ps` to
    start, whose fork and exec twice a second took about 0.7 % of the served run's CPU here.
    `ps` where the kernel has no such lists (CONFIG_PROC_CHILDREN)."""
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        try:
            out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
            return [int(p) for p in out.stdout.split()]
        except OSError:
            return []
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
        except OSError:
            pass  # a thread that ended meanwhile
    return found


def rss_mb(pid, spares=None):
    """Resident memory of a process and its children, MiB. With a dict `spares`, the children
    that are spare GPU workers (a worker with no shared file of the server's mapped yet) are
    summed into spares["mb"] too."""
    total = spare = 0
    pids = [pid] + children(pid)
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                kb = sum(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
            total += kb
            if spares is not None and p != pid and is_spare_worker(p, pid):
                spare += kb
        except OSError:
            pass
    if spares is not None:
        spares["mb"] = spare / 1024
    return total / 1024


def is_spare_worker(p, server_pid):
    """Whether process `p` is a spare GPU worker: one that has mapped no shared file of the
    server's larger than a page (a spare's warm-up maps one of one env, 3476 bytes; a lane's
    worker here has thousands of envs)."""
    try:
        with open(f"/proc/{p}/cmdline", "rb") as f:
            if b"gpu_worker.py" not in f.read():
                return False
        with open(f"/proc/{p}/maps") as f:
            for line in f:
                if f"arena-gpu-{server_pid}-" in line:
                    low, high = (int(x, 16) for x in line.split()[0].split("-"))
                    if high - low > 4096:
                        return False
        return True
    except OSError:
        return False


def gpu_mem_mb():
    if not shutil.which("nvidia-smi"):
        return None
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True)
    return float(out.stdout.split()[0]) if out.returncode == 0 and out.stdout.strip() else None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arena", required=True)
    p.add_argument("--agent", required=True, help="the SDK's replay example binary")
    p.add_argument("--episodes", type=int, default=4096)
    p.add_argument("--backend", default="gpu", choices=["cpu", "gpu"])
    p.add_argument("--gpu-device", default="auto")
    p.add_argument("--window-s", type=float, default=0.0,
                   help="episode length in seconds from each clip's start (0: whole clips)")
    p.add_argument("--gpu-impl", default="auto", choices=["auto", "jax", "warp", "stub"],
                   help="MuJoCo MJX on JAX or MuJoCo Warp (auto: Warp on a CUDA device); stub: no "
                        "physics at all (the worker's stub, scores meaningless), what surrounds the "
                        "physics at GPU sizes on any machine")
    p.add_argument("--observations", default="state", choices=sorted(OBSERVATIONS),
                   help="what the agent observes: the state and one reference frame (100 values per "
                        "episode), or BFM-Zero's groups as g1-smoke sends them (4,717 values)")
    p.add_argument("--no-in-process", action="store_true",
                   help="skip the in-process `arena eval` of the same benchmark")
    p.add_argument("--repeats", type=int, default=1, help="runs of each side; best of them")
    p.add_argument("--sessions", type=int, default=1,
                   help="submissions run one after the other on each served run's server: the "
                        "first starts the lane's simulator, later ones take it over "
                        "(warm_simulators); their times are reported beside the first's")
    p.add_argument("--prewarm", action="store_true",
                   help="serve with --prewarm g1-scale and submit once the lane's simulator is "
                        "started and kept (the server's deployment configuration): the first "
                        "session then takes a warm simulator, as later ones do")
    p.add_argument("--spare-simulators", type=int, default=1,
                   help="the server's spare GPU workers (started with it, their libraries imported); "
                        "the first submission waits until one has logged that it is ready, as on a "
                        "server started before submissions come; 0 = none, the lane starts its own "
                        "worker (the server's cold path)")
    p.add_argument("--agent-arg", action="append", default=[], metavar="ARG",
                   help="an extra argument for the agent (repeat for several), e.g. --whole-goal-rows "
                        "(whole reference_goal groups in every request instead of each row once)")
    p.add_argument("--buffered-parts", action="store_true",
                   help="serve with --buffered-parts: part files through the page cache instead "
                        "of past it (O_DIRECT), to tell whether storing waits for the disk")
    a = p.parse_args()
    if a.repeats < 1 or a.sessions < 1:
        p.error("--repeats and --sessions must be >= 1")

    if not 1 <= a.episodes <= 4096:
        sys.exit("--episodes must be 1-4096 (one lane's batch)")
    k = max(k for k in range(1, 7) if a.episodes % k == 0)
    motions = ["stand", "squat", "arm_wave", "torso_twist", "weight_shift", "step_in_place"][:k]
    repeats = a.episodes // k
    tmp = tempfile.mkdtemp(prefix="arena-scale-")
    bench_dir = os.path.join(tmp, "benchmarks")
    os.makedirs(bench_dir)
    with open(os.path.join(bench_dir, "g1-scale.toml"), "w") as f:
        # One window per clip: the stride is longer than any built-in clip.
        window = f"{{ length_s = {a.window_s}, stride_s = 100.0 }}" if a.window_s > 0 else '"whole"'
        f.write(BENCHMARK.replace("{repeats}", str(repeats)).replace("{window}", window)
                .replace("{motions}", json.dumps(motions))
                .replace("{observations}", OBSERVATIONS[a.observations]))
    # Before the runs: what first touches of memory cost on this machine (see memory_write_rates).
    memory = memory_write_rates()
    disk = disk_write_rates(tmp)
    # The two sides take turns (served, in process, served, ...): this machine's speed drifts
    # over minutes, and runs of one side after the other measured the drift as much as the sides.
    runs, runs_local = [], []
    for _ in range(a.repeats):
        runs.append(served(a, tmp, bench_dir))
        if not a.no_in_process:
            runs_local.append(in_process(a, bench_dir))
    best = min(runs, key=lambda r: r["wall_s"])
    result = dict(best, served_wall_s_runs=[r["wall_s"] for r in runs])
    if a.sessions > 1:
        # The best of the later (warm) sessions over every run.
        result["later_sessions_best_wall_s"] = min(w for r in runs for w in r["later_sessions_wall_s"])
    if not a.no_in_process:
        local = [wall for wall, _ in runs_local]
        result["in_process_wall_s_runs"] = local
        result["in_process_wall_s"] = min(local)
        # The best run's own breakdown (`arena eval`'s `local {...}` line): start-up, starts,
        # observations, agent, step (physics, refresh with the recording), scoring.
        result["in_process_breakdown"] = min(runs_local, key=lambda r: r[0])[1]
        result["in_process_over_served"] = round(min(local) / best["wall_s"], 3)
        if a.sessions > 1:
            result["in_process_over_later_sessions"] = round(min(local) / result["later_sessions_best_wall_s"], 3)
    result["memory_write_gb_s"] = memory
    result["disk_write_gb_s"] = disk
    print(json.dumps(result, indent=2))
    shutil.rmtree(tmp, ignore_errors=True)


def memory_write_rates(size=256 << 20, block=1 << 20):
    """GB/s of writing `size` bytes into memory the process has never touched, then into the
    same memory again. On the virtual machines these benchmarks run on, the first is 10-30x
    slower (0.33 against 10 GB/s on a 2-core one): every page the guest touches afresh, or
    touches again after it was freed and handed back to the host, is faulted in by the
    hypervisor. A served evaluation writes each trajectory through fresh memory several times
    (recording, part file, merged file), an in-process one once; the rates make the
    breakdown's storing figures comparable across machines."""
    import mmap
    chunk = b"\x01" * block
    rates = {}
    with mmap.mmap(-1, size) as m:
        for kind in ("fresh", "touched"):
            start = time.perf_counter()
            for off in range(0, size, block):
                m[off:off + block] = chunk
            rates[kind] = round(size / (time.perf_counter() - start) / 1e9, 2)
    return rates


def disk_write_rates(directory, size=512 << 20, block=4 << 20):
    """GB/s of writing `size` bytes to a new file in `directory` (where the server keeps its data):
    past the page cache (O_DIRECT, as the part files are written), and through it with the
    fsync that puts it on the device (as the merged file reaches it sooner or later). A served
    evaluation writes each trajectory twice (its part and the merged file), about 0.8 GB each
    for 4096 two-second episodes: with these, the committer's `store_part_mb` and
    `store_part_thread_s` tell whether storing waited for the disk. None for a way the
    filesystem refuses (tmpfs takes no O_DIRECT)."""
    import mmap
    rates = {}
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT needs
    buf.write(b"\x01" * block)
    for kind, flags in (("direct", getattr(os, "O_DIRECT", 0)), ("buffered", 0)):
        path = os.path.join(directory, f"disk-probe-{kind}")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flags, 0o644)
            try:
                start = time.perf_counter()
                for _ in range(size // block):
                    os.write(fd, buf)
                os.fsync(fd)
                rates[kind] = round(size / (time.perf_counter() - start) / 1e9, 2)
            finally:
                os.close(fd)
        except OSError:
            rates[kind] = None
        finally:
            try:
                os.remove(path)
            except OSError:
                pass
    buf.close()
    return rates


def gpu_flags(a):
    """The GPU backend's flags (none on the CPU backend, where `arena eval` refuses them), with
    the one that lets the stub (no physics) through where results are scored."""
    if a.backend != "gpu":
        return []
    return (["--gpu-device", a.gpu_device, "--gpu-impl", a.gpu_impl]
            + (["--gpu-allow-stub"] if a.gpu_impl == "stub" else []))


def in_process(a, bench_dir):
    """`arena eval` of the same benchmark, batch and backend, in one process: its wall seconds
    and its breakdown (the `local {...}` timings line and the GPU worker's start-up)."""
    env = dict(os.environ, ARENA_GPU_PYTHON=os.environ.get("ARENA_GPU_PYTHON", sys.executable),
               ARENA_LOG="warn,arena_timings=info,arena_sim::handler::gpu=info")
    cmd = [a.arena, "eval", "--benchmark", "g1-scale", "--benchmarks-dir", bench_dir, "--policy", "replay",
           "--batch", str(a.episodes), "--backend", a.backend, "--json"] + gpu_flags(a)
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    found = timings_from_text(out.stderr.splitlines(), kinds=("local",))
    breakdown = (found["local"] or [None])[0]
    if breakdown is not None and found["worker_startup"]:
        breakdown["worker_startup"] = found["worker_startup"][0]
    return round(wall, 2), breakdown


def timings_from_log(path):
    """The `arena_timings` lines of a server log: {"lane": [...], "committer": [...], "merge": [...]},
    and "worker_startup": the GPU workers' start-up phases (seconds) from their ready lines."""
    with open(path, errors="replace") as f:
        return timings_from_text(f, kinds=("lane", "committer", "merge"))


def timings_from_text(lines, kinds):
    """The `arena_timings` lines of `kinds` in `lines` ({kind: [...]}), and "worker_startup"."""
    found = {kind: [] for kind in kinds}
    found["worker_startup"] = []
    for line in lines:
        if "GPU simulator worker ready" in line and "(start-up {" in line:
            found["worker_startup"].append(json.loads(line[line.index("(start-up ") + 10:].strip()[:-1]))
            continue
        if "arena_timings" not in line:
            continue
        for kind in kinds:
            marker = f" {kind} {{"
            if marker in line:
                found[kind].append(json.loads(line[line.index(marker) + len(kind) + 2:].strip()))
    return found


def wait_for_prewarm(log_path, server, timeout_s=900):
    """Seconds until the server logs that the prewarmed simulator of g1-scale was kept (or why
    not: a warning, which ends the wait too; the first session then starts its own)."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        if server.poll() is not None:
            sys.exit(f"the server exited while prewarming (log: {log_path})")
        with open(log_path) as f:
            lines = [line for line in f if "prewarm: benchmark g1-scale" in line]
        if lines:
            if "kept" not in lines[-1]:
                print(f"prewarm did not keep a simulator: {lines[-1].strip()}", file=sys.stderr)
            return time.perf_counter() - started
        time.sleep(0.1)
    sys.exit(f"no prewarm line in the server log after {timeout_s} s ({log_path})")


def wait_for_spare(a, log_path, server, timeout_s=300):
    """Seconds until the server's spare GPU worker logs that it is ready: its imports done and,
    for MuJoCo Warp, its warm-up (or their failure, after which the lane starts its own)."""
    warp = a.gpu_impl == "warp" or (a.gpu_impl == "auto" and a.gpu_device != "cpu"
                                     and os.path.exists("/dev/nvidiactl"))
    marks = ("[gpu_worker] warmed up", "[gpu_worker] warm-up failed") if warp else ("[gpu_worker] preload",)
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        if server.poll() is not None:
            sys.exit(f"the server exited while its spare worker started (log: {log_path})")
        with open(log_path, errors="replace") as f:
            if any(mark in line for line in f for mark in marks):
                return time.perf_counter() - started
        time.sleep(0.05)
    sys.exit(f"no spare worker's preload line in the server log after {timeout_s} s ({log_path})")


def served(a, tmp, bench_dir):
    """One evaluation through `arena serve` and the replay agent; its figures and breakdown."""
    port = free_port()
    admin = "scale-admin"
    data_dir = tempfile.mkdtemp(prefix="data-", dir=tmp)
    log_path = os.path.join(data_dir, "server.log")
    # The prewarm's "kept" line is at info level.
    env = dict(os.environ, ARENA_GPU_PYTHON=os.environ.get("ARENA_GPU_PYTHON", sys.executable),
               ARENA_LOG="warn,arena_timings=info,arena_sim::handler::gpu=info,"
                         "arena_server::orchestrator::warm=info,arena_sim::gpu_worker=debug")
    spares = a.spare_simulators if a.backend == "gpu" else 0
    started = time.perf_counter()
    server = subprocess.Popen(
        [a.arena, "serve", "--bind", f"127.0.0.1:{port}", "--data-dir", data_dir,
         "--benchmarks-dir", bench_dir, "--admin-token", admin, "--max-batch", str(a.episodes),
         "--lanes", "1", "--backend", a.backend,
         "--step-timeout-s", "600", "--spare-simulators", str(spares)] + gpu_flags(a)
        + (["--prewarm", "g1-scale"] if a.prewarm else [])
        + (["--buffered-parts"] if a.buffered_parts else []),
        stdout=subprocess.DEVNULL, stderr=open(log_path, "w"), env=env)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        if server.poll() is not None:
            # Refused at start (e.g. its GPU worker check): its own words, not a refused connection.
            with open(log_path) as log:
                sys.exit(f"arena serve exited ({server.returncode}) before it served:\n{log.read()[-4000:]}")
        try:
            urllib.request.urlopen(base + "/api/v1/health", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    server_up_s = time.perf_counter() - started
    prewarm_s = wait_for_prewarm(log_path, server) if a.prewarm else None
    spare_ready_s = wait_for_spare(a, log_path, server) if spares and not a.prewarm else None
    req = urllib.request.Request(base + "/api/v1/teams", data=b'{"name": "scale"}', method="POST",
                                 headers={"Authorization": f"Bearer {admin}",
                                          "Content-Type": "application/json"})
    token = json.load(urllib.request.urlopen(req))["token"]

    peak = {"server": 0.0, "gpu": None, "episodes": 0.0, "spares": 0.0}
    done = threading.Event()

    def sample():
        while not done.is_set():
            spare = {}
            total = rss_mb(server.pid, spare)
            peak["server"] = max(peak["server"], total)
            # Memory for the episodes: the spares' (processes kept for later lanes) left out.
            peak["episodes"] = max(peak["episodes"], total - spare["mb"])
            peak["spares"] = max(peak["spares"], spare["mb"])
            g = gpu_mem_mb()
            if g is not None:
                peak["gpu"] = max(peak["gpu"] or 0.0, g)
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    walls = []
    for _ in range(a.sessions):
        start = time.perf_counter()
        agent = subprocess.run([a.agent, "--server", f"ws://127.0.0.1:{port}/api/v1/agent", "--token", token,
                                "--benchmark", "g1-scale", *a.agent_arg], capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        if agent.returncode != 0:
            break
    wall = walls[0]
    done.set()
    sampler.join()
    if agent.returncode != 0:
        server.terminate()
        sys.exit(f"the agent failed:\n{agent.stderr[-3000:]}\n(server log: {log_path})")
    subs = json.load(urllib.request.urlopen(urllib.request.Request(
        base + "/api/v1/submissions", headers={"Authorization": f"Bearer {token}"})))["submissions"]
    sub = subs[0]
    # The runs are merged into one trajectory file after the submission is COMPLETED (the agent
    # does not wait for it); the download waits for the merge. Its first byte says when.
    merged_at = time.perf_counter()
    try:
        urllib.request.urlopen(urllib.request.Request(
            base + f"/api/v1/submissions/{sub['id']}/trajectories",
            headers={"Authorization": f"Bearer {token}", "Range": "bytes=0-0"}), timeout=300).read()
        trajectories_after_s = round(time.perf_counter() - merged_at, 2)
    except OSError as e:
        trajectories_after_s = f"no trajectory file: {e}"
    results = json.load(urllib.request.urlopen(urllib.request.Request(
        base + f"/api/v1/submissions/{sub['id']}/results", headers={"Authorization": f"Bearer {token}"})))
    rows = results["episodes"]
    steps = sum(e.get("steps", 0) for e in rows)
    rounds = max(e.get("steps", 0) for e in rows) if rows else 0
    server.terminate()
    server.wait(timeout=30)
    breakdown = timings_from_log(log_path)
    result = {
        "observations": a.observations,
        "agent_args": a.agent_arg,
        "backend": a.backend, "gpu_impl": a.gpu_impl if a.backend == "gpu" else None,
        "gpu_device": a.gpu_device if a.backend == "gpu" else None, "episodes": len(rows), "status": sub["status"],
        # Each episode's end (COMPLETED, FELL, TIMEOUT, FAILED, ...): none is left out of the counts.
        "episode_statuses": dict(collections.Counter(str(e.get("status")) for e in rows)), "wall_s": round(wall, 2),
        "episodes_per_s": round(len(rows) / wall, 2), "control_steps": steps,
        "control_steps_per_s": round(steps / wall), "mean_step_round_trip_ms": round(1000 * wall / max(rounds, 1), 2),
        "peak_rss_server_and_worker_mb": round(peak["server"]), "peak_gpu_memory_mb": peak["gpu"],
        # Per episode: the server and its lanes' workers, without its idle spare workers
        # (`peak_rss_spares_mb`, the largest their memory was).
        "rss_per_episode_mb": round(peak["episodes"] / max(len(rows), 1), 3),
        "peak_rss_spares_mb": round(peak["spares"]),
        "server_start_s": round(server_up_s, 2), "breakdown": breakdown,
        "prewarm_s": None if prewarm_s is None else round(prewarm_s, 2),
        # The server's spare workers, and how long after its start the one the lane took was
        # ready (the submission waited for that, as a server started ahead would have).
        "spare_simulators": spares,
        "spare_ready_s": None if spare_ready_s is None else round(spare_ready_s, 2),
        "later_sessions_wall_s": [round(w, 2) for w in walls[1:]],
        "trajectory_file_after_s": trajectories_after_s,
    }
    shutil.rmtree(data_dir, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
