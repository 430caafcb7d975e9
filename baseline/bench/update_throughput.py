#!/usr/bin/env python3
"""Update throughput of arena-bfm against the PyTorch oracle at equal sizes, interleaved.

Both sides run one complete FB-CPR-Aux update (normaliser, discriminator with gradient
penalty, FB + orthonormality, both critics, actor, Polyak) on the same inputs: the Rust example
writes them (config, initial tensors, batch and noise), the oracle's `agent_update` replays
them. Runs alternate (rust, python, rust, python, ...) so machine noise hits both; the report is
the median of the paired ratios (rust updates/s ÷ python updates/s) and the best of each.

    PYTHONPATH=third_party/pytorch .venv/bin/python baseline/bench/update_throughput.py \
        --example target/release/examples/update_throughput --preset small --batch 1024

The oracle records every gradient for comparison (a copy per parameter per update), which the
Rust side does not: a small handicap on the PyTorch side, stated with the results.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

from same_mkl_kernels import same_kernels  # noqa: E402

KERNELS = same_kernels()  # before torch is imported

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

import fb_cpr_aux_oracle as oracle  # noqa: E402


def rust_run(example, preset, batch, updates, device, dump=None):
    cmd = [example, "--preset", preset, "--batch", str(batch), "--updates", str(updates), "--device", device]
    if dump:
        cmd += ["--dump", dump]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def python_run(directory, updates, device):
    """The oracle's updates/s on `device` (cpu, or cuda: every tensor and parameter made there,
    the clock read after the device has finished)."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {device}: this torch ({torch.__version__}) sees no CUDA device")
    torch.set_default_device(device)
    config = json.load(open(os.path.join(directory, "config.json")))
    init = load_file(os.path.join(directory, "init.safetensors"), device=device)
    batch = load_file(os.path.join(directory, "batch.safetensors"), device=device)
    model = oracle.Model(config["model"])
    obs_norm, aux = oracle.load_init(model, init)
    b = oracle.load_batch(batch, model, config["agent"])
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    oracle.agent_update(model, obs_norm, aux, b, config["agent"])  # warm-up
    sync()
    start = time.perf_counter()
    for _ in range(updates):
        oracle.agent_update(model, obs_norm, aux, b, config["agent"])
    sync()
    seconds = time.perf_counter() - start
    return {"impl": "pytorch-oracle", "seconds": seconds, "updates_per_s": updates / seconds,
            "threads": torch.get_num_threads()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--example", required=True, help="path of the update_throughput example binary")
    p.add_argument("--preset", default="small")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--updates", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.repeats < 1 or a.updates < 1:
        p.error("--repeats and --updates must be >= 1")
    with tempfile.TemporaryDirectory() as d:
        rust_run(a.example, a.preset, a.batch, 1, a.device, dump=d)
        pairs = []
        for _ in range(a.repeats):
            r = rust_run(a.example, a.preset, a.batch, a.updates, a.device)
            py = python_run(d, a.updates, a.device)
            pairs.append((r["updates_per_s"], py["updates_per_s"]))
    ratios = [r / py for r, py in pairs]
    result = {
        "preset": a.preset, "batch": a.batch, "updates_per_run": a.updates, "device": a.device,
        "rust_updates_per_s": [r for r, _ in pairs], "pytorch_updates_per_s": [py for _, py in pairs],
        "ratio_runs": ratios, "median_ratio": statistics.median(ratios),
        "best_ratio": max(r for r, _ in pairs) / max(py for _, py in pairs),
        "torch_threads": torch.get_num_threads(), "pytorch_kernels": KERNELS,
    }
    if a.json:
        print(json.dumps(result, indent=2))
        return
    print(f"update throughput, preset {a.preset}, batch {a.batch}, {a.device}, {a.repeats} interleaved pairs; "
          f"{KERNELS}:")
    for i, (r, py) in enumerate(pairs):
        print(f"  run {i + 1}: arena-bfm {r:8.2f} updates/s   pytorch {py:8.2f} updates/s   ratio {r / py:.3f}")
    print(f"median ratio (arena-bfm / pytorch): {result['median_ratio']:.3f}; best-of ratio {result['best_ratio']:.3f}")


if __name__ == "__main__":
    main()
