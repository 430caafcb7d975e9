#!/usr/bin/env bash
# Runs on a GPU machine, from the checkout's root, after the wheels are installed into /tmp/site
# (docs/gpu-backend.md, "Measuring on a GPU machine"): every GPU-backend measurement of issue 17,
# one after the other, for MJX's JAX path and for MuJoCo Warp. Meant to be started detached (a
# device command may run 10 minutes at most):
#
#   mkdir -p /tmp/gpu-results && setsid nohup bash scripts/gpu-measure.sh \
#       > /tmp/gpu-results/log 2>&1 < /dev/null &
#
# Each measurement writes RESULTS/<name>.txt when it ends, so partial results survive a session
# that runs out of time; RESULTS/DONE marks the end. The binaries are copied out of .gpu/ first,
# so later device calls may carry other folders.
#
# Settings (environment): RESULTS (/tmp/gpu-results), ENVS ("1024 4096 8192"), EPISODES (4096),
# DEVICE (auto), IMPLS ("jax warp"), CPU_THREADS (16), PYTHON (python3), SITE (/tmp/site, prepended
# to PYTHONPATH when it exists), GPU_DIR (.gpu: the `arena` and `replay` binaries and
# libmujoco, as scripts/gpu-carry.sh leaves them).
set -u
cd "$(dirname "$0")/.."
results=${RESULTS:-/tmp/gpu-results}
envs=${ENVS:-1024 4096 8192}
episodes=${EPISODES:-4096}
device=${DEVICE:-auto}
impls=${IMPLS:-jax warp}
python=${PYTHON:-python3}
site=${SITE:-/tmp/site}
mkdir -p "$results" /tmp/arena-gpu-bin
cp "${GPU_DIR:-.gpu}"/* /tmp/arena-gpu-bin/ || exit 1
if [ -d "$site" ]; then
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    export LD_LIBRARY_PATH="$site/mujoco${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export ARENA_GPU_PYTHON=${ARENA_GPU_PYTHON:-$python}

# shellcheck source=scripts/gpu-steps.sh
source scripts/gpu-steps.sh

{ nvidia-smi; "$python" -c 'import jax; print("jax", jax.__version__, jax.devices())'; } > "$results/machine.txt" 2>&1
for impl in $impls; do
    # shellcheck disable=SC2086 # ENVS is a list
    step "$results" "throughput-$impl" "$python" bench/gpu_throughput.py --arena /tmp/arena-gpu-bin/arena \
        --envs $envs --cpu-threads "${CPU_THREADS:-16}" --device "$device" --impl "$impl"
done
for impl in $impls; do
    step "$results" "eval-$impl" "$python" bench/gpu_eval_scale.py --arena /tmp/arena-gpu-bin/arena \
        --agent /tmp/arena-gpu-bin/replay --episodes "$episodes" --backend gpu \
        --gpu-device "$device" --gpu-impl "$impl"
done
touch "$results/DONE"
