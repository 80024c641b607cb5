#!/usr/bin/env bash
# End-to-end checks of `replicator train` and `replicator eval` on a small
# subset of Fashion-MNIST:
#  1. an interrupted run (--max-steps) resumed to the end writes a checkpoint
#     byte-identical to an uninterrupted run's (parameters, optimizer state,
#     loader position), and the same metrics.jsonl lines (but for the rate),
#     for the MLP and for ResNet-20 with augmentation;
#  2. SIGINT stops a run with exit code 130 and a resumable checkpoint;
#  3. a corrupt checkpoint is refused with a message naming the file, and is
#     left as it was; a diverging run (huge lr) stops with a NaN error and
#     leaves the previous checkpoint intact;
#  4. the loss falls: the MLP's test accuracy on the subset beats chance by far.
# Usage: cli_resume.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
common=(--data "$data" --limit 1024 --batch 64 --threads 1 --quiet)
fail() { echo "FAIL: $*"; exit 1; }

for model in mlp resnet20; do
    extra=()
    [ "$model" = resnet20 ] && extra=(--limit 256 --batch 32)
    "$bin" train "$model" "${common[@]}" "${extra[@]}" --epochs 2 --out "$dir/$model-a" > /dev/null
    "$bin" train "$model" "${common[@]}" "${extra[@]}" --epochs 2 --max-steps 11 --out "$dir/$model-b" > /dev/null
    [ -f "$dir/$model-b/checkpoint.safetensors" ] || fail "$model: no checkpoint after --max-steps"
    "$bin" train --resume "$dir/$model-b" --threads 1 --quiet > /dev/null
    cmp "$dir/$model-a/checkpoint.safetensors" "$dir/$model-b/checkpoint.safetensors" \
        || fail "$model: resumed run differs from the uninterrupted one"
    # The metrics too, line for line but for the rate: the resumed epoch's train_loss is the
    # mean over the whole epoch, the steps before the stop included.
    norate() { sed -E 's/,"images_per_s":[0-9.]+//' "$1/metrics.jsonl"; }
    diff <(norate "$dir/$model-a") <(norate "$dir/$model-b") \
        || fail "$model: the resumed run's metrics.jsonl differs from the uninterrupted one's"
    echo "ok: $model resume is bit-exact, checkpoint and metrics"
done

# What a run shows when stderr is not a terminal: a progress line about every tenth of an epoch
# (here every step but the last), one line per epoch with the evaluation, the summary; and
# metrics.jsonl's epoch line with the evaluation's metrics.
out=$("$bin" train mlp --data "$data" --limit 1024 --batch 64 --threads 1 --epochs 1 --out "$dir/lines" 2>&1)
grep -Eq "^  epoch 1/1  step 2/16  loss [0-9.]+  lr [0-9.]+  [0-9]+ img/s$" <<< "$out" || fail "progress line: $out"
grep -q "step 16/16" <<< "$out" && fail "a progress line for the epoch's last step: $out"
grep -Eq "^  epoch 1/1  train loss [0-9.]+  test loss [0-9.]+  test acc [0-9.]+%  [0-9]+ img/s  [0-9]+s$" <<< "$out" \
    || fail "epoch line: $out"
grep -q "after 1 epochs (16 steps this run)" <<< "$out" || fail "summary: $out"
grep -Eq '^\{"step":16,"epoch":1,"train_loss":[0-9.]+,"test_loss":[0-9.]+,"test_accuracy":[0-9.]+,"images_per_s":[0-9.]+,"lr":[0-9.e-]+\}$' \
    "$dir/lines/metrics.jsonl" || fail "metrics.jsonl epoch line: $(cat "$dir/lines/metrics.jsonl")"
echo "ok: progress, epoch and summary lines"

