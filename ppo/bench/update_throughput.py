#!/usr/bin/env python3
"""PPO update throughput of arena-ppo against the PyTorch oracle at a training configuration's
sizes, interleaved.

Both sides run GAE and one whole update (epochs x minibatches of the clipped surrogate, the
clipped value loss, the entropy bonus, gradient-norm clipping and Adam) on the same inputs: the
Rust example (ppo/examples/ppo_update_throughput.rs) writes them (model, rollout, configuration) and
times its own updates; the oracle (ppo/oracle/ppo_oracle.py, written with PyTorch's nn.Linear,
Normal, Adam and clip_grad_norm_ as rsl_rl uses them) replays them. Runs alternate (rust,
python, rust, ...) so machine noise hits both; the report is the median of the paired ratios
(rust updates/s / python updates/s) and the best of each. The oracle keeps a copy of the first
minibatch's gradients per update, which the Rust side does not: a small handicap on the
PyTorch side.

    cargo build --release -p arena-ppo --example ppo_update_throughput
    PYTHONPATH=third_party/pytorch .venv/bin/python ppo/bench/update_throughput.py \\
        --example target/release/examples/ppo_update_throughput --updates 10 --repeats 3
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

from same_mkl_kernels import same_kernels  # noqa: E402

KERNELS = same_kernels()  # before torch is imported

import torch  # noqa: E402

import ppo_oracle as oracle  # noqa: E402


def rust_run(example, config, updates, dump=None):
    cmd = [example, "--config", config, "--updates", str(updates)]
    if dump:
        cmd += ["--dump", dump]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def python_run(directory, updates):
    """The oracle's updates/s on the CPU: a warm-up update, then `updates` timed ones."""
    model, _, rollout, cfg = oracle.load(Path(directory))
    oracle.update(model, rollout, cfg)
    start = time.perf_counter()
    for _ in range(updates):
        oracle.update(model, rollout, cfg)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "updates_per_s": updates / seconds}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--example", required=True, help="path of the ppo_update_throughput example binary")
    p.add_argument("--config", default="ppo/configs/g1-smoke.toml",
                   help="training configuration whose sizes are measured")
    p.add_argument("--updates", type=int, default=10, help="timed updates per run")
    p.add_argument("--repeats", type=int, default=3, help="interleaved pairs of runs")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.repeats < 1 or a.updates < 1:
        p.error("--repeats and --updates must be >= 1")
    with tempfile.TemporaryDirectory() as d:
        sizes = rust_run(a.example, a.config, 1, dump=d)
        pairs = []
        for _ in range(a.repeats):
            r = rust_run(a.example, a.config, a.updates)
            py = python_run(d, a.updates)
            pairs.append((r["updates_per_s"], py["updates_per_s"]))
    ratios = [r / py for r, py in pairs]
    result = {
        "config": a.config, "samples": sizes["samples"], "epochs": sizes["epochs"],
        "mini_batches": sizes["mini_batches"], "actor_hidden": sizes["actor_hidden"],
        "critic_hidden": sizes["critic_hidden"], "updates_per_run": a.updates,
        "rust_updates_per_s": [r for r, _ in pairs], "pytorch_updates_per_s": [py for _, py in pairs],
        "ratio_runs": ratios, "median_ratio": statistics.median(ratios),
        "best_ratio": max(r for r, _ in pairs) / max(py for _, py in pairs),
        "rust_threads": sizes["threads"], "torch_threads": torch.get_num_threads(), "pytorch_kernels": KERNELS,
    }
    if a.json:
        print(json.dumps(result, indent=2))
        return
    print(f"PPO update throughput, {a.config} ({sizes['samples']} samples, {sizes['epochs']} epochs x "
          f"{sizes['mini_batches']} minibatches), {a.repeats} interleaved pairs; {KERNELS}:")
    for i, (r, py) in enumerate(pairs):
        print(f"  run {i + 1}: arena-ppo {r:7.2f} updates/s ({1000 / r:6.1f} ms)   "
              f"pytorch {py:7.2f} updates/s ({1000 / py:6.1f} ms)   ratio {r / py:.3f}")
    print(f"median ratio (arena-ppo / pytorch): {result['median_ratio']:.3f}; best-of ratio {result['best_ratio']:.3f}")


if __name__ == "__main__":
    main()
