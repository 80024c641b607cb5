#!/usr/bin/env bash
# `replicator bench resnet --memory [--torch SCRIPT]` (issue 17's memory report):
#  1. the JSON report's breakdown: gradients and momentum are exactly ResNet-20's 272,186
#     trainable floats, the arena's footprint holds its live peak, which holds the forward pass's,
#     and the process's peak resident memory holds them all;
#  2. --torch runs the peer's script once per memory format and reports its peak resident memory
#     (a stand-in script that holds 300 MiB is measured as such), and names a script that fails;
#  3. --torch without --memory is refused (exit 2);
#  4. with --precision bf16 the peer is asked for bf16 too (its autocast), and the report says
#     bf16.
# Usage: cli_memory.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(bench resnet --batch 16 --iters 1 --warmup 2 --threads 2 --memory --json)

# 1. The breakdown.
out=$("$bin" "${common[@]}")
mem=$(grep '"memory"' <<< "$out") || fail "no memory line in: $out"
/usr/bin/python3 - "$mem" <<'PY' || fail "bad memory report: $mem"
import json, sys
m = json.loads(sys.argv[1])["memory"]
trainable = 272186 * 4
assert m["gradients"] == trainable, m
assert m["optimizer_state"] == trainable, m          # momentum: one slot
assert m["parameters"] > trainable, m                # + the running statistics
assert 0 < m["forward_live"] <= m["arena_live_peak"] <= m["arena_footprint"], m
assert m["kernel_caches"] > 0, m
assert m["peak_resident"] > m["arena_footprint"] + m["parameters"], m
assert m["pytorch_peak_channels_last"] == 0 and m["pytorch_peak_nchw"] == 0, m
PY
echo "ok: the breakdown adds up ($mem)"

# 2. The peer's peak: a stand-in that holds 300 MiB, then one that fails.
cat > "$dir/peer.sh" <<'SH'
#!/bin/sh
exec /usr/bin/python3 -c 'b = bytearray(300 << 20); b[::4096] = b"x" * len(b[::4096])'
SH
chmod +x "$dir/peer.sh"
out=$("$bin" "${common[@]}" --torch "$dir/peer.sh")
/usr/bin/python3 - "$(grep '"memory"' <<< "$out")" <<'PY' || fail "the peer's peak is wrong: $out"
import json, sys
m = json.loads(sys.argv[1])["memory"]
for k in ("pytorch_peak_channels_last", "pytorch_peak_nchw"):
    assert 300 << 20 <= m[k] < 400 << 20, (k, m[k])
PY
printf '#!/bin/sh\nexit 3\n' > "$dir/broken.sh"
chmod +x "$dir/broken.sh"
err=$("$bin" "${common[@]}" --torch "$dir/broken.sh" 2>&1 >/dev/null)
grep -q "broken.sh --format channels_last failed; run it by hand" <<< "$err" \
    || fail "a failing peer script is not named: $err"
echo "ok: --torch measures the peer's peak and names a script that fails"

# 3. --torch alone.
set +e
msg=$("$bin" bench resnet --torch "$dir/peer.sh" 2>&1); rc=$?
set -e
[ $rc -eq 2 ] || fail "--torch without --memory gave exit $rc: $msg"
grep -q -- "--torch goes with --memory" <<< "$msg" || fail "unclear message: $msg"
echo "ok: --torch without --memory is refused"

# 4. The peer at our precision: a stand-in that records its arguments.
printf '#!/bin/sh\necho "$*" >> "%s/args"\n' "$dir" > "$dir/record.sh"
chmod +x "$dir/record.sh"
out=$("$bin" "${common[@]}" --precision bf16 --torch "$dir/record.sh")
[ "$(grep -c -- "--precision bf16" "$dir/args")" -eq 2 ] \
    || fail "the peer was not asked for bf16 in both formats: $(cat "$dir/args")"
grep '"memory"' <<< "$out" | grep -q '"precision":"bf16"' || fail "the report does not say bf16: $out"
echo "ok: --precision bf16 runs the peer in bf16 and says so"
