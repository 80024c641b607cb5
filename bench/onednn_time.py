#!/usr/bin/env python3
"""Sum oneDNN's own execution times from an ONEDNN_VERBOSE=1 log, by primitive.

Both replicator and Debian's PyTorch run their convolutions and matrix products
on the same libdnnl, so the same log line times the same kind of work on either
side: this says how much of an iteration each framework spends inside oneDNN,
and in which primitives, and so how much is left outside it.

    ONEDNN_VERBOSE=1 build/replicator bench sngan --precision bf16 --replicas 1 \\
        --iters 6 --warmup 2 > ours.log
    python3 bench/onednn_time.py ours.log --steps 8 --ms-per-step 330

--steps: how many iterations the log covers (warm-up included), to give ms per
iteration; --ms-per-step: the iteration's wall time measured without the log,
to give oneDNN's share of it and what is left. A primitive running on several
threads at once logs one line per call, so with several replicas of one thread
each the sums count each replica's work (divide by the replicas); a primitive
that runs its own thread pool (one replica of two threads, or PyTorch) logs
its wall time.
"""
import argparse
import collections
import sys


def kind_of(fields):
    """The primitive's kind, its direction and its data types, as one label."""
    kind, impl, prop, mds = fields[3], fields[4], fields[5], fields[6]
    types = []
    for md in mds.split():
        name, _, dtype = md.split(":", 1)[0].rpartition("_")  # "wei_bf16:p:blocked:..."
        if name in ("src", "wei", "dst", "diff_src", "diff_wei", "diff_dst") and dtype:
            types.append(f"{name}:{dtype}")
    direction = {"forward_training": "fwd", "forward_inference": "fwd",
                 "backward_data": "bwd-data", "backward_weights": "bwd-weights",
                 "backward": "bwd"}.get(prop, "")
    label = kind if not direction else f"{kind} {direction}"
    if kind == "convolution" and "wino" in impl:
        label += " (winograd)"
    return f"{label:32s} {' '.join(types)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log", help="the ONEDNN_VERBOSE=1 output ('-': standard input)")
    ap.add_argument("--steps", type=float, default=1.0,
                    help="iterations the log covers (default 1: totals)")
    ap.add_argument("--ms-per-step", type=float, default=0.0,
                    help="measured wall ms per iteration, for oneDNN's share")
    ap.add_argument("--top", type=int, default=12, help="rows to print (default 12)")
    ap.add_argument("--by-shape", action="store_true",
                    help="one row per primitive and problem (mb.._ic..oc.._ih..), not per primitive")
    args = ap.parse_args()

    stream = sys.stdin if args.log == "-" else open(args.log, encoding="utf-8",
                                                       errors="replace")
    total = collections.Counter()
    calls = collections.Counter()
    by_kind = collections.Counter()
    for line in stream:
        if not line.startswith(("onednn_verbose,exec,", "dnnl_verbose,exec,")):
            continue
        fields = line.rstrip("\n").split(",")
        try:
            ms = float(fields[-1])
        except ValueError:
            continue
        label = kind_of(fields)
        if args.by_shape:
            label += " " + fields[-2]
        total[label] += ms
        calls[label] += 1
        by_kind[fields[3]] += ms
    if not total:
        sys.exit("onednn_time.py: no 'onednn_verbose,exec' lines in the log "
                 "(was ONEDNN_VERBOSE=1 set?)")

    steps = args.steps
    all_ms = sum(total.values()) / steps
    print(f"{'primitive':32s} {'types':30s} {'ms/step':>9s} {'calls/step':>10s}")
    for label, ms in total.most_common(args.top):
        print(f"{label:63s} {ms / steps:9.1f} {calls[label] / steps:10.1f}"
              if not args.by_shape else
              f"{label}\n{'':63s} {ms / steps:9.1f} {calls[label] / steps:10.1f}")
    rest = len(total) - args.top
    if rest > 0:
        ms = sum(v for _, v in total.most_common()[args.top:]) / steps
        print(f"{'(' + str(rest) + ' more)':63s} {ms:9.1f}")
    print("by kind: " + ", ".join(f"{k} {v / steps:.1f}" for k, v in by_kind.most_common()))
    print(f"oneDNN in all: {all_ms:.1f} ms/step")
    if args.ms_per_step > 0:
        print(f"of {args.ms_per_step:.1f} ms/step measured: oneDNN "
              f"{100 * all_ms / args.ms_per_step:.0f}%, outside it "
              f"{args.ms_per_step - all_ms:.1f} ms")


if __name__ == "__main__":
    main()
