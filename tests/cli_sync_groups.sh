#!/usr/bin/env bash
# `replicator train --sync-groups G` end to end, on a small subset of Fashion-MNIST:
#  1. 4 replicas in 2 sync groups of 2: the header names the groups, the MLP trains (far above
#     chance), and a run stopped by --max-steps resumes to the end of the epoch;
#  2. ResNet-20 (batch norm within each group) trains the same way and resumes;
#  3. --sync-groups 1 is sync training: the checkpoint's tensors equal a plain sync run's, bit for
#     bit;
#  4. a G that does not divide the replicas, and G with --regime async, --zero or
#     --model-parallel, are refused (exit 2, named);
#  5. a replica killed in one group (--faults) fails the run within the timeout, naming it;
#  6. under mpirun: 4 replica ranks in 2 groups and a server rank - the header, the MLP trains,
#     the servers count one step per group step (a run stopped at step 5 resumes on threads with
#     27 to go, as in 1), ResNet-20's batch norm within each group over MPI, and a G that does
#     not divide the ranks less the servers is refused by name.
# Usage: cli_sync_groups.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
fail() { echo "FAIL: $*"; exit 1; }
# (--threads-per-replica 1 everywhere: the kernels' team size changes the last bits.)
common=(--data "$data" --limit 1024 --batch 64 --threads 2 --threads-per-replica 1 --epochs 2)

# data_of FILE: the tensor bytes of a checkpoint, without its JSON header (the configuration).
data_of() {
    local n
    n=$(od -An -t u8 -N8 "$1" | tr -d ' ')
    tail -c +$((9 + n)) "$1"
}

# 1. The MLP in 2 groups of 2.
out=$("$bin" train mlp "${common[@]}" --lr 0.02 --replicas 4 --sync-groups 2 --out "$dir/m" 2>&1) \
    || fail "mlp --sync-groups 2: $out"
grep -q "4 replicas in 2 sync groups of 2 x 1 threads (threads, batch norm within a group; groups async: 1 parameter-server shard, staleness unbounded)" <<< "$out" \
    || fail "the header does not name the sync groups: $out"
