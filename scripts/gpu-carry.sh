#!/usr/bin/env bash
# Prepares what a session's GPU machine needs to measure the GPU backend (docs/gpu-backend.md,
# "Measuring on a GPU machine"): the Python 3.12 wheels of MuJoCo 3.17.0, MJX and MuJoCo Warp in
# .whl/ (JAX with CUDA is installed there), warp-lang's wheel (149 MB, above one call's 64 MiB)
# cut into three parts in .warp1/ .warp2/ .warp3/, and the stripped `arena` binary and the SDK's
# replay example with MuJoCo's library in .gpu/. All are ignored by git and travel with the device
# tool's `carry`, one folder per call while the machine stays warm.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl .warp1 .warp2 .warp3
mkdir -p .whl .gpu .warp1 .warp2 .warp3
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
    mujoco==3.17.0 mujoco-mjx==3.17.0 trimesh==5.2.0 glfw==2.11.0 pyopengl==3.1.10 websockets==15.0.1 \
    mujoco-warp==3.17.0 absl-py==2.5.1 etils==1.15.0
# warp-lang: one wheel for every CPython 3; cut into parts that `cat` joins again on the device.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d .warp1 warp-lang==1.18.0
wheel=$(ls .warp1/warp_lang-*.whl)
split -b 50M -d -a 1 "$wheel" ".warp1/$(basename "$wheel").part"
mv .warp1/*.part1 .warp2/ && mv .warp1/*.part2 .warp3/ && rm "$wheel"
cargo build --release -p arena-server --bin arena -p arena-sdk --example replay
cp target/release/arena target/release/examples/replay .gpu/
# Beside the binaries, where their $ORIGIN run path finds it wherever they are copied.
cp third_party/mujoco/lib/libmujoco.so.3.17.0 .gpu/
strip .gpu/arena .gpu/replay
du -sh .whl .warp1 .warp2 .warp3 .gpu
