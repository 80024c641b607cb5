#!/usr/bin/env bash
# The TF-Replicator paper's GAN claim at this machine's scale: the same SN-GAN
# trained for the same number of generator iterations at global batch 32, 64,
# 128 and 256 (the discriminator's real batch; the generator's is twice it),
# everything else the default run's. The replicas are the cores (2): each
# takes half of every batch, the generator's batch norm cross-replica, so no
# gradient accumulation is needed (the CPU's memory holds the largest batch).
# Each run ends scored by the judge on 10,000 class-balanced samples; the
# table goes to OUT/sweep.tsv and, with python3-matplotlib, a plot to
# OUT/sweep.png (scripts/plot_sngan_sweep.py).
#
# Usage: bench/sngan_batch_sweep.sh JUDGE_RUN OUT [ITERS] [BATCHES...]
#   e.g. bench/sngan_batch_sweep.sh runs/judge runs/sweep 750
set -euo pipefail
cd "$(dirname "$0")/.."
judge=${1:?usage: bench/sngan_batch_sweep.sh JUDGE_RUN OUT [ITERS] [BATCHES...]}
out=${2:?usage: bench/sngan_batch_sweep.sh JUDGE_RUN OUT [ITERS] [BATCHES...]}
iters=${3:-750}
shift $(( $# >= 3 ? 3 : $# ))
batches=("$@")
[ ${#batches[@]} -gt 0 ] || batches=(32 64 128 256)
mkdir -p "$out"
printf 'batch\tg_batch\titers\tseconds\tclass_acc\tfd\tfd_logits\tis\n' > "$out/sweep.tsv"
for b in "${batches[@]}"; do
    run="$out/b$b"
    start=$(date +%s)
    build/replicator train sngan --d-batch "$b" --g-batch $((2 * b)) --iters "$iters" --judge "$judge" \
        --eval-every "$iters" --sample-every "$iters" --out "$run" --force > "$out/b$b.log" 2>&1
    secs=$(( $(date +%s) - start ))
    last=$(grep '"class_acc"' "$run/metrics.jsonl" | tail -1)
    field() { sed -E "s/.*\"$1\":([-0-9.e]+).*/\1/" <<< "$last"; }
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$b" $((2 * b)) "$iters" "$secs" "$(field class_acc)" \
        "$(field fd)" "$(field fd_logits)" "$(field is)" >> "$out/sweep.tsv"
    echo "batch $b: $(tail -1 "$out/sweep.tsv")"
done
if /usr/bin/python3 -c 'import matplotlib' 2> /dev/null; then
    /usr/bin/python3 scripts/plot_sngan_sweep.py "$out/sweep.tsv" "$out/sweep.png"
else
    echo "no python3-matplotlib: no plot (apt-get install python3-matplotlib)"
fi
