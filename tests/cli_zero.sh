#!/usr/bin/env bash
# `replicator train --zero` (ZeRO-1: optimizer state sharded across the replicas) end to end, on a
# small subset of Fashion-MNIST:
#  1. the header names ZeRO-1 and counts the optimizer state per replica: 1/N of the unsharded
#     bytes (2 replicas of the MLP), a shard of ceil(P/N) values on 3 replicas;
#  2. the checkpoint (logical tensors, gathered before it is written) is byte for byte the sync
#     run's: the MLP on 2 and 3 replicas, ResNet-20 (batch norm buffers) on 4;
#  3. a --zero run saved on 4 replicas resumes on 2 (and a sync run's checkpoint resumes with
#     --zero), byte for byte what the sync runs that did the same wrote;
#  4. --zero with --regime async is refused;
#  5. --zero 2 (ZeRO-2: the reduced gradients sharded too): the header names it, the checkpoints
#     are the sync runs' (the MLP on 2 replicas, ResNet-20 on 4), and a --zero 2 run of 4 replicas
#     resumed on 2 with --zero 1 writes what sync 4 -> 2 wrote; --zero 3 (the values sharded
#     too): the header names it, the checkpoints are the sync runs' (MLP on 2, ResNet-20 on 4),
#     and ResNet-20's chain ZeRO-3 on 4 -> ZeRO-1 on 3 -> ZeRO-3 on 2 x TP2 -> 1 ends where
#     sync's chain does; --keep-gathered and --prefetch equal sync and follow the plan;
#     ResNet-20 on 2 replicas x tensor parallel 2, and x 2 pipeline stages, equals sync;
#     --hsdp 2 on 4 replicas keeps half the state a replica and resumes on 2, and --plan-check
#     finds its traffic as planned for every stage (and ZeRO-3's prefetch in the groups); --hsdp 3
#     is refused;
#  6. under mpirun: 2 ranks, and 2 ranks x 2 threads, write the checkpoint the sync threads run
#     wrote (both backends reduce in rank order), with --zero, --zero 2 and --zero 3 (and with
#     --prefetch).
# Usage: cli_zero.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
fail() { echo "FAIL: $*"; exit 1; }
# (--threads-per-replica 1 everywhere: the kernels' team size changes the last bits.)
common=(--data "$data" --limit 512 --threads 2 --threads-per-replica 1 --epochs 1)

# 1. The header.
out=$("$bin" train mlp "${common[@]}" --batch 64 --replicas 2 --zero --out "$dir/z2" 2>&1) \
    || fail "mlp --zero on 2 replicas: $out"
grep -q "2 replicas x 1 threads (threads, cross-replica batch norm, ZeRO-1)" <<< "$out" \
    || fail "header does not name ZeRO-1: $out"
# The MLP: 535818 trainable values, one momentum slot: 2143272 bytes, 1071636 on each of 2.
grep -q "optimizer state: 1071636 bytes per replica (1.02 MiB); ZeRO-1: 2143272 bytes unsharded" \
    <<< "$out" || fail "optimizer-state bytes on 2 replicas: $out"
grep -q "after 1 epochs" <<< "$out" || fail "mlp --zero did not finish: $out"
out=$("$bin" train mlp "${common[@]}" --batch 64 --replicas 2 --out "$dir/s2" 2>&1)
grep -q "optimizer state: 2143272 bytes per replica" <<< "$out" || fail "sync bytes: $out"
cmp "$dir/s2/checkpoint.safetensors" "$dir/z2/checkpoint.safetensors" \
    || fail "mlp: --zero on 2 replicas wrote another checkpoint than sync"
echo "ok: header counts 1/2 of the optimizer state; checkpoint equals sync's on 2 replicas"

