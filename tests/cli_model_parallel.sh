#!/usr/bin/env bash
# `replicator train --model-parallel W [--pipeline gpipe|1f1b --micro-batches M]` (logical devices:
# each replica spans W workers, one ResNet stage each) end to end, on a small subset of
# Fashion-MNIST:
#  1. the header names the mesh and the stages; the run finishes and checkpoints;
#  2. one micro-batch on 2 stages trains bitwise what the whole network does on one worker (the
#     checkpoint's tensors are the same bytes), and GPipe and 1F1B over 4 micro-batches agree
#     bitwise with each other;
#  3. a checkpoint of 2 stages resumes whole (--model-parallel 1) and on 3 stages;
#  3b. --tensor-parallel 2: the header, a dense checkpoint resumed whole, and with --zero on 2
#      replicas half a shard's optimizer state and the same checkpoint;
#  4. what cannot be done is refused with a reason: an MLP cut into stages, --pipeline without
#     --model-parallel, a batch that does not split into the micro-batches;
#  5. a stage that dies mid-pipeline fails the run within the timeout, naming the stage and the
#     peer that did not send;
#  6. `replicator bench pipeline` reports the bubble beside (P-1)/(M+P-1);
#  7. under mpirun: 2 ranks (a stage each), 4 ranks (2 replicas x 2 stages) and 2 ranks x 2
#     threads train what the threads backend trains.
# Usage: cli_model_parallel.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
fail() { echo "FAIL: $*"; exit 1; }
# Every worker on one kernel thread: the team size changes the last bits.
common=(--data "$data" --limit 128 --batch 32 --threads 2 --threads-per-replica 1 --epochs 1)

# same_tensors A B: the two run directories' checkpoints hold the same tensors, byte for byte
# (their configuration text may differ: it records the layout).
same_tensors() {
    python3 - "$1/checkpoint.safetensors" "$2/checkpoint.safetensors" << 'EOF'
import json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in head.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
if a.keys() != b.keys():
    sys.exit("names differ: %s" % sorted(set(a) ^ set(b))[:5])
bad = [k for k in a if a[k] != b[k]]
if bad:
    sys.exit("%d tensors differ, e.g. %s" % (len(bad), bad[:3]))
EOF
}

# 1. The header.
out=$("$bin" train resnet20 "${common[@]}" --model-parallel 2 --replicas 2 --pipeline 1f1b \
    --micro-batches 4 --out "$dir/p1f1b" 2>&1) || fail "2 x 2 stages, 1f1b: $out"
grep -q "2 replicas x 2 stages (1f1b over 4 micro-batches) = 4 workers x 1 threads" <<< "$out" \
    || fail "the header does not name the mesh: $out"
grep -q "stages (share of the forward FLOPs): 0: stem .. stage2.block0 ([0-9]*%); 1: stage2.block1 .. head" \
    <<< "$out" || fail "the header does not name the stages: $out"
grep -q "272186 parameters" <<< "$out" || fail "the header counts one stage's parameters: $out"
grep -q "after 1 epochs" <<< "$out" || fail "the run did not finish: $out"
echo "ok: the header names 2 replicas x 2 stages and what each stage holds"

# 2. Split equals whole; the schedules agree.
"$bin" train resnet20 "${common[@]}" --replicas 1 --quiet --out "$dir/whole" > /dev/null 2>&1 \
    || fail "the whole network on one worker"
"$bin" train resnet20 "${common[@]}" --replicas 1 --model-parallel 2 --quiet --out "$dir/two" \
    > /dev/null 2>&1 || fail "2 stages"
same_tensors "$dir/whole" "$dir/two" || fail "2 stages trained another model than the whole network"
"$bin" train resnet20 "${common[@]}" --model-parallel 2 --replicas 2 --pipeline gpipe \
    --micro-batches 4 --quiet --out "$dir/pgpipe" > /dev/null 2>&1 || fail "gpipe"
same_tensors "$dir/pgpipe" "$dir/p1f1b" || fail "gpipe and 1f1b trained different models"
echo "ok: 2 stages train bitwise the whole network; gpipe and 1f1b agree bitwise"

