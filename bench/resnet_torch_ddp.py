#!/usr/bin/python3
"""PyTorch DistributedDataParallel peer benchmark: ResNet-20 training, global images/s.

gloo backend, --procs processes (default 2) x --threads threads each (default 1)
spawned with torch.multiprocessing on 127.0.0.1 and a free port.  Trains
ResNet-20 (the model of bench/resnet_torch.py, imported from it) on synthetic
28x28x1 inputs at a GLOBAL batch (--batch, default 128 = 64 per process), with
SGD(lr=0.1, momentum=0.9, weight_decay=5e-4), cross-entropy, batch norm in
training mode (per-process statistics, as plain DDP does).  Data loading is not
measured.  --precision bf16 adds CPU autocast to bf16 around the forward pass and
the loss (gradients stay f32, so DDP all-reduces f32).  Each timed step is bracketed by nothing but the step itself; the
whole timed window is bracketed by barriers, and global images/s =
global_batch * iters / window.

Run with OPENBLAS_NUM_THREADS=1 (see bench/resnet_torch.py), e.g.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 bench/resnet_torch_ddp.py --json
    SCRIPT=bench/resnet_torch_ddp.py bench/torch_env.sh --threads 1 --json

--json prints one line: {"framework":"pytorch-ddp","model":"resnet20",...}
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resnet_torch import autocast, build_model, count_params, make_optimizer, MODELS  # noqa: E402


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, a, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(a.threads)
    # a finite timeout turns a stuck collective into an error instead of a silent hang
    dist.init_process_group("gloo", rank=rank, world_size=a.procs,
                            timeout=datetime.timedelta(seconds=a.timeout))
    ok = False
    try:
        per = a.batch // a.procs
        torch.manual_seed(a.seed)  # same initial weights everywhere (DDP also broadcasts rank 0's)
        model = build_model("resnet20", a.in_ch).train()
        ncls = MODELS["resnet20"][3]
        g = torch.Generator().manual_seed(a.seed + 1 + rank)  # each rank its own shard
        x = torch.randn(per, a.in_ch, a.size, a.size, generator=g)
        y = torch.randint(0, ncls, (per,), generator=g)
        if a.format == "channels_last":
            model = model.to(memory_format=torch.channels_last)
            x = x.to(memory_format=torch.channels_last)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = make_optimizer(ddp)

        def step():
            opt.zero_grad(set_to_none=True)
            with autocast(a.precision):  # bf16: the same autocast arm as resnet_torch.py's
                loss = F.cross_entropy(ddp(x), y)
            loss.backward()  # gradients all-reduced (mean) by DDP here
            opt.step()
            return loss

        for _ in range(a.warmup):
            step()
        dist.barrier()
        times = []
        t0 = time.perf_counter()
        for _ in range(a.iters):
            ts = time.perf_counter()
            loss = step()
            times.append(time.perf_counter() - ts)
        dist.barrier()
        window = time.perf_counter() - t0

        # check replicas stayed in sync (cheap: one scalar per rank)
        chk = torch.tensor([sum(float(p.detach().double().sum()) for p in model.parameters())],
                           dtype=torch.float64)
        allc = [torch.zeros_like(chk) for _ in range(a.procs)]
        dist.all_gather(allc, chk)
        lt = torch.tensor([float(loss)])
        dist.all_reduce(lt)
        if rank == 0:
            med = statistics.median(times)
            r = {
                "framework": "pytorch-ddp",
                "model": "resnet20",
                "batch": a.batch,
                "per_process_batch": per,
                "procs": a.procs,
                "threads": a.threads,
                "format": a.format,
                "precision": a.precision,
                "images_per_s": round(a.batch * a.iters / window, 2),
                "ms_per_step": round(1e3 * window / a.iters, 2),
                "median_ms_per_step": round(1e3 * med, 2),
                "median_images_per_s": round(a.batch / med, 2),
                "iters": a.iters,
                "warmup": a.warmup,
                "input": [a.in_ch, a.size, a.size],
                "params": count_params(model),
                "replicas_in_sync": bool(max(abs(float(c) - float(allc[0])) for c in allc)
                                         <= 1e-6 * max(1.0, abs(float(allc[0])))),
                "mean_final_loss": round(float(lt) / a.procs, 4),
                "backend": "gloo",
                "torch": torch.__version__,
            }
            if a.json:
                print(json.dumps(r), flush=True)
            else:
                print(f"DDP {a.procs}x{a.threads} {a.format} {a.precision}: global batch {a.batch} "
                      f"({per}/proc): {r['images_per_s']:.2f} images/s, "
                      f"{r['ms_per_step']:.2f} ms/step (mean), median {r['median_ms_per_step']:.2f} "
                      f"ms/step, params {r['params']}, in sync {r['replicas_in_sync']}", flush=True)
        ok = True
    finally:
        # Every rank reaches the same final barrier before tearing down, so rank 0
        # (which hosts the TCP store) never exits while another rank still talks
        # to it -- without this a rank was seen spinning forever at shutdown.
        if ok:
            dist.barrier()
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=128, help="GLOBAL batch (default 128)")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--format", choices=["channels_last", "nchw"], default="nchw")
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                    help="f32 (default) or bf16: torch.cpu.amp.autocast(dtype=torch.bfloat16) "
                         "around the forward pass and the loss, as bench/resnet_torch.py")
    ap.add_argument("--in-ch", type=int, default=1)
    ap.add_argument("--size", type=int, default=28)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=300, help="gloo collective timeout, s")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.batch % a.procs:
        ap.error(f"global batch {a.batch} does not divide over {a.procs} processes")
    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        print("warning: OPENBLAS_NUM_THREADS is not 1 (run via bench/torch_env.sh)", file=sys.stderr)
    mp.spawn(worker, args=(a, free_port()), nprocs=a.procs, join=True)


if __name__ == "__main__":
    main()