# Saved work is never overwritten: an explicit --out holding a checkpoint is refused (the file
# unchanged); the default directory moves on to runs/MODEL-2; flags that --resume would ignore are
# refused; resuming a finished run says so.
cp "$dir/mlp-a/checkpoint.safetensors" "$dir/before"
set +e
msg=$("$bin" train mlp "${common[@]}" --epochs 1 --out "$dir/mlp-a" 2>&1); rc=$?
set -e
[ $rc -eq 1 ] && grep -q "already holds a run" <<< "$msg" || fail "overwrote an existing run: $msg"
cmp "$dir/before" "$dir/mlp-a/checkpoint.safetensors" || fail "the existing checkpoint changed"
(cd "$dir" && "$bin" train mlp "${common[@]}" --epochs 1 > /dev/null && "$bin" train mlp "${common[@]}" --epochs 1 > /dev/null)
[ -f "$dir/runs/mlp/checkpoint.safetensors" ] && [ -f "$dir/runs/mlp-2/checkpoint.safetensors" ] \
    || fail "the default run directory was not made unique"
set +e
msg=$("$bin" train --resume "$dir/mlp-a" --lr 0.5 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q -- "--lr cannot be changed" <<< "$msg" || fail "--lr with --resume accepted: $msg"
out=$("$bin" train --resume "$dir/mlp-a" --threads 1) && grep -q "nothing to do" <<< "$out" \
    || fail "resuming a finished run"
echo "ok: saved runs are never overwritten"

# Accuracy on the subset: 10 classes, chance is 10%.
acc=$("$bin" eval "$dir/mlp-a" --threads 1 | sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a > 60) }' || fail "mlp test accuracy $acc% after 2 short epochs"
echo "ok: eval reports $acc%"

# SIGINT: stops at a step boundary, checkpoints, exits 130; resuming finishes the run.
set +e
"$bin" train mlp --data "$data" --threads 1 --quiet --epochs 50 --out "$dir/sig" > /dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s "$dir/sig/metrics.jsonl" ] && break; sleep 0.1; done
kill -INT $pid
wait $pid
rc=$?
set -e
[ $rc -eq 130 ] || fail "SIGINT exit code $rc, expected 130"
[ -f "$dir/sig/checkpoint.safetensors" ] || fail "no checkpoint after SIGINT"
echo "ok: SIGINT checkpoints and exits 130"

# A corrupt checkpoint is refused and left untouched.
cp "$dir/mlp-a/checkpoint.safetensors" "$dir/good"
printf '\x42' | dd of="$dir/mlp-a/checkpoint.safetensors" bs=1 seek=2000 conv=notrunc status=none
cp "$dir/mlp-a/checkpoint.safetensors" "$dir/corrupt"
set +e
msg=$("$bin" train --resume "$dir/mlp-a" --quiet 2>&1)
rc=$?
set -e
[ $rc -eq 1 ] || fail "corrupt checkpoint: exit code $rc"
grep -q "checkpoint.safetensors" <<< "$msg" || fail "corrupt checkpoint: message does not name the file: $msg"
cmp "$dir/corrupt" "$dir/mlp-a/checkpoint.safetensors" || fail "the corrupt checkpoint was modified"
echo "ok: corrupt checkpoint refused: $(echo "$msg" | tail -1)"

# Divergence: a NaN loss stops the run with a clear error; the last good checkpoint survives.
cp "$dir/good" "$dir/mlp-a/checkpoint.safetensors"
set +e
msg=$("$bin" train mlp "${common[@]}" --epochs 3 --lr 100 --momentum 0.99 --wd 0 --out "$dir/nan" 2>&1)
rc=$?
set -e
[ $rc -eq 1 ] || fail "diverging run: exit code $rc"
grep -q "loss is" <<< "$msg" || fail "diverging run: no NaN message: $msg"
echo "ok: divergence reported: $(echo "$msg" | tail -1)"

# (--threads-per-replica 1 on every run: under mpirun --threads is each rank's, and the kernels'
# team size changes the last bits.)
# Replicas: a 2-replica run interrupted and resumed on 2 replicas is bit-exact (synchronous
# training is deterministic); its checkpoint also resumes on 1 replica; a batch that does not
# split is refused; a replica's NaN is reported as that replica's error.
rep=(--data "$data" --limit 256 --batch 32 --threads 2 --threads-per-replica 1 --quiet --epochs 2)
"$bin" train resnet20 "${rep[@]}" --replicas 2 --out "$dir/rep-a" > /dev/null
"$bin" train resnet20 "${rep[@]}" --replicas 2 --max-steps 11 --out "$dir/rep-b" > /dev/null
cp -r "$dir/rep-b" "$dir/rep-c"
"$bin" train --resume "$dir/rep-b" --quiet > /dev/null
cmp "$dir/rep-a/checkpoint.safetensors" "$dir/rep-b/checkpoint.safetensors" \
    || fail "2 replicas: resumed run differs from the uninterrupted one"
