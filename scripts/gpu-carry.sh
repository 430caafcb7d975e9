#!/usr/bin/env bash
# Prepares what a session's GPU machine needs to measure the GPU backend (docs/gpu-backend.md,
# "Measuring on a GPU machine"): the Python 3.12 wheels of MuJoCo 3.17.0 and MJX in .whl/ (JAX
# with CUDA is installed there), and the stripped `arena` binary and the SDK's replay example in
# .gpu/. Both folders are ignored by git and travel with the device tool's `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl .gpu
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
    mujoco==3.17.0 mujoco-mjx==3.17.0 trimesh==5.2.0 glfw==2.11.0 pyopengl==3.1.10 websockets==15.0.1
cargo build --release -p arena-server --bin arena -p arena-sdk --example replay
cp target/release/arena target/release/examples/replay .gpu/
strip .gpu/arena .gpu/replay
du -sh .whl .gpu
