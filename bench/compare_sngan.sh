#!/usr/bin/env bash
# Side-by-side SN-GAN training speed: replicator in f32 and bf16 against
# PyTorch 1.13 at its best (Debian's python3-torch: OPENBLAS_NUM_THREADS=1, its
# thread count set, four arms tried - f32 and bf16 autocast around the whole
# iteration, each channels-last and NCHW - and the fastest kept as "PyTorch's
# best"), on the same architecture, widths and batches: ms per iteration, one
# iteration being one G step and n_dis (5) D steps. The two alternate within
# each round, and the one that goes first alternates between rounds, so the
# shared machine's noise and any order effect hit both alike. Prints each
# round's ratios (PyTorch's best ms / replicator's ms, for our f32 and our
# bf16: above 1 means replicator is faster) and their medians.
#
# Usage: bench/compare_sngan.sh [ch_g] [ch_d] [threads] [rounds] [iters] [channels]
#        defaults:               32     32     2         3        10      1
#        (build first: scripts/setup.sh)
# PyTorch runs the shortcut 1x1 convs on the smaller side of their upsample or
# pool, as replicator's model does (the same values, less work), so that the
# ratio measures the frameworks, not that rewrite; SHORTCUT=authors runs them
# where the authors' code puts them instead.
# OURS_ARGS adds options to the replicator command (e.g. OURS_ARGS="--threads 2").
# Without a working `build/replicator bench sngan` the PyTorch rounds still run
# and print; the script then exits 3 with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
ch_g=${1:-32}
ch_d=${2:-32}
threads=${3:-2}
rounds=${4:-3}
iters=${5:-10}
channels=${6:-1}
shortcut=${SHORTCUT:-commuted}
d_batch=64
g_batch=128
n_dis=5

ours=(build/replicator bench sngan --ch-g "$ch_g" --ch-d "$ch_d" --d-batch "$d_batch"
      --g-batch "$g_batch" --n-dis "$n_dis" --iters "$iters" --json)
# Only when not the default, so the default command stays the one documented.
if [ "$channels" != 1 ]; then ours+=(--channels "$channels"); fi
# shellcheck disable=SC2206 # OURS_ARGS is meant to split into words
ours+=(${OURS_ARGS:-})
theirs=(env SCRIPT=bench/sngan_torch.py bench/torch_env.sh --ch-g "$ch_g" --ch-d "$ch_d"
        --d-batch "$d_batch" --g-batch "$g_batch" --n-dis "$n_dis" --channels "$channels"
        --shortcut "$shortcut" --iters "$iters" --threads "$threads" --format both
        --precision both --json)

echo "ours:   ${ours[*]} --precision f32|bf16"
echo "theirs: ${theirs[*]}"

ours_missing=
if [ ! -x build/replicator ]; then
    ours_missing="build/replicator not found (build first: scripts/setup.sh)"
fi

err=$(mktemp)
trap 'rm -f "$err"' EXIT

# Sets a (f32) and a_bf16 to replicator's ms_per_iter, or leaves them empty (and sets
# ours_missing) when the command fails or prints no JSON line with ms_per_iter.
run_ours() {
    run_ours_at f32
    if [ -n "$a" ]; then
        local f32=$a
        run_ours_at bf16
        a_bf16=$a
        a=$f32
    fi
}
run_ours_at() {
    local out ms
    a=
    if [ -n "$ours_missing" ]; then return 0; fi
    if ! out=$("${ours[@]}" --precision "$1" 2>"$err"); then
        ours_missing="'${ours[*]} --precision $1' failed: $(tail -n 1 "$err")"
        return 0
    fi
    ms=$(printf '%s\n' "$out" | /usr/bin/python3 -c '
import json, sys
for line in sys.stdin:
    if line.startswith("{"):
        r = json.loads(line)
        if "ms_per_iter" in r:
            print(r["ms_per_iter"])
            break
')
    if [ -z "$ms" ]; then
        ours_missing="'${ours[*]} --precision $1' printed no JSON line with ms_per_iter"
        return 0
    fi
    a=$ms
}

# Sets b to "best_ms best_arm" and arms to every arm's "precision/format ms".
run_theirs() {
    local out
    out=$("${theirs[@]}" 2>"$err" | /usr/bin/python3 -c '
import json, sys
rs = [json.loads(l) for l in sys.stdin if l.startswith("{")]
if len(rs) != 4:
    sys.exit(1)
best = min(rs, key=lambda r: r["ms_per_iter"])
print(", ".join("%s/%s %s" % (r["precision"], r["format"], r["ms_per_iter"]) for r in rs))
print(best["ms_per_iter"], best["precision"] + "/" + best["format"])') || {
        echo "PyTorch run failed: $(tail -n 3 "$err")" >&2
        exit 1
    }
    arms=$(head -n 1 <<< "$out")
    b=$(tail -n 1 <<< "$out")
}

ratios=()
ratios_bf16=()
for r in $(seq "$rounds"); do
    a=
    a_bf16=
    if [ $((r % 2)) -eq 1 ]; then run_ours; run_theirs; else run_theirs; run_ours; fi
    read -r best_ms best_arm <<<"$b"
    if [ -n "$a" ] && [ -n "$a_bf16" ]; then
        ratio=$(awk -v a="$a" -v b="$best_ms" 'BEGIN { printf "%.3f", b / a }')
        ratio_bf16=$(awk -v a="$a_bf16" -v b="$best_ms" 'BEGIN { printf "%.3f", b / a }')
        ratios+=("$ratio")
        ratios_bf16+=("$ratio_bf16")
        echo "round $r: replicator f32 $a, bf16 $a_bf16 ms/iter; pytorch $arms ms/iter;" \
             "best $best_arm $best_ms: ratios f32 $ratio, bf16 $ratio_bf16"
    else
        echo "round $r: replicator -; pytorch $arms ms/iter; best $best_arm $best_ms"
    fi
done

if [ -n "$ours_missing" ]; then
    echo "no ratio: replicator's side did not run: $ours_missing" >&2
    exit 3
fi
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "median ratio PyTorch's best ms / replicator's ms (above 1: replicator faster):" \
     "f32 $(med "${ratios[@]}"), bf16 $(med "${ratios_bf16[@]}") (ch_g $ch_g, ch_d $ch_d," \
     "32x32x$channels, d_batch $d_batch, g_batch $g_batch, n_dis $n_dis, $threads threads," \
     "pytorch shortcut $shortcut, $rounds rounds)"
