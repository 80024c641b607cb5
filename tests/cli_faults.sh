#!/usr/bin/env bash
# `replicator train --faults` and $RP_FAULTS end to end (docs/faults.md), on threads:
#  1. a bad spec is refused before anything runs (exit 2), naming the fault and its bad token;
#     a bad $RP_FAULTS fails the run with that message instead of being ignored;
#  2. worker 1 killed at its run 4 (the trainer's third step): the run fails within the timeout
#     and a margin, the error names replica 1 as the one that did not arrive, the log names the
#     injected fault, and every worker leaves its flight recorder in the run directory;
#  3. a seeded random delay injects the same faults into two runs (the log lines), another seed
#     others, and the runs still finish;
#  4. `replicator info` shows $RP_FAULTS with the rest of the environment.
# Usage: cli_faults.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
common=(train mlp --data "$data" --limit 256 --batch 32 --replicas 2 --threads 2 --no-checkpoint)
fail() { echo "FAIL: $*"; exit 1; }

# 1. Bad specs.
set +e
msg=$("$bin" "${common[@]}" --out "$dir/bad" --faults 'kill:worker=1,cal=3' 2>&1); rc=$?
set -e
[ $rc -eq 2 ] || fail "a bad --faults gave exit $rc: $msg"
grep -q "fault 'kill:worker=1,cal=3': unknown key 'cal'" <<< "$msg" || fail "the error does not name 'cal': $msg"
[ ! -e "$dir/bad" ] || fail "a bad --faults still made the run directory"
set +e
msg=$(RP_FAULTS='delay:worker=0,run=2' "$bin" "${common[@]}" --out "$dir/badenv" 2>&1); rc=$?
set -e
[ $rc -ne 0 ] || fail "a bad RP_FAULTS was ignored: $msg"
grep -q "RP_FAULTS: fault 'delay:worker=0,run=2': a delay needs ms=" <<< "$msg" \
    || fail "a bad RP_FAULTS is not reported: $msg"
echo "ok: bad specs are refused naming the token (--faults: exit 2; RP_FAULTS: the run fails)"

# 2. A kill: run 1 builds, runs 2, 3, 4 are steps 1, 2, 3.
t0=$(date +%s%N)
set +e
msg=$("$bin" "${common[@]}" --epochs 1 --comm-timeout 2 --out "$dir/kill" \
    --faults 'kill:worker=1,run=4' 2>&1); rc=$?
set -e
took=$((($(date +%s%N) - t0) / 1000000)) # ms
[ $rc -ne 0 ] || fail "the run with a dead worker succeeded: $msg"
[ "$took" -lt 20000 ] || fail "the run took ${took} ms to fail with a 2 s timeout"
grep -q "fault injected: kill worker 1 at call [0-9]* (run 4, call 0 of the run)" <<< "$msg" \
    || fail "the log does not name the injected kill: $msg"
grep -q "timed out after 2s .*replica 1 did not arrive" <<< "$msg" \
    || fail "the error does not name replica 1 as the one missing: $msg"
grep -q "step 2/8" <<< "$msg" && ! grep -q "step 3/8" <<< "$msg" \
    || fail "the run did not stop after step 2: $msg"
for w in 0 1; do
    [ -s "$dir/kill/flight-$w.txt" ] || fail "worker $w left no flight-$w.txt"
done
grep -q "killed by an injected fault" "$dir/kill/flight-1.txt" || fail "flight-1.txt does not say the worker was killed"
echo "ok: a worker killed at run 4 fails the run in ${took} ms, naming it; flight recorders written"

# 3. Seeded random delays: the same seed, the same faults (worker and call), in every run.
faults_of() {
    RP_LOG_LEVEL=warn "$bin" "${common[@]}" --epochs 1 --max-steps 6 --out "$dir/$1" \
        --faults "$2" 2>&1 | sed -n 's/.*fault injected: delay 1 ms of \(worker [0-9]* at call [0-9]*\).*/\1/p' | sort
}
a=$(faults_of r1 'seed=5;delay:worker=any,p=0.2,ms=1')
b=$(faults_of r2 'seed=5;delay:worker=any,p=0.2,ms=1')
c=$(faults_of r3 'seed=6;delay:worker=any,p=0.2,ms=1')
[ -n "$a" ] || fail "no delay was injected at p = 0.2"
[ "$a" = "$b" ] || fail "seed 5 gave different faults: '$a' and '$b'"
[ "$a" != "$c" ] || fail "seeds 5 and 6 gave the same faults: '$a'"
echo "ok: seed 5 injects the same $(wc -l <<< "$a") delays twice; seed 6 others"

# 4. info.
out=$(RP_FAULTS='kill:worker=3,call=9' "$bin" info) \
    && grep -q "RP_FAULTS=kill:worker=3,call=9" <<< "$out" \
    || fail "replicator info does not show RP_FAULTS"
echo "all fault injection checks passed"
