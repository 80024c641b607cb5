#!/usr/bin/env bash
# Side-by-side ResNet training throughput: replicator in f32 and bf16 against
# PyTorch 1.13 at its best (Debian's python3-torch: OPENBLAS_NUM_THREADS=1, its
# thread count set, four arms tried - f32 and bf16 autocast, each channels-last
# and NCHW - and the fastest kept as "PyTorch's best"). The two frameworks
# alternate in rounds, the one that goes first alternating too, so the shared
# machine's noise hits both alike; compare only within a round. Prints each
# round's numbers and the ratios replicator / PyTorch's best (above 1:
# replicator faster) for our f32 and our bf16, then their medians.
#
# Usage: bench/compare_resnet.sh [resnet20|resnet50] [threads] [rounds] [replicas]
#        (replicas: ours as that many data-parallel replicas sharing the threads, default 1;
#        PyTorch runs one process on all the threads, and for ResNet-20 with replicas > 1
#        also as DistributedDataParallel - that many processes sharing the threads, gloo,
#        bench/resnet_torch_ddp.py - in both formats and precisions, four more arms)
#        (build first: scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-resnet20}
threads=${2:-2}
rounds=${3:-3}
replicas=${4:-1}
if [ "$model" = resnet20 ]; then
    ours=(build/replicator bench resnet --model resnet20 --batch 128 --size 28 --channels 1 --iters 20 --threads "$threads" --replicas "$replicas" --json)
    theirs=(bench/torch_env.sh --model resnet20 --batch 128 --iters 20 --threads "$threads" --format both --precision both --json)
    if [ "$replicas" -gt 1 ]; then
        ddp=(bench/torch_env.sh --procs "$replicas" --threads $((threads / replicas > 0 ? threads / replicas : 1)) --batch 128 --iters 20 --json)
    fi
else
    ours=(build/replicator bench resnet --model resnet50 --batch 32 --iters 3 --warmup 1 --threads "$threads" --replicas "$replicas" --json)
    theirs=(bench/torch_env.sh --model resnet50 --batch 32 --iters 3 --warmup 1 --threads "$threads" --format both --precision both --json)
fi
echo "ours:   ${ours[*]} --precision f32|bf16"
echo "theirs: ${theirs[*]}"
if [ -n "${ddp+x}" ]; then echo "theirs: SCRIPT=bench/resnet_torch_ddp.py ${ddp[*]} --format nchw|channels_last --precision f32|bf16"; fi

ips() { /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["images_per_s"])'; }
run_ours() {
    f32=$("${ours[@]}" --precision f32 | ips)
    bf16=$("${ours[@]}" --precision bf16 | ips)
}
# Sets arms ("f32/channels_last 4.65 ...") and best ("13.39 bf16/channels_last").
# DDP's arms (one format and precision per run) are named ddp-f32/nchw and so on.
run_theirs() {
    local out
    out=$( { "${theirs[@]}" 2>/dev/null
             if [ -n "${ddp+x}" ]; then for f in nchw channels_last; do for p in f32 bf16; do
                 SCRIPT=bench/resnet_torch_ddp.py timeout 180 "${ddp[@]}" --format $f --precision $p 2>/dev/null \
                     || echo "DDP arm $f/$p failed or passed 180 s; left out this round" >&2
             done; done; fi; } | /usr/bin/python3 -c '
import json, sys
rs = [json.loads(l) for l in sys.stdin if l.startswith("{")]
for r in rs:
    if r.get("framework") == "pytorch-ddp":
        r["precision"] = "ddp-" + r["precision"]
# The four single-process arms must all run; a DDP arm that failed is left out (said above).
if sum(r.get("framework") != "pytorch-ddp" for r in rs) != 4:
    sys.exit(1)
best = max(rs, key=lambda r: r["images_per_s"])
print(", ".join("%s/%s %s" % (r["precision"], r["format"], r["images_per_s"]) for r in rs))
print(best["images_per_s"], best["precision"] + "/" + best["format"])') || {
        echo "PyTorch run failed: ${theirs[*]}" >&2
        exit 1
    }
    arms=$(head -n 1 <<< "$out")
    best=$(tail -n 1 <<< "$out")
}

ratios_f32=()
ratios_bf16=()
for r in $(seq "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then run_ours; run_theirs; else run_theirs; run_ours; fi
    b=${best%% *}
    rf=$(awk -v a="$f32" -v b="$b" 'BEGIN { printf "%.3f", a / b }')
    rb=$(awk -v a="$bf16" -v b="$b" 'BEGIN { printf "%.3f", a / b }')
    ratios_f32+=("$rf")
    ratios_bf16+=("$rb")
    echo "round $r: replicator f32 $f32, bf16 $bf16 img/s; pytorch $arms img/s;" \
         "best ${best##* } $b: ratios f32 $rf, bf16 $rb"
done
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "median ratio replicator / PyTorch's best (above 1: replicator faster), $model, $threads" \
     "threads, $rounds rounds: f32 $(med "${ratios_f32[@]}"), bf16 $(med "${ratios_bf16[@]}")"
