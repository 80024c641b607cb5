#!/usr/bin/env bash
# Mistakes refused up front with what is wrong, before anything trains or fills memory (issue 26,
# a robustness campaign's findings):
#  1. a corrupt checkpoint on the documented resume lines (train --resume DIR --iters N for an
#     SN-GAN, --env-steps N for D4PG) is reported as the checkpoint's fault, not as an unknown
#     option;
#  2. train and test images of different sizes are refused at load, naming both shapes, before
#     an epoch trains (eval too);
#  3. sample's --n is checked against what the file can hold (the PNG's sides, the IDX's 2^31
#     bytes) before any sample is drawn: at once, not after a million samples;
#  4. a checkpoint whose configuration was edited to declare larger tensors than it holds is
#     refused by sample and eval before the model is allocated, naming the tensor and both
#     shapes (the old code allocated and filled the model first: gigabytes for a crafted one);
#  5. under mpirun, ranks started with different options are refused at start, naming the key,
#     both values and the ranks: a different --seed passed silently before, a different --lr
#     was caught only by the checksum at step 100; a --data path may differ by host;
#  6. D4PG under mpirun: a stopped learner rank is named as the learner, not reported as the
#     replay's fault with the message of a stopped replay.
# Usage: cli_refusals.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$dir"
fail() { echo "FAIL: $*"; exit 1; }
expect_error() { # expect_error RC PATTERN command...: exit code RC and PATTERN in its output ($msg)
    local want=$1 pattern=$2 rc
    shift 2
    set +e
    msg=$("$@" 2>&1); rc=$?
    set -e
    [ $rc -eq "$want" ] && grep -q -- "$pattern" <<< "$msg" || fail "$* gave rc $rc: $msg"
    ! grep -q -- "unknown option" <<< "$msg" || fail "$* blamed an option: $msg"
}

# 1. A checkpoint cut short (any of the campaign's corruptions fails the same way: at load).
mkdir bad
printf 'EFGHIJKL{"__metadata__":' > bad/checkpoint.safetensors
for line in "train --resume bad --iters 8" "train --resume bad --env-steps 4000" \
    "train sngan --resume bad --iters 8" "train d4pg --resume bad --env-steps 4000" \
    "train --resume bad --epochs 3"; do
    # shellcheck disable=SC2086 # the line's words are the arguments
    expect_error 1 "bad/checkpoint.safetensors" "$bin" $line
done
echo "ok: a corrupt checkpoint on every resume line is reported as the checkpoint's fault"

# 2. A data directory whose splits differ in size: 28x28 train images, 32x32 test images.
python3 - << 'PY'
import os, struct
os.makedirs("mix")
def images(path, n, h, w):
    open(path, "wb").write(struct.pack(">IIII", 0x803, n, h, w) + bytes(i * 7 % 256 for i in range(n * h * w)))
def labels(path, n):
    open(path, "wb").write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
images("mix/train-images-idx3-ubyte", 64, 28, 28)
labels("mix/train-labels-idx1-ubyte", 64)
images("mix/t10k-images-idx3-ubyte", 16, 32, 32)
labels("mix/t10k-labels-idx1-ubyte", 16)
PY
expect_error 1 "the train images (mix/train) are 28x28x1 but the test images (mix/test) 32x32x1" \
    "$bin" train mlp --data mix --batch 32 --epochs 1 --threads 1 --out mixed
grep -q "epoch 1/1" <<< "$msg" && fail "an epoch trained before the sizes were compared: $msg"
[ ! -e mixed/metrics.jsonl ] || fail "the refused run wrote metrics: $(cat mixed/metrics.jsonl)"
# Padded to one size, the same splits train and evaluate.
"$bin" train mlp --data mix --image-size 32 --batch 32 --epochs 1 --threads 1 --quiet --out padded > /dev/null \
    || fail "the splits padded to 32x32 did not train"
echo "ok: splits of different sizes are refused at load, naming both shapes"

