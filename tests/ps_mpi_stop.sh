#!/usr/bin/env bash
# A parameter server that stops responding: `mpirun -np 3 ps_stop_victim` runs
# 2 workers pushing and pulling with a 3 s timeout and 1 server (rank 2); once
# the workers are under way the server is stopped (SIGSTOP). Each worker must
# fail with RP_ERR_TIMEOUT naming "parameter server 0 (rank 2 on host H)"
# within the timeout and a margin, and its next call must fail at once with
# the same reason. The job (stopped rank included) is killed at the end.
# Usage: ps_mpi_stop.sh path/to/ps_stop_victim
set -euo pipefail
bin=$(realpath "$1")
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_mpirun
timeout_s=3
margin_s=5
host=$(hostname)

dir=$(mktemp -d)
log=$dir/job.log
job=""

# On any exit: no rank survives, the stopped one included (SIGCONT, then SIGKILL), each by its pid.
cleanup() {
    local f
    if [ -n "$job" ]; then
        kill -KILL "$job" 2> /dev/null || true
        wait "$job" 2> /dev/null || true
    fi
    for f in "$dir"/rank*.pid; do
        [ -f "$f" ] && kill_ours "$(cat "$f")"
    done
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
fail() { echo "FAIL: $*"; sed 's/^/  | /' "$log"; exit 1; }

"${mpi[@]}" -np 3 "$bin" "$dir" > "$log" 2>&1 &
job=$!
# Wait until both workers have made 20 steps (the server is serving).
for _ in $(seq 300); do
    s0=$(cat "$dir/rank0.steps" 2> /dev/null || echo 0)
    s1=$(cat "$dir/rank1.steps" 2> /dev/null || echo 0)
    [ "$s0" -ge 20 ] && [ "$s1" -ge 20 ] && [ -f "$dir/rank2.pid" ] && break
    kill -0 "$job" 2> /dev/null || fail "the job ended before the workers got going"
    sleep 0.1
done
[ "$s0" -ge 20 ] && [ "$s1" -ge 20 ] || fail "the workers made no 20 steps in 30 s ($s0, $s1)"
server=$(cat "$dir/rank2.pid")
ours "$server" || fail "no server process $server"
kill -STOP "$server"
t0=$(date +%s.%N)
for _ in $(seq $(((timeout_s + margin_s) * 10))); do
    [ -f "$dir/rank0.done" ] && [ -f "$dir/rank1.done" ] && break
    sleep 0.1
done
elapsed=$(echo "$(date +%s.%N) - $t0" | bc)
[ -f "$dir/rank0.done" ] && [ -f "$dir/rank1.done" ] \
    || fail "the workers did not report the stopped server within $((timeout_s + margin_s)) s"
for w in 0 1; do
    line=$(grep "^worker $w: error after" "$log" | head -1 || true)
    [ -n "$line" ] || fail "worker $w printed no error"
    echo "$line" | grep -q "parameter server 0 (rank 2 on host $host) did not answer a" \
        || fail "worker $w's error does not name parameter server 0, rank 2 and its host: $line"
    echo "$line" | grep -q "within $timeout_s s" || fail "worker $w's error does not give the timeout: $line"
    waited=$(echo "$line" | sed -n 's/.*error after \([0-9.]*\) s.*/\1/p')
    awk -v t="$waited" -v lo=$timeout_s -v hi=$((timeout_s + margin_s)) 'BEGIN { exit !(t >= lo - 0.1 && t <= hi) }' \
        || fail "worker $w failed after ${waited} s, not within [$timeout_s, $((timeout_s + margin_s))] s"
    next=$(grep "^worker $w: next call" "$log" | head -1 || true)
    echo "$next" | grep -Eq "after 0\.[0-9]+ s: TIMEOUT: .*broken by an earlier error: parameter server 0 \(rank 2" \
        || fail "worker $w's next call does not fail at once with the same reason: $next"
done
echo "ok: SIGSTOP of parameter server 0 (rank 2): both workers named it within ${elapsed} s:"
grep "^worker" "$log" | sed 's/^/  | /'