# 3. Resume across layouts.
res=(--data "$data" --limit 128 --batch 32 --threads-per-replica 1 --quiet)
"$bin" train resnet20 "${res[@]}" --threads 2 --epochs 2 --replicas 1 --max-steps 6 --out "$dir/w" \
    > /dev/null 2>&1
"$bin" train --resume "$dir/w" --threads 1 --replicas 1 --quiet > /dev/null 2>&1 \
    || fail "resuming the whole run"
"$bin" train resnet20 "${res[@]}" --threads 2 --epochs 2 --replicas 1 --model-parallel 2 \
    --max-steps 6 --out "$dir/s" > /dev/null 2>&1
"$bin" train --resume "$dir/s" --threads 1 --replicas 1 --model-parallel 1 --quiet > /dev/null \
    2>&1 || fail "resuming 2 stages whole"
same_tensors "$dir/w" "$dir/s" || fail "2 stages resumed whole differ from the whole run"
"$bin" train resnet20 "${res[@]}" --threads 2 --epochs 2 --replicas 1 --model-parallel 2 \
    --max-steps 6 --out "$dir/s3" > /dev/null 2>&1
"$bin" train --resume "$dir/s3" --threads 2 --replicas 1 --model-parallel 3 --quiet > /dev/null \
    2>&1 || fail "resuming 2 stages on 3"
echo "ok: a checkpoint of 2 stages resumes whole (bitwise the whole run) and on 3 stages"

# 3b. Tensor parallelism: the header names it; a checkpoint of 2 tensor-parallel workers is the
#     dense tensors, and resumes whole.
out=$("$bin" train resnet20 "${common[@]}" --replicas 1 --tensor-parallel 2 --max-steps 2 \
    --out "$dir/tp" 2>&1) || fail "--tensor-parallel 2: $out"
grep -q "1 replica x 2 tensor-parallel = 2 workers x 1 threads" <<< "$out" \
    || fail "the header does not name tensor parallelism: $out"
grep -q "272186 parameters" <<< "$out" || fail "the header counts a shard's parameters: $out"
"$bin" train --resume "$dir/tp" --threads 1 --replicas 1 --tensor-parallel 1 --max-steps 4 \
    --quiet > /dev/null 2>&1 || fail "resuming 2 tensor-parallel workers whole"
# With ZeRO-1 on the data axis (2 replicas x 2): half of each shard's optimizer state per worker,
# and the checkpoint byte for byte the one without it.
"$bin" train resnet20 "${common[@]}" --replicas 2 --tensor-parallel 2 --max-steps 2 --quiet \
    --out "$dir/tp22" > /dev/null 2>&1 || fail "--replicas 2 --tensor-parallel 2"
out=$("$bin" train resnet20 "${common[@]}" --replicas 2 --tensor-parallel 2 --zero --max-steps 2 \
    --out "$dir/tp22z" 2>&1) || fail "--tensor-parallel 2 --zero: $out"
grep -q "optimizer state: 276436 bytes on worker 0 (its stage and shard) (0.26 MiB); ZeRO-1: 552872 bytes unsharded" \
    <<< "$out" || fail "--tensor-parallel --zero does not halve a shard's state: $out"
same_tensors "$dir/tp22" "$dir/tp22z" || fail "--tensor-parallel 2 --zero differs from without"
echo "ok: --tensor-parallel 2 names its mesh, saves the dense model, resumes whole; with --zero the same bits"

