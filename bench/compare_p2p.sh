#!/usr/bin/env bash
# Point-to-point, side by side in one run:
#  1. ping-pong between 2 MPI ranks, 8 B to 64 MiB: OpenMPI's MPI_Send/MPI_Recv
#     (raw) against rp_comm_send/rp_comm_recv on the MPI backend (ours),
#     alternating rounds in one process, medians, and ours/raw;
#  2. the threads backend's ping-pong between 2 threads next to memcpy of the
#     same bytes;
#  3. the call check's cost on all-reduce (4 KiB to 1 MiB) at 2, 4 and 8 ranks:
#     the hashed check against the full exchange of calls before every call.
#
# Usage: bench/compare_p2p.sh [rounds]   (build first: scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
mpirun_flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && mpirun_flags+=(--allow-run-as-root)
export OMP_WAIT_POLICY=passive
run() { mpirun "${mpirun_flags[@]}" -x OMP_WAIT_POLICY "$@"; }

echo "== ping-pong: MPI_Send/MPI_Recv (raw) against rp_comm_send/recv (ours), 2 ranks, $rounds rounds"
run -np 2 build/p2p_mpi --rounds "$rounds"
echo "== ping-pong: the threads backend (2 threads) against memcpy"
build/p2p_mpi --threads --rounds "$rounds"
echo "== the call check's cost: all-reduce, hashed check against the full exchange"
for np in 2 4 8; do
    run -np "$np" build/allreduce_mpi --check --min 4K --max 1M --rounds "$rounds"
done
