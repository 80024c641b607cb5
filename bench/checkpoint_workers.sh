#!/usr/bin/env bash
# Checkpoints written by every worker against the gathered sharded checkpoint: ResNet-50 with
# SGD with momentum (the classifier's optimizer) on 4 replica threads with ZeRO-3
# (docs/benchmarks.md, "Checkpoints written by every worker"):
#  - the cost per step of a checkpoint every 10 steps, inline and in the background, against no
#    checkpoint (bench_checkpoint: median of 5 interleaved runs per mode), for 4 shards of the
#    gathered state and for one shard per worker;
#  - the peak resident memory of `replicator train` saving at the epoch's end either way (two
#    interleaved rounds; /usr/bin/time -v).
# Usage: bench/checkpoint_workers.sh [steps] (default 30); run on a quiet machine.
set -euo pipefail
steps=${1:-30}
lscpu | grep -E '^(CPU\(s\)|Model name)'
date
for shards in 4 -1; do
  build/bench_checkpoint resnet50 synthetic x "$steps" 10 "$shards" 4 8 /tmp 3
done
date
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for round in 1 2; do
  for how in "--checkpoint-shards 4" "--checkpoint-per-worker"; do
    read -ra flag <<< "$how"
    rm -rf "$dir/run"
    /usr/bin/time -v build/replicator train resnet50 --dataset synthetic --limit 32 --batch 8 \
      --threads 2 --threads-per-replica 1 --replicas 4 --zero 3 --epochs 1 --quiet \
      "${flag[@]}" --out "$dir/run" > /dev/null 2> "$dir/time.txt"
    echo "round $round $how: peak RSS $(grep -o 'Maximum resident set size (kbytes): [0-9]*' \
      "$dir/time.txt" | grep -o '[0-9]*$') KiB"
  done
done
date
