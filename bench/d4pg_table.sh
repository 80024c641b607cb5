#!/usr/bin/env bash
# D4PG's table at matched step counts: each task with several seeds, the same
# budget of env steps, evaluated on fresh starts, so the mean and the spread can
# be set beside state-based published figures at the same steps (SAC's 3-seed
# means from TD-MPC2's CSVs; docs/d4pg.md).
#
# Each run is Acme's defaults (`train d4pg --task T --seed S`) with
# --env-steps BUDGET, evaluated every 20,000 env steps on 10 noise-free episodes
# whose starts are new at every evaluation; when it ends, its saved policy (the
# target policy the actors ran) plays 20 more episodes from starts no
# evaluation saw (`replicator eval DIR --episodes 20 --seed 1000+S`).
#
# Usage: bench/d4pg_table.sh OUT_DIR [budget] [seeds] [task ...]
#        defaults:                   200000   "1 2 3" the six tasks of docs/d4pg.md
# REPLICATOR=PATH runs another build of the tool (a copy, so that rebuilding the
# tree during a long study does not change the program under it). Rows are
# appended to OUT_DIR/runs.txt, so a study can run in parts; the summary covers
# every row there.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 OUT_DIR [budget] [seeds] [task ...]" >&2; exit 2; }
out=$1
budget=${2:-200000}
seeds=${3:-1 2 3}
shift $(($# >= 3 ? 3 : $#))
tasks=("$@")
[ ${#tasks[@]} -gt 0 ] ||
    tasks=(cartpole-swingup point_mass-easy reacher-easy cheetah-run walker-walk pendulum-swingup)
bin=${REPLICATOR:-build/replicator}
mkdir -p "$out"

[ -s "$out/runs.txt" ] ||
    printf '%-18s %4s %9s %9s %9s %16s %6s\n' task seed at_100k at_200k last "fresh (20 eps)" wall \
        > "$out/runs.txt"
for t in "${tasks[@]}"; do
    for s in $seeds; do
        dir="$out/$t-s$s"
        start=$SECONDS
        "$bin" train d4pg --task "$t" --seed "$s" --env-steps "$budget" --eval-every 20000 \
            --eval-episodes 10 --out "$dir" --force --quiet > "$dir.log" 2>&1 ||
            { echo "$t seed $s: failed, see $dir.log" >&2; continue; }
        wall=$((SECONDS - start))
        "$bin" eval "$dir" --episodes 20 --seed $((1000 + s)) > "$dir.eval.txt" 2>&1 ||
            { echo "$t seed $s: eval failed, see $dir.eval.txt" >&2; continue; }
        /usr/bin/python3 - "$dir/metrics.jsonl" "$dir.eval.txt" "$t" "$s" "$wall" <<'PY'
import json, re, sys
path, evalf, t, s, wall = sys.argv[1:]
evals = [json.loads(l) for l in open(path) if '"eval_return"' in l]
def at(n):  # the first evaluation at or past n env steps
    e = next((e for e in evals if e["env_steps"] >= n), None)
    return f'{e["eval_return"]:.1f}' if e else "-"
m = re.search(r"return ([-0-9.]+) \+- ([0-9.]+) over", open(evalf).read())
fresh = f"{float(m.group(1)):.1f} +- {float(m.group(2)):.1f}" if m else "?"
print(f'{t:<18} {s:>4} {at(100000):>9} {at(200000):>9} {evals[-1]["eval_return"]:>9.1f}'
      f' {fresh:>16} {wall:>5}s', flush=True)
PY
    done
done | tee -a "$out/runs.txt"

/usr/bin/python3 - "$out/runs.txt" <<'PY'
import statistics, sys
by = {}
for r in open(sys.argv[1]).read().split("\n")[1:]:
    f = r.split()
    if len(f) < 8:
        continue
    by.setdefault(f[0], []).append(f)
def ms(xs):
    xs = [float(x) for x in xs if x not in ("-", "?")]
    if not xs:
        return "-"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.0f} +- {sd:.0f} ({min(xs):.0f}-{max(xs):.0f})"
print(f"\n{'task':<18} {'seeds':>5}  {'at 100k':>22}  {'at 200k':>22}  {'fresh starts, end':>22}")
for t, rows in by.items():
    print(f"{t:<18} {len(rows):>5}  {ms(r[2] for r in rows):>22}  {ms(r[3] for r in rows):>22}"
          f"  {ms(r[5] for r in rows):>22}")
PY
