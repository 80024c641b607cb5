#!/usr/bin/env bash
# End-to-end checks of `replicator train d4pg` and `replicator eval` on a D4PG
# run, at tiny widths and budgets on cartpole-swingup:
#  1. on threads (2 learner replicas, 2 actors of 2 envs, the replay): a run
#     stopped at a learner step (--max-steps) and resumed from its directory
#     finishes the budget; the counters (env steps) and the learning curve go
#     on from where they stopped; the run directory holds the checkpoint,
#     metrics.jsonl with evaluation lines and learning_curve.png;
#  2. eval plays episodes with the saved policy and prints their returns;
#  3. it learns: after 40,000 env steps at small widths cartpole-swingup's
#     best evaluation during the run is at least 150 and the final policy's
#     return over 10 episodes at least 100 - the random policy scores 36
#     (bench/bench_env.c) and the untrained one, which does nothing, 74; runs
#     here ended at 136-514 with best evaluations of 198-514;
#  4. bad input gets a clear error: an unknown task (the message lists the
#     tasks), a batch that does not split over the replicas;
#  5. under mpirun, one rank per worker (learner, actors, replay): the same
#     run on 4 and on 5 ranks (2 learner replicas); an actor rank killed
#     mid-run ends the job, naming the rank, with the checkpoint intact.
# Usage: cli_d4pg.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; exit 1; }
tiny=(train d4pg --task cartpole-swingup --policy-layers 32,32 --critic-layers 32,32 --batch 32
      --min-replay 400 --eval-every 1000 --eval-episodes 2 --checkpoint-every 1000 --quiet)
# Learner steps in 3000 env steps: (3000 - 400) * 32 / 32.
"$bin" "${tiny[@]}" --env-steps 3000 --actors 2 --envs 2 --replicas 2 --threads 1 --max-steps 1200 \
    --out "$dir/a" > /dev/null
for f in checkpoint.safetensors metrics.jsonl learning_curve.png; do
    [ -f "$dir/a/$f" ] || fail "the stopped run wrote no $f"
done
evals_before=$(grep -c '"eval_return"' "$dir/a/metrics.jsonl")
[ "$evals_before" -ge 1 ] || fail "no evaluation before the stop: $(cat "$dir/a/metrics.jsonl")"
out=$("$bin" train --resume "$dir/a" --quiet)
grep -q "d4pg on cartpole-swingup: 2600 learner steps (1400 this run)" <<< "$out" || fail "resumed run said: $out"
# The env-step gauge goes on from the stopped run's count (1200 learner steps ~ 1600 env steps).
last=$(grep '"env_steps"' "$dir/a/metrics.jsonl" | tail -1)
steps=$(sed -E 's/.*"env_steps":([0-9.]+).*/\1/' <<< "$last")
awk -v s="$steps" 'BEGIN { exit !(s >= 2800 && s <= 4200) }' || fail "env steps at the end: $last"
evals_after=$(grep -c '"eval_return"' "$dir/a/metrics.jsonl")
[ "$evals_after" -gt "$evals_before" ] || fail "no evaluation after the resume"
# The checkpoint's curve holds every evaluation, before the stop and after the resume.
# (safetensors: an 8-byte length, then a JSON header naming each tensor's shape)
points=$(head -c 65536 "$dir/a/checkpoint.safetensors" | tr -c '[:print:]' ' ' |
         grep -o '"d4pg/curve_return":{[^}]*}' | sed -E 's/.*"shape":\[([0-9]+)\].*/\1/' || true)
[ "${points:-0}" -eq "$evals_after" ] || fail "the curve has $points points; metrics.jsonl has $evals_after evaluations"
echo "ok: a D4PG run on threads stops, resumes and finishes with its counters and curve"

out=$("$bin" eval "$dir/a" --episodes 3)
grep -Eq "d4pg on cartpole-swingup: return [0-9.]+ \+- [0-9.]+ over 3 episodes" <<< "$out" || fail "eval said: $out"
echo "ok: eval plays the saved policy"

"$bin" train d4pg --task cartpole-swingup --policy-layers 128,128 --critic-layers 256,256 --batch 128 \
    --env-steps 40000 --min-replay 1000 --eval-every 10000 --quiet --out "$dir/learn" > /dev/null
out=$("$bin" eval "$dir/learn" --episodes 10)
ret=$(sed -E 's/.*return ([0-9.]+) .*/\1/' <<< "$out")
best=$(grep -o '"eval_return":[0-9.]*' "$dir/learn/metrics.jsonl" | cut -d: -f2 | sort -g | tail -1)
awk -v r="$ret" -v b="$best" 'BEGIN { exit !(r >= 100 && b >= 150) }' \
    || fail "after 40,000 env steps the return is $ret, the best evaluation $best (random: 36, no action: 74): $out"
