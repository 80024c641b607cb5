#!/usr/bin/env bash
# `replicator plan` and `replicator train --plan-check` (issue 15's planner), ResNet-20 at batch 32
# on a small subset of Fashion-MNIST:
#  1. --plan-check on 1 replica, 2 replicas and 2 replicas with --zero (and both with
#     --grad-dtype bf16: the gradients' bytes exactly half): every worker's parameters,
#     gradients, optimizer state and arena live peak within 10% of the plan (read from the table
#     and checked here, not only by the command's own verdict), and the step's traffic exactly the
#     plan's on each of 3 steps (the lines the communicators' counters confirmed are named);
#  2. `plan --json`: the numbers that follow from the layout alone - 272,186 trainable floats,
#     one momentum slot, ZeRO-1's shards of ceil(P/3) values with a short last one, the gradient
#     bytes that cross the data axis - and the activations fit;
#  3. a replica cut into 2 pipeline stages (--model-parallel 2, 1F1B over 2 micro-batches) on 2
#     ZeRO-1 replicas: each stage's parameters, gradients and optimizer state exactly the plan's,
#     and its traffic on both axes - the stage's gradient shards and batch norm sums on the data
#     axis, the activations, gradients, labels and loss on the pipe axis - exact in every step;
#     and micro-batches on one worker: batch norm's sums per micro-batch;
#  4. tensor parallelism (--tensor-parallel 2 on 1 and on 2 replicas, and 2 with bf16 gradients
#     on the data axis: half the bytes): every worker's shard's
#     parameters, gradients and optimizer state exactly the plan's, its arena within 10%, and the
#     model axis's all-reduces exactly what the blocks send - derived here from ResNet-20's shapes,
#     one all-reduce each way per block - as are batch norm's sums over the split channels;
#  5. sync groups (--sync-groups 2 on 4 replicas): each worker's group traffic - gradient buckets,
#     parameters, ticket, stop agreement, batch norm - exact in every step it trained, its own
#     optimizer copy counted, the servers' shards in the JSON plan;
#  6. ResNet-50 in 2 stages on 2 replicas, whose last units see 1x1 images: planned (that
#     stage recorded at batch 2 and 4, where batch 1 would leave batch norm one value) and checked;
#  7. bad input is a clear error: an unknown option, --resume, an async layout, an MLP in stages,
#     groups of one replica, a width that --tensor-parallel does not divide, a micro-batch
#     too small for ResNet-50's 1x1 batch norms;
#  8. under mpirun, sync groups of ranks (4 replica ranks in 2 groups and a server rank): every
#     replica rank's check passes with the same group traffic as on threads, and the plan puts the
#     servers' shards on the server rank.
# Usage: cli_plan.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
fail() { echo "FAIL: $*"; exit 1; }
common=(resnet20 --data "$data" --limit 256 --batch 32 --threads 2 --threads-per-replica 1
        --no-checkpoint --quiet)

# plan_check NAME ARGS...: train's --plan-check with ARGS into $dir/NAME; sets out, and fails
# unless the command passed with its verdict.
plan_check() {
    local name=$1; shift
    out=$("$bin" train "${common[@]}" --plan-check --out "$dir/$name" "$@" 2>&1) \
        || fail "$name: --plan-check failed: $out"
    grep -q "plan check: memory within 10% and communication exact on every worker" <<< "$out" \
        || fail "$name: no verdict: $out"
}

