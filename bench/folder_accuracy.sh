#!/usr/bin/env bash
# The same images trained from a PNG folder and from the binary reader: Fashion-MNIST written as
# a torchvision ImageFolder (bench/folder_from_idx.py: 8-bit grayscale PNGs, train/ and val/),
# then ResNet-20 on the same schedule from each, for a few seeds, alternating the two readers.
# The folder run reads 3-channel images (a grayscale PNG becomes RGB, as PIL's convert) at their
# own size (--image-size 28 --resize-size 28: the evaluation transform is the identity), with
# augmentation off on both sides (the folder's is ImageNet's RandomResizedCrop, the binary
# reader's a padded crop: the comparison is of the readers, not of the recipes) and the binary
# set's mean and std. Prints each run's test accuracy and each reader's mean.
# Usage: bench/folder_accuracy.sh [EPOCHS] [SEEDS]   (default 3 epochs, seeds 1 2)
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-3}
seeds=${2:-1 2}
data=${DATA:-/usr/share/datasets/fashion-mnist}
bin=build/replicator
[ -x "$bin" ] || { echo "folder_accuracy: $bin is missing: run scripts/setup.sh" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rp_folder_acc.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 bench/folder_from_idx.py "$data" "$tmp/folder"
lscpu | grep -E "Model name|^CPU\(s\)"
common=(train resnet20 --epochs "$epochs" --batch 128 --threads 2 --no-augment --no-checkpoint)
folder=(--dataset folder --data "$tmp/folder" --image-size 28 --resize-size 28
        --mean 0.2860,0.2860,0.2860 --std 0.3530,0.3530,0.3530)
declare -A sum=([binary]=0 [folder]=0)
n=0
for seed in $seeds; do
  for reader in binary folder; do
    args=("${common[@]}" --seed "$seed" --out "$tmp/$reader-$seed")
    [ "$reader" = folder ] && args+=("${folder[@]}") || args+=(--data "$data")
    echo "$bin ${args[*]}"
    out=$("$bin" "${args[@]}" 2>&1) || { echo "$out"; exit 1; }
    acc=$(grep -o 'test accuracy [0-9.]*%' <<< "$out" | tail -1 | grep -o '[0-9.]*')
    echo "  $reader seed $seed: test accuracy $acc% ($(grep -o '[0-9]*m[0-9]*s$' <<< "$out" | tail -1))"
    sum[$reader]=$(awk -v a="${sum[$reader]}" -v b="$acc" 'BEGIN { print a + b }')
  done
  n=$((n + 1))
done
for reader in binary folder; do
  awk -v r="$reader" -v s="${sum[$reader]}" -v n="$n" \
    'BEGIN { printf "%s: mean test accuracy %.2f%% over %d seeds\n", r, s / n, n }'
done
