#!/usr/bin/env bash
# The bf16 path named, and --precision on every benchmark (issue 27, parts 4-5):
#  1. `replicator info` names the path bf16 takes - amx, avx512_bf16, avx512_core (emulated) or
#     reference - the one this CPU's flags call for, "fast" only for amx and avx512_bf16; oneDNN
#     held below AVX512-BF16 (DNNL_MAX_CPU_ISA) or the ref table name the slow paths as such;
#  2. bench resnet --precision bf16 runs bf16 (its JSON names bf16 and the path info names, and
#     its loss differs from f32's by at most 5%, but differs); f32 says f32; a bad value is
#     refused by name;
#  3. bench sngan, bench pipeline, bench allreduce (bf16 payloads) and bench_d4pg report bf16;
#     bench ps, which runs no model and moves f32, refuses bf16 saying why.
# Usage: cli_bench_precision.sh path/to/replicator [path/to/bench_d4pg]
set -euo pipefail
bin=$(realpath "$1")
d4pg=${2:-}
fail() { echo "FAIL: $*"; exit 1; }
field() { # field KEY JSON-LINE: the value of KEY
    /usr/bin/python3 -c 'import json, sys; print(json.loads(sys.argv[2])[sys.argv[1]])' "$1" "$2"
}

# 1. info.
out=$("$bin" info) || fail "info: $out"
line=$(grep '^bf16 ' <<< "$out") || fail "info names no bf16 path: $out"
path=$(sed -E 's/^bf16 +(amx|avx512_bf16|avx512_core \(emulated\)|reference) - .*/\1/' <<< "$line")
[ "$path" != "$line" ] || fail "info's bf16 line names none of the four paths: $line"
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
if grep -qw amx_bf16 <<< "$flags"; then
    # The kernel may refuse AMX's tile state to the process; then AVX512-BF16 runs.
    want="amx|avx512_bf16"
elif grep -qw avx512_bf16 <<< "$flags"; then
    want="avx512_bf16"
elif grep -qw avx512f <<< "$flags"; then
    want="avx512_core \\(emulated\\)"
else
    want="reference"
fi
grep -Eqx "$want" <<< "$path" || fail "info names $path, but this CPU's flags call for $want"
case "$path" in
    amx | avx512_bf16) grep -q "is fast" <<< "$line" || fail "a fast path not called fast: $line" ;;
    *) grep -q "correct but .*slower than f32" <<< "$line" || fail "slow path not named: $line" ;;
esac
line=$(RP_KERNELS=ref "$bin" info | grep '^bf16 ')
grep -q "^bf16 *reference - .*much slower than f32" <<< "$line" \
    || fail "the ref table's path: $line"
if [ "$path" != reference ]; then
    line=$(DNNL_MAX_CPU_ISA=AVX512_CORE "$bin" info | grep '^bf16 ')
    grep -q "^bf16 *avx512_core (emulated) - .*correct but slower than f32" <<< "$line" \
        || fail "oneDNN held to AVX512_CORE: $line"
fi
echo "ok: info names the bf16 path ($path) as this CPU's flags call for"

# 2. bench resnet.
small=(--batch 8 --size 16 --iters 1 --warmup 2 --threads 2 --json)
b=$("$bin" bench resnet "${small[@]}" --precision bf16) || fail "bench resnet bf16: $b"
f=$("$bin" bench resnet "${small[@]}" --precision f32) || fail "bench resnet f32: $f"
[ "$(field precision "$b")" = bf16 ] || fail "bf16 run's JSON: $b"
[ "$(field bf16_path "$b")" = "$path" ] || fail "bf16_path is not info's $path: $b"
[ "$(field precision "$f")" = f32 ] || fail "f32 run's JSON: $f"
/usr/bin/python3 - "$f" "$b" <<'PY' || fail "bf16's loss does not track f32's: $f / $b"
import json, math, sys
lf, lb = (json.loads(a)["final_loss"] for a in sys.argv[1:])
assert math.isfinite(lf) and math.isfinite(lb), (lf, lb)
assert lf != lb, "bf16 and f32 gave the same loss: bf16 did not run"
assert abs(lf - lb) <= 0.05 * lf, (lf, lb)
PY
set +e
msg=$("$bin" bench resnet --precision f16 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q -- "--precision f16: expected f32 or bf16" <<< "$msg" \
    || fail "--precision f16 gave exit $rc: $msg"
# Its line names the path, and says that bf16 is slower than f32 where it is (the ref table).
out=$("$bin" bench resnet --batch 8 --size 16 --iters 1 --warmup 1 --threads 2 --precision bf16) \
    || fail "bench resnet bf16 (text): $out"
case "$path" in
    amx | avx512_bf16) grep -q "bf16 on $path:" <<< "$out" || fail "bench's line: $out" ;;
    *) grep -q "bf16 on $path (slower than f32)" <<< "$out" || fail "bench's line: $out" ;;
esac
out=$(RP_KERNELS=ref "$bin" bench resnet --batch 4 --size 16 --iters 1 --warmup 1 --threads 2 \
    --precision bf16) || fail "bench resnet bf16 on the ref table: $out"
grep -q "bf16 on reference (slower than f32)" <<< "$out" || fail "the ref table's bench line: $out"
echo "ok: bench resnet runs and reports bf16, its loss within 5% of f32's"

# 3. The other benchmarks.
out=$("$bin" bench sngan --ch-g 8 --ch-d 8 --d-batch 16 --g-batch 16 --n-dis 1 --iters 1 \
    --warmup 1 --precision bf16 --json) || fail "bench sngan: $out"
[ "$(field precision "$out")" = bf16 ] || fail "bench sngan's JSON: $out"
if [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    out=$("$bin" bench pipeline --data /usr/share/datasets/fashion-mnist --batch 16 --micro 2 \
        --steps 1 --warmup 0 --schedule gpipe --precision bf16 --json) || fail "pipeline: $out"
    [ "$(field precision "$out")" = bf16 ] || fail "bench pipeline's JSON: $out"
else
    echo "SKIP: bench pipeline (Fashion-MNIST is not installed)"
fi
out=$("$bin" bench allreduce --replicas 2 --min 4K --max 4K --precision bf16 --json) \
    || fail "bench allreduce: $out"
[ "$(field precision "$out")" = bf16 ] || fail "bench allreduce's JSON: $out"
set +e
msg=$("$bin" bench ps --precision bf16 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q "runs no model, and the parameter servers move and apply f32" <<< "$msg" \
    || fail "bench ps --precision bf16 gave exit $rc: $msg"
if [ -n "$d4pg" ]; then
    out=$("$d4pg" --obs 5 --act 1 --replicas 1 --threads 1 --steps 2 --warmup 1 --precision bf16 \
        --json) || fail "bench_d4pg: $out"
    [ "$(field precision "$out")" = bf16 ] || fail "bench_d4pg's JSON: $out"
fi
echo "ok: bench sngan, pipeline, allreduce and bench_d4pg report bf16; bench ps refuses it"
