#!/usr/bin/env bash
# Fetch MuJoCo 3.17.0's shared library and headers from the PyPI wheel into a repo-local,
# git-ignored folder (third_party/mujoco). Idempotent: returns at once when already present.
# The wheel is only unzipped; no Python environment is created.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/third_party/mujoco"
version=3.17.0
if [ -f "$dest/lib/libmujoco.so.$version" ] && [ -L "$dest/lib/libmujoco.so" ] && [ -f "$dest/include/mujoco/mujoco.h" ]; then
  exit 0
fi
echo "bootstrap: fetching MuJoCo $version from PyPI into $dest" >&2
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_28_x86_64 "mujoco==$version" -d "$tmp"
wheel=$(ls "$tmp"/mujoco-*.whl)
python3 - "$wheel" "$tmp/x" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for n in z.namelist():
        if n.startswith("mujoco/libmujoco.so") or n.startswith("mujoco/include/mujoco/"):
            z.extract(n, sys.argv[2])
PY
mkdir -p "$dest/lib" "$dest/include"
cp "$tmp/x/mujoco/libmujoco.so.$version" "$dest/lib/"
rm -rf "$dest/include/mujoco"
cp -r "$tmp/x/mujoco/include/mujoco" "$dest/include/"
ln -sf "libmujoco.so.$version" "$dest/lib/libmujoco.so"
echo "bootstrap: MuJoCo $version ready" >&2
