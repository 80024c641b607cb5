#!/usr/bin/env bash
# Does the number of actors change how fast D4PG learns per env step? Runs
# cartpole-swingup for each seed x actor count x actor-update period on
# threads, each for the same env-step budget, and prints one row per run:
# the env steps of the first evaluation (5 noise-free episodes, every 10,000
# env steps) whose mean return reaches the threshold, the best and the final
# evaluation; then, per setting, how many seeds reached the threshold and
# the median env steps to it (runs that did not reach it count as the budget).
#
# Usage: bench/d4pg_seeds.sh OUT_DIR [threshold] [env_steps] [seeds] [actors] [updates]
#        defaults:                   600         100000      "1 2 3" "1 2 4" "1000"
# D4PG_ARGS="..." adds options to every run (e.g. --threads 1: a learner without an
# OpenMP team keeps its pace when other work shares the cores). Rows are appended to
# OUT_DIR/runs.txt, so a study can be run in parts; the summary covers every row there.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 OUT_DIR [threshold] [env_steps] [seeds] [actors] [updates]" >&2; exit 2; }
out=$1
threshold=${2:-600}
budget=${3:-100000}
seeds=${4:-1 2 3}
actors=${5:-1 2 4}
updates=${6:-1000}
mkdir -p "$out"

[ -s "$out/runs.txt" ] ||
    printf '%-7s %6s %8s %14s %8s %8s %6s\n' actors update seed "steps to $threshold" best final wall \
        > "$out/runs.txt"
for u in $updates; do
    for k in $actors; do
        for s in $seeds; do
            dir="$out/a$k-u$u-s$s"
            start=$SECONDS
            build/replicator train d4pg --task cartpole-swingup --actors "$k" --actor-update "$u" \
                --seed "$s" --env-steps "$budget" --out "$dir" --force --quiet ${D4PG_ARGS:-} \
                > "$dir.log" 2>&1 ||
                { echo "actors $k update $u seed $s: failed, see $dir.log"; continue; }
            /usr/bin/python3 - "$dir/metrics.jsonl" "$threshold" "$k" "$u" "$s" "$((SECONDS - start))" <<'PY'
import json, sys
path, thr, k, u, s, wall = sys.argv[1], float(sys.argv[2]), *sys.argv[3:]
evals = [json.loads(l) for l in open(path) if '"eval_return"' in l]
hit = next((e for e in evals if e["eval_return"] >= thr), None)
steps = str(int(hit["env_steps"])) if hit else "-"
best = max(e["eval_return"] for e in evals)
print(f'{k:<7} {u:>6} {s:>8} {steps:>14} {best:>8.1f} {evals[-1]["eval_return"]:>8.1f} {wall:>5}s',
      flush=True)
PY
        done
    done
done | tee -a "$out/runs.txt"

/usr/bin/python3 - "$out/runs.txt" "$budget" "$threshold" <<'PY'
import statistics, sys
rows, budget, thr = open(sys.argv[1]).read().split("\n"), int(sys.argv[2]), sys.argv[3]
by = {}
for r in rows:
    f = r.split()
    if len(f) < 7 or not f[0].isdigit():
        continue
    by.setdefault((int(f[0]), int(f[1])), []).append((f[3], float(f[4]), float(f[5])))
print(f"\nactors update  reached {thr}  median steps to it  median best  median final")
for (k, u), runs in sorted(by.items(), key=lambda x: (x[0][1], x[0][0])):
    steps = [budget if s == "-" else int(s) for s, _, _ in runs]
    reached = sum(s != "-" for s, _, _ in runs)
    print(f"{k:<6} {u:>6} {reached:>6}/{len(runs):<5} {statistics.median(steps):>18.0f}"
          f" {statistics.median(b for _, b, _ in runs):>12.1f} {statistics.median(f for _, _, f in runs):>12.1f}")
PY
