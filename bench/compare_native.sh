#!/usr/bin/env bash
# What the portable default build costs: ResNet-20 training throughput (28x28x1, global batch
# 128, synthetic data, as bench/compare_scaling.sh) from two builds of this tree side by side,
#   build-portable  the default (no -march: baseline x86-64, SSE2)
#   build-native    -DRP_NATIVE=ON (-march=native: this machine's AVX2/AVX-512)
# alternating in rounds so the machine's noise hits both alike, for 1 replica x 2 threads and
# 2 replicas x 1 thread (what `replicator train` runs). oneDNN's convolutions and GEMM choose
# their kernels at run time either way; what differs is the library's own loops (batch norm,
# ReLU, additions, the optimizer, the collectives' reductions).
# Prints each round, the medians, and portable / native.
#
# Usage: bench/compare_native.sh [rounds]   (default 5; builds the two directories if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
for kind in portable native; do
    native=OFF
    [ $kind = native ] && native=ON
    cmake -S . -B build-$kind -DCMAKE_BUILD_TYPE=Release -DRP_NATIVE=$native -DRP_BUILD_TESTS=OFF > /dev/null
    cmake --build build-$kind -j"$(nproc)" --target replicator_cli > /dev/null
done
ips() { /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
print(max(r["images_per_s"] for r in rows))'; }
common=(--model resnet20 --batch 128 --size 28 --channels 1 --iters 20 --json)
declare -A all
names=(portable_r1x2 native_r1x2 portable_r2x1 native_r2x1)
for k in $(seq "$rounds"); do
    for kind in portable native; do
        all[${kind}_r1x2]+=" $(build-$kind/replicator bench resnet "${common[@]}" --threads 2 | ips)"
        all[${kind}_r2x1]+=" $(build-$kind/replicator bench resnet "${common[@]}" --replicas 2 --threads-per-replica 1 | ips)"
    done
    echo "round $k:"; for n in "${names[@]}"; do echo "  $n ${all[$n]}"; done
done
median() { echo "$@" | tr ' ' '\n' | sort -g | awk 'NF {v[++n]=$1} END {print v[int((n+1)/2)]}'; }
echo "medians (images/s):"
for n in "${names[@]}"; do echo "  $n $(median ${all[$n]})"; done
for layout in r1x2 r2x1; do
    p=$(median ${all[portable_$layout]})
    n=$(median ${all[native_$layout]})
    echo "  $layout portable/native: $(/usr/bin/python3 -c "print(f'{$p / $n:.3f}')")"
done
