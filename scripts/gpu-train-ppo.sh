#!/usr/bin/env bash
# Runs on a GPU machine, from the checkout's root: the PPO tracker's session there
# (docs/ppo-tracker.md, "On a GPU machine"), within BUDGET_S seconds, each step writing
# OUT_DIR/<name>.txt when it ends:
#   1. install the physics worker's packages (carried by scripts/gpu-carry.sh) and unpack
#      arena-ppo and the dance clips (scripts/gpu-carry-ppo.sh);
#   2. train CONFIG from INIT_FROM (the committed dance tracker) for TRAIN_MINUTES, the envs on
#      BACKEND and the update on DEVICE (`--time-limit`: it stops at a checkpoint boundary);
#   3. evaluate the checkpoint on g1-moves-dance-robot (whole clips) and on 10 s windows of the
#      same clips, scored as submissions are;
#   4. export it as ONNX; copy the checkpoint, its learning curve (train_log.csv, with FPS and
#      the sim / update shares) and the scores to OUT_DIR (a few MB: one call brings it back).
# The device calls (docs/ppo-tracker.md): 1. carry .warp1: cp .warp1/* /tmp/arena-carry/;
# 2. carry .warp2 .gpu-ppo: cp .warp2/* .gpu-ppo/* /tmp/arena-carry/; 3. carry .whl:
#   OUT_DIR=$OUT bash scripts/gpu-train-ppo.sh
#
# Settings (environment): OUT_DIR (/tmp/ppo/out), RUN_DIR (/tmp/ppo/run), BUDGET_S (540),
# CONFIG (ppo/configs/g1-moves-dance-gpu.toml), INIT_FROM (ppo/checkpoints/g1-moves-dance; empty:
# none), TRAIN_MINUTES (4), BACKEND (gpu), DEVICE (cuda), THREADS (16, the evaluations'),
# MOTIONS_ROOT (the carried clips), PPO_BIN (the carried arena-ppo), PYTHON (python3), SITE
# (/tmp/site; empty: PYTHON's own packages), EXTRA (more `train` arguments, e.g. "--set
# env.num_envs=8"), CARRY_DIR (/tmp/arena-carry).
set -u
cd "$(dirname "$0")/.."
out=${OUT_DIR:-/tmp/ppo/out}
run_dir=${RUN_DIR:-/tmp/ppo/run}
budget=${BUDGET_S:-540}
python=${PYTHON:-python3}
site=${SITE-/tmp/site}
threads=${THREADS:-16}
began=$SECONDS
mkdir -p "$out"

# shellcheck source=scripts/gpu-steps.sh
source scripts/gpu-steps.sh

install_python_packages "$site" "$python" || exit 1
if [ -n "$site" ]; then
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export ARENA_GPU_PYTHON=$python
bin=${PPO_BIN:-}
if [ -z "$bin" ]; then
    mkdir -p /tmp/arena-ppo-bin
    archive=$(carried ppo.tar.xz) || exit 1
    xz -d < "$archive" | tar xf - -C /tmp/arena-ppo-bin || exit 1
    bin=/tmp/arena-ppo-bin/arena-ppo
fi
motions=${MOTIONS_ROOT:-}
if [ -z "$motions" ]; then
    motions=/tmp/arena-motions
    mkdir -p "$motions"
    archive=$(carried motions.tar.xz) || exit 1
    xz -d < "$archive" | tar xf - -C "$motions" || exit 1
fi
torch_lib=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null)
if [ -n "$torch_lib" ]; then
    export LD_LIBRARY_PATH="$torch_lib:$(dirname "$bin")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
echo "$(date -u +%T) ready after $((SECONDS - began)) s"
{ nvidia-smi; nproc; "$python" -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'; } \
    > "$out/machine.txt" 2>&1

init=()
if [ -n "${INIT_FROM-ppo/checkpoints/g1-moves-dance}" ]; then
    init=(--set "run.init_from=\"${INIT_FROM-ppo/checkpoints/g1-moves-dance}\"")
fi
# shellcheck disable=SC2086 # EXTRA is a list of arguments
timed "$out" 90 train "$bin" train --config "${CONFIG:-ppo/configs/g1-moves-dance-gpu.toml}" --out "$run_dir" \
    "${init[@]}" --motions-root "$motions" --backend "${BACKEND:-gpu}" --device "${DEVICE:-cuda}" \
    --time-limit "${TRAIN_MINUTES:-4}" --quiet ${EXTRA:-}
if [ -d "$run_dir/checkpoint" ]; then
    mkdir -p "$out/checkpoint"
    cp "$run_dir"/checkpoint/* "$out/checkpoint/"
    # No log row yet on a toy run shorter than run.log_every iterations.
    [ -f "$run_dir/train_log.csv" ] && cp "$run_dir/train_log.csv" "$out/"
    timed "$out" 20 eval-dance "$bin" eval "$run_dir/checkpoint" --motions-root "$motions" --threads "$threads" --json
    windows=/tmp/g1-moves-dance-robot-10s.toml
    sed -e 's/^name = "g1-moves-dance-robot"/name = "g1-moves-dance-robot-10s"/' \
        -e 's/^window = "whole"/window = { length_s = 10.0, stride_s = 10.0 }/' \
        benchmarks/g1-moves-dance-robot.toml > "$windows"
    timed "$out" 20 eval-dance-10s "$bin" eval "$run_dir/checkpoint" --benchmark "$windows" \
        --motions-root "$motions" --threads "$threads" --json
    timed "$out" 10 export "$bin" export "$run_dir/checkpoint" --out "$out/policy.onnx"
fi
echo "$(date -u +%T) done after $((SECONDS - began)) s"
touch "$out/DONE"
