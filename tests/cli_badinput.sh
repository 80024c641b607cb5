#!/usr/bin/env bash
# Bad input that must get a clear error, or be honoured, never silently mishandled:
#  1. path options longer than 511 bytes (--out, --data, --resume, eval's run) are honoured:
#     the run is saved exactly where asked; an empty or over-long path is refused by name;
#  2. eval, sample, info and bench refuse bad options (--threads 0, -1, unknown options, extra
#     arguments) with a message naming them, as train does;
#  3. a FIFO as the checkpoint or as a data file is an error within seconds, not a hang;
#  4. a read-only run directory fails --resume before any training, naming the directory; a new
#     run under a read-only parent reports mkdir's reason. Root writes through chmod, so as root
#     these run as nobody (setpriv), or are skipped with the reason printed;
#  5. metrics.jsonl on a full disk (a link to /dev/full): the run finishes, warned once;
#  6. a resumed run's save removes temporary files that a killed save left behind.
# Usage: cli_badinput.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'chmod -R u+w "$dir" 2> /dev/null; rm -rf "$dir"' EXIT
chmod 755 "$dir" # nobody (below) must reach the runs in it
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
cd "$dir" # a command that ignored its --out would write runs/ here, not into the caller's tree
common=(--limit 256 --batch 64 --threads 1 --quiet)
fail() { echo "FAIL: $*"; exit 1; }
expect_error() { # expect_error RC PATTERN command...: exit code RC and PATTERN in its output
    local want=$1 pattern=$2 msg rc
    shift 2
    set +e
    msg=$("$@" 2>&1); rc=$?
    set -e
    [ $rc -eq "$want" ] && grep -q -- "$pattern" <<< "$msg" || fail "$* gave rc $rc: $msg"
}

