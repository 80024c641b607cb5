#!/usr/bin/env bash
# Side-by-side D4PG learner speed: replicator (build/bench_d4pg) against
# PyTorch 1.13 (bench/d4pg_torch.py through bench/torch_env.sh: Debian's
# python3-torch, OPENBLAS_NUM_THREADS=1, torch.set_num_threads(threads)), on
# the same networks, batch and update, in learner steps per second. For each
# size (cartpole obs 5 / act 1, cheetah obs 17 / act 6) it runs replicator in
# f32 and bf16, each as 1 replica x <threads> threads and as <threads> replicas
# x 1 thread, and PyTorch on <threads> threads in f32 and with bf16 autocast,
# the faster of the two being "PyTorch's best"; the two frameworks alternate
# which goes first from round to round. Prints each measurement and the ratios
# replicator / PyTorch's best (above 1: replicator faster), per round and the
# medians.
#
# Usage: bench/compare_d4pg.sh [rounds] [steps] [threads]
#        defaults:              2        30      2
# (build first: cmake --build build --target bench_d4pg)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
steps=${2:-30}
threads=${3:-2}
batch=256

if [ ! -x build/bench_d4pg ]; then
    echo "build/bench_d4pg not found (cmake --build build --target bench_d4pg)" >&2
    exit 3
fi

sps() { /usr/bin/python3 -c 'import json,sys
for l in sys.stdin:
    if l.startswith("{"): print(json.loads(l)["steps_per_s"])'; }

# ours OBS ACT REPLICAS THREADS PRECISION
ours() { build/bench_d4pg --obs "$1" --act "$2" --replicas "$3" --threads "$4" --batch "$batch" \
             --steps "$steps" --warmup 3 --precision "$5" --json | sps; }
# Sets t32 and t16: PyTorch's steps/s in f32 and bf16.
theirs() {
    local out
    out=$(SCRIPT=bench/d4pg_torch.py bench/torch_env.sh --obs "$1" --act "$2" --threads "$threads" \
              --batch "$batch" --steps "$steps" --warmup 3 --precision both --json | sps)
    t32=$(head -n 1 <<< "$out")
    t16=$(tail -n 1 <<< "$out")
}
# All of ours, in the order of the line printed: 1xT f32, Tx1 f32, 1xT bf16, Tx1 bf16.
all_ours() {
    a32=$(ours "$1" "$2" 1 "$threads" f32); b32=$(ours "$1" "$2" "$threads" 1 f32)
    a16=$(ours "$1" "$2" 1 "$threads" bf16); b16=$(ours "$1" "$2" "$threads" 1 bf16)
}
ratio() { awk -v a="$1" -v t="$2" 'BEGIN { printf "%.3f", a / t }'; }

ra32=() rb32=() ra16=() rb16=()
for dims in "5 1" "17 6"; do
    read -r obs act <<<"$dims"
    for r in $(seq "$rounds"); do
        if [ $((r % 2)) -eq 1 ]; then all_ours "$obs" "$act"; theirs "$obs" "$act"
        else theirs "$obs" "$act"; all_ours "$obs" "$act"; fi
        best=$(awk -v a="$t32" -v b="$t16" 'BEGIN { print (a >= b ? a : b) }')
        ra32+=("$(ratio "$a32" "$best")") rb32+=("$(ratio "$b32" "$best")")
        ra16+=("$(ratio "$a16" "$best")") rb16+=("$(ratio "$b16" "$best")")
        echo "obs $obs act $act round $r: replicator f32 1x$threads $a32, ${threads}x1 $b32;" \
             "bf16 1x$threads $a16, ${threads}x1 $b16 steps/s; pytorch f32 $t32, bf16 $t16;" \
             "ratios to the best: f32 ${ra32[-1]}, ${rb32[-1]}; bf16 ${ra16[-1]}, ${rb16[-1]}"
    done
done
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "median ratio replicator / PyTorch's best steps/s (above 1: replicator faster), batch $batch:" \
     "f32 1x$threads $(med "${ra32[@]}"), ${threads}x1 $(med "${rb32[@]}");" \
     "bf16 1x$threads $(med "${ra16[@]}"), ${threads}x1 $(med "${rb16[@]}")"
