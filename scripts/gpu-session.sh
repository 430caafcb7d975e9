#!/usr/bin/env bash
# Runs on a GPU machine, from the checkout's root: a whole session's GPU work in one device
# call, as the 2026-11-27 session ran it: issue 41's figures (scripts/gpu-measure.sh, Warp only)
# within MEASURE_S seconds, then the PPO tracker's training and evaluations
# (scripts/gpu-train-ppo.sh) within TRAIN_S seconds; every result packed into one file,
# OUT_TGZ (a device call brings back at most 8 files). The calls before it carry what
# scripts/gpu-carry.sh and scripts/gpu-carry-ppo.sh prepared (64 MiB a call with the tree):
#   1. carry [".warp1"]:            mkdir -p /tmp/arena-carry && cp .warp1/* /tmp/arena-carry/
#   2. carry [".warp2", ".gpu"]:    cp .warp2/* .gpu/* /tmp/arena-carry/
#   3. carry [".whl", ".gpu-ppo"]:  OUT_TGZ=$OUT/results.tgz bash scripts/gpu-session.sh
#      (timeout_s 600: about 7.5 minutes with the defaults)
# A later call on the same warm machine can continue the training from the checkpoint this one
# left in /tmp/ppo/run (INIT_FROM=/tmp/ppo/run/checkpoint RUN_DIR=/tmp/ppo/run2 MEASURE_S=0).
#
# Settings (environment): OUT_TGZ (required), MEASURE_S (190; 0: no measurements), TRAIN_S
# (370; 0: no training), TRAIN_MINUTES (4), RESULTS_DIR (/tmp/gpu-session), RUN_DIR
# (/tmp/ppo/run), INIT_FROM (gpu-train-ppo.sh's default), and the two scripts' own settings
# (DEVICE, PYTHON, SITE, ENVS, EPISODES, EXTRA, ...).
set -u
cd "$(dirname "$0")/.."
if [ -z "${OUT_TGZ:-}" ]; then
    echo "gpu-session: set OUT_TGZ to the file to write (e.g. \$OUT/results.tgz)" >&2
    exit 2
fi
results=${RESULTS_DIR:-/tmp/gpu-session}
mkdir -p "$results"
export PYTHONUNBUFFERED=1
status=0
if [ "${MEASURE_S:-190}" -gt 0 ]; then
    RESULTS="$results/measure" BUDGET_S="${MEASURE_S:-190}" IMPLS="${IMPLS-warp}" BFM_PRESETS="${BFM_PRESETS-}" \
        EVAL_REPEATS="${EVAL_REPEATS:-1}" bash scripts/gpu-measure.sh || status=1
fi
if [ "${TRAIN_S:-370}" -gt 0 ]; then
    OUT_DIR="$results/ppo" RUN_DIR="${RUN_DIR:-/tmp/ppo/run}" BUDGET_S="${TRAIN_S:-370}" \
        TRAIN_MINUTES="${TRAIN_MINUTES:-4}" bash scripts/gpu-train-ppo.sh || status=1
fi
tar czf "$OUT_TGZ" -C "$results" . || status=1
echo "$(date -u +%T) packed $(du -h "$OUT_TGZ" | cut -f1) into $OUT_TGZ"
for f in "$results"/*/*.txt; do
    [ -f "$f" ] && echo "== $f: $(tail -c 300 "$f" | tr '\n' ' ')"
done
exit $status
