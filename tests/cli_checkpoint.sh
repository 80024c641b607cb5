#!/usr/bin/env bash
# End-to-end checks of `replicator checkpoint` on a small subset of Fashion-MNIST:
#  1. a run's whole checkpoint resharded into 3 shards and consolidated again is byte for byte
#     the whole file it was (and again after resharding 3 -> 2 shards); info describes it;
#  2. a run stopped by --max-steps, resharded into 4 shards, resumes (and is evaluated) from the
#     shards and ends byte for byte as the uninterrupted run, whose whole checkpoint still loads;
#  3. --checkpoint-shards N --background-save on train: a run stopped and resumed ends as the
#     uninterrupted one, byte for byte once consolidated;
#  4. a damaged shard or index is refused with a message naming the file; bad arguments exit 2.
# Usage: cli_checkpoint.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
common=(--data "$data" --limit 1024 --batch 64 --threads 1 --quiet)
fail() { echo "FAIL: $*"; exit 1; }

"$bin" train mlp "${common[@]}" --epochs 2 --out "$dir/a" > /dev/null
cp "$dir/a/checkpoint.safetensors" "$dir/a.whole"
"$bin" checkpoint reshard "$dir/a" --layout shards=3 > /dev/null
[ -f "$dir/a/checkpoint.index.json" ] || fail "no index after reshard"
[ -e "$dir/a/checkpoint.safetensors" ] && fail "the whole file is still there after reshard"
[ "$(ls "$dir/a/checkpoint.shards/g1" | wc -l)" = 3 ] || fail "not 3 shard files: $(ls -R "$dir/a")"
info=$("$bin" checkpoint info "$dir/a")
grep -q "generation 1, 3 shards, layout \"shards=3\"" <<< "$info" || fail "info: $info"
grep -q "position: epoch 2, step 0, global step 32" <<< "$info" || fail "info position: $info"
"$bin" checkpoint consolidate "$dir/a" "$dir/a.consolidated" > /dev/null
cmp "$dir/a.whole" "$dir/a.consolidated" || fail "consolidated 3 shards differ from the whole file"
"$bin" checkpoint reshard "$dir/a" --layout shards=2 > /dev/null
[ -d "$dir/a/checkpoint.shards/g1" ] && fail "generation 1 left behind"
"$bin" checkpoint consolidate "$dir/a" "$dir/a.consolidated2" > /dev/null
cmp "$dir/a.whole" "$dir/a.consolidated2" || fail "consolidated 2 shards differ from the whole file"
echo "ok: reshard and consolidate are byte for byte the whole checkpoint"

"$bin" train mlp "${common[@]}" --epochs 2 --max-steps 11 --out "$dir/b" > /dev/null
"$bin" checkpoint reshard "$dir/b" --layout shards=4 > /dev/null
"$bin" eval "$dir/b" --threads 1 > /dev/null || fail "eval of a sharded run"
"$bin" train --resume "$dir/b" --threads 1 --quiet > /dev/null
cmp "$dir/a.whole" "$dir/b/checkpoint.safetensors" || fail "resumed from shards differs"
[ -e "$dir/b/checkpoint.index.json" ] && fail "the older sharded checkpoint is still there"
echo "ok: a sharded checkpoint resumes bit-exact; the whole one written after it replaces it"

# The same run, sharded and saved in the background from the command line: stopped, resumed
# (sharded again), it ends as the uninterrupted whole-file run, consolidated byte for byte.
"$bin" train mlp "${common[@]}" --epochs 2 --max-steps 11 --checkpoint-shards 3 --background-save \
    --out "$dir/c" > /dev/null
[ -f "$dir/c/checkpoint.index.json" ] || fail "--checkpoint-shards 3 wrote no index: $(ls "$dir/c")"
[ -e "$dir/c/checkpoint.safetensors" ] && fail "--checkpoint-shards 3 wrote a whole file"
"$bin" train --resume "$dir/c" --threads 1 --quiet --checkpoint-shards 2 --background-save > /dev/null
info=$("$bin" checkpoint info "$dir/c")
grep -q "2 shards" <<< "$info" || fail "the resumed run's checkpoint: $info"
"$bin" checkpoint consolidate "$dir/c" "$dir/c.consolidated" > /dev/null
cmp "$dir/a.whole" "$dir/c.consolidated" \
    || fail "a run sharded and saved in the background differs from the whole-file run"
echo "ok: --checkpoint-shards and --background-save from the command line, resumed bit-exact"

"$bin" checkpoint reshard "$dir/a" --layout shards=2 > /dev/null
shard=$(ls "$dir"/a/checkpoint.shards/g*/shard-1-of-2.safetensors)
printf '\x01' | dd of="$shard" bs=1 seek=$(( $(stat -c %s "$shard") - 3 )) conv=notrunc 2> /dev/null
set +e
msg=$("$bin" checkpoint consolidate "$dir/a" "$dir/bad" 2>&1); rc=$?
set -e
[ $rc = 1 ] || fail "a damaged shard: exit $rc ($msg)"
grep -q "shard-1-of-2.safetensors is damaged" <<< "$msg" || fail "damaged shard message: $msg"
[ -e "$dir/bad" ] && fail "a file was written from a damaged shard"
truncate -s -20 "$dir/a/checkpoint.index.json"
set +e
msg=$("$bin" checkpoint info "$dir/a" 2>&1); rc=$?
set -e
[ $rc = 1 ] || fail "a truncated index: exit $rc"
grep -q "checkpoint.index.json is damaged" <<< "$msg" || fail "truncated index message: $msg"
for args in "" "frobnicate $dir/a" "reshard $dir/a" "reshard $dir/a --layout shards=0" \
    "reshard $dir/a --layout zero" "consolidate $dir/a x y"; do
    set +e
    # shellcheck disable=SC2086
    "$bin" checkpoint $args > /dev/null 2>&1; rc=$?
    set -e
    [ $rc = 2 ] || fail "checkpoint $args: exit $rc, not 2"
done
echo "ok: damage and bad arguments are refused by name"