# 1. Long paths: three 200-byte components make a run directory over 600 bytes; --data reaches
# Fashion-MNIST through a directory as long.
long=$dir/$(printf 'a%.0s' {1..200})/$(printf 'b%.0s' {1..200})/$(printf 'c%.0s' {1..200})
ldata=$dir/$(printf 'd%.0s' {1..200})/$(printf 'e%.0s' {1..200})/$(printf 'f%.0s' {1..200})
[ ${#long} -gt 600 ] && [ ${#ldata} -gt 600 ] || fail "the long paths are too short"
mkdir -p "$ldata"
ln -s "$data"/*.gz "$ldata"/
"$bin" train mlp "${common[@]}" --data "$ldata" --epochs 2 --max-steps 3 --out "$long" > /dev/null
[ -f "$long/checkpoint.safetensors" ] || fail "a ${#long}-byte --out was not honoured: $(find "$dir" -name checkpoint.safetensors)"
[ -f "$long/metrics.jsonl" ] || fail "no metrics.jsonl in the ${#long}-byte run directory"
"$bin" train --resume "$long" --threads 1 --quiet > /dev/null || fail "resuming the ${#long}-byte run"
out=$("$bin" eval "$long" --threads 1) && grep -q "test accuracy" <<< "$out" \
    || fail "eval of the ${#long}-byte run"
[ -z "$(find "$dir" -name checkpoint.safetensors ! -path "$long/*")" ] || fail "a checkpoint outside --out"
expect_error 2 "--out is 5000 bytes long, over the 4095" "$bin" train mlp --out "$(printf 'x%.0s' {1..5000})"
expect_error 2 "--data needs a path" "$bin" train mlp --data ""
expect_error 2 "--out needs a path" "$bin" train sngan --out ""
expect_error 2 "--judge is 5000 bytes long" "$bin" train sngan --judge "$(printf 'x%.0s' {1..5000})"
expect_error 2 "--resume is 5000 bytes long" "$bin" train d4pg --resume "$(printf 'x%.0s' {1..5000})"
echo "ok: a ${#long}-byte --out and a ${#ldata}-byte --data are honoured; empty and over-long paths refused"

# 2. Options are parsed strictly by every command.
"$bin" train mlp "${common[@]}" --data "$data" --epochs 1 --out "$dir/m" > /dev/null
expect_error 2 "--threads needs a number of threads from 1 to 1024, not \"0\"" "$bin" eval "$dir/m" --threads 0
expect_error 2 "not \"-1\"" "$bin" eval "$dir/m" --threads -1
expect_error 2 "not \"2x\"" "$bin" eval "$dir/m" --threads 2x
expect_error 2 "--threads needs a number" "$bin" eval "$dir/m" --threads
expect_error 2 "unknown option --bogus" "$bin" eval "$dir/m" --bogus
expect_error 2 "unknown argument extra" "$bin" eval "$dir/m" --threads 1 extra
expect_error 2 "the run directory comes first" "$bin" eval --threads 1 "$dir/m"
out=$("$bin" eval "$dir/m" --threads 1) && grep -q "test accuracy" <<< "$out" \
    || fail "eval with good options"
expect_error 2 "bad option --seed 99999999999999999999" "$bin" sample "$dir/m" --seed 99999999999999999999
expect_error 2 "bad option --n 0" "$bin" sample "$dir/m" --n 0
expect_error 2 "bad option --threads 0" "$bin" sample "$dir/m" --threads 0
expect_error 2 "takes no options, but was given --bogus" "$bin" info --bogus
expect_error 2 "takes no arguments, but was given extra" "$bin" info extra
expect_error 2 "bad option --threads 0" "$bin" bench resnet --threads 0
expect_error 2 "bad option --batch " "$bin" bench resnet --batch ""
expect_error 2 "bad option --iters 5x" "$bin" bench sngan --iters 5x
expect_error 2 "bad option --staleness " "$bin" bench ps --staleness ""
expect_error 2 "bad option --max 99999999999G" "$bin" bench allreduce --max 99999999999G
echo "ok: eval, sample, info and bench refuse bad options by name"

# 3. FIFOs: a reader that opens one before checking waits forever for a writer; `timeout`
# turns such a hang into rc 124 here.
mkdir "$dir/fifo-run" "$dir/fifo-data"
mkfifo "$dir/fifo-run/checkpoint.safetensors"
expect_error 1 "fifo-run/checkpoint.safetensors: it is a FIFO, not a regular file" \
    timeout 20 "$bin" train --resume "$dir/fifo-run" --threads 1
expect_error 1 "it is a FIFO" timeout 20 "$bin" eval "$dir/fifo-run"
ln -s "$data"/*.gz "$dir/fifo-data/"
rm "$dir/fifo-data/train-images-idx3-ubyte.gz"
mkfifo "$dir/fifo-data/train-images-idx3-ubyte.gz"
expect_error 1 "fifo-data/train-images-idx3-ubyte.gz: it is a FIFO" \
    timeout 20 "$bin" train mlp "${common[@]}" --data "$dir/fifo-data" --out "$dir/fifo-out"
echo "ok: a FIFO as checkpoint or data file is refused at once"

# 4. Read-only directories. Root writes regardless of permissions, so as root the commands run
# as nobody through setpriv; without it the check is skipped, saying why.
as_user=()
if [ "$(id -u)" -eq 0 ]; then
    if setpriv --reuid=65534 --regid=65534 --clear-groups true 2> /dev/null \
        && setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$bin"; then
        as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
        echo "note: running as root: the read-only checks run as nobody (setpriv), since chmod does not stop root"
    else
        as_user=(skip)
        echo "SKIP (read-only checks only): running as root, where chmod does not stop writes, and setpriv cannot run $bin as nobody"
    fi
fi
if [ "${as_user[0]:-}" != skip ]; then
    # --epochs 20: the old code trained through a whole epoch before its first save failed.
    "$bin" train mlp "${common[@]}" --data "$data" --epochs 20 --max-steps 1 --out "$dir/ro" > /dev/null
    chmod 555 "$dir/ro"
    set +e
    msg=$("${as_user[@]}" "$bin" train --resume "$dir/ro" --threads 1 2>&1); rc=$?
    set -e
    [ $rc -eq 1 ] && grep -q "the run directory $dir/ro is not writable (Permission denied)" <<< "$msg" \
        || fail "read-only --resume: rc $rc: $msg"
    grep -q "epoch [0-9]*/20" <<< "$msg" && fail "read-only --resume trained before failing: $msg"
    mkdir "$dir/ro-parent"
    chmod 555 "$dir/ro-parent"
    expect_error 1 "cannot create the run directory $dir/ro-parent/a/b: mkdir $dir/ro-parent/a: Permission denied" \
        "${as_user[@]}" "$bin" train mlp "${common[@]}" --data "$data" --out "$dir/ro-parent/a/b"
    chmod 755 "$dir/ro" "$dir/ro-parent"
    echo "ok: a read-only run directory fails before training, naming the directory and mkdir's reason"
fi

# 5. A full disk under metrics.jsonl: the run goes on to the end (and saves), warned once.
mkdir "$dir/full"
ln -s /dev/full "$dir/full/metrics.jsonl"
msg=$("$bin" train mlp "${common[@]}" --data "$data" --epochs 3 --out "$dir/full" 2>&1) \
    || fail "a full metrics.jsonl stopped the run: $msg"
[ "$(grep -c "cannot write $dir/full/metrics.jsonl (No space left on device)" <<< "$msg")" -eq 1 ] \
    || fail "the full disk was not reported exactly once: $msg"
[ -f "$dir/full/checkpoint.safetensors" ] || fail "no checkpoint after the metrics failed"
echo "ok: a full disk under metrics.jsonl is reported once, and the run finishes"

# 6. A save killed mid-write left "checkpoint.safetensors.tmp.<pid>.<n>" behind: the resumed
# run's first save removes it (its process is gone), and leaves a live process's alone.
"$bin" train mlp "${common[@]}" --data "$data" --epochs 2 --max-steps 1 --out "$dir/tmp" > /dev/null
sh -c 'exit 0' &
dead=$!
wait $dead
stale="$dir/tmp/checkpoint.safetensors.tmp.$dead.0"
live="$dir/tmp/checkpoint.safetensors.tmp.$$.0"
echo partial > "$stale"
echo partial > "$live"
"$bin" train --resume "$dir/tmp" --threads 1 --quiet > /dev/null
[ ! -e "$stale" ] || fail "the stale temporary file $stale was left"
[ -e "$live" ] || fail "a live process's temporary file was removed"
echo "ok: a resumed run's save removes a killed save's temporary file"
