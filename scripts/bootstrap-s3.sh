#!/usr/bin/env bash
# An S3-compatible server for the tests of the object store and of server replicas: s3s-fs
# (the s3s project's S3 server over a local folder, Apache-2.0), built from crates.io into a
# repo-local, git-ignored folder (third_party/s3s). MinIO is not packaged in Debian or on the
# registries these machines reach. Idempotent: returns at once when already built.
#
# The tests start it themselves (ARENA_S3S_BIN, which `make test` sets):
#   s3s-fs --host 127.0.0.1 --port PORT --access-key K --secret-key S ROOT
# A bucket is a folder under ROOT.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/third_party/s3s"
version=0.14.1   # the newest that builds with this machine's Rust (1.95); 0.17 needs 1.96
if [ -x "$dest/bin/s3s-fs" ] && [ "$(cat "$dest/.version" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
echo "bootstrap: building s3s-fs $version into $dest (about 2 minutes)" >&2
# Its own target folder: the workspace's build cache is not disturbed.
CARGO_TARGET_DIR="$root/target/s3s-build" cargo install --quiet --locked "s3s-fs@$version" \
  --features binary --root "$dest"
echo "$version" > "$dest/.version"
echo "bootstrap: s3s-fs ready ($dest/bin/s3s-fs)" >&2
