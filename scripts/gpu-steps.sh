# Sourced by the GPU machine's scripts (gpu-measure.sh, gpu-train.sh, gpu-train-ppo.sh): the
# steps they share. `carried` finds a carried file, `install_python_packages` installs
# warp-lang, MuJoCo and MJX from the carried parts, `step` is one timed step. `step DIR NAME COMMAND...` runs COMMAND with its output in DIR/NAME.partial, renamed
# to DIR/NAME.txt when it ends (so a poll sees only finished results), logs start, exit status
# and duration on stdout, and returns the command's status.
step() {
    local dir=$1 name=$2 start=$SECONDS
    shift 2
    echo "$(date -u +%T) start $name: $*"
    "$@" > "$dir/$name.partial" 2>&1
    local status=$?
    mv "$dir/$name.partial" "$dir/$name.txt"
    echo "$(date -u +%T) end $name: exit $status after $((SECONDS - start)) s"
    return $status
}

# `carried NAME`: the path of a file a device call carried, in CARRY_DIR (default
# /tmp/arena-carry, where a call copies what the next calls need) or still in the folder a call
# carried it in (.warp1 .warp2 .gpu .gpu-ppo).
carried() {
    local f
    for f in "${CARRY_DIR:-/tmp/arena-carry}/$1" ".warp1/$1" ".warp2/$1" ".gpu/$1" ".gpu-ppo/$1"; do
        if [ -f "$f" ]; then
            echo "$f"
            return 0
        fi
    done
    echo "missing carried file $1 (in ${CARRY_DIR:-/tmp/arena-carry} or .warp1 .warp2 .gpu .gpu-ppo)" >&2
    return 1
}

# `install_python_packages SITE PYTHON`: warp-lang (joined from its two carried parts) and the
# wheels of .whl/ into SITE, once per machine; nothing when SITE is empty (PYTHON's own
# packages are used, e.g. a toy run on a development machine).
install_python_packages() {
    local site=$1 python=$2 part0 part1
    if [ -z "$site" ] || [ -f "$site/.installed" ]; then
        return 0
    fi
    mkdir -p "$site"
    part0=$(carried warp.tar.xz.part0) && part1=$(carried warp.tar.xz.part1) || return 1
    cat "$part0" "$part1" | xz -d | tar xf - -C "$site" || return 1
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl || return 1
    touch "$site/.installed"
}

# `timed DIR NEED NAME COMMAND...`: `step DIR NAME COMMAND...` when at least NEED seconds of
# the script's budget are left (the caller's `budget`, counted from its `began`, both in
# seconds of $SECONDS), with what is left as the command's time limit; else a note in
# DIR/NAME.txt that it was skipped.
timed() {
    local dir=$1 need=$2 name=$3 left=$((budget - (SECONDS - began)))
    shift 3
    if [ "$left" -lt "$need" ]; then
        echo "skipped: $left s of the budget left, $name needs about $need" > "$dir/$name.txt"
        echo "$(date -u +%T) skip $name ($left s left)"
        return 0
    fi
    step "$dir" "$name" timeout "$left" "$@"
}
