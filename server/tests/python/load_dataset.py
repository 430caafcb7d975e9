"""Loads a MimicArena trajectory-dataset export (HDF5, BFM-Zero buffer layout) with h5py the way
a replay buffer would, checks its internal consistency, and prints a JSON summary for the Rust
test (server/tests/datasets.rs) to compare with the database.

Usage: python load_dataset.py EXPORT.h5
"""

import json
import sys

import h5py
import numpy as np

BUFFER_KEYS = {
    "observation-state": 64,
    "observation-privileged_state": 463,
    "action": 29,
    "qpos": 36,
    "qvel": 35,
    "terminated": None,
    "truncated": None,
}


def nest(flat):
    """{"observation-state": a} -> {"observation": {"state": a}}: how the buffer loads it."""
    out = {}
    for key, value in flat.items():
        node = out
        parts = key.split("-")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def main(path):
    with h5py.File(path, "r") as f:
        flat = {k: f[k][()] for k in f if isinstance(f[k], h5py.Dataset)}
        episodes = {k: f["episodes"][k][()] for k in f["episodes"]}
        card = json.loads(f.attrs["card"])
        fmt = f.attrs["format"]
    assert set(flat) == set(BUFFER_KEYS), sorted(flat)
    n = flat["qpos"].shape[0]
    for key, width in BUFFER_KEYS.items():
        a = flat[key]
        assert a.shape[0] == n, (key, a.shape)
        if width is None:
            assert a.dtype == np.bool_, (key, a.dtype)
        else:
            assert a.shape == (n, width) and a.dtype == np.float32, (key, a.shape, a.dtype)
    buffer = nest(flat)
    assert buffer["observation"]["privileged_state"].shape == (n, 463)
    start, stop = episodes["start"], episodes["stop"]
    assert len(start) == len(stop) == len(episodes["id"])
    assert (stop[:-1] == start[1:]).all() and (len(stop) == 0 or stop[-1] == n)
    ends = np.zeros(n, dtype=bool)
    ends[stop[stop > start] - 1] = True
    # Exactly one of terminated / truncated marks each episode's last row, and nothing else.
    assert ((flat["terminated"] | flat["truncated"]) == ends).all()
    assert not (flat["terminated"] & flat["truncated"]).any()
    statuses = [s.decode() if isinstance(s, bytes) else s for s in episodes["status"]]
    for i, status in enumerate(statuses):
        if stop[i] > start[i]:
            assert flat["terminated"][stop[i] - 1] == (status == "fell"), (i, status)
    # privileged_state starts with the root height: the root z of qpos, computed independently.
    np.testing.assert_allclose(buffer["observation"]["privileged_state"][:, 0], flat["qpos"][:, 2], rtol=0, atol=1e-6)
    # An episode's first action row is zeros (the reset row).
    for s, e in zip(start, stop):
        if e > s:
            assert not flat["action"][s].any()
    ids = [s.decode() if isinstance(s, bytes) else s for s in episodes["id"]]
    print(json.dumps({
        "format": fmt if isinstance(fmt, str) else fmt.decode(),
        "rows": int(n),
        "episodes": len(ids),
        "ids": ids,
        "lengths": [int(e - s) for s, e in zip(start, stop)],
        "card_counts": card["counts"],
        "first_qpos": flat["qpos"][0].tolist() if n else [],
    }))


if __name__ == "__main__":
    main(sys.argv[1])
