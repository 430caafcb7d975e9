"""Exact EMD of `arena metrics emd` against POT's ot.emd2 (the reference implementation).

Test mode (default): random and real (g1-moves) frame sets, equal and unequal sizes; every
value must equal POT's within 1e-9 relative. Exits non-zero on any mismatch.

Bench mode (--bench): 29-D trajectories of T = 500, 1000, 2000, 6000 frames (a replay rollout
against its reference motion, both from `arena`), POT and arena side by side in one run,
interleaved, best of --repeats; prints both values, both times and the ratio. POT's time is
cdist + emd2 (frames in, value out); arena's is its own solve time (frames in memory, value out).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import ot
from scipy.spatial.distance import cdist

NUM_ITER_MAX = 1_000_000_000  # high enough that POT converges (its default of 100000 does not)


def arena_emd(arena, a, b, tmp):
    pa, pb = os.path.join(tmp, "a.csv"), os.path.join(tmp, "b.csv")
    np.savetxt(pa, a, delimiter=",", fmt="%.17g")
    np.savetxt(pb, b, delimiter=",", fmt="%.17g")
    out = subprocess.run(
        [arena, "metrics", "emd", "--a", pa, "--b", pb, "--columns", f"0:{a.shape[1]}", "--json"],
        capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"arena metrics emd failed: {out.stderr}")
    r = json.loads(out.stdout)
    return r["emd"], r["solve_seconds"]


def pot_emd(a, b):
    start = time.perf_counter()
    m = cdist(a, b)
    value = ot.emd2(np.full(len(a), 1 / len(a)), np.full(len(b), 1 / len(b)), m, numItermax=NUM_ITER_MAX)
    return float(value), time.perf_counter() - start


def load_moves(moves):
    files = sorted(f for f in os.listdir(moves) if f.endswith(".csv"))
    return {f: np.loadtxt(os.path.join(moves, f), delimiter=",")[:, 7:36] for f in files}


def test(arena, moves):
    rng = np.random.default_rng(11)
    cases = []
    for n, m, d in [(1, 1, 29), (2, 7, 29), (50, 50, 29), (64, 48, 3), (333, 333, 29), (400, 257, 29),
                    (600, 600, 29), (700, 525, 72), (1000, 1000, 29), (1200, 900, 29)]:
        cases.append((f"gaussian {n}x{m} d={d}", rng.normal(size=(n, d)), rng.normal(size=(m, d))))
    # Equal sizes up to 256 rows are solved densely (benchmarks/src/emd/assignment.rs).
    cases.append(("gaussian 256x256 d=23 (dense)", rng.normal(size=(256, 23)), rng.normal(size=(256, 23))))
    cases.append(("uniform ties 100x100 d=2 (dense)", rng.integers(0, 4, size=(100, 2)).astype(float),
                  rng.integers(0, 4, size=(100, 2)).astype(float)))
    cases.append(("uniform ties 300x300 d=2", rng.integers(0, 4, size=(300, 2)).astype(float),
                  rng.integers(0, 4, size=(300, 2)).astype(float)))
    if moves:
        clips = load_moves(moves)
        names = list(clips)
        x, y = clips[names[0]], clips[names[5]]
        cases.append(("g1-moves clip vs clip (unequal)", x[:900], y[:700]))
        cases.append(("g1-moves clip vs itself shifted", x[:1000], x[10:1010]))
        cases.append(("g1-moves 100-frame window vs itself shifted (dense)", x[:100], x[3:103]))
        cases.append(("g1-moves clip vs noisy self", x[:800], x[:800] + rng.normal(scale=0.05, size=(800, 29))))
        cases.append(("g1-moves two clips, 60 fps vs every 2nd frame", y[:1200], x[:1200:2]))
    else:
        print("skipping g1-moves cases: motions folder not found")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name, a, b in cases:
            ours, _ = arena_emd(arena, a, b, tmp)
            ref, _ = pot_emd(a, b)
            rel = abs(ours - ref) / max(abs(ref), 1e-300) if ref != 0 else abs(ours)
            worst = max(worst, rel)
            status = "ok" if rel <= 1e-9 else "MISMATCH"
            print(f"{status:8} {name:45} arena {ours:.15f}  pot {ref:.15f}  rel {rel:.1e}")
            if rel > 1e-9:
                sys.exit(f"EMD mismatch on {name}: {ours} vs POT {ref}")
    print(f"all {len(cases)} cases equal to POT within 1e-9 relative (worst {worst:.1e})")


def rollout_pair(arena, moves, tmp):
    """Joint angles of a replay rollout of the longest g1-moves clip and of its reference at
    the rollout's times (linear interpolation of the 60 fps clip)."""
    clip = max((os.path.join(moves, f) for f in os.listdir(moves) if f.endswith(".csv")), key=os.path.getsize)
    out = os.path.join(tmp, "rollout.csv")
    subprocess.run([arena, "sim", "rollout", "--motion", clip, "--fps", "60", "--policy", "replay", "--out", out],
                   check=True, capture_output=True)
    sim = np.loadtxt(out, delimiter=",")
    ref = np.loadtxt(clip, delimiter=",")[:, 7:36]
    t_ref = np.arange(len(ref)) / 60.0
    ref_at = np.stack([np.interp(sim[:, 0], t_ref, ref[:, k]) for k in range(29)], axis=1)
    return sim[:, 8:37], ref_at, os.path.basename(clip)


def bench(arena, moves, repeats):
    with tempfile.TemporaryDirectory() as tmp:
        sim, ref, clip = rollout_pair(arena, moves, tmp)
        rng = np.random.default_rng(5)
        print(f"29-D joint-angle trajectories: replay rollout of {clip} vs its reference; "
              f"best of {repeats}, interleaved")
        print(f"{'T':>6} {'case':>10} {'arena EMD':>18} {'POT EMD':>18} {'rel diff':>9} "
              f"{'arena s':>9} {'POT s':>9} {'POT/arena':>10}")
        for t in [500, 1000, 2000, 6000]:
            cases = []
            if t <= len(sim):
                cases.append(("rollout", sim[:t], ref[:t]))
            else:  # 6000 > the longest clip (5972 rows): wrap around to make up the rest
                idx = np.arange(t) % len(sim)
                cases.append(("rollout", sim[idx], ref[idx]))
            cases.append(("gaussian", rng.normal(size=(t, 29)), rng.normal(size=(t, 29))))
            for name, a, b in cases:
                best_ours, best_pot = float("inf"), float("inf")
                for _ in range(repeats):
                    ours, s_ours = arena_emd(arena, a, b, tmp)
                    ref_v, s_pot = pot_emd(a, b)
                    best_ours, best_pot = min(best_ours, s_ours), min(best_pot, s_pot)
                rel = abs(ours - ref_v) / ref_v
                print(f"{t:>6} {name:>10} {ours:>18.12f} {ref_v:>18.12f} {rel:>9.1e} "
                      f"{best_ours:>9.4f} {best_pot:>9.4f} {best_pot / best_ours:>9.1f}x", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arena", required=True, help="path to the arena binary")
    p.add_argument("--moves", default=None, help="g1-moves folder (real trajectories)")
    p.add_argument("--bench", action="store_true", help="run the timing comparison")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    moves = a.moves if a.moves and os.path.isdir(a.moves) else None
    if a.bench:
        if not moves:
            sys.exit("--bench needs --moves (the g1-moves folder)")
        bench(a.arena, moves, a.repeats)
    else:
        test(a.arena, moves)


if __name__ == "__main__":
    main()
