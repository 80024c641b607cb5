#!/usr/bin/env bash
# `replicator export RUN_DIR OUT [--dtype bf16|f32]` end to end, on runs of a few steps:
#  1. a --precision bf16 MLP run exported in bf16: a safetensors file as any reader parses it
#     (8-byte length, JSON header padded to 8, data_offsets tiling the buffer, each tensor
#     aligned to its element size), holding the run's parameters only (every param/ tensor of
#     the checkpoint with its shape, no optimizer state or counters), each value the checkpoint's
#     f32 master rounded to nearest even (checked over every value against a rounding written
#     here, and a few by hand), and the run's configuration as metadata;
#  2. --dtype f32: the masters' bytes exactly; the run's checkpoint is left as it was;
#  3. an SN-GAN and a D4PG run export their networks (gen/ and dis/; d4pg's four);
#  4. refused, by name: a bad --dtype, OUT being the run's checkpoint (left intact), a missing
#     run, a missing OUT, an unknown option; an export is no checkpoint to evaluate or resume.
# Usage: cli_export.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
fail() { echo "FAIL: $*"; exit 1; }
common=(--data "$data" --limit 256 --threads 1 --quiet)

# 1. bf16.
"$bin" train mlp "${common[@]}" --batch 64 --epochs 1 --max-steps 3 --precision bf16 \
    --out "$dir/run" > /dev/null 2>&1 || fail "training the MLP"
cp "$dir/run/checkpoint.safetensors" "$dir/before.safetensors"
out=$("$bin" export "$dir/run" "$dir/w.safetensors" --dtype bf16 2>&1) || fail "export: $out"
grep -q "exported 6 tensors (535818 values, 1071636 bytes as bf16)" <<< "$out" \
    || fail "export's report: $out"
"$bin" export "$dir/run" "$dir/default.safetensors" > /dev/null || fail "export, default dtype"
cmp "$dir/w.safetensors" "$dir/default.safetensors" || fail "the default dtype is not bf16"
python3 - "$dir/run/checkpoint.safetensors" "$dir/w.safetensors" bf16 <<'PY' \
    || fail "the bf16 export does not read as safetensors holding the rounded masters"
import json, struct, sys
from array import array

def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    assert n % 8 == 0 and 8 + n <= len(raw), (path, n)
    head = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = head.pop("__metadata__")
    size = {"F32": 4, "BF16": 2, "I64": 8, "U64": 8}
    at = 0
    for name, t in sorted(head.items(), key=lambda kv: kv[1]["data_offsets"]):
        s, e = t["data_offsets"]
        count = 1
        for d in t["shape"]:
            count *= d
        assert s == at and e - s == count * size[t["dtype"]], (path, name, t)
        assert s % size[t["dtype"]] == 0, (path, name, "unaligned")
        at = e
    assert 8 + n + at == len(raw), (path, "size")
    return raw[8 + n:], head, meta

def rne(u):  # f32 bits -> bf16 bits, to nearest, ties to even; NaN made quiet
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return (u >> 16) | 0x40
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF

