#!/usr/bin/python3
"""PyTorch peer benchmark: ResNet TRAINING throughput (images/s).

Measures forward + backward + SGD(momentum) step with batch norm in training
mode and cross-entropy loss, on synthetic random inputs (fixed seed; no data
loading is timed).  Models are written out explicitly here (no torchvision) so
the architecture is pinned:

  resnet20  CIFAR-style ResNet-20 (He et al. 2016, sec. 4.2), projection
            ("option B") shortcuts, widths 16/32/64, 10 classes.
            Input 28x28x1 (Fashion-MNIST) by default; --in-ch 3 --size 32 for
            CIFAR 32x32x3.
  resnet50  ResNet-50 v1.5 in torchvision's layout (stride on the 3x3 conv of
            the bottleneck), 224x224x3, 1000 classes.

Run it with Debian's interpreter and torch (python3-torch 1.13), and with
OPENBLAS_NUM_THREADS=1: Debian's torch links OpenBLAS, whose own thread pool
otherwise fights torch's OpenMP pool.  bench/torch_env.sh does this:

    bench/torch_env.sh --model resnet20 --threads 2 --format both
    bench/torch_env.sh --model resnet50 --batch 32 --iters 3 --json

--precision bf16 runs PyTorch's CPU mixed precision as its documentation
prescribes: torch.cpu.amp.autocast(dtype=torch.bfloat16) around the forward
pass and the loss (convolutions and linear layers in bf16, batch norm on the
bf16 activations with f32 statistics, the loss in f32), the backward pass and
the SGD step outside it, master weights f32. --precision both runs f32 and
bf16, each in every --format asked.

Each result reports the mean ms/step and images/s over the timed iterations and
the median per-iteration time; with --json one JSON line per result is printed:
{"framework":"pytorch","model":..,"batch":..,"threads":..,"format":..,
 "precision":..,"images_per_s":..,"ms_per_step":..,...}
"""
import contextlib
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# --------------------------------------------------------------------------
# ResNet-20 (CIFAR-style)
# --------------------------------------------------------------------------
def conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def conv1x1(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 1, stride=stride, padding=0, bias=False)


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN, + shortcut, ReLU.  Shortcut is identity when
    the shape is unchanged, else a 1x1 conv (with the block's stride) + BN."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = conv3x3(cin, cout, stride)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = conv3x3(cout, cout, 1)
        self.bn2 = nn.BatchNorm2d(cout)
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(conv1x1(cin, cout, stride), nn.BatchNorm2d(cout))
        else:
            self.shortcut = nn.Identity()

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    def __init__(self, in_ch=1, num_classes=10, blocks_per_stage=3, widths=(16, 32, 64)):
        super().__init__()
        self.conv1 = conv3x3(in_ch, widths[0], 1)
        self.bn1 = nn.BatchNorm2d(widths[0])
        layers = []
        cin = widths[0]
        for s, w in enumerate(widths):
            for b in range(blocks_per_stage):
                stride = 2 if (s > 0 and b == 0) else 1
                layers.append(BasicBlock(cin, w, stride))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(widths[-1], num_classes, bias=True)
        _init(self)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layers(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


# --------------------------------------------------------------------------
# ResNet-50 v1.5 (torchvision layout)
# --------------------------------------------------------------------------
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = conv1x1(cin, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride)  # v1.5: stride on the 3x3
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, cout)
        self.bn3 = nn.BatchNorm2d(cout)
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(conv1x1(cin, cout, stride), nn.BatchNorm2d(cout))
        else:
            self.downsample = nn.Identity()

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + self.downsample(x))


class ResNet50(nn.Module):
    def __init__(self, in_ch=3, num_classes=1000, layers=(3, 4, 6, 3), widths=(64, 128, 256, 512)):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages = []
        cin = 64
        for s, (n, w) in enumerate(zip(layers, widths)):
            for b in range(n):
                stride = 2 if (s > 0 and b == 0) else 1
                stages.append(Bottleneck(cin, w, stride))
                cin = w * Bottleneck.expansion
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, num_classes, bias=True)
        _init(self)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


def _init(model):
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


MODELS = {
    # name: (constructor, default in_ch, default size, classes, default batch, default iters)
    "resnet20": (ResNet20, 1, 28, 10, 128, 20),
    "resnet50": (ResNet50, 3, 224, 1000, 32, 3),
}


def build_model(name, in_ch=None):
    ctor, dch, _, ncls, _, _ = MODELS[name]
    return ctor(in_ch=dch if in_ch is None else in_ch, num_classes=ncls)


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)


def autocast(precision, device="cpu"):
    """bf16: PyTorch's autocast to bfloat16 (CPU: 1.13's torch.cpu.amp); f32: nothing."""
    if precision == "bf16":
        if device == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return torch.cpu.amp.autocast(dtype=torch.bfloat16)
    return contextlib.nullcontext()


def sync(device):
    """Waits for the GPU's queued work (timings on a GPU end when its work does)."""
    if device == "cuda":
        torch.cuda.synchronize()


