#!/usr/bin/env python3
"""Plots bench/sngan_batch_sweep.sh's table: class accuracy, FD and IS against the global batch.

Usage: scripts/plot_sngan_sweep.py sweep.tsv sweep.png   (needs python3-matplotlib)
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(table, out):
    with open(table) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    batch = [int(r["batch"]) for r in rows]
    panels = [("class_acc", "class accuracy (%)", 100.0), ("fd", "FD (judge features, lower is better)", 1.0),
              ("is", "IS analogue (higher is better)", 1.0)]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, (key, title, scale) in zip(axes, panels):
        ax.plot(batch, [float(r[key]) * scale for r in rows], "o-")
        ax.set_xscale("log", base=2)
        ax.set_xticks(batch)
        ax.set_xticklabels([str(b) for b in batch])
        ax.set_xlabel("global batch (D; G takes twice it)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    fig.suptitle("SN-GAN on Fashion-MNIST, %s generator iterations each" % rows[0]["iters"])
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