# 1. The check on three layouts.
check() {
    local name=$1; shift
    plan_check "$name" "$@"
    /usr/bin/python3 - "$name" "$out" "$@" <<'PY' || fail "$name: $out"
import re, sys
name, out, args = sys.argv[1], sys.argv[2], sys.argv[3:]
replicas = int(args[args.index("--replicas") + 1])
zero = "--zero" in args
g = 2 if "bf16" in args else 4                    # --grad-dtype bf16: 2 bytes a gradient value
rows = re.findall(r"^    (parameters and buffers|gradients|optimizer state|activations \(arena "
                  r"live peak\)) +(\d+) +(\d+) +([-+][\d.]+)%", out, re.M)
assert len(rows) == 4 * replicas, ("rows", len(rows))
for what, pred, meas, diff in rows:
    pred, meas = int(pred), int(meas)
    assert pred > 0 and abs(meas - pred) <= 0.10 * pred, (what, pred, meas)
    if what != "activations (arena live peak)":
        assert meas == pred, (what, pred, meas)   # counted, not estimated
exact = re.findall(r"^    data (\S+) +(\S+) +(\d+) calls +(\d+) B per step: exact in 3 steps",
                   out, re.M)
assert "differs" not in out and "over 10%" not in out
P = 272186 * g
if replicas == 1:
    assert exact == [], exact                     # one replica sends nothing
elif not zero:
    # per worker: 2 gradient buckets of 1 MiB+ (all of P), 21 batch norms x 2 (forward, backward)
    assert exact == [("all_reduce", "user", "42", "25424"), ("all_reduce", "runtime", "2", str(P))] * 2, exact
else:
    S = (272186 + 1) // 2
    assert ("reduce_scatter", "runtime", "2", str(S * g)) in exact, exact
    assert ("all_gather", "runtime", "3", str(S * 4 + 24)) in exact, exact
    assert len(exact) == 3 * 2, exact
PY
    echo "ok: $name: memory within 10% of the plan, traffic exact over 3 steps"
}
check one --replicas 1
check sync2 --replicas 2
check zero2 --replicas 2 --zero
check sync2-bf16 --replicas 2 --grad-dtype bf16
check zero2-bf16 --replicas 2 --zero --grad-dtype bf16

# 2. The JSON plan on 3 ZeRO-1 replicas (33 = 3 x 11).
out=$("$bin" plan "${common[@]}" --batch 33 --replicas 3 --zero --json) || fail "plan --json: $out"
/usr/bin/python3 - "$out" <<'PY' || fail "bad JSON plan: $out"
import json, sys
p = json.loads(sys.argv[1])
assert p["replicas"] == 3 and p["batch_per_worker"] == 11 and p["zero"], p
P, S = 272186, (272186 + 2) // 3
w = p["workers"]
assert [x["worker"] for x in w] == [0, 1, 2]
for x in w:
    m = x["memory"]
    assert m["gradients"] == P * 4 and m["parameters"] > P * 4, m
    assert m["total"] == sum(m[k] for k in ("parameters", "gradients", "optimizer_state",
                                             "strategy", "activations", "loader")), m
    kinds = {(t["kind"], t["what"]): (t["calls"], t["bytes"]) for t in x["traffic"]}
    assert kinds[("reduce_scatter", "gradient shards (mean)")][1] == S * 4, kinds
    assert kinds[("all_gather", "parameter shards")][1] == S * 4, kinds
    assert kinds[("all_gather", "gradient finiteness exchange")] == (1, 24), kinds
assert [x["memory"]["optimizer_state"] for x in w] == [S * 4, S * 4, (P - 2 * S) * 4], w
f = p["activations_fit"][0]
assert 0 < f["peak_batch_1"] < f["peak_batch_2"], f
assert abs(f["a"] + 11 * f["b"] - w[0]["memory"]["activations"]) <= 1, f
PY
echo "ok: plan --json: shards, traffic and the activations fit"

# 3. Pipeline stages.
out=$("$bin" train "${common[@]}" --plan-check --out "$dir/mp" --replicas 2 --zero \
      --model-parallel 2 --pipeline 1f1b --micro-batches 2 2>&1) || fail "stages: $out"
grep -q "plan check: memory within 10% and communication exact on every worker" <<< "$out" \
    || fail "stages: no verdict: $out"
/usr/bin/python3 - "$out" <<'PY' || fail "stages: $out"
import re, sys
out = sys.argv[1]
assert "differs" not in out and "over 10%" not in out
workers = re.findall(r"^  worker (\d), stage (\d) \(3 steps\)", out, re.M)
assert sorted(workers) == [("0", "0"), ("1", "1"), ("2", "0"), ("3", "1")], workers
rows = re.findall(r"^    (parameters and buffers|gradients|optimizer state) +(\d+) +(\d+) ", out, re.M)
assert len(rows) == 12 and all(p == m for _, p, m in rows), rows
exact = re.findall(r"^    (data|pipe) +(\S+) +(\S+) +(\d+) calls +(\d+) B per step: exact in 3 steps",
                   out, re.M)
axes = {(a, k) for a, k, *_ in exact}
for want in [("data", "reduce_scatter"), ("data", "all_gather"), ("data", "all_reduce"),
             ("pipe", "send"), ("pipe", "recv"), ("pipe", "broadcast")]:
    assert want in axes, (want, exact)
