#!/usr/bin/env bash
# The flagship path of issue 30: `replicator train resnet50 --dataset folder` end to end on a
# generated folder of ImageNet-like JPEGs (bench/folder_torch.py --make: mostly 500x375, quality
# 90), at 224x224 with torchvision's training recipe. It checks that a run stopped halfway and
# resumed writes the uninterrupted run's checkpoint byte for byte, and measures whether the
# loader keeps up: the training images/s against what the loader alone decodes and augments
# per core (build/bench_loader --threads 1) on the same folder.
# Usage: bench/folder_flagship.sh [IMAGES] [BATCH]   (default 64 images, batch 8: 8 steps)
set -euo pipefail
cd "$(dirname "$0")/.."
images=${1:-64}
batch=${2:-8}
bin=build/replicator
[ -x "$bin" ] && [ -x build/bench_loader ] || { echo "folder_flagship: build first (scripts/setup.sh)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rp_flagship.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 bench/folder_torch.py --make "$tmp/data" --images "$images" --quality 90
# val/: the first 4 images of each class (an evaluation split the loader reads like train/'s).
for c in "$tmp"/data/train/*/; do
  mkdir -p "$tmp/data/val/$(basename "$c")"
  find "$c" -name '*.jpg' | sort | head -4 | xargs -I{} cp {} "$tmp/data/val/$(basename "$c")/"
done
lscpu | grep -E "Model name|^CPU\(s\)"
common=(train resnet50 --dataset folder --data "$tmp/data" --batch "$batch" --epochs 1 --threads 2)
echo "$bin ${common[*]} --out A"
out=$("$bin" "${common[@]}" --out "$tmp/a" 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep -E "^replicator train|img/s|test accuracy" | tail -4
train_rate=$(grep -o '[0-9.]* img/s' <<< "$out" | tail -1 | grep -o '[0-9.]*')
"$bin" "${common[@]}" --out "$tmp/b" --max-steps $((images / batch / 2)) > /dev/null 2>&1
"$bin" train --resume "$tmp/b" --threads 2 > /dev/null 2>&1
if cmp "$tmp/a/checkpoint.safetensors" "$tmp/b/checkpoint.safetensors"; then
  echo "resume: stopped at step $((images / batch / 2)) and resumed, the checkpoint is the uninterrupted run's, byte for byte"
else
  echo "resume: FAIL: the resumed run's checkpoint differs"; exit 1
fi
loader=$(build/bench_loader --folder "$tmp/data" --threads 1 --batch "$batch" --size 224 --seconds 5 --json)
echo "loader alone: $loader"
per_core=$(grep -o '"images_per_s": *[0-9.]*' <<< "$loader" | grep -o '[0-9.]*$')
awk -v t="$train_rate" -v l="$per_core" 'BEGIN {
  printf "training %.2f img/s; the loader decodes and augments %.1f img/s on one core: input needs %.1f%% of one core (%.2f%% of the 2)\n", t, l, 100 * t / l, 50 * t / l }'