# 3. A tiny SN-GAN run to sample from.
need_fashion_mnist
"$bin" train sngan --data "$data" --limit 64 --ch-g 8 --ch-d 8 --z-dim 16 --d-batch 16 --g-batch 16 \
    --n-dis 1 --iters 2 --sample-every 0 --checkpoint-every 0 --threads 1 --quiet --out gan > /dev/null
# The old code drew all 1,000,000 samples of the class first (minutes: `timeout` fails it), then
# found that their grid is too tall for a PNG.
expect_error 1 "--n 1000000: .*the grid would be 3400002 x 342 x 1" \
    timeout 10 "$bin" sample gan --class 0 --n 1000000
expect_error 1 "--n 1000000: .*the grid would be 342 x 34000002 x 1" timeout 10 "$bin" sample gan --n 1000000
expect_error 1 "--n 1000000: 10000000 samples of 32x32x1 are 10240000000 bytes, over the 2^31" \
    timeout 10 "$bin" sample gan --n 1000000 --raw --out s.idx
[ ! -e samples.png ] && [ ! -e s.idx ] || fail "a refused sample wrote a file"
"$bin" sample gan --n 2 --out two.png > /dev/null || fail "sample --n 2"
echo "ok: sample refuses an --n its file cannot hold before drawing a sample"

# 4. craft.py IN OUT KEY=JSON...: checkpoint IN with its configuration's keys set, its CRC
# computed again as the writer does, so only the configuration is at fault.
cat > craft.py << 'PY'
import json, struct, sys, zlib
src, dst, sets = sys.argv[1], sys.argv[2], sys.argv[3:]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
header, data = b[8:8 + n].decode(), b[8 + n:]
key = '"replicator.config":'
at = header.index(key) + len(key)
text, end = json.JSONDecoder().raw_decode(header, at)
config = json.loads(text)
for kv in sets:
    k, v = kv.split("=", 1)
    config[k] = json.loads(v)
header = header[:at] + json.dumps(json.dumps(config, separators=(",", ":"))) + header[end:]
h = (header + " " * (-len(header) % 8)).encode()
prefix = b'{"__metadata__":{"replicator.crc32":"'
assert h.startswith(prefix)
zeroed = h[:len(prefix)] + b"0" * 8 + h[len(prefix) + 8:]
length = struct.pack("<Q", len(h))
crc = zlib.crc32(data, zlib.crc32(zeroed, zlib.crc32(length))) & 0xffffffff
open(dst, "wb").write(length + h[:len(prefix)] + b"%08x" % crc + h[len(prefix) + 8:] + data)
PY
# peak.py OUT command...: runs the command, writes its peak resident memory in MiB to OUT, exits
# with its exit code.
cat > peak.py << 'PY'
import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write("%d\n" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024))
sys.exit(rc)
PY
mkdir crafted
python3 craft.py gan/checkpoint.safetensors crafted/checkpoint.safetensors ch_g=8
"$bin" sample crafted --out same.png > /dev/null || fail "a checkpoint rewritten unchanged is refused"
# ch_g 2048: about 1.2 GB of generator, allocated and filled by the old code before the check.
python3 craft.py gan/checkpoint.safetensors crafted/checkpoint.safetensors ch_g=2048
expect_error 1 "configuration makes gen/l1.weight \[32768, 16\] (524288 values), the checkpoint holds it as \[128, 16\]" \
    python3 peak.py peak.txt timeout 60 "$bin" sample crafted --out big.png
[ "$(cat peak.txt)" -lt 300 ] || fail "sample reached $(cat peak.txt) MiB before refusing the configuration"
expect_error 1 "configuration makes gen/l1.weight \[32768, 16\]" timeout 60 "$bin" eval crafted --samples 10
"$bin" train mlp --data "$data" --limit 64 --batch 32 --epochs 1 --threads 1 --quiet --out mlp > /dev/null
python3 craft.py mlp/checkpoint.safetensors crafted/checkpoint.safetensors 'hidden=[65536,65536]'
expect_error 1 "configuration makes param/fc0.weight \[65536, 784\] (51380224 values), the checkpoint holds it as \[512, 784\]" \
    timeout 60 "$bin" eval crafted --threads 1
