#!/usr/bin/env bash
# Side-by-side D4PG learner speed: replicator (build/bench_d4pg) against
# PyTorch 1.13 (bench/d4pg_torch.py through bench/torch_env.sh: Debian's
# python3-torch, OPENBLAS_NUM_THREADS=1, torch.set_num_threads(threads)), on
# the same networks, batch and update, in learner steps per second. For each
# size (cartpole obs 5 / act 1, cheetah obs 17 / act 6) it runs replicator as
# 1 replica x <threads> threads and as <threads> replicas x 1 thread, and
# PyTorch on <threads> threads; the two frameworks alternate which goes first
# from round to round. Prints each measurement and the ratios
# replicator / PyTorch (above 1: replicator faster), per round and the median.
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

ours() { build/bench_d4pg --obs "$1" --act "$2" --replicas "$3" --threads "$4" --batch "$batch" \
             --steps "$steps" --warmup 3 --json | sps; }
theirs() { SCRIPT=bench/d4pg_torch.py bench/torch_env.sh --obs "$1" --act "$2" --threads "$threads" \
               --batch "$batch" --steps "$steps" --warmup 3 --json | sps; }

ratios_a=()
ratios_b=()
for dims in "5 1" "17 6"; do
    read -r obs act <<<"$dims"
    for r in $(seq "$rounds"); do
        if [ $((r % 2)) -eq 1 ]; then
            a=$(ours "$obs" "$act" 1 "$threads"); b=$(ours "$obs" "$act" "$threads" 1); t=$(theirs "$obs" "$act")
        else
            t=$(theirs "$obs" "$act"); a=$(ours "$obs" "$act" 1 "$threads"); b=$(ours "$obs" "$act" "$threads" 1)
        fi
        ra=$(awk -v a="$a" -v t="$t" 'BEGIN { printf "%.3f", a / t }')
        rb=$(awk -v b="$b" -v t="$t" 'BEGIN { printf "%.3f", b / t }')
        ratios_a+=("$ra")
        ratios_b+=("$rb")
        echo "obs $obs act $act round $r: replicator 1x$threads $a steps/s, ${threads}x1 $b steps/s;" \
             "pytorch $threads threads $t steps/s; ratios $ra, $rb"
    done
done
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "median ratio replicator/pytorch steps/s (above 1: replicator faster), batch $batch:" \
     "1 replica x $threads threads $(med "${ratios_a[@]}"), $threads replicas x 1 thread $(med "${ratios_b[@]}")"
