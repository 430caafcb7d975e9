#!/usr/bin/env bash
# Prepares what a session's GPU machine needs to measure the GPU backend (docs/gpu-backend.md,
# "Measuring on a GPU machine"), in folders ignored by git that travel with the device tool's
# `carry`:
#   .whl/    the Python 3.12 wheels of MuJoCo 3.17.0, MJX and MuJoCo Warp and their small
#            dependencies (JAX with CUDA is installed there);
#   .warp1/  .warp2/  warp-lang 1.18.0 for that machine: the wheel's files without the CPU
#            compiler (warp-clang.so, only for Warp's CPU device) and the examples, as one
#            tar.xz (83 MB, above one call's 64 MiB with the working tree) cut into two parts;
#   .gpu/    the stripped `arena` and the SDK's replay example, with MuJoCo's library, xz'd
#            (bin.tar.xz), and, when scripts/gpu-carry-bfm.sh has filled .gpu-bfm/, the CUDA
#            build of arena-bfm's update_throughput and arena-bfm (bfm.tar.xz).
# Three calls carry them (.warp1; .warp2 and .gpu; .whl): docs/gpu-backend.md, "Measuring on a
# GPU machine". scripts/gpu-measure.sh joins and installs them there.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl .warp1 .warp2 .warp3 .gpu
mkdir -p .whl .gpu .warp1 .warp2
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
    mujoco==3.17.0 mujoco-mjx==3.17.0 trimesh==5.2.0 glfw==2.11.0 pyopengl==3.1.10 websockets==15.0.1 \
    mujoco-warp==3.17.0 absl-py==2.5.1 etils==1.15.0
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$scratch" warp-lang==1.18.0
(cd "$scratch" && unzip -q warp_lang-*.whl && rm warp_lang-*.whl \
    && rm -rf warp/bin/warp-clang.so warp/examples \
    && tar cf - warp warp_lang-*.dist-info | xz -T0 -6 > warp.tar.xz)
split -b 50M -d -a 1 "$scratch/warp.tar.xz" "$scratch/warp.tar.xz.part"
mv "$scratch/warp.tar.xz.part0" .warp1/ && mv "$scratch/warp.tar.xz.part1" .warp2/
cargo build --release -p arena-server --bin arena -p arena-sdk --example replay
cp target/release/arena target/release/examples/replay third_party/mujoco/lib/libmujoco.so.3.17.0 "$scratch"/
strip "$scratch/arena" "$scratch/replay"
# Beside the binaries, where their $ORIGIN run path finds it wherever they are unpacked.
tar cf - -C "$scratch" arena replay libmujoco.so.3.17.0 | xz -T0 -6 > .gpu/bin.tar.xz
if [ -d .gpu-bfm ]; then
    tar cf - -C .gpu-bfm . | xz -T0 -6 > .gpu/bfm.tar.xz
fi
du -sh .whl .warp1 .warp2 .gpu
