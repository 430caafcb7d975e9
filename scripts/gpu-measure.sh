#!/usr/bin/env bash
# Runs on a GPU machine, from the checkout's root: every GPU figure of issue 41 (the backend's
# throughput against its raw library, standing and on the arena's own tracking workload, and
# with the physics stubbed out, §2's stubbed host side
# with and without the recording, how the host side
# scales with the machine's cores, the 4096-episode
# evaluation with its breakdown beside the in-process one, served as deployed (a spare worker
# ready, then a prewarmed lane) and cold, with BFM-Zero's observations, then the same with the
# stub) and the BFM-Zero update throughput
# against the PyTorch oracle on CUDA (issue 42 §3), one after the other within BUDGET_S seconds.
# docs/gpu-backend.md, "Measuring on a GPU machine", has the three device calls that bring what
# scripts/gpu-carry-bfm.sh, then scripts/gpu-carry.sh prepared:
#   1. carry .warp1:        mkdir -p /tmp/arena-carry && cp .warp1/* /tmp/arena-carry/
#   2. carry .warp2 .gpu:   cp .warp2/* .gpu/* /tmp/arena-carry/
#   3. carry .whl:          OUT_TGZ=$OUT/results.tgz MEASURE_S=470 TRAIN_S=0 bash scripts/gpu-session.sh
#      (gpu-session.sh runs this script and packs its results: a call brings back 8 files at most)
# Each step writes RESULTS/<name>.txt when it ends, so a run cut short keeps what finished; a
# step that would start with less than its share of the budget left is skipped (and says so).
#
# Settings (environment): RESULTS (/tmp/gpu-results), BUDGET_S (480), ENVS ("1024 4096 8192"),
# EPISODES (4096), WINDOW_S (2), PROFILE_ENVS (4096; 8 with DEVICE=cpu), EVAL_REPEATS (1), EVAL_SESSIONS (2: the second submission on the
# same server takes the first's worker over), BFM_UPDATES (20), IMPLS ("warp"; add jax for MJX, whose compilation takes
# minutes; empty: none), JAX_ENVS (1024), BFM_PRESETS ("small paper"; empty: none), CARRY_DIR (/tmp/arena-carry, where
# calls 1 and 2 left their files; files in ./.warp1, ./.warp2 and ./.gpu are found too), PYTHON (python3), DEVICE (gpu; cpu for a toy run on a machine
# without one), SITE (/tmp/site; empty: use PYTHON's own packages, nothing installed).
set -u
cd "$(dirname "$0")/.."
results=${RESULTS:-/tmp/gpu-results}
budget=${BUDGET_S:-480}
python=${PYTHON:-python3}
site=${SITE-/tmp/site}
device=${DEVICE:-gpu}
bin=/tmp/arena-gpu-bin
mkdir -p "$results" "$bin"
began=$SECONDS

# shellcheck source=scripts/gpu-steps.sh
source scripts/gpu-steps.sh

# Warp, MuJoCo and MJX into SITE (idempotent on a warm machine).
install_python_packages "$site" "$python" || exit 1
binaries=$(carried bin.tar.xz) || exit 1
xz -d < "$binaries" | tar xf - -C "$bin" || exit 1
if bfm=$(carried bfm.tar.xz 2>/dev/null); then
    mkdir -p /tmp/arena-bfm-bin && xz -d < "$bfm" | tar xf - -C /tmp/arena-bfm-bin
fi
if [ -n "$site" ]; then
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export ARENA_GPU_PYTHON=$python
echo "$(date -u +%T) installed after $((SECONDS - began)) s"

{
    nvidia-smi
    nproc
    "$python" -c 'import warp as wp, mujoco_warp, mujoco, jax; wp.init(); print("warp", wp.__version__, "cuda devices", wp.get_cuda_device_count()); print("mujoco_warp", mujoco_warp.__version__, "mujoco", mujoco.__version__, "jax", jax.__version__, jax.devices())'
} > "$results/machine.txt" 2>&1

# A few envs on the device first (g1-smoke's 6: a shared file small enough that its blocks share
# pages, which MuJoCo Warp page-locks as one range): every episode scored, none failed.
# shellcheck disable=SC2016 # expanded by the inner shell
timed "$results" 20 small-envs bash -c '"$0" eval --benchmark g1-smoke --policy replay --batch 16 --backend gpu \
    --gpu-impl warp --gpu-device "$1" --json | "$2" -c "import json, sys; r = json.load(sys.stdin); \
f = r[\"failed_episodes\"]; print(len(r[\"episodes\"]), \"episodes,\", len(f), \"failed:\", f); sys.exit(1 if f else 0)"' \
    "$bin/arena" "$device" "$python"

# `throughput IMPL`: the backend's throughput against its raw library (MJX at JAX_ENVS only).
throughput() {
    local envs=${ENVS:-1024 4096 8192} need=60 tracking=()
    [ "$1" = jax ] && envs=${JAX_ENVS:-1024}
    # Warp: raw MuJoCo Warp on the arena's own workload too (its CPU dump of the largest size
    # takes about 45 s on 16 cores at 8192 envs, 16 GB).
    [ "$1" = warp ] && need=100 && tracking=(--tracking)
    # shellcheck disable=SC2086 # a list of env counts
    timed "$results" "$need" "throughput-$1" "$python" bench/gpu_throughput.py --arena "$bin/arena" \
        --envs $envs --repeats 1 --no-cpu --device "$device" --impl "$1" ${tracking[@]+"${tracking[@]}"}
}
case " ${IMPLS-warp} " in
    *" warp "*) throughput warp ;;
