#!/usr/bin/env bash
# Prepares what a session's GPU machine needs to train the PPO tracker there
# (docs/ppo-tracker.md, "On a GPU machine"), in .gpu-ppo/ (ignored by git; one device call's
# `carry`, about 12 MB): `arena-ppo` built with ARENA_PPO_CUDA=1 against the torch 2.11.0+cu130
# of third_party/pytorch (it links libtorch_cuda; on the machine it runs against that machine's
# own torch through LD_LIBRARY_PATH), stripped, with MuJoCo's library (ppo.tar.xz), and the
# G1 Moves dance clips from ../shared/motions/g1-moves (motions.tar.xz). The physics worker's
# packages come from scripts/gpu-carry.sh (.warp1, .warp2, .whl).
#
# Afterwards target/release holds the ordinary CPU build again.
set -euo pipefail
cd "$(dirname "$0")/.."
motions=${MOTIONS:-../shared/motions/g1-moves}
if [ ! -d "$motions" ]; then
    echo "error: no dance clips in $motions (set MOTIONS to the g1-moves folder)" >&2
    exit 1
fi
rm -rf .gpu-ppo
mkdir -p .gpu-ppo
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
ARENA_PPO_CUDA=1 cargo build --release -p arena-ppo --bin arena-ppo
cp target/release/arena-ppo third_party/mujoco/lib/libmujoco.so.3.17.0 "$scratch"/
strip "$scratch/arena-ppo"
if ! readelf -d "$scratch/arena-ppo" | grep -q 'NEEDED.*libtorch_cuda'; then
    echo "error: arena-ppo does not link libtorch_cuda" >&2
    exit 1
fi
tar cf - -C "$scratch" arena-ppo libmujoco.so.3.17.0 | xz -T0 -6 > .gpu-ppo/ppo.tar.xz
tar cf - -C "$motions" $(cd "$motions" && ls dance__*.csv) | xz -T0 -6 > .gpu-ppo/motions.tar.xz
cargo build --release -p arena-ppo --bin arena-ppo
du -sh .gpu-ppo
