#!/usr/bin/env bash
# End-to-end checks of `replicator train sngan`, `replicator sample` and
# `replicator eval` on a GAN run, at tiny widths on a subset of Fashion-MNIST:
#  1. a run writes its checkpoint, metrics and sample grids; one interrupted
#     (--max-steps) and resumed from its directory ends bit-identical to an
#     uninterrupted one, and a finished run resumed with a larger --iters goes on;
#     --zero, --zero 2 and --zero 3 (also with --prefetch) write the sync run's checkpoint byte
#     for byte (and ZeRO-3, whose values are sharded between uses, draws the same samples);
#  2. sample writes a PNG grid of the expected size (a row per class, or one
#     class) and --raw IDX files of the expected sizes;
#  3. bad input gets a clear error and exit code 1: a class the generator does
#     not know, a classifier run given to sample, a corrupt checkpoint (left
#     as it was), eval without a judge;
#  4. eval with a judge prints the scores and, with --calibrate, the real
#     images' scores (the test set's FD near 0).
# Usage: cli_sngan.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
fail() { echo "FAIL: $*"; exit 1; }
gan=(train sngan --data "$data" --limit 256 --ch-g 8 --ch-d 8 --z-dim 16 --d-batch 16 --g-batch 16 --n-dis 2
     --iters 6 --sample-every 3 --checkpoint-every 0 --threads 2 --replicas 2 --quiet)

"$bin" "${gan[@]}" --out "$dir/a" > /dev/null
for f in checkpoint.safetensors metrics.jsonl samples.png samples-000003.png samples-000006.png; do
    [ -f "$dir/a/$f" ] || fail "the run wrote no $f"
done
grep -Eq '^\{"step":6,"train_d_loss":[0-9.]+,"train_g_loss":-?[0-9.]+,' "$dir/a/metrics.jsonl" \
    || fail "metrics.jsonl's last line: $(tail -1 "$dir/a/metrics.jsonl")"
"$bin" "${gan[@]}" --out "$dir/b" --max-steps 3 > /dev/null
"$bin" train --resume "$dir/b" --threads 2 --quiet > /dev/null
cmp "$dir/a/checkpoint.safetensors" "$dir/b/checkpoint.safetensors" \
    || fail "the resumed GAN run differs from the uninterrupted one"
echo "ok: a GAN run resumes bit-exactly from its directory"
# ZeRO (the optimizer state, and with --zero 2 the reduced gradients, sharded over the 2
# replicas): the checkpoint of the same run is byte for byte the sync run's, and a --zero 2 run
# stopped at 3 resumes without ZeRO to the same bytes.
"$bin" "${gan[@]}" --zero --out "$dir/z1" > /dev/null || fail "train sngan --zero failed"
loud=()
for a in "${gan[@]}"; do [ "$a" = --quiet ] || loud+=("$a"); done
out=$("$bin" "${loud[@]}" --zero 2 --out "$dir/z2" 2>&1) || fail "train sngan --zero 2: $out"
grep -q "ZeRO-2: each replica keeps the optimizer state and the reduced gradients of 1/2" \
    <<< "$out" || fail "the header does not name ZeRO-2: $out"
"$bin" "${gan[@]}" --zero 3 --out "$dir/z3" > /dev/null || fail "train sngan --zero 3 failed"
"$bin" "${gan[@]}" --zero 3 --prefetch --out "$dir/z3p" > /dev/null \
    || fail "train sngan --zero 3 --prefetch failed"
for z in z1 z2 z3 z3p; do
    cmp "$dir/a/checkpoint.safetensors" "$dir/$z/checkpoint.safetensors" \
        || fail "sngan $z wrote another checkpoint than the sync run"
done
"$bin" "${gan[@]}" --zero 2 --out "$dir/z2r" --max-steps 3 > /dev/null
"$bin" train --resume "$dir/z2r" --threads 2 --quiet > /dev/null
cmp "$dir/a/checkpoint.safetensors" "$dir/z2r/checkpoint.safetensors" \
    || fail "a --zero 2 GAN run resumed without ZeRO differs from the sync run"
