#!/usr/bin/env bash
# End-to-end checks of `mpirun replicator train` when a rank fails, on a small
# subset of Fashion-MNIST, with a 10 s collective timeout (--comm-timeout):
#  1. rank 1 killed (SIGKILL) by the fault schedule (--faults, docs/faults.md)
#     at the second step after the first epoch's checkpoint: the job ends,
#     non-zero, within the timeout and a margin; the output names rank 1; the
#     checkpoint still loads and is the one written at an epoch's end;
#  2. SIGSTOP of rank 1: rank 0 times out, reports the collective with its own
#     rank and host and rank 1's, and ends the whole job (MPI_Abort) instead of
#     waiting for the stopped rank in MPI_Finalize; the checkpoint is intact as
#     in 1; rank 0 leaves its flight recorder (flight-0.txt, with the call that
#     timed out) in the run directory and logs its last calls;
#  3. async: SIGSTOP of the parameter server rank: the replicas report a
#     timeout naming the server and its rank, and the job ends;
#  4. a run on 4 ranks stopped by --max-steps resumes on 2 ranks at the same
#     sample: it reports the position, its first step's loss equals an
#     uninterrupted 4-replica run's loss at that step (up to rounding: the
#     reductions differ), and it finishes the run.
# Usage: mpi_failure.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
need_mpirun

timeout_s=10        # the collective timeout the ranks run with
deadline_s=40       # a failed job must have ended this long after the failure
host=$(hostname)
common=(--data "$data" --limit 256 --batch 32 --threads 1 --quiet --comm-timeout $timeout_s)

dir=$(mktemp -d)
job=""              # the running mpirun
ranks=()            # every rank process seen, so that none outlives the test

# descendants PID: the processes below PID (its children, theirs, ...).
descendants() {
    ps -e -o pid=,ppid= | awk -v top="$1" '
        { parent[$1] = $2 }
        END { for (p in parent) for (q = p; q in parent && q > 1; q = parent[q]) if (parent[q] == top) { print p; break } }'
}

# rank_pid MPIRUN RANK: the pid of the replicator process of MPI rank RANK under MPIRUN (its
# child, or a grandchild where a daemon sits in between), or nothing if it is not running yet.
rank_pid() {
    local p
    for p in $(descendants "$1"); do
        ours "$p" || continue
        tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$p" && return
    done
}

