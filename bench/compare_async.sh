#!/usr/bin/env bash
# Asynchronous against synchronous training of ResNet-20 on Fashion-MNIST.
#
#   bench/compare_async.sh straggler [rounds]
#     Global examples/s with 3 replicas of 64 images a step, when replica 2
#     is slowed 3x (`--slow 2:3`: it sleeps twice its step time each step)
#     and when none is: sync (`--batch 192 --replicas 3`, 64 each) against
#     async (`--batch 64 --replicas 3 --ps 1`), on threads and on MPI ranks
#     (3 ranks; async adds a 4th, the server). One epoch of the first 7,680
#     images each; configurations interleaved in rounds; medians.
#
#   bench/compare_async.sh servers
#     `replicator bench ps`: updates/s of a ResNet-20-sized set (272,186
#     floats, momentum) through 1 and 2 servers, threads and MPI.
#
#   bench/compare_async.sh accuracy [epochs]
#     Test accuracy after the same examples (default 4 epochs of the 60,000
#     images, the same batches and learning-rate schedule): sync (the default
#     2 replicas) against async with 3 replicas at the sync recipe's lr 0.1 and
#     momentum 0.9, and at lower ones (docs/training.md).
#
# Build first: scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(pwd)/build/replicator
mode=${1:-straggler}
mpi=(mpirun --oversubscribe -x OMP_WAIT_POLICY=passive)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
rate() { sed -n 's/.*epoch 1\/1  train loss .*  \([0-9]*\) img\/s .*/\1/p' | tail -1; }

case $mode in
straggler)
    rounds=${2:-3}
    common=(resnet20 --limit 7680 --epochs 1 --no-checkpoint --threads 2)
    declare -A all
    names=(sync_threads async_threads sync_threads_slow async_threads_slow sync_mpi async_mpi sync_mpi_slow async_mpi_slow)
    for k in $(seq "$rounds"); do
        for slow in "" _slow; do
            s=(); [ -n "$slow" ] && s=(--slow 2:3)
            all[sync_threads$slow]+=" $("$bin" train "${common[@]}" --batch 192 --replicas 3 "${s[@]}" --out "$tmp/a" 2>&1 | rate)"
            all[async_threads$slow]+=" $("$bin" train "${common[@]}" --batch 64 --replicas 3 --regime async "${s[@]}" --out "$tmp/b" 2>&1 | rate)"
            all[sync_mpi$slow]+=" $("${mpi[@]}" -np 3 "$bin" train "${common[@]}" --threads 1 --batch 192 "${s[@]}" --out "$tmp/c" 2>&1 | rate)"
            all[async_mpi$slow]+=" $("${mpi[@]}" -np 4 "$bin" train "${common[@]}" --threads 1 --batch 64 --regime async --ps 1 "${s[@]}" --out "$tmp/d" 2>&1 | rate)"
        done
        echo "round $k:"; for n in "${names[@]}"; do echo "  $n ${all[$n]}"; done
    done
    echo "medians (global images/s):"
    for n in "${names[@]}"; do echo "  $n $(echo "${all[$n]}" | median)"; done
    ;;
servers)
    for s in 1 2; do
        "$bin" bench ps --replicas 3 --ps "$s" --seconds 3
        "${mpi[@]}" -np $((3 + s)) "$bin" bench ps --ps "$s" --seconds 3
    done
    ;;
accuracy)
    epochs=${2:-4}
    for cfg in "sync|" "async_lr0.1_m0.9|--regime async --replicas 3 --lr 0.1 --momentum 0.9" \
               "async_lr0.05_m0.6|--regime async --replicas 3 --lr 0.05 --momentum 0.6" \
               "async_lr0.05_m0.9|--regime async --replicas 3 --lr 0.05 --momentum 0.9"; do
        name=${cfg%%|*}
        read -r -a args <<< "${cfg#*|}"
        t0=$(date +%s)
        line=$("$bin" train resnet20 --epochs "$epochs" "${args[@]}" --out "$tmp/$name" --quiet 2>&1 | tail -1)
        echo "$name ($(( $(date +%s) - t0 ))s): $line"
    done
    ;;
*)
    echo "usage: bench/compare_async.sh straggler [rounds] | servers | accuracy [epochs]" >&2
    exit 2
    ;;
esac
