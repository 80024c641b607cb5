#!/usr/bin/env bash
# `replicator train --precision bf16` end to end on Fashion-MNIST with ResNet-20:
#  1. the header names bf16 and the path this CPU takes (amx, avx512_bf16, emulated, reference),
#     and says that bf16 is slower than f32 exactly where the path has no bf16 units (the
#     reference kernels, RP_KERNELS=ref, always);
#  2. the bf16 run tracks f32's loss: over STEPS steps (300 here, 60 in a sanitizer build), each
#     loss the trainer logs (every 50 steps; one batch each) is within 0.15 of f32's at the same
#     step, their mean within 5%, and the two runs are not the same run (bf16 really ran);
#  3. bf16 resumes bit-exactly, in bf16 without being told (the run's configuration keeps it):
#     20 + 20 steps write the checkpoint 40 steps wrote;
#  4. an f32 run resumes in bf16 and back, and the checkpoint holds f32 masters either way.
# Usage: cli_precision.sh path/to/replicator [sanitized]
set -euo pipefail
bin=$(realpath "$1")
sanitized=${2:-OFF}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
fail() { echo "FAIL: $*"; exit 1; }
steps=300
case "$sanitized" in ON|on|1|TRUE|true) steps=60 ;; esac
common=(resnet20 --data "$data" --batch 64 --threads 2 --replicas 2)

# 1 and 2.
out=$("$bin" train "${common[@]}" --precision bf16 --max-steps "$steps" --out "$dir/b" 2>&1) \
    || fail "bf16 run: $out"
grep -Eq "precision: bf16 compute for convolutions, linear layers and matmuls on (amx|avx512_bf16|avx512_core \(emulated\)|reference)" <<< "$out" \
    || fail "header does not name bf16 and its path: $out"
case "$out" in
    *"on amx;"* | *"on avx512_bf16;"*) grep -q "slower than f32" <<< "$out" && fail "a fast path called slow: $out" ;;
    *) grep -q "correct but .*slower than f32" <<< "$out" || fail "a slow path not called slow: $out" ;;
esac
# Without bf16 units (the reference kernels) the header says bf16 will be slow.
slow=$(RP_KERNELS=ref "$bin" train "${common[@]}" --batch 8 --precision bf16 --max-steps 1 \
    --out "$dir/slow" 2>&1) || fail "bf16 run on the reference kernels: $slow"
grep -q "matmuls on reference - no bf16 units in use .*correct but much slower than f32" <<< "$slow" \
    || fail "the reference path's header does not say bf16 is slow: $slow"
out=$("$bin" train "${common[@]}" --max-steps "$steps" --out "$dir/f" 2>&1) || fail "f32 run: $out"
grep -q "precision:" <<< "$out" && fail "an f32 run printed a precision line: $out"
python3 - "$dir/f/metrics.jsonl" "$dir/b/metrics.jsonl" <<'PY' || fail "bf16 did not track f32"
import json, sys
def losses(p):
    return [(r["step"], r["loss"]) for r in map(json.loads, open(p)) if "loss" in r and "step" in r]
f, b = losses(sys.argv[1]), losses(sys.argv[2])
assert [s for s, _ in f] == [s for s, _ in b] and f, (f, b)
for (s, lf), (_, lb) in zip(f, b):
    print(f"step {s}: f32 {lf:.4f} bf16 {lb:.4f}")
    assert abs(lf - lb) <= 0.15, f"step {s}: {lf} vs {lb}"
mf, mb = sum(l for _, l in f) / len(f), sum(l for _, l in b) / len(b)
assert abs(mf - mb) <= 0.05 * mf, (mf, mb)
assert f != b, "bf16 and f32 logged the same losses: bf16 did not run"
PY
cmp -s "$dir/f/checkpoint.safetensors" "$dir/b/checkpoint.safetensors" \
    && fail "bf16 and f32 wrote the same checkpoint"
echo "ok: bf16 tracks f32 over $steps steps (each logged loss within 0.15, the mean within 5%)"

# 3. bf16 resume is bit-exact.
"$bin" train "${common[@]}" --precision bf16 --max-steps 40 --out "$dir/b40" > /dev/null 2>&1 \
    || fail "bf16 40 steps"
"$bin" train "${common[@]}" --precision bf16 --max-steps 20 --out "$dir/b20" > /dev/null 2>&1 \
    || fail "bf16 20 steps"
"$bin" train --resume "$dir/b20" --max-steps 40 > /dev/null 2>&1 \
    || fail "bf16 resume"
cmp "$dir/b40/checkpoint.safetensors" "$dir/b20/checkpoint.safetensors" \
    || fail "bf16 20 + 20 steps wrote another checkpoint than 40 steps"
echo "ok: bf16 resumes bit-exactly"

# 4. f32 -> bf16 -> f32: each leg runs in the precision asked, masters stay f32.
"$bin" train "${common[@]}" --max-steps 20 --out "$dir/x" > /dev/null 2>&1 || fail "f32 20 steps"
out=$("$bin" train --resume "$dir/x" --precision bf16 --max-steps 40 2>&1) \
    || fail "f32 run resumed in bf16: $out"
grep -q "precision: bf16" <<< "$out" || fail "the resumed run is not bf16: $out"
cmp -s "$dir/x/checkpoint.safetensors" "$dir/b40/checkpoint.safetensors" \
    && fail "f32 then bf16 equals bf16 throughout"
"$bin" train --resume "$dir/x" --precision f32 --max-steps 60 > /dev/null 2>&1 \
    || fail "bf16 leg resumed in f32"
python3 - "$dir/x/checkpoint.safetensors" <<'PY' || fail "checkpoint tensors are not f32"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
kinds = {v["dtype"] for k, v in head.items() if k != "__metadata__"}
# Float tensors are the f32 masters; integer ones (counters, the epoch's sums) are as in f32 runs.
assert "F32" in kinds and not kinds & {"BF16", "F16", "F64"}, kinds
PY
echo "ok: f32 resumes in bf16 and back; masters stay f32"
