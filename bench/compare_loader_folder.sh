#!/usr/bin/env bash
# Image-folder loader throughput, side by side: replicator's loader (build/bench_loader
# --folder: TurboJPEG decode with DCT scaling, RandomResizedCrop + flip + normalise on the
# dataset's decoding threads) against torchvision 0.14's ImageFolder and the same transforms
# through a DataLoader (bench/folder_torch.py), on one JPEG folder, in images/s per core: per
# decoding thread or worker process, and per CPU-second that all of a side's processes use.
#
# The folder is generated once per run in a temporary directory (removed at exit; KEEP=1 keeps
# it and says where): IMAGES ImageNet-like JPEGs, mostly 500x375, quality 90, in 8 classes.
# Each side runs at 1 and 2 decoding threads / DataLoader workers (WORKERS), one warm-up epoch
# then SECONDS of batches; the two alternate within each of ROUNDS rounds, the first to go
# alternating too, so the shared machine's noise hits both alike. torchvision's figure is its
# best worker count's (by images/s per core); ours is likewise our best thread count's.
#
# Usage: bench/compare_loader_folder.sh [images] [seconds] [rounds]
#        defaults:                        512      5         2
#        (build first: scripts/setup.sh; needs Debian's python3-torchvision)
# WORKERS="1,2" the counts swept on both sides; BATCH=64; SIZE=224.
set -euo pipefail
cd "$(dirname "$0")/.."
images=${1:-512}
seconds=${2:-5}
rounds=${3:-2}
workers=${WORKERS:-1,2}
batch=${BATCH:-64}
size=${SIZE:-224}
py=/usr/bin/python3 # Debian's torch and torchvision, not a virtual environment's

bench=build/bench_loader
[ -x "$bench" ] || { echo "compare_loader_folder: $bench is missing: run scripts/setup.sh" >&2; exit 2; }
if ! "$py" -c 'import torchvision' 2>/dev/null; then
  echo "compare_loader_folder: torchvision cannot be imported by $py: apt-get install python3-torchvision" >&2
  exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rp_loader_folder.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then
  echo "compare_loader_folder: the folder stays in $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
"$py" bench/folder_torch.py --make "$tmp/data" --images "$images" --quality 90

echo "host: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "ours:   $bench --folder $tmp/data --threads T --batch $batch --size $size --seconds $seconds"
echo "theirs: $py bench/folder_torch.py --data $tmp/data --workers $workers --batch $batch --size $size --seconds $seconds"

IFS=, read -r -a counts <<<"$workers"
ours_json=$tmp/ours.json theirs_json=$tmp/theirs.json
: >"$ours_json"
: >"$theirs_json"
run_ours() {
  for t in "${counts[@]}"; do
    "$bench" --folder "$tmp/data" --threads "$t" --batch "$batch" --size "$size" \
      --seconds "$seconds" --json | tee -a "$ours_json"
  done
}
run_theirs() {
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$py" bench/folder_torch.py --data "$tmp/data" \
    --workers "$workers" --batch "$batch" --size "$size" --seconds "$seconds" --json |
    tee -a "$theirs_json"
}
for ((r = 1; r <= rounds; r++)); do
  echo "== round $r"
  if ((r % 2)); then run_ours; run_theirs; else run_theirs; run_ours; fi
done

# The best of each side (per core, over rounds and counts), then the ratio.
"$py" - "$ours_json" "$theirs_json" <<'EOF'
import json, sys
def rows(path):
    return [json.loads(l) for l in open(path) if l.strip()]
ours, theirs = rows(sys.argv[1]), rows(sys.argv[2])
def best(rs, key):
    by = {}
    for r in rs:
        by.setdefault(r[key], []).append(r["images_per_s_per_core"])
    # The median over rounds of each count, then the best count.
    med = {k: sorted(v)[len(v) // 2] for k, v in by.items()}
    k = max(med, key=med.get)
    return k, med[k], med
ko, o, mo = best(ours, "threads")
kt, t, mt = best(theirs, "workers")
print()
print("%-12s %-26s %s" % ("", "images/s per core (median)", "by count"))
print("%-12s %8.1f  at %d threads       %s" % ("replicator", o, ko,
      "  ".join("%d: %.1f" % (k, v) for k, v in sorted(mo.items()))))
print("%-12s %8.1f  at %d workers       %s" % ("torchvision", t, kt,
      "  ".join("%d: %.1f" % (k, v) for k, v in sorted(mt.items()))))
print("ratio (replicator / torchvision, per core): %.2f" % (o / t))
EOF

# Per core counted as CPU time: each side at one thread / one worker for SECONDS and 2 x SECONDS,
# its processes' user + system CPU (torchvision's main process and its worker alike), and the
# images per CPU-second of the difference (start-up and the warm-up epoch cancel out).
echo
echo "== images per CPU-second (one thread / one worker; the difference of two durations)"
"$py" - "$tmp/data" "$bench" "$batch" "$size" "$seconds" "$py" <<'EOF'
import json, os, resource, subprocess, sys
data, bench, batch, size, seconds, py = sys.argv[1:7]
seconds = float(seconds)
env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
def run(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    row = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    return row["images"], cpu
sides = {
    "replicator": lambda s: [bench, "--folder", data, "--threads", "1", "--batch", batch,
                             "--size", size, "--seconds", str(s), "--json"],
    "torchvision": lambda s: [py, "bench/folder_torch.py", "--data", data, "--workers", "1",
                              "--batch", batch, "--size", size, "--seconds", str(s), "--json"],
}
rate = {}
for name, cmd in sides.items():
    i1, c1 = run(cmd(seconds))
    i2, c2 = run(cmd(2 * seconds))
    rate[name] = (i2 - i1) / (c2 - c1)
    print("%-12s %8.1f images per CPU-second (%d images in %.2f s of CPU, less %d in %.2f s)"
          % (name, rate[name], i2, c2, i1, c1))
print("ratio (replicator / torchvision, per CPU-second): %.2f"
      % (rate["replicator"] / rate["torchvision"]))
EOF
