#!/usr/bin/env bash
# D4PG's scaling claim at this machine's size: wall time to a fixed return on
# cartpole-swingup with 1, 2 and 4 actors, on threads and on MPI ranks (one
# rank per worker: learner, actors, replay). The time is the wall time of the
# first evaluation (5 noise-free episodes, every 10,000 env steps) whose mean
# return reaches the threshold; "-" if none did within the budget.
#
# Usage: bench/d4pg_scaling.sh OUT_DIR [threshold] [env_steps] [layouts]
#        defaults:                     700         200000      "threads mpi"
# ACTORS="1 2 4" (the default) chooses the actor counts.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 OUT_DIR [threshold] [env_steps] [layouts]" >&2; exit 2; }
out=$1
threshold=${2:-700}
budget=${3:-200000}
layouts=${4:-threads mpi}
mkdir -p "$out"
mpi=(mpirun --oversubscribe -x OMP_WAIT_POLICY=passive)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)

printf '%-8s %6s %12s %12s %10s %9s\n' layout actors "to $threshold" env_steps final wall
for layout in $layouts; do
    for k in ${ACTORS:-1 2 4}; do
        dir="$out/$layout-$k"
        cmd=(build/replicator train d4pg --task cartpole-swingup --actors "$k" --env-steps "$budget"
             --out "$dir" --force --quiet)
        [ "$layout" = mpi ] && cmd=("${mpi[@]}" -np $((k + 2)) "${cmd[@]}")
        start=$SECONDS
        "${cmd[@]}" > "$dir.log" 2>&1 || { echo "$layout $k: failed, see $dir.log"; continue; }
        wall=$((SECONDS - start))
        /usr/bin/python3 - "$dir/metrics.jsonl" "$threshold" "$layout" "$k" "$wall" <<'PY'
import json, sys
path, thr, layout, k, wall = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
evals = [json.loads(l) for l in open(path) if '"eval_return"' in l]
hit = next((e for e in evals if e["eval_return"] >= thr), None)
to = f'{hit["wall_s"]:.0f}s' if hit else "-"
steps = str(int(hit["env_steps"])) if hit else "-"
print(f'{layout:<8} {k:>6} {to:>12} {steps:>12} {evals[-1]["eval_return"]:>10.1f} {wall:>8}s')
PY
    done
done
