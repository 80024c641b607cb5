#!/usr/bin/env bash
# --tensorboard DIR on every training command, end to end: each short run leaves one events file
# in DIR that tensorboard_dump (the framing reader, both CRCs of every record, and protobuf-c)
# reads whole, starting with the version record, holding the loss and the command's own numbers
# at increasing steps. Also: a resumed run adds a second file whose steps go on from the first's;
# a DIR that cannot be created warns and the run still finishes; an empty DIR is refused.
# Usage: cli_tensorboard.sh path/to/replicator path/to/tensorboard_dump
set -euo pipefail
bin=$(realpath "$1")
dump=$(realpath "$2")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
fail() { echo "FAIL: $*"; exit 1; }
# (inside $(...), where stdout is captured)
die() { echo "FAIL: $*" >&2; exit 1; }

# events DIR: the one events file in DIR, dumped ("version ..." then "STEP TAG VALUE" lines).
events() {
    local files=("$1"/events.out.tfevents.*)
    [ ${#files[@]} -eq 1 ] && [ -f "${files[0]}" ] || die "$1 holds ${#files[@]} events files: ${files[*]}"
    "$dump" "${files[0]}" || die "tensorboard_dump ${files[0]}"
}

# check_events DUMP TAG...: the version first, each TAG present, and each tag's steps increasing.
check_events() {
    local out=$1 tag
    shift
    [ "$(head -1 <<< "$out")" = "version brain.Event:2" ] || fail "first record: $(head -1 <<< "$out")"
    for tag in "$@"; do
        grep -q " $tag " <<< "$out" || fail "no $tag in: $out"
    done
    awk 'NR > 1 { if ($2 in last && $1 <= last[$2]) { print "tag " $2 ": step " $1 " after " last[$2]; bad = 1 }
                  last[$2] = $1 } END { exit bad }' <<< "$out" || fail "steps do not increase"
}

# The classifier: 100 steps an epoch, step lines every 50 steps.
mlp=(train mlp --data "$data" --limit 3200 --batch 32 --threads 1 --quiet)
"$bin" "${mlp[@]}" --epochs 2 --out "$dir/mlp" --tensorboard "$dir/tb-mlp" > /dev/null
out=$(events "$dir/tb-mlp")
check_events "$out" train/loss train/lr perf/images_per_s epoch/train_loss eval/test_loss eval/test_accuracy
[ "$(grep -c ' train/loss ' <<< "$out")" -eq "$(grep -c '"loss"' "$dir/mlp/metrics.jsonl")" ] \
    || fail "train/loss points differ from metrics.jsonl's step lines: $out"
[ "$(grep ' train/loss ' <<< "$out" | awk '{print $1}' | tr '\n' ' ')" = "50 100 150 200 " ] \
    || fail "train/loss steps: $out"
# The last test accuracy, as metrics.jsonl has it (6 decimals) and the events file (a float).
acc_json=$(tail -1 "$dir/mlp/metrics.jsonl" | sed -E 's/.*"test_accuracy":([0-9.]+).*/\1/')
acc_tb=$(grep ' eval/test_accuracy ' <<< "$out" | tail -1 | awk '{print $3}')
awk -v a="$acc_json" -v b="$acc_tb" 'BEGIN { exit !(a - b < 1e-6 && b - a < 1e-6) }' \
    || fail "test accuracy $acc_json in metrics.jsonl, $acc_tb in the events file"
echo "ok: train mlp --tensorboard: $(($(wc -l <<< "$out") - 1)) scalars, test accuracy $acc_tb"

# Resumed: a second file in the same directory, its steps after the first file's.
"$bin" "${mlp[@]}" --epochs 2 --max-steps 120 --out "$dir/r" --tensorboard "$dir/tb-r" > /dev/null
first=$(events "$dir/tb-r")
"$bin" train --resume "$dir/r" --threads 1 --quiet --tensorboard "$dir/tb-r" > /dev/null
files=("$dir/tb-r"/events.out.tfevents.*)
[ ${#files[@]} -eq 2 ] || fail "a resumed run left ${#files[@]} events files"
for f in "${files[@]}"; do
    out=$("$dump" "$f") || fail "tensorboard_dump $f"
    [ "$out" = "$first" ] && continue
    check_events "$out" train/loss epoch/train_loss
    first_step=$(sed -n 2p <<< "$out" | awk '{print $1}')
    last_before=$(tail -1 <<< "$first" | awk '{print $1}')
    [ "$first_step" -gt "$last_before" ] || fail "the resumed file starts at step $first_step, before $last_before"
    [ "$(tail -1 <<< "$out" | awk '{print $1}')" -eq 200 ] || fail "the resumed file ends at: $(tail -1 <<< "$out")"
done
echo "ok: a resumed run adds a file whose steps go on"

# SN-GAN: its losses and discriminator outputs, the iteration rate.
"$bin" train sngan --data "$data" --limit 256 --ch-g 8 --ch-d 8 --z-dim 16 --d-batch 16 --g-batch 16 \
    --n-dis 2 --iters 12 --sample-every 0 --checkpoint-every 0 --threads 2 --replicas 2 --quiet \
    --out "$dir/gan" --tensorboard "$dir/tb-gan" > /dev/null
out=$(events "$dir/tb-gan")
check_events "$out" train/d_loss train/g_loss train/d_real train/d_fake \
    epoch/train_g_loss perf/iterations_per_s
echo "ok: train sngan --tensorboard"

# D4PG: the critic's loss, the replay and the evaluation's return.
"$bin" train d4pg --task cartpole-swingup --policy-layers 32,32 --critic-layers 32,32 --batch 32 \
    --min-replay 400 --eval-every 500 --eval-episodes 1 --checkpoint-every 1000 --env-steps 700 \
    --actors 1 --envs 1 --threads 1 --quiet --out "$dir/d4pg" --tensorboard "$dir/tb-d4pg" > /dev/null
out=$(events "$dir/tb-d4pg")
check_events "$out" train/critic_loss train/policy_loss train/replay \
    eval/eval_return perf/learner_steps_per_s
echo "ok: train d4pg --tensorboard"

# A directory that cannot be made (under a file): a warning naming it, and the run finishes.
touch "$dir/plain"
err=$("$bin" "${mlp[@]}" --epochs 1 --out "$dir/w" --tensorboard "$dir/plain/tb" 2>&1 > /dev/null) \
    || fail "the run failed: $err"
grep -q "$dir/plain/tb.*continuing without TensorBoard" <<< "$err" || fail "no warning: $err"
[ -f "$dir/w/checkpoint.safetensors" ] || fail "no checkpoint after the warning"
set +e
msg=$("$bin" train mlp --tensorboard "" 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q -- "--tensorboard" <<< "$msg" || fail "an empty --tensorboard: $rc $msg"
echo "ok: bad directories"

need_mpirun   # (exits here without mpirun: the checks above have passed)

# Under mpirun -np 2: one events file, written by rank 0 alone, with the same steps and the same
# reduced numbers as 2 replica threads (both backends reduce in rank order).
"$bin" "${mlp[@]}" --epochs 1 --replicas 2 --threads-per-replica 1 --out "$dir/thr" \
    --tensorboard "$dir/tb-thr" > /dev/null
"${mpi[@]}" -np 2 "$bin" "${mlp[@]}" --epochs 1 --threads-per-replica 1 --out "$dir/mpi" \
    --tensorboard "$dir/tb-mpi" > /dev/null
thr=$(events "$dir/tb-thr")
out=$(events "$dir/tb-mpi")
check_events "$out" train/loss train/lr epoch/train_loss eval/test_accuracy
# perf/ (throughput) differs run to run; everything else must match.
[ "$(grep -v ' perf/' <<< "$out")" = "$(grep -v ' perf/' <<< "$thr")" ] \
    || fail "mpirun -np 2's events differ from 2 threads': $(diff <(echo "$thr") <(echo "$out"))"
echo "ok: mpirun -np 2 --tensorboard: one file, the same scalars as 2 threads"
