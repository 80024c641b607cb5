#!/usr/bin/env bash
# End-to-end checks of --checkpoint-per-worker (each worker writes its own shard; nothing is
# gathered; a resume reads each worker's pieces), on a small subset of Fashion-MNIST:
#  1. the issue's resharding chain on ResNet-20, every leg writing per worker (ZeRO-3 on 4
#     replicas -> ZeRO-1 on 3 in the background -> 2 replicas x tensor parallel 2 with ZeRO-3
#     -> 2 replicas x 2 pipeline stages in the background -> 1 replica, whole), ends byte for
#     byte where the sync run making the same layout changes at the same steps ends, each
#     leg's index names its layout with one shard per worker, and with tensor parallelism every
#     worker's shard holds its own slices (slab pieces: nothing gathered to a member);
#  2. the SN-GAN with --zero 2 on 2 replicas, written per worker and resumed, ends as the
#     uninterrupted run;
#  3. mpirun -np 2 (ZeRO-2, in the background): both ranks write their shard, rank 0 publishes,
#     the run resumed under mpirun ends as the threads run;
#  4. refused by name: with --regime async (replicas with values of their own), with
#     --checkpoint-shards.
# Usage: cli_checkpoint_workers.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
fail() { echo "FAIL: $*"; exit 1; }
layout() { grep -o '"layout":"[^"]*"' "$1/checkpoint.index.json" || echo "(no index in $1)"; }

chain=(--data "$data" --limit 480 --batch 48 --threads 2 --threads-per-replica 1 --epochs 2 --quiet)
"$bin" train resnet20 "${chain[@]}" --replicas 4 --zero 3 --max-steps 5 --checkpoint-per-worker \
    --out "$dir/w" > /dev/null 2>&1 || fail "resnet20 --zero 3 --checkpoint-per-worker failed"
"$bin" train resnet20 "${chain[@]}" --replicas 4 --max-steps 5 --out "$dir/s" > /dev/null 2>&1
[ -e "$dir/w/checkpoint.safetensors" ] && fail "a per-worker run wrote a whole file"
got=$(layout "$dir/w")
[ "$got" = '"layout":"shards=4, each worker'"'"'s own pieces; written by replicas=4 zero=3 tp=1 stages=1"' ] \
    || fail "first leg's index: $got"
leg() { # leg NAME SHARDS ZERO ARGS...: resume both runs (the per-worker one with --zero ZERO,
    #       0: none, writing SHARDS shards, 0: whole); the sync run gets ARGS only
    local what=$1 shards=$2 zero=$3
    shift 3
    local extra=()
    [ "$zero" = 0 ] || extra+=(--zero "$zero")
    [ "$shards" = 0 ] || extra+=(--checkpoint-per-worker)
    "$bin" train --resume "$dir/w" --threads 2 --quiet "$@" "${extra[@]}" > /dev/null 2>&1 \
        || fail "chain: $what failed"
    "$bin" train --resume "$dir/s" --threads 2 --quiet "$@" > /dev/null 2>&1 \
        || fail "chain: $what (sync) failed"
    if [ "$shards" != 0 ]; then
        layout "$dir/w" | grep -q "\"layout\":\"shards=$shards, each worker's own pieces" \
            || fail "chain: $what: $(layout "$dir/w")"
    fi
}
leg "ZeRO-3 x4 -> ZeRO-1 x3 (background)" 3 1 --replicas 3 --max-steps 9 --background-save
# How many shards the index names pieces in (with ARG ',"axis"': pieces of a tensor-parallel slab).
pieces_in() { grep -o "\"shard\":[0-9]*$2" "$1/checkpoint.index.json" | sort -u | wc -l; }
leg "-> ZeRO-3 x2 x TP2" 4 3 --replicas 2 --tensor-parallel 2 --max-steps 14
# Every worker wrote its own slices (nothing gathered to a member): 4 shards with slab pieces.
[ "$(pieces_in "$dir/w" ',"axis"')" = 4 ] \
    || fail "TP2 x 2 replicas: $(pieces_in "$dir/w" ',"axis"') of 4 shards hold slices"