echo "ok: D4PG learns cartpole-swingup: return $ret after 40,000 env steps, best evaluation $best (random policy: 36)"

expect_error() { # expect_error PATTERN command...: exit code 1 and PATTERN in its stderr
    local pattern=$1 msg rc
    shift
    set +e
    msg=$("$@" 2>&1 > /dev/null); rc=$?
    set -e
    [ $rc -eq 1 ] && grep -q -- "$pattern" <<< "$msg" || fail "$* gave rc $rc: $msg"
}
# A bf16 run saves its precision and its gradients' wire type: the resume continues in them
# untold, from the sharded checkpoint (written in the background) that the stop left.
"$bin" "${tiny[@]}" --env-steps 1200 --replicas 2 --threads 1 --max-steps 200 --precision bf16 \
    --grad-dtype bf16 --checkpoint-shards 2 --background-save --out "$dir/p" > /dev/null
[ -f "$dir/p/checkpoint.index.json" ] || fail "--checkpoint-shards 2 wrote: $(ls "$dir/p")"
out=$("$bin" train --resume "$dir/p" 2>&1)
grep -q '^  precision: bf16' <<< "$out" || fail "the resumed bf16 D4PG run is not in bf16: $out"
grep -q '^  actors and evaluation act in f32' <<< "$out" || fail "the actors' precision is not named: $out"
grep -q '^  learner gradients all-reduced in bf16' <<< "$out" ||
    fail "the resumed D4PG run's wire is not bf16: $out"
grep -q "800 learner steps (600 this run)" <<< "$out" || fail "the resumed bf16 run said: $out"
echo "ok: a bf16 D4PG run resumes in bf16 with bf16 gradients from sharded checkpoints"

expect_error "cartpole-swingup" "$bin" train d4pg --task no-such-task --out "$dir/x" --quiet
expect_error "does not split over 3 learner replicas" "$bin" "${tiny[@]}" --replicas 3 --out "$dir/y"
echo "ok: bad input is named"

need_mpirun
# Rank 0 learns, ranks 1-2 act, rank 3 is the replay (and with --replicas 2, ranks 0-1 learn).
"${mpi[@]}" -np 4 "$bin" "${tiny[@]}" --env-steps 2000 --actors 2 --out "$dir/m4" > "$dir/m4.out" \
    || fail "4 ranks: $(cat "$dir/m4.out")"
grep -q "d4pg on cartpole-swingup: 1600 learner steps" "$dir/m4.out" || fail "4 ranks said: $(cat "$dir/m4.out")"
"${mpi[@]}" -np 5 "$bin" "${tiny[@]}" --env-steps 2000 --actors 2 --replicas 2 --out "$dir/m5" > "$dir/m5.out" \
    || fail "5 ranks: $(cat "$dir/m5.out")"
grep -q "d4pg on cartpole-swingup: 1600 learner steps" "$dir/m5.out" || fail "5 ranks said: $(cat "$dir/m5.out")"
echo "ok: the same run on 4 and 5 MPI ranks"

# An actor rank killed mid-run: the job ends within the timeout, the rank named, the checkpoint intact.
"${mpi[@]}" -np 4 "$bin" "${tiny[@]}" --env-steps 1000000 --actors 2 --timeout 10 --out "$dir/k" \
    > "$dir/k.out" 2>&1 &
job=$!
victim=""
for _ in $(seq 1 300); do
    if [ -z "$victim" ] && [ -f "$dir/k/checkpoint.safetensors" ]; then
        for p in $(pgrep -f -- "--out $dir/k" || true); do
            ours "$p" || continue
            tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$p
        done
        [ -n "$victim" ] && kill -KILL "$victim"
    fi
    kill -0 "$job" 2> /dev/null || break
    sleep 0.2
done
[ -n "$victim" ] || { kill_ours $(pgrep -f -- "--out $dir/k" || true); fail "no actor rank to kill"; }
t0=$SECONDS
set +e
wait "$job"
rc=$?
set -e
[ $rc -ne 0 ] || fail "the job survived a killed actor"
[ $((SECONDS - t0)) -le 60 ] || fail "the job took $((SECONDS - t0)) s to end"
grep -Eq "rank 1|worker 1" "$dir/k.out" || fail "the killed rank is not named: $(tail -5 "$dir/k.out")"
"$bin" eval "$dir/k" --episodes 1 > /dev/null || fail "the checkpoint after the kill does not load"
echo "ok: a killed actor rank ends the job, named, the checkpoint intact"
