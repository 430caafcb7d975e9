#!/usr/bin/env bash
# Unpack mjlab 1.6.0's wheel (pure Python, from PyPI, checked by its SHA-256) into a repo-local,
# git-ignored folder, third_party/mjlab-1.6.0, for the test that runs mjlab's own tracking
# metrics and terminations on the arena's recorded episodes (runner scoring vs mjlab,
# docs/metrics.md). Nothing imports mjlab as a package: the oracle loads the few files it needs
# (they need only torch and numpy), so mjlab's dependencies (MuJoCo Warp, ...) are not installed.
# Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/third_party/mjlab-1.6.0"
stamp="$dest/.installed"
wheel_sha256=03d003854e2f44c48330c6dcf4c2253ff7641bb569747846825a21b9efa8540b
if [ -f "$stamp" ]; then
  exit 0
fi
echo "bootstrap: unpacking mjlab 1.6.0 into $dest (a 14 MB download)" >&2
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
  --dest "$tmp" mjlab==1.6.0
wheel="$tmp/mjlab-1.6.0-py3-none-any.whl"
if [ ! -f "$wheel" ]; then
  echo "bootstrap: pip did not fetch mjlab-1.6.0-py3-none-any.whl (got: $(ls "$tmp"))" >&2
  exit 1
fi
got="$(sha256sum "$wheel" | cut -d' ' -f1)"
if [ "$got" != "$wheel_sha256" ]; then
  echo "bootstrap: mjlab wheel SHA-256 is $got, expected $wheel_sha256" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest"
python3 -m zipfile -e "$wheel" "$dest"
touch "$stamp"
echo "bootstrap: mjlab 1.6.0 sources ready" >&2
