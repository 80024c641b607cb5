#!/bin/sh
# Run the PyTorch peer benchmark under Debian's python3-torch, at its best:
#
#   OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=<threads> /usr/bin/python3 bench/resnet_torch.py "$@"
#
# <threads> is taken from --threads N / --threads=N in the arguments (default 2,
# all cores here).  OPENBLAS_NUM_THREADS=1 because Debian's torch links
# OpenBLAS, whose own thread pool fights torch's OpenMP pool.  Uses
# /usr/bin/python3 (Debian's), not a pyenv python3 on PATH.  Installs
# python3-torch with apt-get (via sudo when not root) if it cannot be imported.
#
# Examples:
#   bench/torch_env.sh --model resnet20 --threads 2 --format both
#   bench/torch_env.sh --model resnet50 --batch 32 --iters 3 --json
#   SCRIPT=bench/resnet_torch_ddp.py bench/torch_env.sh --json   # other script
set -eu

here=$(cd "$(dirname "$0")" && pwd)
script=${SCRIPT:-$here/resnet_torch.py}

threads=2
prev=
for arg in "$@"; do
    case "$arg" in
        --threads=*) threads=${arg#--threads=} ;;
    esac
    if [ "$prev" = "--threads" ]; then threads=$arg; fi
    prev=$arg
done

if ! /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
    echo "torch_env.sh: python3-torch missing; installing with apt-get" >&2
    if [ "$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi
    $sudo apt-get install -y python3-torch
fi

OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=$threads exec /usr/bin/python3 "$script" "$@"
