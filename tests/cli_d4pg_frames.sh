#!/usr/bin/env bash
# End-to-end check of `replicator eval D4PG_RUN --frames DIR`: a tiny D4PG run
# on cartpole-swingup (threads), then one episode drawn every 50 steps at
# 160x120: 21 PNG frames (1000 steps / 50, plus the first state) of that
# size, two consecutive ones different, the contact sheet (16 tiles, 4 x 4)
# and the animated GIF; the printed return of the drawn episode is the
# evaluation's of one episode; --every and --size without --frames, or a bad
# size, are refused. Prints SKIP (and passes) where no headless GL context
# can be made.
# Usage: cli_d4pg_frames.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
png_size() { od -An -tu1 -j16 -N8 "$1" | awk '{print $1*16777216+$2*65536+$3*256+$4 "x" $5*16777216+$6*65536+$7*256+$8}'; }
tiny=(train d4pg --task cartpole-swingup --policy-layers 32,32 --critic-layers 32,32 --batch 32
      --min-replay 400 --eval-every 1000 --eval-episodes 2 --checkpoint-every 1000 --quiet)
"$bin" "${tiny[@]}" --env-steps 1200 --threads 1 --out "$dir/a" > /dev/null

set +e
out=$("$bin" eval "$dir/a" --episodes 1 --frames "$dir/f" --every 50 --size 160x120 2>&1); rc=$?
set -e
if [ $rc -ne 0 ] && grep -q "no headless GL context to draw frames" <<< "$out"; then
    echo "SKIP: no headless GL context here: $out"
    exit 0
fi
[ $rc -eq 0 ] || fail "eval --frames gave rc $rc: $out"
grep -q "frames of episode 1 (return [0-9.]*): $dir/f/frame-0000.png .. frame-0020.png" <<< "$out" \
    || fail "eval --frames said: $out"
# The drawn episode is the evaluation's (the same seed): the same return.
eval_ret=$(sed -nE 's/.*: return ([0-9.]+) \+- .*/\1/p' <<< "$out")
frames_ret=$(sed -nE 's/frames of episode 1 \(return ([0-9.]+)\).*/\1/p' <<< "$out")
{ [ -n "$eval_ret" ] && [ "$eval_ret" = "$frames_ret" ]; } || fail "returns $eval_ret and $frames_ret: $out"

n=$(find "$dir/f" -name 'frame-*.png' | wc -l)
[ "$n" -eq 21 ] || fail "$n frames, expected 21 (1000 steps / 50 + the first)"
for f in "$dir"/f/frame-*.png; do
    [ "$(png_size "$f")" = "160x120" ] || fail "$f is $(png_size "$f")"
done
cmp -s "$dir/f/frame-0000.png" "$dir/f/frame-0001.png" && fail "frames 0 and 1 are the same"
# 16 tiles of 160x120, 4 x 4, 2 pixels between and around.
[ "$(png_size "$dir/f/contact.png")" = "650x490" ] || fail "contact sheet $(png_size "$dir/f/contact.png")"
# GIF89a, 160 x 120 (little-endian), more than one image.
[ "$(head -c 6 "$dir/f/episode.gif")" = "GIF89a" ] || fail "episode.gif is not a GIF89a"
[ "$(od -An -tu2 -j6 -N4 --endian=little "$dir/f/episode.gif" | tr -s ' ')" = " 160 120" ] \
    || fail "episode.gif's size: $(od -An -tu2 -j6 -N4 --endian=little "$dir/f/episode.gif")"
grep -q NETSCAPE2.0 "$dir/f/episode.gif" || fail "episode.gif does not loop"
[ ! -e "$dir/f/episode.gif.tmp.$$" ] && ! ls "$dir"/f/*.tmp.* > /dev/null 2>&1 \
    || fail "temporary files left: $(ls "$dir/f")"
echo "ok: eval --frames draws an episode: 21 frames of 160x120, a contact sheet, a GIF"

expect_error() { # expect_error RC PATTERN command...: exit code RC and PATTERN in its stderr
    local want=$1 pattern=$2 msg rc
    shift 2
    set +e
    msg=$("$@" 2>&1 > /dev/null); rc=$?
    set -e
    [ $rc -eq "$want" ] && grep -q -- "$pattern" <<< "$msg" || fail "$* gave rc $rc: $msg"
}
expect_error 2 "go with --frames" "$bin" eval "$dir/a" --episodes 1 --every 10
expect_error 2 "bad option --size 160" "$bin" eval "$dir/a" --frames "$dir/g" --size 160
expect_error 1 "$dir/no/such" "$bin" eval "$dir/a" --episodes 1 --frames "$dir/no/such" --every 500
echo "ok: bad frame options are named"
