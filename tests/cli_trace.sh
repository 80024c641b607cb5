#!/usr/bin/env bash
# End-to-end checks of --trace and of the straggler report (docs/tracing.md):
#  1. a traced ResNet-20 run on 2 replica threads: trace_check parses the file, finds every
#     event's fields, exact nesting per track, 2 workers with every step's data, forward,
#     backward, optimizer and gradient all-reduce;
#  2. traced `train sngan`, `train d4pg` (learner, actor and replay tracks), `bench resnet` and
#     async (parameter-server calls) files pass the same field and nesting checks; `trace merge`
#     names a missing input;
#  3. --slow 1:3 on 3 replicas: the log names replica 1 and its compute phase by step 10 of 20
#     (the window needs 10 steps), once (no repeat while it lasts), and the progress line
#     carries it; the same run without --slow reports no straggler;
#  4. under mpirun -np 2: one merged file with both ranks' tracks and steps, each rank's clock
#     offset within its stated bound, the ranks' gradient all-reduces overlapping in time.
# Usage: cli_trace.sh path/to/replicator path/to/trace_check
set -euo pipefail
bin=$(realpath "$1")
check=$(realpath "$2")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
fail() { echo "FAIL: $*"; exit 1; }
resnet=(train resnet20 --data "$data" --batch 32 --threads 2 --epochs 1 --no-checkpoint)

# 1. Threads.
"$bin" "${resnet[@]}" --limit 256 --replicas 2 --quiet --trace "$dir/t.json" --out "$dir/r1" \
    > /dev/null
out=$("$check" "$dir/t.json" 2 8) || fail "threads trace: $out"
echo "$out (2 replica threads)"

# 2. The other commands.
"$bin" train sngan --data "$data" --limit 256 --ch-g 8 --ch-d 8 --z-dim 16 --d-batch 16 --g-batch 16 \
    --n-dis 2 --iters 4 --sample-every 0 --checkpoint-every 0 --threads 2 --replicas 2 --quiet \
    --trace "$dir/g.json" --out "$dir/g" > /dev/null
out=$("$check" "$dir/g.json" 2 0) || fail "sngan trace: $out"
grep -q '"name":"backward"' "$dir/g.json" || fail "the sngan trace has no backward"
"$bin" train d4pg --task cartpole-swingup --policy-layers 32,32 --critic-layers 32,32 --batch 32 \
    --min-replay 400 --eval-every 1000 --eval-episodes 2 --checkpoint-every 1000 --quiet \
    --env-steps 1200 --actors 2 --envs 2 --replicas 2 --threads 1 --trace "$dir/d.json" \
    --out "$dir/d" > /dev/null
out=$("$check" "$dir/d.json" 5 0) || fail "d4pg trace: $out"
for name in '"learner 0"' '"actor 1"' '"replay 0"' '"name":"learner"' '"name":"act"' '"name":"actor"'; do
    grep -q "$name" "$dir/d.json" || fail "the d4pg trace has no $name"
done
"$bin" bench resnet --batch 16 --iters 2 --warmup 1 --replicas 2 --threads 2 --trace "$dir/b.json" \
    > /dev/null
out=$("$check" "$dir/b.json" 2 0) || fail "bench trace: $out"
grep -q '"name":"forward"' "$dir/b.json" || fail "the bench trace has no forward"
"$bin" bench sngan --ch-g 8 --ch-d 8 --d-batch 16 --g-batch 16 --n-dis 2 --iters 2 --warmup 1 \
    --threads 2 --trace "$dir/g.json" > /dev/null
out=$("$check" "$dir/g.json" 2 0) || fail "bench sngan trace: $out"
grep -q '"name":"backward"' "$dir/g.json" || fail "the bench sngan trace has no backward"
"$bin" train mlp --data "$data" --limit 512 --batch 64 --threads 2 --replicas 2 --ps 1 --regime async \
    --epochs 1 --quiet --no-checkpoint --trace "$dir/a.json" --out "$dir/a" > /dev/null
out=$("$check" "$dir/a.json" 2 0) || fail "async trace: $out"
grep -q '"name":"ps push/pull"' "$dir/a.json" || fail "the async trace has no parameter-server call"
set +e
msg=$("$bin" trace merge "$dir/m.json" "$dir/t.json" "$dir/missing.json" 2>&1); rc=$?
set -e
[ $rc -eq 1 ] && grep -q "missing.json" <<< "$msg" || fail "trace merge of a missing file: rc $rc: $msg"
echo "ok: sngan, d4pg (learner, actor, replay tracks), bench resnet and sngan, and async (ps push/pull) traces check;" \
    "merge names a missing input"

# 3. Stragglers: 20 steps of 24 on 3 replicas, progress lines every 2 steps.
out=$("$bin" "${resnet[@]}" --limit 480 --batch 24 --replicas 3 --slow 1:3 --out "$dir/s1" 2>&1) \
    || fail "--slow run: $out"
reports=$(grep -c "WARN straggler:" <<< "$out" || true)
[ "$reports" -eq 1 ] || fail "--slow 1:3: $reports straggler reports (expected 1): $out"
grep -Eq "WARN straggler: replica 1 on host [^:]+: compute [0-9.]+x the median over the last [0-9]+ steps" \
    <<< "$out" || fail "--slow 1:3: the report does not name replica 1's compute: $out"
# Named by step 10: its line comes before the progress line of step 12.
before=$(sed -n '/WARN straggler:/q;p' <<< "$out")
grep -q "step 12/20" <<< "$before" && fail "--slow 1:3: named only after step 12: $out"
grep -q "step 18/20 .*straggler: replica 1 compute" <<< "$out" \
    || fail "--slow 1:3: the progress line does not carry the straggler: $out"
out=$("$bin" "${resnet[@]}" --limit 480 --batch 24 --replicas 3 --out "$dir/s2" 2>&1) \
    || fail "plain 3-replica run: $out"
grep -q "straggler" <<< "$out" && fail "a straggler reported without --slow: $out"
echo "ok: --slow 1:3 names replica 1's compute by step 10, once; no report without --slow"

# 4. MPI.
need_mpirun # (exits here without mpirun: the checks above have passed)
"${mpi[@]}" -np 2 "$bin" "${resnet[@]}" --limit 256 --quiet --trace "$dir/mpi.json" --out "$dir/m1" \
    > /dev/null
[ ! -e "$dir/mpi.json.rank1.json" ] || fail "the per-rank files were not merged and removed"
out=$("$check" "$dir/mpi.json" 2 8 2) || fail "mpi trace: $out"
echo "$out (mpirun -np 2)"
