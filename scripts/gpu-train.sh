#!/usr/bin/env bash
# Runs on a GPU machine, from the checkout's root, with .gpu-bfm/ carried there
# (scripts/gpu-carry-bfm.sh; docs/baseline.md, "Training on a GPU machine"): the baseline's GPU
# work of issue 15, one step after the other, meant to be started detached (a device command may
# run 10 minutes at most):
#
#   mkdir -p /tmp/bfm && setsid nohup bash scripts/gpu-train.sh > /tmp/bfm/log 2>&1 < /dev/null &
#
# It works from the checkout's root (it changes there first), where the binaries find the shipped
# `benchmarks/` folder: a copy of the script elsewhere needs the checkout beside it.
# 1. update throughput of arena-bfm against the PyTorch oracle at each of THROUGHPUT_PRESETS;
# 2. a training run of CONFIG for at most TRAIN_MINUTES (arena-bfm train --time-limit), started
#    from INIT_FROM when set (an export committed under baseline/checkpoints/);
# 3. an export of the agent's networks to OUT_DIR/agent, and the run's logs beside it;
# 4. `arena-bfm eval --json` of the final checkpoint on g1-smoke, and on g1-moves-dance when
#    MOTIONS_ROOT holds its clips (copy ../shared/motions/g1-moves into an ignored folder such
#    as .motions/g1-moves and carry it), for the learning curve against replay.
# Each step writes OUT_DIR/<name>.txt when it ends; OUT_DIR/DONE marks the end. Bring back
# OUT_DIR (the export of `small` is about 7 MB).
#
# Settings (environment): OUT_DIR (/tmp/bfm/out), RUN_DIR (/tmp/bfm/run), CONFIG
# (baseline/configs/gpu-small.toml), TRAIN_MINUTES (12), INIT_FROM (none), DEVICE (cuda),
# THROUGHPUT_PRESETS ("paper small"; empty: none), BATCH (1024), PYTHON (python3), BFM_DIR (.gpu-bfm),
# MOTIONS_ROOT (.motions/g1-moves), EXTRA (more arena-bfm train arguments, e.g.
# "--set train.eval_every_steps=100000").
set -u
cd "$(dirname "$0")/.."
out=${OUT_DIR:-/tmp/bfm/out}
run_dir=${RUN_DIR:-/tmp/bfm/run}
device=${DEVICE:-cuda}
python=${PYTHON:-python3}
bin=/tmp/arena-bfm-bin
mkdir -p "$out" "$bin"
cp "${BFM_DIR:-.gpu-bfm}"/* "$bin"/ || exit 1
torch_lib=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))') || exit 1
export LD_LIBRARY_PATH="$torch_lib:$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# shellcheck source=scripts/gpu-steps.sh
source scripts/gpu-steps.sh

{ nvidia-smi; "$python" -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'; } > "$out/machine.txt" 2>&1
for preset in ${THROUGHPUT_PRESETS-paper small}; do
    step "$out" "throughput-$preset" "$python" baseline/bench/update_throughput.py --example "$bin/update_throughput" \
        --preset "$preset" --batch "${BATCH:-1024}" --device "$device"
done
init=()
if [ -n "${INIT_FROM:-}" ]; then
    init=(--init-from "$INIT_FROM")
fi
# shellcheck disable=SC2086 # EXTRA is a list of arguments
step "$out" train "$bin/arena-bfm" train --config "${CONFIG:-baseline/configs/gpu-small.toml}" --out "$run_dir" \
    --device "$device" --time-limit "${TRAIN_MINUTES:-12}" "${init[@]}" ${EXTRA:-}
if [ -d "$run_dir/checkpoint" ]; then
    rm -rf "$out/agent"
    step "$out" export "$bin/arena-bfm" export --checkpoint "$run_dir/checkpoint" --out "$out/agent"
    cp "$run_dir/train_log.csv" "$run_dir/eval_log.csv" "$run_dir/checkpoint/train_status.json" \
        "$run_dir/checkpoint/config.json" "$out"/ 2>/dev/null
    step "$out" eval-g1-smoke "$bin/arena-bfm" eval --checkpoint "$run_dir/checkpoint" \
        --benchmark g1-smoke --device "$device" --json
    motions=${MOTIONS_ROOT:-.motions/g1-moves}
    if [ -d "$motions" ]; then
        step "$out" eval-g1-moves-dance "$bin/arena-bfm" eval --checkpoint "$run_dir/checkpoint" \
            --benchmark g1-moves-dance --motions-root "$motions" --batch 32 --device "$device" --json
    fi
fi
touch "$out/DONE"