# 2. Three replicas (535818 = 3 x 178606 values each), and ResNet-20 on 4: 272186 values, shards
#    of 68047 and a last one of 68045 (padded).
out=$("$bin" train mlp "${common[@]}" --batch 60 --replicas 3 --zero --out "$dir/z3" 2>&1) \
    || fail "mlp --zero on 3 replicas: $out"
grep -q "optimizer state: 714424 bytes per replica" <<< "$out" || fail "bytes on 3 replicas: $out"
"$bin" train mlp "${common[@]}" --batch 60 --replicas 3 --quiet --out "$dir/s3" > /dev/null 2>&1
cmp "$dir/s3/checkpoint.safetensors" "$dir/z3/checkpoint.safetensors" \
    || fail "mlp: --zero on 3 replicas wrote another checkpoint than sync"
res=(--data "$data" --limit 128 --batch 32 --threads 2 --threads-per-replica 1 --epochs 1 --quiet)
"$bin" train resnet20 "${res[@]}" --replicas 4 --zero --out "$dir/rz" > /dev/null 2>&1 \
    || fail "resnet20 --zero on 4 replicas failed"
"$bin" train resnet20 "${res[@]}" --replicas 4 --out "$dir/rs" > /dev/null 2>&1
cmp "$dir/rs/checkpoint.safetensors" "$dir/rz/checkpoint.safetensors" \
    || fail "resnet20: --zero on 4 replicas wrote another checkpoint than sync"
echo "ok: checkpoints equal sync's: mlp on 3 replicas, resnet20 on 4"

# 3. Save on 4, resume on 2.
mlp=(--data "$data" --limit 512 --batch 64 --threads 2 --threads-per-replica 1 --epochs 2 --quiet)
"$bin" train mlp "${mlp[@]}" --replicas 4 --zero --max-steps 5 --out "$dir/rz4" > /dev/null 2>&1
"$bin" train mlp "${mlp[@]}" --replicas 4 --max-steps 5 --out "$dir/rs4" > /dev/null 2>&1
cp -r "$dir/rs4" "$dir/rs4z"
"$bin" train --resume "$dir/rz4" --replicas 2 --zero --threads 2 --quiet > /dev/null 2>&1 \
    || fail "resuming a --zero run of 4 replicas on 2"
"$bin" train --resume "$dir/rs4" --replicas 2 --threads 2 --quiet > /dev/null 2>&1
"$bin" train --resume "$dir/rs4z" --replicas 2 --zero --threads 2 --quiet > /dev/null 2>&1
cmp "$dir/rs4/checkpoint.safetensors" "$dir/rz4/checkpoint.safetensors" \
    || fail "--zero 4 -> 2 differs from sync 4 -> 2"
cmp "$dir/rs4/checkpoint.safetensors" "$dir/rs4z/checkpoint.safetensors" \
    || fail "a sync checkpoint resumed with --zero differs from sync"
echo "ok: --zero saved on 4 replicas resumes on 2 as sync does"

