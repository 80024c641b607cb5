#!/usr/bin/env bash
# A replica that fails stops the others under MPI, where they take batches at their own pace:
# `mpirun stop_victim groups` (two sync groups of 2 ranks and a parameter server) and
# `stop_victim async` (2 async replicas and a server) train on batches that never run out, and
# the last replica rank fails its step at its third batch. Every replica rank must have failed
# within the 5 s timeout and a margin (they used to train on until the batches ran out: here,
# never), the failing rank with its own error, the others with an error that carries it (the
# servers answer every request after a failure report with it).
# Usage: mpi_stop.sh path/to/stop_victim
set -euo pipefail
bin=$(realpath "$1")
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_mpirun
deadline_s=20

dir=$(mktemp -d)
job=""
cleanup() {
    if [ -n "$job" ]; then
        pkill -KILL -P "$job" 2> /dev/null || true
        kill -KILL "$job" 2> /dev/null || true
        wait "$job" 2> /dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
fail() { echo "FAIL: $*"; cat "$dir"/*/rank*.txt "$dir"/*.log 2> /dev/null | sed 's/^/  | /'; exit 1; }

run() { # mode ranks: the job's replica lines, each rank's within the deadline
    local mode=$1 np=$2 replicas=$(($2 - 1)) r
    mkdir -p "$dir/$mode"
    "${mpi[@]}" -np "$np" "$bin" "$mode" "$dir/$mode" > "$dir/$mode.log" 2>&1 &
    job=$!
    for _ in $(seq $((deadline_s * 10))); do
        [ "$(find "$dir/$mode" -name 'rank*.txt' | wc -l)" -ge "$replicas" ] && break
        kill -0 "$job" 2> /dev/null || fail "$mode: the job ended before every replica said how"
        sleep 0.1
    done
    for r in $(seq 0 $((replicas - 1))); do
        [ -f "$dir/$mode/rank$r.txt" ] ||
            fail "$mode: rank $r had not stopped ${deadline_s} s after the start"
    done
    pkill -KILL -P "$job" 2> /dev/null || true
    kill -KILL "$job" 2> /dev/null || true
    wait "$job" 2> /dev/null || true
    job=""
    local last=$((replicas - 1))
    grep -q "^rank $last: failed after .*replica $last gave up" "$dir/$mode/rank$last.txt" ||
        fail "$mode: the failing rank's line: $(cat "$dir/$mode/rank$last.txt")"
    for r in $(seq 0 $((last - 1))); do
        grep -q "^rank $r: failed after .*replica $last gave up" "$dir/$mode/rank$r.txt" ||
            fail "$mode: rank $r did not fail naming replica $last: $(cat "$dir/$mode/rank$r.txt")"
    done
    echo "ok: $mode: every replica stopped once replica $last failed"
    cat "$dir/$mode"/rank*.txt | sed 's/^/  /'
}

run groups 5
run async 3