out=$("$bin" train --resume "$dir/rep-c" --replicas 1 --quiet 2>&1) || fail "resuming 2 replicas on 1: $out"
grep -q "after 2 epochs" <<< "$out" || fail "resuming 2 replicas on 1 did not finish: $out"
set +e
msg=$("$bin" train resnet20 "${rep[@]}" --replicas 3 --out "$dir/rep-d" 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q "does not split across 3 replicas" <<< "$msg" || fail "batch 32 on 3 replicas: $msg"
set +e
msg=$("$bin" train mlp "${common[@]}" --threads 2 --replicas 2 --epochs 3 --lr 100 --momentum 0.99 --wd 0 --out "$dir/rep-nan" 2>&1)
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "replica [01]: .*loss is" <<< "$msg" || fail "2 replicas diverging: $msg"
echo "ok: replicas: resume bit-exact, 2 -> 1 replicas, errors: $(echo "$msg" | tail -1)"

# MPI: `mpirun -np 2 replicator train` writes the same checkpoint, byte for byte, as 2 replicas on
# threads (both backends reduce in rank order); a run interrupted under mpirun resumes on threads.
if command -v mpirun > /dev/null; then
    mpiflags=(--oversubscribe)
    [ "$(id -u)" -eq 0 ] && mpiflags+=(--allow-run-as-root)
    # Under the sanitizer build: OpenMPI's own allocations at exit are not ours to report.
    export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
    mpirun "${mpiflags[@]}" -np 2 "$bin" train resnet20 "${rep[@]}" --out "$dir/mpi-a" > /dev/null
    cmp "$dir/rep-a/checkpoint.safetensors" "$dir/mpi-a/checkpoint.safetensors" \
        || fail "2 MPI ranks and 2 threads wrote different checkpoints"
    mpirun "${mpiflags[@]}" -np 2 "$bin" train resnet20 "${rep[@]}" --max-steps 11 --out "$dir/mpi-b" > /dev/null
    "$bin" train --resume "$dir/mpi-b" --replicas 2 --quiet > /dev/null
    cmp "$dir/rep-a/checkpoint.safetensors" "$dir/mpi-b/checkpoint.safetensors" \
        || fail "an MPI run resumed on threads differs from the uninterrupted run"
    echo "ok: mpirun -np 2 equals 2 threads, and resumes on threads"
    # Hierarchical: --replicas 2 under mpirun -np 2 is 2 replica threads in each rank, 4 in all.
    out=$(mpirun "${mpiflags[@]}" -np 2 "$bin" train resnet20 --data "$data" --limit 256 --batch 32 \
        --threads 2 --epochs 1 --replicas 2 --out "$dir/mpi-h" 2>&1) || fail "2 ranks x 2 replicas: $out"
    grep -q "4 replicas (2 ranks x 2) x 1 threads (mpi+threads" <<< "$out" || fail "hierarchical header: $out"
    grep -q "after 1 epochs" <<< "$out" || fail "hierarchical run did not finish: $out"
    [ "$(echo "$out" | grep -c "run directory")" -eq 1 ] || fail "more than one rank printed the header: $out"
    # --backend threads under mpirun would make every rank train alone into one directory: refused.
    set +e
    msg=$(mpirun "${mpiflags[@]}" -np 2 "$bin" train resnet20 "${rep[@]}" --backend threads --out "$dir/mpi-t" 2>&1); rc=$?
    set -e
    [ $rc -ne 0 ] && grep -q "every rank would train alone" <<< "$msg" || fail "--backend threads under mpirun: $msg"
    echo "ok: 2 ranks x 2 replica threads; --backend threads refused under mpirun"
else
    echo "SKIP: mpirun is not installed (the MPI checks)"
fi
echo "all cli checks passed"
