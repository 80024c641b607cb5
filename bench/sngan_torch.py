#!/usr/bin/python3
"""PyTorch peer benchmark: SN-GAN training speed (ms per generator iteration).

The model is the authors' 32x32 design (pfnet-research/sngan_projection,
gen_models/resnet_32.py and dis_models/snresnet_32.py), written out here so the
architecture is pinned (see /work/shared/reference/sngan.md, section 2.1):

  G  z [N,128] ~ N(0, I) -> Linear(z_dim -> 4*4*ch) -> [N,ch,4,4]
     3 up-blocks (4 -> 8 -> 16 -> 32), each
       CBN -> ReLU -> 2x nearest upsample -> conv3x3 -> CBN -> ReLU -> conv3x3
       + shortcut upsample -> conv1x1
     BN -> ReLU -> conv3x3(ch -> C) -> tanh             images [N,C,32,32]
     CBN: categorical conditional batch norm, per-class gamma (1) and beta (0).
  D  (every conv, the linear layer and the embedding spectrally normalised)
     OptimizedBlock(C -> ch): conv3x3 -> ReLU -> conv3x3 -> avgpool2,
       shortcut avgpool2 -> conv1x1                       32 -> 16
     Block(ch, ch, down): ReLU -> conv3x3 -> ReLU -> conv3x3 -> avgpool2,
       shortcut conv1x1 -> avgpool2                       16 -> 8
     2 x Block(ch, ch): the same without pooling, identity shortcut
     ReLU -> SUM over H, W -> SNLinear(ch -> 1, no bias) + <SNEmbed(y), h>
                                                          scores [N]
  Init Glorot-uniform, gain sqrt(2) on the residual convs, 1 on the shortcuts,
  the linear layers and the embedding; biases zero.

Spectral norm is torch.nn.utils.spectral_norm with one power iteration per
training forward (eps 1e-12), as the authors: v = normalise(W^T u),
u = normalise(W v), sigma = u^T W v on W reshaped to [out, in*kh*kw].

One timed iteration, in the authors' order (updater.py): one G step on
--g-batch fresh fakes (D's parameters frozen, so no weight gradients are made
for D), then --n-dis D steps, each on a real batch of --d-batch random images
with random labels plus as many fakes from G under torch.no_grad() with
uniform labels, real and fake concatenated through D in one forward. Hinge
losses; Adam(2e-4, betas (0, 0.9)) for both models. The data are synthetic
(speed only): real batches are made before timing; z and labels are drawn in
the step, as training does.

Run it with Debian's interpreter and torch (python3-torch 1.13) and
OPENBLAS_NUM_THREADS=1, through bench/torch_env.sh:

    SCRIPT=bench/sngan_torch.py bench/torch_env.sh --threads 2 --format both
    SCRIPT=bench/sngan_torch.py bench/torch_env.sh --describe
    SCRIPT=bench/sngan_torch.py bench/torch_env.sh --iters 10 --json

--precision bf16 runs the iteration under PyTorch's CPU mixed precision:
torch.cpu.amp.autocast(dtype=torch.bfloat16) around the whole iteration (both
models' forward and backward passes; convolutions and linear layers in bf16,
the losses in f32), the Adam steps on f32 master weights. --precision both
runs f32 and bf16, each in every --format asked.

With --json one line per memory format and precision:
{"framework":"pytorch","model":"sngan","format":..,"precision":..,
 "ms_per_iter":<median>,...}
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import spectral_norm

SQRT2 = math.sqrt(2.0)


def glorot(module, gain):
    nn.init.xavier_uniform_(module.weight, gain=gain)
    if getattr(module, "bias", None) is not None:
        nn.init.zeros_(module.bias)
    return module


def conv(cin, cout, k, gain):
    return glorot(nn.Conv2d(cin, cout, k, padding=k // 2), gain)


def sn(module):
    # dim 0 (torch's default for Conv2d, Linear and Embedding) views the weight
    # as [out, in*kh*kw] ([classes, ch] for the embedding), as max_sv.py does.
    return spectral_norm(module, n_power_iterations=1, eps=1e-12)


def upsample(x):
    return F.interpolate(x, scale_factor=2, mode="nearest")


# --------------------------------------------------------------------------
# Generator
# --------------------------------------------------------------------------
class CondBatchNorm(nn.Module):
    """Categorical conditional BN: batch statistics (no affine), then
    y = xhat * gamma[label] + beta[label], gamma and beta [classes, c]."""

    def __init__(self, c, classes):
        super().__init__()
        self.bn = nn.BatchNorm2d(c, affine=False)
        self.gamma = nn.Embedding(classes, c)
        self.beta = nn.Embedding(classes, c)
        nn.init.ones_(self.gamma.weight)
        nn.init.zeros_(self.beta.weight)

    def forward(self, x, y):
        g = self.gamma(y)[:, :, None, None]
        b = self.beta(y)[:, :, None, None]
        return self.bn(x) * g + b


class GenBlock(nn.Module):
    def __init__(self, cin, cout, classes, commuted=False):
        super().__init__()
        self.commuted = commuted
        self.b1 = CondBatchNorm(cin, classes)
        self.c1 = conv(cin, cout, 3, SQRT2)
        self.b2 = CondBatchNorm(cout, classes)
        self.c2 = conv(cout, cout, 3, SQRT2)
        self.c_sc = conv(cin, cout, 1, 1.0)  # learnable: the block upsamples

    def forward(self, x, y):
        h = self.c1(upsample(F.relu(self.b1(x, y))))
        h = self.c2(F.relu(self.b2(h, y)))
        # Nearest upsampling and a 1x1 conv commute: commuted, the conv runs
        # on a quarter of the pixels, with the same values.
        sc = upsample(self.c_sc(x)) if self.commuted else self.c_sc(upsample(x))
        return h + sc


class Generator(nn.Module):
    def __init__(self, ch, z_dim, classes, out_ch, bottom=4, commuted=False):
        super().__init__()
        self.ch, self.bottom = ch, bottom
        self.l1 = glorot(nn.Linear(z_dim, bottom * bottom * ch), 1.0)
        self.blocks = nn.ModuleList([GenBlock(ch, ch, classes, commuted) for _ in range(3)])
        self.bn = nn.BatchNorm2d(ch)
        self.out = conv(ch, out_ch, 3, 1.0)

    def forward(self, z, y, memory_format=torch.contiguous_format):
        h = self.l1(z).view(-1, self.ch, self.bottom, self.bottom)
        h = h.contiguous(memory_format=memory_format)
        for b in self.blocks:
            h = b(h, y)
        return torch.tanh(self.out(F.relu(self.bn(h))))


# --------------------------------------------------------------------------
# Discriminator
# --------------------------------------------------------------------------
class DisOptimizedBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.c1 = sn(conv(cin, cout, 3, SQRT2))
        self.c2 = sn(conv(cout, cout, 3, SQRT2))
        self.c_sc = sn(conv(cin, cout, 1, 1.0))

    def forward(self, x):
        h = F.avg_pool2d(self.c2(F.relu(self.c1(x))), 2)
        return h + self.c_sc(F.avg_pool2d(x, 2))


class DisBlock(nn.Module):
    def __init__(self, cin, cout, downsample, commuted=False):
        super().__init__()
        self.down = downsample
        self.commuted = commuted
        self.c1 = sn(conv(cin, cout, 3, SQRT2))
        self.c2 = sn(conv(cout, cout, 3, SQRT2))
        self.learnable_sc = cin != cout or downsample
        if self.learnable_sc:
            self.c_sc = sn(conv(cin, cout, 1, 1.0))

    def forward(self, x):
        h = self.c2(F.relu(self.c1(F.relu(x))))
        if self.down:
            h = F.avg_pool2d(h, 2)
        if not self.learnable_sc:
            return h + x
        if not self.down:
            return h + self.c_sc(x)
        # 2x2 average pooling and a 1x1 conv commute (both linear, the bias
        # a constant): commuted, the conv runs on a quarter of the pixels.
        if self.commuted:
            return h + self.c_sc(F.avg_pool2d(x, 2))
        return h + F.avg_pool2d(self.c_sc(x), 2)


class Discriminator(nn.Module):
    def __init__(self, ch, classes, in_ch, commuted=False):
        super().__init__()
        self.block1 = DisOptimizedBlock(in_ch, ch)  # pools before its 1x1 conv already
        self.block2 = DisBlock(ch, ch, True, commuted)
        self.block3 = DisBlock(ch, ch, False)
        self.block4 = DisBlock(ch, ch, False)
        self.l5 = sn(glorot(nn.Linear(ch, 1, bias=False), 1.0))
        self.l_y = sn(glorot(nn.Embedding(classes, ch), 1.0))

    def forward(self, x, y):
        h = self.block4(self.block3(self.block2(self.block1(x))))
        h = F.relu(h).sum(dim=(2, 3))  # a sum, not a mean, as the authors' code
        return self.l5(h).squeeze(1) + (self.l_y(y) * h).sum(dim=1)


# --------------------------------------------------------------------------
# Training iteration
# --------------------------------------------------------------------------
def count_params(model):
    return sum(p.numel() for p in model.parameters())


def set_requires_grad(model, flag):
    for p in model.parameters():
        p.requires_grad_(flag)


class Gan:
    def __init__(self, a, fmt):
        self.a = a
        self.mf = torch.channels_last if fmt == "channels_last" else torch.contiguous_format
        commuted = a.shortcut == "commuted"
        self.G = Generator(a.ch_g, a.z_dim, a.classes, a.channels, commuted=commuted)
        self.D = Discriminator(a.ch_d, a.classes, a.channels, commuted=commuted)
        if fmt == "channels_last":
            self.G = self.G.to(memory_format=torch.channels_last)
            self.D = self.D.to(memory_format=torch.channels_last)
        self.G.train()
        self.D.train()
        # After the format conversion, so the optimizers hold the final tensors.
        self.opt_g = torch.optim.Adam(self.G.parameters(), lr=a.lr, betas=(0.0, 0.9))
        self.opt_d = torch.optim.Adam(self.D.parameters(), lr=a.lr, betas=(0.0, 0.9))
        # Synthetic real data, made before timing: one batch per D step.
        self.real = [(torch.rand(a.d_batch, a.channels, 32, 32).mul_(2).sub_(1)
                      .contiguous(memory_format=self.mf),
                      torch.randint(0, a.classes, (a.d_batch,)))
                     for _ in range(a.n_dis)]

    def fakes(self, n):
        z = torch.randn(n, self.a.z_dim)
        y = torch.randint(0, self.a.classes, (n,))
        return self.G(z, y, self.mf), y

    def g_step(self):
        set_requires_grad(self.D, False)
        self.opt_g.zero_grad(set_to_none=True)
        x, y = self.fakes(self.a.g_batch)
        loss = -self.D(x, y).mean()
        loss.backward()
        self.opt_g.step()
        set_requires_grad(self.D, True)
        return loss

    def d_step(self, i):
        xr, yr = self.real[i]
        n = xr.shape[0]
        with torch.no_grad():
            xf, yf = self.fakes(n)
        self.opt_d.zero_grad(set_to_none=True)
        x = torch.cat([xr, xf]).contiguous(memory_format=self.mf)
        s = self.D(x, torch.cat([yr, yf]))
        loss = F.relu(1.0 - s[:n]).mean() + F.relu(1.0 + s[n:]).mean()
        loss.backward()
        self.opt_d.step()
        return loss

    def iteration(self):
        g_loss = self.g_step()
        d_loss = None
        for i in range(self.a.n_dis):
            d_loss = self.d_step(i)
        return float(d_loss), float(g_loss)


def autocast(precision):
    """bf16: PyTorch 1.13's CPU autocast to bfloat16; f32: nothing."""
    if precision == "bf16":
        return torch.cpu.amp.autocast(dtype=torch.bfloat16)
    return contextlib.nullcontext()


