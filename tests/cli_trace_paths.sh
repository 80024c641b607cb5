#!/usr/bin/env bash
# Where traces go, and the robustness of the run around them (issue 26, docs/tracing.md and
# docs/faults.md), each on paths inside a temporary directory (never the real /dev/null):
#  1. --trace on a FIFO, and (as root) on a character device made with mknod: refused before
#     training with a message naming it, and each stays what it was; a directory that does not
#     exist is refused before training too (no run directory is made);
#  2. trace merge: a FIFO output stays a FIFO; a FIFO input returns at once with an error, and so
#     does /dev/zero; a sparse input over 2 GiB is refused by its size;
#  3. a failed run (a killed worker) still writes its trace;
#  4. a full file system under the trace (a 64 KiB tmpfs, where this process may mount one) says
#     "No space left on device (the file system is full)" naming the file, and leaves no
#     temporary file;
#  5. --faults with a value over 63 characters is read whole (ms=000...07 delays 7 ms); faults and
#     --slow aimed at replicas the job does not have are refused at start, naming them;
#  6. on threads, a replica 0 stalled in its own code (--slow 0:1000) ends the command within a
#     bound of --comm-timeout (exit 70), not when the stall ends.
# Usage: cli_trace_paths.sh path/to/replicator
set -uo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
small="$dir/small"
cleanup() {
    mountpoint -q "$small" 2> /dev/null && umount "$small"
    rm -rf "$dir"
}
trap cleanup EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
fail() {
    echo "FAIL: $*"
    exit 1
}
mlp=(train mlp --data "$data" --limit 64 --batch 32 --epochs 1 --replicas 2 --threads 2 --no-checkpoint
    --quiet)

# expect RC NEEDLE CMD...: CMD exits with RC (within 60 s) and its output contains NEEDLE.
expect() {
    local want=$1 needle=$2
    shift 2
    msg=$(timeout 60 "$@" 2>&1)
    rc=$?
    [ "$rc" -eq "$want" ] || fail "exit $rc (expected $want) from $*: $msg"
    grep -qF -- "$needle" <<< "$msg" || fail "no '$needle' from $*: $msg"
}

# 1. --trace paths that cannot take a file.
mkfifo "$dir/fifo"
expect 1 "cannot write trace file $dir/fifo: it is a FIFO, not a regular file" \
    "$bin" "${mlp[@]}" --trace "$dir/fifo" --out "$dir/r1"
[ -p "$dir/fifo" ] || fail "--trace replaced the FIFO"
[ ! -e "$dir/r1" ] || fail "a run directory was made before the trace path was refused"
if [ "$(id -u)" -eq 0 ] && mknod "$dir/null" c 1 3 2> /dev/null; then
    expect 1 "it is a character device, not a regular file" \
        "$bin" "${mlp[@]}" --trace "$dir/null" --out "$dir/r1"
    [ -c "$dir/null" ] || fail "--trace replaced the character device"
    echo "ok: --trace on a character device is refused and it stays one"
else
    echo "SKIP (part): mknod needs root; the character device case is not run"
fi
expect 1 "$dir/no-such-dir/t.json" "$bin" "${mlp[@]}" --trace "$dir/no-such-dir/t.json" \
    --out "$dir/r1"
[ ! -e "$dir/r1" ] || fail "a run directory was made before the trace path was refused"
ls "$dir" | grep -q '\.tmp\.' && fail "temporary files left: $(ls "$dir")"
echo "ok: --trace on a FIFO or a missing directory is refused before training; the FIFO stays"

