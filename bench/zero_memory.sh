#!/usr/bin/env bash
# ZeRO-2 vs ZeRO-1 vs sync: peak RSS of ResNet-50 on 4 replica threads (2 steps), and ResNet-20
# step speed on 2 replicas, interleaved rounds.
set -u
cd "$(dirname "$0")/.."
lscpu | grep -E "Model name|^CPU\(s\)"
for round in 1 2; do
for z in "" "--zero" "--zero 2"; do
  /usr/bin/time -f "resnet50 4 replicas ${z:-sync}: peak RSS %M KiB, %e s" build/replicator train resnet50 --dataset synthetic --limit 8 --batch 4 --threads 2 --threads-per-replica 1 --replicas 4 $z --max-steps 2 --no-checkpoint --quiet 2>&1 | tail -1
done
done
for round in 1 2 3; do
for z in "--zero" "--zero 2"; do
  out=$(build/replicator train resnet20 --data /usr/share/datasets/fashion-mnist --limit 4096 --batch 64 --threads 2 --threads-per-replica 1 --replicas 2 $z --epochs 1 --no-checkpoint 2>&1)
  echo "resnet20 2 replicas $z round $round: $(grep -o '[0-9.]* img/s' <<< "$out" | tail -1) $(grep -E 'after|images/s' <<< "$out" | tail -1)"
done
done