cmp "$dir/a/samples.png" "$dir/z3/samples.png" || fail "sngan --zero 3 drew other samples"
echo "ok: sngan --zero 1, 2 and 3 (and 3 with --prefetch) write the sync run's checkpoint;"
echo "    --zero 2 resumes as sync"
# A finished run resumed with more iterations trains them (it used to stop at once, at 6).
cp -r "$dir/a" "$dir/more"
out=$("$bin" train --resume "$dir/more" --iters 8 --threads 2 2>&1)
grep -q "8 iterations (2 this run)" <<< "$out" || fail "a finished run given --iters 8 said: $out"
# The run header says each of its lines once, fresh and resumed (a report had the layout and
# run-directory lines twice): the layout, the run directory and the resume line.
fresh=$("$bin" "${gan[@]:0:${#gan[@]}-1}" --max-steps 1 --out "$dir/header" 2>&1)
for log in "$fresh" "$out"; do
    for line in ' replicas x ' '^  run directory: ' '^replicator train sngan on '; do
        n=$(grep -c -- "$line" <<< "$log" || true)
        [ "$n" = 1 ] || fail "the run header has '$line' $n times: $log"
    done
done
n=$(grep -c '^  resumed from ' <<< "$out" || true)
[ "$n" = 1 ] || fail "the resumed run's header has the resume line $n times: $out"
grep -q '^{"step":8,' "$dir/more/metrics.jsonl" || fail "no step 8 in metrics.jsonl"
echo "ok: a finished GAN run resumed with --iters 8 trains iterations 7 and 8"

# A bf16 run keeps its precision and its gradients' wire type in its configuration, so a resume
# continues in them untold; one stopped with sharded checkpoints written in the background
# resumes from the shards and ends bit-identical to the uninterrupted run.
"$bin" "${gan[@]}" --precision bf16 --activations bf16 --grad-dtype bf16 --out "$dir/pa" > /dev/null
"$bin" "${gan[@]}" --precision bf16 --activations bf16 --grad-dtype bf16 --checkpoint-shards 2 \
    --background-save --max-steps 3 --out "$dir/pb" > /dev/null
[ -f "$dir/pb/checkpoint.index.json" ] && [ ! -e "$dir/pb/checkpoint.safetensors" ] ||
    fail "--checkpoint-shards 2 wrote: $(ls "$dir/pb")"
out=$("$bin" train --resume "$dir/pb" --threads 2 2>&1)
grep -q '^  precision: bf16 .*outputs stored in bf16' <<< "$out" ||
    fail "the resumed bf16 run is not in bf16 with bf16 activations: $out"
grep -q '^  gradients all-reduced in bf16' <<< "$out" || fail "the resumed run's wire is not bf16: $out"
cmp "$dir/pa/checkpoint.safetensors" "$dir/pb/checkpoint.safetensors" ||
    fail "the bf16 run resumed from shards differs from the uninterrupted one"
echo "ok: a bf16 GAN run with bf16 gradients resumes in both from sharded checkpoints, bit-exactly"
# What stays f32 under bf16 (--keep-f32, --activations) is the run's too: a resume keeps it.
"$bin" "${gan[@]}" --precision bf16 --keep-f32 g --activations f32 --max-steps 2 \
    --out "$dir/pk" > /dev/null
out=$("$bin" train --resume "$dir/pk" --threads 2 2>&1)
grep -q '^  the generator computes and stores in f32 (--keep-f32 g)' <<< "$out" ||
    fail "the resumed run lost --keep-f32 g: $out"
grep -q '^  precision: bf16 .*; activations stored in f32; ' <<< "$out" ||
    fail "the resumed run lost --activations f32: $out"
out=$("$bin" "${gan[@]}" --precision bf16 --keep-f32 both --out "$dir/pbad" 2>&1) &&
    fail "--keep-f32 both was taken"
grep -q 'expected none, g or d' <<< "$out" || fail "--keep-f32 both: the error does not name the choices: $out"
echo "ok: --keep-f32 g and --activations f32 are said in the header and kept on resume"