ck_data, ck, ck_meta = read(sys.argv[1])
ex_data, ex, ex_meta = read(sys.argv[2])
params = sorted(k for k in ck if k.startswith("param/"))
assert sorted(ex) == params and len(params) == 6, (sorted(ex), params)
assert json.loads(ex_meta["replicator.config"]) == json.loads(ck_meta["replicator.config"])
assert json.loads(ex_meta["replicator.export"]) == {"dtype": "bf16", "step": 3}, ex_meta
total = 0
for name in params:
    c, e = ck[name], ex[name]
    assert c["dtype"] == "F32" and e["dtype"] == "BF16" and e["shape"] == c["shape"], name
    f32 = array("I", ck_data[c["data_offsets"][0]:c["data_offsets"][1]])
    bf = array("H", ex_data[e["data_offsets"][0]:e["data_offsets"][1]])
    assert len(f32) == len(bf) > 0, name
    for i, (u, h) in enumerate(zip(f32, bf)):
        if rne(u) != h:
            raise SystemExit(f"{name}[{i}]: f32 {u:#010x} stored as {h:#06x}, want {rne(u):#06x}")
    # A few by value: the nearest bf16, within half a bf16 ulp (2^-8 relative) of the master.
    for i in (0, 1, len(f32) // 2, len(f32) - 1):
        x = struct.unpack("<f", struct.pack("<I", f32[i]))[0]
        y = struct.unpack("<f", struct.pack("<I", bf[i] << 16))[0]
        assert abs(x - y) <= abs(x) * 2.0**-8, (name, i, x, y)
    total += len(bf)
assert total == 535818, total
# The masters really held values that needed rounding (else the check above proves little).
w = ck["param/fc0.weight"]
f32 = array("I", ck_data[w["data_offsets"][0]:w["data_offsets"][1]])
assert sum(1 for u in f32 if u & 0xFFFF) > len(f32) // 2
print(f"ok: {total} values, each the RNE rounding of its f32 master")
PY
echo "ok: bf16 export: parameters only, a plain safetensors file, each value rounded to nearest even"

# 2. f32, and the checkpoint untouched.
"$bin" export "$dir/run" "$dir/w32.safetensors" --dtype f32 > /dev/null || fail "--dtype f32"
python3 - "$dir/run/checkpoint.safetensors" "$dir/w32.safetensors" <<'PY' \
    || fail "the f32 export does not hold the masters' bytes"
import json, struct, sys
def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__")
    return raw[8 + n:], head
ck_data, ck = read(sys.argv[1])
ex_data, ex = read(sys.argv[2])
assert sorted(ex) == sorted(k for k in ck if k.startswith("param/"))
for name, e in ex.items():
    c = ck[name]
    assert e["dtype"] == "F32" and e["shape"] == c["shape"]
    assert ex_data[slice(*e["data_offsets"])] == ck_data[slice(*c["data_offsets"])], name
PY
cmp "$dir/before.safetensors" "$dir/run/checkpoint.safetensors" || fail "export changed the run"
echo "ok: f32 export holds the masters' bytes; the run's checkpoint is unchanged"

# 3. The other models' networks.
"$bin" train sngan "${common[@]}" --max-steps 1 --out "$dir/gan" > /dev/null 2>&1 \
    || fail "training the SN-GAN"
"$bin" train d4pg --threads 1 --quiet --max-steps 2 --out "$dir/d4pg" > /dev/null 2>&1 \
    || fail "training D4PG"
"$bin" export "$dir/gan" "$dir/gan.safetensors" > /dev/null || fail "export of the SN-GAN"
"$bin" export "$dir/d4pg" "$dir/d4pg.safetensors" > /dev/null || fail "export of D4PG"
python3 - "$dir/gan.safetensors" "$dir/d4pg.safetensors" <<'PY' \
    || fail "the SN-GAN's or D4PG's export holds the wrong tensors"
import json, struct, sys
def names(path):
    raw = open(path, "rb").read()
    head = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    head.pop("__metadata__")
    assert {t["dtype"] for t in head.values()} == {"BF16"}, path
    return {k.rsplit("/", 1)[0] if k.startswith("d4pg/") else k.split("/")[0] for k in head}
assert names(sys.argv[1]) == {"gen", "dis"}, names(sys.argv[1])
assert names(sys.argv[2]) == {"d4pg/policy", "d4pg/critic", "d4pg/target_policy",
                              "d4pg/target_critic"}, names(sys.argv[2])
PY
echo "ok: the SN-GAN exports gen/ and dis/, D4PG its four networks"

# 4. Refusals.
# refused RC TEXT ARGS...: `replicator ARGS...` exits with RC and says TEXT.
refused() {
    local want=$1 text=$2 out rc=0
    shift 2
    out=$("$bin" "$@" 2>&1) || rc=$?
    [ "$rc" -eq "$want" ] || fail "$* exited $rc, not $want: $out"
    grep -qF -- "$text" <<< "$out" || fail "$* did not say '$text': $out"
}
refused 2 'dtype must be bf16 or f32, not "fp16"' export "$dir/run" "$dir/x.safetensors" --dtype fp16
[ ! -e "$dir/x.safetensors" ] || fail "a bad --dtype wrote a file"
refused 1 "is the run's checkpoint" export "$dir/run" "$dir/run/checkpoint.safetensors"
cmp "$dir/before.safetensors" "$dir/run/checkpoint.safetensors" \
    || fail "an export over the run's checkpoint replaced it"
refused 1 "$dir/none/checkpoint.safetensors" export "$dir/none" "$dir/x.safetensors"
refused 2 "needs OUT.safetensors" export "$dir/run"
refused 2 "unknown option --bf16" export "$dir/run" "$dir/x.safetensors" --bf16
# An export holds bf16 weights, not f32 masters: eval refuses it as a run's checkpoint, by name.
mkdir "$dir/fake"
cp "$dir/w.safetensors" "$dir/fake/checkpoint.safetensors"
refused 1 "param/fc0.weight" eval "$dir/fake"
echo "ok: a bad --dtype, the run's own checkpoint as OUT, a missing run or OUT, an unknown" \
    "option refused; an export is not evaluated as a run"
