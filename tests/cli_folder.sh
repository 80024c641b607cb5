#!/usr/bin/env bash
# `replicator train --dataset folder` end to end on a tiny dataset of JPEGs and PNGs that
# folder_make writes (an ImageFolder tree, the same files as list files and as WebDataset
# shards):
#  1. ResNet-20 trains and evaluates on the tree; `replicator eval` reads the run back;
#  2. a run stopped by --max-steps and resumed (on another --loader-threads) ends with a
#     checkpoint byte-identical to an uninterrupted run's: decoding and augmentation are keyed
#     by (seed, epoch, sample), not by the threads or the stop;
#  3. list:DIR and tar:DIR train exactly as the tree does (the same metrics, line for line);
#  4. a truncated JPEG stops the run with an error naming it, or with --skip-bad is counted
#     and skipped; a missing val/ is named; folder options on another dataset are refused.
# Usage: cli_folder.sh path/to/replicator path/to/folder_make
set -euo pipefail
bin=$(realpath "$1")
make_folder=$(realpath "$2")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$make_folder" "$dir/data" 3 16 6 40
common=(--dataset folder --image-size 32 --batch 16 --threads 1 --quiet)

# 1. Train and evaluate.
out=$("$bin" train resnet20 "${common[@]}" --data "$dir/data" --epochs 2 --loader-threads 2 \
    --out "$dir/a" 2>&1) || fail "train on the folder: $out"
echo "$out" | grep -q "resnet20 on data/train: test accuracy" || fail "no summary: $out"
[ -f "$dir/a/checkpoint.safetensors" ] || fail "no checkpoint"
out=$("$bin" eval "$dir/a" --threads 1 2>&1) || fail "eval: $out"
echo "$out" | grep -q "on data/val: test accuracy .*(18 images" || fail "eval: $out"
echo "ok: trains and evaluates on an image folder"

# 2. Stop and resume: the same checkpoint, bit for bit.
"$bin" train resnet20 "${common[@]}" --data "$dir/data" --epochs 2 --loader-threads 1 \
    --max-steps 4 --out "$dir/b" > /dev/null 2>&1 || fail "train --max-steps"
"$bin" train --resume "$dir/b" --threads 1 --loader-threads 3 --quiet > /dev/null 2>&1 \
    || fail "resume"
cmp "$dir/a/checkpoint.safetensors" "$dir/b/checkpoint.safetensors" \
    || fail "the resumed run's checkpoint differs from the uninterrupted one's"
echo "ok: a resumed run is bit-exact (and independent of --loader-threads)"

# 3. List files and shards: the same training, metric for metric.
norate() { sed -E 's/,"images_per_s":[0-9.]+//' "$1/metrics.jsonl"; }
for spec in list tar; do
    "$bin" train resnet20 "${common[@]}" --data "$spec:$dir/data/$spec" --epochs 2 \
        --out "$dir/$spec" > /dev/null 2>&1 || fail "train on $spec:"
    diff <(norate "$dir/a") <(norate "$dir/$spec") > /dev/null \
        || fail "$spec: trained differently from the tree"
done
echo "ok: list:DIR and tar:DIR train as the tree does"

# 4. Bad input.
head -c 300 "$dir/data/train/class1/000.jpg" > "$dir/data/train/class1/000b.jpg"
if out=$("$bin" train resnet20 "${common[@]}" --data "$dir/data" --epochs 1 --out "$dir/c" 2>&1)
then fail "a truncated JPEG did not stop the run"; fi
echo "$out" | grep -q "train/class1/000b.jpg" || fail "the error does not name the file: $out"
out=$("$bin" train resnet20 "${common[@]}" --data "$dir/data" --epochs 1 --skip-bad \
    --out "$dir/d" 2>&1) || fail "--skip-bad: $out"
echo "$out" | grep -q "1 image file could not be decoded and was skipped" || fail "--skip-bad: $out"
echo "$out" | grep -q "000b.jpg" || fail "--skip-bad does not name the file: $out"
rm "$dir/data/train/class1/000b.jpg"
mv "$dir/data/val" "$dir/data/val.away"
if out=$("$bin" train resnet20 "${common[@]}" --data "$dir/data" --epochs 1 --out "$dir/e" 2>&1)
then fail "a missing val/ was accepted"; fi
echo "$out" | grep -q "$dir/data/val" || fail "the error does not name val/: $out"
mv "$dir/data/val.away" "$dir/data/val"
if out=$("$bin" train resnet20 --skip-bad --epochs 1 2>&1); then fail "--skip-bad on fashion-mnist"; fi
echo "$out" | grep -q "is for image files" || fail "--skip-bad on fashion-mnist: $out"
echo "ok: bad files are named, or skipped and counted"
