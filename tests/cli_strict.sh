#!/usr/bin/env bash
# The command on the strict kernel table (RP_KERNELS=strict: tensor storage that host code cannot
# read outside kernel calls, and kernels that refuse host memory), against the cpu table whose
# kernels it runs, so every run must give the cpu table's bytes:
#  1. `train mlp`, 20 steps on a subset of Fashion-MNIST (two evaluations on the way): the same
#     checkpoint and metrics.jsonl (but for the rate); resumed for 4 more steps, the same again;
#     `eval` of the run prints the same accuracy;
#  2. ResNet-20 on 2 replicas (cross-replica batch norm, the gradient all-reduce), 3 steps: the
#     same checkpoint;
#  3. SN-GAN on 2 replicas, 4 iterations: the same checkpoint and sample grid;
#  4. a D4PG job (a learner on 2 replicas, an actor, the replay) runs its 50 learner steps,
#     saves, and `eval` plays its policy (actors and learner interleave as they run: no bytes to
#     compare).
# A host read of storage kills the run with SIGSEGV and the strict table's message naming the
# site; a host buffer given to a kernel aborts it.
# Usage: cli_strict.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
fail() { echo "FAIL: $*"; exit 1; }
export OMP_WAIT_POLICY=passive

# run TABLE OUT ARGS...: the command on kernel table TABLE (cpu or strict), its output in OUT.log.
run() {
    local table=$1 out=$2
    shift 2
    RP_KERNELS=$table "$bin" "$@" > "$out.log" 2>&1 || { cat "$out.log"; fail "$table: $*"; }
}
same() { cmp "$dir/cpu-$1" "$dir/strict-$1" || fail "$2: the strict table's $1 differs from cpu's"; }
norate() { sed -E 's/,"images_per_s":[0-9.]+//' "$1/metrics.jsonl"; }

mlp=(train mlp --data "$data" --limit 256 --batch 32 --threads 1 --quiet)
for t in cpu strict; do
    run $t "$dir/$t-mlp" "${mlp[@]}" --max-steps 20 --out "$dir/$t-mlp"
done
same mlp/checkpoint.safetensors "mlp, 20 steps"
diff <(norate "$dir/cpu-mlp") <(norate "$dir/strict-mlp") || fail "mlp: the metrics differ"
for t in cpu strict; do
    run $t "$dir/$t-resume" train --resume "$dir/$t-mlp" --max-steps 24 --threads 1 --quiet
    run $t "$dir/$t-eval" eval "$dir/$t-mlp"
done
same mlp/checkpoint.safetensors "mlp, resumed to 24 steps"
same eval.log "mlp, eval"
grep -q "accuracy" "$dir/strict-eval.log" || fail "eval said: $(cat "$dir/strict-eval.log")"
echo "ok: mlp trains, evaluates, saves and resumes on the strict table, as on cpu"

for t in cpu strict; do
    run $t "$dir/$t-resnet" train resnet20 --data "$data" --limit 64 --batch 16 --max-steps 3 \
        --replicas 2 --threads 2 --quiet --out "$dir/$t-resnet"
done
same resnet/checkpoint.safetensors "resnet20 on 2 replicas"
echo "ok: resnet20 on 2 replicas, as on cpu"

for t in cpu strict; do
    run $t "$dir/$t-gan" train sngan --data "$data" --limit 256 --ch-g 8 --ch-d 8 --z-dim 16 \
        --d-batch 16 --g-batch 16 --n-dis 2 --iters 4 --sample-every 2 --checkpoint-every 0 \
        --threads 2 --replicas 2 --quiet --out "$dir/$t-gan"
done
same gan/checkpoint.safetensors "sngan on 2 replicas"
same gan/samples.png "sngan's sample grid"
echo "ok: sngan on 2 replicas, as on cpu"

run strict "$dir/strict-d4pg" train d4pg --task cartpole-swingup --policy-layers 32,32 \
    --critic-layers 32,32 --batch 32 --min-replay 400 --eval-every 1000 --eval-episodes 2 \
    --checkpoint-every 1000 --env-steps 1000 --actors 1 --envs 2 --replicas 2 --threads 1 \
    --max-steps 50 --quiet --out "$dir/strict-d4pg"
[ -f "$dir/strict-d4pg/checkpoint.safetensors" ] || fail "d4pg: no checkpoint"
run strict "$dir/strict-d4pg-eval" eval "$dir/strict-d4pg" --episodes 2
grep -Eq "return [0-9.-]+ \+- [0-9.]+ over 2 episodes" "$dir/strict-d4pg-eval.log" \
    || fail "d4pg eval said: $(cat "$dir/strict-d4pg-eval.log")"
echo "ok: a d4pg job trains, saves and plays on the strict table"
echo PASS