# stage 0 sends 2 micro-batches of 8 activations, a 20-byte shape header before each, and the
# batch's 16 labels; it receives the activations' gradients, the same size
s0 = [(int(c), int(b)) for a, k, cl, c, b in exact if a == "pipe" and k in ("send", "recv")][:2]
(sc, sb), (rc, rb) = s0
assert (sc, rc) == (5, 2) and sb - rb == 2 * 20 + 16 * 4 and rb % (2 * 8 * 4) == 0, s0
PY
echo "ok: 2 replicas x 2 pipeline stages (1F1B, ZeRO-1): memory counted, traffic exact on both axes"

# Micro-batches on one worker (gradient accumulation through a pipeline of one stage): batch norm
# sums once per micro-batch, the gradients reduced once per step.
out=$("$bin" train "${common[@]}" --plan-check --out "$dir/acc" --replicas 2 --micro-batches 2 2>&1) \
    || fail "micro-batches: $out"
grep -q "plan check: memory within 10% and communication exact on every worker" <<< "$out" \
    || fail "micro-batches: no verdict: $out"
[ "$(grep -c "data all_reduce      user         84 calls        50848 B per step: exact" <<< "$out")" = 2 ] \
    || fail "micro-batches: batch norm's 2 x 42 sums per step not confirmed on both workers: $out"
echo "ok: 2 micro-batches on each of 2 replicas: batch norm twice per step, exact"

