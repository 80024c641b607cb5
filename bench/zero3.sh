#!/usr/bin/env bash
# ZeRO-3 against ZeRO-1 and ZeRO-2 (issue 31's targets), side by side in one run:
#  - memory: what the replica holding most keeps resident of its values, gradients, optimizer
#    state (Adam) and the runtime's buffers at its step's peak, against 16 bytes x P / R and the
#    planner's held (bench_zero_memory; ResNet-50 on 4 replica threads; the image size does not
#    change these);
#  - speed: ResNet-50 steps at 224 x 224, 2 images a replica, 4 replica threads, the median of 3
#    steps after the first, three interleaved rounds.
# Usage: bench/zero3.sh (from a build in build/)
set -u
cd "$(dirname "$0")/.."
lscpu | grep -E "Model name|^CPU\(s\)"
for s in zero1 zero2 zero3; do
  build/bench_zero_memory resnet50 "$s" 4 3 32
done
for round in 1 2 3; do
  for s in zero1 zero2 zero3; do
    build/bench_zero_memory resnet50 "$s" 4 4 224
  done
done
