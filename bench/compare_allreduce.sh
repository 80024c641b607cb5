#!/usr/bin/env bash
# Side-by-side all-reduce bandwidth on this machine: replicator's threads
# backend (`replicator bench allreduce`, with memcpy's bound at each size)
# and OpenMPI's MPI_Allreduce (bench/mpi/allreduce_mpi.c under mpirun), for
# 2 and 4 members, 4 KiB to 256 MiB, f32 sum, out of place.
#
# Usage: bench/compare_allreduce.sh   (build first: scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
mpirun_flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && mpirun_flags+=(--allow-run-as-root)
for n in 2 4; do
    echo "== $n members: replicator (threads backend)"
    build/replicator bench allreduce --replicas "$n"
    echo "== $n ranks: OpenMPI MPI_Allreduce"
    mpirun "${mpirun_flags[@]}" -np "$n" build/allreduce_mpi
done
