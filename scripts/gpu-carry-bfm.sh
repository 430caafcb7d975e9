#!/usr/bin/env bash
# Prepares what a session's GPU machine needs to train and measure the BFM-Zero baseline
# (docs/baseline.md, "Training on a GPU machine"): `arena-bfm` and its `update_throughput`
# example linked against libtorch_cuda (ARENA_BFM_CUDA=1; they run there against that machine's
# own torch 2.11.0 through LD_LIBRARY_PATH), stripped, with MuJoCo's library beside them, in
# .gpu-bfm/ (ignored by git; one device call's `carry`, about 18 MiB).
#
# Afterwards target/release holds the ordinary CPU build again, so tests and `make` here are not
# affected.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu-bfm
mkdir -p .gpu-bfm
ARENA_BFM_CUDA=1 cargo build --release -p arena-bfm --bin arena-bfm --example update_throughput
cp target/release/arena-bfm target/release/examples/update_throughput .gpu-bfm/
cp third_party/mujoco/lib/libmujoco.so.3.17.0 .gpu-bfm/
strip .gpu-bfm/arena-bfm .gpu-bfm/update_throughput
for bin in .gpu-bfm/arena-bfm .gpu-bfm/update_throughput; do
    if ! readelf -d "$bin" | grep -q 'NEEDED.*libtorch_cuda'; then
        echo "error: $bin does not link libtorch_cuda" >&2
        exit 1
    fi
done
cargo build --release -p arena-bfm --bin arena-bfm --example update_throughput
du -sh .gpu-bfm
