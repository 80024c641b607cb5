#!/usr/bin/env python3
"""The torchvision peer of `bench_loader --folder` (bench/compare_loader_folder.sh).

  folder_torch.py --make DIR [--images 512] [--classes 8] [--quality 90] [--seed 0]
      writes DIR/train/class<k>/<i>.jpg: ImageNet-like JPEGs (mostly 500x375, some 375x500
      and 500x333), content with detail at several scales so that they compress about as
      photos do at that quality (about 90 KB each), with PIL (Debian's Pillow, libjpeg-turbo
      underneath).

  folder_torch.py --data DIR [--workers 1,2] [--batch 64] [--size 224] [--seconds 5] [--json]
      images/s of torchvision.datasets.ImageFolder(DIR/train) with torchvision's ImageNet
      training transform (RandomResizedCrop(size), RandomHorizontalFlip(), ToTensor(),
      Normalize(ImageNet mean, std)) through a DataLoader, for each worker count: one warm-up
      epoch, then batches for --seconds. Each worker is a process on one core (the DataLoader
      sets its torch threads to 1) and the main process only receives the batches, so
      images/s per core is images/s over workers. The best worker count is the one with the
      most images/s per core; it is marked.

torchvision 0.14 (Debian's python3-torchvision) and torch 1.13 (python3-torch).
"""
import argparse
import json
import os
import sys
import time


def make(args):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(args.seed)
    sizes = [(500, 375)] * 6 + [(375, 500), (500, 333)]
    total = 0
    for i in range(args.images):
        c = i % args.classes
        d = os.path.join(args.make, "train", "class%d" % c)
        os.makedirs(d, exist_ok=True)
        w, h = sizes[i % len(sizes)]
        # Detail at several scales: coarse colour fields, structure, texture, grain. At
        # quality 90 a 500x375 image is then about 90 KB, near ImageNet's average JPEG.
        img = np.zeros((h, w, 3), np.float32)
        for cells, amp in ((4, 90.0), (24, 40.0), (96, 40.0), (250, 40.0)):
            small = rng.random((cells * h // w + 1, cells, 3), dtype=np.float32)
            layer = Image.fromarray((small * 255).astype(np.uint8)).resize((w, h), Image.BICUBIC)
            img += (np.asarray(layer, np.float32) / 255.0 - 0.5) * amp
        img += rng.normal(0.0, 12.0, (h, w, 3)).astype(np.float32)
        img += 128.0 + 30.0 * (c - args.classes / 2) / args.classes
        path = os.path.join(d, "%05d.jpg" % i)
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(path, quality=args.quality)
        total += os.path.getsize(path)
    print("folder_torch: wrote %d JPEGs (quality %d, %.0f KB on average) under %s/train"
          % (args.images, args.quality, total / args.images / 1024, args.make))


def bench(args):
    import torch
    import torchvision
    from torch.utils.data import DataLoader, RandomSampler
    from torchvision import transforms

    torch.set_num_threads(1)
    tf = transforms.Compose([
        transforms.RandomResizedCrop(args.size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    ds = torchvision.datasets.ImageFolder(os.path.join(args.data, "train"), transform=tf)
    warm = max(1, len(ds) // args.batch)
    rows = []
    for workers in [int(x) for x in args.workers.split(",")]:
        # One long shuffled stream (a new permutation per pass), so epochs leave no gap.
        sampler = RandomSampler(ds, num_samples=len(ds) * 10000)
        dl = DataLoader(ds, batch_size=args.batch, sampler=sampler, num_workers=workers,
                        drop_last=True)
        it = iter(dl)
        for _ in range(warm):
            next(it)
        images = 0
        t0 = t = time.perf_counter()
        while t - t0 < args.seconds:
            x, _ = next(it)
            images += x.shape[0]
            t = time.perf_counter()
        del it
        ips = images / (t - t0)
        cores = max(workers, 1)
        rows.append({"impl": "torchvision", "workers": workers, "batch": args.batch,
                     "size": args.size, "images": images, "seconds": round(t - t0, 3),
                     "images_per_s": round(ips, 1), "images_per_s_per_core": round(ips / cores, 1)})
    best = max(rows, key=lambda r: r["images_per_s_per_core"])
    for r in rows:
        r["best"] = r is best
        if args.json:
            print(json.dumps(r))
        else:
            print("torchvision %-28s workers %d  batch %d  %dx%d: %8.1f images/s  %8.1f per core "
                  "(%d images in %.2f s)%s"
                  % (os.path.basename(os.path.normpath(args.data)) + "/train", r["workers"],
                     r["batch"], r["size"], r["size"], r["images_per_s"],
                     r["images_per_s_per_core"], r["images"], r["seconds"],
                     "  <- best" if r["best"] else ""))
    sys.stdout.flush()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--make", metavar="DIR")
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", metavar="DIR")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if bool(args.make) == bool(args.data):
        p.error("give one of --make DIR and --data DIR")
    if args.make:
        make(args)
    else:
        bench(args)


if __name__ == "__main__":
    main()