# 4. Refused.
set +e
msg=$("$bin" train mlp "${common[@]}" --regime async --zero --out "$dir/za" 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q "does not combine with --regime async" <<< "$msg" \
    || fail "--zero --regime async: $rc $msg"
echo "ok: --zero with async refused"

# 5. ZeRO-2.
out=$("$bin" train mlp "${common[@]}" --batch 64 --replicas 2 --zero 2 --out "$dir/zz2" 2>&1) \
    || fail "mlp --zero 2 on 2 replicas: $out"
grep -q "2 replicas x 1 threads (threads, cross-replica batch norm, ZeRO-2)" <<< "$out" \
    || fail "header does not name ZeRO-2: $out"
grep -q "optimizer state: 1071636 bytes per replica (1.02 MiB); ZeRO-2: 2143272 bytes unsharded" \
    <<< "$out" || fail "ZeRO-2 optimizer-state bytes on 2 replicas: $out"
cmp "$dir/s2/checkpoint.safetensors" "$dir/zz2/checkpoint.safetensors" \
    || fail "mlp: --zero 2 on 2 replicas wrote another checkpoint than sync"
"$bin" train resnet20 "${res[@]}" --replicas 4 --zero 2 --out "$dir/rzz" > /dev/null 2>&1 \
    || fail "resnet20 --zero 2 on 4 replicas failed"
cmp "$dir/rs/checkpoint.safetensors" "$dir/rzz/checkpoint.safetensors" \
    || fail "resnet20: --zero 2 on 4 replicas wrote another checkpoint than sync"
"$bin" train mlp "${mlp[@]}" --replicas 4 --zero 2 --max-steps 5 --out "$dir/rzz4" > /dev/null 2>&1
"$bin" train --resume "$dir/rzz4" --replicas 2 --zero 1 --threads 2 --quiet > /dev/null 2>&1 \
    || fail "resuming a --zero 2 run of 4 replicas on 2 with --zero 1"
cmp "$dir/rs4/checkpoint.safetensors" "$dir/rzz4/checkpoint.safetensors" \
    || fail "--zero 2 on 4 -> --zero 1 on 2 differs from sync 4 -> 2"
set +e
msg=$("$bin" train mlp "${common[@]}" --zero 4 --out "$dir/z4bad" 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q -- "--zero" <<< "$msg" || fail "--zero 4 was not refused: $rc $msg"
echo "ok: --zero 2 equals sync (mlp on 2, resnet20 on 4) and resumes as --zero 1 on 2"

# ZeRO-3: the values sharded too, gathered layer by layer as forward and backward use them.
out=$("$bin" train mlp "${common[@]}" --batch 64 --replicas 2 --zero 3 --out "$dir/zz3" 2>&1) \
    || fail "mlp --zero 3 on 2 replicas: $out"
grep -q "2 replicas x 1 threads (threads, cross-replica batch norm, ZeRO-3)" <<< "$out" \
    || fail "header does not name ZeRO-3: $out"
cmp "$dir/s2/checkpoint.safetensors" "$dir/zz3/checkpoint.safetensors" \
    || fail "mlp: --zero 3 on 2 replicas wrote another checkpoint than sync"
"$bin" train resnet20 "${res[@]}" --replicas 4 --zero 3 --out "$dir/rz3" > /dev/null 2>&1 \
    || fail "resnet20 --zero 3 on 4 replicas failed"
cmp "$dir/rs/checkpoint.safetensors" "$dir/rz3/checkpoint.safetensors" \
    || fail "resnet20: --zero 3 on 4 replicas wrote another checkpoint than sync"
# The issue's chain of layouts, ResNet-20: 4 replicas ZeRO-3 for 5 steps, 3 replicas ZeRO-1 to
# step 9, 2 replicas x tensor parallel 2 with ZeRO-3 to step 14, 1 replica to the end; the sync
# runs make the same changes at the same steps and end on the same bytes.
chain=(--data "$data" --limit 480 --batch 48 --threads 2 --threads-per-replica 1 --epochs 2 --quiet)
"$bin" train resnet20 "${chain[@]}" --replicas 4 --zero 3 --max-steps 5 --out "$dir/c3" \
    > /dev/null 2>&1
"$bin" train resnet20 "${chain[@]}" --replicas 4 --max-steps 5 --out "$dir/cs" > /dev/null 2>&1
leg() { # leg NAME STAGE ARGS...: resume both runs (the ZeRO one with --zero STAGE, 0: none)
    local what=$1 stage=$2
    shift 2
    local zero=()
    [ "$stage" = 0 ] || zero=(--zero "$stage")
    "$bin" train --resume "$dir/c3" --threads 2 --quiet "$@" "${zero[@]}" > /dev/null 2>&1 \
        || fail "chain: $what failed"
    "$bin" train --resume "$dir/cs" --threads 2 --quiet "$@" > /dev/null 2>&1
    cmp "$dir/cs/checkpoint.safetensors" "$dir/c3/checkpoint.safetensors" \
        || fail "chain: $what differs from sync's"
}
leg "ZeRO-3 x4 -> ZeRO-1 x3" 1 --replicas 3 --max-steps 9
leg "-> ZeRO-3 x2 x TP2" 3 --replicas 2 --tensor-parallel 2 --max-steps 14
leg "-> 1 replica" 0 --replicas 1
# With tensor parallelism (each member's shard sharded again) and with pipeline stages (sharded
# within a stage; the micro-batches' tapes gather too).
for mp in "--tensor-parallel 2" "--model-parallel 2"; do
    read -ra layout <<< "$mp"
    "$bin" train resnet20 "${res[@]}" --replicas 2 "${layout[@]}" --zero 3 --out "$dir/l3" \
        > /dev/null 2>&1 || fail "resnet20 $mp --zero 3 failed"
    "$bin" train resnet20 "${res[@]}" --replicas 2 "${layout[@]}" --out "$dir/ls" > /dev/null 2>&1
    cmp "$dir/ls/checkpoint.safetensors" "$dir/l3/checkpoint.safetensors" \
        || fail "resnet20 $mp: --zero 3 differs from sync"
    rm -rf "$dir/l3" "$dir/ls"
done
# The planner's gathers are the run's, from the first step (the values start sharded).
out=$("$bin" train resnet20 "${res[@]}" --replicas 2 --zero 3 --plan-check --out "$dir/pc3" 2>&1) \
    || fail "resnet20 --zero 3 --plan-check: $out"
grep -q "data broadcast       runtime       3 calls      1088744 B per step: exact in 3 steps" \
    <<< "$out" || fail "--zero 3 --plan-check: the gathers differ from the plan: $out"
# --keep-gathered (units kept from forward to the update): sync's bytes again, and on ResNet-18
# (about 40 units) fewer gathers than without it, each exactly as planned.
"$bin" train resnet20 "${res[@]}" --replicas 4 --zero 3 --keep-gathered --out "$dir/rk" \
    > /dev/null 2>&1 || fail "resnet20 --zero 3 --keep-gathered failed"
cmp "$dir/rs/checkpoint.safetensors" "$dir/rk/checkpoint.safetensors" \
    || fail "resnet20: --zero 3 --keep-gathered wrote another checkpoint than sync"
r18=(--data "$data" --limit 96 --batch 32 --threads 2 --threads-per-replica 1 --epochs 1 --quiet
     --replicas 2 --zero 3 --plan-check)
gathers() { grep -o "data broadcast  *runtime  *[0-9]* calls  *[0-9]* B per step: exact in 3 steps" \
    <<< "$1" | head -1 | awk '{print $6}'; }
out=$("$bin" train resnet18 "${r18[@]}" --out "$dir/g1" 2>&1) || fail "resnet18 --zero 3: $out"
again=$(gathers "$out")
out=$("$bin" train resnet18 "${r18[@]}" --keep-gathered --out "$dir/g2" 2>&1) \
    || fail "resnet18 --zero 3 --keep-gathered: $out"
kept=$(gathers "$out")
[ -n "$again" ] && [ -n "$kept" ] && [ "$kept" -lt "$again" ] \
    || fail "--keep-gathered: gathers not exact or not fewer ($kept B against $again B): $out"
# --prefetch (the next unit's gather started by messages one unit ahead): sync's bytes again, and
# on ResNet-18 one broadcast gather a step, the rest sent and received, each exactly as planned.
"$bin" train resnet20 "${res[@]}" --replicas 4 --zero 3 --prefetch --out "$dir/rp" \
    > /dev/null 2>&1 || fail "resnet20 --zero 3 --prefetch failed"
cmp "$dir/rs/checkpoint.safetensors" "$dir/rp/checkpoint.safetensors" \
    || fail "resnet20: --zero 3 --prefetch wrote another checkpoint than sync"
out=$("$bin" train resnet18 "${r18[@]}" --prefetch --out "$dir/g3" 2>&1) \
    || fail "resnet18 --zero 3 --prefetch: $out"
grep -q "plan check: memory within 10% and communication exact on every worker" <<< "$out" \
    || fail "--prefetch: the plan differs from the run: $out"
grep -q "data broadcast  *runtime  *1 calls .*exact in 3 steps" <<< "$out" \
    && grep -q "data send  *runtime .*exact in 3 steps" <<< "$out" \
    && grep -q "data recv  *runtime .*exact in 3 steps" <<< "$out" \
    || fail "--prefetch: not one broadcast and the rest by messages: $out"
echo "ok: --zero 3 equals sync (mlp on 2, resnet20 on 4, with TP and pipelines), along a chain;"
echo "    --keep-gathered too, with fewer gathers ($kept B a step against $again B), as planned;"
echo "    --prefetch too, one broadcast a step and the rest by messages, as planned"

# HSDP: 4 replicas in groups of 2 (the state halved, not quartered); it resumes on 2 plain
# replicas; groups that do not divide the replicas are refused, naming the numbers.
out=$("$bin" train mlp "${common[@]}" --batch 64 --replicas 4 --hsdp 2 --max-steps 4 --out "$dir/h4" 2>&1) \
    || fail "mlp --hsdp 2 on 4 replicas: $out"
grep -q "4 replicas x 1 threads (threads, cross-replica batch norm, ZeRO-1, HSDP: sharded in groups of 2)" \
    <<< "$out" || fail "header does not name HSDP: $out"
grep -q "optimizer state: 1071636 bytes per replica" <<< "$out" || fail "HSDP's state on 4 in groups of 2: $out"
"$bin" train --resume "$dir/h4" --replicas 2 --threads 2 --quiet > /dev/null 2>&1 \
    || fail "resuming an HSDP run on 2 plain replicas"
set +e
msg=$("$bin" train mlp "${common[@]}" --batch 64 --replicas 4 --hsdp 3 --out "$dir/h3" 2>&1); rc=$?
set -e
[ $rc -ne 0 ] && grep -q "hsdp = 3 does not divide the 4 replicas" <<< "$msg" \
    || fail "--hsdp 3 on 4 replicas: $rc $msg"
# The planner covers HSDP: every line of every stage exact - the reductions and gathers in the
# group (shard), the shard's all-reduce across the groups (replicate), the finiteness agreement
# on the data axis.
for z in 1 2 3 "3 --prefetch"; do
    read -ra zero <<< "$z"
    out=$("$bin" train resnet20 "${res[@]}" --replicas 4 --hsdp 2 --zero "${zero[@]}" --plan-check \
          --out "$dir/hp${zero[*]// /}" 2>&1) || fail "resnet20 --hsdp 2 --zero $z --plan-check: $out"
    grep -q "plan check: memory within 10% and communication exact on every worker" <<< "$out" \
        || fail "--hsdp 2 --zero $z: the plan differs from the run: $out"
    [ "$(grep -c "replicate all_reduce *runtime *1 calls *544372 B per step: exact" <<< "$out")" \
        -eq 4 ] || fail "--hsdp 2 --zero $z: no shard all-reduce across the groups: $out"
    [ "$(grep -c "^    shard " <<< "$out")" -ge 8 ] || fail "--hsdp 2 --zero $z: no group lines: $out"
done
echo "ok: --hsdp 2 on 4 replicas shards in pairs, resumes on 2, planned exactly; --hsdp 3 refused"

# 6. MPI.
need_mpirun
res=(--data "$data" --limit 128 --batch 32 --threads 2 --threads-per-replica 1 --epochs 1 --quiet)
"$bin" train resnet20 "${res[@]}" --replicas 2 --out "$dir/t2" > /dev/null 2>&1
"${mpi[@]}" -np 2 "$bin" train resnet20 "${res[@]}" --zero --out "$dir/m2" > /dev/null 2>&1 \
    || fail "mpirun -np 2 --zero failed"
cmp "$dir/t2/checkpoint.safetensors" "$dir/m2/checkpoint.safetensors" \
    || fail "mpirun -np 2 --zero differs from 2 sync threads"
"${mpi[@]}" -np 2 "$bin" train resnet20 "${res[@]}" --replicas 2 --zero --out "$dir/m22" > /dev/null 2>&1 \
    || fail "mpirun -np 2 --replicas 2 --zero failed"
"${mpi[@]}" -np 2 "$bin" train resnet20 "${res[@]}" --replicas 2 --out "$dir/m22s" > /dev/null 2>&1
cmp "$dir/m22s/checkpoint.safetensors" "$dir/m22/checkpoint.safetensors" \
    || fail "2 ranks x 2 threads: --zero differs from sync"
echo "ok: mpirun -np 2 (and 2 ranks x 2 threads) --zero equals sync"
"${mpi[@]}" -np 2 "$bin" train resnet20 "${res[@]}" --zero 2 --out "$dir/mz2" > /dev/null 2>&1 \
    || fail "mpirun -np 2 --zero 2 failed"
cmp "$dir/t2/checkpoint.safetensors" "$dir/mz2/checkpoint.safetensors" \
    || fail "mpirun -np 2 --zero 2 differs from 2 sync threads"
"${mpi[@]}" -np 2 "$bin" train resnet20 "${res[@]}" --replicas 2 --zero 2 --out "$dir/mz22" \
    > /dev/null 2>&1 || fail "mpirun -np 2 --replicas 2 --zero 2 failed"
cmp "$dir/m22s/checkpoint.safetensors" "$dir/mz22/checkpoint.safetensors" \
    || fail "2 ranks x 2 threads: --zero 2 differs from sync"
echo "ok: mpirun -np 2 (and 2 ranks x 2 threads) --zero 2 equals sync"
"${mpi[@]}" -np 2 "$bin" train resnet20 "${res[@]}" --zero 3 --out "$dir/mz3" > /dev/null 2>&1 \
    || fail "mpirun -np 2 --zero 3 failed"
cmp "$dir/t2/checkpoint.safetensors" "$dir/mz3/checkpoint.safetensors" \
    || fail "mpirun -np 2 --zero 3 differs from 2 sync threads"
"${mpi[@]}" -np 2 "$bin" train resnet20 "${res[@]}" --replicas 2 --zero 3 --out "$dir/mz32" \
    > /dev/null 2>&1 || fail "mpirun -np 2 --replicas 2 --zero 3 failed"
cmp "$dir/m22s/checkpoint.safetensors" "$dir/mz32/checkpoint.safetensors" \
    || fail "2 ranks x 2 threads: --zero 3 differs from sync"
# --prefetch's messages between processes, and between and inside them.
"${mpi[@]}" -np 2 "$bin" train resnet20 "${res[@]}" --zero 3 --prefetch --out "$dir/mz3p" \
    > /dev/null 2>&1 || fail "mpirun -np 2 --zero 3 --prefetch failed"
cmp "$dir/t2/checkpoint.safetensors" "$dir/mz3p/checkpoint.safetensors" \
    || fail "mpirun -np 2 --zero 3 --prefetch differs from 2 sync threads"
"${mpi[@]}" -np 2 "$bin" train resnet20 "${res[@]}" --replicas 2 --zero 3 --prefetch \
    --out "$dir/mz32p" > /dev/null 2>&1 || fail "mpirun -np 2 --replicas 2 --zero 3 --prefetch failed"
cmp "$dir/m22s/checkpoint.safetensors" "$dir/mz32p/checkpoint.safetensors" \
    || fail "2 ranks x 2 threads: --zero 3 --prefetch differs from sync"
echo "ok: mpirun -np 2 (and 2 ranks x 2 threads) --zero 3 equals sync, with --prefetch too"
