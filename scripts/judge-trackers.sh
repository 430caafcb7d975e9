#!/usr/bin/env bash
# Judges the committed PPO trackers the documented way: a real `arena serve`, a team token, and
# `arena-agent onnx ppo/checkpoints/NAME/policy.onnx` per benchmark, then prints every success
# rule and tracking metric over all episodes from the submissions' reports (how many episodes,
# how many scored, failed unscored, fell). For the model cards and issue 38's table.
#
#   bash scripts/judge-trackers.sh [OUT_DIR]       (KEEP_DATA=DIR keeps the server's data there)
#
# Needs: `cargo build --release -p arena-server` (target/release/arena), .venv with the Python
# SDK's onnx extra (make deps), and ../shared/motions/g1-moves for the dance benchmarks (skipped
# with a note without it). Runs: g1-smoke tracker on g1-smoke-robot; dance tracker on
# g1-moves-dance-robot (whole clips) and on 10 s windows of the same clips (stride 10 s).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/bench/results/judge-trackers}"
arena="$root/target/release/arena"
python="$root/.venv/bin/python"
motions="$root/../shared/motions/g1-moves"
mkdir -p "$out"
[ -x "$arena" ] || { echo "judge-trackers: build target/release/arena first (cargo build --release -p arena-server)" >&2; exit 1; }

work="$(mktemp -d)"
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  if [ -n "${KEEP_DATA:-}" ]; then rm -rf "$KEEP_DATA" && mv "$work" "$KEEP_DATA"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# The shipped benchmarks plus 10 s windows of the dance clips.
mkdir -p "$work/benchmarks"
cp "$root"/benchmarks/*.toml "$work/benchmarks/"
sed -e 's/^name = "g1-moves-dance-robot"/name = "g1-moves-dance-robot-10s"/' \
    -e 's/^window = "whole"/window = { length_s = 10.0, stride_s = 10.0 }/' \
    "$root/benchmarks/g1-moves-dance-robot.toml" > "$work/benchmarks/g1-moves-dance-robot-10s.toml"

admin="judge-$$"
port=$((20000 + $$ % 20000))
ARENA_ADMIN_TOKEN="$admin" "$arena" serve --data-dir "$work/data" --bind "127.0.0.1:$port" \
  --benchmarks-dir "$work/benchmarks" --motions-root "$motions" > "$out/server.log" 2>&1 &
server_pid=$!
url="http://127.0.0.1:$port"
for _ in $(seq 100); do
  curl -sf "$url/api/v1/health" > /dev/null && break
  sleep 0.2
done
created="$("$arena" admin --server "$url" --admin-token "$admin" --json teams create judges)"
token=$(echo "$created" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["token"])')

run() { # tracker benchmark
  local tracker=$1 benchmark=$2 log="$out/$1-on-$2.log"
  echo "judge-trackers: $tracker on $benchmark" >&2
  PYTHONPATH="$root/sdk/python/src" "$python" -m arena_sdk.cli onnx "$root/ppo/checkpoints/$tracker/policy.onnx" \
    --server "$url" --token "$token" --benchmark "$benchmark" --agent-name "$tracker" > "$log" 2>&1 || {
      echo "judge-trackers: arena-agent failed, see $log" >&2; return 1; }
  local id
  id=$(grep -o 'submission sub-[^ ]*' "$log" | tail -1 | cut -d' ' -f2)
  curl -sf -H "Authorization: Bearer $token" "$url/api/v1/submissions/$id/report" > "$out/$tracker-on-$benchmark.report.json"
}

run g1-smoke g1-smoke-robot
if [ -d "$motions" ]; then
  run g1-moves-dance g1-moves-dance-robot
  run g1-moves-dance g1-moves-dance-robot-10s
else
  echo "judge-trackers: $motions is missing: the dance benchmarks are skipped" >&2
fi

"$python" - "$out" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = []
metrics = [("mjlab_success", "", 3), ("success", "", 3), ("mjlab_failure_time_s", "s", 2),
           ("failure_time_s", "s", 2), ("mpkpe", "m", 4), ("r_mpkpe", "m", 4),
           ("joint_vel_error", "rad/s", 3), ("ee_pos_error", "m", 4), ("ee_ori_error", "rad", 3),
           ("emd", "rad", 3), ("mpjpe_g", "mm", 1), ("mpjpe_rr", "mm", 1)]
header = ["tracker on benchmark", "episodes", "scored", "fell", "failed unscored"] + [
    f"{m} ({u})" if u else m for m, u, _ in metrics]
lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
for f in sorted(out.glob("*.report.json")):
    r = json.loads(f.read_text())
    eps = r["episodes"]
    scored = [e for e in eps if e["status"] in ("completed", "fell")]
    fell = sum(e["status"] == "fell" for e in eps)
    cells = [f.name.replace(".report.json", ""), str(len(eps)), str(len(scored)), str(fell), str(len(eps) - len(scored))]
    for m, _, d in metrics:
        vals = [e["metrics"][m] for e in scored if m in e["metrics"]]
        if m.endswith("success"):
            cells.append(f"{sum(vals) / len(eps):.{d}f}" if eps else "-")   # over all episodes
        else:
            cells.append(f"{sum(vals) / len(vals):.{d}f}" if vals else "-")
    lines.append("| " + " | ".join(cells) + " |")
table = "\n".join(lines)
(out / "table.md").write_text(table + "\n\nSuccess rates are over all episodes (an unscored failure is no success); "
                              "every other metric is a mean over the scored episodes.\n")
print(table)
EOF