acc=$(sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p' <<< "$out")
awk -v a="$acc" 'BEGIN { exit !(a > 35) }' || fail "mlp in sync groups reached only $acc%: $out"
"$bin" train mlp "${common[@]}" --lr 0.02 --replicas 4 --sync-groups 2 --max-steps 5 --quiet \
    --out "$dir/m5" > /dev/null 2>&1 || fail "mlp --sync-groups 2 --max-steps 5 failed"
out=$("$bin" train --resume "$dir/m5" 2>&1) || fail "resuming the sync-group run: $out"
grep -q "after 2 epochs (27 steps this run)" <<< "$out" || fail "the resumed run: $out"
echo "ok: mlp in 2 sync groups of 2 reaches $acc% and resumes at its step"

# 2. ResNet-20: batch norm inside each group, checkpoint and resume.
res=(--data "$data" --limit 256 --batch 32 --threads 2 --threads-per-replica 1 --epochs 1 --quiet)
"$bin" train resnet20 "${res[@]}" --replicas 4 --sync-groups 2 --max-steps 3 --out "$dir/r" \
    > /dev/null 2>&1 || fail "resnet20 --sync-groups 2 failed"
out=$("$bin" train --resume "$dir/r" 2>&1) || fail "resuming resnet20 in sync groups: $out"
grep -q "after 1 epochs (5 steps this run)" <<< "$out" || fail "the resumed resnet20 run: $out"
echo "ok: resnet20 in 2 sync groups of 2 trains and resumes"

# 3. One group is sync training.
"$bin" train mlp "${common[@]}" --epochs 1 --replicas 2 --quiet --out "$dir/s" > /dev/null 2>&1
"$bin" train mlp "${common[@]}" --epochs 1 --replicas 2 --sync-groups 1 --quiet --out "$dir/g1" \
    > /dev/null 2>&1
cmp <(data_of "$dir/s/checkpoint.safetensors") <(data_of "$dir/g1/checkpoint.safetensors") \
    || fail "--sync-groups 1 differs from sync training"
echo "ok: --sync-groups 1 is bitwise sync training"

# 4. Refused, by name.
expect_refused() {
    local want=$1
    shift
    set +e
    msg=$("$bin" train mlp --data "$data" --limit 256 --out "$dir/bad" "$@" 2>&1)
    rc=$?
    set -e
    [ $rc -eq 2 ] || fail "$* gave exit $rc: $msg"
    grep -q -- "$want" <<< "$msg" || fail "$*: the message does not say '$want': $msg"
    [ ! -e "$dir/bad" ] || fail "$* still made the run directory"
}
expect_refused "--sync-groups 3 does not divide --replicas 4" --replicas 4 --sync-groups 3
expect_refused "does not combine with --regime async" --replicas 4 --sync-groups 2 --regime async
expect_refused "does not combine with --zero" --replicas 4 --sync-groups 2 --zero
expect_refused "does not split across 2 replicas (a sync group)" --replicas 4 --sync-groups 2 \
    --batch 63
expect_refused "does not combine with --model-parallel" --replicas 4 --sync-groups 2 \
    --model-parallel 2
echo "ok: bad --sync-groups are refused by name"

# 5. A replica killed in group 1: its group's peer times out naming it, within the timeout.
t0=$(date +%s%N)
set +e
msg=$("$bin" train mlp "${common[@]}" --replicas 4 --sync-groups 2 --comm-timeout 2 \
    --faults 'kill:worker=3,run=2,call=5' --out "$dir/kill" 2>&1)
rc=$?
set -e
took=$((($(date +%s%N) - t0) / 1000000)) # ms
[ $rc -ne 0 ] || fail "the run with a dead replica succeeded: $msg"
[ "$took" -lt 20000 ] || fail "the run took ${took} ms to fail with a 2 s timeout"
grep -q "replica 3 did not arrive" <<< "$msg" || fail "the error does not name replica 3: $msg"
echo "ok: a replica killed in one group fails the run in ${took} ms, naming it"

# 6. MPI: one replica per rank, the last --ps ranks serve.
need_mpirun # (exits here without mpirun: the checks above have passed)
out=$("${mpi[@]}" -np 5 "$bin" train mlp "${common[@]}" --lr 0.02 --sync-groups 2 --ps 1 \
    --out "$dir/mpi" 2>&1) || fail "mpirun -np 5 --sync-groups 2: $out"
grep -q "4 replicas in 2 sync groups of 2 (4 ranks x 1) x 1 threads (mpi, batch norm within a group; groups async: 1 parameter-server rank, staleness unbounded)" <<< "$out" \
    || fail "the MPI header does not name the sync groups: $out"
[ "$(grep -c "run directory" <<< "$out")" -eq 1 ] || fail "more than one rank printed the header: $out"
acc=$(sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p' <<< "$out")
awk -v a="$acc" 'BEGIN { exit !(a > 35) }' || fail "mlp in MPI sync groups reached only $acc%: $out"
"${mpi[@]}" -np 5 "$bin" train mlp "${common[@]}" --lr 0.02 --sync-groups 2 --ps 1 --max-steps 5 \
    --quiet --out "$dir/mpi5" > /dev/null 2>&1 || fail "mpirun --sync-groups 2 --max-steps 5 failed"
out=$("$bin" train --resume "$dir/mpi5" --threads 2 --replicas 4 2>&1) \
    || fail "resuming the MPI sync-group run on threads: $out"
grep -q "after 2 epochs (27 steps this run)" <<< "$out" || fail "the MPI run resumed on threads: $out"
echo "ok: mpirun, 2 sync groups of 2 ranks and a server rank: $acc%, and it resumes at its step"
"${mpi[@]}" -np 5 "$bin" train resnet20 "${res[@]}" --sync-groups 2 --ps 1 --max-steps 3 \
    --out "$dir/mpir" > /dev/null 2>&1 || fail "mpirun resnet20 --sync-groups 2 failed"
out=$("$bin" train --resume "$dir/mpir" --threads 2 --replicas 4 2>&1) \
    || fail "resuming the MPI resnet20 sync-group run: $out"
grep -q "after 1 epochs (5 steps this run)" <<< "$out" || fail "the resumed MPI resnet20 run: $out"
echo "ok: mpirun, resnet20 in 2 sync groups (batch norm within each over MPI) trains and resumes"
set +e
msg=$("${mpi[@]}" -np 4 "$bin" train mlp "${common[@]}" --sync-groups 2 --ps 1 --out "$dir/bad3" 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] || fail "3 replica ranks in 2 groups were not refused: $msg"
grep -q -- "--sync-groups 2 does not divide the 3 replicas (the ranks less --ps)" <<< "$msg" \
    || fail "the refusal does not name the ranks: $msg"
echo "ok: mpirun with 3 replica ranks and --sync-groups 2 is refused by name"
