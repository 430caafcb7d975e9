#!/bin/sh
# Entry point of the example agent image: a team token from ARENA_TOKEN, or a new team created
# with ARENA_ADMIN_TOKEN; then one scored submission of ARENA_BENCHMARK with the replay agent.
set -eu
if [ -z "${ARENA_TOKEN:-}" ]; then
    : "${ARENA_ADMIN_TOKEN:?set ARENA_TOKEN (a team token) or ARENA_ADMIN_TOKEN (to create a team)}"
    ARENA_TOKEN=$(python3 - <<'PY'
import json, os, socket, urllib.request
req = urllib.request.Request(
    os.environ["ARENA_SERVER"] + "/api/v1/teams",
    data=json.dumps({"name": "example-" + socket.gethostname()}).encode(),
    headers={"Authorization": "Bearer " + os.environ["ARENA_ADMIN_TOKEN"],
             "Content-Type": "application/json"},
)
print(json.load(urllib.request.urlopen(req))["token"])
PY
)
fi
exec arena-agent replay_agent.py:ReplayAgent --server "$ARENA_SERVER" --token "$ARENA_TOKEN" \
    --benchmark "$ARENA_BENCHMARK" --agent-name example-replay