def bench_one(a, fmt, precision="f32"):
    torch.manual_seed(a.seed)
    gan = Gan(a, fmt)
    for _ in range(a.warmup):
        with autocast(precision):
            gan.iteration()
    times = []
    d_loss = g_loss = float("nan")
    for _ in range(a.iters):
        t0 = time.perf_counter()
        with autocast(precision):
            d_loss, g_loss = gan.iteration()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {
        "framework": "pytorch",
        "model": "sngan",
        "format": fmt,
        "precision": precision,
        "threads": torch.get_num_threads(),
        "ms_per_iter": round(1e3 * med, 2),
        "mean_ms_per_iter": round(1e3 * sum(times) / len(times), 2),
        "min_ms_per_iter": round(1e3 * min(times), 2),
        "iters": a.iters,
        "warmup": a.warmup,
        "ch_g": a.ch_g,
        "ch_d": a.ch_d,
        "z_dim": a.z_dim,
        "classes": a.classes,
        "image": [32, 32, a.channels],
        "d_batch": a.d_batch,
        "g_batch": a.g_batch,
        "n_dis": a.n_dis,
        "shortcut": a.shortcut,
        "params_g": count_params(gan.G),
        "params_d": count_params(gan.D),
        "d_loss": round(d_loss, 4),
        "g_loss": round(g_loss, 4),
        "torch": torch.__version__,
    }


