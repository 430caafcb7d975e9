#!/usr/bin/env bash
# Install PyTorch 2.11.0 (the libtorch that tch 0.24 links, and the Python torch of the BFM-Zero
# test oracle) into a repo-local, git-ignored folder: third_party/pytorch. Idempotent.
# The full wheel set (with its CUDA libraries, about 2.7 GB to download, 4.6 GB on disk) is
# needed because `import torch` loads them; libtorch_cpu.so itself runs without a GPU. The same
# binary links against the GPU machine's torch 2.11.0 (shared/notes/DEPENDENCIES.md).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/third_party/pytorch"
stamp="$dest/.installed-2.11.0"
if [ -f "$stamp" ]; then
  exit 0
fi
echo "bootstrap: installing torch 2.11.0 into $dest (a few minutes, ~2.7 GB download)" >&2
rm -rf "$dest"
python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location --root-user-action=ignore \
  --target "$dest" torch==2.11.0 safetensors==0.7.0
touch "$stamp"
echo "bootstrap: torch ready" >&2