leg "-> x2 x TP2 x 2 stages (background)" 8 0 --replicas 2 --model-parallel 2 --max-steps 17 \
    --background-save
[ "$(pieces_in "$dir/w" ',"axis"')" = 8 ] \
    || fail "TP2 x 2 stages x 2 replicas: $(pieces_in "$dir/w" ',"axis"') of 8 shards hold slices"
leg "-> 1 replica, whole" 0 0 --replicas 1
[ -e "$dir/w/checkpoint.index.json" ] && fail "the whole save left the per-worker index"
cmp "$dir/s/checkpoint.safetensors" "$dir/w/checkpoint.safetensors" \
    || fail "the per-worker chain ends elsewhere than sync's"
echo "ok: ResNet-20's chain of layouts, written per worker, ends byte for byte on sync's"

gan=(train sngan --data "$data" --limit 256 --ch-g 8 --ch-d 8 --z-dim 16 --d-batch 16 --g-batch 16
     --n-dis 2 --iters 6 --sample-every 0 --checkpoint-every 0 --threads 2 --replicas 2 --quiet)
"$bin" "${gan[@]}" --zero 2 --out "$dir/g" > /dev/null 2>&1 || fail "sngan --zero 2"
"$bin" "${gan[@]}" --zero 2 --max-steps 3 --checkpoint-per-worker --out "$dir/gw" > /dev/null \
    2>&1 || fail "sngan --checkpoint-per-worker"
layout "$dir/gw" | grep -q "shards=2, each worker's own pieces" || fail "sngan: $(layout "$dir/gw")"
"$bin" train --resume "$dir/gw" --threads 2 --quiet > /dev/null 2>&1 || fail "sngan resume"
cmp "$dir/g/checkpoint.safetensors" "$dir/gw/checkpoint.safetensors" \
    || fail "sngan: written per worker and resumed, it ends elsewhere"
echo "ok: the SN-GAN written per worker resumes bit-exact"

mlp=(--data "$data" --limit 1024 --batch 64 --threads 1 --quiet --epochs 2)
"$bin" train mlp "${mlp[@]}" --replicas 2 --zero 2 --out "$dir/m" > /dev/null 2>&1
if command -v mpirun > /dev/null; then
    need_mpirun
    timeout 300 "${mpi[@]}" -np 2 "$bin" train mlp "${mlp[@]}" --zero 2 --max-steps 11 \
        --checkpoint-per-worker --background-save --out "$dir/mm" > /dev/null 2>&1 \
        || fail "mpirun -np 2 --checkpoint-per-worker"
    [ "$(ls "$dir/mm/checkpoint.shards/g1")" = "$(printf 'shard-0-of-2.safetensors\nshard-1-of-2.safetensors')" ] \
        || fail "mpirun: shards $(ls -R "$dir/mm")"
    timeout 300 "${mpi[@]}" -np 2 "$bin" train --resume "$dir/mm" --threads 1 --quiet \
        > /dev/null 2>&1 || fail "mpirun resume"
    cmp "$dir/m/checkpoint.safetensors" "$dir/mm/checkpoint.safetensors" \
        || fail "mpirun: written per worker and resumed, it ends elsewhere than threads"
    echo "ok: under mpirun each rank writes its shard and rank 0 publishes"
fi

out=$("$bin" train mlp "${mlp[@]}" --replicas 2 --regime async --checkpoint-per-worker --out "$dir/x" 2>&1) \
    && fail "--regime async --checkpoint-per-worker was accepted"
grep -q "checkpoint_per_worker (--checkpoint-per-worker) needs replicas that step in lockstep" \
    <<< "$out" || fail "--regime async: $out"
out=$("$bin" train mlp "${mlp[@]}" --checkpoint-per-worker --checkpoint-shards 2 --out "$dir/y" 2>&1) \
    && fail "--checkpoint-per-worker --checkpoint-shards was accepted"
grep -q "checkpoint_per_worker and checkpoint_shards 2: give one" <<< "$out" \
    || fail "both: $out"
echo "ok: --checkpoint-per-worker refused with --regime async and with --checkpoint-shards"