# 4. Tensor parallelism.
tp_check() {
    local name=$1; shift
    plan_check "$name" "$@"
    /usr/bin/python3 - "$out" "$@" <<'PY' || fail "$name: $out"
import re, sys
out, args = sys.argv[1], sys.argv[2:]
R = int(args[args.index("--replicas") + 1])
T = int(args[args.index("--tensor-parallel") + 1])
B = 32 // R          # every worker of a replica reads the replica's whole batch
assert "differs" not in out and "over 10%" not in out
workers = re.findall(r"^  worker (\d+), shard (\d+) \(3 steps\)", out, re.M)
assert workers == [(str(w), str(w % T)) for w in range(R * T)], workers
rows = re.findall(r"^    (parameters and buffers|gradients|optimizer state|activations \(arena "
                  r"live peak\)) +(\d+) +(\d+) +([-+][\d.]+)%", out, re.M)
assert len(rows) == 4 * R * T, ("rows", len(rows))
for what, pred, meas, diff in rows:
    pred, meas = int(pred), int(meas)
    assert pred > 0 and abs(meas - pred) <= 0.10 * pred, (what, pred, meas)
    if what != "activations (arena live peak)":
        assert meas == pred, (what, pred, meas)
    if what == "gradients":
        assert pred < 272186 * 4 * 0.6, pred      # a shard: the split blocks halved
# The model axis: each of the 9 blocks all-reduces its output in the forward and its input's
# gradient in the backward (floats per sample; 28x28 images, widths 16, 32, 64); with
# --grad-dtype bf16 the backward's in bf16 (2 bytes), the forward's in f32.
fwd = 3 * 28 * 28 * 16 + 3 * 14 * 14 * 32 + 3 * 7 * 7 * 64
bwd = 3 * 28 * 28 * 16 + (28 * 28 * 16 + 2 * 14 * 14 * 32) + (14 * 14 * 32 + 2 * 7 * 7 * 64)
model = re.findall(r"^    model all_reduce +user +(\d+) calls +(\d+) B per step: exact in 3 steps",
                   out, re.M)
grad_bytes = 2 if "bf16" in args else 4
assert model == [("18", str(B * (4 * fwd + grad_bytes * bwd)))] * (R * T), model
data = re.findall(r"^    data (\S+) +(\S+) +(\d+) calls +(\d+) B per step: exact in 3 steps",
                  out, re.M)
if R == 1:
    assert data == [], data                       # one replica: nothing on the data axis
else:
    grads = [int(p) for w, p, m, d in rows if w == "gradients"]
    # batch norm's sums (2C + 1 doubles, forward and backward) over 21 layers, each block's bn1
    # on its width / T channels; the shard's gradients in one bucket
    C = 16 + 3 * (16 // T + 16) + 3 * (32 // T + 32) + 3 * (64 // T + 64) + 32 + 64
    want = [("all_reduce", "user", "42", str(2 * 8 * (2 * C + 21)))]
    half = 2 if "bf16" in args else 1             # --grad-dtype bf16: half the gradient bytes
    for g in grads:
        assert ("all_reduce", "runtime", "1", str(g // half)) in data, (g, data)
    assert [d for d in data if d[1] == "user"] == want * (R * T), data
PY
    echo "ok: $name: each shard's memory counted, the model axis's all-reduces exact over 3 steps"
}
tp_check tp1x2 --replicas 1 --tensor-parallel 2
tp_check tp2x2 --replicas 2 --tensor-parallel 2
tp_check tp2x2-bf16 --replicas 2 --tensor-parallel 2 --grad-dtype bf16
tp_check tp1x2-bf16 --replicas 1 --tensor-parallel 2 --grad-dtype bf16

# The JSON plan of 2 x 2: the shards, in the runtime's order, and the model axis's fit.
out=$("$bin" plan "${common[@]}" --replicas 2 --tensor-parallel 2 --json) || fail "tp --json: $out"
/usr/bin/python3 - "$out" <<'PY' || fail "bad tensor-parallel JSON plan: $out"
import json, sys
p = json.loads(sys.argv[1])
assert p["tensor_parallel"] == 2 and p["replicas"] == 2 and p["batch_per_worker"] == 16, p
assert [(w["worker"], w["shard"]) for w in p["workers"]] == [(0, 0), (1, 1), (2, 0), (3, 1)]
m = p["activations_fit"][0]["model_axis"]
assert m["calls"] == 18 and m["bytes_batch_2"] == 2 * m["bytes_batch_1"], m
for w in p["workers"]:
    t = {(x["axis"], x["kind"], x["class"]): (x["calls"], x["bytes"]) for x in w["traffic"]}
    assert t[("model", "all_reduce", "user")] == (18, 16 * m["bytes_batch_1"]), t
PY
echo "ok: plan --json with --tensor-parallel 2: shards and the model axis's fit"

# 5. Sync groups: 2 groups of 2 replicas; the groups take the 6 batches as they come.
out=$("$bin" train "${common[@]}" --plan-check --out "$dir/groups" --replicas 4 --sync-groups 2 \
      --max-steps 6 2>&1) || fail "sync groups: --plan-check failed: $out"
grep -q "plan check: memory within 10% and communication exact on every worker" <<< "$out" \
    || fail "sync groups: no verdict: $out"
/usr/bin/python3 - "$out" <<'PY' || fail "sync groups: $out"
import re, sys
out = sys.argv[1]
assert "differs" not in out and "over 10%" not in out
P = 272186 * 4
workers = re.findall(r"^  worker (\d) \((\d) steps?\)", out, re.M)
# a group's replicas train the same batches; 6 batches between the groups
assert len(workers) >= 2 and len(workers) % 2 == 0, workers
steps = {int(w): int(n) for w, n in workers}
for g in range(2):
    if 2 * g in steps:
        assert steps[2 * g] == steps.get(2 * g + 1), steps
assert sum(steps.values()) == 2 * 6, steps
rows = re.findall(r"^    (parameters and buffers|gradients|optimizer state) +(\d+) +(\d+) ", out, re.M)
assert len(rows) == 3 * len(workers) and all(p == m for _, p, m in rows), rows
assert [int(p) for w, p, m in rows if w == "optimizer state"] == [P] * len(workers), rows
exact = re.findall(r"^    group (\S+) +(\S+) +(\d+) calls +(\d+) B per step: exact in (\d) steps?",
                   out, re.M)
# per worker and step: batch norm's 42 sums; 2 gradient buckets and the stop agreement (8 B);
# the parameters and the batch's ticket (8 B) broadcast from the group's rank 0
want = [("all_reduce", "user", "42", "25424"), ("all_reduce", "runtime", "3", str(P + 8)),
        ("broadcast", "runtime", "2", str(P + 8))]
assert [e[:4] for e in exact] == want * len(workers), exact
assert re.search(r"parameter servers \(in-process, one set shared by the 2 groups; .*\) 2\.18 MB", out)
assert "not counted (no communicator call)" in out
PY
echo "ok: 2 sync groups of 2: group traffic exact in every step each worker trained"

out=$("$bin" plan "${common[@]}" --replicas 4 --sync-groups 2 --json) || fail "groups --json: $out"
/usr/bin/python3 - "$out" <<'PY' || fail "bad sync-group JSON plan: $out"
import json, sys
p = json.loads(sys.argv[1])
P = 272186 * 4
assert p["sync_groups"] == 2 and p["replicas_in_sync"] == 2 and p["batch_per_worker"] == 16, p
assert p["parameter_servers"] == 2 * P, p           # values and one momentum slot
for w in p["workers"]:
    assert {t["axis"] for t in w["traffic"]} == {"group"}, w
    assert w["memory"]["optimizer_state"] == P, w
PY
echo "ok: plan --json with --sync-groups 2: the servers' shards, traffic on the group"

# 6. A layout whose batch norm sees 1x1 images: ResNet-50's last units on 28x28 images. The planner
# records such a stage at batch 2 and 4 (at batch 1 its batch norm would have one value per
# channel), and the check passes: memory within 10%, traffic exact.
out=$("$bin" plan resnet50 --data "$data" --limit 64 --model-parallel 2 --replicas 2 --threads 2 \
      --json 2>&1) || fail "plan resnet50 --model-parallel 2 --replicas 2: $out"
/usr/bin/python3 - "$out" <<'PY' || fail "resnet50 in 2 stages: $out"
import json, sys
j = json.loads(sys.argv[1])
assert [f["probe_batches"] for f in j["activations_fit"]] == [[1, 2], [2, 4]], j["activations_fit"]
assert all(0 < f["peak_batch_1"] < f["peak_batch_2"] and f["b"] > 0 for f in j["activations_fit"])
PY
out=$("$bin" train resnet50 --data "$data" --limit 64 --batch 16 --threads 2 --threads-per-replica 1 \
      --no-checkpoint --quiet --plan-check --out "$dir/r50" --model-parallel 2 --replicas 2 2>&1) \
    || fail "resnet50 in 2 stages: --plan-check failed: $out"
grep -q "plan check: memory within 10% and communication exact on every worker" <<< "$out" \
    || fail "resnet50 in 2 stages: no verdict: $out"
echo "ok: resnet50 in 2 stages on 2 replicas: its 1x1 stage recorded at batch 2 and 4, checked"

# 7. Bad input.
expect_error() {
    local rc=$1 pattern=$2; shift 2
    set +e
    msg=$("$bin" plan "$@" 2>&1); got=$?
    set -e
    [ "$got" -eq "$rc" ] || fail "plan $*: exit $got, expected $rc: $msg"
    grep -q -- "$pattern" <<< "$msg" || fail "plan $*: unclear message: $msg"
}
expect_error 2 "unknown option --bogus" resnet20 --bogus 1
expect_error 2 "takes the options of replicator train" resnet20 --batch 0
expect_error 2 "--resume is train's" --resume "$dir/none"
expect_error 2 "does not split across 3 replicas" resnet20 --batch 32 --replicas 3
expect_error 1 "the planner covers synchronous layouts" "${common[@]}" --replicas 2 --regime async
expect_error 1 "only the ResNets are" mlp --data "$data" --model-parallel 2 --threads 2
expect_error 1 "groups of one replica" "${common[@]}" --replicas 2 --sync-groups 2
expect_error 1 "stage1.block0.conv1\": 16 output features do not split evenly over 3" \
    "${common[@]}" --replicas 1 --tensor-parallel 3
# A micro-batch of one example leaves ResNet-50's 1x1 batch norms one value per channel.
expect_error 1 "batch norm in stage4.block0 (1x1 pixels per example, pipeline stage 1) would see 1 value(s).*raise --batch" \
    resnet50 --data "$data" --limit 64 --batch 1 --model-parallel 2 --threads 2
echo "ok: bad options are clear errors"

# 8. MPI: sync groups of ranks; each replica rank checks its own worker.
need_mpirun # (exits here without mpirun: the checks above have passed)
out=$("${mpi[@]}" -np 5 "$bin" train "${common[@]}" --plan-check --out "$dir/groups-mpi" \
      --sync-groups 2 --ps 1 --max-steps 6 2>&1) || fail "sync groups under mpirun: $out"
[ "$(grep -c "plan check: memory within 10% and communication exact on every worker" <<< "$out")" \
    -eq 4 ] || fail "sync groups under mpirun: not 4 verdicts: $out"
/usr/bin/python3 - "$out" <<'PY' || fail "sync groups under mpirun: $out"
import re, sys
out = sys.argv[1]
assert "differs" not in out and "over 10%" not in out
P = 272186 * 4
assert re.search(r"on the 1 server rank, in all: the parameter servers' shards .* 2\.18 MB", out)
assert "to the server ranks and pulls the values" in out
exact = re.findall(r"^    group (\S+) +(\S+) +(\d+) calls +(\d+) B per step: exact in (\d) steps?",
                   out, re.M)
want = [("all_reduce", "user", "42", "25424"), ("all_reduce", "runtime", "3", str(P + 8)),
        ("broadcast", "runtime", "2", str(P + 8))]
assert sorted(e[:4] for e in exact) == sorted(want * 4), exact
PY
echo "ok: mpirun, 2 sync groups of 2 ranks and a server rank: each rank's check passes"