# PNG width and height from the IHDR chunk (bytes 16..23, big-endian).
png_size() { od -An -tu1 -j16 -N8 "$1" | awk '{print $1*16777216+$2*65536+$3*256+$4 "x" $5*16777216+$6*65536+$7*256+$8}'; }
"$bin" sample "$dir/a" --out "$dir/grid.png" > /dev/null
# 10 classes x 10 columns of 32x32 tiles, 2 pixels between and around.
[ "$(png_size "$dir/grid.png")" = "342x342" ] || fail "grid size $(png_size "$dir/grid.png")"
"$bin" sample "$dir/a" --class 3 --n 5 --out "$dir/one.png" > /dev/null
[ "$(png_size "$dir/one.png")" = "172x36" ] || fail "one-class grid size $(png_size "$dir/one.png")"
"$bin" sample "$dir/a" --raw --n 4 --out "$dir/s.idx" > /dev/null
# IDX: 4 bytes magic + 4 per dimension, then the bytes: 40 images of 32x32, 40 labels.
[ "$(stat -c %s "$dir/s.idx")" = $((16 + 40 * 32 * 32)) ] || fail "raw images: $(stat -c %s "$dir/s.idx") bytes"
[ "$(stat -c %s "$dir/s-labels.idx")" = $((8 + 40)) ] || fail "raw labels: $(stat -c %s "$dir/s-labels.idx") bytes"
[ "$(od -An -tx1 -N4 "$dir/s.idx" | tr -d ' ')" = "00000803" ] || fail "raw images' magic"
echo "ok: sample writes grids and IDX files of the expected sizes"

expect_error() { # expect_error PATTERN command...: exit code 1 and PATTERN in its stderr
    local pattern=$1 msg rc
    shift
    set +e
    msg=$("$@" 2>&1 > /dev/null); rc=$?
    set -e
    [ $rc -eq 1 ] && grep -q -- "$pattern" <<< "$msg" || fail "$* gave rc $rc: $msg"
}
expect_error "classes 0..9" "$bin" sample "$dir/a" --class 10
"$bin" train mlp --data "$data" --limit 256 --batch 64 --epochs 1 --threads 1 --quiet --out "$dir/mlp" > /dev/null
expect_error "is not a GAN run: its checkpoint holds a mlp" "$bin" sample "$dir/mlp"
mkdir "$dir/bad"
head -c 3000 "$dir/a/checkpoint.safetensors" > "$dir/bad/checkpoint.safetensors"
cp "$dir/bad/checkpoint.safetensors" "$dir/bad.before"
expect_error "bad/checkpoint.safetensors" "$bin" sample "$dir/bad"
expect_error "bad/checkpoint.safetensors" "$bin" eval "$dir/bad"
expect_error "bad/checkpoint.safetensors" "$bin" train --resume "$dir/bad"
cmp "$dir/bad.before" "$dir/bad/checkpoint.safetensors" || fail "the corrupt checkpoint was changed"
expect_error "trained without a judge" "$bin" eval "$dir/a"
expect_error "nothing-here" "$bin" sample "$dir/nothing-here"
echo "ok: bad input gets clear errors"

# A judge trained for a few steps: the scores are poor but computed, and the calibration's
# test set (the reference's first images) sits near FD 0, the noised set above it.
"$bin" train resnet20 --data "$data" --image-size 32 --limit 256 --batch 64 --epochs 1 --threads 2 --quiet \
    --out "$dir/judge" > /dev/null
out=$("$bin" eval "$dir/a" --judge "$dir/judge" --samples 200 --calibrate)
grep -Eq '^  samples +class acc +[0-9.]+%  FD +[0-9.]+  FD\(logits\) +[0-9.]+  IS +[0-9.]+  \(200 images\)$' <<< "$out" \
    || fail "eval's scores: $out"
for what in "test set (reference)" "train set" "test set, blurred" "test set, noised"; do
    grep -q "^  $what " <<< "$out" || fail "no calibration line for $what: $out"
done
fd_of() { grep "^  $1 " <<< "$out" | sed -E 's/.*  FD +([0-9.]+) .*/\1/'; }
awk -v t="$(fd_of "test set (reference)")" -v n="$(fd_of "test set, noised")" 'BEGIN { exit !(t < n) }' \
    || fail "the test set does not score closer to itself than the noised set: $out"
echo "ok: eval scores a GAN run and calibrates its judge"