def train_step(model, opt, x, y, precision="f32", device="cpu"):
    opt.zero_grad(set_to_none=True)
    with autocast(precision, device):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def bench_one(name, batch, iters, warmup, threads, fmt, in_ch, size, seed, precision="f32",
              device="cpu"):
    torch.manual_seed(seed)
    model = build_model(name, in_ch).to(device)
    model.train()
    ncls = MODELS[name][3]
    x = torch.randn(batch, in_ch, size, size).to(device)
    y = torch.randint(0, ncls, (batch,)).to(device)
    if fmt == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    else:
        x = x.contiguous()
    opt = make_optimizer(model)  # after the format conversion: holds the final params
    for _ in range(warmup):
        train_step(model, opt, x, y, precision, device)
    sync(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    loss = None
    for _ in range(iters):
        t0 = time.perf_counter()
        loss = train_step(model, opt, x, y, precision, device)
        sync(device)
        times.append(time.perf_counter() - t0)
    total = sum(times)
    extra = {}
    if device == "cuda":
        extra = {"device": torch.cuda.get_device_name(),
                 "peak_device_bytes": torch.cuda.max_memory_allocated()}
    return {**extra,
        "framework": "pytorch",
        "model": name,
        "batch": batch,
        "threads": threads,
        "format": fmt,
        "precision": precision,
        "images_per_s": round(batch * iters / total, 2),
        "ms_per_step": round(1e3 * total / iters, 2),
        "median_ms_per_step": round(1e3 * statistics.median(times), 2),
        "median_images_per_s": round(batch / statistics.median(times), 2),
        "iters": iters,
        "warmup": warmup,
        "input": [in_ch, size, size],
        "params": count_params(model),
        "final_loss": round(float(loss), 4),
        "torch": torch.__version__,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="resnet20")
    ap.add_argument("--batch", type=int, default=None, help="default 128 (resnet20) / 32 (resnet50)")
    ap.add_argument("--iters", type=int, default=None, help="timed iterations; default 20 / 3")
    ap.add_argument("--warmup", type=int, default=3, help="untimed warm-up iterations (default 3)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--format", choices=["channels_last", "nchw", "both"], default="both")
    ap.add_argument("--precision", choices=["f32", "bf16", "both"], default="f32",
                    help="f32 (default), bf16 (autocast around the forward pass) or both")
    ap.add_argument("--in-ch", type=int, default=None, help="input channels (resnet20: 1 or 3)")
    ap.add_argument("--size", type=int, default=None, help="input height=width")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="one JSON line per result")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: the model and batch on the GPU (scripts/gpu-check.sh)")
    a = ap.parse_args(argv)

    _, dch, dsize, _, dbatch, diters = MODELS[a.model]
    batch = a.batch or dbatch
    iters = a.iters or diters
    in_ch = a.in_ch or dch
    size = a.size or dsize

    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        print("warning: OPENBLAS_NUM_THREADS is not 1; Debian's torch links OpenBLAS, whose "
              "thread pool fights torch's OpenMP pool. Run via bench/torch_env.sh.",
              file=sys.stderr)
    torch.set_num_threads(a.threads)
    torch.backends.mkldnn.enabled = True

    log = sys.stderr if a.json else sys.stdout
    print(f"torch {torch.__version__}  threads={torch.get_num_threads()}  "
          f"mkldnn={torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled}  "
          f"model={a.model} input={in_ch}x{size}x{size} batch={batch} "
          f"warmup={a.warmup} iters={iters}", file=log)
    print(f"params: {count_params(build_model(a.model, in_ch))} "
          f"({count_params(build_model(a.model, in_ch)) / 1e6:.3f}M)", file=log)

    fmts = ["channels_last", "nchw"] if a.format == "both" else [a.format]
    precisions = ["f32", "bf16"] if a.precision == "both" else [a.precision]
    results = []
    for fmt, precision in [(f, p) for p in precisions for f in fmts]:
        r = bench_one(a.model, batch, iters, a.warmup, a.threads, fmt, in_ch, size, a.seed,
                      precision, a.device)
        results.append(r)
        if a.json:
            print(json.dumps(r), flush=True)
        else:
            print(f"{fmt:>13} {precision:>4}: {r['images_per_s']:9.2f} images/s  {r['ms_per_step']:9.2f} ms/step "
                  f"(mean)  median {r['median_ms_per_step']:9.2f} ms/step "
                  f"= {r['median_images_per_s']:.2f} images/s  loss {r['final_loss']}", flush=True)
    if len(results) > 1:
        best = max(results, key=lambda r: r["images_per_s"])
        other = min(results, key=lambda r: r["images_per_s"])
        print(f"fastest: {best['format']} {best['precision']} "
              f"({best['images_per_s'] / other['images_per_s']:.2f}x over the slowest, "
              f"{other['format']} {other['precision']})", file=log)


if __name__ == "__main__":
    main()