# 4. Refusals.
set +e
msg=$("$bin" train mlp "${common[@]}" --model-parallel 2 --out "$dir/m" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "only the ResNets" <<< "$msg" || fail "mlp cut into stages: $rc $msg"
msg=$("$bin" train resnet20 "${common[@]}" --pipeline 1f1b --out "$dir/m" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "add --model-parallel" <<< "$msg" || fail "--pipeline alone: $rc $msg"
msg=$("$bin" train resnet20 "${common[@]}" --model-parallel 2 --replicas 2 --micro-batches 3 \
    --out "$dir/m" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "batch of 16 does not split into 3 micro-batches" <<< "$msg" \
    || fail "micro-batches that do not divide: $rc $msg"
set -e
echo "ok: an MLP cut into stages, --pipeline alone and 3 micro-batches of 16 are refused"

# 5. A stage dies (worker 1, stage 1 of replica 0, at its third run): the run fails within the
#    5 s timeout, from stage 0, naming the peer that did not send.
start=$(date +%s)
set +e
msg=$(timeout 60 "$bin" train resnet20 "${common[@]}" --replicas 1 --model-parallel 2 \
    --pipeline 1f1b --comm-timeout 5 --faults 'kill:worker=1,run=3' --out "$dir/dead" 2>&1); rc=$?
set -e
took=$(($(date +%s) - start))
[ $rc -eq 1 ] || fail "a dead stage: exit $rc: $msg"
grep -q "pipeline stage 0 of 2" <<< "$msg" && grep -q "worker 1 did not send" <<< "$msg" \
    || fail "a dead stage is not named: $msg"
[ "$took" -lt 30 ] || fail "a dead stage took ${took}s to report"
echo "ok: a dead stage fails the run in ${took}s, named"

# 6. The bubble benchmark: one JSON line per micro-batch count, the theory's (P-1)/(M+P-1) beside
#    the step times measured.
out=$("$bin" bench pipeline --data "$data" --batch 16 --micro 1,4 --steps 1 --warmup 0 --json) \
    || fail "bench pipeline: $out"
[ "$(grep -c '"model":"resnet20"' <<< "$out")" -eq 2 ] || fail "bench pipeline lines: $out"
grep -q '"micro_batches":1,"theory":0.5000' <<< "$out" && grep -q '"micro_batches":4,"theory":0.2000' \
    <<< "$out" || fail "bench pipeline's theory column: $out"
grep -q '"gpipe_ms":[1-9]' <<< "$out" && grep -q '"1f1b_ms":[1-9]' <<< "$out" \
    || fail "bench pipeline timed nothing: $out"
echo "ok: bench pipeline times both schedules beside the theory"

# 7. MPI.
need_mpirun
"${mpi[@]}" -np 2 "$bin" train resnet20 "${common[@]}" --model-parallel 2 --quiet \
    --out "$dir/m2" > /dev/null 2>&1 || fail "mpirun -np 2 --model-parallel 2"
same_tensors "$dir/whole" "$dir/m2" || fail "2 ranks, a stage each, differ from the whole network"
"${mpi[@]}" -np 4 "$bin" train resnet20 "${common[@]}" --model-parallel 2 --pipeline 1f1b \
    --micro-batches 4 --quiet --out "$dir/m4" > /dev/null 2>&1 || fail "mpirun -np 4 (2 x 2)"
same_tensors "$dir/p1f1b" "$dir/m4" || fail "4 ranks (2 replicas x 2 stages) differ from threads"
"${mpi[@]}" -np 2 "$bin" train resnet20 "${common[@]}" --replicas 2 --model-parallel 2 \
    --pipeline gpipe --micro-batches 4 --quiet --out "$dir/m22" > /dev/null 2>&1 \
    || fail "mpirun -np 2 --replicas 2 (2 ranks x 2 threads)"
same_tensors "$dir/p1f1b" "$dir/m22" || fail "2 ranks x 2 threads differ from threads"
echo "ok: mpirun with 2 ranks, 4 ranks and 2 ranks x 2 threads trains what threads train"
"$bin" train resnet20 "${common[@]}" --replicas 1 --tensor-parallel 2 --quiet --out "$dir/tpt" \
    > /dev/null 2>&1 || fail "--tensor-parallel 2 on threads"
"${mpi[@]}" -np 2 "$bin" train resnet20 "${common[@]}" --tensor-parallel 2 --quiet \
    --out "$dir/tpm" > /dev/null 2>&1 || fail "mpirun -np 2 --tensor-parallel 2"
same_tensors "$dir/tpt" "$dir/tpm" || fail "tensor parallelism on 2 ranks differs from 2 threads"
echo "ok: mpirun -np 2 --tensor-parallel 2 trains what 2 threads train"
