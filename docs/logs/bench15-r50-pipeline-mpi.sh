#!/bin/bash
# issue 15 leftovers, on an idle machine: ResNet-50's bubble on real stages, then ResNet-50 split
# across 2 MPI ranks with each schedule.
cd "$(dirname "$0")/../.." || exit 1
export OMP_WAIT_POLICY=passive
uptime
build/replicator bench pipeline --model resnet50 --batch 16 --steps 3 --warmup 1
uptime
mpi=(mpirun --oversubscribe -x OMP_WAIT_POLICY --allow-run-as-root)
for s in gpipe 1f1b; do
  rm -rf /tmp/r50mpi-$s
  /usr/bin/time -f "%e s, peak RSS %M KB" "${mpi[@]}" -np 2 build/replicator train resnet50 --dataset synthetic --batch 16 --limit 64 --epochs 1 \
     --model-parallel 2 --pipeline $s --micro-batches 4 --out /tmp/r50mpi-$s
  echo "rc=$?"
done
uptime
