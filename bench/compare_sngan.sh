#!/usr/bin/env bash
# Side-by-side SN-GAN training speed: replicator against PyTorch 1.13 (Debian's
# python3-torch at its best settings: OPENBLAS_NUM_THREADS=1, its thread count
# set, channels-last and NCHW both tried and the faster kept), on the same
# architecture, widths and batches: ms per iteration, one iteration being one
# G step and n_dis (5) D steps. The two alternate within each round, and the
# one that goes first alternates between rounds, so the shared machine's
# noise and any order effect hit both alike. Prints each round's ratio
# (PyTorch's best ms / replicator's ms: above 1 means replicator is faster)
# and the median.
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
        --shortcut "$shortcut" --iters "$iters" --threads "$threads" --format both --json)

echo "ours:   ${ours[*]}"
echo "theirs: ${theirs[*]}"

ours_missing=
if [ ! -x build/replicator ]; then
    ours_missing="build/replicator not found (build first: scripts/setup.sh)"
fi

err=$(mktemp)
trap 'rm -f "$err"' EXIT

# Prints replicator's ms_per_iter, or nothing (and sets ours_missing) when the
# command fails or prints no JSON line with ms_per_iter.
run_ours() {
    local out ms
    if [ -n "$ours_missing" ]; then return 0; fi
    if ! out=$("${ours[@]}" 2>"$err"); then
        ours_missing="'${ours[*]}' failed: $(tail -n 1 "$err")"
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
        ours_missing="'${ours[*]}' printed no JSON line with ms_per_iter"
        return 0
    fi
    a=$ms
}

# Sets b to "best_ms best_format other_ms other_format".
run_theirs() {
    b=$("${theirs[@]}" 2>"$err" | /usr/bin/python3 -c '
import json, sys
rs = sorted((json.loads(l) for l in sys.stdin if l.startswith("{")), key=lambda r: r["ms_per_iter"])
if not rs:
    sys.exit(1)
o = rs[-1] if len(rs) > 1 else rs[0]
print(rs[0]["ms_per_iter"], rs[0]["format"], o["ms_per_iter"], o["format"])') || {
        echo "PyTorch run failed: $(tail -n 3 "$err")" >&2
        exit 1
    }
}

ratios=()
for r in $(seq "$rounds"); do
    a=
    if [ $((r % 2)) -eq 1 ]; then run_ours; run_theirs; else run_theirs; run_ours; fi
    read -r best_ms best_fmt other_ms other_fmt <<<"$b"
    if [ -n "$a" ]; then
        ratio=$(awk -v a="$a" -v b="$best_ms" 'BEGIN { printf "%.3f", b / a }')
        ratios+=("$ratio")
        echo "round $r: replicator $a ms/iter, pytorch $best_ms ms/iter ($best_fmt; $other_fmt $other_ms): ratio $ratio"
    else
        echo "round $r: replicator -, pytorch $best_ms ms/iter ($best_fmt; $other_fmt $other_ms)"
    fi
done

if [ -n "$ours_missing" ]; then
    echo "no ratio: replicator's side did not run: $ours_missing" >&2
    exit 3
fi
printf '%s\n' "${ratios[@]}" | sort -g | awk -v cfg="ch_g $ch_g, ch_d $ch_d, 32x32x$channels, d_batch $d_batch, g_batch $g_batch, n_dis $n_dis, $threads threads, pytorch shortcut $shortcut" \
    '{ v[NR] = $1 } END { printf "median ratio pytorch/replicator ms (above 1: replicator faster): %s (%s, %d rounds)\n", v[int((NR + 1) / 2)], cfg, NR }'
