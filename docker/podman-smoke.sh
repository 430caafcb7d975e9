#!/usr/bin/env bash
# What can be done here without a Docker engine: build the server image's runtime stage with
# podman on a Debian bookworm base made by debootstrap from Debian's packages, with the `arena`
# binary built in this checkout in place of the image's build stage (the rust:1.95 build image
# cannot be fetched here), then start the image and ask the server for its health and
# benchmarks. Needs root, podman and debootstrap (installed with apt-get when missing).
#   cargo build --release -p arena-server --bin arena && bash docker/podman-smoke.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$root/target/podman"
base=localhost/debian-bookworm-debootstrap
image=localhost/mimicarena-server-runtime
port="${ARENA_PODMAN_PORT:-18080}"
mkdir -p "$work"
for tool in podman debootstrap; do
    command -v "$tool" >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool" >/dev/null
done

if ! podman image exists "$base"; then
    echo "podman-smoke: debootstrap bookworm (minbase) into $work/rootfs"
    [[ -x "$work/rootfs/bin/sh" ]] || debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log"
    tar -C "$work/rootfs" -c . | podman import - "$base" >/dev/null
fi

echo "podman-smoke: the install layout of docs/server.md from this checkout"
ctx="$work/context"
rm -rf "$ctx" && mkdir -p "$ctx/opt/bin" "$ctx/opt/lib" "$ctx/opt/share/mimicarena/benchmarks" \
    "$ctx/opt/share/mimicarena/web/node_modules"
cp "$root/target/release/arena" "$ctx/opt/bin/"
cp -a "$root"/third_party/mujoco/lib/libmujoco.so* "$ctx/opt/lib/"
cp "$root"/benchmarks/*.toml "$ctx/opt/share/mimicarena/benchmarks/"
cp -r "$root/web/index.html" "$root/web/static" "$ctx/opt/share/mimicarena/web/"
cp -r "$root/web/node_modules/three" "$ctx/opt/share/mimicarena/web/node_modules/"

# The runtime stage of server.Dockerfile, as written, on the debootstrap base and this context.
awk '/^FROM debian:bookworm-slim AS runtime/{on=1} on' "$root/docker/server.Dockerfile" \
    | sed -e "s|^FROM debian:bookworm-slim AS runtime|FROM $base|" \
          -e "s|^COPY --from=build /opt/mimicarena /opt/mimicarena|COPY opt /opt/mimicarena|" \
    >"$ctx/Dockerfile"
echo "podman-smoke: podman build"
podman build --format docker --network host --isolation chroot -q -t "$image" "$ctx"

# Start the image. Where the sandbox refuses the OCI runtime's setrlimit (crun: "setrlimit
# RLIMIT_NOFILE: Operation not permitted"), run the image's own file system instead: mounted
# read-only by podman, chrooted as the image's user 10001 with /proc, /dev and a writable home
# bound in, which is what a container gives it.
name="arena-smoke-$$"
admin="podman-smoke-admin"
env=(ARENA_BIND="127.0.0.1:$port" ARENA_ADMIN_TOKEN="$admin")
cleanup() { :; }
trap 'cleanup' EXIT
if podman run -d --rm --name "$name" --network host --ulimit host \
    -e "${env[0]}" -e "${env[1]}" "$image" >"$work/podman-run.log" 2>&1; then
    how="podman run"
    cleanup() { podman rm -f "$name" >/dev/null 2>&1 || true; }
else
    how="chroot into the image (podman run refused: $(tail -n 1 "$work/podman-run.log"))"
    mnt="$(podman image mount "$image")"
    home="$work/home"
    rm -rf "$home" && mkdir -p "$home" && chown 10001:10001 "$home"
    mount --bind /proc "$mnt/proc"
    mount --bind /dev "$mnt/dev"
    mount --bind "$home" "$mnt/var/lib/arena"
    chroot --userspec=10001:10001 "$mnt" /usr/bin/env -i PATH=/opt/mimicarena/bin:/usr/bin:/bin \
        HOME=/var/lib/arena ARENA_DATA_DIR=/var/lib/arena/data "${env[@]}" \
        sh -c 'cd /var/lib/arena && exec arena serve' >"$work/server.log" 2>&1 &
    server=$!
    cleanup() {
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
        umount "$mnt/var/lib/arena" "$mnt/proc" "$mnt/dev" 2>/dev/null || true
        podman image unmount "$image" >/dev/null 2>&1 || true
    }
fi
echo "podman-smoke: started by $how"
for _ in $(seq 1 50); do
    curl -fsS "http://127.0.0.1:$port/api/v1/health" >/dev/null 2>&1 && break
    sleep 0.2
done
echo "podman-smoke: health: $(curl -fsS "http://127.0.0.1:$port/api/v1/health")"
echo "podman-smoke: benchmarks: $(curl -fsS "http://127.0.0.1:$port/api/v1/benchmarks" | head -c 120)…"
curl -fsS "http://127.0.0.1:$port/" | grep -q "<html" && echo "podman-smoke: web page served from share/mimicarena/web"
# A scored submission from outside the image, as a participant would make one.
token="$("$root/target/release/arena" admin teams create smoke --server "http://127.0.0.1:$port" \
    --admin-token "$admin" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])')"
(cd "$root" && cargo build --release --quiet -p arena-sdk --example replay)
"$root/target/release/examples/replay" --server "ws://127.0.0.1:$port/api/v1/agent" --token "$token" | tail -n 3
echo "podman-smoke: leaderboard: $(curl -fsS "http://127.0.0.1:$port/api/v1/leaderboards/g1-smoke" | head -c 160)…"
echo "podman-smoke: image size: $(podman image inspect "$image" --format '{{.Size}}') bytes"
echo "podman-smoke: ok"
