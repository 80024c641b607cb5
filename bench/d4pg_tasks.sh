#!/usr/bin/env bash
# D4PG on the Control Suite tasks, one run each with its recipe, and a table
# of what each reached: the last and the best evaluation return (5 noise-free
# episodes), the env steps and the wall time. The recipes are Acme's defaults
# with a task's budget; docs/d4pg.md records what they reached here.
#
# Usage: bench/d4pg_tasks.sh OUT_DIR [task ...]
#        (default tasks: point_mass-easy reacher-easy cheetah-run walker-walk pendulum-swingup)
# Each run's directory is OUT_DIR/<task>, its log OUT_DIR/<task>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 OUT_DIR [task ...]" >&2; exit 2; }
out=$1
shift
tasks=("$@")
[ ${#tasks[@]} -gt 0 ] || tasks=(point_mass-easy reacher-easy cheetah-run walker-walk pendulum-swingup)
mkdir -p "$out"

recipe() { # the options of a task's run
    case "$1" in
        cartpole-swingup | cartpole-balance) echo "--env-steps 300000" ;;
        point_mass-easy) echo "--env-steps 300000" ;;
        *) echo "--env-steps 400000" ;;
    esac
}

printf '%-18s %10s %9s %9s %9s  %s\n' task env_steps last best wall command
for t in "${tasks[@]}"; do
    # shellcheck disable=SC2207
    opts=($(recipe "$t"))
    cmd=(build/replicator train d4pg --task "$t" "${opts[@]}" --out "$out/$t" --force)
    start=$SECONDS
    "${cmd[@]}" > "$out/$t.log" 2>&1 || { echo "$t: failed, see $out/$t.log"; continue; }
    wall=$((SECONDS - start))
    read -r steps last best < <(/usr/bin/python3 - "$out/$t/metrics.jsonl" <<'PY'
import json, sys
evals = [json.loads(l) for l in open(sys.argv[1]) if '"eval_return"' in l]
print(int(evals[-1]["env_steps"]), round(evals[-1]["eval_return"], 1), round(max(e["eval_return"] for e in evals), 1))
PY
)
    printf '%-18s %10s %9s %9s %8ss  %s\n' "$t" "$steps" "$last" "$best" "$wall" "${cmd[*]}"
done