# 2. trace merge.
"$bin" "${mlp[@]}" --trace "$dir/t.json" --out "$dir/r2" > /dev/null 2>&1 || fail "a traced run failed"
grep -q '"traceEvents"' "$dir/t.json" || fail "the traced run wrote no trace"
expect 1 "$dir/fifo: it is a FIFO, not a regular file" "$bin" trace merge "$dir/fifo" "$dir/t.json"
[ -p "$dir/fifo" ] || fail "trace merge replaced the FIFO"
start=$SECONDS
expect 1 "cannot read trace file $dir/fifo: it is a FIFO" "$bin" trace merge "$dir/m.json" "$dir/fifo"
[ $((SECONDS - start)) -lt 10 ] || fail "trace merge of a FIFO took $((SECONDS - start)) s"
expect 1 "/dev/zero: it is a character device" "$bin" trace merge "$dir/m.json" /dev/zero
truncate -s 3G "$dir/big.json"
expect 1 "it is 3221225472 bytes, over the 2147483648 bytes" \
    "$bin" trace merge "$dir/m.json" "$dir/big.json"
rm -f "$dir/big.json"
[ ! -e "$dir/m.json" ] || fail "a refused merge wrote its output"
echo "ok: trace merge refuses a FIFO output, FIFO and device inputs at once, and a 3 GiB input"

# 3. A failed run's trace.
expect 1 "did not arrive" "$bin" "${mlp[@]}" --limit 256 --comm-timeout 2 \
    --faults 'kill:worker=1,run=3' --trace "$dir/failed.json" --out "$dir/r3"
grep -q '"traceEvents"' "$dir/failed.json" && grep -q '"otherData"' "$dir/failed.json" \
    || fail "the failed run wrote no trace"
echo "ok: a failed run writes its trace"

# 4. A full file system.
mkdir "$small"
if mount -t tmpfs -o size=64k tmpfs "$small" 2> /dev/null; then
    dd if=/dev/zero of="$small/fill" bs=4k > /dev/null 2>&1 # fills it (dd fails at the end)
    expect 1 "cannot write trace file $small/t.json: writing $small/t.json.tmp." \
        "$bin" "${mlp[@]}" --trace "$small/t.json" --out "$dir/r4"
    grep -qF "No space left on device (the file system is full)" <<< "$msg" \
        || fail "a full disk is not named: $msg"
    grep -q "Input/output error" <<< "$msg" && fail "a full disk reads as an I/O error: $msg"
    [ "$(ls "$small")" = fill ] || fail "files left on the full file system: $(ls "$small")"
    umount "$small"
    echo "ok: a full file system under the trace is named, and nothing is left on it"
else
    echo "SKIP (part): cannot mount a tmpfs here; the full-disk case is in test_trace (EFBIG)"
fi

# 5. --faults and --slow at start.
zeros=$(printf '0%.0s' $(seq 70))
expect 0 "fault injected: delay 7 ms of worker 1" "$bin" "${mlp[@]}" \
    --faults "delay:worker=1,run=2,ms=${zeros}7" --out "$dir/r5"
expect 1 "fault 'kill:worker=5,run=3' is aimed at replica 5, but the job has 2 replicas (0 to 1)" \
    "$bin" "${mlp[@]}" --faults 'kill:worker=5,run=3' --out "$dir/r5b"
expect 1 "slow_replica (--slow) 2: the job has no replica 2, only 2 (0 to 1)" \
    "$bin" "${mlp[@]}" --slow 2:3 --out "$dir/r5c"
echo "ok: a 74-character --faults value is read whole; faults and --slow at missing replicas are refused"

# 6. A stalled replica 0 on threads: 30 ms steps, so 1000x is a stall of 30 s or more; the
# watchdog ends the process after the 2 s timeout and its 2 s grace.
start=$SECONDS
expect 70 "replica 0 has been in its step function" "$bin" "${mlp[@]}" --limit 256 \
    --comm-timeout 2 --slow 0:1000 --out "$dir/r6"
took=$((SECONDS - start))
[ "$took" -lt 15 ] || fail "a stalled replica 0 ended the run after $took s (timeout 2 s)"
echo "ok: a stalled replica 0 ends the command in $took s (--comm-timeout 2, exit 70)"
