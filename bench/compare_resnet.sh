#!/usr/bin/env bash
# Side-by-side ResNet training throughput: replicator against PyTorch 1.13
# (Debian's python3-torch, at its best settings: OPENBLAS_NUM_THREADS=1, its
# thread count set, channels-last and NCHW both tried), alternating the two
# in rounds so the shared machine's noise hits both alike. Prints each round
# and the median ratio.
#
# Usage: bench/compare_resnet.sh [resnet20|resnet50] [threads] [rounds]
#        (build first: scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-resnet20}
threads=${2:-2}
rounds=${3:-3}
if [ "$model" = resnet20 ]; then
    ours=(build/replicator bench resnet --model resnet20 --batch 128 --size 28 --channels 1 --iters 20 --threads "$threads" --json)
    theirs=(bench/torch_env.sh --model resnet20 --batch 128 --iters 20 --threads "$threads" --format both --json)
else
    ours=(build/replicator bench resnet --model resnet50 --batch 32 --iters 3 --warmup 1 --threads "$threads" --json)
    theirs=(bench/torch_env.sh --model resnet50 --batch 32 --iters 3 --threads "$threads" --format both --json)
fi
ratios=()
for r in $(seq "$rounds"); do
    a=$("${ours[@]}" | /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["images_per_s"])')
    # The faster of PyTorch's two memory formats.
    b=$("${theirs[@]}" 2>/dev/null | /usr/bin/python3 -c '
import json, sys
best = max((json.loads(l) for l in sys.stdin if l.startswith("{")), key=lambda r: r["images_per_s"])
print(best["images_per_s"], best["format"])')
    ratio=$(awk -v a="$a" -v b="${b%% *}" 'BEGIN { printf "%.3f", a / b }')
    ratios+=("$ratio")
    echo "round $r: replicator $a img/s, pytorch ${b%% *} img/s (${b##* }): ratio $ratio"
done
printf '%s\n' "${ratios[@]}" | sort -g | awk '{ v[NR] = $1 } END { printf "median ratio replicator/pytorch: %s (%s, %s threads, %d rounds)\n", v[int((NR + 1) / 2)], "'"$model"'", "'"$threads"'", NR }'