esac
# Issue 41 §2's own measure on this machine's cores: the stubbed host side (median of 5), with
# the recording (as gpu_throughput.py's stub column) and without it (as `make bench`).
# shellcheck disable=SC2016 # expanded by the inner shell
timed "$results" 20 host-side-stub bash -c 'for n in $1; do for rec in "" --no-record; do
    "$0" sim bench --envs "$n" --steps 100 --repeats 5 --backend gpu --gpu-impl stub --gpu-device cpu $rec || exit 1
done; done' "$bin/arena" "${ENVS:-1024 4096 8192}"
# The worker's MuJoCo Warp step against raw MuJoCo Warp on the same states, kernel by kernel.
profile_envs=${PROFILE_ENVS:-4096}
[ "$device" = cpu ] && profile_envs=${PROFILE_ENVS:-8}
case " ${IMPLS-warp} " in
    *" warp "*) timed "$results" 40 warp-profile "$python" bench/warp_step_profile.py --arena "$bin/arena" \
        --envs "$profile_envs" --device "$device" ;;
esac
timed "$results" 60 eval-4096 "$python" bench/gpu_eval_scale.py --arena "$bin/arena" --agent "$bin/replay" \
    --episodes "${EPISODES:-4096}" --window-s "${WINDOW_S:-2}" --backend gpu --gpu-device "$device" --gpu-impl warp \
    --repeats "${EVAL_REPEATS:-1}" --sessions "${EVAL_SESSIONS:-2}"
# Served as deployed: the server prewarms the lane's simulator, so the first session is warm.
timed "$results" 30 eval-4096-prewarm "$python" bench/gpu_eval_scale.py --arena "$bin/arena" --agent "$bin/replay" \
    --episodes "${EPISODES:-4096}" --window-s "${WINDOW_S:-2}" --backend gpu --gpu-device "$device" --gpu-impl warp \
    --repeats "${EVAL_REPEATS:-1}" --prewarm --no-in-process
# The server's cold path: no spare worker, so the lane starts its own (the first session of a
# shape on a server that keeps none, `--spare-simulators 0`), against eval-4096's spare.
timed "$results" 20 eval-4096-no-spare "$python" bench/gpu_eval_scale.py --arena "$bin/arena" \
    --agent "$bin/replay" --episodes "${EPISODES:-4096}" --window-s "${WINDOW_S:-2}" --backend gpu \
    --gpu-device "$device" --gpu-impl warp --repeats 1 --spare-simulators 0 --no-in-process
# BFM-Zero's observation groups (g1-smoke's: the history and 8 reference_goal rows), each goal
# row sent once as the SDKs ask by default, against the in-process run of the same benchmark.
timed "$results" 20 eval-4096-bfm "$python" bench/gpu_eval_scale.py --arena "$bin/arena" --agent "$bin/replay" \
    --episodes "${EPISODES:-4096}" --window-s "${WINDOW_S:-2}" --backend gpu --gpu-device "$device" --gpu-impl warp \
    --repeats 1 --observations bfm-zero
# The same evaluation with the physics stubbed out (no GPU work at all): what serving costs
# around the physics on this machine's cores, beside the real one above.
timed "$results" 30 eval-4096-stub "$python" bench/gpu_eval_scale.py --arena "$bin/arena" --agent "$bin/replay" \
    --episodes "${EPISODES:-4096}" --window-s "${WINDOW_S:-2}" --backend gpu --gpu-device cpu --gpu-impl stub \
    --repeats "${EVAL_REPEATS:-1}"
# Its part files through the page cache: against the run above (its `store_part_thread_s` and
# `disk_write_gb_s`), whether storing the parts waits for this machine's disk.
timed "$results" 20 eval-4096-stub-buffered "$python" bench/gpu_eval_scale.py --arena "$bin/arena" \
    --agent "$bin/replay" --episodes "${EPISODES:-4096}" --window-s "${WINDOW_S:-2}" --backend gpu --gpu-device cpu \
    --gpu-impl stub --repeats "${EVAL_REPEATS:-1}" --buffered-parts --no-in-process
# Last, as the least needed: which part of the host side stops scaling with the machine's
# cores (the stub, then the CPU backend's MuJoCo as the cores' own reference), at 1 and 4
# threads and on every core (6 s on the 2-core development machine at 1, 2 and 4).
threads=$(printf '%s\n' 1 4 "$(nproc)" | sort -nu | tr '\n' ' ')
# shellcheck disable=SC2086 # a list of thread counts
timed "$results" 25 host-scaling "$python" bench/host_scaling.py --arena "$bin/arena" --envs 4096 --threads $threads
# MJX after everything of Warp's: its compilations take minutes (at 4096 envs more than the
# 230 s one H200 call gave it), and `jax` stays only for float64 audits.
case " ${IMPLS-warp} " in
    *" jax "*) throughput jax ;;
esac
if [ -x /tmp/arena-bfm-bin/update_throughput ]; then
    torch_lib=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
    bfm_device=cuda
    [ "$device" = cpu ] && bfm_device=cpu
    for preset in ${BFM_PRESETS-small paper}; do
        (
            export LD_LIBRARY_PATH="$torch_lib:/tmp/arena-bfm-bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            timed "$results" 40 "bfm-update-$preset" "$python" baseline/bench/update_throughput.py \
                --example /tmp/arena-bfm-bin/update_throughput --preset "$preset" --batch 1024 \
                --updates "${BFM_UPDATES:-20}" --repeats 2 --device "$bfm_device"
        )
    done
fi
echo "$(date -u +%T) done after $((SECONDS - began)) s"
touch "$results/DONE"
