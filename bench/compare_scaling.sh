#!/usr/bin/env bash
# Data-parallel scaling of ResNet-20 training (28x28x1, global batch 128,
# synthetic data) on this machine, side by side in rounds so the shared
# machine's noise hits every configuration alike:
#   replicator 1 replica x 2 threads, 2 replicas x 1 thread (cross-replica
#   batch norm, as `train --replicas 2` runs, and local batch norm, as plain
#   DDP; and cross-replica in bf16, --precision bf16), PyTorch single process
#   2 threads and PyTorch DistributedDataParallel (gloo, 2 processes x 1
#   thread, local batch norm), each the fastest of NHWC/NCHW in f32 and in
#   bf16 autocast (PyTorch at its best).
# Each round also measures the GEMM ceiling (oneDNN's sgemm on 1024^3, 2 threads, the best of
# bench_kernels' two timings of it) and turns it into images/s at ResNet-20's 187 MFLOP per
# training image (3 x the forward pass's multiply-adds x 2); the medians give each
# configuration's fraction of it (issue 17: at least 90%).
# Prints each round and the medians.
#
# Usage: bench/compare_scaling.sh [rounds]   (build first: scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
ips() { /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
print(max(r["images_per_s"] for r in rows))'; }
common=(--model resnet20 --batch 128 --size 28 --channels 1 --iters 20 --json)
declare -A all
names=(r1x2 r2x1_cross r2x1_local r2x1_cross_bf16 torch_1x2 torch_ddp_2x1 gemm_ceiling)
for k in $(seq "$rounds"); do
    gflops=$(build/bench_kernels --only a --threads 2 --rounds 5 | awk '/square 1024x1024x1024/ { print $4; getline; print $1 }' | sort -g | tail -1)
    all[gemm_ceiling]+=" $(awk -v g="$gflops" 'BEGIN { printf "%.1f", g / 0.187 }')"
    all[r1x2]+=" $(build/replicator bench resnet "${common[@]}" --threads 2 | ips)"
    all[r2x1_cross]+=" $(build/replicator bench resnet "${common[@]}" --replicas 2 --threads-per-replica 1 | ips)"
    all[r2x1_local]+=" $(build/replicator bench resnet "${common[@]}" --replicas 2 --threads-per-replica 1 --local-bn | ips)"
    all[r2x1_cross_bf16]+=" $(build/replicator bench resnet "${common[@]}" --replicas 2 --threads-per-replica 1 --precision bf16 | ips)"
    all[torch_1x2]+=" $(bench/torch_env.sh --model resnet20 --batch 128 --iters 20 --threads 2 --format both --precision both --json 2>/dev/null | ips)"
    # DDP takes one memory format and precision per run: all four, keep the fastest.
    all[torch_ddp_2x1]+=" $(for f in nchw channels_last; do for p in f32 bf16; do SCRIPT=bench/resnet_torch_ddp.py \
        timeout 600 bench/torch_env.sh --threads 1 --batch 128 --iters 20 --format $f --precision $p --json \
        2>/dev/null; done; done | ips)"
    echo "round $k:"; for n in "${names[@]}"; do echo "  $n ${all[$n]}"; done
done
echo "medians (global images/s; gemm_ceiling: the GEMM's GFLOP/s over 0.187 GFLOP per image):"
declare -A med
for n in "${names[@]}"; do
    med[$n]=$(echo ${all[$n]} | tr ' ' '\n' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
    echo "  $n ${med[$n]}"
done
echo "fraction of the (f32) GEMM ceiling:"
for n in "${names[@]}"; do
    [ "$n" = gemm_ceiling ] || awk -v a="${med[$n]}" -v c="${med[gemm_ceiling]}" -v n="$n" 'BEGIN { printf "  %s %.2f\n", n, a / c }'
done
