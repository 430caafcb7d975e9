# Sourced by scripts/gpu-measure.sh and scripts/gpu-train.sh: one timed step of a detached GPU
# session. `step DIR NAME COMMAND...` runs COMMAND with its output in DIR/NAME.partial, renamed
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