echo "ok: an edited configuration is refused before the model is allocated, naming the tensor"

# 5. Ranks with different options (an MPMD command line: one rank's options differ).
need_mpirun
mlp=(train mlp --data "$data" --limit 64 --batch 32 --epochs 1 --threads 1 --quiet)
expect_error 1 "the ranks were started with different options: rank 2's \"seed\" is 7, rank 0's 1 (rank 2 differs from rank 0)" \
    timeout 120 "${mpi[@]}" -np 2 "$bin" "${mlp[@]}" --out m1 : -np 1 "$bin" "${mlp[@]}" --out m1 --seed 7
[ ! -e m1/metrics.jsonl ] || fail "the refused job trained: $(cat m1/metrics.jsonl)"
expect_error 1 "rank 1's \"lr\" is 0.0199999995" \
    timeout 120 "${mpi[@]}" -np 1 "$bin" "${mlp[@]}" --out m2 : -np 1 "$bin" "${mlp[@]}" --out m2 --lr 0.02
gan=(train sngan --data "$data" --limit 64 --ch-g 8 --ch-d 8 --z-dim 16 --d-batch 16 --g-batch 16 --n-dis 1
     --iters 2 --sample-every 0 --checkpoint-every 0 --threads 1 --quiet)
expect_error 1 "rank 1's \"iters\" is 3, rank 0's 2" \
    timeout 120 "${mpi[@]}" -np 1 "$bin" "${gan[@]}" --out g1 : -np 1 "$bin" "${gan[@]}" --out g1 --iters 3
# The same options, and a data directory that differs by host (a link here), train.
mkdir data2
ln -s "$data"/*.gz data2/
"${mpi[@]}" -np 1 "$bin" "${mlp[@]}" --out m3 : -np 1 "$bin" "${mlp[@]}" --out m3 --data "$dir/data2" > /dev/null \
    || fail "ranks whose --data differs did not train"
echo "ok: ranks started with different options are refused at start, naming the key"

# 6. Rank 0 learns, rank 1 acts, rank 2 is the replay; rank 0 is stopped (SIGSTOP) mid-run.
rl=(train d4pg --task cartpole-swingup --policy-layers 8 --critic-layers 8 --batch 8 --min-replay 100
    --eval-every 100000 --eval-episodes 1 --checkpoint-every 1000 --threads 1 --quiet --env-steps 10000000
    --timeout 10 --out stop) # the replay gives up on the learner at 5 s, the actors at 10
"${mpi[@]}" -np 3 "$bin" "${rl[@]}" > stop.out 2>&1 &
job=$!
victim=""
for _ in $(seq 1 300); do
    if [ -z "$victim" ] && [ -f stop/checkpoint.safetensors ]; then
        for p in $(pgrep -f -- "--out stop" || true); do
            ours "$p" || continue
            tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=0' && victim=$p
        done
        [ -n "$victim" ] && kill -STOP "$victim"
    fi
    kill -0 "$job" 2> /dev/null || break
    sleep 0.2
done
set +e
wait "$job"
rc=$?
set -e
kill_ours $(pgrep -f -- "--out stop" || true)
[ -n "$victim" ] || fail "no learner rank to stop: $(tail -5 stop.out)"
[ $rc -ne 0 ] || fail "the job survived a stopped learner"
grep -Eq "learner 0 \(worker 0\) did not take the batch|learners? 0 asked for no batch" stop.out \
    || fail "the stopped learner is not named: $(grep error stop.out)"
grep -q "not the replay" stop.out || fail "the replay is not cleared: $(grep error stop.out)"
echo "ok: a stopped D4PG learner is named as the learner, not blamed on the replay"
