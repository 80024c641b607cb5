#!/usr/bin/env bash
# ZeRO-3 against ZeRO-1 and ZeRO-2 (issue 31's targets), side by side in one run:
#  - memory: what the replica holding most keeps resident of its values, gradients, optimizer
#    state (Adam) and the runtime's buffers at its step's peak, against 16 bytes x P / R and the
#    planner's held (bench_zero_memory; ResNet-50 on 4 replica threads; the image size does not
#    change these);
#  - speed: `replicator train resnet50` on synthetic 224 x 224 images, 4 replica threads, a
#    global batch of 8, 12 steps (its images/s over the epoch, and the run's CPU time: user and
#    system seconds), ROUNDS interleaved rounds (3), for --zero 1, 2, 3 and 3 --prefetch.
# With OTHER, a second build directory (another commit's, e.g. `git worktree add ../old REV`
# built there), every round runs its replicator too, interleaved with this one's (the memory
# part is this build's only): how a change moved the ratios.
# Usage: bench/zero3.sh [ROUNDS] [OTHER] (from a build in build/)
set -u
cd "$(dirname "$0")/.."
rounds=${1:-3}
builds=(build)
[ -n "${2:-}" ] && builds+=("$2")
lscpu | grep -E "Model name|^CPU\(s\)"
for s in zero1 zero2 zero3 zero3+prefetch; do
  build/bench_zero_memory resnet50 "$s" 4 3 32
done
TIMEFORMAT="cpu %U user %S sys %R wall"
for round in $(seq "$rounds"); do
  for b in "${builds[@]}"; do
    for z in 1 2 3 "3 --prefetch"; do
      read -ra zero <<< "$z"
      # --prefetch is newer than some builds: a build without it says so and is skipped.
      out=$( { time "$b/replicator" train resnet50 --dataset synthetic --limit 96 --batch 8 \
               --threads 2 --threads-per-replica 1 --replicas 4 --zero "${zero[@]}" --epochs 1 \
               --no-checkpoint --out /tmp/zero3-bench-run; } 2>&1)
      rate=$(grep -o '[0-9.]* img/s' <<< "$out" | tail -1)
      [ -n "$rate" ] || rate="(no run: $(grep -m1 -i 'error\|unknown' <<< "$out"))"
      label=""
      [ ${#builds[@]} -gt 1 ] && label=" $b"
      echo "round $round$label --zero $z: $rate  $(grep -o 'cpu .*wall' <<< "$out" | tail -1)"
    done
  done
done
