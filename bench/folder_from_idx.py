#!/usr/bin/python3
"""Writes an IDX dataset (Fashion-MNIST, MNIST) as a torchvision ImageFolder of PNG files.

Usage: folder_from_idx.py IDX_DIR OUT_DIR
  reads IDX_DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] and writes
  OUT_DIR/train/<label>/<index>.png and OUT_DIR/val/<label>/<index>.png: 8-bit grayscale
  PNGs of the images as they are, one directory a class (the labels' digits, which sort as
  the labels do). The IDX format: a big-endian magic (0x0803 images, 0x0801 labels), the
  dimensions as big-endian int32, then the bytes. Used by bench/folder_accuracy.sh to train
  the same images from a folder and from the binary reader.
"""
import gzip
import os
import struct
import sys

from PIL import Image


def read_idx(path):
    for p in (path + ".gz", path):
        if os.path.exists(p):
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rb") as f:
                data = f.read()
            break
    else:
        sys.exit("folder_from_idx: no %s[.gz]" % path)
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        sys.exit("folder_from_idx: %s is not an unsigned-byte IDX file" % path)
    dims = struct.unpack(">%dI" % ndim, data[4 : 4 + 4 * ndim])
    return dims, data[4 + 4 * ndim :]


def write_split(idx_dir, prefix, out):
    (n, h, w), pixels = read_idx(os.path.join(idx_dir, prefix + "-images-idx3-ubyte"))
    (m,), labels = read_idx(os.path.join(idx_dir, prefix + "-labels-idx1-ubyte"))
    if m != n:
        sys.exit("folder_from_idx: %d images but %d labels under %s" % (n, m, prefix))
    for label in sorted(set(labels)):
        os.makedirs(os.path.join(out, str(label)), exist_ok=True)
    for i in range(n):
        img = Image.frombytes("L", (w, h), pixels[i * h * w : (i + 1) * h * w])
        img.save(os.path.join(out, str(labels[i]), "%05d.png" % i))
    return n


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    idx_dir, out = sys.argv[1], sys.argv[2]
    n = write_split(idx_dir, "train", os.path.join(out, "train"))
    v = write_split(idx_dir, "t10k", os.path.join(out, "val"))
    print("folder_from_idx: %d train and %d val PNGs under %s" % (n, v, out))


if __name__ == "__main__":
    main()