def describe(a, log):
    torch.manual_seed(a.seed)
    G = Generator(a.ch_g, a.z_dim, a.classes, a.channels).train()
    D = Discriminator(a.ch_d, a.classes, a.channels).train()
    for name, m in (("generator", G), ("discriminator", D)):
        print(f"{name}: {count_params(m)} parameters", file=log)
        for child_name, child in m.named_children():
            print(f"  {child_name:8s} {count_params(child):9d}", file=log)
        bufs = sum(b.numel() for b in m.buffers())
        print(f"  buffers  {bufs:9d} (BN running statistics; SN u and v vectors)", file=log)
    n = 4
    with torch.no_grad():
        z = torch.randn(n, a.z_dim)
        y = torch.randint(0, a.classes, (n,))
        x = G(z, y)
        s = D(x, y)
    print(f"G(z [{n},{a.z_dim}], y [{n}]) -> {list(x.shape)} (NCHW; "
          f"[{n},{x.shape[2]},{x.shape[3]},{x.shape[1]}] as NHWC), "
          f"range [{x.min().item():.3f}, {x.max().item():.3f}]", file=log)
    print(f"D(x, y) -> {list(s.shape)}", file=log)
    ok = (list(x.shape) == [n, a.channels, 32, 32] and list(s.shape) == [n]
          and x.abs().max().item() <= 1.0)
    print("shapes: ok" if ok else "shapes: WRONG", file=log)
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ch-g", type=int, default=32, help="generator width (default 32)")
    ap.add_argument("--ch-d", type=int, default=32, help="discriminator width (default 32)")
    ap.add_argument("--z-dim", type=int, default=128)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--channels", type=int, choices=[1, 3], default=1,
                    help="image channels: 1 (Fashion-MNIST padded to 32x32) or 3 (CIFAR-10)")
    ap.add_argument("--d-batch", type=int, default=64, help="real images per D step (as many fakes)")
    ap.add_argument("--g-batch", type=int, default=128, help="fakes per G step")
    ap.add_argument("--n-dis", type=int, default=5, help="D steps per iteration")
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--iters", type=int, default=10, help="timed iterations (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations (default 2)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--format", choices=["nchw", "channels_last", "both"], default="both")
    ap.add_argument("--precision", choices=["f32", "bf16", "both"], default="f32",
                    help="f32 (default), bf16 (autocast around the whole iteration) or both")
    ap.add_argument("--shortcut", choices=["authors", "commuted"], default="authors",
                    help="the 1x1 shortcut convs where the authors put them (G: upsample -> conv, "
                         "D's down block: conv -> pool) or commuted to the smaller side (the same "
                         "values, a quarter of the shortcut's work; what replicator's model does)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--describe", action="store_true",
                    help="print parameter counts and output shapes, then exit")
    ap.add_argument("--json", action="store_true", help="one JSON line per memory format")
    a = ap.parse_args(argv)
    for name in ("ch_g", "ch_d", "z_dim", "classes", "d_batch", "g_batch", "n_dis", "iters", "threads"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.warmup < 0:
        ap.error(f"--warmup must be >= 0, got {a.warmup}")

    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        print("warning: OPENBLAS_NUM_THREADS is not 1; Debian's torch links OpenBLAS, whose "
              "thread pool fights torch's OpenMP pool. Run via bench/torch_env.sh.",
              file=sys.stderr)
    torch.set_num_threads(a.threads)
    torch.backends.mkldnn.enabled = True

    log = sys.stderr if a.json else sys.stdout
    print(f"torch {torch.__version__}  threads={torch.get_num_threads()}  "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}  "
          f"mkldnn={torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled}  "
          f"sngan ch_g={a.ch_g} ch_d={a.ch_d} z={a.z_dim} image=32x32x{a.channels} "
          f"d_batch={a.d_batch} g_batch={a.g_batch} n_dis={a.n_dis} shortcut={a.shortcut} "
          f"warmup={a.warmup} iters={a.iters}", file=log)
    if a.describe:
        sys.exit(0 if describe(a, log) else 1)

    fmts = ["channels_last", "nchw"] if a.format == "both" else [a.format]
    precisions = ["f32", "bf16"] if a.precision == "both" else [a.precision]
    results = []
    for fmt, precision in [(f, p) for p in precisions for f in fmts]:
        r = bench_one(a, fmt, precision)
        results.append(r)
        if a.json:
            print(json.dumps(r), flush=True)
        else:
            print(f"{fmt:>13} {precision:>4}: median {r['ms_per_iter']:9.1f} ms/iter  mean "
                  f"{r['mean_ms_per_iter']:9.1f}  min {r['min_ms_per_iter']:9.1f}  "
                  f"d_loss {r['d_loss']}  g_loss {r['g_loss']}", flush=True)
    if len(results) > 1:
        best = min(results, key=lambda r: r["ms_per_iter"])
        other = max(results, key=lambda r: r["ms_per_iter"])
        print(f"fastest: {best['format']} {best['precision']} "
              f"({other['ms_per_iter'] / best['ms_per_iter']:.2f}x over the slowest, "
              f"{other['format']} {other['precision']})", file=log)


if __name__ == "__main__":
    main()