# On any exit: no mpirun and no rank of this test survives it, stopped ones included (SIGCONT,
# then SIGKILL). The ranks sit in process groups of their own (OpenMPI's launcher) and mpirun in
# this script's, so each is killed by its pid, once checked to be still ours.
cleanup() {
    local p
    if [ -n "$job" ] && kill -0 "$job" 2> /dev/null; then
        for p in $(descendants "$job"); do ours "$p" && ranks+=("$p"); done
        kill -KILL "$job" 2> /dev/null || true
    fi
    kill_ours "${ranks[@]}"
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
fail() { echo "FAIL: $*"; [ -n "${log:-}" ] && [ -f "$log" ] && sed 's/^/  | /' "$log"; exit 1; }

# start_job OUT_DIR ARGS...: a long training on $np ranks (default 2) in the background, its
# output in $log; returns once rank 0 has written the first epoch's checkpoint, with $job,
# $rank0 and $victim_pid (the pid of rank $victim, default 1) set.
start_job() {
    local out=$1 n=${np:-2} v=${victim:-1}
    shift
    log=$dir/$(basename "$out").log
    "${mpi[@]}" -np "$n" "$bin" train resnet20 "${common[@]}" "$@" --out "$out" > "$log" 2>&1 &
    job=$!
    rank0="" victim_pid=""
    for _ in $(seq 600); do
        [ -z "$rank0" ] && rank0=$(rank_pid "$job" 0) && [ -n "$rank0" ] && ranks+=("$rank0")
        [ -z "$victim_pid" ] && victim_pid=$(rank_pid "$job" "$v") && [ -n "$victim_pid" ] && ranks+=("$victim_pid")
        [ -n "$victim_pid" ] && [ -f "$out/checkpoint.safetensors" ] && return
        kill -0 "$job" 2> /dev/null || fail "the job ended before its first checkpoint"
        sleep 0.2
    done
    fail "no rank $v process or no checkpoint after 120 s (rank $v: '${victim_pid}')"
}

# finish_job: waits, bounded, for the failed job; sets $rc and $elapsed (seconds since $t0).
finish_job() {
    for _ in $(seq $((deadline_s * 10))); do
        kill -0 "$job" 2> /dev/null || break
        sleep 0.1
    done
    elapsed=$(($(date +%s) - t0))
    kill -0 "$job" 2> /dev/null && fail "the job was still running ${elapsed}s after the failure"
    rc=0
    wait "$job" || rc=$?
    job=""
    # The ranks go with mpirun; one being killed may take a moment to exit (a zombie has).
    for p in "${ranks[@]}"; do
        for _ in $(seq 50); do
            ours "$p" || continue 2
            sleep 0.1
        done
        fail "rank process $p outlived the job by 5 s (state $(ps -o stat= -p "$p"))"
    done
    ranks=()
}

# checkpoint_intact DIR: the checkpoint loads in full (parameters, optimizer state, loader
# position: a resume that stops before its first step, saving nothing) and was written at the
# end of an epoch, not by a half-finished step after the failure. Sets $at to the position.
checkpoint_intact() {
    local out
    out=$("$bin" train --resume "$1" --replicas 2 --threads 2 --max-steps 1 --no-checkpoint 2>&1) \
        || fail "the checkpoint left by the failed job does not load: $out"
    at=$(echo "$out" | sed -n 's/.*resumed from .* at \(epoch [0-9]* step [0-9]*\)$/\1/p')
    [[ "$at" =~ ^epoch\ ([2-9]|[1-9][0-9]+)\ step\ 0$ ]] || fail "the checkpoint is not at the end of an epoch ('$at'): $out"
}

# 1. A dead rank: the fault schedule kills rank 1 at its run 12 - the second step of epoch 2, after
# the build (run 1), epoch 1's 8 steps, its evaluation and one step. Rank 1 reaches it only after
# rank 0 met it in run 11, that is after rank 0 saved the first epoch's checkpoint (run 11 itself
# could find rank 0 still writing it). The same step every time, where a SIGKILL sent by this
# script once the checkpoint appeared landed wherever the job had got to. mpirun sees rank 1 die
# and ends the job at once.
log=$dir/kill.log
"${mpi[@]}" -np 2 "$bin" train resnet20 "${common[@]}" --epochs 50 --out "$dir/kill" \
    --faults kill:worker=1,run=12 > "$log" 2>&1 &
job=$!
for _ in $(seq 600); do
    for r in 0 1; do
        p=$(rank_pid "$job" $r || true)
        if [ -n "$p" ] && [[ " ${ranks[*]} " != *" $p "* ]]; then ranks+=("$p"); fi
    done
    grep -q "fault injected: kill worker 1 " "$log" && break
    kill -0 "$job" 2> /dev/null || break
    sleep 0.2
done
t0=$(date +%s)
grep -Eq "fault injected: kill worker 1 at call [0-9]+ \(run 12, call 0 of the run\)" "$log" \
    || fail "the fault schedule did not kill rank 1 at its run 12 within 120 s"
finish_job
[ $rc -ne 0 ] || fail "rank 1 killed: the job exited 0"
grep -Eq "rank 1 with PID [0-9]+ on node $host exited on signal 9|rank 1 \($host\)" "$log" \
    || fail "rank 1 killed: the output does not name rank 1"
checkpoint_intact "$dir/kill"
echo "ok: rank 1 killed by the fault schedule ends the job in ${elapsed}s (exit $rc); the checkpoint loads ($at):"
grep -E "fault injected|exited on signal|error:" "$log" | sed 's/^/  | /'

# 2. SIGSTOP: nothing tells mpirun; rank 0 times out, reports it and aborts the job.
start_job "$dir/stop" --epochs 50
kill -STOP "$victim_pid"
t0=$(date +%s)
finish_job
[ "$elapsed" -ge $((timeout_s - 1)) ] || fail "SIGSTOP of rank 1: the job ended after ${elapsed}s, before the timeout"
msg=$(grep "replica 0: .*timed out after ${timeout_s}s .* on rank 0 ($host)" "$log" | head -1 || true)
[ -n "$msg" ] || fail "SIGSTOP of rank 1: rank 0 did not report the timeout with its rank and host"
# Stopped before its call (in the exchange of calls) or during the data (after it).
echo "$msg" | grep -Eq ": rank 1 \($host\) (did not arrive|stopped or died after the call was agreed)" \
    || fail "rank 0's timeout does not name rank 1 and its host: $msg"
# mpirun returns the code of the abort (its banner saying so is not always printed).
[ $rc -eq 1 ] || fail "SIGSTOP of rank 1: exit code $rc, expected 1 from rank 0's MPI_Abort"
checkpoint_intact "$dir/stop"
# Rank 0 left its flight recorder in the run directory before the abort: the call it timed out in.
[ -s "$dir/stop/flight-0.txt" ] || fail "SIGSTOP of rank 1: rank 0 wrote no $dir/stop/flight-0.txt"
grep -Eq "^ +[0-9]+  TIMEOUT " "$dir/stop/flight-0.txt" \
    || fail "SIGSTOP of rank 1: flight-0.txt has no call that timed out: $(cat "$dir/stop/flight-0.txt")"
grep -q "flight recorder: worker 0 .*TIMEOUT.*; all in $dir/stop/flight-0.txt" "$log" \
    || fail "SIGSTOP of rank 1: rank 0 did not log its last calls"
echo "ok: SIGSTOP of rank 1 ends the job in ${elapsed}s (exit $rc); the checkpoint loads ($at):"
grep -E "error:|MPI_ABORT|ORTE_ERROR" "$log" | sed 's/^/  | /'

# 3. Async: SIGSTOP of the parameter server (rank 2 of 3; ranks 0 and 1 train). The replicas'
# push or pull times out naming the server and its rank, and the job ends.
np=3 victim=2 start_job "$dir/ps" --epochs 50 --regime async --ps 1
kill -STOP "$victim_pid"
t0=$(date +%s)
finish_job
[ "$elapsed" -ge $((timeout_s - 1)) ] || fail "SIGSTOP of the server: the job ended after ${elapsed}s, before the timeout"
# The stop lands in a step (a push or pull) or between runs (the join or leave of a phase): any
# of them must name the server by index, rank and host.
msg=$(grep -E "parameter server 0 \(rank 2 on host $host\) did not answer a (push|pull|join|leave|claim)" "$log" | head -1 || true)
[ -n "$msg" ] || fail "SIGSTOP of the server: no replica named parameter server 0 on rank 2"
[ $rc -eq 1 ] || fail "SIGSTOP of the server: exit code $rc, expected 1"
checkpoint_intact "$dir/ps"
echo "ok: SIGSTOP of the parameter server ends the job in ${elapsed}s (exit $rc); the checkpoint loads ($at):"
grep -E "error:" "$log" | sed 's/^/  | /'

# 4. 4 ranks -> 2 ranks. The loader's order does not depend on the replica count, so the resumed
# run's first step (global step 11: epoch 2, step 3 of 8) sees the same samples as step 11 of an
# uninterrupted 4-replica run (on threads), from the same parameters: the same loss up to the
# rounding of different reduction trees. A wrong position gives other samples and another loss.
log=$dir/resume.log
export RP_LOG_LEVEL=debug
loud=(--data "$data" --limit 256 --batch 32 --threads 1 --epochs 2)   # "stopped at" needs no --quiet
"$bin" train resnet20 "${loud[@]}" --replicas 4 --threads 4 --max-steps 12 --no-checkpoint \
    --out "$dir/ref" > "$log" 2>&1 || fail "the reference run failed"
ref=$(sed -n 's/.*DEBUG step 11 loss \([0-9.]*\).*/\1/p' "$log" | head -1)
[ -n "$ref" ] || fail "the reference run logged no loss for step 11"
"${mpi[@]}" -x RP_LOG_LEVEL -np 4 "$bin" train resnet20 "${loud[@]}" --max-steps 11 \
    --out "$dir/four" > "$log" 2>&1 || fail "the 4-rank run failed"
grep -q "stopped at epoch 2 step 3 (--max-steps)" "$log" || fail "the 4-rank run did not stop at epoch 2 step 3"
"${mpi[@]}" -x RP_LOG_LEVEL -np 2 "$bin" train --resume "$dir/four" --threads 1 > "$log" 2>&1 \
    || fail "resuming the 4-rank run on 2 ranks failed"
grep -q "resumed from $dir/four at epoch 2 step 3$" "$log" || fail "the resumed run does not start at epoch 2 step 3"
grep -Eq "2 replicas .*\(mpi," "$log" || fail "the resumed run is not on 2 MPI ranks"
grep -q "after 2 epochs (5 steps this run)" "$log" || fail "the resumed run did not finish with 5 steps"
got=$(sed -n 's/.*DEBUG step 11 loss \([0-9.]*\).*/\1/p' "$log" | head -1)
[ -n "$got" ] || fail "the resumed run logged no loss for step 11"
awk -v a="$got" -v b="$ref" 'BEGIN { d = a - b; exit !(d < 1e-4 && d > -1e-4) }' \
    || fail "step 11 on 2 ranks after 4 has loss $got, the uninterrupted run $ref: not the same samples"
unset RP_LOG_LEVEL
log=""
done_msg=$("$bin" train --resume "$dir/four" --threads 1 2>&1) || fail "the finished run does not load: $done_msg"
echo "$done_msg" | grep -q "already completed 2 epochs" || fail "the resumed run's checkpoint is not at the end: $done_msg"
echo "ok: 4 ranks stopped at step 11 resume on 2 at epoch 2 step 3 (step 11 loss $got, uninterrupted $ref) and finish"
echo "all mpi failure checks passed"
