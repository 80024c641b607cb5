#!/usr/bin/env bash
# End-to-end checks of `replicator train --regime async` on a small subset of
# Fashion-MNIST:
#  1. one async replica is plain SGD through the server: its parameters,
#     optimizer slots, step count and position equal a sync run's bit for bit;
#  2. an async run interrupted (--max-steps) and resumed writes the same
#     checkpoint, byte for byte, as the uninterrupted run (one replica: the
#     only async layout that is deterministic);
#  3. three async replicas with two in-process servers train (the MLP beats
#     chance by far) and say so in the header; a sync checkpoint resumes async;
#     SIGINT stops an async run with a checkpoint that resumes;
#  4. under mpirun: one replica rank and one server rank write the same
#     checkpoint as the threads run of 2.; two replica ranks and one server
#     train from the CLI and the run resumes on threads; 4 ranks with 2 servers.
# Usage: cli_async.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
common=(--data "$data" --limit 1024 --batch 64 --threads 1 --quiet --epochs 2 --lr 0.05)
fail() { echo "FAIL: $*"; exit 1; }

# data_of FILE: the tensor bytes of a checkpoint, without its JSON header (which holds the
# configuration, and so the regime).
data_of() {
    local n
    n=$(od -An -t u8 -N8 "$1" | tr -d ' ')
    tail -c +$((9 + n)) "$1"
}

# 1. async with one replica = sync (the same --lr: the MLP's async default is lower).
"$bin" train mlp "${common[@]}" --out "$dir/sync" > /dev/null
"$bin" train mlp "${common[@]}" --regime async --out "$dir/async" > /dev/null
cmp <(data_of "$dir/sync/checkpoint.safetensors") <(data_of "$dir/async/checkpoint.safetensors") \
    || fail "one async replica differs from sync training"
echo "ok: one async replica is bitwise sync training (parameters, momentum, steps, position)"

# 2. Interrupted and resumed = uninterrupted.
"$bin" train mlp "${common[@]}" --regime async --max-steps 11 --out "$dir/async-b" > /dev/null
"$bin" train --resume "$dir/async-b" --threads 1 --quiet > /dev/null
cmp "$dir/async/checkpoint.safetensors" "$dir/async-b/checkpoint.safetensors" \
    || fail "the resumed async run differs from the uninterrupted one"
echo "ok: an async run resumes bit-exactly"

# 3. Three replicas, two servers (a momentum the asynchrony tolerates: docs/training.md).
out=$("$bin" train mlp --data "$data" --limit 2048 --batch 64 --threads 2 --epochs 2 --regime async \
    --replicas 3 --ps 2 --momentum 0.5 --out "$dir/three" 2>&1) || fail "3 async replicas: $out"
grep -q "3 replicas x 1 threads (threads, async: 2 parameter-server shards, staleness unbounded)" <<< "$out" \
    || fail "3 async replicas: header: $out"
grep -q "lr 0.02 cosine" <<< "$out" || fail "the MLP's async default lr is not 0.02: $out"
acc=$(echo "$out" | sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a > 60) }' || fail "3 async replicas: test accuracy $acc%"
out=$("$bin" train --resume "$dir/sync" --regime async --replicas 2 --epochs 3 --threads 2 2>&1) \
    || fail "a sync run resumed async: $out"
grep -q "after 3 epochs" <<< "$out" || fail "a sync run resumed async did not finish: $out"
echo "ok: 3 async replicas on 2 servers reach $acc%; a sync run resumes async"

# SIGINT stops every async replica at its next batch; the servers' state is checkpointed at the
# position all of them reached, and the run resumes from it.
set +e
"$bin" train mlp --data "$data" --threads 2 --quiet --epochs 50 --regime async --replicas 3 \
    --out "$dir/sig" > /dev/null 2>&1 &
pid=$!
for _ in $(seq 200); do [ -s "$dir/sig/metrics.jsonl" ] && break; sleep 0.1; done
kill -INT $pid
wait $pid
rc=$?
set -e
[ $rc -eq 130 ] || fail "async SIGINT: exit code $rc, expected 130"
out=$("$bin" train --resume "$dir/sig" --epochs 4 --threads 2 2>&1) || fail "resuming an interrupted async run: $out"
grep -Eq "resumed from .* at epoch [1-4] step [0-9]+" <<< "$out" || fail "async SIGINT: no resume position: $out"
grep -q "after 4 epochs" <<< "$out" || fail "the interrupted async run did not finish: $out"
echo "ok: SIGINT stops async replicas with a resumable checkpoint"

need_mpirun   # (exits here without mpirun: the checks above have passed)

# 4. MPI: rank 1 serves rank 0; the same bits as the in-process server.
"${mpi[@]}" -np 2 "$bin" train mlp "${common[@]}" --regime async --ps 1 --out "$dir/mpi-1" > /dev/null
cmp "$dir/async/checkpoint.safetensors" "$dir/mpi-1/checkpoint.safetensors" \
    || fail "one replica rank with one server rank differs from the threads backend"
out=$("${mpi[@]}" -np 3 "$bin" train mlp --data "$data" --limit 2048 --batch 64 --threads 1 --epochs 2 \
    --regime async --ps 1 --momentum 0.5 --max-steps 40 --out "$dir/mpi-2" 2>&1) || fail "2 ranks + 1 server: $out"
grep -q "2 replicas (2 ranks x 1) x 1 threads (mpi, async: 1 parameter-server rank, staleness unbounded)" <<< "$out" \
    || fail "2 ranks + 1 server: header: $out"
[ "$(echo "$out" | grep -c "run directory")" -eq 1 ] || fail "more than one rank printed the header: $out"
out=$("$bin" train --resume "$dir/mpi-2" --threads 2 --replicas 2 2>&1) || fail "resuming the MPI run on threads: $out"
acc=$(echo "$out" | sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a > 60) }' || fail "2 async ranks then 2 threads: test accuracy $acc%"
out=$("${mpi[@]}" -np 4 "$bin" train mlp "${common[@]}" --regime async --ps 2 --momentum 0.5 --out "$dir/mpi-3" 2>&1) \
    || fail "2 ranks + 2 servers: $out"
grep -q "after 2 epochs" <<< "$out" || fail "2 ranks + 2 servers did not finish: $out"
echo "ok: MPI: 1 rank + 1 server = threads bitwise; 2 + 1 trains ($acc% after resuming on threads); 2 + 2"
echo "all async cli checks passed"
