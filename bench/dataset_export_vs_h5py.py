"""Trajectory-dataset export throughput: `arena dataset export --format hdf5` against h5py writing
the same arrays with the same layout (chunks of 1024 rows, shuffle, gzip level 1), in one run.

The arena side does more than h5py's: it reads every episode from the submissions' trajectory
files and recomputes `privileged_state` with MuJoCo (`arena_sim::recorded`), then writes. The
ratio is throughput(arena) / throughput(h5py) over the bytes of the exported arrays.

    python bench/dataset_export_vs_h5py.py --arena target/release/arena [--runs 5] [--repeats 3]

Seeds a fresh data directory with `--runs` demo submissions (replay agent on g1-smoke, 6 episodes
each) first.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

KEYS = ["observation-state", "observation-privileged_state", "action", "qpos", "qvel", "terminated", "truncated"]


def seed(arena: str, data_dir: Path, runs: int) -> None:
    for _ in range(runs):
        subprocess.run([arena, "demo", "--data-dir", str(data_dir), "--json"], check=True, capture_output=True)


def export(arena: str, data_dir: Path, out: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [arena, "dataset", "export", "--benchmark", "g1-smoke", "--data-dir", str(data_dir), "--format", "hdf5",
         "--out", str(out), "--json"],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - t0


def write_with_h5py(arrays: dict, out: Path) -> float:
    t0 = time.perf_counter()
    with h5py.File(out, "w") as f:
        for key, a in arrays.items():
            chunks = (min(1024, len(a)),) + a.shape[1:]
            f.create_dataset(key, data=a, chunks=chunks, shuffle=True, compression="gzip", compression_opts=1)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arena", required=True)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="arena-export-bench-") as tmp:
        tmp = Path(tmp)
        data = tmp / "data"
        seed(args.arena, data, args.runs)
        ours, theirs, ratios = [], [], []
        size = rows = 0
        for _ in range(args.repeats):
            out = tmp / "export.h5"
            t_arena = export(args.arena, data, out)
            with h5py.File(out, "r") as f:
                arrays = {k: f[k][()] for k in KEYS}
            size = sum(a.nbytes for a in arrays.values())
            rows = len(arrays["qpos"])
            t_h5py = write_with_h5py(arrays, tmp / "h5py.h5")
            ours.append(size / t_arena / 1e6)
            theirs.append(size / t_h5py / 1e6)
            ratios.append(ours[-1] / theirs[-1])
        result = {
            "rows": rows,
            "megabytes": size / 1e6,
            "arena_mb_s": statistics.median(ours),
            "h5py_mb_s": statistics.median(theirs),
            "median_ratio": statistics.median(ratios),
            "ratios": ratios,
        }
        if args.json:
            print(json.dumps(result))
        else:
            print(
                f"dataset export, {rows} rows ({size / 1e6:.1f} MB of arrays): arena {result['arena_mb_s']:.1f} MB/s "
                f"(reads trajectories, recomputes privileged_state, writes), h5py {result['h5py_mb_s']:.1f} MB/s "
                f"(writes only); median ratio {result['median_ratio']:.3f} (runs {', '.join(f'{r:.3f}' for r in ratios)})"
            )


if __name__ == "__main__":
    sys.exit(main())
