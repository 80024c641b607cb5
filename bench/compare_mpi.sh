#!/usr/bin/env bash
# The MPI backend on this machine, side by side in one run:
#  1. all-reduce (f32 sum, 4 KiB to 256 MiB): OpenMPI's MPI_Allreduce against
#     replicator's flat MPI backend on 2, 4 and 8 ranks (oversubscribed where
#     needed; alternating rounds in one process, medians, ours/raw per size),
#     and the hierarchical backend on 2 ranks x 2 threads (the same 4 members
#     as flat 4 ranks);
#  2. ResNet-20 training images/s (synthetic 28x28x1, global batch 128,
#     cross-replica batch norm): 2 replicas as 2 threads of one process
#     against 2 MPI ranks of 1 thread, in alternating rounds, and the medians.
#
# Usage: bench/compare_mpi.sh [rounds]   (build first: scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
mpirun_flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && mpirun_flags+=(--allow-run-as-root)
export OMP_WAIT_POLICY=passive
run() { mpirun "${mpirun_flags[@]}" -x OMP_WAIT_POLICY "$@"; }

echo "== all-reduce: OpenMPI MPI_Allreduce (raw) against replicator's MPI backend (ours), $rounds rounds"
run -np 2 build/allreduce_mpi --rounds "$rounds"
run -np 4 build/allreduce_mpi --rounds "$rounds"
run -np 8 build/allreduce_mpi --rounds "$rounds"
echo "== all-reduce: hierarchical, 2 ranks x 2 threads (compare with ours_us of 4 ranks above)"
run -np 2 build/allreduce_mpi --threads 2 --rounds "$rounds"

echo "== ResNet-20 training, global batch 128: 2 threads against 2 MPI ranks"
ips() { /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
print(rows[-1]["images_per_s"])'; }
common=(--model resnet20 --batch 128 --size 28 --channels 1 --iters 20 --json)
threads="" ranks=""
for k in $(seq "$rounds"); do
    t=$(build/replicator bench resnet "${common[@]}" --replicas 2 --threads-per-replica 1 | ips)
    m=$(run -np 2 build/replicator bench resnet "${common[@]}" --threads-per-replica 1 | ips)
    threads+=" $t" ranks+=" $m"
    echo "  round $k: 2 threads $t, 2 ranks $m images/s"
done
median() { echo "$@" | tr ' ' '\n' | sort -g | awk 'NF {v[++n]=$1} END {print v[int((n+1)/2)]}'; }
mt=$(median $threads) mr=$(median $ranks)
echo "medians: 2 threads $mt, 2 ranks $mr images/s; ranks/threads $(/usr/bin/python3 -c "print(round($mr/$mt, 3))")"
