#!/usr/bin/env bash
# Two builds of replicator side by side on ResNet-20 training (28x28x1, global batch 128,
# synthetic data, as bench/compare_scaling.sh): the same commands, alternating in rounds so
# the machine's noise hits both alike, for 1 replica x 2 threads and 2 replicas x 1 thread
# (cross-replica batch norm, what `replicator train` runs; 2 threads in all). For "does this change slow the
# sync path": OLD is a binary built from the commit before, NEW one built from after.
# Prints each round, the medians, and new / old.
#
# WORKLOAD=sngan measures `bench sngan` instead (the default widths and batches, 10
# iterations), in iterations per second (1000 / ms per iteration), so that above 1 is faster
# there too.
#
# Usage: bench/compare_builds.sh OLD_BINARY NEW_BINARY [rounds [bench options...]]   (default 5)
# e.g. bench/compare_builds.sh old/replicator build/replicator 3 --precision bf16
#      WORKLOAD=sngan bench/compare_builds.sh old/replicator build/replicator 6 --precision bf16
set -euo pipefail
old=$1 new=$2 rounds=${3:-5}
shift $(($# < 3 ? $# : 3))
extra=("$@")
workload=${WORKLOAD:-resnet}
rate() { /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
print(max(r["images_per_s"] if "images_per_s" in r else 1000.0 / r["ms_per_iter"] for r in rows))'; }
case $workload in
    resnet) common=(resnet --model resnet20 --batch 128 --size 28 --channels 1 --iters 20) ;;
    sngan) common=(sngan --iters 10) ;;
    *) echo "compare_builds.sh: WORKLOAD is resnet or sngan, not '$workload'" >&2; exit 2 ;;
esac
common+=(--json ${extra[@]+"${extra[@]}"})
declare -A all
names=(old_r1x2 new_r1x2 old_r2x1 new_r2x1)
for k in $(seq "$rounds"); do
    for kind in old new; do
        bin=$old
        [ $kind = new ] && bin=$new
        all[${kind}_r1x2]+=" $("$bin" bench "${common[@]}" --replicas 1 --threads 2 | rate)"
        all[${kind}_r2x1]+=" $("$bin" bench "${common[@]}" --replicas 2 --threads 2 | rate)"
    done
    echo "round $k:"; for n in "${names[@]}"; do echo "  $n ${all[$n]}"; done
done
median() { echo "$@" | tr ' ' '\n' | sort -g | awk 'NF {v[++n]=$1} END {print v[int((n+1)/2)]}'; }
echo "medians ($([ "$workload" = resnet ] && echo images || echo iterations)/s):"
for n in "${names[@]}"; do echo "  $n $(median ${all[$n]})"; done
for layout in r1x2 r2x1; do
    o=$(median ${all[old_$layout]}) n=$(median ${all[new_$layout]})
    echo "  $layout new/old $(/usr/bin/python3 -c "print(f'{$n/$o:.3f}')")"
done
